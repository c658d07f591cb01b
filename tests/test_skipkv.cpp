// SkipKV's sentence-level eviction (ALGORITHMS.md 5) with hand-worked expectations: the
// parameters, segmentation of known token streams, penalties of constructed embeddings, the
// pure policy evicting a whole redundant sentence before any other token (found from each
// entry's stored position, per head), and the same through KvMemory on a hand-filled cache and
// on a golden checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "batch_test_util.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/kv_memory.h"
#include "engine/sentence_tracker.h"
#include "model/model.h"
#include "rkv/compression.h"
#include "test_util.h"

namespace rkv {
namespace {

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no rkv::Error thrown (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---- parameters ---------------------------------------------------------------------------------

TEST(SkipKvParams, PresetDefaultsAndTable) {
  const CompressionParams p = CompressionParams::defaults(Method::skipkv);
  EXPECT_EQ(p.method, Method::skipkv);
  EXPECT_FLOAT_EQ(p.sigma, 0.1f);
  EXPECT_FLOAT_EQ(p.tau, 0.95f);
  EXPECT_EQ(p.window, 8);
  EXPECT_EQ(p.kernel, 7);
  EXPECT_EQ(p.delimiters, (std::vector<std::string>{"\n", ".\n", ")\n", "\n\n", ".\n\n", ")\n\n"}));
  EXPECT_EQ(p.keywords, (std::vector<std::string>{"Wait", "Alternatively", "again"}));
  EXPECT_NO_THROW(p.validate());
  EXPECT_EQ(parse_method("skipkv"), Method::skipkv);
  EXPECT_EQ(method_name(Method::skipkv), "skipkv");
  EXPECT_TRUE(method_info(Method::skipkv).needs.positions);

  std::set<std::string> flags;
  for (const auto& info : compression_param_table()) flags.insert(std::string(info.flag));
  for (const char* f : {"--kv-tau", "--kv-sigma", "--kv-delimiters", "--kv-keywords"})
    EXPECT_TRUE(flags.count(f)) << f;

  const auto methods = nlohmann::json::parse(methods_json());
  bool found = false;
  for (const auto& m : methods) {
    if (m["name"] != "skipkv") continue;
    found = true;
    EXPECT_EQ(m["defaults"]["tau"], 0.95);
    EXPECT_EQ(m["defaults"]["sigma"], 0.1);
    EXPECT_EQ(m["defaults"]["keywords"][0], "Wait");
    EXPECT_EQ(m["defaults"]["delimiters"][3], "\n\n");
    EXPECT_TRUE(m["needs"]["positions"]);
  }
  EXPECT_TRUE(found);
}

TEST(SkipKvParams, SetListsWithEscapesAndValidate) {
  CompressionParams p = CompressionParams::defaults(Method::skipkv);
  p.set("delimiters", "\\n,.\\n\\n,\\,,a\\\\b");
  EXPECT_EQ(p.delimiters, (std::vector<std::string>{"\n", ".\n\n", ",", "a\\b"}));
  p.set("keywords", "Hmm,But wait");
  EXPECT_EQ(p.keywords, (std::vector<std::string>{"Hmm", "But wait"}));
  p.set("tau", "0.99");
  p.set("sigma", "0.2");
  EXPECT_FLOAT_EQ(p.tau, 0.99f);
  EXPECT_FLOAT_EQ(p.sigma, 0.2f);
  EXPECT_NO_THROW(p.validate());
  const auto j = nlohmann::json::parse(p.to_json());
  EXPECT_EQ(j["delimiters"][1], ".\n\n");
  EXPECT_EQ(j["tau"], 0.99);

  expect_error([&] { p.set("delimiters", "\\q"); }, "escapes");
  expect_error([&] { p.set("delimiters", "a\\"); }, "trailing backslash");
  struct Bad {
    std::function<void(CompressionParams&)> change;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {[](auto& q) { q.tau = 1.5f; }, "kv tau"},
      {[](auto& q) { q.tau = -0.1f; }, "kv tau"},
      {[](auto& q) { q.sigma = 1.1f; }, "kv sigma"},
      {[](auto& q) { q.sigma = std::nanf(""); }, "kv sigma"},
      {[](auto& q) { q.delimiters.clear(); }, "kv delimiters must list"},
      {[](auto& q) { q.set("delimiters", "\\n,,x"); }, "empty text"},
      {[](auto& q) { q.set("keywords", ""); }, "kv keywords"},
      {[](auto& q) { q.keywords = std::vector<std::string>(300, "x"); }, "kv keywords must list"},
  };
  for (const auto& b : bad) {
    CompressionParams q = CompressionParams::defaults(Method::skipkv);
    b.change(q);
    expect_error([&] { q.validate(); }, b.needle);
  }
}

// ---- segmentation -------------------------------------------------------------------------------

struct Token {
  std::string text;
  bool delimiter;
};

TEST(SentenceTracker, SegmentsAKnownTokenStream) {
  SentenceTracker t({"\n", ".\n", "\n\n"}, {"Wait", "Alternatively", "again"}, 0.95f, true);
  // Positions start at 10 (a 10-token prompt). Consecutive delimiters (".\n", "\n") merge; a
  // keyword split over two tokens ("Alter" + "natively") still counts; "Again" does not
  // (case-sensitive); "against" contains "again" (substring, as specified).
  const std::vector<Token> stream = {
      {"First", false},   {" step", false},    {".\n", true},   {"\n", true},    // 10-13
      {"Wait", false},    {",", false},        {" no", false},  {"\n", true},    // 14-17
      {"Alter", false},   {"natively", false}, {" try", false}, {"\n\n", true},  // 18-21
      {"Again", false},   {" fine", false},    {"\n", true},                     // 22-24
      {"against", false}, {"\n", true},                                          // 25-26
      {"open", false},                                                           // 27
  };
  for (std::size_t i = 0; i < stream.size(); ++i) {
    EXPECT_EQ(t.push_token(static_cast<std::int32_t>(10 + i), stream[i].text), stream[i].delimiter)
        << i;
    EXPECT_EQ(t.last_is_delimiter(), stream[i].delimiter);
  }
  const auto& s = t.sentences();
  ASSERT_EQ(s.size(), 6u);
  const std::vector<std::pair<int, int>> spans = {{10, 13}, {14, 17}, {18, 21},
                                                  {22, 24}, {25, 26}, {27, 27}};
  const std::vector<bool> non_exec = {false, true, true, false, true, false};
  for (std::size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].begin, spans[i].first) << i;
    EXPECT_EQ(s[i].end, spans[i].second) << i;
    EXPECT_EQ(s[i].non_execution, non_exec[i]) << i;
    EXPECT_EQ(s[i].complete, i + 1 < s.size()) << i;  // the last one is still open
  }
  EXPECT_EQ(t.non_execution_count(), 3);
}

TEST(SentenceTracker, LeadingDelimitersAndTheOpenSentencesLabel) {
  SentenceTracker t({"\n"}, {"Wait"}, 0.95f, false);
  t.push_token(0, "\n");  // a leading delimiter run is a sentence of its own
  t.push_token(1, "\n");
  t.push_token(2, "W");
  EXPECT_EQ(t.non_execution_count(), 0);
  t.push_token(3, "ait");  // the open sentence is counted as soon as its text has a keyword
  EXPECT_EQ(t.non_execution_count(), 1);
  t.push_token(4, " Wait");  // counted once per sentence
  EXPECT_EQ(t.non_execution_count(), 1);
  ASSERT_EQ(t.sentences().size(), 2u);
  EXPECT_EQ(t.sentences()[0].end, 1);
  EXPECT_EQ(t.sentences()[1].begin, 2);
  expect_error([&] { t.push_token(4, "x"); }, "positions must increase");
  // Without embeddings no penalties are kept.
  EXPECT_TRUE(t.position_penalty().empty());
}

// ---- penalties ----------------------------------------------------------------------------------

// Five sentence embeddings (dim 3) with known cosines:
//   cos(v0, v2) = 1 / sqrt(1.01)           = 0.995037
//   cos(v0, v4) = 1 / sqrt(1.0025)         = 0.998752
//   cos(v1, v3) = 1 / sqrt(1.04)           = 0.980581
//   cos(v2, v4) = 1.005 / sqrt(1.01 * 1.0025) = 0.998758
//   every other pair < 0.11.
const std::vector<float> kEmbeddings = {1, 0, 0, 0, 1, 0, 1, 0.1f, 0, 0, 1, 0.2f, 1, 0.05f, 0};

TEST(SentencePenalties, HandWorkedCosines) {
  const double c02 = 1 / std::sqrt(1.01), c04 = 1 / std::sqrt(1.0025), c13 = 1 / std::sqrt(1.04);
  const double c24 = 1.005 / std::sqrt(1.01 * 1.0025);
  EXPECT_NEAR(sentence_cosine(&kEmbeddings[0], &kEmbeddings[6], 3), c02, 1e-6);

  // tau 0.95: the earlier sentence of each similar pair gets the largest cosine with a later one.
  auto p = sentence_penalties(kEmbeddings, 5, 3, 0.95f);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_NEAR(p[0], std::max(c02, c04), 1e-6);
  EXPECT_NEAR(p[1], c13, 1e-6);
  EXPECT_NEAR(p[2], c24, 1e-6);
  EXPECT_EQ(p[3], 0.0f);  // no later sentence is similar
  EXPECT_EQ(p[4], 0.0f);  // the last sentence is never penalised
  // tau 0.99: (1, 3) at 0.98 no longer counts.
  p = sentence_penalties(kEmbeddings, 5, 3, 0.99f);
  EXPECT_NEAR(p[0], c04, 1e-6);
  EXPECT_EQ(p[1], 0.0f);
  EXPECT_NEAR(p[2], c24, 1e-6);
  // A zero embedding is similar to nothing (no NaN).
  const std::vector<float> zero = {0, 0, 0, 0, 0, 0};
  EXPECT_EQ(sentence_penalties(zero, 2, 3, 0.0f), (std::vector<float>{0, 0}));
  expect_error([] { sentence_penalties(std::vector<float>(5), 2, 3, 0.9f); }, "do not hold");
}

TEST(SentencePenalties, TrackerUpdatesIncrementallyByPosition) {
  // Sentence i = one word token + one delimiter token, both with hidden state v_i (so the mean is
  // v_i); positions start at 100.
  SentenceTracker t({"\n"}, {"Wait"}, 0.95f, true);
  std::int32_t pos = 100;
  for (int i = 0; i < 5; ++i) {
    for (const char* text : {"w", "\n"}) {
      t.push_token(pos, text);
      t.add_hidden(pos, &kEmbeddings[static_cast<std::size_t>(3 * i)], 3);
      t.add_hidden(pos, &kEmbeddings[0], 3);  // a second state for the same position is ignored
      t.add_hidden(pos - 50, &kEmbeddings[0], 3);  // so is a prompt row
      ++pos;
    }
  }
  t.push_token(pos, "next");  // completes sentence 4
  const auto expected = sentence_penalties(kEmbeddings, 5, 3, 0.95f);
  const auto pp = t.position_penalty();
  ASSERT_EQ(pp.size(), static_cast<std::size_t>(pos + 1));
  for (int p = 0; p < 100; ++p) EXPECT_EQ(pp[static_cast<std::size_t>(p)], 0.0f);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.sentences()[static_cast<std::size_t>(i)].penalty,
              expected[static_cast<std::size_t>(i)]);
    EXPECT_EQ(t.sentences()[static_cast<std::size_t>(i)].hidden_count, 2);
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(pp[static_cast<std::size_t>(100 + 2 * i + k)],
                expected[static_cast<std::size_t>(i)]);
  }
  ASSERT_EQ(t.embedding(0).size(), 3u);
  EXPECT_FLOAT_EQ(t.embedding(2)[1], 0.1f);
  expect_error([&] { t.add_hidden(pos, &kEmbeddings[0], 4); }, "size 4");

  // Sentences with no cached position are forgotten (their embedding freed).
  std::vector<std::uint8_t> cached(static_cast<std::size_t>(pos + 1), 1);
  cached[100] = cached[101] = 0;  // sentence 0 entirely evicted
  cached[102] = 0;                // sentence 1 partly
  const std::size_t before = t.embedding_bytes();
  t.forget_uncached(cached);
  EXPECT_TRUE(t.sentences()[0].forgotten);
  EXPECT_FALSE(t.sentences()[1].forgotten);
  EXPECT_TRUE(t.embedding(0).empty());
  EXPECT_LT(t.embedding_bytes(), before);
}

