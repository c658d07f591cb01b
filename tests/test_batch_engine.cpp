// Continuous batching: every sequence of a batch produces exactly the tokens it produces alone
// (greedy), sequences join and leave mid-run, the KV memory cap is never exceeded, and a request
// that can never fit is rejected without disturbing the others.
#include <gtest/gtest.h>

#include "batch_test_util.h"
#include "core/error.h"
#include "engine/batch_engine.h"
#include "engine/generator.h"
#include "engine/kv_memory.h"
#include "rkv/engine.h"
#include "test_util.h"

namespace rkv {
namespace {

struct Spec {
  std::string method;
  int budget;
  int prompt_len;
  int max_new;
};

Request make_request(const Spec& spec, int seed) {
  Request r = test::greedy_ids_request(spec.prompt_len, spec.max_new, seed);
  r.compression = CompressionParams::defaults(parse_method(spec.method));
  if (spec.method != "fullkv") {
    r.compression.budget = spec.budget;
    r.compression.buffer = 8;
    r.compression.window = 4;
    r.compression.sinks = 2;
  }
  return r;
}

class BatchEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::self_made_model());
    preparer_ = std::make_unique<Engine>(*model_, nullptr, pool_);
  }

  // The batch engine takes prepared requests only: Engine::prepare validates and sizes them.
  PreparedRequest prepared(const Request& r) const { return preparer_->prepare(r); }
  PreparedRequest prepared(const Spec& spec, int seed) const {
    return prepared(make_request(spec, seed));
  }

  std::vector<int> alone(const Spec& spec, int seed) {
    BatchEngine engine(*model_, pool_, {});
    engine.submit(prepared(spec, seed));
    engine.run();
    auto results = engine.take_results();
    return results.at(0).tokens;
  }

  std::unique_ptr<Model> model_;
  ThreadPool pool_{2};
  std::unique_ptr<Engine> preparer_;
};

const std::vector<Spec> kSpecs = {
    {"fullkv", 0, 12, 40}, {"rkv", 16, 30, 50},          {"snapkv", 20, 9, 35}, {"h2o", 16, 25, 45},
    {"gkv", 24, 40, 30},   {"streamingllm", 12, 15, 60}, {"rkv", 32, 5, 20},
};

TEST_F(BatchEngineTest, AloneMatchesThePublicEngine) {
  // The public engine over a request of token ids and the batch engine are the same computation.
  const Spec spec = kSpecs[1];
  Engine engine(*model_, nullptr, pool_);
  engine.submit(engine.prepare(make_request(spec, 1)));
  engine.run_until_idle();
  EXPECT_EQ(alone(spec, 1), engine.take_completions().at(0).tokens);
}

TEST_F(BatchEngineTest, EverySequenceOfABatchMatchesItsRunAlone) {
  std::vector<std::vector<int>> expected;
  for (std::size_t i = 0; i < kSpecs.size(); ++i)
    expected.push_back(alone(kSpecs[i], static_cast<int>(i)));
  BatchEngineOptions options;
  options.prefill_chunk =
      16;  // prompts are prefilled over several steps, beside decoding sequences
  BatchEngine engine(*model_, pool_, options);
  std::map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < kSpecs.size(); ++i)
    index[engine.submit(prepared(kSpecs[i], static_cast<int>(i)))] = i;
  engine.run();
  const auto results = engine.take_results();
  ASSERT_EQ(results.size(), kSpecs.size());
  for (const auto& r : results) {
    const std::size_t i = index.at(r.id);
    EXPECT_EQ(r.tokens, expected[i]) << kSpecs[i].method << " #" << i;
    EXPECT_EQ(r.stop_reason, "length");
  }
  EXPECT_EQ(engine.peak_running(), static_cast<int>(kSpecs.size()));
}

