// TriAttention in the engine (issue 35): it compresses once per decode step for every layer, after
// the forward pass, when the cache has grown to budget + buffer; it keeps the whole prompt and
// the generated entries an independent re-derivation of its score ranks highest; a batch mixing
// it with per-layer methods gives every request the tokens it gets alone; and a request it cannot
// serve is refused by Engine::prepare with the field and the command to run.
//
// The selection itself is checked against the reference's own outputs by the golden cases
// (test_compression_golden.cpp); here the score is re-derived in its post-RoPE form
// (TRIATTENTION.md 4.3, "Equivalent post-RoPE form"), in double, which shares no code with the
// engine's un-rotating float32-phase implementation: what this checks is the wiring (which keys,
// which positions, which round start, which prompt, every layer at once).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "batch_test_util.h"
#include "compress/triattention.h"
#include "compress/whole_pass.h"
#include "core/error.h"
#include "core/rng.h"
#include "engine/batch_engine.h"
#include "engine/kv_memory.h"
#include "engine/query_stats.h"
#include "rkv/engine.h"
#include "rkv/error.h"
#include "test_util.h"

namespace rkv {
namespace {

// Statistics of random queries with a per-(head, frequency) centre, so that frequencies differ
// in concentration as real models' do.
std::shared_ptr<const QueryStats> synthetic_stats(const ModelConfig& c, std::uint64_t seed) {
  const int tokens = 64, d = c.head_dim;
  Rng rng(seed);
  const auto uniform = [&] { return static_cast<double>(rng.next() % 100000) / 100000.0 - 0.5; };
  std::vector<float> centre(static_cast<std::size_t>(c.num_layers) * c.num_heads * d);
  for (float& x : centre) x = static_cast<float>(4.0 * uniform());
  std::vector<float> q(static_cast<std::size_t>(c.num_layers) * c.num_heads * tokens * d);
  for (int l = 0; l < c.num_layers; ++l)
    for (int h = 0; h < c.num_heads; ++h)
      for (int t = 0; t < tokens; ++t)
        for (int i = 0; i < d; ++i)
          q[((static_cast<std::size_t>(l) * c.num_heads + h) * tokens + t) * d + i] =
              centre[(static_cast<std::size_t>(l) * c.num_heads + h) * d + i] +
              static_cast<float>(2.0 * uniform());
  auto s = std::make_shared<QueryStats>();
  s->stats = tri::calibrate(q, c.num_layers, c.num_heads, tokens, d);
  s->tokens = tokens;
  return s;
}

// The per_head score of every candidate (spec 4-5) in the post-RoPE form:
// S_trig(i, o) = Re sum_f qbar_f conj(k_f) e^{i (R + delta_o) w_f}, S_norm(i) = sum_f
// (qabs_f - |qbar_f|) |k_f| (a rotation keeps |k_f|), mean over offsets, z-scored per (layer,
// query head) over the candidates, max over each KV head's query group, mean over layers.
std::vector<double> per_head_score(const KvCache& cache, const tri::Stats& st,
                                   const std::vector<float>& omega, int kv_head, int prefix,
                                   std::int64_t round_start, int offset_max) {
  const KvCacheShape& shape = cache.shape();
  const int F = shape.head_dim / 2, G = shape.q_heads / shape.kv_heads;
  const int n = cache.length(0) - prefix;
  std::vector<double> total(static_cast<std::size_t>(n), 0.0);
  for (int l = 0; l < shape.layers; ++l) {
    const float* keys = cache.keys(l, kv_head).f32();
    std::vector<double> best(static_cast<std::size_t>(n), -HUGE_VAL);
    for (int j = kv_head * G; j < (kv_head + 1) * G; ++j) {
      std::vector<double> raw(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) {
        const float* k = keys + static_cast<std::size_t>(prefix + i) * shape.head_dim;
        double sum = 0.0;
        int offsets = 0;
        for (std::int64_t delta = 1; delta <= offset_max; delta *= 2, ++offsets) {
          for (int f = 0; f < F; ++f) {
            const std::size_t c = st.at(l, j, f);
            const double a = st.mean_re[c] * k[f] + st.mean_im[c] * k[f + F];  // qbar conj(k)
            const double b = st.mean_im[c] * k[f] - st.mean_re[c] * k[f + F];
            const double angle = static_cast<double>(round_start + delta) * omega[f];
            sum += a * std::cos(angle) - b * std::sin(angle);
          }
        }
        double norm = 0.0;
        for (int f = 0; f < F; ++f) {
          const std::size_t c = st.at(l, j, f);
          norm += (st.abs_mean[c] - std::hypot(st.mean_re[c], st.mean_im[c])) *
                  std::hypot(k[f], k[f + F]);
        }
        raw[static_cast<std::size_t>(i)] = sum / offsets + norm;
      }
      double mean = 0.0, var = 0.0;
      for (double x : raw) mean += x / n;
      for (double x : raw) var += (x - mean) * (x - mean) / n;
      const double sd = std::max(std::sqrt(var), 1e-6);
      for (int i = 0; i < n; ++i)
        best[static_cast<std::size_t>(i)] = std::max(
            best[static_cast<std::size_t>(i)], (raw[static_cast<std::size_t>(i)] - mean) / sd);
    }
    for (int i = 0; i < n; ++i)
      total[static_cast<std::size_t>(i)] += best[static_cast<std::size_t>(i)] / shape.layers;
  }
  return total;
}

class TriAttentionEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::self_made_model());
    stats_ = synthetic_stats(model_->config(), 11);
    EngineOptions o;
    o.query_stats = stats_;
    preparer_ = std::make_unique<Engine>(*model_, nullptr, pool_, o);
  }

  Request request(const std::string& method, int prompt_len, int max_new, int seed) const {
    Request r = test::greedy_ids_request(prompt_len, max_new, seed);
    r.compression = CompressionParams::defaults(method);
    return r;
  }

  BatchResult alone(const Request& r) {
    BatchEngineOptions o;
    o.query_stats = stats_;
    BatchEngine engine(*model_, pool_, o);
    engine.submit(preparer_->prepare(r));
    engine.run();
    return engine.take_results().at(0);
  }

  std::unique_ptr<Model> model_;
  std::shared_ptr<const QueryStats> stats_;
  ThreadPool pool_{2};
  std::unique_ptr<Engine> preparer_;
};

