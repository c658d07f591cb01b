// The verdict: is a predicted answer equivalent to the gold one? Both sides are normalised, then
// compared by the first rule that applies: equal strings, multiple-choice letters, unions of
// intervals, matrices, tuples / intervals / sets / lists, +- expansions, equations, and finally
// scalars (text, base-n numbers, numeric value, symbolic equality at sample points).
#include <algorithm>
#include <cmath>
#include <functional>

#include "eval/text.h"
#include "rkv/eval.h"

namespace rkv::eval {
namespace {

using Complex = std::complex<double>;
using detail::is_alpha;
using detail::is_digit;
using detail::split_top;
using detail::trim;

constexpr double kRelTol = 1e-6;
constexpr double kAbsTol = 1e-12;
constexpr int kMaxDepth = 6;
constexpr std::size_t kMaxLength = 4000;
constexpr std::size_t kMaxElements = 40;
constexpr int kSamplePoints = 6;

bool equiv(std::string_view pred, std::string_view gold, int depth);

// Comparisons left for one answers_match call: nested lists could otherwise multiply the work.
constexpr int kComparisonBudget = 20000;
thread_local int comparisons_left = 0;

bool finite(Complex z) {
  return std::isfinite(z.real()) && std::isfinite(z.imag());
}

// +1 / -1 for a real infinity, 0 otherwise.
int infinity_sign(Complex z) {
  if (std::isinf(z.real()) && (z.imag() == 0.0 || std::isnan(z.imag())))
    return z.real() > 0 ? 1 : -1;
  return 0;
}

bool close(Complex a, Complex b) {
  if (!finite(a) || !finite(b)) {
    const int sa = infinity_sign(a);
    return sa != 0 && sa == infinity_sign(b);
  }
  const double scale = std::max(std::abs(a), std::abs(b));
  return std::abs(a - b) <= kRelTol * scale + kAbsTol;
}

// ---- multiple choice ------------------------------------------------------------------------

bool is_choice(char c) {
  return c >= 'A' && c <= 'H';
}

// The gold is a bare letter: "C" or "(C)".
std::optional<char> gold_choice(const std::string& g) {
  if (g.size() == 1 && is_choice(g[0])) return g[0];
  if (g.size() == 3 && g[0] == '(' && g[2] == ')' && is_choice(g[1])) return g[1];
  return std::nullopt;
}

// The prediction names a letter: "C", "(C)", "(C) 12", "C) 12", "C.", "Option C".
std::optional<char> pred_choice(std::string p) {
  const std::string low = detail::lower(p);
  for (std::string_view prefix : {"option", "choice", "answer:", "answer"}) {
    if (low.rfind(prefix, 0) == 0) {
      p = std::string(trim(std::string_view(p).substr(prefix.size())));
      break;
    }
  }
  if (p.size() == 1 && is_choice(p[0])) return p[0];
  if (p.size() >= 3 && p[0] == '(' && p[2] == ')' && is_choice(p[1])) return p[1];
  if (p.size() >= 2 && is_choice(p[0]) && (p[1] == ')' || p[1] == '.' || p[1] == ':')) return p[0];
  return std::nullopt;
}

// ---- structure: lists, matrices, +- --------------------------------------------------------

struct ListForm {
  enum Kind { kNone, kBare, kEnclosed } kind = kNone;
  std::string open, close;  // kEnclosed: "(" "[" "\{" and ")" "]" "\}"
  std::vector<std::string> items;
};

ListForm as_list(const std::string& s) {
  ListForm form;
  std::size_t open_width = 0;
  if (s.rfind("\\{", 0) == 0)
    open_width = 2;
  else if (!s.empty() && (s[0] == '(' || s[0] == '['))
    open_width = 1;
  if (open_width > 0) {
    int depth = 0;
    for (std::size_t i = 0; i < s.size();) {
      std::size_t width = 1;
      depth += detail::bracket_delta(s, i, &width);
      if (depth == 0) {
        if (i + width == s.size()) {
          const std::string open = s.substr(0, open_width);
          const std::string inner = s.substr(open_width, i - open_width);
          std::vector<std::string> items = split_top(inner, ",");
          if (items.size() >= 2 || open == "\\{") {
            form.kind = ListForm::kEnclosed;
            form.open = open;
            form.close = s.substr(i);
            form.items = std::move(items);
            if (form.items.size() == 1 && trim(form.items[0]).empty()) form.items.clear();
            return form;
          }
        }
        break;
      }
      i += width;
    }
  }
  std::vector<std::string> items = split_top(s, ",");
  items.erase(std::remove_if(items.begin(), items.end(),
                             [](const std::string& x) { return trim(x).empty(); }),
              items.end());
  if (items.size() >= 2) {
    form.kind = ListForm::kBare;
    form.items = std::move(items);
  }
  return form;
}

using Matrix = std::vector<std::vector<std::string>>;

// \begin{pmatrix} a & b \\ c & d \end{pmatrix} (also bmatrix, Bmatrix, matrix, smallmatrix, array).
std::optional<Matrix> as_matrix(const std::string& s) {
  if (s.rfind("\\begin{", 0) != 0) return std::nullopt;
  const std::size_t name_end = s.find('}');
  if (name_end == std::string::npos) return std::nullopt;
  const std::string env = s.substr(7, name_end - 7);
  static constexpr std::string_view kEnvs[] = {"pmatrix", "bmatrix",     "Bmatrix",
                                               "matrix",  "smallmatrix", "array"};
  if (std::find(std::begin(kEnvs), std::end(kEnvs), env) == std::end(kEnvs)) return std::nullopt;
  const std::string end_tag = "\\end{" + env + "}";
  if (s.size() < end_tag.size() + name_end + 1 ||
      s.compare(s.size() - end_tag.size(), end_tag.size(), end_tag) != 0)
    return std::nullopt;
  std::string body = s.substr(name_end + 1, s.size() - end_tag.size() - name_end - 1);
  if (env == "array" && !body.empty() && body[0] == '{') {
    const std::size_t close = detail::matching_brace(body, 0);
    if (close == std::string::npos) return std::nullopt;
    body = body.substr(close + 1);
  }
  Matrix m;
  for (const std::string& row : split_top(body, "\\\\")) {
    if (trim(row).empty()) continue;
    m.push_back(split_top(row, "&"));
  }
  if (m.empty()) return std::nullopt;
  return m;
}

// Each \pm (or \mp) read both ways: "1\pm\sqrt{2}" gives "1+\sqrt{2}" and "1-\sqrt{2}".
std::vector<std::string> expand_pm(const std::string& s) {
  std::vector<std::size_t> at;
  for (std::size_t p = s.find("\\pm"); p != std::string::npos; p = s.find("\\pm", p + 1))
    if (!(p + 3 < s.size() && is_alpha(s[p + 3]))) at.push_back(p);
  if (at.empty() || at.size() > 3) return {s};
  std::vector<std::string> out;
  for (unsigned mask = 0; mask < (1u << at.size()); ++mask) {
    std::string t;
    std::size_t last = 0;
    for (std::size_t k = 0; k < at.size(); ++k) {
      t += s.substr(last, at[k] - last);
      t += (mask >> k) & 1u ? '-' : '+';
      last = at[k] + 3;
    }
    t += s.substr(last);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> expand_all(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items)
    for (std::string& x : expand_pm(std::string(trim(item)))) out.push_back(std::move(x));
  return out;
}

bool has_pm(const std::string& s) {
  return expand_pm(s).size() > 1;
}

// Same length and equivalent element by element.
bool match_ordered(const std::vector<std::string>& p, const std::vector<std::string>& g,
                   int depth) {
  if (p.size() != g.size() || p.size() > kMaxElements) return false;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (!equiv(p[i], g[i], depth + 1)) return false;
  return true;
}

// A perfect matching between the two multisets (order does not matter).
bool match_unordered(const std::vector<std::string>& p, const std::vector<std::string>& g,
                     int depth) {
  const std::size_t n = p.size();
  if (n != g.size() || n > kMaxElements || n == 0) return false;
  std::vector<std::vector<char>> ok(n, std::vector<char>(n, 0));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) ok[i][j] = equiv(p[i], g[j], depth + 1) ? 1 : 0;
  std::vector<int> owner(n, -1);  // gold j -> pred i
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<char> seen(n, 0);
    std::function<bool(std::size_t)> augment = [&](std::size_t a) {
      for (std::size_t j = 0; j < n; ++j) {
        if (!ok[a][j] || seen[j]) continue;
        seen[j] = 1;
        if (owner[j] < 0 || augment(static_cast<std::size_t>(owner[j]))) {
          owner[j] = static_cast<int>(a);
          return true;
        }
      }
      return false;
    };
    if (!augment(i)) return false;
  }
  return true;
}

bool is_open_tuple(const ListForm& l) {
  return l.open == "(" && l.close == ")";
}

bool list_equiv(const ListForm& lp, const ListForm& lg, const std::string& P, const std::string& G,
                int depth) {
  if (lg.kind == ListForm::kEnclosed && lg.open == "\\{") {  // a set
    if (lp.kind == ListForm::kEnclosed && lp.open != "\\{") return false;
    const std::vector<std::string> pi =
        lp.kind == ListForm::kNone ? expand_pm(P) : expand_all(lp.items);
    return match_unordered(pi, expand_all(lg.items), depth);
  }
  if (lg.kind == ListForm::kEnclosed) {  // a tuple or an interval: brackets and order matter
    if (lp.kind == ListForm::kEnclosed) {
      if (lp.open != lg.open || lp.close != lg.close) return false;
      return match_ordered(lp.items, lg.items, depth);
    }
    if (lp.kind == ListForm::kBare && is_open_tuple(lg))
      return match_ordered(lp.items, lg.items, depth);
    return false;
  }
  if (lg.kind == ListForm::kBare) {  // "1, -2": the solutions in any order
    if (lp.kind == ListForm::kEnclosed &&
        !(lp.open == "\\{" || is_open_tuple(lp) || (lp.open == "[" && lp.close == "]")))
      return false;
    const std::vector<std::string> pi =
        lp.kind == ListForm::kNone ? expand_pm(P) : expand_all(lp.items);
    return match_unordered(pi, expand_all(lg.items), depth);
  }
  // The gold is a single value; only a +- gold can match several predicted values.
  if (lp.kind == ListForm::kBare || (lp.kind == ListForm::kEnclosed && lp.open == "\\{")) {
    const std::vector<std::string> gi = expand_pm(G);
    if (gi.size() > 1) return match_unordered(expand_all(lp.items), gi, depth);
  }
  return false;
}

bool matrix_equiv(const std::optional<Matrix>& mp, const std::optional<Matrix>& mg,
                  const std::string& P, const std::string& G, int depth) {
  if (mp && mg) {
    if (mp->size() != mg->size()) return false;
    for (std::size_t r = 0; r < mp->size(); ++r)
      if (!match_ordered((*mp)[r], (*mg)[r], depth)) return false;
    return true;
  }
  // A vector written as a tuple: (1, 2, 3) against a one-column or one-row matrix.
  const Matrix& m = mp ? *mp : *mg;
  const ListForm other = as_list(mp ? G : P);
  if (other.kind != ListForm::kEnclosed || !is_open_tuple(other)) return false;
  std::vector<std::string> flat;
  if (m.size() == 1) {
    flat = m[0];
  } else {
    for (const auto& row : m) {
      if (row.size() != 1) return false;
      flat.push_back(row[0]);
    }
  }
  return mp ? match_ordered(flat, other.items, depth) : match_ordered(other.items, flat, depth);
}

// ---- equations -----------------------------------------------------------------------------

std::vector<std::size_t> equals_signs(const std::string& s) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '=') continue;
    const char before = i > 0 ? s[i - 1] : ' ';
    const char after = i + 1 < s.size() ? s[i + 1] : ' ';
    if (before == '<' || before == '>' || before == '!' || before == '=' || after == '=') continue;
    at.push_back(i);
  }
  return at;
}

