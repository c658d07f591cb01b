// Tools in the OpenAI API: the request's tools, tool_choice, tool messages and assistant
// tool_calls reach the chat template as transformers gives them (checked against the golden
// renderings of real templates), and a choice's output is split into reasoning, content and
// calls whatever the pieces it streams in.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rkv/chat_template.h"
#include "server/choice_output.h"
#include "server/openai_api.h"
#include "test_util.h"

namespace rkv::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ParsedRequest parse(const std::string& body, const RequestDefaults& defaults = {}) {
  return parse_completion_request(body, true, defaults, 1);
}

std::string refused_param(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.param;
  }
  return "accepted";
}

using test::read_text;

// A conversation of the corpus in the form OpenAI's clients send it: each call's arguments as
// JSON text (json.dumps' separators), not an object.
std::string wire_body(const ordered_json& conversation) {
  ordered_json body = {{"messages", conversation["messages"]}};
  for (auto& m : body["messages"])
    if (m.contains("tool_calls"))
      for (auto& c : m["tool_calls"]) {
        // As Python's json.dumps writes it (", " and ": " between items).
        auto& args = c["function"]["arguments"];
        std::string text = "{";
        bool first = true;
        for (const auto& [k, v] : args.items()) {
          text += (first ? "" : ", ") + ordered_json(k).dump() + ": " + v.dump();
          first = false;
        }
        args = text + "}";
      }
  if (conversation.contains("tools")) body["tools"] = conversation["tools"];
  return body.dump();
}

TEST(OpenAiTools, WireFormToolRoundsRenderAsTransformersRendersTheirObjectForm) {
  // The golden cases render conversation c05 (a tool round, arguments as objects) with each
  // template. The same round sent as OpenAI's clients send it (arguments as JSON text) must
  // render identically once parsed: the server gives templates the object, as vLLM does.
  RKV_REQUIRE_SHARED(shared);
  const auto dir = shared / "golden/chat_templates";
  const auto conversation =
      ordered_json::parse(read_text(dir / "conversations/c05_tool_call.json"));
  const ParsedRequest p = parse(wire_body(conversation));
  ASSERT_EQ(p.request.messages.size(), 4u);
  EXPECT_EQ(p.request.messages[3].role, "tool");
  EXPECT_EQ(p.request.messages[3].fields["tool_call_id"], "call00001");
  EXPECT_EQ(p.tool_choice, ToolChoice::automatic);
  // Keys stay in the order sent: templates print tools with tojson.
  EXPECT_EQ(p.request.tools.dump().substr(0, 40), R"([{"type":"function","function":{"name":")");
  std::ifstream cases(dir / "cases.jsonl");
  std::string line;
  int compared = 0;
  while (std::getline(cases, line)) {
    const auto c = ordered_json::parse(line);
    if (c["conversation"] != "c05_tool_call.json" || !c["add_generation_prompt"].get<bool>() ||
        !c["extra"].empty() || !c.contains("expected"))
      continue;
    const std::string name = c["template"];
    SCOPED_TRACE(name);
    std::optional<std::string> bos, eos;
    if (c["bos_token"].is_string()) bos = c["bos_token"].get<std::string>();
    if (c["eos_token"].is_string()) eos = c["eos_token"].get<std::string>();
    ChatTemplate t = make_jinja_chat_template(read_text(dir / "templates" / name), name, bos, eos);
    t.fixed_date = c["date"].get<std::string>();  // the corpus' clock
    EXPECT_EQ(render_chat(t, p.request.messages, true, nullptr, p.request.tools),
              c["expected"].get<std::string>());
    ++compared;
  }
  EXPECT_EQ(compared, 40);
}

