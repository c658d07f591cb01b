// String normalisation of answers before grading (the MATH-benchmark conventions): math
// delimiters and \boxed wrappers, spacing commands, \left/\right, dfrac/tfrac, \text{} wrappers and
// units, degrees, percent, dollars, blanks, a trailing period, a leading "x =" and thousands
// separators.
#include <algorithm>

#include "eval/text.h"
#include "rkv/eval.h"

namespace rkv::eval {
namespace {

using detail::is_alpha;
using detail::is_digit;
using detail::is_space;
using detail::replace_all;
using detail::trim;

constexpr std::size_t kMaxLength = 20000;

// Words dropped after a number ("864 square inches", "5.4 cents"); matched case-insensitively,
// with or without a plural 's'.
constexpr std::string_view kUnitWords[] = {
    "unit",   "sq",     "square",     "cubic",      "cm",        "mm",         "km",
    "meter",  "metre",  "centimeter", "centimetre", "kilometer", "millimeter", "inch",
    "inches", "ft",     "foot",       "feet",       "yd",        "yard",       "mile",
    "degree", "deg",    "radian",     "dollar",     "cent",      "hour",       "hr",
    "minute", "min",    "second",     "sec",        "day",       "week",       "month",
    "year",   "mph",    "kg",         "gram",       "pound",     "lb",         "lbs",
    "ounce",  "oz",     "liter",      "litre",      "ml",        "gallon",     "percent",
    "point",  "people", "person",     "student",    "child",     "children",   "cup",
    "page",   "book",   "apple",      "ticket",     "time",      "way",        "step",
    "coin",   "marble", "ball",       "item",       "piece",
};

bool is_unit_word(std::string_view word) {
  std::string w = detail::lower(word);
  for (int pass = 0; pass < 2; ++pass) {
    if (std::find(std::begin(kUnitWords), std::end(kUnitWords), w) != std::end(kUnitWords))
      return true;
    if (w.size() > 2 && w.back() == 's') {
      w.pop_back();
    } else {
      break;
    }
  }
  return false;
}

bool is_wordish(std::string_view s) {
  bool any = false;
  for (char c : s) {
    if (is_alpha(c))
      any = true;
    else if (!(is_space(c) || c == '.' || c == '-'))
      return false;
  }
  return any;
}

// Every word of the phrase is a unit word ("square inches", "cm").
bool is_unit_phrase(std::string_view s) {
  bool any = false;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && !is_alpha(s[i])) ++i;
    std::size_t j = i;
    while (j < s.size() && is_alpha(s[j])) ++j;
    if (j > i) {
      if (!is_unit_word(s.substr(i, j - i))) return false;
      any = true;
    }
    i = j;
  }
  return any;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Strips wrappers that cover the whole answer: $...$, \(...\), \[...\], \boxed{...}, \fbox{...},
// and a brace group {...}.
std::string unwrap_whole(std::string s) {
  for (int guard = 0; guard < 16; ++guard) {
    std::string t(trim(s));
    if (t.size() >= 4 && starts_with(t, "$$") && ends_with(t, "$$")) {
      s = t.substr(2, t.size() - 4);
    } else if (t.size() >= 2 && t.front() == '$' && t.back() == '$') {
      s = t.substr(1, t.size() - 2);
    } else if (t.size() >= 4 && (starts_with(t, "\\(") && ends_with(t, "\\)"))) {
      s = t.substr(2, t.size() - 4);
    } else if (t.size() >= 4 && (starts_with(t, "\\[") && ends_with(t, "\\]"))) {
      s = t.substr(2, t.size() - 4);
    } else if (starts_with(t, "\\boxed{") || starts_with(t, "\\fbox{")) {
      const std::size_t open = t.find('{');
      if (detail::matching_brace(t, open) != t.size() - 1) return t;
      s = t.substr(open + 1, t.size() - open - 2);
    } else if (starts_with(t, "\\boxed ")) {
      s = t.substr(7);
    } else if (!t.empty() && t.front() == '{' && detail::matching_brace(t, 0) == t.size() - 1) {
      s = t.substr(1, t.size() - 2);
    } else {
      return t;
    }
  }
  return std::string(trim(s));
}

// \! goes; \, \; \: "\ " and ~ become blanks; "\\" (a row break) is kept.
std::string remove_spacing(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '~') {
      out += ' ';
    } else if (c == '\\' && i + 1 < s.size()) {
      const char n = s[i + 1];
      if (n == ',' || n == ';' || n == ':' || n == ' ') {
        out += ' ';
      } else if (n != '!') {
        out += c;
        out += n;
      }
      ++i;
    } else {
      out += c;
    }
  }
  return out;
}