// Request::seed_tokens (rkv bench --steady-state): a compressing sequence takes its seed in
// chunks of its buffer, each compressed, so its slot is budget + buffer entries rather than the
// whole prompt, and its cache never holds more; for fullkv seed tokens are prompt tokens.
TEST_F(BatchEngineTest, SeedTokensNeedOnlyBudgetPlusBuffer) {
  const int layers = model_->config().num_layers;
  Request r = make_request({"rkv", 16, 12, 20}, 3);  // buffer 8
  for (int i = 0; i < 100; ++i) r.prompt_ids.push_back(3 + (i * 17) % 500);
  auto run = [&](const Request& request) {
    BatchEngine engine(*model_, pool_, {});
    engine.submit(prepared(request));
    engine.run();
    return engine.take_results().at(0);
  };
  Request seeded = r;
  seeded.seed_tokens = 100;
  const BatchResult s = run(seeded);
  EXPECT_EQ(s.cache_capacity, 16 + 8);
  EXPECT_LE(s.max_cache_entries, 16 + 8);
  EXPECT_EQ(s.tokens.size(), 20u);
  // The 12-token prompt, then the seed in 13 chunks (8 x 12 + 4): every chunk that leaves more
  // than 16 entries is compressed, in every layer (12 chunks), then decode's compressions.
  EXPECT_GE(s.compressions, static_cast<std::int64_t>(12 * layers));
  // Unseeded, the same 112-token prompt is held whole until prefill ends.
  EXPECT_EQ(run(r).cache_capacity, 112);
  // fullkv: the seed is prompt, token for token.
  Request full = make_request({"fullkv", 0, 12, 20}, 3);
  full.prompt_ids = r.prompt_ids;
  Request full_seeded = full;
  full_seeded.seed_tokens = 100;
  EXPECT_EQ(run(full_seeded).tokens, run(full).tokens);
  EXPECT_EQ(run(full_seeded).cache_capacity, 112 + 20);
  // The seed must leave at least one prompt token (Engine::prepare refuses it).
  seeded.seed_tokens = static_cast<int>(seeded.prompt_ids.size());
  EXPECT_THROW(prepared(seeded), Error);
}

// A forward pass that throws (on a GPU: the device out of memory; here: a compression listener
// that throws inside the pass), or a prefill compression that throws, ends the sequences it
// concerns with stop reason "error" and the message; a sequence waiting meanwhile runs afterwards
// exactly as alone.
TEST_F(BatchEngineTest, AFailedPassEndsItsSequencesAndTheEngineGoesOn) {
  // rkv with a prompt over the budget (its first compression after prefill, outside the pass),
  // and within it (its first compression while decoding, inside the forward pass).
  for (const Spec& spec : {Spec{"rkv", 16, 30, 50}, Spec{"rkv", 16, 5, 60}}) {
    Request failing = make_request(spec, 1);
    failing.on_compression = [](const CompressionEvent&) { throw Error("listener failed"); };
    BatchEngineOptions options;
    options.max_batch = 1;  // the second request waits for the first
    BatchEngine engine(*model_, pool_, options);
    const std::uint64_t a = engine.submit(prepared(failing));
    const std::uint64_t b = engine.submit(prepared(spec, 2));
    engine.run();
    const auto results = engine.take_results();
    ASSERT_EQ(results.size(), 2u);
    for (const auto& r : results) {
      if (r.id == a) {
        EXPECT_EQ(r.stop_reason, "error");
        EXPECT_EQ(r.error, "listener failed");
        EXPECT_LT(r.tokens.size(), static_cast<std::size_t>(spec.max_new));
      } else {
        EXPECT_EQ(r.id, b);
        EXPECT_EQ(r.stop_reason, "length");
        EXPECT_EQ(r.tokens, alone(spec, 2));
      }
    }
    EXPECT_EQ(engine.running(), 0);
    EXPECT_EQ(engine.kv_bytes_in_use(), 0u);
  }
}

