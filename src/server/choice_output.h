// One choice's generated text, as it streams, split into what the response carries: the chain of
// thought (reasoning_content), the answer's content, and tool calls with their ids. Chains the
// <think> splitter (ReasoningSplitter) and the tool-call parser of the model's format
// (ToolCallParser); gpt-oss's harmony channels are split by the tool-call parser alone.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace rkv::server {

struct ToolCallOut {
  int index = 0;   // its place among the choice's calls (OpenAI's tool_calls[].index)
  std::string id;  // "call_" and 24 random letters and digits
  ParsedToolCall call;
};

class ChoiceOutput {
 public:
  struct Setup {
    bool split_reasoning = true;       // false: the chain of thought stays in the content
    bool starts_in_reasoning = false;  // the prompt opened <think>
    ToolCallFormat format = ToolCallFormat::none;
    nlohmann::json tools;             // the functions calls may name (null: calls not parsed)
    bool parallel_tool_calls = true;  // false: calls after the first are dropped
  };
  explicit ChoiceOutput(const Setup& setup);

  struct Delta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCallOut> calls;
    // What `later` adds after this: its texts appended, its calls after these.
    void append(Delta later);
  };
  Delta push(std::string_view text);
  Delta finish();
  int calls() const { return calls_; }

 private:
  Delta take(ToolCallParser::Delta d);
  Delta through_tools(ReasoningSplitter::Delta d, bool final);
  bool split_reasoning_;
  bool parallel_;
  ToolCallFormat format_;
  std::optional<ReasoningSplitter> splitter_;
  std::optional<ToolCallParser> tools_;
  int calls_ = 0;
};

// The JSON of calls: OpenAI's message.tool_calls ([{"id", "type", "function": {"name",
// "arguments"}}]).
nlohmann::json tool_calls_body(const std::vector<ToolCallOut>& calls);
// A streamed chunk's delta.tool_calls for calls that just completed: the first of each call's two
// entries carries its index, id, type and name (arguments ""), the second its arguments.
nlohmann::json tool_call_stream_deltas(const ToolCallOut& call);

}  // namespace rkv::server
