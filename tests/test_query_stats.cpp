// TriAttention's calibration statistics (engine/query_stats.h, `rkv calibrate`): layer 0's moments
// against an independent oracle (tests/query_stats_oracle.py computes the pre-RoPE queries from
// the weights in float64: embedding, RMSNorm, q_proj, bias, q_norm) on the shipped model and on
// checkpoints rkv writes with a q bias, a q_norm and a scaled RoPE; the deeper layers by
// properties the un-rotation must keep (the chunk size and the split into sequences change
// nothing); the file's round trip and every load error; the command end to end; and the shipped
// files against a recomputation with the commands in their models' READMEs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/query_stats.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "model/safetensors.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no rkv::Error thrown (expected one mentioning '" << needles.at(0) << "')";
  } catch (const Error& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "error '" << e.what() << "' does not mention '" << needle << "'";
  }
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int> encode(const Tokenizer& tokenizer, const std::string& text) {
  const std::vector<std::int32_t> ids = tokenizer.encode(text, true);
  return {ids.begin(), ids.end()};
}

// The oracle's layer-0 moments for `tokens`; null when python3 cannot be run (the test skips).
json run_oracle(const fs::path& model_dir, const std::vector<int>& tokens) {
  std::string ids;
  for (int t : tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const fs::path script = test::source_dir() / "tests/query_stats_oracle.py";
  std::string out;
  const int rc = test::run_command(
      "python3 '" + script.string() + "' --model '" + model_dir.string() + "' --tokens " + ids,
      out);
  if (rc == 127) return nullptr;
  EXPECT_EQ(rc, 0) << out;
  return json::parse(out);
}

// Each moment within `rel` of the cell's mean modulus (|mean| <= mean modulus, so this is
// relative to the cell's scale, and holds where the mean itself nearly cancels).
void expect_cell_near(const tri::Stats& s, int layer, int head, int f, double re, double im,
                      double abs, double rel, const std::string& what) {
  const std::size_t i = s.at(layer, head, f);
  const double tol = rel * abs;
  EXPECT_NEAR(s.mean_re[i], re, tol)
      << what << " layer " << layer << " head " << head << " f " << f;
  EXPECT_NEAR(s.mean_im[i], im, tol)
      << what << " layer " << layer << " head " << head << " f " << f;
  EXPECT_NEAR(s.abs_mean[i], abs, tol)
      << what << " layer " << layer << " head " << head << " f " << f;
}

// Within 1e-6 of the cell's scale: float32 arithmetic against float64 (measured: at most 7e-8
// on the AVX-512 kernels).
void expect_layer0_matches_oracle(const tri::Stats& s, const json& oracle,
                                  const std::string& what) {
  ASSERT_EQ(oracle.at("abs_mean").size(), static_cast<std::size_t>(s.q_heads));
  for (int h = 0; h < s.q_heads; ++h)
    for (int f = 0; f < s.freqs; ++f) {
      const double abs = oracle["abs_mean"][h][f].get<double>();
      ASSERT_GT(abs, 0.0);
      expect_cell_near(s, 0, h, f, oracle["mean_re"][h][f].get<double>(),
                       oracle["mean_im"][h][f].get<double>(), abs, 1e-6, what);
    }
}

// Every cell of `a` within `rel` of `b`'s, relative to b's mean modulus.
void expect_stats_near(const tri::Stats& a, const tri::Stats& b, double rel,
                       const std::string& what) {
  ASSERT_EQ(a.layers, b.layers);
  ASSERT_EQ(a.q_heads, b.q_heads);
  ASSERT_EQ(a.freqs, b.freqs);
  for (int l = 0; l < b.layers; ++l)
    for (int h = 0; h < b.q_heads; ++h)
      for (int f = 0; f < b.freqs; ++f) {
        const std::size_t i = b.at(l, h, f);
        expect_cell_near(a, l, h, f, b.mean_re[i], b.mean_im[i], b.abs_mean[i], rel, what);
      }
}

std::vector<int> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int> out(static_cast<std::size_t>(n));
  for (int& t : out) t = pick(rng);
  return out;
}

