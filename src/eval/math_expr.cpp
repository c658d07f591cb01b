// A small recursive-descent evaluator for LaTeX and plain-text math expressions, used by the
// grader for numeric equality (both sides evaluated) and symbolic equality (both sides evaluated
// at the same points). Values are complex so that answers such as 6-5i compare naturally.
//
// Grammar (lowest precedence first):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/' | \cdot | \times | \div | <implicit>) factor)*
//   unary   := ('-' | '+') unary | power
//   power   := postfix ('^' exponent)?          right-associative
//   postfix := primary ('!' | '%')*
//   primary := number | variable | constant | (expr) | {expr} | [expr] | |expr|
//            | \frac A B | \sqrt[n] A | \binom A B | \func^k A
// A command's argument A is a {group} or a single character / command, as in TeX ("\frac12").
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numbers>

#include "eval/text.h"
#include "rkv/eval.h"

namespace rkv::eval {

enum class Op {
  kNum,
  kVar,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kNeg,
  kFact,
  kAbs,
  kRoot,
  kBinom,
  kFunc,
};

enum class Fn {
  kSin,
  kCos,
  kTan,
  kCot,
  kSec,
  kCsc,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kTanh,
  kLn,
  kLog10,
  kExp,
  kLogBase,  // log_b(a): children a, b
};

struct Expression::Node {
  Op op = Op::kNum;
  std::complex<double> value;  // kNum
  int a = -1, b = -1;          // children
  int var = -1;                // kVar: index into the variable list
  Fn fn = Fn::kSin;            // kFunc
};

namespace {

using detail::is_alpha;
using detail::is_digit;
using detail::is_space;
using Complex = std::complex<double>;
using Node = Expression::Node;

constexpr int kMaxDepth = 400;  // about 80 levels of parentheses
constexpr std::size_t kMaxLength = 2000;

struct FunctionName {
  std::string_view name;
  Fn fn;
};
constexpr FunctionName kFunctions[] = {
    {"sin", Fn::kSin},     {"cos", Fn::kCos},   {"tan", Fn::kTan},     {"cot", Fn::kCot},
    {"sec", Fn::kSec},     {"csc", Fn::kCsc},   {"arcsin", Fn::kAsin}, {"arccos", Fn::kAcos},
    {"arctan", Fn::kAtan}, {"sinh", Fn::kSinh}, {"cosh", Fn::kCosh},   {"tanh", Fn::kTanh},
    {"ln", Fn::kLn},       {"log", Fn::kLog10}, {"lg", Fn::kLog10},    {"exp", Fn::kExp},
};

constexpr std::string_view kGreek[] = {
    "alpha",    "beta",    "gamma", "delta",  "epsilon", "varepsilon", "zeta",  "eta",   "theta",
    "vartheta", "iota",    "kappa", "lambda", "mu",      "nu",         "xi",    "rho",   "sigma",
    "tau",      "upsilon", "phi",   "varphi", "chi",     "psi",        "omega", "Gamma", "Delta",
    "Theta",    "Lambda",  "Xi",    "Sigma",  "Phi",     "Psi",        "Omega",
};

class ParseFailure {};

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  std::vector<Node> nodes;
  std::vector<std::string> variables;

  int parse_all() {
    const int root = expr();
    skip_space();
    if (pos_ != s_.size()) fail();
    return root;
  }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int abs_depth_ = 0;