// ---- the pure policy ----------------------------------------------------------------------------

struct ViewData {
  int q_heads = 4, kv_heads = 2, head_dim = 8, n_all = 40, window = 4;
  std::vector<float> queries;
  std::vector<std::vector<float>> keys;
  std::vector<std::vector<std::int32_t>> positions;
  LayerView view() const {
    LayerView v;
    v.q_heads = q_heads;
    v.kv_heads = kv_heads;
    v.head_dim = head_dim;
    v.n_all = n_all;
    v.window = window;
    v.queries = queries.data();
    for (int h = 0; h < kv_heads; ++h) {
      v.keys.push_back(keys[static_cast<std::size_t>(h)].data());
      v.positions.push_back(positions[static_cast<std::size_t>(h)].data());
    }
    return v;
  }
};

ViewData random_view(unsigned seed) {
  ViewData d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  d.queries.resize(static_cast<std::size_t>(d.q_heads * d.window * d.head_dim));
  for (float& x : d.queries) x = g(rng);
  d.keys.resize(static_cast<std::size_t>(d.kv_heads));
  for (auto& k : d.keys) {
    k.resize(static_cast<std::size_t>(d.n_all * d.head_dim));
    for (float& x : k) x = g(rng);
  }
  // Head 0 holds positions 100..139; head 1 (after earlier evictions of its own) 100, 102, ...
  d.positions.resize(2);
  for (int i = 0; i < d.n_all; ++i) {
    d.positions[0].push_back(100 + i);
    d.positions[1].push_back(100 + 2 * i);
  }
  return d;
}