// Removes `\name` when it is not the prefix of a longer command name.
void remove_command(std::string& s, std::string_view name, std::string_view with = "") {
  std::size_t pos = 0;
  while ((pos = s.find(name, pos)) != std::string::npos) {
    const std::size_t end = pos + name.size();
    if (end < s.size() && is_alpha(s[end])) {
      pos = end;
      continue;
    }
    s.replace(pos, name.size(), with);
    pos += with.size();
  }
}

// \left( -> (, \right. -> nothing, \bigl[ -> [ ...
void remove_sizers(std::string& s) {
  static constexpr std::string_view kSizers[] = {
      "\\left", "\\right", "\\middle", "\\biggl", "\\biggr", "\\Biggl", "\\Biggr", "\\bigg",
      "\\Bigg", "\\bigl",  "\\bigr",   "\\Bigl",  "\\Bigr",  "\\big",   "\\Big"};
  for (std::string_view name : kSizers) {
    std::size_t pos = 0;
    while ((pos = s.find(name, pos)) != std::string::npos) {
      std::size_t end = pos + name.size();
      if (end < s.size() && is_alpha(s[end])) {
        pos = end;
        continue;
      }
      std::size_t p = end;
      while (p < s.size() && is_space(s[p])) ++p;
      if (p < s.size() && s[p] == '.') end = p + 1;  // the null delimiter
      s.erase(pos, end - pos);
    }
  }
}

// 90^\circ, 90^{\circ}, 90\circ, 90\degree -> 90
void remove_degrees(std::string& s) {
  for (std::string_view name : {std::string_view("\\circ"), std::string_view("\\degree")}) {
    std::size_t pos = 0;
    while ((pos = s.find(name, pos)) != std::string::npos) {
      std::size_t start = pos, end = pos + name.size();
      std::size_t l = pos;
      while (l > 0 && is_space(s[l - 1])) --l;
      if (l > 0 && s[l - 1] == '{') {
        std::size_t l2 = l - 1;
        while (l2 > 0 && is_space(s[l2 - 1])) --l2;
        std::size_t r = end;
        while (r < s.size() && is_space(s[r])) ++r;
        if (l2 > 0 && s[l2 - 1] == '^' && r < s.size() && s[r] == '}') {
          start = l2 - 1;
          end = r + 1;
        }
      } else if (l > 0 && s[l - 1] == '^') {
        start = l - 1;
      }
      s.erase(start, end - start);
      pos = start;
    }
  }
}

// Drops "^2", "^3", "^{2}", "^{3}" at position p (after a unit).
std::size_t skip_unit_power(const std::string& s, std::size_t p) {
  std::size_t q = p;
  while (q < s.size() && is_space(s[q])) ++q;
  if (q < s.size() && s[q] == '^') {
    if (q + 1 < s.size() && (s[q + 1] == '2' || s[q + 1] == '3')) return q + 2;
    if (q + 3 < s.size() && s[q + 1] == '{' && (s[q + 2] == '2' || s[q + 2] == '3') &&
        s[q + 3] == '}')
      return q + 4;
  }
  return p;
}

// \text{...} and friends: units after a value are dropped, "and"/"or" become commas, anything
// else is unwrapped.
void handle_text_commands(std::string& s) {
  static constexpr std::string_view kUnitCapable[] = {"text",   "textrm",     "mbox",  "mathrm",
                                                      "textit", "textnormal", "textup"};
  static constexpr std::string_view kWrappers[] = {
      "text",   "textrm", "mbox",   "mathrm", "textit",     "textnormal", "textup", "textbf",
      "mathbf", "mathit", "textsf", "mathsf", "boldsymbol", "mathbb",     "hbox"};
  std::size_t pos = 0;
  for (int guard = 0; guard < 20000 && (pos = s.find('\\', pos)) != std::string::npos; ++guard) {
    std::size_t end = pos + 1;
    while (end < s.size() && is_alpha(s[end])) ++end;
    const std::string name = s.substr(pos + 1, end - pos - 1);
    if (std::find(std::begin(kWrappers), std::end(kWrappers), name) == std::end(kWrappers)) {
      pos = end == pos + 1 ? pos + 2 : end;
      continue;
    }
    std::size_t open = end;
    while (open < s.size() && is_space(s[open])) ++open;
    if (open >= s.size() || s[open] != '{') {
      s.erase(pos, end - pos);  // a stray \text without argument
      continue;
    }
    const std::size_t close = detail::matching_brace(s, open);
    if (close == std::string::npos) {
      s.erase(pos, open + 1 - pos);
      continue;
    }
    const std::string content = s.substr(open + 1, close - open - 1);
    const std::string_view content_trim = trim(content);
    const std::string prefix(trim(std::string_view(s).substr(0, pos)));
    const bool unit_capable =
        std::find(std::begin(kUnitCapable), std::end(kUnitCapable), name) != std::end(kUnitCapable);
    if (content_trim == "and" || content_trim == "or" || content_trim == ",") {
      s.replace(pos, close + 1 - pos, ",");
      pos += 1;
    } else if (unit_capable && !prefix.empty() && prefix.back() != ',' && is_wordish(content) &&
               (is_unit_phrase(content) || (!content.empty() && is_space(content.front())) ||
                (name == "mathrm" && content_trim != "e" && content_trim != "i"))) {
      s.erase(pos, skip_unit_power(s, close + 1) - pos);
    } else {
      s.replace(pos, close + 1 - pos, content);
    }
  }
}

