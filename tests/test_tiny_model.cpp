// The tiny reasoning model's task (tools/tiny): its tokenizer, read by rkv's loader, splits the
// task's text as tools/tiny/tokenizer.py designs it, and the held-out set loads with the
// `chains` preset (the question alone as the prompt).
#include <gtest/gtest.h>

#include <fstream>

#include "core/thread_pool.h"
#include "eval/runner.h"
#include "model/model.h"
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
// The model the repository ships (tools/tiny/train.py; its card is the README beside it).
const fs::path kShippedModel = fs::path(RKV_SOURCE_DIR) / "models/rkv-tiny-reasoner";

TEST(TinyModel, TokenizerMakesBindingsAndStatementsSingleTokens) {
  const Tokenizer tok = Tokenizer::load(kTokenizerDir);
  // Byte tokens have the byte's value as their id (tools/tiny/tokenizer.py). A value binding
  // (`2:a`), a statement's first token (`e=a`) and second token (` e-9`, space included) and a
  // variable read with its space (` a`) are single tokens; digits, other marks and whitespace are
  // tokens of their own. "Ġ" is the byte-level spelling of the space.
  const int32_t a_is_2 = tok.token_id("2:a");
  const int32_t e_is_3 = tok.token_id("3:e");
  const int32_t e_from_a = tok.token_id("e=a");
  const int32_t e_minus_9 = tok.token_id("Ġe-9");
  const int32_t read_a = tok.token_id("Ġa");
  const int32_t verify = tok.token_id("verify");
  const int32_t ok = tok.token_id("ok");
  for (int32_t id : {a_is_2, e_is_3, e_from_a, e_minus_9, read_a, verify, ok}) ASSERT_GE(id, 256);
  EXPECT_EQ(tok.encode("2:a\ne=a e-9\n", false),
            (std::vector<int32_t>{a_is_2, '\n', e_from_a, e_minus_9, '\n'}));
  EXPECT_EQ(
      tok.encode("e=a e-9 a2,2-9=3:e", false),
      (std::vector<int32_t>{e_from_a, e_minus_9, read_a, '2', ',', '2', '-', '9', '=', e_is_3}));
  EXPECT_EQ(tok.encode("verify\nok", false), (std::vector<int32_t>{verify, '\n', ok}));
  // A statement token takes one mark and one unit after the name: `e-95` is ` e-9` then `5`.
  EXPECT_EQ(tok.encode(" e-95", false), (std::vector<int32_t>{e_minus_9, '5'}));
  // Digits never merge, even in a run: "12" is two tokens.
  EXPECT_EQ(tok.encode("12", false), (std::vector<int32_t>{'1', '2'}));
  EXPECT_TRUE(tok.is_eos(tok.token_id("<|endoftext|>")));
}

// A tiny model's held-out set loaded with its preset, checked for what both task families share:
// 200 problems, the bare question as the prompt, up to 1024 new tokens, a one-digit answer, and
// a question that starts with the constant `a` (`2:a`) and ends with the statement of `ans`.
eval::Dataset load_held_out(const fs::path& set, const std::string& preset,
                            const std::string& first_id) {
  eval::DatasetOptions options;
  options.preset = preset;
  eval::Dataset data = eval::load_dataset(set, options);
  EXPECT_EQ(data.examples.size(), 200u);
  EXPECT_EQ(data.prompt_template, "{question}");
  EXPECT_EQ(data.max_length, 1024);
  if (!data.examples.empty()) {
    EXPECT_EQ(data.examples[0].id, first_id);
  }
  for (const auto& ex : data.examples) {
    EXPECT_EQ(ex.answer.size(), 1u) << ex.id;
    EXPECT_TRUE(ex.answer.size() == 1 && ex.answer[0] >= '0' && ex.answer[0] <= '9') << ex.id;
    EXPECT_EQ(ex.question.substr(1, 3), ":a\n") << ex.id;
    EXPECT_NE(ex.question.rfind("\nans="), std::string::npos) << ex.id;
  }
  return data;
}

