// End-to-end invariants of decode-time compression on small checkpoints (ALGORITHMS.md 1):
// with a budget that holds everything, every method generates exactly the fullkv tokens; with
// small budgets the cache never exceeds budget + buffer, is exactly `budget` long after every
// compression, keeps the window, and keeps positions strictly increasing within each head.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/generator.h"
#include "engine/kv_memory.h"
#include "model/model.h"
#include "test_util.h"

namespace rkv {
namespace {

std::vector<int> greedy(const Model& model, const std::vector<int>& prompt, int n,
                        const CompressionParams& params, const CompressionListener& listener = {},
                        Completion* stats_out = nullptr) {
  ThreadPool pool(2);
  Request request;
  request.prompt_ids = prompt;
  request.decode_text = false;
  request.max_new_tokens = n;
  request.sampling.temperature = 0.0f;
  request.ignore_eos = true;
  request.compression = params;
  request.on_compression = listener;
  Completion result = generate_alone(model, pool, std::move(request));
  if (stats_out) *stats_out = result;
  return result.tokens;
}

CompressionParams preset(const std::string& method, int budget, int buffer, int window) {
  CompressionParams p = CompressionParams::defaults(parse_method(method));
  p.budget = budget;
  p.buffer = buffer;
  p.window = window;
  if (p.sinks >= budget) p.sinks = 2;
  return p;
}

const std::vector<std::string> kMethods = {"streamingllm", "h2o", "snapkv", "rkv", "gkv"};

class EngineCompression : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::self_made_model());
    for (int i = 0; i < 20; ++i) prompt_.push_back(3 + (i * 37) % 500);
  }
  std::unique_ptr<Model> model_;
  std::vector<int> prompt_;
};

TEST_F(EngineCompression, LargeBudgetGivesTheFullKvTokens) {
  const int n = 60;
  const auto reference = greedy(*model_, prompt_, n, CompressionParams::defaults(Method::fullkv));
  for (const auto& method : kMethods) {
    const auto got = greedy(*model_, prompt_, n, preset(method, 128, 16, 8));
    EXPECT_EQ(got, reference) << method;
  }
}

TEST_F(EngineCompression, SmallBudgetsKeepTheInvariants) {
  const int budget = 24, buffer = 8, window = 4, n = 100;
  for (const auto& method : kMethods) {
    SCOPED_TRACE(method);
    int events = 0;
    auto listener = [&](const CompressionEvent& e) {
      ++events;
      ASSERT_LE(e.n_before, budget + buffer);
      const auto& kept = e.selection->kept;
      for (std::size_t h = 0; h < kept.size(); ++h) {
        ASSERT_EQ(static_cast<int>(kept[h].size()), budget) << "head " << h;
        const std::int32_t* pos = e.cache->positions(e.layer, static_cast<int>(h));
        for (std::size_t i = 1; i < kept[h].size(); ++i)
          ASSERT_LT(pos[kept[h][i - 1]], pos[kept[h][i]])
              << "positions must stay strictly increasing";
        // The window (the newest `window` entries) is always kept.
        const std::set<std::int32_t> kept_set(kept[h].begin(), kept[h].end());
        for (int w = 0; w < window; ++w)
          ASSERT_TRUE(kept_set.count(e.n_before - 1 - w)) << "window entry " << w;
      }
    };
    Completion stats;
    const auto tokens =
        greedy(*model_, prompt_, n, preset(method, budget, buffer, window), listener, &stats);
    EXPECT_EQ(static_cast<int>(tokens.size()), n);
    EXPECT_GT(events, 0);
    // Memory is fixed up front and never grows with the generation.
    EXPECT_EQ(stats.cache_capacity, budget + buffer);
    EXPECT_LE(stats.max_cache_entries, budget + buffer);
    // The slot: keys and values (f32), an int32 position and a float state per entry, and the
    // query ring of `window` float32 queries per query head and layer.
    const ModelConfig& c = model_->config();
    EXPECT_EQ(stats.kv_bytes,
              static_cast<std::size_t>(c.num_layers * c.num_kv_heads * (budget + buffer) *
                                           (2 * c.head_dim * 4 + 8) +
                                       c.num_layers * window * c.num_heads * c.head_dim * 4));
  }
}

TEST_F(EngineCompression, LongPromptIsCompressedAtTheEndOfPrefill) {
  std::vector<int> long_prompt;
  for (int i = 0; i < 50; ++i) long_prompt.push_back(3 + (i * 53) % 500);
  std::vector<std::int64_t> steps;
  auto listener = [&](const CompressionEvent& e) { steps.push_back(e.step); };
  Completion stats;
  greedy(*model_, long_prompt, 5, preset("rkv", 16, 8, 4), listener, &stats);
  ASSERT_FALSE(steps.empty());
  // One compression per layer right after prefill (at 50 tokens), then at multiples of the buffer.
  EXPECT_EQ(steps[0], 50);
  EXPECT_EQ(stats.cache_capacity, 50);  // the prompt is held whole until prefill ends
  EXPECT_EQ(std::count(steps.begin(), steps.end(), 50), model_->config().num_layers);
  for (auto s : steps) EXPECT_TRUE(s == 50 || s % 8 == 0) << s;
}

}  // namespace
}  // namespace rkv
