// `rkv generate` end to end: greedy ids against the Hugging Face golden, clear errors for bad
// settings, and --dump-case files that `rkv policy-run` replays to the same kept sets.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <set>

#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

std::string join(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

TEST(GenerateCli, GreedyIdsMatchTheGolden) {
  RKV_REQUIRE_SHARED(shared);
  const fs::path dir = shared / "golden/models/qwen3_qknorm_f32";
  const auto golden = test::read_json(dir / "golden.json");
  std::string out;
  const std::string cmd = test::rkv_binary() + " generate -m " + dir.string() + " --prompt-ids " +
                          join(golden["greedy_prompt_ids"].get<std::vector<int>>()) +
                          " --print-ids --temp 0 --ignore-eos -n 32 -t 2 2>/dev/null";
  ASSERT_EQ(test::run_command(cmd, out), 0);
  EXPECT_EQ(nlohmann::json::parse(out).get<std::vector<int>>(),
            golden["greedy_new_tokens"].get<std::vector<int>>());
}

TEST(GenerateCli, BadSettingsAreClearErrors) {
  const std::string model = test::self_made_model().string();
  std::string out;
  const std::string base =
      test::rkv_binary() + " generate -m " + model + " --prompt-ids 1,2,3 --print-ids -n 4 ";
  EXPECT_EQ(test::run_command(base + "--kv-method rkv --kv-budget 4 --kv-window 8 2>&1", out), 1);
  EXPECT_NE(out.find("must be larger than the window"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + "--kv-method bogus 2>&1", out), 1);
  EXPECT_NE(out.find("bogus"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + "--kv-method rkv --kv-threshold 1.5 2>&1", out), 1);
  EXPECT_NE(out.find("threshold"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + "--ctx-size 3 2>&1", out), 1);
  EXPECT_NE(out.find("does not fit the context"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(test::rkv_binary() + " generate -m " + model +
                                  " --prompt-ids 1,99999 --print-ids 2>&1",
                              out),
            1);
  EXPECT_NE(out.find("outside the vocabulary"), std::string::npos) << out;
}

// Token ids in and out need no tokenizer, except where the compression's triggers read the
// tokenizer's line-break or </think> ids: then generate loads it (it failed with "none were
// found" before, as if the model had no line breaks).
TEST(GenerateCli, TriggersThatReadTokenIdsLoadTheTokenizer) {
  const std::string model = test::shipped_model_dir().string();
  std::string out;
  const std::string base = test::rkv_binary() + " generate -m " + model +
                           " --prompt-ids 1,2,3 --print-ids -n 8 --temp 0 --kv-method rkv "
                           "--kv-budget 16 --kv-buffer 4 --kv-window 2 ";
  EXPECT_EQ(test::run_command(base + "--kv-trigger newline 2>&1", out), 0) << out;
}

TEST(GenerateCli, DumpedCasesReplayToTheSameKeptSets) {
  const fs::path cases = fs::temp_directory_path() / ("rkv-cases-" + std::to_string(::getpid()));
  fs::remove_all(cases);
  std::string out;
  const std::string cmd =
      test::rkv_binary() + " generate -m " + test::self_made_model().string() +
      " --prompt-ids 1,5,9,22,40,77,100,3,4,5,6,7 --print-ids -n 50 --temp 0 --kv-method rkv"
      " --kv-budget 24 --kv-buffer 8 --kv-window 4 --dump-case " +
      cases.string() + " --dump-case-limit 3 2>/dev/null";
  ASSERT_EQ(test::run_command(cmd, out), 0);
  int replayed = 0;
  for (const auto& entry : fs::directory_iterator(cases)) {
    const auto expected = test::read_json(entry.path())["expected"]["kept_indices"];
    ASSERT_EQ(
        test::run_command(test::rkv_binary() + " policy-run --case " + entry.path().string(), out),
        0);
    const auto got = nlohmann::json::parse(out)["kept_indices"];
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t h = 0; h < got.size(); ++h) {
      const auto a = got[h].get<std::vector<int>>(), b = expected[h].get<std::vector<int>>();
      EXPECT_EQ(std::set<int>(a.begin(), a.end()), std::set<int>(b.begin(), b.end()))
          << entry.path() << " head " << h;
      EXPECT_EQ(a.size(), 24u);
    }
    ++replayed;
  }
  EXPECT_EQ(replayed, 3);
  fs::remove_all(cases);
}

}  // namespace
}  // namespace rkv
