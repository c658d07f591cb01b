// Fuzzes the reasoning splitter (src/server/reasoning.cpp) with text arriving in random pieces.
// Input: one flag byte (bit 0: starts_in_reasoning), then pieces, each one length byte followed
// by that many bytes. Checks that no text is invented: the output is never longer than the input
// (only the <think> and </think> markers may be dropped), whatever the piece boundaries, and that
// the same text in one piece gives the same split as in many pieces.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/reasoning.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool starts_in_reasoning = (data[0] & 1) != 0;
  rkv::server::ReasoningSplitter pieces(starts_in_reasoning);
  std::string all, reasoning, content;
  std::size_t i = 1;
  while (i < size) {
    const std::size_t n = std::min<std::size_t>(data[i], size - i - 1);
    const std::string_view piece(reinterpret_cast<const char*>(data + i + 1), n);
    i += 1 + n;
    all += piece;
    const auto d = pieces.push(piece);
    reasoning += d.reasoning;
    content += d.content;
  }
  const auto last = pieces.finish();
  reasoning += last.reasoning;
  content += last.content;
  if (reasoning.size() + content.size() > all.size()) std::abort();

  rkv::server::ReasoningSplitter whole(starts_in_reasoning);
  auto w = whole.push(all);
  const auto wl = whole.finish();
  w.reasoning += wl.reasoning;
  w.content += wl.content;
  if (w.reasoning != reasoning || w.content != content) std::abort();
  return 0;
}
