// Python str semantics on UTF-8 (see unicode.h).
#include "jinja/unicode.h"

#include <utf8proc.h>

#include "core/utf8.h"

namespace rkv::jinja::unicode {

char32_t decode(std::string_view s, std::size_t pos, std::size_t& len) {
  const Utf8Step step = utf8_step(s, pos);
  if (step.valid) {
    len = step.length;
    return step.code_point;
  }
  // An invalid byte stands for itself, as Python's surrogateescape keeps it (U+DC80..U+DCFF).
  len = 1;
  return 0xDC00 + static_cast<unsigned char>(s[pos]);
}

void append(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an invalid byte kept as it was
    out += static_cast<char>(cp - 0xDC00);
  } else {
    append_utf8(out, cp);
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::vector<std::size_t> offsets(std::string_view s) {
  std::vector<std::size_t> out;
  out.reserve(s.size() + 1);
  std::size_t pos = 0;
  while (pos < s.size()) {
    out.push_back(pos);
    std::size_t len = 1;
    decode(s, pos, len);
    pos += len;
  }
  out.push_back(s.size());
  return out;
}

std::size_t length(std::string_view s) {
  std::size_t n = 0, pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    decode(s, pos, len);
    pos += len;
    ++n;
  }
  return n;
}

namespace {
utf8proc_category_t category(char32_t cp) {
  if (cp > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
}  // namespace

bool is_space(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x7F) return cp >= 0x20;
  if (cp >= 0xDC80 && cp <= 0xDCFF) return false;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool is_alpha(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool is_decimal(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return category(cp) == UTF8PROC_CATEGORY_ND;
}
bool is_digit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  // Python's isdigit also accepts superscripts and other digits of category No.
  return category(cp) == UTF8PROC_CATEGORY_ND || (cp >= 0xB2 && cp <= 0xB3) || cp == 0xB9 ||
         (cp >= 0x2070 && cp <= 0x2079) || (cp >= 0x2080 && cp <= 0x2089) ||
         (cp >= 0x2460 && cp <= 0x2468) || (cp >= 0x2474 && cp <= 0x247C) ||
         (cp >= 0x2488 && cp <= 0x2490) || (cp >= 0x24F5 && cp <= 0x24FD) || cp == 0x24EA ||
         cp == 0x24FF || (cp >= 0x2776 && cp <= 0x277E) || (cp >= 0x2780 && cp <= 0x2788) ||
         (cp >= 0x278A && cp <= 0x2792);
}
bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}
bool is_upper(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  return category(cp) == UTF8PROC_CATEGORY_LU;
}
bool is_lower(char32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  return category(cp) == UTF8PROC_CATEGORY_LL;
}
bool is_cased(char32_t cp) {
  if (cp < 0x80) return is_upper(cp) || is_lower(cp);
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         to_upper(cp) != cp || to_lower(cp) != cp;
}
bool is_line_break(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

char32_t to_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp > 0x10FFFF || (cp >= 0xDC80 && cp <= 0xDCFF)) return cp;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp > 0x10FFFF || (cp >= 0xDC80 && cp <= 0xDCFF)) return cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_title(char32_t cp) {
  if (cp < 0x80) return to_upper(cp);
  if (cp > 0x10FFFF || (cp >= 0xDC80 && cp <= 0xDCFF)) return cp;
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

namespace {
template <typename F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t len = 1;
    const char32_t cp = decode(s, pos, len);
    append(out, f(cp));
    pos += len;
  }
  return out;
}
}  // namespace

std::string upper(std::string_view s) {
  return map_chars(s, to_upper);
}
std::string lower(std::string_view s) {
  return map_chars(s, to_lower);
}

std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr) {
    std::size_t pos = 0;
    while (pos < chars->size()) {
      std::size_t len = 1;
      set.push_back(decode(*chars, pos, len));
      pos += len;
    }
  }
  auto strippable = [&](char32_t cp) {
    if (chars == nullptr) return is_space(cp);
    for (char32_t c : set)
      if (c == cp) return true;
    return false;
  };
  std::size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      std::size_t len = 1;
      if (!strippable(decode(s, begin, len))) break;
      begin += len;
    }
  }
  if (right) {
    while (end > begin) {
      // Step back to the start of the last code point.
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 &&
             end - start < 4)
        --start;
      std::size_t len = 1;
      char32_t cp = decode(s, start, len);
      if (start + len != end) {  // not one code point: the last byte stands alone
        start = end - 1;
        cp = decode(s, start, len);
      }
      if (!strippable(cp)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

}  // namespace rkv::jinja::unicode
