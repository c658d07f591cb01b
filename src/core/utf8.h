// UTF-8 helpers shared by the tokenizer, the Jinja interpreter and the HTTP layer: decoding step
// by step, validation with U+FFFD replacement (Python's errors="replace" policy: one U+FFFD per
// maximal invalid subpart), the length of an incomplete trailing sequence (for streaming), and NFC
// normalization (utf8proc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rkv {

// One step of UTF-8 decoding at some position.
struct Utf8Step {
  std::size_t length = 0;   // bytes consumed: the whole character, or the invalid subpart
  bool valid = false;       // a complete, well-formed character
  bool truncated = false;   // a well-formed prefix cut off by the end of the input
  char32_t code_point = 0;  // when valid
};

Utf8Step utf8_step(std::string_view s, std::size_t pos);

// Appends the UTF-8 encoding of a code point.
void append_utf8(std::string& out, char32_t code_point);

bool is_valid_utf8(std::string_view s);

// The text with every ill-formed subpart (including a truncated final sequence) replaced by
// U+FFFD. Returns the input unchanged when it is valid.
std::string replace_invalid_utf8(std::string_view s);

// Number of trailing bytes (0..3) that are a well-formed but incomplete multi-byte sequence.
std::size_t incomplete_utf8_tail(std::string_view s);

// Unicode NFC of valid UTF-8 text.
std::string nfc_normalize(std::string_view valid_utf8);

}  // namespace rkv
