// The shipped tiny reasoning model (models/rkv-tiny-reasoner, trained by tools/tiny/train.py):
// its tokenizer splits the task's text one character a token with the keywords merged, and
// greedy fullkv generation solves held-out problems (data/chains_test.jsonl) with chains of
// thought whose every step is correct arithmetic modulo 10.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "core/thread_pool.h"
#include "eval/runner.h"
#include "model/model.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

const fs::path kModelDir = fs::path(RKV_SOURCE_DIR) / "models/rkv-tiny-reasoner";
const fs::path kTestSet = fs::path(RKV_SOURCE_DIR) / "data/chains_test.jsonl";

TEST(TinyModel, TokenizerIsOneTokenPerCharacterWithKeywordsMerged) {
  const Tokenizer tok = Tokenizer::load(kModelDir);
  // Every byte token has the byte's value as its id (tools/tiny/tokenizer.py).
  EXPECT_EQ(tok.encode("a=3;b=a+4\n", false),
            (std::vector<int32_t>{'a', '=', '3', ';', 'b', '=', 'a', '+', '4', '\n'}));
  const int32_t verify = tok.token_id("verify");
  const int32_t ok = tok.token_id("\xC4\xA0ok");  // " ok" in the byte-level spelling
  ASSERT_GE(verify, 256);
  ASSERT_GE(ok, 256);
  EXPECT_EQ(tok.encode("verify m=a-7=2-7=5 ok", false),
            (std::vector<int32_t>{verify, ' ', 'm', '=', 'a', '-', '7', '=', '2', '-', '7', '=',
                                  '5', ok}));
  // Digits never merge, even in a run: "12" is two tokens.
  EXPECT_EQ(tok.encode("12", false), (std::vector<int32_t>{'1', '2'}));
  EXPECT_TRUE(tok.is_eos(tok.token_id("<|endoftext|>")));
}

// Checks every "x=y+z=A+B=C" / "x=y-k=A-k=C" line of a chain: C == A op B modulo 10, and the
// operand values agree with what the chain computed before. Returns the number of lines checked.
int check_chain(const std::string& text) {
  static const std::regex line_re(R"(^(?:verify )?([A-Za-z]+)=([A-Za-z])([+-])([A-Za-z]|\d)=(\d)([+-])(\d)=(\d)(?: ok)?$)");
  std::map<std::string, int> values;
  int checked = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    const int a = std::stoi(m[5]);
    const int b = std::stoi(m[7]);
    const int c = std::stoi(m[8]);
    const int want = m[6] == "+" ? (a + b) % 10 : ((a - b) % 10 + 10) % 10;
    EXPECT_EQ(c, want) << "wrong arithmetic in: " << line;
    if (values.count(m[2])) EXPECT_EQ(values[m[2]], a) << "wrong operand value in: " << line;
    const std::string z = m[4];
    if (std::isalpha(static_cast<unsigned char>(z[0])) && values.count(z))
      EXPECT_EQ(values[z], b) << "wrong operand value in: " << line;
    if (m[1] != "ans") values[m[1]] = c;
    ++checked;
  }
  return checked;
}

// Of the first 8 held-out problems, how many greedy fullkv must solve (measured: see the model card).
constexpr int kMinCorrect = 8;

TEST(TinyModel, SolvesHeldOutProblemsWithFullKv) {
  auto model = Model::load(kModelDir);
  const Tokenizer tokenizer = Tokenizer::load(kModelDir);
  eval::DatasetOptions data_options;
  data_options.preset = "chains";
  data_options.limit = 8;
  const eval::Dataset dataset = eval::load_dataset(kTestSet, data_options);
  ASSERT_EQ(dataset.examples.size(), 8u);
  ASSERT_EQ(dataset.prompt_template, "{question}");

  test::TempDir dir("tiny");
  eval::RunnerOptions o;
  o.methods = {"fullkv"};
  o.temperature = 0.0f;
  o.prompt_template = dataset.prompt_template;
  o.progress = nullptr;
  o.out_dir = dir.path();
  ThreadPool pool(2);
  const eval::RunSummary summary = eval::run_eval(*model, tokenizer, dataset, o, pool);
  ASSERT_EQ(summary.results.size(), 1u);

  std::ifstream in(dir.path() / "samples.jsonl");
  int correct = 0;
  int records = 0;
  for (std::string line; std::getline(in, line);) {
    const auto rec = nlohmann::json::parse(line);
    const std::string output = rec.at("output").get<std::string>();
    ++records;
    correct += rec.at("correct").get<bool>() ? 1 : 0;
    // A real chain of thought, not a guessed answer: at least 24 derivation lines, each right.
    EXPECT_GE(check_chain(output), 24) << output;
    EXPECT_NE(output.find("Final answer: \\boxed{"), std::string::npos) << output;
  }
  EXPECT_EQ(records, 8);
  EXPECT_GE(correct, kMinCorrect) << "of the first 8 held-out problems";
  EXPECT_GE(summary.results[0].mean_generated_tokens, 400.0);
}

}  // namespace
}  // namespace rkv
