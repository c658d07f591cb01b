#include "server/tool_calls.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <span>
#include <utility>

#include "core/error.h"
#include "server/markers.h"

namespace rkv::server {

namespace {

using nlohmann::json;
using Calls = std::vector<ParsedToolCall>;
using Markers = std::span<const std::string_view>;

constexpr std::size_t npos = std::string_view::npos;
constexpr std::string_view kBlanks = " \t\r\n";

// ---- text and markers --------------------------------------------------------------------------

std::string_view skip_blanks(std::string_view text) {
  return text.substr(std::min(text.size(), text.find_first_not_of(kBlanks)));
}

std::string_view trim(std::string_view text) {
  text = skip_blanks(text);
  return text.substr(0, text.find_last_not_of(kBlanks) + 1);
}

// Whether `text` may still grow into something that begins with `lead`.
bool may_begin_with(std::string_view text, std::string_view lead) {
  return text.starts_with(lead) || lead.starts_with(text);
}

struct Found {
  std::size_t pos = npos;  // npos: none
  std::string_view marker;
};

// The earliest of `markers` in `text`.
Found find_marker(std::string_view text, Markers markers) {
  Found found;
  for (std::string_view marker : markers) {
    const std::size_t pos = text.find(marker);
    if (pos < found.pos) found = {pos, marker};
  }
  return found;
}

// The streamed text up to the next of `markers`: `before` ends where the marker is, or, when
// none is there yet, before a suffix that may be the start of one (all the text when `final`).
struct Section {
  std::string_view before;
  Found found;
};

Section next_section(std::string_view text, Markers markers, bool final) {
  const Found found = find_marker(text, markers);
  if (found.pos != npos) return {text.substr(0, found.pos), found};
  const std::size_t held = final ? 0 : partial_marker(text, markers);
  return {text.substr(0, text.size() - held), found};
}

// Reads a call's markup left to right.
class Reader {
 public:
  explicit Reader(std::string_view text) : rest_(text) {}
  // Whether only blanks are left.
  bool done() const { return skip_blanks(rest_).empty(); }
  // Consumes `marker` after blanks; false (consuming nothing) when the text goes on otherwise.
  bool take(std::string_view marker) {
    const std::string_view text = skip_blanks(rest_);
    if (!text.starts_with(marker)) return false;
    rest_ = text.substr(marker.size());
    return true;
  }
  // The text up to `marker`, consuming both; nullopt when there is no `marker`.
  std::optional<std::string_view> until(std::string_view marker) {
    const std::size_t at = rest_.find(marker);
    if (at == npos) return std::nullopt;
    const std::string_view text = rest_.substr(0, at);
    rest_.remove_prefix(at + marker.size());
    return text;
  }

 private:
  std::string_view rest_;
};

// The end of the JSON object or array `text` begins with (just past its closing bracket), or
// npos when it does not begin with one or the bracket is not closed.
std::size_t json_value_end(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '"' && !escaped) in_string = false;
      escaped = !escaped && c == '\\';
    } else if (c == '"' && depth > 0) {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth <= 0) return depth == 0 ? i + 1 : npos;
    } else if (depth == 0) {
      return npos;
    }
  }
  return npos;
}

// ---- calls -------------------------------------------------------------------------------------

