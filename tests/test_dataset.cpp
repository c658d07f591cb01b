// Evaluation datasets: the shared MATH-500 and AIME-2024 files, presets, explicit fields, GSM8K's
// "####" answers, --limit, errors with line numbers, and the prompt.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "rkv/eval.h"
#include "test_util.h"

namespace rkv::eval {
namespace {

using rkv::test::TempDir;

std::string error_of(const std::filesystem::path& path, const DatasetOptions& options) {
  try {
    load_dataset(path, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Dataset, Math500FromShared) {
  RKV_REQUIRE_SHARED(shared);
  const Dataset data = load_dataset(shared / "data" / "math500.jsonl", {.preset = "math500"});
  ASSERT_EQ(data.examples.size(), 500u);
  EXPECT_EQ(data.name, "math500");
  EXPECT_EQ(data.style, AnswerStyle::kMath);
  EXPECT_EQ(data.max_length, 8192);
  const Example& first = data.examples[0];
  EXPECT_EQ(first.index, 0u);
  EXPECT_EQ(first.line, 1u);
  EXPECT_EQ(first.id, "test/precalculus/807.json");
  EXPECT_EQ(first.answer, "\\left( 3, \\frac{\\pi}{2} \\right)");
  EXPECT_EQ(first.question.rfind("Convert the point $(0,3)$ in rectangular coordinates", 0), 0u);
  EXPECT_EQ(data.examples[4].answer, "\\text{Evelyn}");
  EXPECT_EQ(data.examples[499].answer, "106^\\circ");
  // --limit
  const Dataset few =
      load_dataset(shared / "data" / "math500.jsonl", {.preset = "math500", .limit = 3});
  ASSERT_EQ(few.examples.size(), 3u);
  EXPECT_EQ(few.examples[2].answer, "\\frac{14}{3}");
}

TEST(Dataset, Aime24FromShared) {
  RKV_REQUIRE_SHARED(shared);
  const Dataset data = load_dataset(shared / "data" / "aime24.jsonl", {.preset = "aime24"});
  ASSERT_EQ(data.examples.size(), 30u);
  EXPECT_EQ(data.name, "aime24");
  EXPECT_EQ(data.max_length, 16384);
  EXPECT_EQ(data.examples[0].answer, "204");
  EXPECT_EQ(data.examples[0].id, "60");
  EXPECT_EQ(data.examples[7].answer, "025");  // AIME answers keep their leading zeros
  EXPECT_EQ(
      data.examples[0].question.rfind("Every morning Aya goes for a $9$-kilometer-long walk", 0),
      0u);
  EXPECT_TRUE(answers_match("25", data.examples[7].answer));
}

TEST(Dataset, PresetsAndMaxLength) {
  ASSERT_EQ(dataset_presets().size(), 5u);
  EXPECT_EQ(default_max_length("math500"), 8192);
  EXPECT_EQ(default_max_length("aime24"), 16384);
  EXPECT_EQ(default_max_length("gsm8k"), 8192);
  EXPECT_EQ(default_max_length("MATH-500"), 8192);
  EXPECT_EQ(default_max_length("aime"), 16384);
  EXPECT_EQ(default_max_length("something-else"), 8192);
  ASSERT_NE(find_preset("GSM8K"), nullptr);
  EXPECT_EQ(find_preset("gsm8k")->question_field, "question");
  EXPECT_EQ(find_preset("gsm8k")->style, AnswerStyle::kNumber);
  EXPECT_EQ(find_preset("nope"), nullptr);
  EXPECT_EQ(default_max_length("redundant"), 1024);
  EXPECT_EQ(find_preset("redundant_test"), find_preset("redundant"));
}

TEST(Dataset, Gsm8kAnswerAfterHashes) {
  TempDir dir;
  const auto path = dir.write(
      "gsm8k.jsonl",
      R"({"question": "Natalia sold 48 clips...", "answer": "She sold 48/2 = <<48/2=24>>24.\n#### 72"})"
      "\n"
      R"({"question": "Q2", "answer": "#### 1,000"})"
      "\n");
  const Dataset data = load_dataset(path, {.preset = "gsm8k"});
  ASSERT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.examples[0].question, "Natalia sold 48 clips...");
  EXPECT_EQ(data.examples[0].answer, "72");
  EXPECT_EQ(data.examples[1].answer, "1,000");
  EXPECT_EQ(data.style, AnswerStyle::kNumber);
  EXPECT_TRUE(answers_match("1000", data.examples[1].answer));
  const auto bad = dir.write("bad.jsonl", R"({"question": "Q", "answer": "72"})"
                                          "\n");
  EXPECT_NE(error_of(bad, {.preset = "gsm8k"}).find("bad.jsonl:1: the answer has no '####'"),
            std::string::npos);
}

TEST(Dataset, ExplicitFields) {
  TempDir dir;
  const auto path = dir.write("custom.jsonl",
                              "{\"q\": \"What is 2+2?\", \"a\": 4, \"id\": \"x1\"}\r\n\n"
                              "{\"q\": \"What is 1/2?\", \"a\": \"\\\\frac{1}{2}\"}\n");
  const Dataset data = load_dataset(path, {.question_field = "q", .answer_field = "a"});
  ASSERT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.name, "custom");
  EXPECT_EQ(data.examples[0].answer, "4");  // a number is taken as its JSON text
  EXPECT_EQ(data.examples[0].id, "x1");
  EXPECT_EQ(data.examples[1].id, "1");
  EXPECT_EQ(data.examples[1].line, 3u);
  EXPECT_EQ(data.examples[1].answer, "\\frac{1}{2}");
  // Without a preset or fields: problem / answer.
  const auto plain = dir.write("plain.jsonl", R"({"problem": "P", "answer": "A"})"
                                              "\n");
  EXPECT_EQ(load_dataset(plain, {}).examples.at(0).question, "P");
}

TEST(Dataset, Errors) {
  TempDir dir;
  const auto missing = std::filesystem::path("/nonexistent/dir/math500.jsonl");
  EXPECT_NE(error_of(missing, {.preset = "math500"}).find("no such dataset file"),
            std::string::npos);
  const auto malformed = dir.write("m.jsonl", R"({"problem": "P", "answer": "A"})"
                                              "\n{oops\n");
  const std::string e1 = error_of(malformed, {.preset = "math500"});
  EXPECT_NE(e1.find("m.jsonl:2: malformed JSON"), std::string::npos) << e1;
  const auto no_field = dir.write("f.jsonl",
                                  "\n"
                                  R"({"problem": "P", "solution": "S"})"
                                  "\n");
  const std::string e2 = error_of(no_field, {.preset = "math500"});
  EXPECT_NE(e2.find("f.jsonl:2: no field 'answer'"), std::string::npos) << e2;
  EXPECT_NE(e2.find("problem, solution"), std::string::npos) << e2;
  const auto not_object = dir.write("n.jsonl", "[1,2]\n");
  EXPECT_NE(error_of(not_object, {}).find("n.jsonl:1: expected a JSON object"), std::string::npos);
  const auto bad_type = dir.write("t.jsonl", R"({"problem": ["P"], "answer": "A"})"
                                             "\n");
  EXPECT_NE(error_of(bad_type, {}).find("field 'problem' is array"), std::string::npos);
  EXPECT_NE(error_of(malformed, {.preset = "math5000"}).find("unknown dataset preset 'math5000'"),
            std::string::npos);
  // --limit stops before a later malformed line.
  EXPECT_EQ(load_dataset(malformed, {.preset = "math500", .limit = 1}).examples.size(), 1u);
}

TEST(Prompt, DefaultTemplateText) {
  EXPECT_EQ(render_prompt(kDefaultPromptTemplate, "What is $1+1$?"),
            "You are given a math problem.\n\nProblem: What is $1+1$?\n\n You need to solve the "
            "problem step by step. First, you need to provide the chain-of-thought, then provide "
            "the final answer.\n\n Provide the final answer in the format: Final answer:  "
            "\\boxed{}");
  EXPECT_EQ(render_prompt("{question} / {question} {other}", "Q"), "Q / Q {other}");
  EXPECT_EQ(render_prompt("no placeholder", "Q"), "no placeholder");
}

TEST(Prompt, TemplateFile) {
  TempDir dir;
  const auto good = dir.write("t.txt", "Solve: {question}\nAnswer in \\boxed{}.");
  EXPECT_EQ(render_prompt(load_prompt_template(good), "2+2"), "Solve: 2+2\nAnswer in \\boxed{}.");
  const auto bad = dir.write("b.txt", "Solve this.");
  EXPECT_THROW(load_prompt_template(bad), Error);
  EXPECT_THROW(load_prompt_template(dir.write("dummy", "").parent_path() / "missing.txt"), Error);
}

}  // namespace
}  // namespace rkv::eval
