// Answer extraction from model outputs: the last balanced \boxed{} / \fbox{}, the
// "Final answer:" and "The answer is" fallbacks, and the last number for GSM8K.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "rkv/eval.h"
#include "test_util.h"

namespace rkv::eval {
namespace {

TEST(Extract, LastBoxedWithBalancedBraces) {
  EXPECT_EQ(last_boxed("so \\boxed{\\frac{1}{2}}."), "\\frac{1}{2}");
  EXPECT_EQ(last_boxed("first \\boxed{1}, then \\boxed{2}"), "2");
  EXPECT_EQ(last_boxed("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}"),
            "\\left( 3, \\frac{\\pi}{2} \\right)");
  EXPECT_EQ(last_boxed("\\boxed{\\{1,2\\}}"), "\\{1,2\\}");  // escaped braces do not count
  EXPECT_EQ(last_boxed("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}"),
            "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}");
  EXPECT_EQ(last_boxed("\\fbox{7}"), "7");
  EXPECT_EQ(last_boxed("\\boxed{3} and \\fbox{4}"), "4");
  EXPECT_EQ(last_boxed("\\boxed 5$"), "5");
  EXPECT_EQ(last_boxed("\\boxed {12}"), "12");
  EXPECT_EQ(last_boxed("\\boxed{\\boxed{9}}"), "9");
  // A truncated last box falls back to the previous complete one; none gives nullopt.
  EXPECT_EQ(last_boxed("\\boxed{41} ... wait, \\boxed{\\frac{1}{"), "41");
  EXPECT_FALSE(last_boxed("\\boxed{\\frac{1}{").has_value());
  EXPECT_FALSE(last_boxed("no box here").has_value());
  // The prompt's empty "\boxed{}" echoed back is not an answer.
  EXPECT_EQ(last_boxed("\\boxed{8} Final answer:  \\boxed{}"), "8");
  EXPECT_FALSE(last_boxed("\\boxedx{3}").has_value());
}

TEST(Extract, FinalAnswerAndTheAnswerIsFallbacks) {
  EXPECT_EQ(extract_answer("Work...\nFinal answer: 42\n"), "42");
  EXPECT_EQ(extract_answer("Final Answer: $\\frac{3}{4}$. Done"), "\\frac{3}{4}");
  EXPECT_EQ(extract_answer("**Final Answer:** 17"), "17");
  EXPECT_EQ(extract_answer("The final answer is 3.5."), "3.5");
  EXPECT_EQ(extract_answer("So the answer is $x = 2$ and we are done."), "x = 2");
  EXPECT_EQ(extract_answer("Thus, the answer is 12. Let me double check."), "12");
  EXPECT_EQ(extract_answer("The answer is \\(\\sqrt{2}\\)"), "\\sqrt{2}");
  // \boxed wins over the phrases, the last phrase wins over earlier ones.
  EXPECT_EQ(extract_answer("The answer is 3. Final answer: \\boxed{4}"), "4");
  EXPECT_EQ(extract_answer("The answer is 3.\nActually the answer is 5."), "5");
  // Math style has no last-number fallback.
  EXPECT_EQ(extract_answer("I computed 5 and 7 but I'm not sure", AnswerStyle::kMath), "");
  EXPECT_EQ(extract_answer(""), "");
}

TEST(Extract, Gsm8kLastNumber) {
  EXPECT_EQ(last_number("she has 3 apples and 12 pears"), "12");
  EXPECT_EQ(last_number("total: $1,234.50."), "1234.50");
  EXPECT_EQ(last_number("the change is -7"), "-7");
  EXPECT_EQ(last_number("from 3-5 the difference"), "5");
  EXPECT_EQ(last_number("x = .5"), ".5");
  EXPECT_EQ(last_number("1,23"), "23");  // not a thousands group
  EXPECT_FALSE(last_number("no digits").has_value());
  EXPECT_EQ(extract_answer("3 + 4 = 7 so she has 7 left.", AnswerStyle::kNumber), "7");
  EXPECT_EQ(extract_answer("It costs 5 dollars.\n#### 1,000", AnswerStyle::kNumber), "1000");
  EXPECT_EQ(extract_answer("Final answer: 18 dollars (from 9 * 2)", AnswerStyle::kNumber), "2");
  EXPECT_EQ(extract_answer("The answer is 18 dollars. Check: 9 x 2", AnswerStyle::kNumber), "18");
  EXPECT_EQ(extract_answer("... \\boxed{\\$18}", AnswerStyle::kNumber), "\\$18");
  EXPECT_EQ(extract_answer("nothing at all", AnswerStyle::kNumber), "");
}

TEST(Extract, GradeOutput) {
  const Grade g = grade_output(
      "<think>\nLet me compute... maybe \\boxed{5}?\n</think>\n\nFinal answer: "
      "\\boxed{\\dfrac{14}{3}}",
      "\\frac{14}{3}");
  EXPECT_EQ(g.extracted, "\\dfrac{14}{3}");
  EXPECT_TRUE(g.correct);
  const Grade miss = grade_output("The answer is 4.", "5");
  EXPECT_EQ(miss.extracted, "4");
  EXPECT_FALSE(miss.correct);
  const Grade none = grade_output("I ran out of tokens while thinking about \\boxed{", "5");
  EXPECT_EQ(none.extracted, "");
  EXPECT_FALSE(none.correct);
  EXPECT_TRUE(grade_output("so 12 + 6 = 18", "18", AnswerStyle::kNumber).correct);
}

// The reference solutions of MATH-500 end in \boxed{answer}: extraction must give the gold answer
// text exactly, and the grader must accept it.
TEST(Extract, Math500ReferenceSolutions) {
  RKV_REQUIRE_SHARED(shared);
  std::ifstream in(shared / "data" / "math500.jsonl");
  ASSERT_TRUE(in.good());
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    const auto obj = nlohmann::json::parse(line);
    const std::string solution = obj.at("solution"), answer = obj.at("answer");
    const Grade g = grade_output(solution, answer);
    EXPECT_EQ(g.extracted, answer) << obj.at("unique_id");
    EXPECT_TRUE(g.correct) << obj.at("unique_id");
    ++n;
  }
  EXPECT_EQ(n, 500);
}

}  // namespace
}  // namespace rkv::eval
