// The grader against a hand-checked corpus of (prediction, gold, verdict) triples
// (tests/data/grading_corpus.jsonl), the expression evaluator, normalisation, robustness on
// garbage, and `rkv grade` on the command line.
#include <gtest/gtest.h>

#include <unistd.h>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "rkv/eval.h"
#include "test_util.h"

namespace rkv::eval {
namespace {

struct Triple {
  std::size_t line = 0;
  std::string pred, gold, rule;
  bool expected = false;
};

std::vector<Triple> load_corpus() {
  const std::filesystem::path path =
      std::filesystem::path(RKV_SOURCE_DIR) / "tests" / "data" / "grading_corpus.jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<Triple> out;
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    const auto obj = nlohmann::json::parse(line);
    Triple t;
    t.line = n;
    t.pred = obj.at("pred").get<std::string>();
    t.gold = obj.at("gold").get<std::string>();
    t.expected = obj.at("expected").get<bool>();
    t.rule = obj.at("rule").get<std::string>();
    out.push_back(std::move(t));
  }
  return out;
}

TEST(Grader, CorpusVerdicts) {
  const std::vector<Triple> corpus = load_corpus();
  ASSERT_GE(corpus.size(), 200u);
  std::size_t positives = 0, negatives = 0;
  for (const Triple& t : corpus) {
    EXPECT_EQ(answers_match(t.pred, t.gold), t.expected)
        << "grading_corpus.jsonl:" << t.line << " [" << t.rule << "] pred=" << t.pred
        << " gold=" << t.gold;
    (t.expected ? positives : negatives) += 1;
  }
  EXPECT_GE(negatives, 60u);
  EXPECT_GE(positives, 100u);
}

// Every MATH-500 gold answer matches itself and a reformatted copy of itself would be checked by
// the corpus; here: grading a gold against itself is always true and never throws.
TEST(Grader, SharedGoldsMatchThemselves) {
  RKV_REQUIRE_SHARED(shared);
  for (const char* name : {"math500", "aime24"}) {
    const auto path = shared / "data" / (std::string(name) + ".jsonl");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is missing";
    const Dataset data = load_dataset(path, {.preset = name});
    for (const Example& ex : data.examples) {
      EXPECT_TRUE(answers_match(ex.answer, ex.answer)) << name << " " << ex.id << ": " << ex.answer;
      EXPECT_TRUE(answers_match("\\boxed{" + ex.answer + "}", ex.answer)) << ex.answer;
    }
  }
}

TEST(Grader, SymmetricOnScalars) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"\\frac{1}{2}", "0.5"}, {"x^2+2x+1", "(x+1)^2"}, {"6-5i", "-5i+6"}, {"90^\\circ", "90"}};
  for (const auto& [a, b] : pairs) {
    EXPECT_TRUE(answers_match(a, b)) << a << " vs " << b;
    EXPECT_TRUE(answers_match(b, a)) << b << " vs " << a;
  }
}

TEST(Grader, GarbageNeverThrows) {
  std::mt19937 rng(1234);
  const std::string alphabet = "0123456789+-*/^_{}()[]\\|,.=$%!&abcxyzipe \n\t";
  const std::vector<std::string> pieces = {
      "\\frac",           "\\sqrt",         "\\left", "\\right", "\\boxed{",
      "\\begin{pmatrix}", "\\end{pmatrix}", "\\\\",   "\\pm",    "\\cup",
      "\\text{",          "\\infty",        "\\{",    "\\}",     "^\\circ"};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string a, b;
    for (std::string* s : {&a, &b}) {
      const int len = static_cast<int>(rng() % 24);
      for (int k = 0; k < len; ++k) {
        if (rng() % 4 == 0) {
          *s += pieces[rng() % pieces.size()];
        } else {
          *s += alphabet[rng() % alphabet.size()];
        }
      }
    }
    EXPECT_NO_THROW({
      (void)answers_match(a, b);
      (void)normalize_answer(a);
      (void)Expression::parse(a);
      (void)extract_answer(a);
    }) << a
       << " | " << b;
  }
  // Pathological sizes.
  const std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_FALSE(answers_match(deep, "1"));
  EXPECT_FALSE(answers_match(std::string(100000, '1'), "1"));
  std::string many_pm;
  for (int i = 0; i < 30; ++i) many_pm += "1\\pm";
  EXPECT_FALSE(answers_match(many_pm + "1", "2"));
  std::string long_list = "1";
  for (int i = 2; i < 500; ++i) long_list += "," + std::to_string(i);
  EXPECT_TRUE(answers_match(long_list, long_list));
  EXPECT_FALSE(answers_match(long_list + ",1000", long_list + ",1001"));
}