std::optional<json> parse_json(std::string_view text) {
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

const json* member(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// The request's function named `name` (its tools[i].function), or nullptr.
const json* find_function(const json& tools, std::string_view name) {
  for (const json& tool : tools) {
    const json* function = member(tool, "function");
    const json* function_name = function ? member(*function, "name") : nullptr;
    if (function_name && function_name->is_string() &&
        function_name->get_ref<const std::string&>() == name)
      return function;
  }
  return nullptr;
}

// A call of one of the request's functions with `arguments`: an object, or a string holding an
// object's JSON. nullopt for anything else.
std::optional<ParsedToolCall> make_call(const json& tools, std::string_view name,
                                        const json& arguments) {
  if (find_function(tools, name) == nullptr) return std::nullopt;
  std::optional<json> object = arguments;
  if (arguments.is_string()) object = parse_json(arguments.get_ref<const std::string&>());
  if (!object || !object->is_object()) return std::nullopt;
  return ParsedToolCall{std::string(name),
                        object->dump(-1, ' ', false, json::error_handler_t::replace)};
}

// A call written as JSON: {"name": ..., "arguments": {...}} ("parameters" for "arguments").
std::optional<ParsedToolCall> json_call(const json& tools, const json& call) {
  const json* name = member(call, "name");
  if (name == nullptr || !name->is_string()) return std::nullopt;
  const json* arguments = member(call, "arguments");
  if (arguments == nullptr) arguments = member(call, "parameters");
  return make_call(tools, name->get_ref<const std::string&>(),
                   arguments ? *arguments : json::object());
}

// Appends `call` to `calls`; false when there is none.
bool add(Calls& calls, std::optional<ParsedToolCall> call) {
  if (!call) return false;
  calls.push_back(std::move(*call));
  return true;
}

std::optional<Calls> one_call(std::optional<ParsedToolCall> call) {
  if (!call) return std::nullopt;
  return Calls{std::move(*call)};
}

// Whether the function's JSON schema gives parameter `key` a type other than "string".
bool typed_parameter(const json& function, std::string_view key) {
  const json* parameters = member(function, "parameters");
  const json* properties = parameters ? member(*parameters, "properties") : nullptr;
  const json* property = properties ? member(*properties, key) : nullptr;
  const json* type = property ? member(*property, "type") : nullptr;
  if (type == nullptr) return false;
  if (type->is_string()) return *type != "string";
  return type->is_array() && std::find(type->begin(), type->end(), "string") == type->end();
}

// ---- each format's blocks ----------------------------------------------------------------------

std::optional<Calls> parse_hermes(std::string_view body, const json& tools) {
  const std::optional<json> call = parse_json(trim(body));
  return call ? one_call(json_call(tools, *call)) : std::nullopt;
}

std::optional<Calls> parse_qwen3_xml(std::string_view body, const json& tools) {
  Reader reader(body);
  if (!reader.take("<function=")) return std::nullopt;
  const std::optional<std::string_view> name = reader.until(">");
  const json* function = name ? find_function(tools, trim(*name)) : nullptr;
  if (function == nullptr) return std::nullopt;
  json arguments = json::object();
  while (reader.take("<parameter=")) {
    const std::optional<std::string_view> key = reader.until(">");
    std::optional<std::string_view> value = key ? reader.until("</parameter>") : std::nullopt;
    if (!value) return std::nullopt;
    // The template writes the value on lines of its own.
    if (value->starts_with('\n')) value->remove_prefix(1);
    if (value->ends_with('\n')) value->remove_suffix(1);
    std::optional<json> typed =
        typed_parameter(*function, *key) ? parse_json(*value) : std::nullopt;
    arguments[std::string(*key)] = typed ? std::move(*typed) : json(std::string(*value));
  }
  if (!reader.take("</function>") || !reader.done()) return std::nullopt;
  return one_call(make_call(tools, trim(*name), arguments));
}

std::optional<Calls> parse_glm(std::string_view body, const json& tools) {
  const std::size_t keys = std::min(body.size(), body.find("<arg_key>"));
  const std::string_view name = trim(body.substr(0, keys));
  Reader reader(body.substr(keys));
  json arguments = json::object();
  while (reader.take("<arg_key>")) {
    const std::optional<std::string_view> key = reader.until("</arg_key>");
    if (!key || !reader.take("<arg_value>")) return std::nullopt;
    const std::optional<std::string_view> value = reader.until("</arg_value>");
    if (!value) return std::nullopt;
    std::optional<json> parsed = parse_json(*value);
    arguments[std::string(*key)] = parsed ? std::move(*parsed) : json(std::string(*value));
  }
  if (!reader.done()) return std::nullopt;
  return one_call(make_call(tools, name, arguments));
}

constexpr std::string_view kDeepseekCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepseekCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepseekSep = "<｜tool▁sep｜>";

// V3.1's NAME<｜tool▁sep｜>ARGS, or R1's function<｜tool▁sep｜>NAME\n```json\nARGS\n```.
std::optional<ParsedToolCall> deepseek_call(std::string_view text, const json& tools) {
  const std::size_t sep = text.find(kDeepseekSep);
  if (sep == npos) return std::nullopt;
  std::string_view name = trim(text.substr(0, sep));
  std::string_view arguments = text.substr(sep + kDeepseekSep.size());
  const std::size_t fence = arguments.find("\n```");
  if (name == "function" && fence != npos) {
    name = trim(arguments.substr(0, fence));
    arguments.remove_prefix(fence + 4);
    if (arguments.starts_with("json")) arguments.remove_prefix(4);
    arguments = trim(arguments);
    if (!arguments.ends_with("```")) return std::nullopt;
    arguments.remove_suffix(3);
  }
  const std::optional<json> parsed = parse_json(trim(arguments));
  return parsed ? make_call(tools, name, *parsed) : std::nullopt;
}

// functions.NAME:INDEX<|tool_call_argument_begin|>ARGS
std::optional<ParsedToolCall> kimi_call(std::string_view text, const json& tools) {
  constexpr std::string_view kArguments = "<|tool_call_argument_begin|>";
  const std::size_t at = text.find(kArguments);
  if (at == npos) return std::nullopt;
  std::string_view name = trim(text.substr(0, at));
  if (name.starts_with("functions.")) name.remove_prefix(10);
  const std::size_t colon = name.rfind(':');
  if (colon != npos && colon + 1 < name.size() &&
      name.find_first_not_of("0123456789", colon + 1) == npos)
    name = name.substr(0, colon);
  const std::optional<json> parsed = parse_json(trim(text.substr(at + kArguments.size())));
  return parsed ? make_call(tools, name, *parsed) : std::nullopt;
}

// A section of one or more calls, each between `begin` and `end`, blanks between them.
std::optional<Calls> parse_call_list(std::string_view body, const json& tools,
                                     std::string_view begin, std::string_view end,
                                     std::optional<ParsedToolCall> (*call)(std::string_view,
                                                                           const json&)) {
  Reader reader(body);
  Calls calls;
  while (reader.take(begin)) {
    const std::optional<std::string_view> text = reader.until(end);
    if (!text || !add(calls, call(*text, tools))) return std::nullopt;
  }
  if (calls.empty() || !reader.done()) return std::nullopt;
  return calls;
}

std::optional<Calls> parse_deepseek(std::string_view body, const json& tools) {
  return parse_call_list(body, tools, kDeepseekCallBegin, kDeepseekCallEnd, deepseek_call);
}

std::optional<Calls> parse_kimi(std::string_view body, const json& tools) {
  return parse_call_list(body, tools, "<|tool_call_begin|>", "<|tool_call_end|>", kimi_call);
}

constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";

// One [TOOL_CALLS] part: a JSON list of calls, or NAME[ARGS]{...} (NAME[CALL_ID]ID[ARGS]{...}).
bool add_mistral_calls(Calls& calls, std::string_view part, const json& tools) {
  part = trim(part);
  if (part.starts_with('[')) {
    const std::optional<json> list = parse_json(part);
    if (!list || !list->is_array() || list->empty()) return false;
    return std::all_of(list->begin(), list->end(),
                       [&](const json& call) { return add(calls, json_call(tools, call)); });
  }
  const std::size_t args = part.find("[ARGS]");
  if (args == npos) return false;
  const std::string_view name = part.substr(0, std::min(args, part.find("[CALL_ID]")));
  const std::optional<json> parsed = parse_json(part.substr(args + 6));
  return parsed && add(calls, make_call(tools, trim(name), *parsed));
}

std::optional<Calls> parse_mistral(std::string_view body, const json& tools) {
  Calls calls;
  for (std::size_t next = 0; next != npos;) {
    const std::size_t at = body.find(kMistralCalls, next);
    const std::string_view part = body.substr(next, at == npos ? npos : at - next);
    if (!add_mistral_calls(calls, part, tools)) return std::nullopt;
    next = at == npos ? npos : at + kMistralCalls.size();
  }
  return calls;
}

constexpr std::string_view kPythonTag = "<|python_tag|>";

// The whole answer: [<|python_tag|>]{call}, or several separated by ';'.
std::optional<Calls> parse_llama3(std::string_view body, const json& tools) {
  std::string_view rest = skip_blanks(body);
  if (rest.starts_with(kPythonTag)) rest.remove_prefix(kPythonTag.size());
  Calls calls;
  for (;;) {
    rest = skip_blanks(rest);
    const std::size_t end = json_value_end(rest);
    const std::optional<json> call = end == npos ? std::nullopt : parse_json(rest.substr(0, end));
    if (!call || !add(calls, json_call(tools, *call))) return std::nullopt;
    rest = skip_blanks(rest.substr(end));
    if (rest.empty()) return calls;
    if (rest.front() != ';') return std::nullopt;
    rest.remove_prefix(1);
  }
}

// Where a format's calls are in the output: blocks from `open` to `close`.
struct BlockSyntax {
  std::string_view open;   // empty: the whole answer (llama3-json)
  std::string_view close;  // empty: the block runs to the end of the output
  std::string_view lead;   // what a block's text begins with, after blanks (empty: anything)
  std::optional<Calls> (*parse)(std::string_view body, const json& tools);
  // Whether the end of the output closes a block too: where each call has an end marker of its
  // own, the section's is redundant (DeepSeek-R1's template leaves it out after a single call).
  bool closed_by_end = false;
};

constexpr BlockSyntax kHermes{"<tool_call>", "</tool_call>", "{", parse_hermes};
constexpr BlockSyntax kQwen3Xml{"<tool_call>", "</tool_call>", "<function=", parse_qwen3_xml};
constexpr BlockSyntax kGlm{"<tool_call>", "</tool_call>", "", parse_glm};
constexpr BlockSyntax kDeepseek{"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                kDeepseekCallBegin, parse_deepseek, true};
constexpr BlockSyntax kKimi{"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                            "<|tool_call_begin|>", parse_kimi, true};
constexpr BlockSyntax kMistral{kMistralCalls, "", "", parse_mistral};
constexpr BlockSyntax kLlama3{"", "", "", parse_llama3};

const BlockSyntax* block_syntax(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes:
      return &kHermes;
    case ToolCallFormat::qwen3_xml:
      return &kQwen3Xml;
    case ToolCallFormat::glm:
      return &kGlm;
    case ToolCallFormat::deepseek:
      return &kDeepseek;
    case ToolCallFormat::kimi:
      return &kKimi;
    case ToolCallFormat::mistral:
      return &kMistral;
    case ToolCallFormat::llama3_json:
      return &kLlama3;
    case ToolCallFormat::none:
    case ToolCallFormat::harmony:
      break;
  }
  return nullptr;
}

// ---- harmony -----------------------------------------------------------------------------------

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kRecipient = "to=";
// What ends a message's text: its end markers, or the header of the next message.
constexpr std::array<std::string_view, 5> kMessageEnds{"<|end|>", "<|call|>", "<|return|>", kStart,
                                                       kChannel};

bool opens_header(std::string_view marker) {
  return marker == kStart || marker == kChannel;
}

// The word after `key` in a message header (up to a blank or the next marker).
std::string_view header_word(std::string_view header, std::string_view key) {
  const std::size_t at = header.find(key);
  if (at == npos) return {};
  const std::string_view rest = skip_blanks(header.substr(at + key.size()));
  return rest.substr(0, rest.find_first_of(" \t\r\n<"));
}

// The function a message is addressed to (to=functions.NAME, or to=NAME), or empty.
std::string_view recipient(std::string_view header) {
  std::string_view name = header_word(header, kRecipient);
  if (name.starts_with("functions.")) name.remove_prefix(10);
  return name;
}

struct FormatName {
  ToolCallFormat format;
  std::string_view name;
};

constexpr std::array<FormatName, 9> kFormatNames{{
    {ToolCallFormat::none, "none"},
    {ToolCallFormat::hermes, "hermes"},
    {ToolCallFormat::qwen3_xml, "qwen3-xml"},
    {ToolCallFormat::llama3_json, "llama3-json"},
    {ToolCallFormat::mistral, "mistral"},
    {ToolCallFormat::harmony, "harmony"},
    {ToolCallFormat::deepseek, "deepseek"},
    {ToolCallFormat::kimi, "kimi"},
    {ToolCallFormat::glm, "glm"},
}};

}  // namespace

// ---- formats -----------------------------------------------------------------------------------

std::string_view tool_call_format_name(ToolCallFormat format) {
  for (const FormatName& f : kFormatNames)
    if (f.format == format) return f.name;
  return "none";
}

const std::vector<std::string>& tool_call_format_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const FormatName& f : kFormatNames) all.emplace_back(f.name);
    return all;
  }();
  return names;
}

