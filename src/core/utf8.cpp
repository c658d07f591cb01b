// UTF-8 decoding with the Unicode "maximal subpart" replacement policy, and NFC via utf8proc.
#include "core/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace rkv {

namespace {

// The allowed range of the second byte for a lead byte (Unicode Table 3-7); later continuation
// bytes are always 80..BF.
struct LeadInfo {
  int length;  // 0: not a valid lead byte
  unsigned char second_lo, second_hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Utf8Step utf8_step(std::string_view s, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  const LeadInfo info = lead_info(b0);
  if (info.length == 1) return {1, true, false, b0};
  if (info.length == 0) return {1, false, false, 0};
  char32_t cp = b0 & (0x7F >> info.length);
  for (int k = 1; k < info.length; ++k) {
    if (pos + k >= s.size()) return {static_cast<std::size_t>(k), false, true, 0};
    const auto b = static_cast<unsigned char>(s[pos + k]);
    const unsigned char lo = k == 1 ? info.second_lo : 0x80;
    const unsigned char hi = k == 1 ? info.second_hi : 0xBF;
    if (b < lo || b > hi) return {static_cast<std::size_t>(k), false, false, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {static_cast<std::size_t>(info.length), true, false, cp};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t pos = 0; pos < s.size();) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = utf8_step(s, pos);
    if (!step.valid) return false;
    pos += step.length;
  }
  return true;
}

std::string replace_invalid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t pos = 0; pos < s.size();) {
    const Utf8Step step = utf8_step(s, pos);
    if (step.valid) {
      out.append(s.substr(pos, step.length));
    } else {
      out += "\xEF\xBF\xBD";
    }
    pos += step.length;
  }
  return out;
}

std::size_t incomplete_utf8_tail(std::string_view s) {
  // A truncated sequence starts at most 3 bytes from the end, at a lead byte.
  const std::size_t first = s.size() > 3 ? s.size() - 3 : 0;
  for (std::size_t pos = first; pos < s.size(); ++pos) {
    const auto b = static_cast<unsigned char>(s[pos]);
    if (b < 0xC0) continue;
    const Utf8Step step = utf8_step(s, pos);
    if (step.truncated && pos + step.length == s.size()) return s.size() - pos;
  }
  return 0;
}

std::string nfc_normalize(std::string_view text) {
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    throw Error(std::string("tokenizer: NFC normalization failed: ") + utf8proc_errmsg(n));
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

}  // namespace rkv
