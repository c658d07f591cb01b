// GPT-2's byte-level alphabet (bytes_to_unicode): every byte maps to one printable code point,
// so any byte string can be written as vocabulary text ("Ġ" is the space byte 0x20). A detail of
// the vocabulary files, kept in core/ because both sides use it: the tokenizer reads such
// vocabularies and model/random_checkpoint writes one for a random model.
#pragma once

#include <string>
#include <string_view>

namespace rkv {

// The UTF-8 text of the character that stands for a byte.
const std::string& byte_level_char(unsigned char byte);

// Appends the byte-level form of raw bytes.
void append_byte_level(std::string& out, std::string_view raw);

// The raw bytes of a byte-level string. Characters outside the alphabet are kept as their own
// UTF-8 bytes (as the Hugging Face ByteLevel decoder does).
std::string byte_level_to_bytes(std::string_view text);

}  // namespace rkv
