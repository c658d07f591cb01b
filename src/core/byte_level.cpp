// The bytes_to_unicode table of GPT-2 and its inverse.
#include "core/byte_level.h"

#include <array>

#include "core/utf8.h"

namespace rkv {

namespace {

struct Tables {
  std::array<std::string, 256> byte_to_char;
  std::array<int, 324> char_to_byte;  // code points 0..323; -1 outside the alphabet

  Tables() {
    char_to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the other 68 bytes get 256, 257, ... in order.
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next++;
      append_utf8(byte_to_char[b], static_cast<char32_t>(cp));
      char_to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_level_char(unsigned char byte) {
  return tables().byte_to_char[byte];
}

void append_byte_level(std::string& out, std::string_view raw) {
  const Tables& t = tables();
  for (char c : raw) out += t.byte_to_char[static_cast<unsigned char>(c)];
}

std::string byte_level_to_bytes(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const Utf8Step step = utf8_step(text, pos);
    if (step.valid && step.code_point < t.char_to_byte.size() &&
        t.char_to_byte[step.code_point] >= 0) {
      out += static_cast<char>(t.char_to_byte[step.code_point]);
    } else {
      out.append(text.substr(pos, step.length));
    }
    pos += step.length;
  }
  return out;
}

}  // namespace rkv
