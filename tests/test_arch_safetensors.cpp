// Qwen3 MoE, gpt-oss and Qwen3.5 (dense and MoE) from Hugging Face safetensors checkpoints.
// tests/tools/gguf_to_hf.py, an oracle written independently of rkv's loader, writes the checkpoint
// that llama.cpp's converter turns into each golden GGUF file (../shared/golden/arch); rkv must
// give the same logits for the two (the transforms at load are exact but for Qwen3.5's norm + 1
// and -exp(A_log), within a float32 rounding), and llama.cpp's greedy ids. Every layout is
// covered: per-expert and fused experts, gpt-oss's float and MXFP4 experts, Qwen3.5's published
// image-text checkpoints (text model under model.language_model.) and its text-only classes.
// The goldens have as many k heads as v heads per k head (2 and 2), where the v-head reordering
// is its own inverse; synthetic Qwen3.5 files with 2 k heads and 6 v heads check its direction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/quant.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A python3 with numpy, gguf_to_hf.py's one dependency: $RKV_PYTHON, python3 or /usr/bin/python3
// (Debian's python3-numpy, scripts/setup.sh); empty when none has numpy.
const std::string& python_with_numpy() {
  static const std::string found = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("RKV_PYTHON"); env != nullptr && *env != '\0')
      candidates.emplace_back(env);
    candidates.emplace_back("python3");
    candidates.emplace_back("/usr/bin/python3");
    for (const std::string& py : candidates)
      if (std::system(("'" + py + "' -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return py;
    return std::string();
  }();
  return found;
}

#define REQUIRE_PYTHON_NUMPY(py)                                                             \
  const std::string py = python_with_numpy();                                                \
  if (py.empty()) {                                                                          \
    GTEST_SKIP() << "no python3 with numpy, which tests/tools/gguf_to_hf.py needs (Debian: " \
                    "apt-get install python3-numpy; or set RKV_PYTHON)";                     \
  }

fs::path tools_dir() {
  return test::source_dir() / "tests/tools";
}

// Runs a command, its output to `log`; a failure shows the command and the output.
void run_logged(const std::string& cmd, const fs::path& log) {
  const int rc = std::system((cmd + " > '" + log.string() + "' 2>&1").c_str());
  ASSERT_EQ(rc, 0) << cmd << "\n" << test::read_text(log);
}

// gguf_to_hf.py IN.gguf OUT_DIR OPTIONS
void convert(const std::string& py, const fs::path& gguf, const fs::path& out,
             const std::string& options) {
  run_logged("'" + py + "' '" + (tools_dir() / "gguf_to_hf.py").string() + "' '" + gguf.string() +
                 "' '" + out.string() + "' " + options,
             out.string() + ".log");
}

struct Trace {
  std::vector<int> greedy;                 // each step's argmax
  std::vector<std::vector<float>> logits;  // each step's
};

// The prompt in one pass (step 0: its last row's logits), then `steps` - 1 tokens one at a time:
// `forced[s]` at step s + 1 when given (llama.cpp's greedy ids, so that two models read the same
// tokens), else the argmax.
Trace run_greedy(const Model& model, const std::vector<int>& prompt, int steps,
                 const std::vector<int>& forced = {}) {
  const int V = model.config().vocab_size;
  KvCache cache(model.cache_shape(64, 0, KvDtype::f32));
  ThreadPool pool(2);
  ForwardScratch scratch;
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({&cache, prompt[i], static_cast<int>(i), i + 1 == prompt.size()});
  Trace run;
  std::vector<float> logits(static_cast<std::size_t>(V));
  model.forward(rows, scratch, pool, logits.data());
  int pos = static_cast<int>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    run.logits.push_back(logits);
    run.greedy.push_back(
        static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (s + 1 == steps) break;
    const int next = forced.empty() ? run.greedy.back() : forced[static_cast<std::size_t>(s)];
    ForwardRow row{&cache, next, pos++, true};
    model.forward({&row, 1}, scratch, pool, logits.data());
  }
  return run;
}

// The largest |a - b| over the first `steps` steps (all when 0).
double max_logit_diff(const Trace& a, const Trace& b, std::size_t steps = 0) {
  double d = 0.0;
  for (std::size_t s = 0; s < (steps == 0 ? a.logits.size() : steps); ++s)
    for (std::size_t v = 0; v < a.logits[s].size(); ++v)
      d = std::max(d, std::abs(static_cast<double>(a.logits[s][v]) - b.logits[s][v]));
  return d;
}

// Row r of a matrix as floats (dequantized when quantized).
void row_values(const kernels::WeightView& w, std::size_t r, std::vector<float>& out) {
  out.resize(w.cols);
  const auto* row = static_cast<const std::byte*>(w.data) + r * dtype_row_bytes(w.dtype, w.cols);
  if (dtype_is_quantized(w.dtype)) {
    quant::dequantize_row(w.dtype, row, w.cols, out.data());
  } else {
    for (std::size_t i = 0; i < w.cols; ++i) out[i] = load_as_f32(row, w.dtype, i);
  }
}

// Two loads' matrix: the same bytes, or the same values when one is MXFP4 and the other float.
void expect_same_matrix(const kernels::WeightView& a, const kernels::WeightView& b,
                        const std::string& what) {
  EXPECT_EQ(a.data == nullptr, b.data == nullptr) << what;
  if (a.data == nullptr || b.data == nullptr) return;
  ASSERT_EQ(a.rows, b.rows) << what;
  ASSERT_EQ(a.cols, b.cols) << what;
  if (a.dtype == b.dtype) {
    EXPECT_EQ(std::memcmp(a.data, b.data, a.rows * dtype_row_bytes(a.dtype, a.cols)), 0) << what;
    return;
  }
  std::vector<float> ra, rb;
  for (std::size_t r = 0; r < a.rows; ++r) {
    row_values(a, r, ra);
    row_values(b, r, rb);
    if (ra != rb) {
      ADD_FAILURE() << what << ": row " << r << " differs";
      return;
    }
  }
}

// Two loads' vector: bit for bit, or within `rel` of the value's magnitude (at least 1) for
// the float32 roundings; counts the elements that are not bit for bit in `rounded`.
void expect_same_floats(const std::vector<float>& a, const std::vector<float>& b,
                        const std::string& what, double rel, std::size_t& rounded) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    ++rounded;
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    EXPECT_LE(d, rel * std::max(1.0, std::abs(static_cast<double>(a[i]))))
        << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
}

