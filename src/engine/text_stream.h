// The text of a generation as it streams: the streaming UTF-8 decoder and the stop-string
// matcher in one place, so every front end (CLI, server, eval) emits exactly the same text.
#pragma once

#include <string>
#include <vector>

#include "engine/stop_matcher.h"
#include "rkv/tokenizer.h"

namespace rkv {

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops)
      : decoder_(tokenizer), stops_(std::move(stops)) {}
  // The text that token `id` releases (complete characters, never part of a stop string).
  std::string push(int id) { return keep(stops_.push(decoder_.push(id))); }
  // At the end: what was held back (unless a stop string ended the text).
  std::string finish() {
    if (stops_.stopped()) return {};
    return keep(stops_.push(decoder_.flush()) + stops_.flush());
  }
  bool stopped() const { return stops_.stopped(); }
  const std::string& matched() const { return stops_.matched(); }
  const std::string& text() const { return text_; }

 private:
  std::string keep(std::string s) {
    text_ += s;
    return s;
  }
  StreamingDecoder decoder_;
  StopMatcher stops_;
  std::string text_;
};

}  // namespace rkv