TEST(TinyModel, HeldOutSetLoadsWithTheChainsPreset) {
  const eval::Dataset data = load_held_out(kTestSet, "chains", "chain-7-0");
  // Four constants, the statements, then the question as the statement of `ans`, on its line.
  for (const auto& ex : data.examples) EXPECT_EQ(ex.question.back(), '\n') << ex.id;
  // The R-KV prompt stays the default of the other presets.
  EXPECT_TRUE(eval::find_preset("math500")->prompt_template.empty());
  EXPECT_EQ(eval::find_preset("tiny"), eval::find_preset("chains"));
}

// The first `count` held-out problems of `test_set`, greedy, full cache, through the eval runner
// as `rkv eval` runs them: every answer must be the generator's (a random or broken model gets
// about 1 in 10), every chain at least `min_tokens` long. Returns the generated texts.
std::vector<std::string> solve_with_fullkv(const fs::path& model_dir, const fs::path& test_set,
                                           const std::string& preset, std::size_t count,
                                           int min_tokens) {
  EXPECT_TRUE(fs::exists(model_dir / "model.safetensors")) << model_dir;
  if (!fs::exists(model_dir / "model.safetensors")) return {};
  auto model = Model::load(model_dir);
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  eval::DatasetOptions options;
  options.preset = preset;
  eval::Dataset data = eval::load_dataset(test_set, options);
  data.examples.resize(count);
  eval::RunnerOptions o;
  o.methods = {"fullkv"};
  o.temperature = 0.0f;
  o.prompt_template = data.prompt_template;
  o.progress = nullptr;
  const test::TempDir dir("tiny");
  o.out_dir = dir.path();
  ThreadPool pool(2);
  const eval::RunSummary summary = eval::run_eval(*model, tokenizer, data, o, pool);
  std::ifstream in(o.out_dir / "samples.jsonl");
  std::vector<std::string> outputs;
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    EXPECT_TRUE(r["correct"].get<bool>()) << r.dump();
    // A whole chain of thought, not a lucky short answer: one line per statement and more.
    EXPECT_GE(r["generated_tokens"].get<int>(), min_tokens) << r.dump();
    outputs.push_back(r["output"].get<std::string>());
  }
  EXPECT_EQ(outputs.size(), count);
  EXPECT_EQ(summary.results.size(), 1u);
  if (summary.results.size() == 1) {
    EXPECT_EQ(summary.results[0].pass_at_1, 1.0);
  }
  return outputs;
}

TEST(TinyModel, ShippedModelSolvesHeldOutProblemsWithFullKV) {
  solve_with_fullkv(kShippedModel, kTestSet, "chains", 8, 400);
}

// The second model (tools/tiny/task.py --family redundant; its card is models/rkv-tiny-redundant/
// README.md) and its held-out set.
const fs::path kRedundantModel = fs::path(RKV_SOURCE_DIR) / "models/rkv-tiny-redundant";
const fs::path kRedundantSet = fs::path(RKV_SOURCE_DIR) / "data/redundant_test.jsonl";

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1))
    ++n;
  return n;
}

TEST(TinyModel, RedundantHeldOutSetLoadsWithItsPreset) {
  const eval::Dataset data = load_held_out(kRedundantSet, "redundant", "redundant-7-0");
  for (const auto& ex : data.examples) {
    // The question adds a digit to one variable: `ans=f ans-6`.
    ASSERT_GE(ex.question.size(), 2u) << ex.id;
    const char digit = ex.question[ex.question.size() - 2];
    EXPECT_TRUE(digit >= '1' && digit <= '9') << ex.id;
  }
}

TEST(TinyModel, RedundantModelSolvesHeldOutProblemsWithFullKV) {
  // Its chains carry the redundant thoughts it was trained on (task.py, rate 0.75: after three
  // of every four statements a `verify` ... `ok` thought), so they are long: 450 tokens or more.
  const auto outputs = solve_with_fullkv(kRedundantModel, kRedundantSet, "redundant", 8, 400);
  for (const std::string& text : outputs) {
    EXPECT_GE(count_of(text, "verify\n"), 14u) << text;
    EXPECT_EQ(count_of(text, "verify\n"), count_of(text, "\nok")) << text;
  }
}

}  // namespace
}  // namespace rkv