// "864 square inches" -> "864" when every trailing word is a unit and a number precedes.
void strip_trailing_units(std::string& s) {
  for (int guard = 0; guard < 8; ++guard) {
    std::string t(trim(s));
    std::size_t end = t.size();
    // an optional ^2 / ^3 after the unit
    if (end >= 2 && t[end - 2] == '^' && (t[end - 1] == '2' || t[end - 1] == '3'))
      end -= 2;
    else if (end >= 4 && ends_with(t, "}") && t[end - 4] == '^' && t[end - 3] == '{')
      end -= 4;
    std::size_t start = end;
    while (start > 0 && is_alpha(t[start - 1])) --start;
    if (start == end || !is_unit_word(std::string_view(t).substr(start, end - start))) return;
    if (start == 0 || !(is_space(t[start - 1]) || is_digit(t[start - 1]))) return;
    const std::string_view rest = trim(std::string_view(t).substr(0, start));
    if (rest.empty() || std::none_of(rest.begin(), rest.end(), is_digit)) return;
    s = std::string(rest);
  }
}

// Plain-text names written without a backslash: sqrt(2) -> \sqrt(2), 2pi -> 2\pi.
void add_backslashes(std::string& s) {
  static constexpr std::string_view kNames[] = {"sqrt", "pi",  "infty", "sin", "cos", "tan",
                                                "cot",  "sec", "csc",   "ln",  "log", "exp"};
  for (std::string_view name : kNames) {
    for (std::size_t pos = s.find(name); pos != std::string::npos; pos = s.find(name, pos + 1)) {
      if (pos > 0 && (is_alpha(s[pos - 1]) || s[pos - 1] == '\\')) continue;
      const std::size_t end = pos + name.size();
      if (end < s.size() && is_alpha(s[end])) continue;
      s.insert(pos, 1, '\\');
      ++pos;
    }
  }
}

// Removes blanks, keeping one between a command and a following letter ("\cot x").
std::string collapse_blanks(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!is_space(s[i])) {
      out += s[i];
      continue;
    }
    std::size_t j = i;
    while (j < s.size() && is_space(s[j])) ++j;
    if (j < s.size() && is_alpha(s[j]) && !out.empty() && is_alpha(out.back())) {
      std::size_t k = out.size();
      while (k > 0 && is_alpha(out[k - 1])) --k;
      if (k > 0 && out[k - 1] == '\\') out += ' ';
    }
    i = j - 1;
  }
  return out;
}

// The length of a simple left-hand side at the start of s: x, x_1, x_{12}, \theta, f(x);
// 0 when there is none.
std::size_t simple_lhs_length(std::string_view s) {
  std::size_t p = 0;
  if (p < s.size() && is_alpha(s[p])) {
    ++p;
  } else if (p < s.size() && s[p] == '\\') {
    ++p;
    const std::size_t start = p;
    while (p < s.size() && is_alpha(s[p])) ++p;
    static constexpr std::string_view kNames[] = {
        "theta", "alpha", "beta", "gamma", "phi", "lambda", "omega", "mu", "sigma", "tau", "rho"};
    if (std::find(std::begin(kNames), std::end(kNames), s.substr(start, p - start)) ==
        std::end(kNames))
      return 0;
  } else {
    return 0;
  }
  if (p < s.size() && s[p] == '_') {
    ++p;
    if (p < s.size() && s[p] == '{') {
      const std::size_t close = detail::matching_brace(s, p);
      if (close == std::string_view::npos) return 0;
      p = close + 1;
    } else if (p < s.size() && (is_alpha(s[p]) || is_digit(s[p]))) {
      ++p;
    } else {
      return 0;
    }
  } else if (p < s.size() && s[p] == '(') {
    const std::size_t close = s.find(')', p);
    if (close == std::string_view::npos || close - p > 4) return 0;
    p = close + 1;
  }
  return p;
}