// ---- scalars -------------------------------------------------------------------------------

// Letters left after removing \commands, with a run of three or more: a word, not an expression.
bool is_text(const std::string& s) {
  int run = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
      while (i < s.size() && is_alpha(s[i])) ++i;
      --i;
      run = 0;
      continue;
    }
    run = is_alpha(s[i]) ? run + 1 : 0;
    if (run >= 3) return true;
  }
  return false;
}

// Lower-case letters and digits only.
std::string fold(const std::string& s) {
  std::string out;
  for (char c : s)
    if (is_alpha(c) || is_digit(c)) out += detail::to_lower(c);
  return out;
}

struct BaseNumber {
  std::string digits, base;
};

// 52_8, 4210_{5}
std::optional<BaseNumber> as_base_number(const std::string& s) {
  const std::size_t us = s.find('_');
  if (us == std::string::npos || us == 0) return std::nullopt;
  BaseNumber b;
  b.digits = s.substr(0, us);
  std::string base = s.substr(us + 1);
  if (base.size() >= 2 && base.front() == '{' && base.back() == '}')
    base = base.substr(1, base.size() - 2);
  b.base = base;
  if (b.base.empty() || !std::all_of(b.base.begin(), b.base.end(), is_digit)) return std::nullopt;
  if (!std::all_of(b.digits.begin(), b.digits.end(),
                   [](char c) { return is_alpha(c) || is_digit(c); }))
    return std::nullopt;
  if (!is_digit(b.digits[0])) return std::nullopt;
  return b;
}

