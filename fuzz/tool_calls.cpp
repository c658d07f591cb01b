// Fuzzes the tool-call parsers (src/server/tool_calls.cpp) with model output arriving in random
// pieces. Input: one byte choosing the format (mod 9), then pieces, each one length byte followed
// by that many bytes. Checks that the result does not depend on where the pieces break (the same
// as one piece), that no text is invented (reasoning and content together are never longer than
// the input), and that every call names one of the offered functions with a JSON object as its
// arguments.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/tool_calls.h"

namespace {

using rkv::server::ToolCallParser;

const nlohmann::json& tools() {
  static const nlohmann::json t = nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"location": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "f"}}])");
  return t;
}

void add(ToolCallParser::Delta& all, ToolCallParser::Delta d) {
  all.reasoning += d.reasoning;
  all.content += d.content;
  for (auto& c : d.calls) all.calls.push_back(std::move(c));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto format = static_cast<rkv::server::ToolCallFormat>(data[0] % 9);
  ToolCallParser pieces(format, tools());
  ToolCallParser::Delta split;
  std::string all;
  for (std::size_t i = 1; i < size;) {
    const std::size_t n = std::min<std::size_t>(data[i], size - i - 1);
    const std::string_view piece(reinterpret_cast<const char*>(data + i + 1), n);
    i += 1 + n;
    all += piece;
    add(split, pieces.push(piece));
  }
  add(split, pieces.finish());
  if (split.reasoning.size() + split.content.size() > all.size()) std::abort();
  for (const auto& call : split.calls) {
    if (call.name != "get_weather" && call.name != "f") std::abort();
    const auto args = nlohmann::json::parse(call.arguments, nullptr, false);
    if (args.is_discarded() || !args.is_object()) std::abort();
  }

  ToolCallParser once(format, tools());
  ToolCallParser::Delta whole;
  add(whole, once.push(all));
  add(whole, once.finish());
  if (whole.reasoning != split.reasoning || whole.content != split.content ||
      whole.calls.size() != split.calls.size())
    std::abort();
  for (std::size_t k = 0; k < whole.calls.size(); ++k)
    if (whole.calls[k].name != split.calls[k].name ||
        whole.calls[k].arguments != split.calls[k].arguments)
      std::abort();
  return 0;
}