std::set<std::int32_t> evicted(const std::vector<std::int32_t>& kept, int n_all) {
  std::set<std::int32_t> out;
  for (int i = 0; i < n_all; ++i)
    if (!std::binary_search(kept.begin(), kept.end(), i)) out.insert(i);
  return out;
}

TEST(SkipKvPolicy, EvictsAWholeRedundantSentenceBeforeAnyOtherToken) {
  const ViewData d = random_view(7);
  // The redundant sentence spans original positions 110..115 (penalty 0.97).
  std::vector<float> penalty(200, 0.0f);
  for (int p = 110; p <= 115; ++p) penalty[static_cast<std::size_t>(p)] = 0.97f;
  LayerView v = d.view();
  v.position_penalty = penalty;
  CompressionParams p = CompressionParams::defaults(Method::skipkv);
  p.window = d.window;

  // Budget 30: 10 evictions per head. Head 0 holds the sentence as entries 10..15 (positions
  // 100 + i): all 6 go, then the 4 lowest-scored others. Head 1 holds it as entries 5, 6, 7
  // (positions 110, 112, 114): those 3 go first.
  p.budget = 30;
  Diagnostics diag;
  Selection sel = compress_layer(v, p, &diag);
  ASSERT_TRUE(sel.compressed);
  auto gone0 = evicted(sel.kept[0], d.n_all), gone1 = evicted(sel.kept[1], d.n_all);
  EXPECT_EQ(gone0.size(), 10u);
  for (int i = 10; i <= 15; ++i) EXPECT_TRUE(gone0.count(i)) << i;
  for (int i : {5, 6, 7}) EXPECT_TRUE(gone1.count(i)) << i;
  EXPECT_FLOAT_EQ(diag.heads[0].sentence_penalty[12], 0.97f);
  EXPECT_FLOAT_EQ(diag.heads[1].sentence_penalty[6], 0.97f);
  EXPECT_EQ(diag.heads[1].sentence_penalty[8], 0.0f);

  // Budget 36: only 4 evictions; in head 0 all four come from the sentence, and no other token
  // is touched (only as many tokens as the budget requires).
  p.budget = 36;
  sel = compress_layer(v, p);
  gone0 = evicted(sel.kept[0], d.n_all);
  gone1 = evicted(sel.kept[1], d.n_all);
  ASSERT_EQ(gone0.size(), 4u);
  for (int i : gone0) EXPECT_TRUE(i >= 10 && i <= 15) << i;
  for (int i : {5, 6, 7}) EXPECT_TRUE(gone1.count(i)) << i;

  // Without penalties skipkv is R-KV's score with lambda = sigma.
  LayerView plain = d.view();
  CompressionParams r = CompressionParams::defaults(Method::rkv);
  r.window = d.window;
  r.budget = p.budget;
  r.lambda = p.sigma;
  EXPECT_EQ(compress_layer(plain, p).kept, compress_layer(plain, r).kept);

  // The sentence of an entry comes from its positions, so they are required.
  LayerView no_pos = v;
  no_pos.positions.clear();
  expect_error([&] { compress_layer(no_pos, p); }, "positions");
}

