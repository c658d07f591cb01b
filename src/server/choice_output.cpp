#include "server/choice_output.h"

#include <random>

namespace rkv::server {

namespace {

// A call's id in the form the family's template takes back: Mistral's templates refuse any but
// nine letters and digits, Kimi's number calls as functions.NAME:INDEX (as vLLM's parsers do).
std::string new_call_id(ToolCallFormat format, const std::string& name, int index) {
  if (format == ToolCallFormat::kimi) return "functions." + name + ":" + std::to_string(index);
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kDigits) - 2);
  const bool mistral = format == ToolCallFormat::mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kDigits[pick(rng)];
  return id;
}

}  // namespace

ChoiceOutput::ChoiceOutput(const Setup& setup)
    : split_reasoning_(setup.split_reasoning),
      parallel_(setup.parallel_tool_calls),
      format_(setup.format) {
  const bool harmony = setup.format == ToolCallFormat::harmony;
  // Harmony's channels carry the reasoning: its parser splits them, with or without tools.
  if (harmony || (!setup.tools.is_null() && setup.format != ToolCallFormat::none))
    tools_.emplace(setup.format, setup.tools);
  if (split_reasoning_ && !harmony) splitter_.emplace(setup.starts_in_reasoning);
}

void ChoiceOutput::Delta::append(Delta later) {
  reasoning += later.reasoning;
  content += later.content;
  for (ToolCallOut& c : later.calls) calls.push_back(std::move(c));
}

ChoiceOutput::Delta ChoiceOutput::take(ToolCallParser::Delta d) {
  Delta out;
  out.reasoning = std::move(d.reasoning);
  if (!split_reasoning_) {
    out.content = std::move(out.reasoning);  // harmony with the reasoning inline
    out.reasoning.clear();
  }
  out.content += d.content;
  for (ParsedToolCall& c : d.calls) {
    if (!parallel_ && calls_ > 0) continue;
    std::string id = new_call_id(format_, c.name, calls_);
    out.calls.push_back({calls_++, std::move(id), std::move(c)});
  }
  return out;
}

ChoiceOutput::Delta ChoiceOutput::through_tools(ReasoningSplitter::Delta d, bool final) {
  if (!tools_) return {std::move(d.reasoning), std::move(d.content), {}};
  Delta out = take(tools_->push(d.content));
  if (final) out.append(take(tools_->finish()));
  out.reasoning = d.reasoning + out.reasoning;
  return out;
}

ChoiceOutput::Delta ChoiceOutput::push(std::string_view text) {
  ReasoningSplitter::Delta d;
  if (splitter_)
    d = splitter_->push(text);
  else
    d.content = std::string(text);
  return through_tools(std::move(d), false);
}

ChoiceOutput::Delta ChoiceOutput::finish() {
  ReasoningSplitter::Delta d;
  if (splitter_) d = splitter_->finish();
  return through_tools(std::move(d), true);
}

nlohmann::json tool_calls_body(const std::vector<ToolCallOut>& calls) {
  nlohmann::json list = nlohmann::json::array();
  for (const ToolCallOut& c : calls)
    list.push_back({{"id", c.id},
                    {"type", "function"},
                    {"function", {{"name", c.call.name}, {"arguments", c.call.arguments}}}});
  return list;
}

nlohmann::json tool_call_stream_deltas(const ToolCallOut& c) {
  return nlohmann::json::array(
      {{{"index", c.index},
        {"id", c.id},
        {"type", "function"},
        {"function", {{"name", c.call.name}, {"arguments", ""}}}},
       {{"index", c.index}, {"function", {{"arguments", c.call.arguments}}}}});
}

}  // namespace rkv::server
