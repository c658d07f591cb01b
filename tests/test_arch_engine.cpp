// The engine on the mixture-of-experts and hybrid architectures (../shared/golden/arch's files):
// compression works on the full-attention layers exactly as on a dense model, the sliding-window
// rings and DeltaNet states stay constant-size parts of the slot, and continuous batching gives
// every request the tokens it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "batch_test_util.h"
#include "compress/triattention.h"
#include "core/error.h"
#include "engine/batch_engine.h"
#include "engine/query_stats.h"
#include "model/gguf.h"
#include "model/random_checkpoint.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

struct ArchFile {
  const char* name;
  const char* path;  // under golden/arch
};
const ArchFile kArchs[] = {{"qwen3moe", "qwen3moe/qwen3moe-tiny-s101-f32.gguf"},
                           {"gpt-oss", "gpt-oss/gpt-oss-tiny-s202-f32.gguf"},
                           {"gpt-oss-mxfp4", "gpt-oss/gpt-oss-tiny-s202-mxfp4.gguf"},
                           {"qwen35", "qwen35/qwen35-tiny-s303-f32.gguf"},
                           {"qwen35moe", "qwen35moe/qwen35moe-tiny-s404-f32.gguf"}};

// A hand-made vocabulary for skipkv (its sentences end at id 7): the files have none.
CompressionVocab arch_vocab() {
  CompressionVocab v;
  v.token_text = [](int id) -> std::string { return id % 7 == 0 ? ".\n" : "w"; };
  return v;
}

Request arch_request(const std::string& method, int budget, int prompt_len, int max_new, int seed) {
  Request r;
  for (int i = 0; i < prompt_len; ++i) r.prompt_ids.push_back(3 + (i * 31 + seed * 97) % 300);
  r.decode_text = false;
  r.max_new_tokens = max_new;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  r.kv_dtype = KvDtype::f32;
  r.compression = CompressionParams::defaults(parse_method(method));
  if (method != "fullkv") {
    r.compression.budget = budget;
    r.compression.buffer = 8;
    r.compression.window = 4;
    r.compression.sinks = 2;
  }
  return r;
}

class ArchEngine : public ::testing::TestWithParam<ArchFile> {
 protected:
  void SetUp() override {
    const fs::path shared = test::shared_dir();
    if (shared.empty())
      GTEST_SKIP() << "../shared (the golden files) is not beside the repository; set "
                      "RKV_SHARED_DIR to run this test";
    model_ = Model::load(shared / "golden/arch" / GetParam().path);
    // TriAttention's statistics (Qwen3.5's partial RoPE included: its unrotated dimensions are
    // pairs of frequency 0).
    std::vector<int> text;
    for (int i = 0; i < 48; ++i) text.push_back(5 + (i * 13) % 300);
    stats_ = std::make_shared<QueryStats>(calibrate_queries(*model_, pool_, text, 16));
  }

  BatchResult alone(const Request& r) {
    BatchEngineOptions options;
    options.compression_vocab = arch_vocab();
    options.query_stats = stats_;
    BatchEngine engine(*model_, pool_, std::move(options));
    engine.submit(test::prepared_request(*model_, r));
    engine.run();
    return engine.take_results().at(0);
  }

  std::unique_ptr<Model> model_;
  ThreadPool pool_{2};
  std::shared_ptr<const QueryStats> stats_;
};

// Every method whose budget holds the whole sequence never evicts: fullkv's tokens.
TEST_P(ArchEngine, EveryMethodWithABudgetAboveTheLengthGivesFullkvsTokens) {
  const BatchResult full = alone(arch_request("fullkv", 0, 14, 24, 1));
  ASSERT_EQ(full.stop_reason, "length") << full.error;
  for (const MethodInfo& m : method_table()) {
    if (!m.compresses) continue;
    const BatchResult r = alone(arch_request(std::string(m.name), 64, 14, 24, 1));
    EXPECT_EQ(r.stop_reason, "length") << m.name << ": " << r.error;
    EXPECT_EQ(r.tokens, full.tokens) << m.name;
    EXPECT_EQ(r.compressions, 0) << m.name;
  }
}

