// Stop strings over streamed text: text is released only once it cannot be the start of a stop
// string, so a stream never prints a stop string (or half of one).
#pragma once

#include <string>
#include <vector>

namespace rkv {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds generated text; returns the text that is now safe to emit. After a stop string is
  // found, stopped() is true and the text from the stop string on is dropped.
  std::string push(const std::string& text);
  // The text still held back (emit it when generation ends for another reason).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace rkv