TEST(OpenAiTools, ToolChoiceAndItsRefusals) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
                   {"type": "function", "function": {"name": "add"}}])";
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  const auto with = [&](const std::string& extra) {
    return "{" + user + ", " + tools + (extra.empty() ? "" : ", " + extra) + "}";
  };
  EXPECT_EQ(parse(with("")).tool_choice, ToolChoice::automatic);
  EXPECT_EQ(parse(with(R"("tool_choice": "auto")")).tool_choice, ToolChoice::automatic);
  EXPECT_EQ(parse(with(R"("tool_choice": "none")")).tool_choice, ToolChoice::none);
  EXPECT_EQ(parse(with(R"("tool_choice": "required")")).tool_choice, ToolChoice::required);
  const ParsedRequest named =
      parse(with(R"("tool_choice": {"type": "function", "function": {"name": "add"}})"));
  EXPECT_EQ(named.tool_choice, ToolChoice::function);
  EXPECT_EQ(named.tool_choice_name, "add");
  EXPECT_FALSE(parse(with(R"("parallel_tool_calls": false)")).parallel_tool_calls);
  EXPECT_EQ(parse("{" + user + "}").tool_choice, ToolChoice::none);
  EXPECT_TRUE(parse("{" + user + R"(, "tools": []})").request.tools.is_null());

  EXPECT_EQ(refused_param(with(R"("tool_choice": "always")")), "tool_choice");
  EXPECT_EQ(
      refused_param(with(R"("tool_choice": {"type": "function", "function": {"name": "x"}})")),
      "tool_choice");
  EXPECT_EQ(refused_param("{" + user + R"(, "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(refused_param("{" + user + R"(, "tools": {"a": 1}})"), "tools");
  EXPECT_EQ(refused_param("{" + user + R"(, "tools": [{"type": "retrieval"}]})"), "tools[0]");
  EXPECT_EQ(
      refused_param("{" + user + R"(, "tools": [{"type": "function", "function": {"name": ""}}]})"),
      "tools[0].function.name");
  EXPECT_EQ(refused_param("{" + user +
                          R"(, "tools": [{"type": "function", "function": {"name": "a"}},
                                         {"type": "function", "function": {"name": "a"}}]})"),
            "tools[1].function.name");
  EXPECT_EQ(refused_param(with(R"("parallel_tool_calls": 1)")), "parallel_tool_calls");
  // Messages of a tool round.
  EXPECT_EQ(refused_param(R"({"messages": [{"role": "assistant", "tool_calls": {}}]})"),
            "messages[0].tool_calls");
  EXPECT_EQ(refused_param(
                R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]})"),
            "messages[0].tool_calls[0]");
  EXPECT_EQ(
      refused_param(
          R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]})"),
      "messages[0].tool_calls[0].function.arguments");
  EXPECT_EQ(refused_param(R"({"messages": [{"role": "tool", "content": "x", "tool_call_id": 3}]})"),
            "messages[0].tool_call_id");
  try {
    (void)parse_completion_request(R"({"prompt": "x", "tools": []})", false, {}, 1);
    ADD_FAILURE() << "completions took tools";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools");
  }
}

TEST(OpenAiTools, AssistantToolCallsAndReasoningBecomeTemplateFields) {
  const ParsedRequest p = parse(R"({"messages": [
      {"role": "user", "content": "x"},
      {"role": "assistant", "content": null, "reasoning": "think",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [2]}"}},
                      {"id": "c2", "type": "function",
                       "function": {"name": "g", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "3"}]})");
  const ChatMessage& a = p.request.messages[1];
  EXPECT_EQ(a.content, "");
  EXPECT_EQ(a.fields["reasoning_content"], "think");
  // JSON text that is an object becomes the object (keys in the order written); other text
  // stays text.
  EXPECT_EQ(a.fields["tool_calls"][0]["function"]["arguments"].dump(), R"({"b":1,"a":[2]})");
  EXPECT_EQ(a.fields["tool_calls"][1]["function"]["arguments"], "not json");
  EXPECT_EQ(a.fields["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(p.request.messages[2].fields["name"], "f");
}

TEST(OpenAiTools, ReasoningEffortAndServerKwargsReachTheTemplate) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(parse("{" + user + R"(, "reasoning_effort": "high"})")
                .request.chat_template_kwargs["reasoning_effort"],
            "high");
  EXPECT_EQ(
      parse("{" + user +
            R"(, "reasoning_effort": "high", "chat_template_kwargs": {"reasoning_effort": "low"}})")
          .request.chat_template_kwargs["reasoning_effort"],
      "low");
  EXPECT_EQ(refused_param("{" + user + R"(, "reasoning_effort": 3})"), "reasoning_effort");
  RequestDefaults d;
  d.chat_template_kwargs = {{"enable_thinking", false}, {"x", 1}};
  const auto k = parse("{" + user + R"(, "chat_template_kwargs": {"enable_thinking": true}})", d)
                     .request.chat_template_kwargs;
  EXPECT_EQ(k.dump(), R"({"enable_thinking":true,"x":1})");
  EXPECT_EQ(parse("{" + user + "}", d).request.chat_template_kwargs.dump(),
            R"({"enable_thinking":false,"x":1})");
}

}  // namespace
}  // namespace rkv::server

namespace rkv::server {
namespace {

const nlohmann::json kTools = nlohmann::json::parse(
    R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "g"}}])");