// Every weight of two loads of one model (GGUF and safetensors) is the same: matrices exactly;
// vectors exactly but for Qwen3.5's norms (+1 in float32: within 2^-23 relative) and
// a = -exp(A_log) (2^-21), which gguf_to_hf.py's inverse can only give to a float32 rounding.
// Returns how many vector elements differ by such a rounding.
std::size_t expect_same_weights(const Model& a, const Model& b) {
  const ModelConfig& c = a.config();
  const bool qwen35 = c.arch == Architecture::Qwen35 || c.arch == Architecture::Qwen35Moe;
  const double norm_tol = qwen35 ? std::ldexp(1.0, -23) : 0.0, a_tol = std::ldexp(1.0, -21);
  std::size_t rounded = 0;
  expect_same_matrix(a.embed_tokens(), b.embed_tokens(), "embed_tokens");
  expect_same_matrix(a.lm_head(), b.lm_head(), "lm_head");
  expect_same_floats(a.final_norm(), b.final_norm(), "final_norm", norm_tol, rounded);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& x = a.layer(l);
    const LayerWeights& y = b.layer(l);
    const std::string p = "layer " + std::to_string(l) + " ";
    const std::pair<const char*, kernels::WeightView LayerWeights::*> mats[] = {
        {"q", &LayerWeights::q},       {"k", &LayerWeights::k},          {"v", &LayerWeights::v},
        {"o", &LayerWeights::o},       {"gate", &LayerWeights::gate},    {"up", &LayerWeights::up},
        {"down", &LayerWeights::down}, {"q_gate", &LayerWeights::q_gate}};
    for (const auto& [name, m] : mats) expect_same_matrix(x.*m, y.*m, p + name);
    const std::pair<const char*, kernels::WeightView ExpertWeights::*> experts[] = {
        {"router", &ExpertWeights::router},           {"experts gate", &ExpertWeights::gate},
        {"experts up", &ExpertWeights::up},           {"experts down", &ExpertWeights::down},
        {"shared gate", &ExpertWeights::shared_gate}, {"shared up", &ExpertWeights::shared_up},
        {"shared down", &ExpertWeights::shared_down}};
    for (const auto& [name, m] : experts) expect_same_matrix(x.moe.*m, y.moe.*m, p + name);
    const std::pair<const char*, kernels::WeightView DeltaNetWeights::*> dn[] = {
        {"qkv", &DeltaNetWeights::qkv},
        {"z", &DeltaNetWeights::z},
        {"beta", &DeltaNetWeights::beta},
        {"alpha", &DeltaNetWeights::alpha},
        {"out", &DeltaNetWeights::out}};
    for (const auto& [name, m] : dn) expect_same_matrix(x.delta_net.*m, y.delta_net.*m, p + name);
    const std::pair<const char*, std::vector<float> LayerWeights::*> exact[] = {
        {"q_bias", &LayerWeights::q_bias},
        {"k_bias", &LayerWeights::k_bias},
        {"v_bias", &LayerWeights::v_bias},
        {"o_bias", &LayerWeights::o_bias},
        {"sinks", &LayerWeights::sinks}};
    for (const auto& [name, v] : exact) expect_same_floats(x.*v, y.*v, p + name, 0.0, rounded);
    const std::pair<const char*, std::vector<float> LayerWeights::*> norms[] = {
        {"input_norm", &LayerWeights::input_norm},
        {"post_norm", &LayerWeights::post_norm},
        {"q_norm", &LayerWeights::q_norm},
        {"k_norm", &LayerWeights::k_norm}};
    for (const auto& [name, v] : norms) expect_same_floats(x.*v, y.*v, p + name, norm_tol, rounded);
    const std::pair<const char*, std::vector<float> ExpertWeights::*> expert_vectors[] = {
        {"router_bias", &ExpertWeights::router_bias},
        {"gate_bias", &ExpertWeights::gate_bias},
        {"up_bias", &ExpertWeights::up_bias},
        {"down_bias", &ExpertWeights::down_bias},
        {"shared_router", &ExpertWeights::shared_router}};
    for (const auto& [name, v] : expert_vectors)
      expect_same_floats(x.moe.*v, y.moe.*v, p + name, 0.0, rounded);
    expect_same_floats(x.delta_net.conv, y.delta_net.conv, p + "conv", 0.0, rounded);
    expect_same_floats(x.delta_net.dt_bias, y.delta_net.dt_bias, p + "dt_bias", 0.0, rounded);
    expect_same_floats(x.delta_net.norm, y.delta_net.norm, p + "ssm norm", 0.0, rounded);
    expect_same_floats(x.delta_net.a, y.delta_net.a, p + "a", a_tol, rounded);
  }
  return rounded;
}