TEST_F(BatchEngineTest, SequencesJoinAndLeaveMidRun) {
  std::vector<std::vector<int>> expected;
  for (std::size_t i = 0; i < kSpecs.size(); ++i)
    expected.push_back(alone(kSpecs[i], static_cast<int>(i)));
  BatchEngine engine(*model_, pool_, {});
  std::map<std::uint64_t, std::size_t> index;
  std::size_t next = 0;
  int steps = 0;
  // A new request joins every 7 steps while earlier ones are decoding or have left.
  while (next < kSpecs.size() || engine.running() + engine.waiting() > 0) {
    if (next < kSpecs.size() && steps % 7 == 0) {
      index[engine.submit(prepared(kSpecs[next], static_cast<int>(next)))] = next;
      ++next;
    }
    engine.step();
    ++steps;
  }
  const auto results = engine.take_results();
  ASSERT_EQ(results.size(), kSpecs.size());
  for (const auto& r : results)
    EXPECT_EQ(r.tokens, expected[index.at(r.id)]) << kSpecs[index.at(r.id)].method;
  EXPECT_LT(engine.peak_running(),
            static_cast<int>(kSpecs.size()));  // some left before others joined
}

TEST_F(BatchEngineTest, MemoryCapIsNeverExceeded) {
  const Spec spec{"rkv", 16, 20, 40};
  const std::size_t slot = prepared(spec, 0).slot_bytes;
  // The tiny shape of test::self_made_model() (4 layers, 2 KV heads, 4 query heads of 32), f32:
  // (16 + 8) entries x 4 layers x 2 KV heads x (keys and values of 32 floats, an int32 position,
  // a float state), and the query ring: window 4 x 4 layers x 4 query heads x 32 floats.
  ASSERT_EQ(model_->config().num_heads, 4);
  EXPECT_EQ(slot, static_cast<std::size_t>(24 * 4 * 2 * (2 * 32 * 4 + 4 + 4) + 4 * 4 * 4 * 32 * 4));
  BatchEngineOptions options;
  options.kv_memory_bytes = slot * 5 / 2;  // room for two sequences
  BatchEngine engine(*model_, pool_, options);
  EXPECT_EQ(engine.max_concurrent(prepared(spec, 0)), 2);
  for (int i = 0; i < 5; ++i) engine.submit(prepared(spec, i));
  while (engine.step()) {
    EXPECT_LE(engine.kv_bytes_in_use(), options.kv_memory_bytes);
    EXPECT_LE(engine.running(), 2);
  }
  EXPECT_EQ(engine.take_results().size(), 5u);
  EXPECT_EQ(engine.peak_running(), 2);
  EXPECT_LE(engine.peak_kv_bytes(), options.kv_memory_bytes);
}

TEST_F(BatchEngineTest, ARequestThatCanNeverFitIsRejected) {
  BatchEngineOptions options;
  options.kv_memory_bytes = 100 * 1024;
  BatchEngine engine(*model_, pool_, options);
  engine.submit(prepared({"rkv", 16, 10, 20}, 0));
  try {
    engine.submit(prepared({"fullkv", 0, 10, 400}, 1));  // 410 entries: ~210 KB
    FAIL() << "a request larger than the cap must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the whole KV memory cap"), std::string::npos)
        << e.what();
  }
  // Invalid requests never reach the batch engine: Engine::prepare refuses them.
  Request bad = make_request({"rkv", 16, 10, 20}, 2);
  bad.prompt_ids.push_back(100000);
  EXPECT_THROW(prepared(bad), Error);
  Request bad_budget = make_request({"rkv", 16, 10, 20}, 3);
  bad_budget.compression.budget = 2;  // not larger than the window
  EXPECT_THROW(prepared(bad_budget), Error);
  engine.run();
  const auto results = engine.take_results();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].tokens.size(), 20u);
}

TEST(ByteSize, Parses) {
  EXPECT_EQ(parse_byte_size("6GiB"), 6ull << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("1.5G"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("1000000"), 1000000u);
  EXPECT_EQ(parse_byte_size("2GB"), 2000000000u);
  EXPECT_THROW(parse_byte_size("lots"), Error);
  EXPECT_THROW(parse_byte_size("-1G"), Error);
  EXPECT_THROW(parse_byte_size("5 parsecs"), Error);
}

}  // namespace
}  // namespace rkv
