// The Unicode the Jinja interpreter needs to behave like Python's str on UTF-8 text: code points
// (len, indexing and slicing count them), whitespace as str.isspace, printability as
// str.isprintable (for repr), and simple case mapping (utf8proc). A byte that is not valid UTF-8
// counts as one code point of its own and is kept as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::jinja::unicode {

// Decodes the code point at `pos`; `len` receives its byte length (1 for an invalid byte, whose
// value is then 0xDC00 + byte, Python's surrogateescape).
char32_t decode(std::string_view s, std::size_t pos, std::size_t& len);
void append(std::string& out, char32_t cp);

bool is_ascii(std::string_view s);
// The byte offset of each code point, plus s.size() at the end.
std::vector<std::size_t> offsets(std::string_view s);
std::size_t length(std::string_view s);

bool is_space(char32_t cp);
bool is_printable(char32_t cp);
bool is_alpha(char32_t cp);
bool is_digit(char32_t cp);  // str.isdigit (decimal and other digits)
bool is_decimal(char32_t cp);
bool is_numeric(char32_t cp);
bool is_upper(char32_t cp);
bool is_lower(char32_t cp);
bool is_cased(char32_t cp);
// Python's str.splitlines boundaries (\n \r \v \f \x1c \x1d \x1e \x85 \u2028 \u2029).
bool is_line_break(char32_t cp);
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);
char32_t to_title(char32_t cp);

std::string upper(std::string_view s);
std::string lower(std::string_view s);

// Python str.strip/lstrip/rstrip: with `chars` null, whitespace; otherwise the code points of
// *chars.
std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace rkv::jinja::unicode
