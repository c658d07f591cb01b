// Fuzzes answer extraction and grading of model outputs (src/eval/extract.cpp, grade.cpp,
// normalize.cpp, math_expr.cpp): they parse arbitrary model text and are documented never to
// throw, so any exception here is a bug. Input: the model output, optionally followed by
// "\n--8<--\n" and the gold answer.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "fuzz_common.h"
#include "rkv/eval.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ev = rkv::eval;
  const auto parts = rkv_fuzz::split_parts(rkv_fuzz::as_text(data, size), 2);
  const std::string_view output = parts[0];
  const std::string_view gold = parts.size() > 1 ? parts[1] : std::string_view("42");
  (void)ev::last_boxed(output);
  (void)ev::last_number(output);
  const std::string math = ev::extract_answer(output, ev::AnswerStyle::kMath);
  const std::string number = ev::extract_answer(output, ev::AnswerStyle::kNumber);
  (void)ev::normalize_answer(output);
  (void)ev::answers_match(math, gold);
  (void)ev::answers_match(output, gold);
  (void)ev::grade_output(output, gold, ev::AnswerStyle::kNumber);
  if (auto e = ev::Expression::parse(output)) {
    std::map<std::string, std::complex<double>> values;
    for (const auto& v : e->variables()) values[v] = {1.5, 0.25};
    (void)e->evaluate(values);
    (void)e->evaluate();
  }
  (void)ev::evaluate_constant(gold);
  return 0;
}