// The first `n` problems of the held-out set with nothing else: text of the shipped model's kind.
std::string held_out_text(std::size_t n) {
  std::string text;
  for (const std::string& p : test::held_out_problems(n)) text += p;
  return text;
}
// Two of them separated by two blank lines, as tools/tiny/task.py --text writes them.
std::string held_out_problems_joined() {
  const std::vector<std::string> p = test::held_out_problems(2);
  return p.at(0) + "\n\n\n" + p.at(1);
}

TEST(QueryStats, LayerZeroMatchesTheOracleOnTheShippedModel) {
  const auto model = Model::load(test::shipped_model_dir());
  const Tokenizer tokenizer = Tokenizer::load(test::shipped_model_dir());
  const std::vector<int> tokens = encode(tokenizer, held_out_text(2));
  ASSERT_GT(tokens.size(), 100u);
  const json oracle = run_oracle(test::shipped_model_dir(), tokens);
  if (oracle.is_null()) GTEST_SKIP() << "python3 is not available to run the oracle";
  ThreadPool pool(2);
  // Chunks of 16 with a shorter last one: the ring's newest rows are read after every pass.
  const QueryStats q = calibrate_queries(*model, pool, tokens, 16);
  EXPECT_EQ(q.tokens, static_cast<std::int64_t>(tokens.size()));
  EXPECT_EQ(q.model, "rkv-tiny-reasoner");
  expect_layer0_matches_oracle(q.stats, oracle, "rkv-tiny-reasoner");
}

// A q bias (Qwen2: tiny), a q_norm (Qwen3: tiny-qwen3), and Llama-3.1's scaled frequencies
// (tiny-llama3-rope), each un-rotated with the frequencies the forward pass used.
TEST(QueryStats, LayerZeroMatchesTheOracleWithBiasQNormAndScaledRope) {
  struct Case {
    const char* shape;
    bool bias, q_norm;
  };
  for (const Case& c : {Case{"tiny", true, false}, Case{"tiny-qwen3", false, true},
                        Case{"tiny-llama3-rope", false, false}}) {
    SCOPED_TRACE(c.shape);
    test::TempDir dir("qstats-oracle");
    RandomCheckpointOptions o;
    o.shape = c.shape;
    o.dtype = DType::F32;
    o.seed = 3;
    write_random_checkpoint(dir.path(), o);
    const auto model = Model::load(dir.path());
    const std::vector<int> tokens = random_tokens(45, model->config().vocab_size, 5);
    const json oracle = run_oracle(dir.path(), tokens);
    if (oracle.is_null()) GTEST_SKIP() << "python3 is not available to run the oracle";
    EXPECT_EQ(oracle.at("bias").get<bool>(), c.bias);
    EXPECT_EQ(oracle.at("q_norm").get<bool>(), c.q_norm);
    ThreadPool pool(2);
    const QueryStats q = calibrate_queries(*model, pool, tokens, 8);
    expect_layer0_matches_oracle(q.stats, oracle, c.shape);
  }
}