// "x=5" -> "5", "x\in[-2,7]" -> "[-2,7]" (on a blank-free string).
std::string strip_leading_assignment(const std::string& s) {
  const std::size_t n = simple_lhs_length(s);
  if (n == 0 || n >= s.size()) return s;
  std::size_t p = n;
  if (p < s.size() && s[p] == ' ') ++p;
  std::size_t rhs;
  if (s[p] == '=' && (p + 1 >= s.size() || s[p + 1] != '=')) {
    rhs = p + 1;
  } else if (s.compare(p, 3, "\\in") == 0 && !(p + 3 < s.size() && is_alpha(s[p + 3]))) {
    rhs = p + 3;
  } else {
    return s;
  }
  std::string rest(trim(std::string_view(s).substr(rhs)));
  if (rest.empty() || rest.find('=') != std::string::npos) return s;
  return rest;
}

// 10,080 and 1,234,567.5 -> 10080, 1234567.5
std::string strip_thousands(const std::string& s) {
  std::size_t p = 0;
  if (p < s.size() && (s[p] == '-' || s[p] == '+')) ++p;
  const std::size_t first = p;
  while (p < s.size() && is_digit(s[p])) ++p;
  if (p == first || p - first > 3 || p >= s.size() || s[p] != ',') return s;
  while (p < s.size() && s[p] == ',') {
    std::size_t q = p + 1;
    while (q < s.size() && is_digit(s[q])) ++q;
    if (q - p - 1 != 3) return s;
    p = q;
  }
  if (p < s.size() && s[p] == '.') {
    ++p;
    while (p < s.size() && is_digit(s[p])) ++p;
  }
  if (p != s.size()) return s;
  std::string out;
  for (char c : s)
    if (c != ',') out += c;
  return out;
}

std::string normalize_once(std::string s) {
  // Unicode symbols models like to print.
  replace_all(s, "\xE2\x88\x92", "-");         // minus sign
  replace_all(s, "\xC3\x97", "\\times ");      // ×
  replace_all(s, "\xC2\xB7", "\\cdot ");       // ·
  replace_all(s, "\xCF\x80", "\\pi ");         // π
  replace_all(s, "\xE2\x88\x9A", "\\sqrt");    // √
  replace_all(s, "\xE2\x88\x9E", "\\infty ");  // ∞
  replace_all(s, "\xC2\xB0", "^\\circ ");      // °
  replace_all(s, "\xE2\x88\xAA", "\\cup ");    // ∪
  s = unwrap_whole(std::move(s));

  for (std::string_view style : {"\\displaystyle", "\\textstyle", "\\scriptstyle"})
    remove_command(s, style);
  // Spacing.
  s = remove_spacing(s);
  remove_command(s, "\\qquad", " ");
  remove_command(s, "\\quad", " ");
  replace_all(s, "{,}", ",");
  remove_sizers(s);
  // Commands with the same meaning.
  remove_command(s, "\\dfrac", "\\frac");
  remove_command(s, "\\tfrac", "\\frac");
  remove_command(s, "\\cfrac", "\\frac");
  remove_command(s, "\\dbinom", "\\binom");
  remove_command(s, "\\tbinom", "\\binom");
  remove_command(s, "\\lbrace", "\\{");
  remove_command(s, "\\rbrace", "\\}");
  remove_command(s, "\\langle", "(");
  remove_command(s, "\\rangle", ")");
  remove_command(s, "\\lvert", "|");
  remove_command(s, "\\rvert", "|");
  remove_command(s, "\\infin", "\\infty");
  remove_command(s, "\\varnothing", "\\emptyset");
  remove_command(s, "\\mp", "\\pm");
  replace_all(s, "\\{\\}", "\\emptyset");
  // Degrees, percent, dollars.
  remove_degrees(s);
  replace_all(s, "\\%", "");
  replace_all(s, "%", "");
  replace_all(s, "\\$", "");
  replace_all(s, "$", "");
  remove_command(s, "\\textdollar");
  handle_text_commands(s);
  strip_trailing_units(s);
  add_backslashes(s);

  s = collapse_blanks(trim(s));
  while (!s.empty() && s.back() == '.') s.pop_back();
  while (s.size() >= 2 && ends_with(s, "\\\\")) s.resize(s.size() - 2);
  s = strip_leading_assignment(s);
  s = strip_thousands(s);
  return unwrap_whole(std::move(s));
}

}  // namespace

std::string normalize_answer(std::string_view answer) {
  try {
    std::string s(trim(answer));
    if (s.size() > kMaxLength) return s;
    for (int pass = 0; pass < 3; ++pass) {
      std::string next = normalize_once(s);
      if (next == s) break;
      s = std::move(next);
    }
    return s;
  } catch (...) {
    return std::string(answer);
  }
}

}  // namespace rkv::eval