TEST(Normalize, Conventions) {
  EXPECT_EQ(normalize_answer("\\left( 3, \\frac{\\pi}{2} \\right)"), "(3,\\frac{\\pi}{2})");
  EXPECT_EQ(normalize_answer("\\dfrac{17}{50}"), "\\frac{17}{50}");
  EXPECT_EQ(normalize_answer("10,\\!080"), "10080");
  EXPECT_EQ(normalize_answer("\\$32,\\!348"), "32348");
  EXPECT_EQ(normalize_answer("90^\\circ"), "90");
  EXPECT_EQ(normalize_answer("864 \\mbox{ inches}^2"), "864");
  EXPECT_EQ(normalize_answer("\\frac{270}7\\text{ degrees}"), "\\frac{270}7");
  EXPECT_EQ(normalize_answer("5.4 \\text{ cents}"), "5.4");
  EXPECT_EQ(normalize_answer("\\text{Evelyn}"), "Evelyn");
  EXPECT_EQ(normalize_answer("x=5"), "5");
  EXPECT_EQ(normalize_answer("x \\in [-2,7]"), "[-2,7]");
  EXPECT_EQ(normalize_answer("50\\%"), "50");
  EXPECT_EQ(normalize_answer("5."), "5");
  EXPECT_EQ(normalize_answer("\\cot x"), "\\cot x");
  EXPECT_EQ(normalize_answer("$\\boxed{42}$"), "42");
  EXPECT_EQ(normalize_answer("11,\\! 111,\\! 111,\\! 100"), "11111111100");
  EXPECT_EQ(normalize_answer("\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}"),
            "\\begin{pmatrix}-1\\\\2\\end{pmatrix}");
  EXPECT_EQ(normalize_answer("5x - 7y + 11z + 4 = 0"), "5x-7y+11z+4=0");
  EXPECT_EQ(normalize_answer(""), "");
}

std::complex<double> value(const std::string& text) {
  const auto v = evaluate_constant(text);
  EXPECT_TRUE(v.has_value()) << text;
  return v.value_or(std::complex<double>(NAN, NAN));
}

TEST(Expression, Numbers) {
  EXPECT_DOUBLE_EQ(value("1+2*3").real(), 7.0);
  EXPECT_DOUBLE_EQ(value("(1+2)*3").real(), 9.0);
  EXPECT_DOUBLE_EQ(value("2^3^2").real(), 512.0);  // right-associative
  EXPECT_DOUBLE_EQ(value("-2^2").real(), -4.0);
  EXPECT_DOUBLE_EQ(value("2^{-1}").real(), 0.5);
  EXPECT_DOUBLE_EQ(value("\\frac{3}{4}").real(), 0.75);
  EXPECT_DOUBLE_EQ(value("\\dfrac{3}{4}").real(), 0.75);
  EXPECT_DOUBLE_EQ(value("\\tfrac34").real(), 0.75);
  EXPECT_DOUBLE_EQ(value("\\frac{270}7").real(), 270.0 / 7.0);
  EXPECT_DOUBLE_EQ(value("\\sqrt{16}").real(), 4.0);
  EXPECT_DOUBLE_EQ(value("\\sqrt[3]{27}").real(), 3.0);
  EXPECT_DOUBLE_EQ(value("\\sqrt[3]{-27}").real(), -3.0);
  EXPECT_NEAR(value("11\\sqrt2").real(), 11.0 * std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(value("\\pi").real(), 3.141592653589793, 1e-15);
  EXPECT_DOUBLE_EQ(value("2\\cdot3").real(), 6.0);
  EXPECT_DOUBLE_EQ(value("2\\times3").real(), 6.0);
  EXPECT_DOUBLE_EQ(value("6\\div4").real(), 1.5);
  EXPECT_DOUBLE_EQ(value(".5").real(), 0.5);
  EXPECT_DOUBLE_EQ(value("2(3+4)").real(), 14.0);  // implicit multiplication
  EXPECT_DOUBLE_EQ(value("(1+1)(2+2)").real(), 8.0);
  EXPECT_DOUBLE_EQ(value("50\\%").real(), 0.5);
  EXPECT_DOUBLE_EQ(value("2\\frac{1}{2}").real(), 2.5);  // mixed number
  EXPECT_DOUBLE_EQ(value("-1\\frac{1}{2}").real(), -1.5);
  EXPECT_DOUBLE_EQ(value("2\\frac{3}{2}").real(), 3.0);  // improper: a product
  EXPECT_DOUBLE_EQ(value("\\left(1+2\\right)^2").real(), 9.0);
  EXPECT_DOUBLE_EQ(value("{2}^{3}").real(), 8.0);
  EXPECT_DOUBLE_EQ(value("1.5e3").real(), 1500.0);
  EXPECT_DOUBLE_EQ(value("4!").real(), 24.0);
  EXPECT_DOUBLE_EQ(value("\\binom{5}{2}").real(), 10.0);
  EXPECT_DOUBLE_EQ(value("|-3|").real(), 3.0);
  EXPECT_NEAR(value("\\sin\\frac{\\pi}{6}").real(), 0.5, 1e-12);
  EXPECT_NEAR(value("\\cos^2 0").real(), 1.0, 1e-12);
  EXPECT_NEAR(value("\\log_2 8").real(), 3.0, 1e-12);
  EXPECT_NEAR(value("\\ln e").real(), 1.0, 1e-12);
  const auto z = value("3-2i");
  EXPECT_DOUBLE_EQ(z.real(), 3.0);
  EXPECT_DOUBLE_EQ(z.imag(), -2.0);
  EXPECT_NEAR(value("\\sqrt{-4}").imag(), 2.0, 1e-12);
  EXPECT_TRUE(std::isinf(value("\\infty").real()));
}

TEST(Expression, VariablesAndFailures) {
  const auto e = Expression::parse("x^2 + 2xy + y_1");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->variables(), (std::vector<std::string>{"x", "y", "y_1"}));
  const auto v = e->evaluate({{"x", 2.0}, {"y", 3.0}, {"y_1", 1.0}});
  EXPECT_DOUBLE_EQ(v.real(), 4.0 + 12.0 + 1.0);
  EXPECT_TRUE(std::isnan(e->evaluate({}).real()));
  const auto greek = Expression::parse("2\\theta+\\alpha");
  ASSERT_TRUE(greek.has_value());
  EXPECT_EQ(greek->variables(), (std::vector<std::string>{"theta", "alpha"}));
  for (const char* bad : {"", "1+", "(1", "1)", "\\frac{1}", "\\text{hi}", "1,2", "\\unknown",
                          "2 = 3", "\\sqrt", "{", "^2", "1..2"})
    EXPECT_FALSE(Expression::parse(bad).has_value()) << bad;
  EXPECT_FALSE(evaluate_constant("x+1").has_value());
}