// A compressing run holds budget + buffer entries per head of each full-attention layer (the
// cache has those layers only); the slot adds the windows and recurrent states, constant.
TEST_P(ArchEngine, ACompressedRunKeepsItsCacheLayersAtBudgetPlusBuffer) {
  const ModelConfig& c = model_->config();
  for (const char* method : {"rkv", "h2o", "snapkv", "streamingllm", "triattention"}) {
    const Request req = arch_request(method, 16, 14, 40, 2);
    const BatchResult r = alone(req);
    ASSERT_EQ(r.stop_reason, "length") << method << ": " << r.error;
    EXPECT_EQ(r.cache_capacity, 16 + 8) << method;
    EXPECT_LE(r.max_cache_entries, 16 + 8) << method;
    EXPECT_GT(r.compressions, 0) << method;
    // Each compression event compresses every cache layer, and only those.
    EXPECT_EQ(r.compressions % c.kv_layers(), 0) << method;
    // The query ring holds the observation window; triattention reads no queries.
    const int ring = std::string(method) == "triattention" ? 0 : 4;
    const KvCacheShape shape = model_->cache_shape(16 + 8, ring, KvDtype::f32);
    EXPECT_EQ(shape.layers, c.kv_layers());
    EXPECT_EQ(r.kv_bytes, KvCache::slot_bytes_for(shape)) << method;
    EXPECT_EQ(KvCache::fixed_state_bytes_for(shape),
              sizeof(float) * (2 * static_cast<std::size_t>(c.window_layers()) * c.num_kv_heads *
                                   c.sliding_window * c.head_dim +
                               c.delta_net_layers() * c.delta_net.state_floats()));
  }
}

// Requests of mixed methods and budgets in one batch, prompts prefilled in chunks beside
// decoding sequences: each gets the tokens it gets alone (its ring and state its own).
TEST_P(ArchEngine, EverySequenceOfABatchMatchesItsRunAlone) {
  struct Spec {
    const char* method;
    int budget, prompt, max_new;
  };
  std::vector<Spec> specs = {{"fullkv", 0, 12, 30},  {"rkv", 16, 30, 40},
                             {"snapkv", 20, 9, 30},  {"h2o", 16, 25, 35},
                             {"gkv", 24, 40, 24},    {"streamingllm", 12, 15, 40},
                             {"skipkv", 20, 18, 30}, {"random", 16, 20, 30}};
  specs.push_back({"triattention", 24, 10, 40});
  std::vector<std::vector<int>> expected;
  for (std::size_t i = 0; i < specs.size(); ++i)
    expected.push_back(alone(arch_request(specs[i].method, specs[i].budget, specs[i].prompt,
                                          specs[i].max_new, static_cast<int>(i)))
                           .tokens);
  BatchEngineOptions options;
  options.prefill_chunk = 16;
  options.compression_vocab = arch_vocab();
  options.query_stats = stats_;
  BatchEngine engine(*model_, pool_, std::move(options));
  std::map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < specs.size(); ++i)
    index[engine.submit(test::prepared_request(
        *model_, arch_request(specs[i].method, specs[i].budget, specs[i].prompt, specs[i].max_new,
                              static_cast<int>(i))))] = i;
  engine.run();
  const auto results = engine.take_results();
  ASSERT_EQ(results.size(), specs.size());
  for (const auto& r : results) {
    const std::size_t i = index.at(r.id);
    EXPECT_EQ(r.stop_reason, "length") << specs[i].method << ": " << r.error;
    EXPECT_EQ(r.tokens, expected[i]) << specs[i].method << " #" << i;
  }
  EXPECT_EQ(engine.peak_running(), static_cast<int>(specs.size()));
}

INSTANTIATE_TEST_SUITE_P(Golden, ArchEngine, ::testing::ValuesIn(kArchs), [](const auto& p) {
  std::string n = p.param.name;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
});