// The original positions each KV head keeps in a compression event.
std::vector<std::set<std::int32_t>> kept_positions(const CompressionEvent& e) {
  std::vector<std::set<std::int32_t>> out;
  for (std::size_t h = 0; h < e.selection->kept.size(); ++h) {
    std::set<std::int32_t> kept;
    for (std::int32_t i : e.selection->kept[h])
      kept.insert(e.cache->positions(e.layer, static_cast<int>(h))[i]);
    out.push_back(std::move(kept));
  }
  return out;
}

// What one compression event showed: the step, the layer, the entries before, and the kept
// positions of every KV head.
struct Seen {
  std::int64_t step;
  int layer, n_before;
  std::vector<std::set<std::int32_t>> kept;
};

TEST_F(TriAttentionEngine, CompressesEveryLayerAfterThePassAtBudgetPlusBuffer) {
  const int prompt = 20, budget = 40, buffer = 8, max_new = 70;
  const int layers = model_->config().num_layers;
  Request r = request("triattention", prompt, max_new, 1);
  r.compression.budget = budget;
  r.compression.buffer = buffer;
  std::vector<Seen> seen;
  int checked = 0;
  r.on_compression = [&](const CompressionEvent& e) {
    Seen s{e.step, e.layer, e.n_before, kept_positions(e)};
    // Its trace fields (MethodInfo::trace_fields): each head's combined score of the generated
    // entries, nothing else.
    ASSERT_NE(e.diagnostics, nullptr);
    ASSERT_EQ(e.diagnostics->heads.size(), e.selection->kept.size());
    for (const HeadDiagnostics& d : e.diagnostics->heads) {
      EXPECT_EQ(d.final_score.size(), static_cast<std::size_t>(e.n_before - prompt));
      EXPECT_TRUE(d.importance.empty() && d.attention.empty() && d.top_k.empty());
    }
    // Once per compression (layer 0): the independent per_head ranking of the generated
    // entries, where the cut is clear of the two implementations' differences.
    if (e.layer == 0) {
      for (int h = 0; h < e.cache->shape().kv_heads; ++h) {
        const std::vector<double> score = per_head_score(
            *e.cache, stats_->stats, model_->rope_frequencies(), h, prompt, e.step, 65536);
        std::vector<int> order(score.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
        const int keep = budget - prompt;
        if (score[order[keep - 1]] - score[order[keep]] < 1e-3) continue;
        std::set<std::int32_t> expected;
        for (int p = 0; p < prompt; ++p) expected.insert(p);
        for (int k = 0; k < keep; ++k) expected.insert(e.cache->positions(0, h)[prompt + order[k]]);
        EXPECT_EQ(s.kept[static_cast<std::size_t>(h)], expected)
            << "step " << e.step << " head " << h;
        ++checked;
      }
    }
    seen.push_back(std::move(s));
  };
  const BatchResult result = alone(r);
  ASSERT_EQ(result.stop_reason, "length");
  EXPECT_EQ(result.cache_capacity, budget + buffer);
  EXPECT_LE(result.max_cache_entries, budget + buffer);
  // The cache reaches budget + buffer entries after the decode step that processes token
  // number 48, then every `buffer` tokens; the last generated token is never processed.
  std::vector<std::int64_t> steps;
  for (std::int64_t t = budget + buffer; t <= prompt + max_new - 1; t += buffer) steps.push_back(t);
  ASSERT_EQ(seen.size(), steps.size() * layers);
  EXPECT_EQ(result.compressions, static_cast<std::int64_t>(seen.size()));
  for (std::size_t i = 0; i < seen.size(); ++i) {
    const Seen& s = seen[i];
    EXPECT_EQ(s.step, steps[i / layers]);
    EXPECT_EQ(s.layer, static_cast<int>(i % layers));
    EXPECT_EQ(s.n_before, budget + buffer);
    for (const auto& kept : s.kept) {
      EXPECT_EQ(kept.size(), static_cast<std::size_t>(budget));
      for (int p = 0; p < prompt; ++p) EXPECT_TRUE(kept.count(p)) << "prompt position " << p;
    }
    // per_head: one set per KV head, the same in every layer of the compression.
    if (s.layer > 0) {
      EXPECT_EQ(s.kept, seen[i - 1].kept);
    }
  }
  EXPECT_GT(checked, 0) << "no cut was clear enough to compare";
}

TEST_F(TriAttentionEngine, PerLayerSelectionDecidesEachLayerAloneAndUnionOneSetForAll) {
  const auto run = [&](TriSelection selection) {
    Request r = request("triattention", 12, 40, 2);
    r.compression.budget = 24;
    r.compression.buffer = 4;
    r.compression.selection = selection;
    std::vector<Seen> seen;
    r.on_compression = [&](const CompressionEvent& e) {
      Seen s{e.step, e.layer, e.n_before, kept_positions(e)};
      seen.push_back(std::move(s));
    };
    alone(r);
    return seen;
  };
  const std::vector<Seen> unions = run(TriSelection::union_all);
  ASSERT_FALSE(unions.empty());
  for (const Seen& s : unions)
    for (const auto& kept : s.kept) EXPECT_EQ(kept, s.kept[0]);  // every head, every layer
  const std::vector<Seen> per_layer = run(TriSelection::per_layer_perhead);
  ASSERT_FALSE(per_layer.empty());
  bool differs = false;
  for (std::size_t i = 1; i < per_layer.size(); ++i)
    if (per_layer[i].step == per_layer[i - 1].step && per_layer[i].kept != per_layer[i - 1].kept)
      differs = true;
  EXPECT_TRUE(differs) << "per_layer_perhead gave every layer the same sets";
}

TEST_F(TriAttentionEngine, ABf16CacheKeepsWhatTheF32CacheKeeps) {
  // The score reads float32 keys: a bf16 cache converts them. Same tokens for a short run (the
  // model's f32 weights, bf16 keys differ in the last bits only).
  Request r = request("triattention", 16, 30, 3);
  r.compression.budget = 32;
  r.compression.buffer = 4;
  const BatchResult f32 = alone(r);
  r.kv_dtype = KvDtype::bf16;
  const BatchResult bf16 = alone(r);
  EXPECT_EQ(bf16.compressions, f32.compressions);
  EXPECT_GT(bf16.compressions, 0);
  EXPECT_LE(bf16.max_cache_entries, 36);
}

TEST_F(TriAttentionEngine, ABatchMixingMethodsGivesEachItsTokensAlone) {
  std::vector<Request> requests = {request("triattention", 14, 60, 1), request("rkv", 20, 50, 2),
                                   request("fullkv", 9, 40, 3), request("triattention", 25, 45, 4)};
  requests[0].compression.budget = 30;
  requests[0].compression.buffer = 6;
  requests[1].compression.budget = 24;
  requests[1].compression.buffer = 8;
  requests[1].compression.window = 4;
  requests[3].compression.budget = 40;
  requests[3].compression.buffer = 8;
  requests[3].compression.selection = TriSelection::union_all;
  std::vector<BatchResult> expected;
  for (const Request& r : requests) expected.push_back(alone(r));
  BatchEngineOptions o;
  o.query_stats = stats_;
  o.prefill_chunk = 16;  // prompts prefilled over several steps, beside decoding sequences
  BatchEngine engine(*model_, pool_, o);
  std::map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < requests.size(); ++i)
    index[engine.submit(preparer_->prepare(requests[i]))] = i;
  engine.run();
  const auto results = engine.take_results();
  ASSERT_EQ(results.size(), requests.size());
  for (const auto& r : results) {
    const std::size_t i = index.at(r.id);
    EXPECT_EQ(r.tokens, expected[i].tokens) << i;
    EXPECT_EQ(r.compressions, expected[i].compressions) << i;
  }
  EXPECT_GT(expected[0].compressions, 0);
  EXPECT_GT(expected[3].compressions, 0);
  EXPECT_EQ(engine.peak_running(), static_cast<int>(requests.size()));
}

