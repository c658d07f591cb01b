// Helpers shared by the tests: where the goldens are, and reading JSON files.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/random_checkpoint.h"
#include "rkv/tokenizer.h"

namespace rkv::test {

// ../shared beside the repository (or $RKV_SHARED_DIR). Empty when absent.
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("RKV_SHARED_DIR"); env != nullptr && *env != '\0')
    return std::filesystem::exists(env) ? std::filesystem::path(env) : std::filesystem::path();
  std::filesystem::path p = RKV_DEFAULT_SHARED_DIR;
  if (std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p);
  return {};
}

// A whole file's bytes.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    path_ = std::filesystem::temp_directory_path() /
            ("rkv-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to a file of the directory and returns its path.
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// A random-weight checkpoint that rkv writes itself (the tiny Qwen2 shape, f32, with a synthetic
// byte-level tokenizer), made once per test process and removed at exit: the model of the tests
// that check mechanics and invariants rather than numbers against a reference, so that they run
// without ../shared.
inline const std::filesystem::path& self_made_model() {
  struct Made {
    std::filesystem::path dir;
    Made() {
      dir =
          std::filesystem::temp_directory_path() / ("rkv-self-made-" + std::to_string(::getpid()));
      rkv::RandomCheckpointOptions o;
      o.shape = "tiny";
      o.dtype = rkv::DType::F32;
      o.seed = 7;
      rkv::write_random_checkpoint(dir, o);
    }
    ~Made() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Made made;
  return made.dir;
}

// A random-weight checkpoint with DeepSeek-R1's chat template (the `tiny-r1` shape, f32, seed
// 3) written into `dir`: its prompts open <think>, and its random weights rarely write </think>.
inline void write_r1_checkpoint(const std::filesystem::path& dir) {
  rkv::RandomCheckpointOptions o;
  o.shape = "tiny-r1";
  o.dtype = rkv::DType::F32;
  o.seed = 3;
  rkv::write_random_checkpoint(dir, o);
}

// write_r1_checkpoint's checkpoint in a directory of its own, loaded: a model whose chat prompts
// open <think> (DeepSeek-R1's template), with its tokenizer.
struct R1Checkpoint {
  explicit R1Checkpoint(const std::string& tag)
      : dir(tag), model(written(dir)), tokenizer(Tokenizer::load(dir.path())) {}
  TempDir dir;
  std::unique_ptr<Model> model;
  Tokenizer tokenizer;

 private:
  static std::unique_ptr<Model> written(const TempDir& d) {
    write_r1_checkpoint(d.path());
    return Model::load(d.path());
  }
};

// The repository: where it was built, or $RKV_SOURCE_DIR (the GPU tests run from a copy of the
// working tree on another machine: scripts/gpu-check.sh).
inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("RKV_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  return RKV_SOURCE_DIR;
}

// The model the repository ships (models/rkv-tiny-reasoner) and the first `n` problems of its
// held-out set (data/chains_test.jsonl: the bare program, which is its whole prompt).
inline std::filesystem::path shipped_model_dir() {
  return source_dir() / "models/rkv-tiny-reasoner";
}
inline std::vector<std::string> held_out_problems(std::size_t n) {
  std::ifstream in(source_dir() / "data/chains_test.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (out.size() < n && std::getline(in, line))
    out.push_back(nlohmann::json::parse(line).at("problem").get<std::string>());
  return out;
}

// The float64 attention probabilities of one query q[D] over n keys k[n][D]:
// softmax(scale * q . k_j), the independent reference of the attention kernel tests.
inline std::vector<double> softmax_f64(const float* q, const float* k, std::size_t n, std::size_t D,
                                       float scale) {
  std::vector<double> p(n);
  double mx = -1e300, sum = 0.0;
  for (std::size_t j = 0; j < n; ++j) {
    double dot = 0.0;
    for (std::size_t x = 0; x < D; ++x)
      dot += static_cast<double>(q[x]) * static_cast<double>(k[j * D + x]);
    p[j] = dot * static_cast<double>(scale);
    mx = std::max(mx, p[j]);
  }
  for (double& x : p) sum += (x = std::exp(x - mx));
  for (double& x : p) x /= sum;
  return p;
}

// One query's attention (G heads of d, N = probs.size() / G entries, keys k and values v as
// float32 [N][d]) by a kernel (probs [G][N], out [G][d]) against the formula in double precision
// (softmax_f64) and, when given, another kernel's (probs_other, out_other): probabilities within
// 1e-5 of themselves plus 1e-7, outputs within 1e-5 of the sum of |p v| plus 1e-7. Call
// HasFatalFailure() after it.
inline void expect_attention_near(const std::vector<float>& q, int G, int d,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  float scale, const std::vector<float>& probs,
                                  const std::vector<float>& out,
                                  const std::vector<float>* probs_other = nullptr,
                                  const std::vector<float>* out_other = nullptr) {
  const auto D = static_cast<std::size_t>(d);
  const std::size_t N = probs.size() / static_cast<std::size_t>(G);
  for (int g = 0; g < G; ++g) {
    const auto Gi = static_cast<std::size_t>(g);
    const std::vector<double> p = softmax_f64(&q[Gi * D], k.data(), N, D, scale);
    for (std::size_t j = 0; j < N; ++j) {
      ASSERT_NEAR(probs[Gi * N + j], p[j], 1e-5 * p[j] + 1e-7) << "g=" << g << " j=" << j;
      if (probs_other != nullptr) {
        ASSERT_NEAR(probs[Gi * N + j], (*probs_other)[Gi * N + j], 1e-5 * p[j] + 1e-7);
      }
    }
    for (std::size_t x = 0; x < D; ++x) {
      double want = 0.0, mag = 0.0;
      for (std::size_t j = 0; j < N; ++j) {
        want += p[j] * static_cast<double>(v[j * D + x]);
        mag += p[j] * std::fabs(static_cast<double>(v[j * D + x]));
      }
      ASSERT_NEAR(out[Gi * D + x], want, 1e-5 * mag + 1e-7) << "g=" << g << " x=" << x;
      if (out_other != nullptr) {
        ASSERT_NEAR(out[Gi * D + x], (*out_other)[Gi * D + x], 1e-5 * mag + 1e-7);
      }
    }
  }
}

// The path to the rkv program built alongside the tests.
// Runs a shell command; returns its exit status (-1 if it did not exit normally) and its stdout
// in `out`.
inline int run_command(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string rkv_binary() {
  return RKV_BINARY_PATH;
}

}  // namespace rkv::test

// Skips the current test, with a message that says why, when ../shared is missing.
#define RKV_REQUIRE_SHARED(dir_var)                                                   \
  const std::filesystem::path dir_var = ::rkv::test::shared_dir();                    \
  if (dir_var.empty()) {                                                              \
    GTEST_SKIP() << "../shared (the golden files) is not beside the repository; set " \
                    "RKV_SHARED_DIR to run this test";                                \
  }