// ---- through KvMemory
// --------------------------------------------

// Token ids of the hand-made vocabulary.
enum : int { kWord = 1, kDot = 2 /* ".\n" */, kWait = 3 };
CompressionVocab test_vocab() {
  CompressionVocab v;
  v.token_text = [](int id) -> std::string {
    switch (id) {
      case kDot:
        return ".\n";
      case kWait:
        return "Wait";
      default:
        return "w";
    }
  };
  return v;
}

TEST(SkipKvEngine, RedundantSentenceIsEvictedFromTheCache) {
  const int hidden = 4, head_dim = 4, prompt = 4;
  CompressionParams p = CompressionParams::defaults(Method::skipkv);
  p.window = 2;
  p.budget = 11;
  p.buffer = 64;  // compress only when asked
  KvMemory memory(p, test_vocab());
  memory.allocate(KvCacheShape{1, 1, 1, head_dim, 32, 2});
  KvCache& cache = *memory.cache_for_appends();

  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  auto append = [&](int pos) {
    std::vector<float> k(head_dim), v(head_dim), q(head_dim);
    for (auto* vec : {&k, &v, &q})
      for (float& x : *vec) x = g(rng);
    cache.append(0, k.data(), v.data(), pos);
    cache.push_query(0, q.data());
  };
  for (int pos = 0; pos < prompt; ++pos) append(pos);
  // Sentences A (positions 4-6), B (7-9), C (10-12), then D opens at 13. A and C have the same
  // hidden states, B different: A is redundant with the later C.
  const std::vector<float> hA = {1, 2, 0, 0}, hB = {0, 0, 1, -1}, hD = {-1, 0, 0, 3};
  const std::vector<std::pair<int, const std::vector<float>*>> steps = {
      {kWord, &hA}, {kWord, &hA}, {kDot, &hA},  {kWait, &hB}, {kWord, &hB},
      {kDot, &hB},  {kWord, &hA}, {kWord, &hA}, {kDot, &hA},  {kWord, &hD}};
  int pos = prompt;
  for (const auto& [token, h] : steps) {
    memory.begin_decode_step(token, pos);
    append(pos);
    memory.observe_final_hidden(pos, h->data(), hidden);
    memory.observe_final_hidden(0, hD.data(), hidden);  // a prompt row: never part of a sentence
    ++pos;
  }
  const SentenceTracker* t = memory.sentences();
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->sentences().size(), 4u);
  EXPECT_EQ(t->sentences()[0].hidden_count, 3);
  EXPECT_GT(t->sentences()[0].penalty, 0.95f);
  EXPECT_EQ(t->sentences()[1].penalty, 0.0f);
  EXPECT_TRUE(t->sentences()[1].non_execution);
  EXPECT_EQ(t->non_execution_count(), 1);

  // 14 entries, budget 11: the three evicted entries are exactly sentence A.
  std::vector<std::int32_t> kept_positions;
  memory.set_listener([&](const CompressionEvent& e) {
    for (int i : e.selection->kept[0]) kept_positions.push_back(e.cache->positions(0, 0)[i]);
  });
  memory.compress_layer(0, pos, pos - 1, nullptr);
  ASSERT_EQ(cache.length(0), 11);
  std::vector<std::int32_t> expect;
  for (int q = 0; q < pos; ++q)
    if (q < 4 || q > 6) expect.push_back(q);
  EXPECT_EQ(kept_positions, expect);
  for (int i = 0; i < cache.length(0); ++i)
    EXPECT_EQ(cache.positions(0, 0)[i], expect[static_cast<std::size_t>(i)]);

  // The next step notices that no entry of A is cached any more and frees its embedding.
  memory.begin_decode_step(kWord, pos);
  EXPECT_TRUE(memory.sentences()->sentences()[0].forgotten);
  EXPECT_FALSE(memory.sentences()->sentences()[1].forgotten);
}