TEST_F(TriAttentionEngine, PrepareRefusesWhatItCannotServe) {
  // No statistics loaded: the error names the field and the command that computes them.
  Engine bare(*model_, nullptr, pool_);
  Request r = request("triattention", 10, 20, 1);
  r.compression.budget = 32;
  try {
    bare.prepare(r);
    FAIL() << "a triattention request without statistics was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.field(), "kv");
    EXPECT_NE(std::string(e.what()).find("rkv calibrate"), std::string::npos) << e.what();
  }
  // A prompt that the budget cannot hold whole (the reference would drop every generated token
  // at every compression, TRIATTENTION.md 10.3).
  r.compression.budget = 10;
  try {
    preparer_->prepare(r);
    FAIL() << "a prompt of the budget's size was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.field(), "kv");
    EXPECT_NE(std::string(e.what()).find("larger than the prompt (10 tokens)"), std::string::npos)
        << e.what();
  }
  r.compression.budget = 11;
  EXPECT_NO_THROW(preparer_->prepare(r));
}

// The calibration block of a golden case as the engine's statistics.
std::shared_ptr<QueryStats> case_stats(const nlohmann::json& cal) {
  using V3 = std::vector<std::vector<std::vector<double>>>;
  const auto re = cal.at("q_mean_real").get<V3>();
  const auto im = cal.at("q_mean_imag").get<V3>();
  const auto ab = cal.at("q_abs_mean").get<V3>();
  auto stats = std::make_shared<QueryStats>();
  tri::Stats& st = stats->stats;
  st.layers = static_cast<int>(re.size());
  st.q_heads = static_cast<int>(re[0].size());
  st.freqs = static_cast<int>(re[0][0].size());
  for (int l = 0; l < st.layers; ++l)
    for (int j = 0; j < st.q_heads; ++j)
      for (int f = 0; f < st.freqs; ++f) {
        st.mean_re.push_back(re[l][j][f]);
        st.mean_im.push_back(im[l][j][f]);
        st.abs_mean.push_back(ab[l][j][f]);
      }
  if (cal.contains("sampled_heads"))
    for (const auto& lj : cal.at("sampled_heads"))
      st.sampled.emplace_back(lj.at(0).get<int>(), lj.at(1).get<int>());
  return stats;
}

