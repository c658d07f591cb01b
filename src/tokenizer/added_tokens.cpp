// Splitting text on added tokens (leftmost-longest exact match).
#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace rkv::tokenizer {

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;
  // A second entry with the same content replaces the first.
  for (AddedToken& t : tokens_) {
    if (t.content == token.content) {
      t = token;
      return;
    }
  }
  tokens_.push_back(token);
  auto& list = by_first_byte_[static_cast<unsigned char>(token.content[0])];
  list.push_back(static_cast<uint32_t>(tokens_.size() - 1));
  std::stable_sort(list.begin(), list.end(), [this](uint32_t a, uint32_t b) {
    return tokens_[a].content.size() > tokens_[b].content.size();
  });
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  std::size_t plain_begin = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* found = nullptr;
    for (uint32_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        found = &t;
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    std::size_t plain_end = pos;
    if (found->lstrip) {
      while (plain_end > plain_begin && is_space(text[plain_end - 1])) --plain_end;
    }
    if (plain_end > plain_begin) {
      out.push_back({text.substr(plain_begin, plain_end - plain_begin), -1});
    }
    out.push_back({text.substr(pos, found->content.size()), found->id});
    pos += found->content.size();
    if (found->rstrip) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
    }
    plain_begin = pos;
  }
  if (text.size() > plain_begin) out.push_back({text.substr(plain_begin), -1});
  return out;
}

}  // namespace rkv::tokenizer