// Qwen3.5 rotates 16 of each head's 64 dimensions. TriAttention's statistics lay the head out as
// tri::half_layout says: the 8 rotated pairs (f, f + 8), then the unrotated dimensions as pairs
// (16 + g, 40 + g) of frequency 0. Checked against what the forward pass leaves in the query ring,
// with no un-rotation: an unrotated pair's post-RoPE values are its pre-RoPE ones, and a rotation
// keeps a rotated pair's modulus.
TEST(ArchTriAttention, PartialRotaryStatisticsPairTheUnrotatedDimensionsAtFrequencyZero) {
  RKV_REQUIRE_SHARED(shared);
  auto model = Model::load(shared / "golden/arch/qwen35/qwen35-tiny-s303-f32.gguf");
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.rotary_dim(), 16);
  ASSERT_EQ(c.head_dim, 64);
  EXPECT_EQ(tri::half_layout(8, 4), (std::vector<int>{0, 1, 4, 5, 2, 3, 6, 7}));
  EXPECT_EQ(tri::half_layout(6, 6), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  ThreadPool pool(1);
  std::vector<int> text;
  for (int i = 0; i < 40; ++i) text.push_back(5 + (i * 17) % 300);
  const int n = static_cast<int>(text.size());
  const QueryStats q = calibrate_queries(*model, pool, text, n);
  EXPECT_EQ(q.rotary_dim, 16);
  // The same pass, its queries read straight from the ring.
  KvCache cache(model->cache_shape(n, n, KvDtype::f32));
  std::vector<ForwardRow> rows;
  for (int i = 0; i < n; ++i) rows.push_back({&cache, text[static_cast<std::size_t>(i)], i, false});
  ForwardScratch scratch;
  model->forward(rows, scratch, pool, nullptr);
  const int D = c.head_dim, F = D / 2, Fr = c.rotary_dim() / 2, R = c.rotary_dim();
  std::vector<float> ring;
  double worst = 0.0;
  for (int l = 0; l < c.kv_layers(); ++l) {
    cache.window_queries(l, ring);
    ASSERT_EQ(cache.window_size(l), n);
    for (int h = 0; h < c.num_heads; ++h) {
      for (int f = 0; f < F; ++f) {
        double re = 0.0, im = 0.0, ab = 0.0;
        for (int t = 0; t < n; ++t) {
          const float* x = ring.data() + (static_cast<std::size_t>(h) * n + t) * D;
          const double a = f < Fr ? x[f] : x[R + (f - Fr)];
          const double b = f < Fr ? x[f + Fr] : x[R + (f - Fr) + (D - R) / 2];
          re += a;
          im += b;
          ab += std::hypot(a, b);
        }
        const std::size_t cell = q.stats.at(l, h, f);
        auto near = [&](double got, double want, const char* what) {
          const double d = std::abs(got - want);
          worst = std::max(worst, d);
          EXPECT_LE(d, 1e-5 * std::max(1.0, std::abs(want)))
              << what << " layer " << l << " head " << h << " pair " << f;
        };
        near(q.stats.abs_mean[cell], ab / n, "mean modulus");
        if (f >= Fr) {  // unrotated: the pre-RoPE pair itself
          near(q.stats.mean_re[cell], re / n, "mean re");
          near(q.stats.mean_im[cell], im / n, "mean im");
        }
      }
    }
  }
  RecordProperty("worst_difference", std::to_string(worst));
}

// A pair of frequency 0 scores a key by the expected dot product of its two dimensions, whatever
// the distance (TRIATTENTION.md 4.3's cosine at angle 0): with the mean query pair (1, 0), the
// mean modulus 1 (no magnitude term) and no other pair, the raw score is the key's first component.
TEST(ArchTriAttention, AZeroFrequencyPairScoresTheExpectedDotProduct) {
  tri::Stats stats;
  stats.layers = 1;
  stats.q_heads = 1;
  stats.freqs = 2;
  stats.mean_re = {0.0, 1.0};
  stats.mean_im = {0.0, 0.0};
  stats.abs_mean = {0.0, 1.0};
  tri::Rope rope;
  rope.omega = {0.5f, 0.0f};
  rope.offsets = tri::geometric_offsets(64);
  // Head size 4, layout pairs (0, 2) rotated and (1, 3) unrotated; keys at positions 3, 40, 900.
  const std::vector<float> keys = {0.3f,  1.5f,  -0.2f, 0.7f,  //
                                   0.9f,  -2.0f, 0.4f,  0.1f,  //
                                   -0.5f, 0.25f, 0.6f,  -1.0f};
  const std::vector<std::int32_t> positions = {3, 40, 900};
  for (bool reference : {true, false}) {
    tri::Params params;
    params.normalize_scores = false;
    params.reference_phases = reference;
    const auto scores =
        tri::raw_scores({keys.data(), positions.data(), 3}, 4, stats, 0, 0, rope, params, 1000);
    ASSERT_EQ(scores.size(), 3u);
    EXPECT_NEAR(scores[0], 1.5, 1e-6) << reference;
    EXPECT_NEAR(scores[1], -2.0, 1e-6) << reference;
    EXPECT_NEAR(scores[2], 0.25, 1e-6) << reference;
  }
}