// Every TriAttention golden case file with `field` among its inputs.
std::vector<nlohmann::json> golden_cases(const std::filesystem::path& shared,
                                         const std::string& field) {
  std::vector<nlohmann::json> out;
  for (const auto& entry : std::filesystem::directory_iterator(shared / "golden" / "compression")) {
    if (entry.path().filename().string().rfind("triattention_", 0) != 0) continue;
    std::ifstream in(entry.path());
    nlohmann::json gc = nlohmann::json::parse(in);
    if (gc.at("inputs").contains(field)) out.push_back(std::move(gc));
  }
  return out;
}

// The case's own position lists of one selection as sets: [kv_heads][n], or [layers][kv_heads][n]
// for per_layer_perhead.
std::set<std::int32_t> expected_set(const nlohmann::json& positions, bool per_layer, int l, int h) {
  return (per_layer ? positions.at(l).at(h) : positions.at(h)).get<std::set<std::int32_t>>();
}

// One compression of the reference (the golden single-call cases: a cache, its positions, the
// prompt and round start) planned by the method record, as the engine plans it (the post-RoPE
// form of the score), in every selection mode the case holds: the reference's kept sets.
TEST(TriAttentionGolden, TheRecordsPlanKeepsTheReferenceSetsInEveryMode) {
  RKV_REQUIRE_SHARED(shared);
  using nlohmann::json;
  int compared = 0;
  for (const json& gc : golden_cases(shared, "key")) {
    SCOPED_TRACE(gc.at("case_id").get<std::string>());
    const json& in = gc.at("inputs");
    const auto key = in.at("key").get<std::vector<std::vector<std::vector<std::vector<float>>>>>();
    const auto positions = in.at("positions").get<std::vector<std::vector<std::int32_t>>>();
    const auto stats = case_stats(in.at("calibration"));
    const std::vector<float> omega = gc.at("rope").at("omega").get<std::vector<float>>();
    ASSERT_EQ(gc.at("rope").at("attention_scaling").get<double>(), 1.0);
    compress::SequenceView view;
    view.layers = static_cast<int>(key.size());
    view.kv_heads = static_cast<int>(key[0].size());
    view.n_all = static_cast<int>(key[0][0].size());
    view.head_dim = static_cast<int>(key[0][0][0].size());
    view.q_heads = stats->stats.q_heads;
    view.prefix = in.at("prefix_len").get<int>();
    view.round_start = in.at("round_start").get<std::int64_t>();
    view.query_stats = &stats->stats;
    view.rope_frequencies = omega;
    std::vector<std::vector<float>> flat;
    for (const auto& layer : key)
      for (const auto& head : layer) {
        flat.emplace_back();
        for (const auto& row : head) flat.back().insert(flat.back().end(), row.begin(), row.end());
      }
    view.keys.resize(key.size());
    for (int l = 0; l < view.layers; ++l)
      for (int h = 0; h < view.kv_heads; ++h)
        view.keys[l].push_back({flat[static_cast<std::size_t>(l * view.kv_heads + h)].data(),
                                positions[h].data(), view.n_all});
    const json& p = gc.at("params");
    CompressionParams params = CompressionParams::defaults("triattention");
    params.budget = p.at("budget").get<int>();
    params.normalize = p.at("normalize_scores").get<bool>();
    params.offset_max = p.at("offset_max_length").get<int>();
    ASSERT_EQ(p.at("score_aggregation"), "mean");
    std::map<std::string, const json*> modes = {
        {p.at("selection_mode").get<std::string>(), &gc.at("expected")}};
    for (const auto& [mode, e] : gc.at("expected").at("other_modes_same_inputs").items())
      modes[mode] = &e;
    for (const auto& [mode, expected] : modes) {
      SCOPED_TRACE(mode);
      params.selection = parse_selection(mode);
      const compress::SequencePlan plan = compress::plan_whole_pass(view, params);
      ASSERT_TRUE(plan.compressed);
      const bool per_layer = params.selection == TriSelection::per_layer_perhead;
      for (int l = 0; l < view.layers; ++l)
        for (int h = 0; h < view.kv_heads; ++h) {
          std::set<std::int32_t> kept;
          for (std::int32_t i : plan.kept[l][h]) kept.insert(positions[h][i]);
          EXPECT_EQ(kept, expected_set(expected->at("kept_positions"), per_layer, l, h))
              << "layer " << l << " head " << h;
          ++compared;
        }
    }
  }
  EXPECT_GT(compared, 0) << "no TriAttention single-call case in ../shared/golden/compression";
}

