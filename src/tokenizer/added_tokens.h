// Added tokens (<|im_start|>, <think>, <|begin_of_text|>, ...): found in the raw text by exact
// match before any other processing, leftmost first and longest on ties, as the reference
// tokenizers do (split_special_tokens=False). lstrip/rstrip remove the whitespace beside a
// match; single_word is not supported (treated as false; no supported model sets it).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
};

class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }

  struct Segment {
    std::string_view text;  // the plain text between matches, when id < 0
    int32_t id;             // the matched token, or -1
  };
  // Splits the text into plain segments (never empty) and matched tokens, in order.
  std::vector<Segment> split(std::string_view text) const;

 private:
  std::vector<AddedToken> tokens_;
  // For each first byte, indices into tokens_ sorted by decreasing length.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace rkv::tokenizer