std::string strip_zeros(std::string s) {
  while (s.size() > 1 && s[0] == '0') s.erase(s.begin());
  return detail::lower(s);
}

double sample_value(int point, std::size_t var) {
  // Deterministic, irrational-looking values in [0.5, 2.5): different per point and variable.
  const double t =
      (point + 1) * 0.6180339887498949 + static_cast<double>(var + 1) * 0.41421356237309515;
  return 0.5 + 2.0 * (t - std::floor(t));
}

bool same_value(const Expression& a, const Expression& b) {
  std::vector<std::string> vars = a.variables();
  for (const std::string& v : b.variables())
    if (std::find(vars.begin(), vars.end(), v) == vars.end()) vars.push_back(v);
  std::sort(vars.begin(), vars.end());
  if (vars.empty()) return close(a.evaluate(), b.evaluate());
  if (vars.size() > 10) return false;
  int compared = 0;
  for (int k = 0; k < kSamplePoints; ++k) {
    std::map<std::string, Complex> values;
    for (std::size_t v = 0; v < vars.size(); ++v) values[vars[v]] = sample_value(k, v);
    const Complex x = a.evaluate(values), y = b.evaluate(values);
    if (!finite(x) && !finite(y)) continue;  // undefined at this point on both sides
    if (!close(x, y)) return false;
    ++compared;
  }
  return compared >= 3;
}