std::string load_error(const fs::path& dir) {
  try {
    Model::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ------------------------------------------------------------------------------------------------
// A safetensors file as raw tensors (any dtype), to take tensors out, change them and write it
// back.
struct RawTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};
using RawTensors = std::map<std::string, RawTensor>;

RawTensors read_raw(const fs::path& file) {
  const std::string blob = test::read_text(file);
  std::uint64_t n = 0;
  std::memcpy(&n, blob.data(), 8);
  const json header = json::parse(blob.substr(8, n));
  RawTensors out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto b = (*it)["data_offsets"][0].get<std::size_t>();
    const auto e = (*it)["data_offsets"][1].get<std::size_t>();
    out[it.key()] = {(*it)["dtype"].get<std::string>(),
                     (*it)["shape"].get<std::vector<std::int64_t>>(),
                     blob.substr(8 + n + b, e - b)};
  }
  return out;
}

void write_raw(const fs::path& file, const RawTensors& tensors) {
  json header = json::object();
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::ofstream out(file, std::ios::binary);
  const std::uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h;
  for (const auto& [name, t] : tensors) out << t.bytes;
}

// A copy of checkpoint `from` (config.json + model.safetensors) in `to`, its tensors changed by
// `edit`.
template <typename Edit>
void edited_copy(const fs::path& from, const fs::path& to, const Edit& edit) {
  fs::create_directories(to);
  fs::copy_file(from / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
  RawTensors t = read_raw(from / "model.safetensors");
  edit(t);
  write_raw(to / "model.safetensors", t);
}

// ------------------------------------------------------------------------------------------------
// The goldens: GGUF and every safetensors layout give the same logits.

struct Case {
  const char* name;
  const char* folder;
  const char* gguf;
  const char* golden;
  const char* options;  // gguf_to_hf.py's
  // Largest |logit(safetensors) - logit(GGUF)| allowed: the loads agree to float32 rounding of
  // the Qwen3.5 norms (+1) and a = -exp(A_log) at most. gpt-oss's MXFP4 experts dequantized to
  // float (--experts-f32) are the same values (expect_same_weights), but multiplied with float
  // activations where the GGUF's MXFP4 ones meet activations quantized to 8 bits, as llama.cpp
  // does: a larger difference (0.058 measured), and one of 32 argmax ids differs.
  double tolerance;
  int min_equal_ids = 32;  // of llama.cpp's 32 greedy ids, the argmax at each step
};

// The logits compared: the prompt's and 3 decode steps' (those the goldens hold).
constexpr std::size_t kComparedSteps = 4;

const Case kCases[] = {
    {"Qwen3MoePerExpert", "qwen3moe", "qwen3moe-tiny-s101-f32.gguf", "golden.json", "", 1e-5},
    {"Qwen3MoeFused", "qwen3moe", "qwen3moe-tiny-s101-f32.gguf", "golden.json",
     "--experts-layout fused", 1e-5},
    {"GptOssF32", "gpt-oss", "gpt-oss-tiny-s202-f32.gguf", "golden.json", "", 1e-5},
    {"GptOssMxfp4", "gpt-oss", "gpt-oss-tiny-s202-mxfp4.gguf", "golden_mxfp4.json", "", 1e-5},
    {"GptOssMxfp4AsFloat", "gpt-oss", "gpt-oss-tiny-s202-mxfp4.gguf", "golden_mxfp4.json",
     "--experts-f32", 0.1, 30},
    {"Qwen35ImageText", "qwen35", "qwen35-tiny-s303-f32.gguf", "golden.json", "", 1e-5},
    {"Qwen35TextOnly", "qwen35", "qwen35-tiny-s303-f32.gguf", "golden.json", "--text-only", 1e-5},
    {"Qwen35MoeImageTextFused", "qwen35moe", "qwen35moe-tiny-s404-f32.gguf", "golden.json", "",
     1e-5},
    {"Qwen35MoeTextOnly", "qwen35moe", "qwen35moe-tiny-s404-f32.gguf", "golden.json", "--text-only",
     1e-5},
    {"Qwen35MoePerExpert", "qwen35moe", "qwen35moe-tiny-s404-f32.gguf", "golden.json",
     "--experts-layout per-expert", 1e-5},
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

class ArchSafetensors : public ::testing::TestWithParam<Case> {};

TEST_P(ArchSafetensors, SameLogitsAsGguf) {
  RKV_REQUIRE_SHARED(shared);
  REQUIRE_PYTHON_NUMPY(py);
  const Case& c = GetParam();
  const fs::path dir = shared / "golden/arch" / c.folder;
  test::TempDir tmp("arch-st");
  const fs::path hf = tmp.path() / "hf";
  ASSERT_NO_FATAL_FAILURE(convert(py, dir / c.gguf, hf, c.options));
  const auto golden = test::read_json(dir / c.golden);
  const auto prompt = golden["prompt_ids"].get<std::vector<int>>();
  const auto expected = golden["greedy_ids"].get<std::vector<int>>();
  const int steps = static_cast<int>(expected.size());

  auto from_gguf = Model::load(dir / c.gguf);
  auto from_hf = Model::load(hf);
  const ModelConfig& a = from_gguf->config();
  const ModelConfig& b = from_hf->config();
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.layer_kinds, b.layer_kinds);
  EXPECT_EQ(a.rotary_dim(), b.rotary_dim());
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.moe.experts, b.moe.experts);
  EXPECT_EQ(a.moe.experts_used, b.moe.experts_used);
  EXPECT_EQ(a.moe.shared_ff, b.moe.shared_ff);
  EXPECT_EQ(a.delta_net.v_heads, b.delta_net.v_heads);
  EXPECT_EQ(from_gguf->rope_frequencies(), from_hf->rope_frequencies());
  EXPECT_EQ(from_gguf->rope_magnitude(), from_hf->rope_magnitude());
  // The round trip through to_json reads back the same configuration.
  const ModelConfig again = ModelConfig::from_json(b.to_json(), "to_json");
  EXPECT_EQ(again.layer_kinds, b.layer_kinds);
  EXPECT_EQ(again.rotary_dim(), b.rotary_dim());
  EXPECT_EQ(again.moe.expert_ff, b.moe.expert_ff);
  EXPECT_EQ(again.rope_scaling.yarn, b.rope_scaling.yarn);

  const std::size_t rounded = expect_same_weights(*from_gguf, *from_hf);

  // Both read llama.cpp's greedy ids, so that a difference cannot snowball through other tokens.
  const Trace ref = run_greedy(*from_gguf, prompt, steps, expected);
  const Trace run = run_greedy(*from_hf, prompt, steps, expected);
  const double diff = max_logit_diff(ref, run, kComparedSteps);
  int equal = 0;
  for (int s = 0; s < steps; ++s) equal += run.greedy[s] == expected[s] ? 1 : 0;
  std::printf(
      "[arch-safetensors] %s: %zu weights within a float32 rounding, max |logit(safetensors) "
      "- logit(GGUF)| = %.3g over %zu steps (%.3g over %d), %d/%d argmax ids equal "
      "llama.cpp's greedy ids\n",
      c.name, rounded, diff, kComparedSteps, max_logit_diff(ref, run), steps, equal, steps);
  EXPECT_LE(diff, c.tolerance);
  EXPECT_GE(equal, c.min_equal_ids);
}