ToolCallFormat parse_tool_call_format(std::string_view name) {
  for (const FormatName& f : kFormatNames)
    if (f.name == name) return f.format;
  std::string known;
  for (const std::string& n : tool_call_format_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown tool-call format '" + std::string(name) + "' (known: " + known + ")");
}

ToolCallFormat detect_tool_call_format(std::string_view source) {
  const auto has = [&](std::string_view text) { return source.find(text) != npos; };
  if (has("<|channel|>")) return ToolCallFormat::harmony;
  if (has("tool▁call")) return ToolCallFormat::deepseek;
  if (has("<|tool_call_begin|>") || has("tool_calls_section_begin")) return ToolCallFormat::kimi;
  if (has("<arg_key>")) return ToolCallFormat::glm;
  const bool tool_call = has("<tool_call>");
  if (tool_call && has("<function=")) return ToolCallFormat::qwen3_xml;
  // Apriel's and MiniMax's <tool_calls>[...] and MiniMax's <invoke> are formats of their own.
  if (tool_call && !has("<tool_calls>") && !has("<invoke")) return ToolCallFormat::hermes;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::mistral;
  if (has("<function=")) return ToolCallFormat::none;  // functionary's <function=f>{...}</function>
  if (has("<|start_header_id|>") && (has("<|python_tag|>") || has("\"parameters\"")))
    return ToolCallFormat::llama3_json;
  return ToolCallFormat::none;
}

std::string tool_call_opening(ToolCallFormat format, std::string_view source,
                              std::string_view function_name) {
  const std::string name(function_name);
  const bool named = !name.empty();
  const auto has = [&](std::string_view text) { return source.find(text) != npos; };
  switch (format) {
    case ToolCallFormat::none:
      return "";
    case ToolCallFormat::hermes:
      return "<tool_call>\n{\"name\": \"" + (named ? name + "\", \"arguments\": " : "");
    case ToolCallFormat::qwen3_xml:
      return "<tool_call>\n<function=" + (named ? name + ">\n" : "");
    case ToolCallFormat::llama3_json:
      return "{\"name\": \"" + (named ? name + "\", \"parameters\": " : "");
    case ToolCallFormat::mistral:
      // The [ARGS] form; its templates with a call id write NAME[CALL_ID]ID[ARGS].
      if (has("[ARGS]"))
        return "[TOOL_CALLS]" + name + (named && !has("[CALL_ID]") ? "[ARGS]" : "");
      return "[TOOL_CALLS][{\"name\": \"" + (named ? name + "\", \"arguments\": " : "");
    case ToolCallFormat::harmony:
      // As gpt-oss's template writes a call after <|start|>assistant.
      return " to=functions." + (named ? name + "<|channel|>commentary json<|message|>" : "");
    case ToolCallFormat::deepseek: {
      const std::string begin = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>";
      if (!named) return begin;
      if (has("```json")) return begin + "function<｜tool▁sep｜>" + name + "\n```json\n";
      return begin + name + "<｜tool▁sep｜>";
    }
    case ToolCallFormat::kimi:
      return "<|tool_calls_section_begin|><|tool_call_begin|>functions." +
             (named ? name + ":0<|tool_call_argument_begin|>" : "");
    case ToolCallFormat::glm:
      // GLM-4.6 writes a line break after the name, GLM-4.7 and Laguna none: the model's choice.
      return "<tool_call>" + name;
  }
  return "";
}

// ---- the parser --------------------------------------------------------------------------------

enum class ToolCallParser::Phase {
  content,         // giving out text, looking for the opening of a block of calls
  answer_start,    // llama3-json: the answer may still be a call
  block,           // in a block of calls: pending_ begins with its opening
  harmony_start,   // harmony: the first message, which may have no header
  harmony_header,  // harmony: a message's header (up to <|message|>)
  harmony_body,    // harmony: a message's text
};

ToolCallParser::ToolCallParser(ToolCallFormat format, const nlohmann::json& tools)
    : format_(format), tools_(tools.is_array() ? tools : json::array()), phase_(Phase::content) {
  if (format == ToolCallFormat::harmony) phase_ = Phase::harmony_start;
  if (format == ToolCallFormat::llama3_json && !tools_.empty()) phase_ = Phase::answer_start;
}

ToolCallParser::Delta ToolCallParser::push(std::string_view text) {
  pending_.append(text);
  return drain(false);
}

ToolCallParser::Delta ToolCallParser::finish() {
  return drain(true);
}

ToolCallParser::Delta ToolCallParser::drain(bool final) {
  Delta out;
  while (step(out, final)) {
  }
  return out;
}

// One step of reading: false when the parser waits for more text.
bool ToolCallParser::step(Delta& out, bool final) {
  switch (phase_) {
    case Phase::content:
      return step_content(out, final);
    case Phase::answer_start:
      return step_answer_start(final);
    case Phase::block:
      return step_block(out, final);
    case Phase::harmony_start:
      return step_harmony_start(final);
    case Phase::harmony_header:
      return step_harmony_header(out, final);
    case Phase::harmony_body:
      return step_harmony_body(out, final);
  }
  return false;
}

// Gives out text up to the next block's opening marker, holding back what may be its start.
bool ToolCallParser::step_content(Delta& out, bool final) {
  const BlockSyntax* syntax = tools_.empty() ? nullptr : block_syntax(format_);
  if (syntax == nullptr || syntax->open.empty()) {
    out.content += pending_;
    pending_.clear();
    return false;
  }
  if (after_call_) {
    // Blanks between two blocks of calls go with the second block.
    const std::size_t gap = std::min(pending_.size(), pending_.find_first_not_of(kBlanks));
    const std::string_view rest = std::string_view(pending_).substr(gap);
    if (rest.starts_with(syntax->open)) {
      open_len_ = gap + syntax->open.size();
      after_call_ = false;
      phase_ = Phase::block;
      return true;
    }
    if (!final && syntax->open.starts_with(rest)) return false;
    after_call_ = false;
  }
  const std::array<std::string_view, 1> open{syntax->open};
  const Section section = next_section(pending_, open, final);
  out.content.append(section.before);
  pending_.erase(0, section.before.size());
  if (section.found.pos == npos) return false;
  open_len_ = syntax->open.size();
  phase_ = Phase::block;
  return true;
}

// llama3-json: an answer that begins (after blanks and an optional <|python_tag|>) with '{' may
// be a call, which runs to the end of the output.
bool ToolCallParser::step_answer_start(bool final) {
  std::string_view rest = skip_blanks(pending_);
  const bool tagged = rest.starts_with(kPythonTag);
  if (tagged) rest = skip_blanks(rest.substr(kPythonTag.size()));
  if (rest.starts_with('{')) {
    open_len_ = 0;
    phase_ = Phase::block;
    return true;
  }
  const bool undecided = rest.empty() || (!tagged && kPythonTag.starts_with(rest));
  if (undecided && !final) return false;
  phase_ = Phase::content;
  return true;
}

// Holds a block until its closing marker (or the end of the output) and gives out its calls.
bool ToolCallParser::step_block(Delta& out, bool final) {
  const BlockSyntax& syntax = *block_syntax(format_);
  const std::string_view body = std::string_view(pending_).substr(open_len_);
  if (!may_begin_with(skip_blanks(body), syntax.lead)) return abandon_block(out);
  std::size_t end = body.size(), next = body.size();
  if (!syntax.close.empty()) {
    end = body.find(syntax.close);
    if (end == npos && !final) return false;
    if (end == npos && !syntax.closed_by_end) return abandon_block(out);
    if (end == npos) end = body.size();
    next = std::min(body.size(), end + syntax.close.size());
  } else if (!final) {
    return false;
  }
  std::optional<Calls> calls = syntax.parse(body.substr(0, end), tools_);
  if (!calls) return abandon_block(out);
  std::move(calls->begin(), calls->end(), std::back_inserter(out.calls));
  pending_.erase(0, open_len_ + next);
  phase_ = Phase::content;
  after_call_ = true;
  return true;
}

// Not a call after all: the block's opening is text, and what follows it is read again.
bool ToolCallParser::abandon_block(Delta& out) {
  const std::size_t n = open_len_ == 0 ? pending_.size() : open_len_;
  out.content.append(pending_, 0, n);
  pending_.erase(0, n);
  phase_ = Phase::content;
  after_call_ = false;
  return true;
}

// The generation begins with a header (<|channel|>..., or a recipient " to=..."), or without one
// as plain content.
bool ToolCallParser::step_harmony_start(bool final) {
  const std::string_view text = pending_;
  const std::string_view rest = skip_blanks(text);
  if (text.starts_with(kChannel) || text.starts_with(kStart) || rest.starts_with(kRecipient)) {
    phase_ = Phase::harmony_header;
    return true;
  }
  const bool undecided =
      kChannel.starts_with(text) || kStart.starts_with(text) || kRecipient.starts_with(rest);
  if (undecided && !final) return false;
  header_.clear();
  phase_ = Phase::harmony_body;
  return true;
}

bool ToolCallParser::step_harmony_header(Delta& out, bool final) {
  const std::size_t at = pending_.find(kMessage);
  if (at == npos) {
    if (final) {  // a header cut off: give it back as it was written
      out.content += pending_;
      pending_.clear();
    }
    return false;
  }
  header_ = pending_.substr(0, at);
  pending_.erase(0, at + kMessage.size());
  phase_ = Phase::harmony_body;
  return true;
}

// A message's text: analysis is reasoning, a message to a function a call, the rest content.
bool ToolCallParser::step_harmony_body(Delta& out, bool final) {
  const std::string_view function = recipient(header_);
  const bool call = !function.empty();
  // A call is held until its message ends; other text is given out as it comes.
  const Section section = next_section(pending_, kMessageEnds, final || call);
  const bool ended = section.found.pos != npos;
  if (call && !ended && !final) return false;
  std::size_t used = section.before.size();
  if (ended && !opens_header(section.found.marker)) used += section.found.marker.size();
  if (!call) {
    const bool analysis = header_word(header_, kChannel) == "analysis";
    (analysis ? out.reasoning : out.content).append(section.before);
  } else if (const std::optional<json> arguments = parse_json(trim(section.before));
             !add(out.calls, arguments ? make_call(tools_, function, *arguments) : std::nullopt)) {
    out.content.append(header_).append(kMessage).append(pending_, 0, used);
  }
  pending_.erase(0, used);
  if (!ended && !call) return false;
  const bool header = ended && opens_header(section.found.marker);
  header_.clear();
  phase_ = header ? Phase::harmony_header : Phase::harmony_body;
  return ended;
}

}  // namespace rkv::server
