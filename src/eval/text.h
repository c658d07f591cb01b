// Small string helpers shared by the eval sources (extraction, normalisation, grading).
#pragma once

#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::eval::detail {

inline bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}
inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
inline bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
inline char to_lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_lower(c);
  return out;
}

inline void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

// Given s[open] == '{', the index of the matching '}' (escaped "\{" "\}" are not counted), or
// npos when the braces do not balance.
inline std::size_t matching_brace(std::string_view s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;  // skip the escaped character
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

// Whether s[i] opens / closes a bracket of any kind: ( [ { \{ and ) ] } \}.
inline int bracket_delta(std::string_view s, std::size_t i, std::size_t* width) {
  *width = 1;
  const char c = s[i];
  if (c == '\\' && i + 1 < s.size()) {
    *width = 2;
    if (s[i + 1] == '{') return 1;
    if (s[i + 1] == '}') return -1;
    return 0;
  }
  if (c == '(' || c == '[' || c == '{') return 1;
  if (c == ')' || c == ']' || c == '}') return -1;
  return 0;
}

// Splits at `sep` where no bracket of any kind is open (intervals like "(1,2]" count too).
inline std::vector<std::string> split_top(std::string_view s, std::string_view sep) {
  std::vector<std::string> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (depth == 0 && s.compare(i, sep.size(), sep) == 0) {
      parts.emplace_back(s.substr(start, i - start));
      i += sep.size();
      start = i;
      continue;
    }
    std::size_t width = 1;
    depth += bracket_delta(s, i, &width);
    if (depth < 0) depth = 0;
    i += width;
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

}  // namespace rkv::eval::detail