bool expressions_equal(const std::string& p, const std::string& g) {
  const auto ep = Expression::parse(p), eg = Expression::parse(g);
  return ep && eg && same_value(*ep, *eg);
}

bool scalar_equiv(const std::string& P, const std::string& G) {
  if (P == G) return true;
  if (is_text(P) || is_text(G)) return fold(P) == fold(G);
  const auto bp = as_base_number(P), bg = as_base_number(G);
  if (bp || bg) {
    if (bp && bg && bp->base != bg->base) return false;
    const std::string dp = bp ? bp->digits : P, dg = bg ? bg->digits : G;
    auto alnum = [](const std::string& x) {
      return !x.empty() &&
             std::all_of(x.begin(), x.end(), [](char c) { return is_alpha(c) || is_digit(c); });
    };
    return alnum(dp) && alnum(dg) && strip_zeros(dp) == strip_zeros(dg);
  }
  return expressions_equal(P, G);
}

bool equation_equiv(const std::string& P, std::size_t ep, const std::string& G, std::size_t eg,
                    int depth) {
  const std::string lp = P.substr(0, ep), rp = P.substr(ep + 1);
  const std::string lg = G.substr(0, eg), rg = G.substr(eg + 1);
  if (trim(lp).empty() || trim(rp).empty() || trim(lg).empty() || trim(rg).empty()) return false;
  if (equiv(lp, lg, depth + 1) && equiv(rp, rg, depth + 1)) return true;
  if (equiv(lp, rg, depth + 1) && equiv(rp, lg, depth + 1)) return true;
  // The same equation rearranged: lhs - rhs agree (up to swapping the sides).
  const std::string dp = "(" + lp + ")-(" + rp + ")";
  return expressions_equal(dp, "(" + lg + ")-(" + rg + ")") ||
         expressions_equal(dp, "(" + rg + ")-(" + lg + ")");
}

bool equiv(std::string_view pred, std::string_view gold, int depth) {
  if (--comparisons_left < 0) return false;
  const std::string P = normalize_answer(pred), G = normalize_answer(gold);
  if (P.empty() || G.empty()) return false;
  if (P == G) return true;
  if (depth > kMaxDepth || P.size() > kMaxLength || G.size() > kMaxLength) return false;

  if (const auto g = gold_choice(G)) {
    const auto p = pred_choice(P);
    return p && *p == *g;
  }
  const auto up = split_top(P, "\\cup"), ug = split_top(G, "\\cup");
  if (up.size() > 1 || ug.size() > 1) return match_unordered(up, ug, depth);

  const auto mp = as_matrix(P), mg = as_matrix(G);
  if (mp || mg) return matrix_equiv(mp, mg, P, G, depth);

  const ListForm lp = as_list(P), lg = as_list(G);
  if (lp.kind != ListForm::kNone || lg.kind != ListForm::kNone)
    return list_equiv(lp, lg, P, G, depth);

  if (has_pm(P) || has_pm(G)) return match_unordered(expand_pm(P), expand_pm(G), depth);

  const auto qp = equals_signs(P), qg = equals_signs(G);
  if (!qp.empty() || !qg.empty()) {
    if (qp.size() != 1 || qg.size() != 1) return false;
    return equation_equiv(P, qp[0], G, qg[0], depth);
  }
  return scalar_equiv(P, G);
}

}  // namespace

bool answers_match(std::string_view pred, std::string_view gold) {
  try {
    comparisons_left = kComparisonBudget;
    return equiv(pred, gold, 0);
  } catch (...) {
    return false;
  }
}

}  // namespace rkv::eval