  [[noreturn]] static void fail() { throw ParseFailure{}; }

  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) {
      if (++depth > kMaxDepth) fail();
    }
    ~DepthGuard() { --depth; }
    int& depth;
  };

  int add(Node n) {
    nodes.push_back(n);
    return static_cast<int>(nodes.size()) - 1;
  }
  int num(Complex v) {
    Node n;
    n.op = Op::kNum;
    n.value = v;
    return add(n);
  }
  int binary(Op op, int a, int b) {
    Node n;
    n.op = op;
    n.a = a;
    n.b = b;
    return add(n);
  }
  int unary_node(Op op, int a) { return binary(op, a, -1); }
  int var(const std::string& name) {
    auto it = std::find(variables.begin(), variables.end(), name);
    int index = static_cast<int>(it - variables.begin());
    if (it == variables.end()) variables.push_back(name);
    Node n;
    n.op = Op::kVar;
    n.var = index;
    return add(n);
  }

  // Skips blanks and the spacing commands \, \; \: \! "\ " \quad \qquad.
  void skip_space() {
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
      if (pos_ + 1 < s_.size() && s_[pos_] == '\\') {
        const char c = s_[pos_ + 1];
        if (c == ',' || c == ';' || c == ':' || c == '!' || c == ' ') {
          pos_ += 2;
          continue;
        }
        if (s_.compare(pos_, 5, "\\quad") == 0 &&
            !(pos_ + 5 < s_.size() && is_alpha(s_[pos_ + 5]))) {
          pos_ += 5;
          continue;
        }
        if (s_.compare(pos_, 6, "\\qquad") == 0 &&
            !(pos_ + 6 < s_.size() && is_alpha(s_[pos_ + 6]))) {
          pos_ += 6;
          continue;
        }
      }
      return;
    }
  }

  // The command name at pos_ ("\frac" gives "frac"; "\{" gives "{"), without consuming it.
  std::string_view peek_command() const {
    if (pos_ >= s_.size() || s_[pos_] != '\\' || pos_ + 1 >= s_.size()) return {};
    std::size_t end = pos_ + 1;
    if (!is_alpha(s_[end])) return s_.substr(end, 1);
    while (end < s_.size() && is_alpha(s_[end])) ++end;
    return s_.substr(pos_ + 1, end - pos_ - 1);
  }
  void consume_command(std::string_view name) { pos_ += 1 + name.size(); }

  // Delimiter after \left / \right / \bigl etc.: returns the plain delimiter char or 0.
  char peek_delimiter_command(std::size_t* width) const {
    const std::string_view cmd = peek_command();
    static constexpr std::string_view kSizers[] = {"left", "right", "bigl",  "bigr",
                                                   "Bigl", "Bigr",  "big",   "Big",
                                                   "bigg", "Bigg",  "biggl", "biggr"};
    if (std::find(std::begin(kSizers), std::end(kSizers), cmd) == std::end(kSizers)) return 0;
    std::size_t p = pos_ + 1 + cmd.size();
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (p >= s_.size()) return 0;
    char c = s_[p];
    std::size_t len = 1;
    if (c == '\\' && p + 1 < s_.size()) {
      if (s_[p + 1] == '{' || s_[p + 1] == '}' || s_[p + 1] == '|') {
        c = s_[p + 1] == '|' ? '|' : s_[p + 1];
        len = 2;
      } else if (s_.compare(p, 7, "\\lvert") == 0 || s_.compare(p, 7, "\\rvert") == 0) {
        c = '|';
        len = 6;
      } else {
        return 0;
      }
    } else if (c != '(' && c != ')' && c != '[' && c != ']' && c != '|') {
      return 0;
    }
    *width = p + len - pos_;
    return c;
  }

  // The next significant character (after blanks), translating \left( into '(' etc.; 0 at end.
  char peek_char() {
    skip_space();
    if (pos_ >= s_.size()) return 0;
    std::size_t width = 0;
    if (const char d = peek_delimiter_command(&width)) return d;
    const std::string_view cmd = peek_command();
    if (cmd == "{") return '{';
    if (cmd == "}") return '}';
    if (cmd == "%") return '%';
    if (cmd == "lvert" || cmd == "rvert" || cmd == "vert" || cmd == "|") return '|';
    return s_[pos_];
  }
  void consume_char() {
    skip_space();
    std::size_t width = 0;
    if (peek_delimiter_command(&width) != 0) {
      pos_ += width;
      return;
    }
    const std::string_view cmd = peek_command();
    if (!cmd.empty() && (cmd == "{" || cmd == "}" || cmd == "%" || cmd == "lvert" ||
                         cmd == "rvert" || cmd == "vert" || cmd == "|")) {
      consume_command(cmd);
      return;
    }
    ++pos_;
  }
  void expect(char c) {
    if (peek_char() != c) fail();
    consume_char();
  }

  static bool is_function(std::string_view cmd, Fn* fn) {
    for (const auto& f : kFunctions)
      if (f.name == cmd) {
        *fn = f.fn;
        return true;
      }
    return false;
  }
  static bool is_greek(std::string_view cmd) {
    return std::find(std::begin(kGreek), std::end(kGreek), cmd) != std::end(kGreek);
  }

  // Whether the next token can begin a factor (for implicit multiplication).
  bool starts_factor() {
    const char c = peek_char();
    if (c == 0) return false;
    if (is_digit(c) || c == '.' || is_alpha(c) || c == '(' || c == '[' || c == '{') return true;
    if (c == '|') return abs_depth_ == 0;
    if (c == '\\') {
      const std::string_view cmd = peek_command();
      Fn fn;
      return cmd == "frac" || cmd == "dfrac" || cmd == "tfrac" || cmd == "cfrac" || cmd == "sqrt" ||
             cmd == "binom" || cmd == "dbinom" || cmd == "tbinom" || cmd == "pi" ||
             cmd == "infty" || is_greek(cmd) || is_function(cmd, &fn);
    }
    // The Unicode symbols translated in primary(): π √ ∞
    return s_.compare(pos_, 2, "\xCF\x80") == 0 || s_.compare(pos_, 3, "\xE2\x88\x9E") == 0 ||
           s_.compare(pos_, 3, "\xE2\x88\x9A") == 0;
  }

  int expr() {
    DepthGuard guard(depth_);
    int lhs = term();
    for (;;) {
      const char c = peek_char();
      if (c == '+' || c == '-') {
        consume_char();
        lhs = binary(c == '+' ? Op::kAdd : Op::kSub, lhs, term());
      } else if (s_.compare(pos_, 3, "\xE2\x88\x92") == 0) {  // U+2212 minus sign
        pos_ += 3;
        lhs = binary(Op::kSub, lhs, term());
      } else {
        return lhs;
      }
    }
  }

  int term() {
    DepthGuard guard(depth_);
    int lhs = unary();
    for (;;) {
      const char c = peek_char();
      const std::string_view cmd = c == '\\' ? peek_command() : std::string_view{};
      if (c == '*' || cmd == "cdot" || cmd == "times" || s_.compare(pos_, 2, "\xC3\x97") == 0 ||
          s_.compare(pos_, 2, "\xC2\xB7") == 0) {
        if (c == '*') {
          consume_char();
        } else if (c == '\\') {
          consume_command(cmd);
        } else {
          pos_ += 2;
        }
        lhs = binary(Op::kMul, lhs, unary());
      } else if (c == '/' || cmd == "div" || s_.compare(pos_, 2, "\xC3\xB7") == 0) {
        if (c == '/') {
          consume_char();
        } else if (c == '\\') {
          consume_command(cmd);
        } else {
          pos_ += 2;
        }
        lhs = binary(Op::kDiv, lhs, unary());
      } else if (starts_factor()) {
        const std::size_t before = pos_;
        lhs = binary(Op::kMul, lhs, power());
        if (pos_ == before) fail();  // no progress: not a factor after all
      } else {
        return lhs;
      }
    }
  }

  int unary() {
    DepthGuard guard(depth_);
    const char c = peek_char();
    if (c == '-') {
      consume_char();
      return unary_node(Op::kNeg, unary());
    }
    if (c == '+') {
      consume_char();
      return unary();
    }
    if (s_.compare(pos_, 3, "\xE2\x88\x92") == 0) {
      pos_ += 3;
      return unary_node(Op::kNeg, unary());
    }
    return power();
  }

  int power() {
    DepthGuard guard(depth_);
    const int base = postfix();
    if (peek_char() == '^') {
      consume_char();
      return binary(Op::kPow, base, exponent());
    }
    return base;
  }

  int exponent() {
    DepthGuard guard(depth_);
    const char c = peek_char();
    if (c == '-') {
      consume_char();
      return unary_node(Op::kNeg, exponent());
    }
    if (c == '+') {
      consume_char();
      return exponent();
    }
    if (c == '{') return group();
    return power();
  }

  int postfix() {
    int v = primary();
    for (;;) {
      const char c = peek_char();
      if (c == '!') {
        consume_char();
        v = unary_node(Op::kFact, v);
      } else if (c == '%') {
        consume_char();
        v = binary(Op::kDiv, v, num(100.0));
      } else {
        return v;
      }
    }
  }

  // {expr}
  int group() {
    expect('{');
    const int v = expr();
    expect('}');
    return v;
  }

  // A TeX macro argument: {group}, or one digit, one letter or one command.
  int argument(bool* integer_literal = nullptr, double* literal = nullptr) {
    DepthGuard guard(depth_);
    const char c = peek_char();
    if (c == '{') {
      // Check for a plain integer inside the braces (mixed numbers).
      const std::size_t save = pos_;
      consume_char();
      skip_space();
      std::size_t p = pos_;
      while (p < s_.size() && is_digit(s_[p])) ++p;
      if (p > pos_ && integer_literal != nullptr) {
        const std::string digits(s_.substr(pos_, p - pos_));
        std::size_t q = p;
        while (q < s_.size() && is_space(s_[q])) ++q;
        if (q < s_.size() && s_[q] == '}') {
          *integer_literal = true;
          *literal = std::strtod(digits.c_str(), nullptr);
        }
      }
      pos_ = save;
      return group();
    }
    if (is_digit(c)) {
      consume_char();
      const double d = s_[pos_ - 1] - '0';
      if (integer_literal != nullptr) {
        *integer_literal = true;
        *literal = d;
      }
      return num(d);
    }
    if (is_alpha(c) || c == '\\' || c == '(' || static_cast<unsigned char>(c) >= 0xC0)
      return primary();
    fail();
  }

  int number() {
    const std::size_t start = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    if (pos_ == start || (pos_ - start == 1 && s_[start] == '.')) fail();
    if (pos_ < s_.size() && s_[pos_] == '.') fail();  // "1..2"
    // Scientific notation: 1.5e-3, 2E10 (only when digits follow the e).
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      std::size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && is_digit(s_[p])) {
        while (p < s_.size() && is_digit(s_[p])) ++p;
        pos_ = p;
      }
    }
    const std::string text(s_.substr(start, pos_ - start));
    const bool integer = text.find_first_of(".eE") == std::string::npos;
    const double value = std::strtod(text.c_str(), nullptr);
    const int n = num(value);
    // Mixed number: 2\frac{1}{2} is 2 + 1/2 when the fraction is proper and made of integers.
    if (integer && peek_char() == '\\') {
      const std::string_view cmd = peek_command();
      if (cmd == "frac" || cmd == "dfrac" || cmd == "tfrac") {
        consume_command(cmd);
        bool num_int = false, den_int = false;
        double nv = 0, dv = 0;
        const int top = argument(&num_int, &nv);
        const int bottom = argument(&den_int, &dv);
        const int frac = binary(Op::kDiv, top, bottom);
        if (num_int && den_int && nv > 0 && nv < dv) return binary(Op::kAdd, n, frac);
        return binary(Op::kMul, n, frac);
      }
    }
    return n;
  }

  int function(Fn fn) {
    // \sin^2 x, \sin^{-1} x, \log_2 x, \sin(x), \sin x
    int power_node = -1;
    bool inverse = false;
    int base = -1;
    for (int k = 0; k < 2; ++k) {
      const char c = peek_char();
      if (c == '^' && power_node < 0 && !inverse) {
        consume_char();
        const std::size_t save = pos_;
        skip_space();
        if (s_.compare(pos_, 4, "{-1}") == 0 || s_.compare(pos_, 2, "-1") == 0) {
          pos_ += s_[pos_] == '{' ? 4 : 2;
          inverse = true;
        } else {
          pos_ = save;
          power_node = exponent();
        }
      } else if (c == '_' && fn == Fn::kLog10 && base < 0) {
        consume_char();
        base = argument();
      }
    }
    if (inverse) {
      if (fn == Fn::kSin)
        fn = Fn::kAsin;
      else if (fn == Fn::kCos)
        fn = Fn::kAcos;
      else if (fn == Fn::kTan)
        fn = Fn::kAtan;
      else
        fail();
    }
    int arg;
    if (peek_char() == '(') {
      arg = primary();
    } else {
      // A product of factors up to the next operator or function: \sin 2x, \cos x^2.
      arg = power();
      while (starts_factor()) {
        if (peek_char() == '\\') {
          Fn other;
          if (is_function(peek_command(), &other)) break;
        }
        const std::size_t before = pos_;
        arg = binary(Op::kMul, arg, power());
        if (pos_ == before) fail();
      }
    }
    Node n;
    n.op = Op::kFunc;
    n.fn = base >= 0 ? Fn::kLogBase : fn;
    n.a = arg;
    n.b = base;
    int v = add(n);
    if (power_node >= 0) v = binary(Op::kPow, v, power_node);
    return v;
  }

  int command() {
    const std::string_view cmd = peek_command();
    if (cmd.empty()) fail();
    consume_command(cmd);
    if (cmd == "frac" || cmd == "dfrac" || cmd == "tfrac" || cmd == "cfrac") {
      const int top = argument();
      const int bottom = argument();
      return binary(Op::kDiv, top, bottom);
    }
    if (cmd == "sqrt") {
      int index = -1;
      if (peek_char() == '[') {
        consume_char();
        index = expr();
        expect(']');
      }
      const int radicand = argument();
      return binary(Op::kRoot, radicand, index < 0 ? num(2.0) : index);
    }
    if (cmd == "binom" || cmd == "dbinom" || cmd == "tbinom") {
      const int n = argument();
      const int k = argument();
      return binary(Op::kBinom, n, k);
    }
    if (cmd == "pi") return num(std::numbers::pi);
    if (cmd == "infty" || cmd == "infin") return num(std::numeric_limits<double>::infinity());
    if (cmd == "mathrm" || cmd == "text" || cmd == "mathit" || cmd == "operatorname") {
      // \mathrm{e}, \mathrm{i}, \operatorname{sin}: a single known name inside.
      if (peek_char() != '{' || s_[pos_] != '{') fail();
      const std::size_t open = pos_;
      const std::size_t close = detail::matching_brace(s_, open);
      if (close == std::string_view::npos) fail();
      const std::string_view inner = detail::trim(s_.substr(open + 1, close - open - 1));
      pos_ = close + 1;
      if (inner == "e") return num(std::numbers::e);
      if (inner == "i") return num(Complex(0, 1));
      Fn fn;
      if (is_function(inner, &fn)) return function(fn);
      fail();
    }
    Fn fn;
    if (is_function(cmd, &fn)) return function(fn);
    if (is_greek(cmd)) return variable_with_subscript(std::string(cmd));
    fail();
  }

  int variable_with_subscript(std::string name) {
    if (pos_ < s_.size() && s_[pos_] == '_') {
      ++pos_;
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == '{') {
        const std::size_t close = detail::matching_brace(s_, pos_);
        if (close == std::string_view::npos) fail();
        std::string sub;
        for (char ch : s_.substr(pos_ + 1, close - pos_ - 1))
          if (!is_space(ch)) sub += ch;
        if (sub.empty()) fail();
        name += "_" + sub;
        pos_ = close + 1;
      } else if (pos_ < s_.size() && (is_alpha(s_[pos_]) || is_digit(s_[pos_]))) {
        name += "_";
        name += s_[pos_++];
      } else {
        fail();
      }
    }
    return var(name);
  }

  int primary() {
    DepthGuard guard(depth_);
    const char c = peek_char();
    if (c == 0) fail();
    if (is_digit(c) || c == '.') return number();
    if (c == '(' || c == '[') {
      consume_char();
      const int v = expr();
      expect(c == '(' ? ')' : ']');
      return v;
    }
    if (c == '{') return group();
    if (c == '|') {
      if (abs_depth_ > 0) fail();
      consume_char();
      ++abs_depth_;
      const int v = expr();
      --abs_depth_;
      expect('|');
      return unary_node(Op::kAbs, v);
    }
    if (is_alpha(c)) {
      ++pos_;
      if (c == 'i') return num(Complex(0, 1));
      if (c == 'e' && !(pos_ < s_.size() && s_[pos_] == '_')) return num(std::numbers::e);
      return variable_with_subscript(std::string(1, c));
    }
    if (c == '\\') return command();
    // A few Unicode symbols: π √ ∞
    if (s_.compare(pos_, 2, "\xCF\x80") == 0) {
      pos_ += 2;
      return num(std::numbers::pi);
    }
    if (s_.compare(pos_, 3, "\xE2\x88\x9E") == 0) {
      pos_ += 3;
      return num(std::numeric_limits<double>::infinity());
    }
    if (s_.compare(pos_, 3, "\xE2\x88\x9A") == 0) {
      pos_ += 3;
      const int radicand = argument();
      return binary(Op::kRoot, radicand, num(2.0));
    }
    fail();
  }
};

