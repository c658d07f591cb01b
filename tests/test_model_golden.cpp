// The forward pass against Hugging Face transformers' outputs for every checkpoint in
// ../shared/golden/models (tolerances from its README: logits atol 1e-3, exact argmax and
// greedy tokens for float32 compute), with a float32 KV cache (pinned: the tolerances are for
// float32 arithmetic; a bf16 checkpoint would otherwise get a bf16 cache).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/model.h"
#include "test_util.h"

namespace rkv {
namespace {

int argmax(const float* v, int n) {
  return static_cast<int>(std::max_element(v, v + n) - v);
}

class GoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenModel, FullPassLogitsAndArgmax) {
  RKV_REQUIRE_SHARED(shared);
  const auto dir = shared / "golden/models" / GetParam();
  const auto golden = test::read_json(dir / "golden.json");
  auto model = Model::load(dir);
  const int V = model->config().vocab_size;
  const auto ids = golden["input_ids"].get<std::vector<int>>();
  KvCache cache(model->cache_shape(static_cast<int>(ids.size()), 8, KvDtype::f32));
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < ids.size(); ++i)
    rows.push_back({&cache, ids[i], static_cast<int>(i), true});
  ThreadPool pool(2);
  ForwardScratch scratch;
  std::vector<float> logits(ids.size() * static_cast<std::size_t>(V));
  model->forward(rows, scratch, pool, logits.data());

  const auto argmax_all = golden["argmax_all"].get<std::vector<int>>();
  for (std::size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(argmax(logits.data() + i * V, V), argmax_all[i]) << "position " << i;
  const auto& last5 = golden["last5_logits"];
  double max_diff = 0.0;
  for (std::size_t p = 0; p < 5; ++p) {
    const std::size_t pos = ids.size() - 5 + p;
    for (int v = 0; v < V; ++v)
      max_diff =
          std::max(max_diff, std::abs(double(logits[pos * V + v]) - last5[p][v].get<double>()));
  }
  EXPECT_LE(max_diff, 1e-3) << "max |logit - golden| over the last 5 positions";
}

TEST_P(GoldenModel, GreedyDecodeWithCache) {
  RKV_REQUIRE_SHARED(shared);
  const auto dir = shared / "golden/models" / GetParam();
  const auto golden = test::read_json(dir / "golden.json");
  auto model = Model::load(dir);
  const int V = model->config().vocab_size;
  const auto prompt = golden["greedy_prompt_ids"].get<std::vector<int>>();
  const auto expected = golden["greedy_new_tokens"].get<std::vector<int>>();
  const auto& step_logits = golden["greedy_step_logits_first3"];
  KvCache cache(model->cache_shape(64, 8, KvDtype::f32));
  ThreadPool pool(2);
  ForwardScratch scratch;
  std::vector<float> logits(V);
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({&cache, prompt[i], static_cast<int>(i), i + 1 == prompt.size()});
  model->forward(rows, scratch, pool, logits.data());
  std::vector<int> got;
  int pos = static_cast<int>(prompt.size());
  for (std::size_t step = 0; step < expected.size(); ++step) {
    if (step < step_logits.size()) {
      double max_diff = 0.0;
      for (int v = 0; v < V; ++v)
        max_diff =
            std::max(max_diff, std::abs(double(logits[v]) - step_logits[step][v].get<double>()));
      EXPECT_LE(max_diff, 1e-3) << "decode step " << step;
    }
    const int next = argmax(logits.data(), V);
    got.push_back(next);
    ForwardRow row{&cache, next, pos++, true};
    model->forward({&row, 1}, scratch, pool, logits.data());
  }
  EXPECT_EQ(got, expected);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, GoldenModel,
                         ::testing::Values("llama_gqa_f32", "llama3_rope_scaled_f32",
                                           "qwen2_bias_f32", "qwen2_tied_bf16",
                                           "qwen3_qknorm_f32"));

}  // namespace
}  // namespace rkv