// Deeper layers have no cheap oracle, but a query's position enters only through RoPE: however
// the text is cut into forward passes (1, 7 or all tokens per pass), the un-rotated queries and
// so the statistics are the same (a row un-rotated from a wrong position would differ by its
// rotation). Several sequences are the token-weighted mean of each alone. The passes' float32
// sums differ with the rows per pass by at most 3e-7 of a cell's scale (AVX-512 and AVX2
// kernels; equal on the reference kernels), while un-rotating from a position that depends on the
// cut (the row's index in its pass, the ring's older rows) moves them by far more.
TEST(QueryStats, DeeperLayersDoNotDependOnTheChunkOrTheSplit) {
  const auto model = Model::load(test::shipped_model_dir());
  const Tokenizer tokenizer = Tokenizer::load(test::shipped_model_dir());
  const std::vector<int> a = encode(tokenizer, held_out_text(3));
  const std::vector<int> b = encode(tokenizer, held_out_text(1));
  ThreadPool pool(2);
  const QueryStats whole = calibrate_queries(*model, pool, a, 256);
  for (int chunk : {1, 7}) {
    SCOPED_TRACE(chunk);
    std::vector<std::int64_t> seen;
    const QueryStats q =
        calibrate_queries(*model, pool, a, chunk, [&](std::int64_t done, std::int64_t total) {
          EXPECT_EQ(total, static_cast<std::int64_t>(a.size()));
          seen.push_back(done);
        });
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), static_cast<std::int64_t>(a.size()));
    EXPECT_EQ(seen.size(), (a.size() + static_cast<std::size_t>(chunk) - 1) / chunk);
    expect_stats_near(q.stats, whole.stats, 2e-6, "chunk " + std::to_string(chunk));
  }

  const QueryStats qb = calibrate_queries(*model, pool, b, 64);
  const std::vector<std::vector<int>> both = {a, {}, b};
  const QueryStats q2 = calibrate_queries(*model, pool, both, 64);
  EXPECT_EQ(q2.tokens, static_cast<std::int64_t>(a.size() + b.size()));
  tri::Stats mix = whole.stats;
  const double wa = static_cast<double>(a.size()) / static_cast<double>(q2.tokens);
  for (std::size_t i = 0; i < mix.mean_re.size(); ++i) {
    mix.mean_re[i] = wa * whole.stats.mean_re[i] + (1 - wa) * qb.stats.mean_re[i];
    mix.mean_im[i] = wa * whole.stats.mean_im[i] + (1 - wa) * qb.stats.mean_im[i];
    mix.abs_mean[i] = wa * whole.stats.abs_mean[i] + (1 - wa) * qb.stats.abs_mean[i];
  }
  expect_stats_near(q2.stats, mix, 1e-6, "two sequences");

  expect_error([&] { calibrate_queries(*model, pool, std::vector<int>{}); }, {"at least one"});
  expect_error([&] { calibrate_queries(*model, pool, a, 0); }, {"chunk"});
  const std::vector<int> too_long(
      static_cast<std::size_t>(model->config().max_position_embeddings) + 1, 0);
  expect_error([&] { calibrate_queries(*model, pool, too_long); }, {"context of 2048"});
}

QueryStats self_made_stats(ThreadPool& pool) {
  const auto model = Model::load(test::self_made_model());
  QueryStats q = calibrate_queries(*model, pool, random_tokens(20, 1024, 1), 8);
  q.text = "random.txt";
  return q;
}

TEST(QueryStats, FileRoundTripIsExact) {
  test::TempDir dir("qstats-file");
  ThreadPool pool(2);
  const auto model = Model::load(test::self_made_model());
  const QueryStats q = self_made_stats(pool);
  const std::string path = (dir.path() / "q.safetensors").string();
  save_query_stats(path, q);

  const SafetensorsFile file(path);
  const auto& meta = file.metadata();
  EXPECT_EQ(meta.at("format"), "rkv-query-stats");
  EXPECT_EQ(meta.at("version"), "1");
  EXPECT_EQ(meta.at("tokens"), "20");
  EXPECT_EQ(meta.at("head_dim"), "32");
  EXPECT_EQ(meta.at("rope_style"), "half");
  EXPECT_EQ(meta.at("text"), "random.txt");
  EXPECT_EQ(meta.at("model"), q.model);
  for (const char* name : {"q_mean_real", "q_mean_imag", "q_abs_mean"}) {
    EXPECT_EQ(file.tensors().at(name).dtype, DType::F32) << name;
    EXPECT_EQ(file.tensors().at(name).shape, (std::vector<std::int64_t>{4, 4, 16})) << name;
  }

  const auto loaded = load_query_stats(path, *model);
  EXPECT_EQ(loaded->origin, path);
  EXPECT_EQ(loaded->tokens, 20);
  EXPECT_EQ(loaded->text, "random.txt");
  EXPECT_EQ(loaded->model, q.model);
  const tri::Stats& s = loaded->stats;
  ASSERT_EQ(s.layers, 4);
  ASSERT_EQ(s.q_heads, 4);
  ASSERT_EQ(s.freqs, 16);
  ASSERT_EQ(s.mean_re.size(), q.stats.mean_re.size());
  for (std::size_t i = 0; i < s.mean_re.size(); ++i) {
    // Stored as float32: what was computed, rounded once.
    EXPECT_EQ(s.mean_re[i], static_cast<double>(static_cast<float>(q.stats.mean_re[i])));
    EXPECT_EQ(s.mean_im[i], static_cast<double>(static_cast<float>(q.stats.mean_im[i])));
    EXPECT_EQ(s.abs_mean[i], static_cast<double>(static_cast<float>(q.stats.abs_mean[i])));
  }
  // Saving what was loaded writes the same bytes.
  const std::string again = (dir.path() / "again.safetensors").string();
  save_query_stats(again, *loaded);
  EXPECT_EQ(slurp(path), slurp(again));
}

