// Markers in text that streams in: how much of its end may be the start of a marker, and so is
// held back until the next piece says (the reasoning splitter's <think> markers, the tool-call
// parsers').
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>

namespace rkv::server {

// The length of the longest suffix of `text` that is a proper prefix of one of `markers`.
inline std::size_t partial_marker(std::string_view text,
                                  std::span<const std::string_view> markers) {
  std::size_t held = 0;
  for (std::string_view marker : markers) {
    for (std::size_t n = std::min(text.size(), marker.size() - 1); n > held; --n) {
      if (text.substr(text.size() - n) == marker.substr(0, n)) {
        held = n;
        break;
      }
    }
  }
  return held;
}

}  // namespace rkv::server