// `rkv grade` on the command line: values that start with '-' or are empty.
std::string run_command(const std::string& cmd) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return "<popen failed>";
  std::array<char, 256> buf{};
  while (fgets(buf.data(), buf.size(), pipe.get()) != nullptr) out += buf.data();
  return out;
}

TEST(GradeCli, PredAndGold) {
  const std::string rkv = rkv::test::rkv_binary();
  EXPECT_EQ(run_command(rkv + " grade --pred=-3 --gold=-3"), "true\n");
  EXPECT_EQ(run_command(rkv + " grade --pred -3 --gold -3"), "true\n");
  EXPECT_EQ(run_command(rkv + " grade --pred=-3 --gold=3"), "false\n");
  EXPECT_EQ(run_command(rkv + " grade --pred= --gold=5"), "false\n");
  EXPECT_EQ(run_command(rkv + " grade --gold=5 --pred="), "false\n");
  EXPECT_EQ(run_command(rkv + " grade --pred='\\dfrac{1}{2}' --gold=0.5"), "true\n");
  EXPECT_EQ(run_command(rkv + " grade --extract --pred='so \\boxed{7}.' --gold=7"), "true\n");
  EXPECT_NE(std::system((rkv + " grade --pred=1 > /dev/null 2>&1").c_str()), 0);
}

TEST(GradeCli, RegradeFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("rkv_grade_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / "run.jsonl", out = dir / "regraded.jsonl";
  {
    std::ofstream f(in);
    f << R"({"output": "... so the answer is \\boxed{\\frac{1}{2}}.", "gold": "0.5"})"
      << "\n";
    f << R"({"extracted": "3", "answer": "4"})"
      << "\n";
    f << "\n";
    f << R"({"output": "She pays $1,200 in total.", "gold": "1200", "dataset": "gsm8k"})"
      << "\n";
  }
  const std::string rkv = rkv::test::rkv_binary();
  const std::string printed =
      run_command(rkv + " grade --file '" + in.string() + "' --out '" + out.string() + "'");
  EXPECT_NE(printed.find("1\ttrue\t\\frac{1}{2}\t0.5\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("2\tfalse\t3\t4\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("4\ttrue\t1200\t1200\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("graded 3, correct 2, accuracy 0.6667"), std::string::npos) << printed;
  std::ifstream regraded(out);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(regraded, line);)
    lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["extracted"], "\\frac{1}{2}");
  EXPECT_EQ(lines[0]["correct"], true);
  EXPECT_EQ(lines[1]["correct"], false);
  EXPECT_EQ(lines[2]["correct"], true);
  // A malformed line is an error naming the line.
  {
    std::ofstream f(in, std::ios::app);
    f << "{not json\n";
  }
  const std::string err = run_command(rkv + " grade --file '" + in.string() + "' -q 2>&1");
  EXPECT_NE(err.find("run.jsonl:5: malformed JSON"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rkv::eval