TEST(SkipKvEngine, OnlySkipKvAndSteeringTrackSentencesAndTheRunnerHandsThemHiddenStates) {
  KvMemory s(CompressionParams::defaults(Method::skipkv), test_vocab());
  EXPECT_NE(s.sentences(), nullptr);
  EXPECT_TRUE(s.wants_final_hidden());
  EXPECT_TRUE(s.needs_host());
  // Other methods need neither.
  KvMemory r(CompressionParams::defaults(Method::rkv), CompressionVocab{});
  EXPECT_EQ(r.sentences(), nullptr);
  EXPECT_FALSE(r.wants_final_hidden());
  KvMemory f(CompressionParams::defaults(Method::fullkv), CompressionVocab{});
  EXPECT_FALSE(f.needs_host());
}

// ---- on a golden checkpoint ---------------------------------------------------------------------

class SkipKvGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::self_made_model());
    for (int i = 0; i < 20; ++i) prompt_.push_back(3 + (i * 37) % 500);
    // Every 5th token id is a line break, every 13th contains "Wait".
    vocab_.token_text = [](int id) -> std::string {
      if (id % 5 == 0) return "\n";
      if (id % 13 == 0) return " Wait";
      return "t" + std::to_string(id);
    };
  }
  std::vector<int> greedy(const CompressionParams& params, int n, BatchResult* stats = nullptr,
                          const CompressionListener& listener = {}) {
    ThreadPool pool(2);
    Request options;
    options.prompt_ids = prompt_;
    options.max_new_tokens = n;
    options.sampling.temperature = 0.0f;
    options.ignore_eos = true;
    options.compression = params;
    options.on_compression = listener;
    BatchResult result =
        test::run_alone(*model_, pool, test::prepared_request(*model_, options), vocab_);
    if (stats) *stats = result;
    return result.tokens;
  }
  std::unique_ptr<Model> model_;
  std::vector<int> prompt_;
  CompressionVocab vocab_;
};