bool is_real(Complex z) {
  return z.imag() == 0.0;
}
bool is_integer(double x) {
  return std::isfinite(x) && std::floor(x) == x;
}

Complex power_of(Complex a, Complex b) {
  if (is_real(a) && is_real(b)) {
    if (a.real() >= 0 || is_integer(b.real())) return std::pow(a.real(), b.real());
  }
  if (a == Complex(0, 0)) return b.real() > 0 ? Complex(0, 0) : Complex(NAN, NAN);
  return std::pow(a, b);
}

Complex root_of(Complex a, Complex n) {
  if (!is_real(n) || n.real() == 0) return {NAN, NAN};
  const double k = n.real();
  if (is_real(a) && a.real() < 0 && is_integer(k) && std::fmod(std::fabs(k), 2.0) == 1.0)
    return -std::pow(-a.real(), 1.0 / k);
  if (is_real(a) && a.real() >= 0) return std::pow(a.real(), 1.0 / k);
  if (k == 2) return std::sqrt(a);
  return std::pow(a, 1.0 / k);
}

Complex factorial(Complex a) {
  if (!is_real(a) || !is_integer(a.real()) || a.real() < 0 || a.real() > 170) return {NAN, NAN};
  return std::tgamma(a.real() + 1);
}

Complex binomial(Complex n, Complex k) {
  if (!is_real(n) || !is_real(k) || !is_integer(n.real()) || !is_integer(k.real()))
    return {NAN, NAN};
  const double nn = n.real(), kk = k.real();
  if (nn < 0 || nn > 1000) return {NAN, NAN};
  if (kk < 0 || kk > nn) return 0.0;
  return std::round(std::exp(std::lgamma(nn + 1) - std::lgamma(kk + 1) - std::lgamma(nn - kk + 1)));
}