// The reference's own rounds (the golden round cases: tokens streamed through its patched
// forward, slack-triggered compressions) replayed through what the engine runs: a KvMemory whose
// cache takes the case's keys one token at a time, begin_decode_step / end_decode_step around
// each, the method record's trigger and plan. Every round's kept position sets and the final
// cache must be the reference's.
TEST(TriAttentionGolden, KvMemoryReplaysTheReferenceRounds) {
  RKV_REQUIRE_SHARED(shared);
  using nlohmann::json;
  int replayed = 0;
  for (const json& gc : golden_cases(shared, "stream_key")) {
    SCOPED_TRACE(gc.at("case_id").get<std::string>());
    const json& p = gc.at("params");
    const json& in_ = gc.at("inputs");
    const json& cal = in_.at("calibration");
    const auto stream =
        in_.at("stream_key").get<std::vector<std::vector<std::vector<std::vector<float>>>>>();
    const int layers = static_cast<int>(stream.size()),
              kv_heads = static_cast<int>(stream[0].size());
    const int tokens = static_cast<int>(stream[0][0].size()),
              d = static_cast<int>(stream[0][0][0].size());
    const int prompt = in_.at("prompt_len").get<int>();
    const auto stats = case_stats(cal);
    const tri::Stats& st = stats->stats;
    const std::vector<float> omega = gc.at("rope").at("omega").get<std::vector<float>>();
    ASSERT_EQ(gc.at("rope").at("attention_scaling").get<double>(), 1.0);  // rkv's RoPE

    CompressionParams params = CompressionParams::defaults("triattention");
    params.budget = p.at("budget").get<int>();
    params.buffer = p.at("divide_length").get<int>();
    params.normalize = p.at("normalize_scores").get<bool>();
    params.offset_max = p.at("offset_max_length").get<int>();
    params.selection = parse_selection(p.at("selection_mode").get<std::string>());
    ASSERT_TRUE(p.at("use_slack_trigger").get<bool>() && p.at("count_prompt_tokens").get<bool>());
    ASSERT_EQ(p.at("score_aggregation"), "mean");

    KvMemory memory(params, {}, {}, ModelCalibration{stats, omega});
    KvCacheShape shape;
    shape.layers = layers;
    shape.kv_heads = kv_heads;
    shape.q_heads = st.q_heads;
    shape.head_dim = d;
    shape.capacity = params.budget + params.buffer;
    memory.allocate(shape, prompt);
    // Per compression (round), per layer: the kept position sets of every KV head.
    std::vector<std::vector<std::vector<std::set<std::int32_t>>>> rounds;
    memory.set_listener([&](const CompressionEvent& e) {
      if (e.layer == 0) rounds.emplace_back();
      rounds.back().push_back(kept_positions(e));
    });
    std::vector<float> k(static_cast<std::size_t>(kv_heads) * d), v(k.size(), 0.0f);
    const auto append = [&](int t) {
      for (int l = 0; l < layers; ++l) {
        for (int h = 0; h < kv_heads; ++h)
          std::copy(stream[l][h][t].begin(), stream[l][h][t].end(), k.begin() + h * d);
        memory.cache_for_appends()->append(l, k.data(), v.data(), t);
      }
    };
    for (int t = 0; t < prompt; ++t) append(t);
    memory.compress_all_layers(prompt, nullptr);  // a prompt is never compressed
    for (int t = prompt; t < tokens; ++t) {
      memory.begin_decode_step(0, t);
      append(t);
      memory.end_decode_step(nullptr);
    }
    const json& expected = gc.at("expected");
    const bool per_layer = params.selection == TriSelection::per_layer_perhead;
    const auto sets_at = [&](const json& positions, int l, int h) {
      return expected_set(positions, per_layer, l, h);
    };
    ASSERT_EQ(rounds.size(), expected.at("rounds").size());
    for (std::size_t r = 0; r < rounds.size(); ++r) {
      ASSERT_EQ(rounds[r].size(), static_cast<std::size_t>(layers));
      for (int l = 0; l < layers; ++l)
        for (int h = 0; h < kv_heads; ++h)
          EXPECT_EQ(rounds[r][l][h], sets_at(expected.at("rounds")[r].at("kept_positions"), l, h))
              << "round " << r << " layer " << l << " head " << h;
    }
    const KvCache& cache = memory.cache();
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < kv_heads; ++h) {
        const std::int32_t* pos = cache.positions(l, h);
        EXPECT_EQ(std::set<std::int32_t>(pos, pos + cache.length(l)),
                  sets_at(expected.at("final_cache_positions"), l, h));
      }
    EXPECT_EQ(memory.compressions(), static_cast<std::int64_t>(rounds.size()) * layers);
    ++replayed;
  }
  EXPECT_GT(replayed, 0) << "no TriAttention round case in ../shared/golden/compression";
}