std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  return p.param.name;
}

INSTANTIATE_TEST_SUITE_P(Goldens, ArchSafetensors, ::testing::ValuesIn(kCases), case_name);

// ------------------------------------------------------------------------------------------------
// Qwen3.5 with 2 k heads and 6 v heads (r = 3 v heads per k head, as in real checkpoints, where
// the v-head permutation is not its own inverse): gguf_to_hf.py's synthetic files of its
// --self-test, written with a vocabulary size so that rkv can load them.

constexpr const char* kSynthScript = R"(import sys
sys.path.insert(0, sys.argv[3])
import gguf_to_hf as g
write = g.write_gguf
def with_vocab(path, kv, tensors, alignment=32):
    kv = dict(kv)
    arch = kv["general.architecture"][1]
    kv[arch + ".vocab_size"] = (4, tensors["token_embd.weight"].shape[0])
    write(path, kv, tensors, alignment)
g.write_gguf = with_vocab
g.synth_qwen35(sys.argv[1], sys.argv[2] == "moe")
)";

// synth_qwen35's shapes
constexpr int kHk = 2, kHv = 6, kDk = 8, kDv = 8, kK = 4, kH = 32;

void write_synthetic(const std::string& py, const test::TempDir& tmp, const fs::path& gguf,
                     bool moe) {
  const fs::path script = tmp.write("synth.py", kSynthScript);
  run_logged("'" + py + "' '" + script.string() + "' '" + gguf.string() + "' " +
                 (moe ? "moe" : "dense") + " '" + tools_dir().string() + "'",
             gguf.string() + ".log");
}