TEST(QueryStats, LoadErrorsNameTheFileAndTheProblem) {
  test::TempDir dir("qstats-errors");
  ThreadPool pool(2);
  const auto model = Model::load(test::self_made_model());
  const QueryStats q = self_made_stats(pool);
  const auto at = [&](const char* name) { return (dir.path() / name).string(); };

  expect_error([&] { load_query_stats(at("none.safetensors"), *model); },
               {at("none.safetensors"), "not found"});
  dir.write("text.safetensors", "this is not a safetensors file at all");
  expect_error([&] { load_query_stats(at("text.safetensors"), *model); },
               {at("text.safetensors"), "safetensors"});

  // Made for another model: the shipped one has head size 48, the self-made one 32.
  const auto shipped = Model::load(test::shipped_model_dir());
  save_query_stats(at("q.safetensors"), q);
  expect_error(
      [&] { load_query_stats(at("q.safetensors"), *shipped); },
      {at("q.safetensors"), "4 layers x 4 query heads of size 32", "size 48", "rkv calibrate"});

  const std::vector<std::int64_t> shape = {4, 4, 16};
  const auto fill = [](float value) {
    return [value](std::uint8_t* bytes, std::size_t n) {
      for (std::size_t i = 0; i + sizeof(float) <= n; i += sizeof(float))
        std::memcpy(bytes + i, &value, sizeof value);
    };
  };
  const std::map<std::string, std::string> meta = {{"format", "rkv-query-stats"},
                                                   {"version", "1"},
                                                   {"tokens", "20"},
                                                   {"head_dim", "32"},
                                                   {"rope_style", "half"}};
  const std::vector<TensorToWrite> good = {{"q_mean_real", DType::F32, shape, fill(0.5f)},
                                           {"q_mean_imag", DType::F32, shape, fill(0.25f)},
                                           {"q_abs_mean", DType::F32, shape, fill(1.0f)}};
  write_safetensors(at("good.safetensors"), good, meta);
  EXPECT_NO_THROW(load_query_stats(at("good.safetensors"), *model));

  write_safetensors(at("tag.safetensors"), good, {{"format", "pt"}});
  expect_error([&] { load_query_stats(at("tag.safetensors"), *model); },
               {at("tag.safetensors"), "not an rkv query statistics file", "'pt'"});

  auto version = meta;
  version["version"] = "2";
  write_safetensors(at("version.safetensors"), good, version);
  expect_error([&] { load_query_stats(at("version.safetensors"), *model); },
               {at("version.safetensors"), "version '2'"});

  write_safetensors(at("missing.safetensors"), {good[0], good[2]}, meta);
  expect_error([&] { load_query_stats(at("missing.safetensors"), *model); },
               {at("missing.safetensors"), "no tensor 'q_mean_imag'"});

  auto f16 = good;
  f16[1].dtype = DType::F16;
  write_safetensors(at("f16.safetensors"), f16, meta);
  expect_error([&] { load_query_stats(at("f16.safetensors"), *model); },
               {at("f16.safetensors"), "q_mean_imag is not float32"});

  auto flat = good;
  flat[2].shape = {4 * 4 * 16};
  write_safetensors(at("flat.safetensors"), flat, meta);
  expect_error([&] { load_query_stats(at("flat.safetensors"), *model); },
               {at("flat.safetensors"), "q_abs_mean has shape [256]"});

  auto heads = good;
  for (auto& t : heads) t.shape = {4, 2, 16};
  write_safetensors(at("heads.safetensors"), heads, meta);
  expect_error([&] { load_query_stats(at("heads.safetensors"), *model); },
               {at("heads.safetensors"), "4 layers x 2 query heads", "4 layers x 4 query heads"});

  auto nan = good;
  nan[0].fill = fill(std::numeric_limits<float>::quiet_NaN());
  write_safetensors(at("nan.safetensors"), nan, meta);
  expect_error([&] { load_query_stats(at("nan.safetensors"), *model); },
               {at("nan.safetensors"), "q_mean_real element 0 is not finite"});
}