TEST(TriAttentionMethod, IsAWholePassRecordThatCompressLayerRefuses) {
  const MethodInfo& info = method_info("triattention");
  EXPECT_EQ(info.timing, Timing::whole_pass);
  EXPECT_TRUE(info.needs.query_stats);
  EXPECT_TRUE(info.pins_prompt);
  // The paper's runs (TRIATTENTION.md 7).
  EXPECT_EQ(info.defaults.budget, 2048);
  EXPECT_EQ(info.defaults.buffer, 128);
  EXPECT_EQ(info.defaults.selection, TriSelection::per_head);
  EXPECT_TRUE(info.defaults.normalize);
  EXPECT_EQ(info.defaults.offset_max, 65536);
  CompressionParams p = CompressionParams::defaults("triattention");
  p.set("selection", "union");
  EXPECT_EQ(p.selection, TriSelection::union_all);
  EXPECT_THROW(p.set("selection", "per_layer"), Error);
  p.offset_max = 0;
  EXPECT_THROW(p.validate(), Error);
  p.offset_max = 4;
  std::vector<float> keys(16 * 8, 0.5f);
  LayerView view;
  view.q_heads = 2;
  view.kv_heads = 1;
  view.head_dim = 8;
  view.n_all = 16;
  view.keys = {keys.data()};
  EXPECT_THROW(compress_layer(view, p), Error);
}

}  // namespace
}  // namespace rkv
