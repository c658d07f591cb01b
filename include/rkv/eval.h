// The accuracy harness: math datasets in jsonl, the R-KV evaluation prompt, answer extraction
// from a model's output and a grader that follows the MATH-benchmark conventions.
//
//   auto data = rkv::eval::load_dataset("math500.jsonl", {.preset = "math500"});
//   std::string prompt = rkv::eval::render_prompt(rkv::eval::kDefaultPromptTemplate, q);
//   std::string answer = rkv::eval::extract_answer(output, data.style);
//   bool ok = rkv::eval::answers_match(answer, example.answer);
//
// docs/EVAL.md describes every rule. Grading never throws: garbage in gives false.
#pragma once

#include <complex>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::eval {

// ---- datasets ------------------------------------------------------------------------------

// How the final answer is pulled out of a model's output. kNumber (GSM8K) falls back to the last
// number of the output when no boxed / "Final answer:" / "The answer is" answer is found.
enum class AnswerStyle { kMath, kNumber };

struct DatasetPreset {
  std::string_view name;            // "math500", "aime24", "gsm8k"
  std::string_view question_field;  // e.g. "problem"
  std::string_view answer_field;    // e.g. "answer"
  bool answer_after_hashes;         // GSM8K: the gold answer is the text after the last "####"
  AnswerStyle style;
  int max_length;  // default generation budget in tokens (MATH-500 8192, AIME 16384, GSM8K 8192)
  // The prompt around the question; empty: the R-KV evaluation prompt (kDefaultPromptTemplate).
  std::string_view prompt_template = {};
};

// All presets, in a fixed order.
const std::vector<DatasetPreset>& dataset_presets();
// The preset called `name` (case-insensitive; "math-500", "aime" and "aime2024" are accepted
// aliases), nullptr when there is none.
const DatasetPreset* find_preset(std::string_view name);
// Default max generation length for a preset name; 8192 for an unknown name.
int default_max_length(std::string_view preset);

struct DatasetOptions {
  std::string preset{};          // a preset name, or "" for explicit fields
  std::string question_field{};  // overrides the preset's field; "problem" when neither is given
  std::string answer_field{};    // overrides the preset's field; "answer" when neither is given
  std::size_t limit = 0;         // keep the first `limit` examples; 0 keeps all
};

struct Example {
  std::size_t index = 0;  // 0-based position among the loaded examples
  std::size_t line = 0;   // 1-based line number in the file
  std::string id;         // "unique_id" or "id" of the record when present, else the index
  std::string question;
  std::string answer;  // the gold answer (for GSM8K the text after "####")
};

struct Dataset {
  std::string name;  // the preset name, or the file's stem for explicit fields
  AnswerStyle style = AnswerStyle::kMath;
  int max_length = 8192;
  std::string prompt_template;  // the preset's prompt; empty: the R-KV evaluation prompt
  std::vector<Example> examples;
};

// Reads a jsonl file (one JSON object per line; blank lines are skipped). Throws rkv::Error for
// a missing file, an unknown preset, a malformed line or a missing / non-text field, naming the
// file and the 1-based line number. A numeric answer field is taken as its JSON text.
Dataset load_dataset(const std::filesystem::path& path, const DatasetOptions& options);

// ---- prompt ------------------------------------------------------------------------------

// The R-KV evaluation prompt; "{question}" is replaced by the problem text.
inline constexpr std::string_view kDefaultPromptTemplate =
    "You are given a math problem.\n\nProblem: {question}\n\n You need to solve the problem step "
    "by step. First, you need to provide the chain-of-thought, then provide the final answer.\n\n "
    "Provide the final answer in the format: Final answer:  \\boxed{}";

// Replaces every "{question}" in the template with `question` (other braces are left alone).
std::string render_prompt(std::string_view tmpl, std::string_view question);
// Reads a template file (--prompt-template). Throws rkv::Error when the file cannot be read or
// does not contain the "{question}" placeholder.
std::string load_prompt_template(const std::filesystem::path& path);

// ---- answer extraction -------------------------------------------------------------------

// The content of the last \boxed{...} or \fbox{...} whose braces balance (also "\boxed 5");
// nullopt when there is none.
std::optional<std::string> last_boxed(std::string_view text);
// The last number in the text ("-1,234.5" gives "-1234.5"); nullopt when there is none.
std::optional<std::string> last_number(std::string_view text);
// The final answer of a model output: the last balanced \boxed{}/\fbox{}, else the text after the
// last "Final answer:", else after the last "The answer is"; for kNumber, else the last number.
// Empty when nothing is found.
std::string extract_answer(std::string_view output, AnswerStyle style = AnswerStyle::kMath);

// ---- grading -----------------------------------------------------------------------------

// String normalisation applied to both sides before any comparison: spacing commands, \left
// \right, dfrac/tfrac, \text{} wrappers and units, degrees, percent, dollars, a trailing period,
// a leading "x =" and thousands separators. Never throws.
std::string normalize_answer(std::string_view answer);

// Whether a predicted answer is equivalent to the gold one (docs/EVAL.md, "Grading"). Never
// throws; an empty or unparsable prediction is false.
bool answers_match(std::string_view pred, std::string_view gold);

struct Grade {
  std::string extracted;
  bool correct = false;
};
// extract_answer + answers_match.
Grade grade_output(std::string_view output, std::string_view gold,
                   AnswerStyle style = AnswerStyle::kMath);

// ---- the expression evaluator behind the numeric and symbolic checks ----------------------

// A parsed LaTeX or plain-text expression: + - * / ^, implicit multiplication, \frac, \dfrac,
// \tfrac, \sqrt{}, \sqrt[n]{}, \pi, e, i (the imaginary unit), \infty, \cdot, \times, \div,
// parentheses and braces, decimals, percent, factorial, \binom, |x|, common functions (\sin,
// \cos, \tan, \cot, \sec, \csc, \arcsin, \arccos, \arctan, \ln, \log, \exp), mixed numbers
// (2\frac{1}{2}) and variables (single letters, Greek letters, subscripted x_1).
class Expression {
 public:
  // nullopt when the text is not an expression this parser understands. Never throws.
  static std::optional<Expression> parse(std::string_view text);

  // The variable names in order of first appearance.
  const std::vector<std::string>& variables() const;
  // Evaluates with the given variable values (missing variables are NaN).
  std::complex<double> evaluate(
      const std::map<std::string, std::complex<double>>& values = {}) const;

  struct Node;

 private:
  std::shared_ptr<const std::vector<Node>> nodes_;
  int root_ = -1;
  std::vector<std::string> variables_;
};

// The value of a constant expression ("\frac{\sqrt{3}}{2}", "2^{10}"); nullopt when it does not
// parse or has variables.
std::optional<std::complex<double>> evaluate_constant(std::string_view text);

}  // namespace rkv::eval