// Puts a checkpoint's v heads where a loader that applied the permutation in the wrong direction
// would take them from: with them, the right loader computes what the wrong one would.
// The right loader makes llama.cpp's block g of Hugging Face's block fwd(g) = (g mod Hk) r + g /
// Hk; the wrong one would take rev(g) = (g mod r) Hk + g / r.
void reverse_v_heads(RawTensors& tensors, const std::string& prefix) {
  const int r = kHv / kHk;
  // The tensor's bytes as [outer][axis][entry bytes]; the axis has `first` entries and then kHv
  // blocks of s.
  auto permute = [&](const std::string& name, std::size_t outer, std::size_t axis,
                     std::size_t first, std::size_t s, std::size_t entry) {
    RawTensor& t = tensors.at(prefix + name);
    ASSERT_EQ(t.bytes.size(), outer * axis * entry) << name;
    const std::string in = t.bytes;
    for (std::size_t o = 0; o < outer; ++o)
      for (int g = 0; g < kHv; ++g) {
        const std::size_t fwd = static_cast<std::size_t>((g % kHk) * r + g / kHk);
        const std::size_t rev = static_cast<std::size_t>((g % r) * kHk + g / r);
        std::memcpy(&t.bytes[(o * axis + first + fwd * s) * entry],
                    &in[(o * axis + first + rev * s) * entry], s * entry);
      }
  };
  const std::size_t qk = 2 * kHk * kDk, C = qk + kHv * kDv, Vd = kHv * kDv, f = 4;
  permute("in_proj_qkv.weight", 1, C, qk, kDv, kH * f);
  permute("in_proj_z.weight", 1, Vd, 0, kDv, kH * f);
  permute("in_proj_b.weight", 1, kHv, 0, 1, kH * f);
  permute("in_proj_a.weight", 1, kHv, 0, 1, kH * f);
  permute("dt_bias", 1, kHv, 0, 1, f);
  permute("A_log", 1, kHv, 0, 1, f);
  permute("conv1d.weight", 1, C, qk, kDv, kK * f);
  permute("out_proj.weight", kH, Vd, 0, kDv, f);
}

