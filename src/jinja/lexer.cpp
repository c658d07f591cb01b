// Jinja2's lexer (lexer.py, Lexer.tokeniter) with the environment of transformers: default
// delimiters, trim_blocks and lstrip_blocks, no line statements, keep_trailing_newline off.
#include "jinja/lexer.h"

#include <cctype>

#include "jinja/unicode.h"
#include "jinja/value.h"

namespace rkv::jinja {

namespace {

[[noreturn]] void syntax_error(const std::string& message, int line) {
  fail(ErrorKind::TemplateSyntaxError, message + " (line " + std::to_string(line) + ")");
}

// \r\n and \r become \n; one trailing newline is dropped.
std::string normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Whitespace as Python's \s on str: the length of the run at pos.
std::size_t space_run(std::string_view s, std::size_t pos) {
  std::size_t start = pos;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = unicode::decode(s, pos, len);
    if (!unicode::is_space(cp)) break;
    pos += len;
  }
  return pos - start;
}

bool all_space(std::string_view s) {
  return !s.empty() && space_run(s, 0) == s.size();
}

std::string_view rstrip_space(std::string_view s) {
  return unicode::strip(s, nullptr, false, true);
}

bool is_name_start(unsigned char c) {
  return std::isalpha(c) != 0 || c == '_' || c >= 0x80;
}
bool is_name_char(unsigned char c) {
  return std::isalnum(c) != 0 || c == '_' || c >= 0x80;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body with Python's unicode-escape decoding.
std::string unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const std::size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (std::size_t k = 0; k < digits; ++k) {
          const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) syntax_error(std::string("truncated \\") + e + " escape in a string", line);
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) syntax_error("illegal Unicode character in a string", line);
        i += digits;
        unicode::append(out, cp);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          unicode::append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : src_(normalize(source)), opt_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) root();
    push(TokenType::End, "");
    return std::move(tokens_);
  }

 private:
  void push(TokenType type, std::string text) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }
  void advance_to(std::size_t to) {
    for (std::size_t i = pos_; i < to && i < src_.size(); ++i)
      if (src_[i] == '\n') ++line_;
    pos_ = to;
  }
  bool at(std::size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }

  // Text before a tag, with the tag's whitespace control applied.
  void emit_text(std::string_view text, char sign, bool variable) {
    if (sign == '-') {
      text = rstrip_space(text);
    } else if (sign != '+' && opt_.lstrip_blocks && !variable) {
      const std::size_t nl = text.rfind('\n');
      const std::size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos)))
        text = text.substr(0, l_pos);
    }
    if (!text.empty()) push(TokenType::Data, std::string(text));
  }

  // The length of "{%[-+]?\s*raw\s*(-%}\s*|%})" at p, or 0.
  std::size_t raw_begin(std::size_t p) const {
    std::size_t q = p + 2;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    q += space_run(src_, q);
    if (!at(q, "raw")) return 0;
    q += 3;
    q += space_run(src_, q);
    if (at(q, "-%}")) return q + 3 + space_run(src_, q + 3) - p;
    if (at(q, "%}")) return q + 2 - p;
    return 0;
  }

  void root() {
    std::size_t p = pos_;
    for (;;) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) {
        push(TokenType::Data, src_.substr(pos_));
        advance_to(src_.size());
        return;
      }
      const char k = src_[p + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++p;
    }
    const char kind = src_[p + 1];
    const char sign =
        p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : 0;
    const std::string_view text = std::string_view(src_).substr(pos_, p - pos_);
    if (kind == '%') {
      if (const std::size_t raw_len = raw_begin(p); raw_len > 0) {
        emit_text(text, sign, false);
        advance_to(p + raw_len);
        line_starting_ = src_[pos_ - 1] == '\n';
        raw();
        return;
      }
    }
    emit_text(text, sign, kind == '{');
    advance_to(p + 2 + (sign != 0 ? 1 : 0));
    line_starting_ = false;
    if (kind == '#') {
      comment();
    } else {
      push(kind == '{' ? TokenType::VariableBegin : TokenType::BlockBegin, "");
      tag(kind == '{');
    }
  }

  void comment() {
    std::size_t p = pos_;
    for (;; ++p) {
      if (p >= src_.size()) syntax_error("Missing end of comment tag", line_);
      if (at(p, "+#}")) {
        advance_to(p + 3);
        break;
      }
      if (at(p, "-#}")) {
        advance_to(p + 3 + space_run(src_, p + 3));
        break;
      }
      if (at(p, "#}")) {
        advance_to(p + 2 + (opt_.trim_blocks && at(p + 2, "\n") ? 1 : 0));
        break;
      }
    }
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  void raw() {
    for (std::size_t p = src_.find("{%", pos_); p != std::string::npos;
         p = src_.find("{%", p + 1)) {
      std::size_t q = p + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign != 0) ++q;
      q += space_run(src_, q);
      if (!at(q, "endraw")) continue;
      q += 6;
      q += space_run(src_, q);
      std::size_t end = 0;
      if (at(q, "+%}"))
        end = q + 3;
      else if (at(q, "-%}"))
        end = q + 3 + space_run(src_, q + 3);
      else if (at(q, "%}"))
        end = q + 2 + (opt_.trim_blocks && at(q + 2, "\n") ? 1 : 0);
      else
        continue;
      emit_text(std::string_view(src_).substr(pos_, p - pos_), sign, false);
      advance_to(end);
      line_starting_ = src_[pos_ - 1] == '\n';
      return;
    }
    syntax_error("Missing end of raw directive", line_);
  }

  void tag(bool variable) {
    std::vector<char> balance;
    for (;;) {
      if (pos_ >= src_.size())
        syntax_error(variable ? "unexpected end of template, expected '}}'"
                              : "unexpected end of template, expected '%}'",
                     line_);
      if (balance.empty()) {
        if (variable) {
          if (at(pos_, "-}}")) {
            push(TokenType::VariableEnd, "");
            advance_to(pos_ + 3 + space_run(src_, pos_ + 3));
            line_starting_ = src_[pos_ - 1] == '\n';
            return;
          }
          if (at(pos_, "}}")) {
            push(TokenType::VariableEnd, "");
            advance_to(pos_ + 2);
            line_starting_ = false;
            return;
          }
        } else {
          std::size_t end = 0;
          if (at(pos_, "+%}"))
            end = pos_ + 3;
          else if (at(pos_, "-%}"))
            end = pos_ + 3 + space_run(src_, pos_ + 3);
          else if (at(pos_, "%}"))
            end = pos_ + 2 + (opt_.trim_blocks && at(pos_ + 2, "\n") ? 1 : 0);
          if (end > 0) {
            push(TokenType::BlockEnd, "");
            advance_to(end);
            line_starting_ = src_[pos_ - 1] == '\n';
            return;
          }
        }
      }
      if (const std::size_t ws = space_run(src_, pos_); ws > 0) {
        advance_to(pos_ + ws);
        continue;
      }
      const auto c = static_cast<unsigned char>(src_[pos_]);
      if (std::isdigit(c) != 0) {
        number();
      } else if (is_name_start(c)) {
        std::size_t q = pos_;
        while (q < src_.size() && is_name_char(static_cast<unsigned char>(src_[q]))) ++q;
        push(TokenType::Name, src_.substr(pos_, q - pos_));
        advance_to(q);
      } else if (c == '\'' || c == '"') {
        string_literal();
      } else {
        op(balance);
      }
    }
  }

  // (\d+_)*\d+ at p: the end, or p when there is no digit.
  std::size_t digits(std::size_t p) const {
    std::size_t q = p;
    while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q])) != 0) {
      ++q;
      if (q + 1 < src_.size() && src_[q] == '_' &&
          std::isdigit(static_cast<unsigned char>(src_[q + 1])) != 0)
        ++q;
    }
    return q;
  }

  void number() {
    const std::size_t start = pos_;
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot) {
      std::size_t q = digits(start);
      std::size_t frac_end = q;
      if (q < src_.size() && src_[q] == '.' && digits(q + 1) > q + 1) frac_end = digits(q + 1);
      std::size_t exp_end = frac_end;
      if (frac_end < src_.size() && (src_[frac_end] == 'e' || src_[frac_end] == 'E')) {
        std::size_t e = frac_end + 1;
        if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
        if (digits(e) > e) exp_end = digits(e);
      }
      if (exp_end > q) {
        std::string text;
        for (std::size_t i = start; i < exp_end; ++i)
          if (src_[i] != '_') text += src_[i];
        Token t;
        t.type = TokenType::Float;
        t.text = text;
        t.line = line_;
        t.float_value = std::strtod(text.c_str(), nullptr);
        tokens_.push_back(std::move(t));
        advance_to(exp_end);
        return;
      }
    }
    // Integer: 0b / 0o / 0x prefixes, or decimal.
    int base = 10;
    std::size_t q = start;
    if (src_[q] == '0' && q + 1 < src_.size()) {
      const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[q + 1])));
      if (p == 'b' || p == 'o' || p == 'x') base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
    }
    std::uint64_t value = 0;
    bool overflow = false;
    auto accumulate = [&](int d) {
      if (value > (static_cast<std::uint64_t>(INT64_MAX) - static_cast<std::uint64_t>(d)) /
                      static_cast<std::uint64_t>(base))
        overflow = true;
      else
        value = value * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
    };
    if (base != 10) {
      std::size_t r = q + 2;
      std::size_t last = q + 1;  // just "0" when no digit follows the prefix
      while (r < src_.size()) {
        std::size_t s = r;
        if (src_[s] == '_') ++s;
        if (s >= src_.size()) break;
        const int d = hex_value(src_[s]);
        if (d < 0 || d >= base) break;
        accumulate(d);
        r = s + 1;
        last = r;
      }
      q = last;
      if (q == start + 1) value = 0;
    } else if (src_[q] == '0') {
      ++q;
      while (q < src_.size()) {
        std::size_t s = q;
        if (src_[s] == '_') ++s;
        if (s < src_.size() && src_[s] == '0')
          q = s + 1;
        else
          break;
      }
    } else {
      while (q < src_.size()) {
        std::size_t s = q;
        if (src_[s] == '_') ++s;
        if (s < src_.size() && std::isdigit(static_cast<unsigned char>(src_[s])) != 0) {
          accumulate(src_[s] - '0');
          q = s + 1;
        } else {
          break;
        }
      }
    }
    if (overflow) syntax_error("integer literal too large", line_);
    Token t;
    t.type = TokenType::Integer;
    t.text = src_.substr(start, q - start);
    t.line = line_;
    t.int_value = static_cast<std::int64_t>(value);
    tokens_.push_back(std::move(t));
    advance_to(q);
  }

  void string_literal() {
    const char quote = src_[pos_];
    std::size_t q = pos_ + 1;
    while (q < src_.size() && src_[q] != quote) {
      if (src_[q] == '\\') ++q;
      ++q;
    }
    if (q >= src_.size()) syntax_error("unexpected char '" + std::string(1, quote) + "'", line_);
    push(TokenType::String, unescape(std::string_view(src_).substr(pos_ + 1, q - pos_ - 1), line_));
    advance_to(q + 1);
  }

  void op(std::vector<char>& balance) {
    static constexpr std::string_view two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view o : two) {
      if (at(pos_, o)) {
        push(TokenType::Operator, std::string(o));
        advance_to(pos_ + 2);
        return;
      }
    }
    const char c = src_[pos_];
    static constexpr std::string_view singles = "+-/*%~[](){}><=.:|,;";
    if (singles.find(c) == std::string_view::npos) {
      std::size_t len = 1;
      unicode::decode(src_, pos_, len);
      syntax_error("unexpected char '" + src_.substr(pos_, len) + "'", line_);
    }
    if (c == '{' || c == '(' || c == '[') balance.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
    if (c == '}' || c == ')' || c == ']') {
      if (balance.empty()) syntax_error(std::string("unexpected '") + c + "'", line_);
      if (balance.back() != c)
        syntax_error(std::string("unexpected '") + c + "', expected '" + balance.back() + "'",
                     line_);
      balance.pop_back();
    }
    push(TokenType::Operator, std::string(1, c));
    advance_to(pos_ + 1);
  }

  std::string src_;
  LexerOptions opt_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace rkv::jinja