TEST(QueryStats, DefaultPathIsBesideTheModel) {
  EXPECT_EQ(default_query_stats_path("/m/qwen"), "/m/qwen/query_stats.safetensors");
  EXPECT_EQ(default_query_stats_path("/m/qwen/"), "/m/qwen/query_stats.safetensors");
  EXPECT_EQ(default_query_stats_path("/m/qwen-q8_0.gguf"), "/m/qwen-q8_0.query_stats.safetensors");
  EXPECT_EQ(default_query_stats_path(test::shipped_model_dir().string()),
            (test::shipped_model_dir() / "query_stats.safetensors").string());
}

// Runs `rkv ARGS` (in directory `cwd` when given); its exit status, stdout and stderr.
int run_rkv(const std::string& args, const fs::path& log, std::string& output,
            const fs::path& cwd = {}) {
  const std::string cd = cwd.empty() ? "" : "cd '" + cwd.string() + "' && ";
  const int status = std::system(
      (cd + test::rkv_binary() + " " + args + " > '" + log.string() + "' 2>&1").c_str());
  output = slurp(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CalibrateCommand, WritesStatisticsThatLoadAndRefusesBadInput) {
  test::TempDir dir("calibrate-cli");
  const fs::path log = dir.path() / "log.txt";
  const std::string m = "-m '" + test::shipped_model_dir().string() + "' -t 2 ";
  const fs::path text = dir.write("chains.txt", held_out_text(2));
  const fs::path out = dir.path() / "q.safetensors";
  std::string output;
  ASSERT_EQ(run_rkv("calibrate " + m + "-f '" + text.string() + "' -o '" + out.string() + "'", log,
                    output),
            0)
      << output;
  EXPECT_NE(output.find("[rkv] wrote " + out.string()), std::string::npos) << output;
  EXPECT_NE(output.find("4 layers x 4 query heads x 24 frequency pairs"), std::string::npos)
      << output;
  EXPECT_NE(output.find("mean concentration"), std::string::npos) << output;
  const auto model = Model::load(test::shipped_model_dir());
  const auto loaded = load_query_stats(out.string(), *model);
  const Tokenizer tokenizer = Tokenizer::load(test::shipped_model_dir());
  EXPECT_EQ(loaded->tokens, static_cast<std::int64_t>(encode(tokenizer, held_out_text(2)).size()));
  EXPECT_EQ(loaded->text, "chains.txt");
  EXPECT_EQ(loaded->model, "rkv-tiny-reasoner");

  // --max-length, and --separator with its escapes: two sequences of one problem each.
  ASSERT_EQ(run_rkv("calibrate " + m + "-f '" + text.string() + "' -o '" + out.string() +
                        "' --max-length 40",
                    log, output),
            0)
      << output;
  EXPECT_EQ(load_query_stats(out.string(), *model)->tokens, 40);
  EXPECT_NE(output.find("40 tokens of " + text.string() + " (--max-length: the rest left out)"),
            std::string::npos)
      << output;
  // A problem is about 70 tokens: the first whole, the second cut at 100 in all.
  const fs::path two = dir.write("two.txt", held_out_problems_joined());
  ASSERT_EQ(run_rkv("calibrate " + m + "-f '" + two.string() + "' -o '" + out.string() +
                        "' --separator '\\n\\n\\n' --max-length 100",
                    log, output),
            0)
      << output;
  EXPECT_NE(output.find("in 2 sequences"), std::string::npos) << output;
  EXPECT_EQ(load_query_stats(out.string(), *model)->tokens, 100);

  const auto expect_refused = [&](const std::string& args, const std::string& needle) {
    EXPECT_EQ(run_rkv("calibrate " + m + args, log, output), 1) << args << "\n" << output;
    EXPECT_NE(output.find(needle), std::string::npos) << args << "\n" << output;
  };
  expect_refused("-f '" + (dir.path() / "none.txt").string() + "' -o '" + out.string() + "'",
                 (dir.path() / "none.txt").string() + ": calibration text file not found");
  expect_refused("-f '" + dir.write("empty.txt", " \n").string() + "' -o '" + out.string() + "'",
                 "the calibration text file is empty");
  expect_refused("-f '" + dir.write("one.txt", "7").string() + "' -o '" + out.string() + "'",
                 "at least 2");
  expect_refused(
      "-f '" + text.string() + "' -o '" + (dir.path() / "no/such/dir/q.safetensors").string() + "'",
      "cannot write");
  EXPECT_FALSE(fs::exists(dir.path() / "no"));

  ASSERT_EQ(run_rkv("calibrate --help", log, output), 0);
  for (const char* flag :
       {"--file", "--out", "--max-length", "--chunk", "--separator", "--threads", "--tokenizer"})
    EXPECT_NE(output.find(flag), std::string::npos) << flag;
}

// The shipped files are what the commands in the models' READMEs write: recomputed here with the
// same inputs through the same command (a fraction of a second each).
TEST(ShippedQueryStats, RecomputingWithTheReadmeCommandGivesTheShippedFile) {
  test::TempDir dir("calibrate-shipped");
  for (const char* name : {"rkv-tiny-reasoner", "rkv-tiny-redundant"}) {
    SCOPED_TRACE(name);
    const fs::path model_dir = test::source_dir() / "models" / name;
    const std::string readme = slurp(model_dir / "README.md");
    // The README's command, with the output sent elsewhere.
    const std::string marker = "build/rkv calibrate ";
    const std::size_t begin = readme.find(marker);
    ASSERT_NE(begin, std::string::npos) << "no rkv calibrate command in " << name << "/README.md";
    std::string command =
        readme.substr(begin + marker.size(), readme.find('\n', begin) - begin - marker.size());
    const std::string shipped_out = "-o models/" + std::string(name) + "/query_stats.safetensors";
    const std::size_t o = command.find(shipped_out);
    ASSERT_NE(o, std::string::npos) << command;
    const fs::path out = dir.path() / (std::string(name) + ".safetensors");
    command.replace(o, shipped_out.size(), "-o '" + out.string() + "'");
    std::string output;
    ASSERT_EQ(run_rkv("calibrate " + command + " -t 2", dir.path() / "log.txt", output,
                      test::source_dir()),
              0)
        << "cd " << test::source_dir() << " && build/rkv calibrate " << command << "\n"
        << output;
    const auto model = Model::load(model_dir);
    const auto shipped = load_query_stats((model_dir / "query_stats.safetensors").string(), *model);
    const auto again = load_query_stats(out.string(), *model);
    EXPECT_EQ(again->tokens, shipped->tokens);
    EXPECT_EQ(again->text, shipped->text);
    expect_stats_near(again->stats, shipped->stats, 1e-6, name);
  }
}

}  // namespace
}  // namespace rkv