TEST(ArchSafetensors, VHeadOrderWithThreeVHeadsPerKeyHead) {
  REQUIRE_PYTHON_NUMPY(py);
  const std::vector<int> prompt = {17, 20, 5, 33, 31, 42, 15, 9, 26, 7, 13, 29};
  for (const bool moe : {false, true}) {
    SCOPED_TRACE(moe ? "qwen35moe" : "qwen35");
    test::TempDir tmp("arch-st-vheads");
    const fs::path gguf = tmp.path() / "synthetic.gguf";
    ASSERT_NO_FATAL_FAILURE(write_synthetic(py, tmp, gguf, moe));
    auto from_gguf = Model::load(gguf);
    ASSERT_EQ(from_gguf->config().delta_net.k_heads, kHk);
    ASSERT_EQ(from_gguf->config().delta_net.v_heads, kHv);
    const Trace ref = run_greedy(*from_gguf, prompt, 6);
    for (const char* options : {"", "--text-only"}) {
      SCOPED_TRACE(options);
      const fs::path hf = tmp.path() / (std::string("hf") + options);
      ASSERT_NO_FATAL_FAILURE(convert(py, gguf, hf, options));
      const Trace run = run_greedy(*Model::load(hf), prompt, 6);
      const double diff = max_logit_diff(ref, run);
      std::printf("[arch-safetensors] synthetic %s %s (Hk 2, Hv 6): max |logit diff| = %.3g\n",
                  moe ? "qwen35moe" : "qwen35", options, diff);
      EXPECT_LE(diff, 1e-5);
      EXPECT_EQ(run.greedy, ref.greedy);

      // What a loader with the permutation reversed would compute differs: this test catches it.
      const fs::path wrong = tmp.path() / (std::string("wrong") + options);
      const std::string p = *options == '\0' ? "model.language_model." : "model.";
      edited_copy(hf, wrong, [&](RawTensors& t) {
        for (int l = 0; l < 3; ++l)  // the DeltaNet layers (layer 3 is full attention)
          reverse_v_heads(t, p + "layers." + std::to_string(l) + ".linear_attn.");
      });
      const double wrong_diff = max_logit_diff(ref, run_greedy(*Model::load(wrong), prompt, 6));
      std::printf("[arch-safetensors]   with the v heads in the reversed order: %.3g\n",
                  wrong_diff);
      EXPECT_GT(wrong_diff, 1e-2);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Errors name what is wrong.

TEST(ArchSafetensors, UnsupportedConfigsAreNamed) {
  auto error = [](const json& j) {
    try {
      ModelConfig::from_json(j, "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error({{"model_type", "mamba2"}, {"hidden_size", 64}})
                .find("unsupported model_type 'mamba2'"),
            std::string::npos);
  const std::string both =
      error({{"architectures", {"FalconH1ForCausalLM"}}, {"model_type", "falcon_h1"}});
  EXPECT_NE(both.find("unsupported architecture 'FalconH1ForCausalLM' (model_type 'falcon_h1')"),
            std::string::npos)
      << both;
  EXPECT_NE(both.find("Qwen3_5MoeForConditionalGeneration"), std::string::npos) << both;

  // A valid Qwen3 MoE config, then one thing wrong at a time.
  const json qwen3moe = {{"architectures", {"Qwen3MoeForCausalLM"}},
                         {"model_type", "qwen3_moe"},
                         {"hidden_size", 64},
                         {"intermediate_size", 128},
                         {"moe_intermediate_size", 32},
                         {"num_experts", 8},
                         {"num_experts_per_tok", 2},
                         {"norm_topk_prob", true},
                         {"num_hidden_layers", 2},
                         {"num_attention_heads", 4},
                         {"num_key_value_heads", 2},
                         {"head_dim", 16},
                         {"vocab_size", 100},
                         {"rope_theta", 1e6}};
  EXPECT_EQ(error(qwen3moe), "(no error)");
  const ModelConfig c = ModelConfig::from_json(qwen3moe, "config.json");
  EXPECT_EQ(c.arch, Architecture::Qwen3Moe);
  EXPECT_EQ(c.moe.expert_ff, 32);
  EXPECT_TRUE(c.qk_norm);
  for (const auto& [key, value, message] :
       {std::tuple<const char*, json, const char*>{"norm_topk_prob", false, "norm_topk_prob"},
        {"num_experts_per_tok", 9, "num_experts_per_tok exceeds"},
        {"mlp_only_layers", {1}, "mlp_only_layers"},
        {"quantization_config", {{"quant_method", "fp8"}}, "quant_method 'fp8'"},
        {"rope_scaling", {{"rope_type", "longrope"}}, "unsupported rope_scaling type 'longrope'"},
        {"layer_types",
         {"full_attention", "sliding_attention"},
         "unsupported layer type 'sliding_attention'"},
        {"partial_rotary_factor", 0.5, "partial_rotary_factor"}}) {
    json j = qwen3moe;
    j[key] = value;
    const std::string e = error(j);
    EXPECT_NE(e.find(message), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }

  // Qwen3.5's nested form: the text model's fields are read from text_config and named so.
  json qwen35 = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                 {"model_type", "qwen3_5"},
                 {"text_config",
                  {{"model_type", "qwen3_5_text"},
                   {"hidden_size", 64},
                   {"intermediate_size", 128},
                   {"num_hidden_layers", 4},
                   {"num_attention_heads", 4},
                   {"num_key_value_heads", 2},
                   {"head_dim", 64},
                   {"vocab_size", 320},
                   {"linear_num_key_heads", 2},
                   {"linear_num_value_heads", 4},
                   {"linear_key_head_dim", 16},
                   {"linear_value_head_dim", 16},
                   {"linear_conv_kernel_dim", 4},
                   {"rope_parameters",
                    {{"rope_type", "default"},
                     {"rope_theta", 1e7},
                     {"partial_rotary_factor", 0.25},
                     {"mrope_section", {3, 3, 2}}}}}}};
  const ModelConfig q = ModelConfig::from_json(qwen35, "config.json");
  EXPECT_EQ(q.arch, Architecture::Qwen35);
  EXPECT_EQ(q.rotary_dim(), 16);
  EXPECT_EQ(q.rope_theta, 1e7f);
  EXPECT_EQ(q.kv_layers(), 1);
  EXPECT_EQ(q.delta_net_layers(), 3);
  qwen35["text_config"]["linear_num_value_heads"] = 3;
  EXPECT_NE(error(qwen35).find("config.json (text_config): linear_num_value_heads (3) is not a "
                               "multiple of linear_num_key_heads (2)"),
            std::string::npos)
      << error(qwen35);
  qwen35["text_config"]["linear_num_value_heads"] = 4;
  qwen35["text_config"]["rope_parameters"]["mrope_section"] = {3, 3, 3};
  EXPECT_NE(error(qwen35).find("mrope_section covers 9 frequency pairs"), std::string::npos)
      << error(qwen35);
  qwen35.erase("text_config");
  EXPECT_NE(error(qwen35).find("needs a 'text_config' object"), std::string::npos) << error(qwen35);

  // gpt-oss: each sequence holds a ring of sliding_window keys per window layer, so a window
  // beyond the context is refused rather than allocated.
  json oss = {{"architectures", {"GptOssForCausalLM"}},
              {"model_type", "gpt_oss"},
              {"hidden_size", 64},
              {"intermediate_size", 64},
              {"num_local_experts", 8},
              {"num_experts_per_tok", 4},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 8},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"vocab_size", 448},
              {"max_position_embeddings", 4096},
              {"sliding_window", 128},
              {"rope_theta", 150000.0}};
  EXPECT_EQ(error(oss), "(no error)");
  oss["sliding_window"] = 1 << 30;
  EXPECT_NE(error(oss).find("sliding_window must be positive and at most max_position_embeddings"),
            std::string::npos)
      << error(oss);
}

TEST(ArchSafetensors, MissingOrMisshapedTensorIsNamed) {
  REQUIRE_PYTHON_NUMPY(py);
  test::TempDir tmp("arch-st-errors");
  const fs::path gguf = tmp.path() / "synthetic.gguf";
  ASSERT_NO_FATAL_FAILURE(write_synthetic(py, tmp, gguf, true));
  const fs::path hf = tmp.path() / "hf";
  ASSERT_NO_FATAL_FAILURE(convert(py, gguf, hf, ""));
  const std::string p = "model.language_model.layers.";
  for (const std::string& name :
       {p + "1.linear_attn.A_log", p + "3.self_attn.q_norm.weight", p + "0.mlp.experts.down_proj",
        p + "2.mlp.shared_expert_gate.weight", std::string("model.language_model.norm.weight")}) {
    const fs::path dir = tmp.path() / ("without-" + name);
    edited_copy(hf, dir, [&](RawTensors& t) { ASSERT_EQ(t.erase(name), 1u) << name; });
    const std::string e = load_error(dir);
    EXPECT_NE(e.find(dir.string() + ": missing tensor " + name), std::string::npos) << e;
  }
  // Per-expert tensors: the missing expert is named.
  const fs::path per_expert = tmp.path() / "per-expert";
  ASSERT_NO_FATAL_FAILURE(convert(py, gguf, per_expert, "--experts-layout per-expert"));
  const std::string up3 = p + "0.mlp.experts.3.up_proj.weight";
  edited_copy(per_expert, tmp.path() / "no-up3", [&](RawTensors& t) { t.erase(up3); });
  EXPECT_NE(load_error(tmp.path() / "no-up3").find("missing tensor " + up3), std::string::npos);
  // A tensor of the wrong shape: file, tensor, both shapes.
  const std::string b = p + "0.linear_attn.in_proj_b.weight";
  edited_copy(hf, tmp.path() / "short", [&](RawTensors& t) {
    t.at(b).shape = {kHv - 1, kH};
    t.at(b).bytes.resize(static_cast<std::size_t>((kHv - 1) * kH * 4));
  });
  const std::string e = load_error(tmp.path() / "short");
  EXPECT_NE(e.find("model.safetensors: tensor " + b + " has shape [5,32], expected [6,32]"),
            std::string::npos)
      << e;
}

TEST(ArchSafetensors, Mxfp4TensorErrorsAreNamed) {
  RKV_REQUIRE_SHARED(shared);
  REQUIRE_PYTHON_NUMPY(py);
  test::TempDir tmp("arch-st-mxfp4");
  const fs::path hf = tmp.path() / "hf";
  ASSERT_NO_FATAL_FAILURE(
      convert(py, shared / "golden/arch/gpt-oss/gpt-oss-tiny-s202-mxfp4.gguf", hf, ""));
  const std::string p = "model.layers.1.";
  const std::string scales = p + "mlp.experts.gate_up_proj_scales";
  edited_copy(hf, tmp.path() / "no-scales", [&](RawTensors& t) { t.erase(scales); });
  std::string e = load_error(tmp.path() / "no-scales");
  EXPECT_NE(e.find("missing tensor " + scales), std::string::npos) << e;
  // Blocks given as float: the dtype is named.
  const std::string blocks = p + "mlp.experts.down_proj_blocks";
  edited_copy(hf, tmp.path() / "float-blocks", [&](RawTensors& t) {
    RawTensor& x = t.at(blocks);
    x.dtype = "F32";
    x.bytes.append(3 * x.bytes.size(), '\0');
  });
  e = load_error(tmp.path() / "float-blocks");
  EXPECT_NE(e.find("tensor " + blocks + " has dtype f32, expected U8"), std::string::npos) << e;
  const std::string sinks = p + "self_attn.sinks";
  edited_copy(hf, tmp.path() / "sinks", [&](RawTensors& t) {
    t.at(sinks).shape = {7};
    t.at(sinks).bytes.resize(28);
  });
  e = load_error(tmp.path() / "sinks");
  EXPECT_NE(e.find("model.safetensors: tensor " + sinks + " has shape [7], expected [8]"),
            std::string::npos)
      << e;
}

// rkv make-model writes the three families' tiny shapes as Hugging Face checkpoints too. The same
// seed in both formats is the same model: gguf_to_hf.py --to-gguf-check re-applies llama.cpp's
// converter to the checkpoint and finds the GGUF file's tensors (an oracle independent of rkv's
// writer and loader), and rkv gives the two the same logits. They are equal bit for bit, except
// for Qwen3.5, whose norms are stored as w - 1 and decay rates as A_log = log(-a). That is a
// float32 rounding each way. Covers f32 and bf16 matrices, and gpt-oss's MXFP4 experts.
TEST(ArchSafetensors, MakeModelWritesTheSameModelAsItsGgufFile) {
  REQUIRE_PYTHON_NUMPY(py);
  test::TempDir tmp("arch-make-model-st");
  struct Made {
    const char* shape;
    DType dtype;
  };
  for (const Made& k : {Made{"tiny-qwen3moe", DType::F32}, Made{"tiny-qwen3moe", DType::BF16},
                        Made{"tiny-gpt-oss", DType::F32}, Made{"tiny-gpt-oss", DType::MXFP4},
                        Made{"tiny-qwen35", DType::F32}, Made{"tiny-qwen35", DType::BF16}}) {
    const std::string name = std::string(k.shape) + "-" + std::string(dtype_name(k.dtype));
    SCOPED_TRACE(name);
    RandomCheckpointOptions options;
    options.shape = k.shape;
    options.dtype = k.dtype;
    options.seed = 5;
    const fs::path gguf = tmp.path() / (name + ".gguf"), dir = tmp.path() / name;
    write_random_gguf(gguf, options);
    write_random_checkpoint(dir, options);
    ASSERT_NO_FATAL_FAILURE(run_logged("'" + py + "' '" + (tools_dir() / "gguf_to_hf.py").string() +
                                           "' --to-gguf-check '" + gguf.string() + "' '" +
                                           dir.string() + "'",
                                       tmp.path() / (name + ".check.log")));
    const auto a = Model::load(gguf);
    const auto b = Model::load(dir);
    EXPECT_EQ(b->config().arch, a->config().arch);
    const std::vector<int> prompt = {3, 17, 250, 41, 9, 120};
    const Trace ta = run_greedy(*a, prompt, 4);
    const Trace tb = run_greedy(*b, prompt, 4, ta.greedy);
    const bool qwen35 = std::string(k.shape) == "tiny-qwen35";
    if (qwen35) {
      EXPECT_LT(max_logit_diff(ta, tb), 1e-4);
    } else {
      EXPECT_EQ(max_logit_diff(ta, tb), 0.0);
    }
    EXPECT_EQ(ta.greedy, tb.greedy);
  }
}

}  // namespace
}  // namespace rkv
