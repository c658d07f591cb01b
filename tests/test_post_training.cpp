// The models G-KV's post-training adapted (issue 38; tools/tiny/post_train.py and
// ship_adapted.py): each models/*/post_training.json names its base model, method, budget,
// buffer, held-out dataset and preset, and the greedy pass@1 measured on the first 50 problems.
// Every CI run measures them again through the eval runner, as `rkv eval` runs them: the
// adapted model at its training budget must reach its documented figure, and its full-cache
// pass@1 must stay at least 0.98 (the bar).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "eval/runner.h"
#include "model/model.h"
#include "rkv/eval.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(RKV_SOURCE_DIR) / "models";

std::vector<std::string> adapted_models() {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(kModels))
    if (fs::exists(entry.path() / "post_training.json"))
      out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Greedy pass@1 of `model_dir` on the first `count` problems of `dataset` under one method.
double pass_at_1(const fs::path& model_dir, const fs::path& dataset, const std::string& preset,
                 std::size_t count, const std::string& method, int budget, int buffer) {
  auto model = Model::load(model_dir);
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  eval::DatasetOptions options;
  options.preset = preset;
  eval::Dataset data = eval::load_dataset(dataset, options);
  if (data.examples.size() > count) data.examples.resize(count);
  eval::RunnerOptions o;
  o.methods = {method};
  if (method != "fullkv") {
    o.budgets = eval::parse_budget_specs(std::to_string(budget));
    o.kv_settings = {{"buffer", std::to_string(buffer)}};
  }
  o.temperature = 0.0f;
  o.prompt_template = data.prompt_template;
  o.progress = nullptr;
  const test::TempDir dir("post-training");
  o.out_dir = dir.path();
  ThreadPool pool(2);
  const eval::RunSummary summary = eval::run_eval(*model, tokenizer, data, o, pool);
  EXPECT_EQ(summary.results.size(), 1u);
  return summary.results.empty() ? -1.0 : summary.results[0].pass_at_1;
}

class AdaptedModel : public ::testing::TestWithParam<std::string> {};

TEST_P(AdaptedModel, ReachesItsDocumentedAccuracyAtItsTrainingBudget) {
  const fs::path dir = kModels / GetParam();
  const auto card = test::read_json(dir / "post_training.json");
  for (const char* key : {"base_model", "method", "budget", "buffer", "dataset", "preset", "recipe",
                          "seeds", "hyperparameters", "pass_at_1_first_50"})
    ASSERT_TRUE(card.contains(key)) << key;
  const fs::path base = fs::path(RKV_SOURCE_DIR) / card.at("base_model").get<std::string>();
  EXPECT_TRUE(fs::exists(base / "model.safetensors")) << base;
  const fs::path dataset = fs::path(RKV_SOURCE_DIR) / card.at("dataset").get<std::string>();
  const std::string preset = card.at("preset");
  const std::string method = card.at("method");
  const int budget = card.at("budget"), buffer = card.at("buffer");
  const auto& documented = card.at("pass_at_1_first_50");
  const double adapted = pass_at_1(dir, dataset, preset, 50, method, budget, buffer);
  const double full = pass_at_1(dir, dataset, preset, 50, "fullkv", 0, 0);
  EXPECT_GE(adapted, documented.at("adapted").get<double>()) << method << " " << budget;
  EXPECT_GE(full, 0.98);
  EXPECT_GE(full, documented.at("adapted_full_cache").get<double>());
}

INSTANTIATE_TEST_SUITE_P(Models, AdaptedModel, ::testing::ValuesIn(adapted_models()),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AdaptedModel);

}  // namespace
}  // namespace rkv
