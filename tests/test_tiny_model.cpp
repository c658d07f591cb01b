// The tiny reasoning model's task (tools/tiny): its tokenizer, read by rkv's loader, splits the
// task's text as tools/tiny/tokenizer.py designs it, and the held-out set loads with the
// `chains` preset (the question alone as the prompt).
#include <gtest/gtest.h>

#include "rkv/eval.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

// Written by `python3 tools/tiny/tokenizer.py --out tools/tiny/tokenizer` (train.py copies the
// same files into the model it exports).
const fs::path kTokenizerDir = fs::path(RKV_SOURCE_DIR) / "tools/tiny/tokenizer";
const fs::path kTestSet = fs::path(RKV_SOURCE_DIR) / "data/chains_test.jsonl";

TEST(TinyModel, TokenizerMergesKeywordsAndNameMarksOnly) {
  const Tokenizer tok = Tokenizer::load(kTokenizerDir);
  // Byte tokens have the byte's value as their id (tools/tiny/tokenizer.py); a letter after "="
  // or ":" is one token, digits, spaces and other marks are tokens of their own.
  const int32_t e_name = tok.token_id("=e");
  const int32_t a_value = tok.token_id(":a");
  const int32_t e_value = tok.token_id(":e");
  const int32_t verify = tok.token_id("verify");
  const int32_t ok = tok.token_id("ok");
  for (int32_t id : {e_name, a_value, e_value, verify, ok}) ASSERT_GE(id, 256);
  EXPECT_EQ(tok.encode("2:a;a-9=e,2-9,3:e\n", false),
            (std::vector<int32_t>{'2', a_value, ';', 'a', '-', '9', e_name, ',', '2', '-', '9', ',',
                                  '3', e_value, '\n'}));
  EXPECT_EQ(tok.encode("verify a-9=e ok", false),
            (std::vector<int32_t>{verify, ' ', 'a', '-', '9', e_name, ' ', ok}));
  // Digits never merge, even in a run: "12" is two tokens.
  EXPECT_EQ(tok.encode("12", false), (std::vector<int32_t>{'1', '2'}));
  EXPECT_TRUE(tok.is_eos(tok.token_id("<|endoftext|>")));
}

TEST(TinyModel, HeldOutSetLoadsWithTheChainsPreset) {
  eval::DatasetOptions options;
  options.preset = "chains";
  const eval::Dataset data = eval::load_dataset(kTestSet, options);
  ASSERT_EQ(data.examples.size(), 200u);
  EXPECT_EQ(data.prompt_template, "{question}");
  EXPECT_EQ(data.max_length, 1024);
  EXPECT_EQ(data.examples[0].id, "chain-7-0");
  for (const auto& ex : data.examples) {
    ASSERT_EQ(ex.answer.size(), 1u) << ex.id;
    EXPECT_TRUE(ex.answer[0] >= '0' && ex.answer[0] <= '9') << ex.id;
    // Four constants, then statements, then the question line.
    EXPECT_EQ(ex.question.rfind("\n? "), ex.question.find('\n')) << ex.id;
    EXPECT_EQ(ex.question[1], ':') << ex.id;
  }
  // The R-KV prompt stays the default of the other presets.
  EXPECT_TRUE(eval::find_preset("math500")->prompt_template.empty());
  EXPECT_EQ(eval::find_preset("tiny"), eval::find_preset("chains"));
}

}  // namespace
}  // namespace rkv