TEST_F(SkipKvGolden, LargeBudgetGivesFullKvAndNoPenaltiesGiveRkv) {
  const int n = 60;
  const auto full = greedy(CompressionParams::defaults(Method::fullkv), n);
  CompressionParams s = CompressionParams::defaults(Method::skipkv);
  s.budget = 128;
  s.buffer = 16;
  EXPECT_EQ(greedy(s, n), full);

  // tau = 1: no sentence can be redundant, so skipkv keeps what rkv (lambda = sigma) keeps.
  s.budget = 24;
  s.buffer = 8;
  s.window = 4;
  s.tau = 1.0f;
  CompressionParams r = CompressionParams::defaults(Method::rkv);
  r.budget = 24;
  r.buffer = 8;
  r.window = 4;
  r.lambda = s.sigma;
  EXPECT_EQ(greedy(s, n), greedy(r, n));
}

TEST_F(SkipKvGolden, SmallBudgetKeepsTheInvariantsAndPenalisesSentences) {
  CompressionParams s = CompressionParams::defaults(Method::skipkv);
  s.budget = 24;
  s.buffer = 8;
  s.window = 4;
  s.tau = 0.0f;  // every earlier sentence with a positive cosine is "redundant"
  int events = 0, penalised = 0;
  BatchResult stats;
  const auto tokens = greedy(s, 100, &stats, [&](const CompressionEvent& e) {
    ++events;
    for (const auto& head : e.diagnostics->heads) {
      ASSERT_EQ(head.sentence_penalty.size(), head.final_score.size());
      for (float x : head.sentence_penalty) penalised += x > 0.0f ? 1 : 0;
    }
    for (const auto& kept : e.selection->kept) ASSERT_EQ(static_cast<int>(kept.size()), 24);
  });
  EXPECT_EQ(tokens.size(), 100u);
  EXPECT_GT(events, 0);
  EXPECT_GT(penalised, 0);
  EXPECT_LE(stats.max_cache_entries, 24 + 8);
}

}  // namespace
}  // namespace rkv