// Pushes `text` in pieces of `piece` bytes and joins what comes out.
ChoiceOutput::Delta run(const ChoiceOutput::Setup& setup, const std::string& text,
                        std::size_t piece) {
  ChoiceOutput out(setup);
  ChoiceOutput::Delta all;
  for (std::size_t i = 0; i < text.size(); i += piece) all.append(out.push(text.substr(i, piece)));
  all.append(out.finish());
  EXPECT_EQ(out.calls(), static_cast<int>(all.calls.size()));
  return all;
}

TEST(ChoiceOutput, SplitsReasoningContentAndCallsWhateverThePieces) {
  ChoiceOutput::Setup s;
  s.format = ToolCallFormat::hermes;
  s.tools = kTools;
  const std::string text =
      "<think>\nplan it\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  for (std::size_t piece : {1u, 2u, 3u, 5u, 1000u}) {
    SCOPED_TRACE(piece);
    const auto d = run(s, text, piece);
    EXPECT_EQ(d.reasoning, "plan it\n");
    EXPECT_EQ(d.content.find_first_not_of(" \n"), std::string::npos) << d.content;
    ASSERT_EQ(d.calls.size(), 2u);
    EXPECT_EQ(d.calls[0].index, 0);
    EXPECT_EQ(d.calls[1].index, 1);
    EXPECT_EQ(d.calls[0].call.name, "f");
    EXPECT_EQ(nlohmann::json::parse(d.calls[0].call.arguments), nlohmann::json({{"a", 1}}));
    EXPECT_EQ(d.calls[1].call.name, "g");
    EXPECT_EQ(d.calls[0].id.rfind("call_", 0), 0u);
    EXPECT_EQ(d.calls[0].id.size(), 29u);
    EXPECT_NE(d.calls[0].id, d.calls[1].id);
  }
  // parallel_tool_calls false: the first call only.
  s.parallel_tool_calls = false;
  EXPECT_EQ(run(s, text, 4).calls.size(), 1u);
  // No tools: the call's text is content, byte for byte.
  s.tools = nullptr;
  const auto plain = run(s, text, 3);
  EXPECT_TRUE(plain.calls.empty());
  EXPECT_EQ(plain.content, text.substr(text.find("<tool_call>")));
  // The reasoning inline: everything is content, the call still parsed.
  s.tools = kTools;
  s.parallel_tool_calls = true;
  s.split_reasoning = false;
  const auto inline_ = run(s, "<think>x</think>ok", 2);
  EXPECT_EQ(inline_.content, "<think>x</think>ok");
  EXPECT_EQ(inline_.reasoning, "");
}

TEST(ChoiceOutput, CallIdsAreInTheFormTheFamilysTemplateTakesBack) {
  ChoiceOutput::Setup s;
  s.tools = kTools;
  s.format = ToolCallFormat::mistral;
  const auto m = run(s, R"([TOOL_CALLS][{"name": "f", "arguments": {}}])", 3);
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].id.size(), 9u);
  EXPECT_EQ(m.calls[0].id.find_first_not_of(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            std::string::npos);
  s.format = ToolCallFormat::kimi;
  const auto k = run(s,
                     "<|tool_calls_section_begin|><|tool_call_begin|>functions.g:0"
                     "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
                     2);
  ASSERT_EQ(k.calls.size(), 1u);
  EXPECT_EQ(k.calls[0].id, "functions.g:0");
}

TEST(ChoiceOutput, HarmonyChannelsAreSplitWithOrWithoutTools) {
  ChoiceOutput::Setup s;
  s.format = ToolCallFormat::harmony;
  const std::string text =
      "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final"
      "<|message|>answer";
  const auto d = run(s, text, 3);
  EXPECT_EQ(d.reasoning, "think");
  EXPECT_EQ(d.content, "answer");
  s.split_reasoning = false;  // reasoning_format none: the thought joins the content
  EXPECT_EQ(run(s, text, 3).content, "thinkanswer");
}

TEST(ChoiceOutput, JsonOfCallsInResponsesAndStreams) {
  const ToolCallOut call{1, "call_x", {"f", R"({"a":1})"}};
  EXPECT_EQ(
      tool_calls_body({call}).dump(),
      R"([{"function":{"arguments":"{\"a\":1}","name":"f"},"id":"call_x","type":"function"}])");
  const auto parts = tool_call_stream_deltas(call);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(
      parts[0].dump(),
      R"({"function":{"arguments":"","name":"f"},"id":"call_x","index":1,"type":"function"})");
  EXPECT_EQ(parts[1].dump(), R"({"function":{"arguments":"{\"a\":1}"},"index":1})");
}

}  // namespace
}  // namespace rkv::server
