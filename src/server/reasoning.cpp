#include "server/reasoning.h"

#include <algorithm>

#include "server/markers.h"

namespace rkv::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool starts_in_reasoning)
    : phase_(starts_in_reasoning ? Phase::reasoning_start : Phase::start) {}

ReasoningSplitter::Delta ReasoningSplitter::push(std::string_view text) {
  pending_.append(text);
  return drain(false);
}

ReasoningSplitter::Delta ReasoningSplitter::finish() {
  return drain(true);
}

ReasoningSplitter::Delta ReasoningSplitter::drain(bool final) {
  Delta out;
  for (;;) {
    switch (phase_) {
      case Phase::start: {
        // Before any output: a leading <think> (after blanks) opens the reasoning block.
        const std::string_view all(pending_);
        const std::size_t first = std::min(all.size(), all.find_first_not_of(" \t\r\n"));
        const std::string_view rest = all.substr(first);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          pending_.erase(0, first + kOpen.size());
          phase_ = Phase::reasoning_start;
          continue;
        }
        if (!final && kOpen.substr(0, rest.size()) == rest) return out;  // may still be <think>
        phase_ = Phase::content;
        continue;
      }
      case Phase::reasoning_start: {
        // The reasoning's leading line breaks are the template's, not the model's thought.
        const std::size_t n = pending_.find_first_not_of("\r\n");
        if (n == std::string::npos) {
          pending_.clear();
          return out;
        }
        pending_.erase(0, n);
        phase_ = Phase::reasoning;
        continue;
      }
      case Phase::reasoning: {
        const std::size_t close = pending_.find(kClose);
        if (close != std::string::npos) {
          out.reasoning.append(pending_, 0, close);
          pending_.erase(0, close + kClose.size());
          phase_ = Phase::after_reasoning;
          continue;
        }
        const std::size_t hold = final ? 0 : partial_marker(pending_, {&kClose, 1});
        out.reasoning.append(pending_, 0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return out;
      }
      case Phase::after_reasoning: {
        // The blank lines between </think> and the answer belong to neither.
        const std::size_t n = pending_.find_first_not_of(" \t\r\n");
        if (n == std::string::npos) {
          pending_.clear();
          return out;
        }
        pending_.erase(0, n);
        phase_ = Phase::content;
        continue;
      }
      case Phase::content:
        out.content.append(pending_);
        pending_.clear();
        return out;
    }
  }
}

}  // namespace rkv::server