Complex apply(Fn fn, Complex x, Complex base) {
  const Complex one(1, 0);
  switch (fn) {
    case Fn::kSin:
      return std::sin(x);
    case Fn::kCos:
      return std::cos(x);
    case Fn::kTan:
      return std::tan(x);
    case Fn::kCot:
      return one / std::tan(x);
    case Fn::kSec:
      return one / std::cos(x);
    case Fn::kCsc:
      return one / std::sin(x);
    case Fn::kAsin:
      return std::asin(x);
    case Fn::kAcos:
      return std::acos(x);
    case Fn::kAtan:
      return std::atan(x);
    case Fn::kSinh:
      return std::sinh(x);
    case Fn::kCosh:
      return std::cosh(x);
    case Fn::kTanh:
      return std::tanh(x);
    case Fn::kLn:
      return is_real(x) && x.real() > 0 ? Complex(std::log(x.real())) : std::log(x);
    case Fn::kLog10:
      return is_real(x) && x.real() > 0 ? Complex(std::log10(x.real())) : std::log10(x);
    case Fn::kExp:
      return std::exp(x);
    case Fn::kLogBase:
      return std::log(x) / std::log(base);
  }
  return {NAN, NAN};
}

Complex eval_node(const std::vector<Node>& nodes, int i, const std::vector<Complex>& vars) {
  const Node& n = nodes[static_cast<std::size_t>(i)];
  auto child = [&](int c) { return eval_node(nodes, c, vars); };
  switch (n.op) {
    case Op::kNum:
      return n.value;
    case Op::kVar:
      return vars[static_cast<std::size_t>(n.var)];
    case Op::kAdd:
      return child(n.a) + child(n.b);
    case Op::kSub:
      return child(n.a) - child(n.b);
    case Op::kMul:
      return child(n.a) * child(n.b);
    case Op::kDiv: {
      const Complex d = child(n.b);
      const Complex num = child(n.a);
      if (is_real(d) && is_real(num)) return num.real() / d.real();
      return num / d;
    }
    case Op::kPow:
      return power_of(child(n.a), child(n.b));
    case Op::kNeg: {
      const Complex v = child(n.a);
      return is_real(v) ? Complex(-v.real(), 0.0) : -v;  // no -0 imaginary part (branch cuts)
    }
    case Op::kFact:
      return factorial(child(n.a));
    case Op::kAbs:
      return std::abs(child(n.a));
    case Op::kRoot:
      return root_of(child(n.a), child(n.b));
    case Op::kBinom:
      return binomial(child(n.a), child(n.b));
    case Op::kFunc:
      return apply(n.fn, child(n.a), n.b >= 0 ? child(n.b) : Complex(10, 0));
  }
  return {NAN, NAN};
}

}  // namespace

