// Answer extraction from a model's output: the last balanced \boxed{} / \fbox{}, then the
// "Final answer:" and "The answer is" phrases, then (GSM8K) the last number.
#include <algorithm>

#include "eval/text.h"
#include "rkv/eval.h"

namespace rkv::eval {
namespace {

using detail::is_alpha;
using detail::is_digit;
using detail::is_space;
using detail::trim;

constexpr std::size_t kMaxPhrase = 400;

// Position of the last case-insensitive occurrence of `needle`, npos when absent.
std::size_t rfind_ci(std::string_view hay, std::string_view needle) {
  if (needle.size() > hay.size()) return std::string_view::npos;
  for (std::size_t i = hay.size() - needle.size() + 1; i-- > 0;) {
    bool ok = true;
    for (std::size_t k = 0; k < needle.size() && ok; ++k)
      ok = detail::to_lower(hay[i + k]) == detail::to_lower(needle[k]);
    if (ok) return i;
  }
  return std::string_view::npos;
}

// The answer written after a marker phrase: a $...$ / \(...\) / \[...\] group when one starts
// right away, else the rest of the line up to the end of the sentence.
std::string phrase_answer(std::string_view rest) {
  std::size_t p = 0;
  for (;;) {
    while (p < rest.size() && (is_space(rest[p]) || rest[p] == '*' || rest[p] == ':' ||
                               rest[p] == '=' || rest[p] == '#'))
      ++p;
    if (rest.compare(p, 2, "is") == 0 && (p + 2 >= rest.size() || !is_alpha(rest[p + 2]))) {
      p += 2;
      continue;
    }
    break;
  }
  rest = rest.substr(p);
  if (auto boxed = last_boxed(rest.substr(0, rest.find('\n')))) return *boxed;
  struct Delim {
    std::string_view open, close;
  };
  for (const Delim d :
       {Delim{"$$", "$$"}, Delim{"$", "$"}, Delim{"\\(", "\\)"}, Delim{"\\[", "\\]"}}) {
    if (rest.substr(0, d.open.size()) == d.open) {
      const std::size_t close = rest.find(d.close, d.open.size());
      if (close != std::string_view::npos && close - d.open.size() <= kMaxPhrase)
        return std::string(trim(rest.substr(d.open.size(), close - d.open.size())));
    }
  }
  std::string_view line = rest.substr(0, rest.find('\n'));
  for (std::size_t i = 0; i + 1 < line.size(); ++i) {
    if (line[i] == '.' && is_space(line[i + 1])) {
      line = line.substr(0, i);
      break;
    }
  }
  line = trim(line);
  while (!line.empty() && (line.back() == '.' || line.back() == '*')) line.remove_suffix(1);
  line = trim(line);
  if (line.size() > kMaxPhrase) return {};
  return std::string(line);
}

std::optional<std::string> after_marker(std::string_view output, std::string_view marker) {
  const std::size_t pos = rfind_ci(output, marker);
  if (pos == std::string_view::npos) return std::nullopt;
  std::string answer = phrase_answer(output.substr(pos + marker.size()));
  if (answer.empty()) return std::nullopt;
  return answer;
}

}  // namespace

std::optional<std::string> last_boxed(std::string_view text) {
  std::vector<std::pair<std::size_t, std::size_t>> hits;  // position, name length
  for (std::string_view name : {std::string_view("\\boxed"), std::string_view("\\fbox")}) {
    for (std::size_t pos = text.find(name); pos != std::string_view::npos;
         pos = text.find(name, pos + 1)) {
      const std::size_t end = pos + name.size();
      if (end < text.size() && is_alpha(text[end])) continue;
      hits.emplace_back(pos, name.size());
    }
  }
  std::sort(hits.begin(), hits.end());
  for (auto it = hits.rbegin(); it != hits.rend(); ++it) {
    std::size_t p = it->first + it->second;
    while (p < text.size() && is_space(text[p])) ++p;
    if (p < text.size() && text[p] == '{') {
      const std::size_t close = detail::matching_brace(text, p);
      if (close == std::string_view::npos) continue;  // truncated: try an earlier one
      const std::string_view inner = trim(text.substr(p + 1, close - p - 1));
      if (inner.empty()) continue;
      return std::string(inner);
    }
    // \boxed 5 (a single token, as TeX reads it)
    if (p > it->first + it->second) {
      std::size_t q = p;
      while (q < text.size() && !is_space(text[q]) && text[q] != '$') ++q;
      if (q > p) return std::string(text.substr(p, q - p));
    }
  }
  return std::nullopt;
}

std::optional<std::string> last_number(std::string_view text) {
  std::optional<std::string> last;
  std::size_t i = 0;
  while (i < text.size()) {
    const bool starts =
        is_digit(text[i]) || (text[i] == '.' && i + 1 < text.size() && is_digit(text[i + 1]));
    if (!starts) {
      ++i;
      continue;
    }
    std::string number;
    if (i > 0 && text[i - 1] == '-' &&
        !(i > 1 && (is_digit(text[i - 2]) || is_alpha(text[i - 2]) || text[i - 2] == ')')))
      number = "-";
    std::size_t p = i;
    while (p < text.size() && is_digit(text[p])) number += text[p++];
    // thousands groups: ",ddd" not followed by another digit
    while (p + 3 < text.size() && text[p] == ',' && is_digit(text[p + 1]) &&
           is_digit(text[p + 2]) && is_digit(text[p + 3]) &&
           !(p + 4 < text.size() && is_digit(text[p + 4]))) {
      number.append(text.substr(p + 1, 3));
      p += 4;
    }
    if (p + 1 < text.size() && text[p] == '.' && is_digit(text[p + 1])) {
      number += text[p++];
      while (p < text.size() && is_digit(text[p])) number += text[p++];
    }
    last = number;
    i = p;
  }
  return last;
}

std::string extract_answer(std::string_view output, AnswerStyle style) {
  try {
    if (auto boxed = last_boxed(output)) return *boxed;
    std::optional<std::string> phrase;
    if (style == AnswerStyle::kNumber) {
      const std::size_t pos = output.rfind("####");
      if (pos != std::string_view::npos) {
        if (auto n = last_number(output.substr(pos, output.find('\n', pos) - pos))) return *n;
      }
    }
    phrase = after_marker(output, "final answer");
    if (!phrase) phrase = after_marker(output, "the answer is");
    if (style == AnswerStyle::kMath) return phrase.value_or("");
    if (phrase) {
      if (auto n = last_number(*phrase)) return *n;
      return *phrase;
    }
    return last_number(output).value_or("");
  } catch (...) {
    return {};
  }
}

Grade grade_output(std::string_view output, std::string_view gold, AnswerStyle style) {
  Grade g;
  g.extracted = extract_answer(output, style);
  g.correct = answers_match(g.extracted, gold);
  return g;
}

}  // namespace rkv::eval