// rkv make-model's tiny versions of the three families: the GGUF metadata it writes reads back as
// the shape's config (layer kinds, experts, window, DeltaNet sizes, partial RoPE, YaRN), the
// vocabulary loads from the same file, and --dtype mxfp4 puts the experts alone in MXFP4.
TEST(ArchMakeModel, TinyShapesReadBackAsWrittenAndRun) {
  test::TempDir dir("arch-make-model");
  for (const char* shape : {"tiny-qwen3moe", "tiny-gpt-oss", "tiny-qwen35"}) {
    SCOPED_TRACE(shape);
    const ModelConfig want = shape_config(shape);
    RandomCheckpointOptions options;
    options.shape = shape;
    options.dtype = DType::F32;
    const fs::path file = dir.path() / (std::string(shape) + ".gguf");
    write_random_gguf(file, options);
    auto model = Model::load(file);
    const ModelConfig& c = model->config();
    EXPECT_EQ(c.arch, want.arch);
    ASSERT_EQ(c.num_layers, want.num_layers);
    for (int l = 0; l < c.num_layers; ++l) EXPECT_EQ(c.layer_kind(l), want.layer_kind(l)) << l;
    EXPECT_EQ(c.moe.experts, want.moe.experts);
    EXPECT_EQ(c.moe.experts_used, want.moe.experts_used);
    EXPECT_EQ(c.moe.expert_ff, want.moe.expert_ff);
    EXPECT_EQ(c.sliding_window, want.sliding_window);
    EXPECT_EQ(c.rotary_dim(), want.rotary_dim());
    EXPECT_EQ(c.rope_scaling.yarn, want.rope_scaling.yarn);
    EXPECT_EQ(c.delta_net.conv_channels(), want.delta_net.conv_channels());
    EXPECT_EQ(c.delta_net.head_v_dim, want.delta_net.head_v_dim);
    const Tokenizer tok = Tokenizer::load(file);
    const std::vector<int> prompt = tok.encode("Once upon a time");
    ASSERT_FALSE(prompt.empty());
    KvCache cache(model->cache_shape(32, 0));
    ThreadPool pool(2);
    ForwardScratch scratch;
    std::vector<ForwardRow> rows;
    for (std::size_t i = 0; i < prompt.size(); ++i)
      rows.push_back({&cache, prompt[i], static_cast<int>(i), i + 1 == prompt.size()});
    std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
    model->forward(rows, scratch, pool, logits.data());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
  RandomCheckpointOptions mx;
  mx.shape = "tiny-gpt-oss";
  mx.dtype = DType::MXFP4;
  const fs::path file = dir.path() / "tiny-gpt-oss-mxfp4.gguf";
  write_random_gguf(file, mx);
  const GgufFile g(file);
  for (const GgufTensor& t : g.tensors()) {
    const bool expert = t.name.find("_exps.weight") != std::string::npos;
    const bool bias = t.name.find(".bias") != std::string::npos;
    if (expert) {
      EXPECT_EQ(t.type->name, "MXFP4") << t.name;
    } else if (bias) {
      EXPECT_EQ(t.type->name, "F32") << t.name;
    } else if (t.dims.size() == 2 && t.name.find("ffn_gate_inp") == std::string::npos) {
      EXPECT_EQ(t.type->name, "BF16") << t.name;
    }
  }
  EXPECT_NO_THROW(Model::load(file));
}

}  // namespace
}  // namespace rkv
