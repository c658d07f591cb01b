// The mixture-of-experts and hybrid architectures (docs/ARCHITECTURES.md) against llama.cpp's
// outputs on tiny random-weight GGUF files (../shared/golden/arch, its README): the prompt in one
// pass, then 32 greedy steps one token at a time, with an f32 KV cache as the oracle used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/model.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

struct ArchRun {
  std::vector<int> greedy;
  std::vector<std::vector<float>> logits;  // every step's
};

// The prompt as one pass, then each greedy id alone at its position, as llama.cpp ran them.
ArchRun run_greedy(const Model& model, const std::vector<int>& prompt, int steps,
                   KvDtype dtype = KvDtype::f32) {
  const int V = model.config().vocab_size;
  KvCache cache(model.cache_shape(64, 0, dtype));
  ThreadPool pool(2);
  ForwardScratch scratch;
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({&cache, prompt[i], static_cast<int>(i), i + 1 == prompt.size()});
  ArchRun run;
  std::vector<float> logits(static_cast<std::size_t>(V));
  model.forward(rows, scratch, pool, logits.data());
  int pos = static_cast<int>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    run.logits.push_back(logits);
    const int next =
        static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.greedy.push_back(next);
    ForwardRow row{&cache, next, pos++, true};
    model.forward({&row, 1}, scratch, pool, logits.data());
  }
  return run;
}

// The largest |logit - llama.cpp's| over the golden's 4 steps of full logits; expects its 32
// greedy ids, or at least `min_equal` of them.
double check_golden(const fs::path& dir, const std::string& golden_name, int min_equal = 32) {
  const auto golden = test::read_json(dir / golden_name);
  auto model = Model::load(dir / golden["model_file"].get<std::string>());
  const auto prompt = golden["prompt_ids"].get<std::vector<int>>();
  const auto expected = golden["greedy_ids"].get<std::vector<int>>();
  const ArchRun run = run_greedy(*model, prompt, static_cast<int>(expected.size()));
  int equal = 0;
  for (std::size_t s = 0; s < expected.size(); ++s) equal += run.greedy[s] == expected[s] ? 1 : 0;
  if (min_equal == static_cast<int>(expected.size()))
    EXPECT_EQ(run.greedy, expected) << "greedy ids differ from llama.cpp's";
  else
    EXPECT_GE(equal, min_equal) << "greedy ids equal to llama.cpp's";
  double max_diff = 0.0;
  const auto& step_logits = golden["logits"];
  for (std::size_t s = 0; s < step_logits.size(); ++s)
    for (std::size_t v = 0; v < step_logits[s].size(); ++v)
      max_diff = std::max(max_diff, std::abs(static_cast<double>(run.logits[s][v]) -
                                             step_logits[s][v].get<double>()));
  std::printf(
      "[arch] %s/%s: %d/%zu greedy ids equal, max |logit - llama.cpp's| over %zu steps = "
      "%.3g\n",
      dir.filename().c_str(), golden_name.c_str(), equal, expected.size(), step_logits.size(),
      max_diff);
  return max_diff;
}

TEST(ArchGolden, Qwen3MoeMatchesLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  EXPECT_LE(check_golden(shared / "golden/arch/qwen3moe", "golden.json"), 1e-3);
}

TEST(ArchGolden, GptOssMatchesLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  EXPECT_LE(check_golden(shared / "golden/arch/gpt-oss", "golden.json"), 1e-3);
}

TEST(ArchGolden, GptOssMxfp4MatchesLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  // rkv multiplies MXFP4 weights with activations quantized to 8 bits in blocks of 32, as
  // llama.cpp does: the f32 file's bar applies (README: 1.4e-6 for a reference doing the same).
  EXPECT_LE(check_golden(shared / "golden/arch/gpt-oss", "golden_mxfp4.json"), 1e-3);
}

TEST(ArchGolden, Qwen35MatchesLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  EXPECT_LE(check_golden(shared / "golden/arch/qwen35", "golden.json"), 1e-3);
}

TEST(ArchGolden, Qwen35MoeMatchesLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  EXPECT_LE(check_golden(shared / "golden/arch/qwen35moe", "golden.json"), 1e-3);
}

// The same through the command line, on files without a vocabulary: `rkv generate --prompt-ids
// ... --print-ids` gives the 32 greedy ids, `rkv logits --ids` step 0's logits.
TEST(ArchGolden, CliGeneratesTheGreedyIdsAndLogits) {
  RKV_REQUIRE_SHARED(shared);
  for (const char* name :
       {"qwen3moe/golden.json", "gpt-oss/golden.json", "gpt-oss/golden_mxfp4.json",
        "qwen35/golden.json", "qwen35moe/golden.json"}) {
    SCOPED_TRACE(name);
    const fs::path json = shared / "golden/arch" / name;
    const auto golden = test::read_json(json);
    const fs::path model = json.parent_path() / golden["model_file"].get<std::string>();
    std::string ids;
    for (int id : golden["prompt_ids"].get<std::vector<int>>())
      ids += (ids.empty() ? "" : ",") + std::to_string(id);
    std::string out;
    ASSERT_EQ(test::run_command(test::rkv_binary() + " generate -m '" + model.string() +
                                    "' --prompt-ids " + ids +
                                    " --print-ids -n 32 --temperature 0 --kv-dtype f32 "
                                    "2>/dev/null",
                                out),
              0);
    EXPECT_EQ(nlohmann::json::parse(out.substr(0, out.find('\n'))).get<std::vector<int>>(),
              golden["greedy_ids"].get<std::vector<int>>());
    ASSERT_EQ(test::run_command(test::rkv_binary() + " logits -m '" + model.string() + "' --ids " +
                                    ids + " --kv-dtype f32 2>/dev/null",
                                out),
              0);
    const auto logits = nlohmann::json::parse(out)["logits"][0];
    double diff = 0.0;
    for (std::size_t v = 0; v < logits.size(); ++v)
      diff =
          std::max(diff, std::abs(logits[v].get<double>() - golden["logits"][0][v].get<double>()));
    EXPECT_EQ(logits.size(), golden["logits"][0].size());
    EXPECT_LE(diff, 1e-3);
  }
}

}  // namespace
}  // namespace rkv
