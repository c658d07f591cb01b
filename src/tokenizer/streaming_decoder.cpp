// StreamingDecoder: emits text token by token, holding back the bytes of a UTF-8 character that
// is split across tokens (an emoji is often 2-4 byte tokens) until it is complete.
#include "core/utf8.h"

#include "rkv/tokenizer.h"

namespace rkv {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamingDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_ += tokenizer_.token_text(id);
  const std::size_t hold = incomplete_utf8_tail(pending_);
  std::string out =
      replace_invalid_utf8(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out = replace_invalid_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace rkv
