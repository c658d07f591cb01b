// Tool calls in a model's output. Each model family's chat template teaches the model one way to
// write a call; the server finds the format in the template's source (or takes --tool-call-parser),
// and a ToolCallParser splits the streamed answer into plain content and complete calls:
//
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Qwen2.5, Qwen3,
//                QwQ, Hermes; one block per call)
//   qwen3-xml    <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n
//                </tool_call> (Qwen3.5, Qwen3-Coder; a value is a string, or JSON where the
//                tool's schema gives the parameter a non-string type)
//   llama3-json  {"name": "f", "parameters": {...}} as the whole answer, optionally after
//                <|python_tag|> (Llama 3.1-3.3; "arguments" is accepted for "parameters")
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]  (Mistral Nemo), or
//                [TOOL_CALLS]f[ARGS]{...} per call (the newer Mistral/Ministral templates)
//   harmony      gpt-oss: <|channel|>analysis<|message|>... (reasoning), <|channel|>final
//                <|message|>... (content), and a call as a commentary message addressed
//                to=functions.f with its arguments as the message (<|constrain|>json optional)
//   deepseek     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
//                ...<｜tool▁calls▁end｜> (V3.1 and later), or R1's
//                <｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>
//   kimi         <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0
//                <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
//   glm          <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n...</tool_call>
//                (GLM-4.5/4.6; a value is JSON when it parses as JSON, else a string)
//
// Text that only looks like a call stays text: a call whose syntax does not parse, whose
// arguments are not a JSON object, or that names a function the request did not offer is given
// back as content, markers included, exactly as generated.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::server {

enum class ToolCallFormat {
  none,  // no tool-call syntax: the output is all content
  hermes,
  qwen3_xml,
  llama3_json,
  mistral,
  harmony,
  deepseek,
  kimi,
  glm,
};

// "none", "hermes", "qwen3-xml", "llama3-json", "mistral", "harmony", "deepseek", "kimi", "glm".
std::string_view tool_call_format_name(ToolCallFormat format);
const std::vector<std::string>& tool_call_format_names();
// A format by name; an unknown name throws rkv::Error listing the valid ones.
ToolCallFormat parse_tool_call_format(std::string_view name);

// The format a chat template's source teaches (none when it writes no calls in a format above).
ToolCallFormat detect_tool_call_format(std::string_view template_source);

// What the engine writes at the start of the answer when a request makes a call compulsory
// (tool_choice "required", or a named function): the format's opening of a call, up to and
// including the function's name when `function_name` is given (then what follows it, up to where
// the arguments begin). Empty for none. The template's source picks between a format's variants
// (mistral's JSON list or [ARGS] form, deepseek's R1 or V3.1 form).
std::string tool_call_opening(ToolCallFormat format, std::string_view template_source,
                              std::string_view function_name = {});

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text (OpenAI's function.arguments)
};

// Splits one choice's generated text, as it streams, into content and tool calls. For every format
// but harmony the input is the answer (after the <think> block has been split off); for harmony it
// is the whole generated text, and the parser also returns the analysis channel as reasoning.
// Whatever the pieces, the result is the same as for the whole text in one push: a piece that may
// be the start of a marker is held back until it is known.
class ToolCallParser {
 public:
  // `tools`: the request's tools array (OpenAI's [{"type": "function", "function": {"name", ...,
  // "parameters": {JSON schema}}}]); null or empty: no calls are recognised (harmony still splits
  // its channels).
  ToolCallParser(ToolCallFormat format, const nlohmann::json& tools);

  struct Delta {
    std::string reasoning;  // harmony only
    std::string content;
    std::vector<ParsedToolCall> calls;  // complete calls, in the order generated
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  };
  Delta push(std::string_view text);
  Delta finish();  // the end of the generation: what is held back is decided

  ToolCallFormat format() const { return format_; }

 private:
  enum class Phase;  // where in the output the parser is (tool_calls.cpp)
  Delta drain(bool final);
  bool step(Delta& out, bool final);
  bool step_content(Delta& out, bool final);
  bool step_answer_start(bool final);
  bool step_block(Delta& out, bool final);
  bool abandon_block(Delta& out);
  bool step_harmony_start(bool final);
  bool step_harmony_header(Delta& out, bool final);
  bool step_harmony_body(Delta& out, bool final);

  ToolCallFormat format_;
  nlohmann::json tools_;  // an array (empty when the request offers none)
  std::string pending_;   // text not yet given out
  Phase phase_;
  // In a block: the length of its opening in pending_ (the blanks after the previous call that
  // are dropped with it, and the opening marker); 0 for llama3-json's whole-answer call.
  std::size_t open_len_ = 0;
  bool after_call_ = false;  // a block of calls was the last thing read
  std::string header_;       // harmony: the current message's header
};

}  // namespace rkv::server