std::optional<Expression> Expression::parse(std::string_view text) {
  text = detail::trim(text);
  if (text.empty() || text.size() > kMaxLength) return std::nullopt;
  try {
    Parser parser(text);
    const int root = parser.parse_all();
    Expression e;
    e.root_ = root;
    e.nodes_ = std::make_shared<const std::vector<Node>>(std::move(parser.nodes));
    e.variables_ = std::move(parser.variables);
    return e;
  } catch (...) {
    return std::nullopt;
  }
}

const std::vector<std::string>& Expression::variables() const {
  return variables_;
}

std::complex<double> Expression::evaluate(
    const std::map<std::string, std::complex<double>>& values) const {
  if (!nodes_ || root_ < 0) return {NAN, NAN};
  std::vector<Complex> vars;
  vars.reserve(variables_.size());
  for (const std::string& name : variables_) {
    auto it = values.find(name);
    vars.push_back(it == values.end() ? Complex(NAN, NAN) : it->second);
  }
  try {
    return eval_node(*nodes_, root_, vars);
  } catch (...) {
    return {NAN, NAN};
  }
}

std::optional<std::complex<double>> evaluate_constant(std::string_view text) {
  auto e = Expression::parse(text);
  if (!e || !e->variables().empty()) return std::nullopt;
  return e->evaluate();
}

}  // namespace rkv::eval
