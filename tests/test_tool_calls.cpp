// Tool calls in a model's output (src/server/tool_calls.h): hand-written outputs of every format
// with their expected content and calls, the same results whatever the pieces the text streams
// in, look-alikes that stay text byte for byte, and the golden chat templates' own renderings of
// a call (../shared/golden/chat_templates) read back as that call.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "jinja/template.h"
#include "server/tool_calls.h"
#include "test_util.h"

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using rkv::server::ParsedToolCall;
using rkv::server::ToolCallFormat;
using rkv::server::ToolCallParser;

// ---- helpers -----------------------------------------------------------------------------------

// The tools of the tests: get_weather (string parameters) and convert_currency (a number).
const json& tools() {
  static const json t = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
      "required": ["location"]}}},
    {"type": "function", "function": {"name": "convert_currency", "parameters": {"type": "object",
      "properties": {"amount": {"type": "number"}, "from_currency": {"type": "string"},
                     "to_currency": {"type": "string"}}}}}
  ])");
  return t;
}

struct Call {
  std::string name;
  json arguments;
};

struct Result {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

void append(Result& r, ToolCallParser::Delta d) {
  r.reasoning += d.reasoning;
  r.content += d.content;
  for (auto& c : d.calls) r.calls.push_back(std::move(c));
}

// The text pushed in pieces of `piece` bytes (0: one push), then finish().
Result parse(ToolCallFormat format, std::string_view text, std::size_t piece = 0,
             const json& with_tools = tools()) {
  ToolCallParser parser(format, with_tools);
  Result r;
  const std::size_t step = piece == 0 ? std::max<std::size_t>(text.size(), 1) : piece;
  for (std::size_t at = 0; at < text.size(); at += step)
    append(r, parser.push(text.substr(at, step)));
  append(r, parser.finish());
  return r;
}

void expect_calls(const std::vector<ParsedToolCall>& got, const std::vector<Call>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name) << "call " << i;
    // Compact JSON text of an object: exactly what dump() writes.
    EXPECT_EQ(got[i].arguments, want[i].arguments.dump()) << "call " << i;
  }
}

void expect_result(ToolCallFormat format, std::string_view text, std::string_view content,
                   const std::vector<Call>& calls, std::string_view reasoning = "") {
  SCOPED_TRACE(std::string(tool_call_format_name(format)) + ": " + std::string(text));
  const Result r = parse(format, text);
  EXPECT_EQ(r.content, content);
  EXPECT_EQ(r.reasoning, reasoning);
  expect_calls(r.calls, calls);
}

const Call kParis{"get_weather", {{"location", "Paris, France"}}};
const Call kParisCelsius{"get_weather", {{"location", "Paris, France"}, {"unit", "celsius"}}};
const Call kPounds{"convert_currency",
                   {{"amount", 250}, {"from_currency", "GBP"}, {"to_currency", "USD"}}};

// ---- one and two calls per format --------------------------------------------------------------

TEST(ToolCallsHermes, OneCallWithContentAround) {
  expect_result(ToolCallFormat::hermes,
                "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                "{\"location\": \"Paris, France\"}}\n</tool_call>\nOne moment.",
                "Let me check.\n\nOne moment.", {kParis});
}

TEST(ToolCallsHermes, TwoCallsArgumentsAsAJsonString) {
  expect_result(
      ToolCallFormat::hermes,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, "
      "France\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"convert_currency\", \"arguments\": \"{\\\"amount\\\": 250, \\\"from_currency\\\": "
      "\\\"GBP\\\", \\\"to_currency\\\": \\\"USD\\\"}\"}\n</tool_call>",
      "", {kParisCelsius, kPounds});
}

TEST(ToolCallsQwen3Xml, OneCallValuesAreStringsByTheirSchema) {
  // location is a string in the schema: "123" stays the string "123".
  expect_result(ToolCallFormat::qwen3_xml,
                "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=location>\n123\n"
                "</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
                "I'll look.\n", {{"get_weather", {{"location", "123"}, {"unit", "celsius"}}}});
}

TEST(ToolCallsQwen3Xml, TwoCallsANumberParameterIsJson) {
  expect_result(
      ToolCallFormat::qwen3_xml,
      "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis, France\n"
      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=convert_currency>\n"
      "<parameter=amount>\n250\n</parameter>\n<parameter=from_currency>\nGBP\n"
      "</parameter>\n<parameter=to_currency>\nUSD\n</parameter>\n</function>\n"
      "</tool_call>\nDone.",
      "\nDone.", {kParis, kPounds});
}

TEST(ToolCallsQwen3Xml, AValueKeepsItsInnerLines) {
  expect_result(ToolCallFormat::qwen3_xml,
                "<tool_call>\n<function=get_weather>\n<parameter=location>\n\nParis,\nFrance\n\n"
                "</parameter>\n</function>\n</tool_call>",
                "", {{"get_weather", {{"location", "\nParis,\nFrance\n"}}}});
}

TEST(ToolCallsLlama3Json, TheWholeAnswerIsACall) {
  expect_result(ToolCallFormat::llama3_json,
                "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris, France\"}}",
                "", {kParis});
  expect_result(ToolCallFormat::llama3_json,
                " <|python_tag|>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, "
                "France\"}}\n",
                "", {kParis});
}

TEST(ToolCallsLlama3Json, TwoCallsSeparatedBySemicolons) {
  expect_result(ToolCallFormat::llama3_json,
                "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris, France\"}}; "
                "{\"name\": \"convert_currency\", \"parameters\": {\"amount\": 250, "
                "\"from_currency\": \"GBP\", \"to_currency\": \"USD\"}}",
                "", {kParis, kPounds});
}

TEST(ToolCallsLlama3Json, AnAnswerIsContent) {
  expect_result(ToolCallFormat::llama3_json, "It is sunny in Paris {today}.",
                "It is sunny in Paris {today}.", {});
  expect_result(ToolCallFormat::llama3_json, "  {\"weather\": \"sunny\"}",
                "  {\"weather\": \"sunny\"}", {});
}

TEST(ToolCallsMistral, JsonListForm) {
  expect_result(ToolCallFormat::mistral,
                "Sure. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": "
                "\"Paris, France\"}, \"id\": \"abc123def\"}]",
                "Sure. ", {kParis});
  expect_result(ToolCallFormat::mistral,
                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, "
                "France\"}}, {\"name\": \"convert_currency\", \"arguments\": {\"amount\": 250, "
                "\"from_currency\": \"GBP\", \"to_currency\": \"USD\"}}]",
                "", {kParis, kPounds});
}

TEST(ToolCallsMistral, ArgsForm) {
  expect_result(ToolCallFormat::mistral,
                "Checking.[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris, France\"}",
                "Checking.", {kParis});
  expect_result(ToolCallFormat::mistral,
                "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris, France\"}[TOOL_CALLS]"
                "convert_currency[CALL_ID]a1b2c3d4e[ARGS]{\"amount\": 250, \"from_currency\": "
                "\"GBP\", \"to_currency\": \"USD\"}",
                "", {kParis, kPounds});
}

TEST(ToolCallsHarmony, ChannelsAndACall) {
  expect_result(
      ToolCallFormat::harmony,
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":"
      "\"Paris, France\"}<|call|>",
      "", {kParis}, "Need the weather.");
  // The recipient before the channel, as gpt-oss's template writes it; the call ends the text.
  expect_result(ToolCallFormat::harmony,
                " to=functions.get_weather<|channel|>commentary json<|message|>{\"location\": "
                "\"Paris, France\"}",
                "", {kParis});
}

TEST(ToolCallsHarmony, AnswerAndTwoCalls) {
  expect_result(ToolCallFormat::harmony,
                "<|channel|>analysis<|message|>Two lookups.<|end|><|start|>assistant<|channel|>"
                "commentary<|message|>Looking both up.<|end|><|start|>assistant to=functions."
                "get_weather<|channel|>commentary json<|message|>{\"location\": \"Paris, France\"}"
                "<|end|><|start|>assistant<|channel|>commentary to=functions.convert_currency "
                "<|constrain|>json<|message|>{\"amount\": 250, \"from_currency\": \"GBP\", "
                "\"to_currency\": \"USD\"}<|call|>",
                "Looking both up.", {kParis, kPounds}, "Two lookups.");
  expect_result(ToolCallFormat::harmony,
                "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
                "<|message|>It is 18 °C.<|return|>",
                "It is 18 °C.", {}, "Easy.");
  // An answer may end the text without <|end|>; a first message without a header is content.
  expect_result(ToolCallFormat::harmony,
                "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final"
                "<|message|>Sunny.",
                "Sunny.", {}, "Hm.");
  expect_result(ToolCallFormat::harmony, "Just text.", "Just text.", {});
}

TEST(ToolCallsDeepseek, V31FormOneCall) {
  expect_result(ToolCallFormat::deepseek,
                "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                "{\"location\": \"Paris, France\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                "Checking.", {kParis});
}

TEST(ToolCallsDeepseek, R1FormTwoCallsInOneSection) {
  expect_result(ToolCallFormat::deepseek,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                "```json\n{\"location\": \"Paris, France\"}\n```<｜tool▁call▁end｜>\n"
                "<｜tool▁call▁begin｜>function<｜tool▁sep｜>convert_currency\n```json\n"
                "{\"amount\": 250, \"from_currency\": \"GBP\", \"to_currency\": \"USD\"}\n```"
                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>Then I answer.",
                "Then I answer.", {kParis, kPounds});
}

TEST(ToolCallsDeepseek, TheEndOfTheOutputClosesTheSection) {
  // DeepSeek-R1's template writes no <｜tool▁calls▁end｜> after a single call.
  expect_result(ToolCallFormat::deepseek,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                "```json\n{\"location\": \"Paris, France\"}\n```<｜tool▁call▁end｜>",
                "", {kParis});
}

TEST(ToolCallsKimi, OneAndTwoCalls) {
  expect_result(ToolCallFormat::kimi,
                "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                "<|tool_call_argument_begin|>{\"location\": \"Paris, France\"}<|tool_call_end|>"
                "<|tool_calls_section_end|>",
                "Sure.", {kParis});
  expect_result(ToolCallFormat::kimi,
                "<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:3"
                "<|tool_call_argument_begin|>{\"location\": \"Paris, France\"}<|tool_call_end|>\n"
                "<|tool_call_begin|>functions.convert_currency:4<|tool_call_argument_begin|>"
                "{\"amount\": 250, \"from_currency\": \"GBP\", \"to_currency\": \"USD\"}"
                "<|tool_call_end|>\n<|tool_calls_section_end|>\nAfter.",
                "\nAfter.", {kParis, kPounds});
}

TEST(ToolCallsGlm, OneAndTwoCalls) {
  expect_result(ToolCallFormat::glm,
                "Looking.\n<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris, "
                "France</arg_value>\n</tool_call>",
                "Looking.\n", {kParis});
  // GLM-4.7 writes no line breaks; a value that parses as JSON is that JSON.
  expect_result(ToolCallFormat::glm,
                "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris, France"
                "</arg_value></tool_call><tool_call>convert_currency<arg_key>amount</arg_key>"
                "<arg_value>250</arg_value><arg_key>from_currency</arg_key><arg_value>GBP"
                "</arg_value><arg_key>to_currency</arg_key><arg_value>USD</arg_value></tool_call>",
                "", {kParis, kPounds});
}

// ---- streaming ---------------------------------------------------------------------------------

struct Sample {
  ToolCallFormat format;
  std::string text;
};

// Outputs of every format: calls, look-alikes, and cut-off markers.
std::vector<Sample> samples() {
  return {
      {ToolCallFormat::hermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
       "\"Paris, France\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n"
       "</tool_call> and <tool_call> mid-sentence <tool_c"},
      {ToolCallFormat::qwen3_xml,
       "Ok <tool_call>\n<function=convert_currency>\n<parameter=amount>\n250\n</parameter>\n"
       "<parameter=from_currency>\nGBP\n</parameter>\n</function>\n</tool_call>\n\n<tool_call>x"},
      {ToolCallFormat::llama3_json,
       "\n <|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}"},
      {ToolCallFormat::llama3_json, "<|python_tag|>print(1)"},
      {ToolCallFormat::mistral,
       "Sure. [TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris, France\"}[TOOL_CALLS]"
       "convert_currency[ARGS]{\"amount\": 250}"},
      {ToolCallFormat::harmony,
       "<|channel|>analysis<|message|>Need <|the|> weather.<|end|><|start|>assistant<|channel|>"
       "commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Paris\"}"
       "<|call|><|start|>assistant<|channel|>final<|message|>Done <|en"},
      {ToolCallFormat::deepseek,
       "Checking "
       "＜｜.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
       "```json\n{\"location\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>"
       "get_weather<｜tool▁sep｜>{\"location\": \"Rome\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
       "ok<｜tool▁calls▁"},
      {ToolCallFormat::kimi,
       "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"location\": \"Paris\"}<|tool_call_end|>"
       "<|tool_calls_section_end|> <|tool_calls_section_begin|>oops"},
      {ToolCallFormat::glm,
       "A\n<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n"
       "</tool_call>\n<tool_call>get_weather\n<arg_key>location</arg_key>"},
  };
}

TEST(ToolCallsStreaming, AnySplitGivesTheSameResult) {
  for (const Sample& s : samples()) {
    SCOPED_TRACE(std::string(tool_call_format_name(s.format)) + ": " + s.text);
    const Result whole = parse(s.format, s.text);
    for (std::size_t piece : {1, 2, 3, 7}) {
      SCOPED_TRACE("pieces of " + std::to_string(piece));
      const Result r = parse(s.format, s.text, piece);
      EXPECT_EQ(r.content, whole.content);
      EXPECT_EQ(r.reasoning, whole.reasoning);
      ASSERT_EQ(r.calls.size(), whole.calls.size());
      for (std::size_t i = 0; i < r.calls.size(); ++i) {
        EXPECT_EQ(r.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(r.calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
}

TEST(ToolCallsStreaming, RandomSplitsGiveTheSameResult) {
  std::mt19937 rng(20260115);
  for (const Sample& s : samples()) {
    SCOPED_TRACE(std::string(tool_call_format_name(s.format)) + ": " + s.text);
    const Result whole = parse(s.format, s.text);
    for (int trial = 0; trial < 50; ++trial) {
      ToolCallParser parser(s.format, tools());
      Result r;
      for (std::size_t at = 0; at < s.text.size();) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 12)(rng);
        append(r, parser.push(std::string_view(s.text).substr(at, n)));
        at += n;
      }
      append(r, parser.finish());
      EXPECT_EQ(r.content, whole.content);
      EXPECT_EQ(r.reasoning, whole.reasoning);
      EXPECT_EQ(r.calls.size(), whole.calls.size());
    }
  }
}

TEST(ToolCallsStreaming, SamplesReadAsExpected) {
  const std::vector<Sample> all = samples();
  expect_result(
      all[0].format, all[0].text,
      "Let me check.\n\n<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call> "
      "and <tool_call> mid-sentence <tool_c",
      {kParis});
  expect_result(all[1].format, all[1].text, "Ok \n\n<tool_call>x",
                {{"convert_currency", {{"amount", 250}, {"from_currency", "GBP"}}}});
  expect_result(all[2].format, all[2].text, "", {{"get_weather", {{"location", "Paris"}}}});
  expect_result(all[3].format, all[3].text, "<|python_tag|>print(1)", {});
  expect_result(all[5].format, all[5].text, "Done <|en", {{"get_weather", {{"location", "Paris"}}}},
                "Need <|the|> weather.");
  expect_result(
      all[6].format, all[6].text, "Checking ＜｜.ok<｜tool▁calls▁",
      {{"get_weather", {{"location", "Paris"}}}, {"get_weather", {{"location", "Rome"}}}});
  expect_result(all[7].format, all[7].text, "Sure. <|tool_calls_section_begin|>oops",
                {{"get_weather", {{"location", "Paris"}}}});
  expect_result(all[8].format, all[8].text,
                "A\n\n<tool_call>get_weather\n<arg_key>location</arg_key>",
                {{"get_weather", {{"location", "Paris"}}}});
}

TEST(ToolCallsStreaming, ContentIsGivenOutAsEarlyAsPossible) {
  ToolCallParser hermes(ToolCallFormat::hermes, tools());
  EXPECT_EQ(hermes.push("Hello <tool").content, "Hello ");
  EXPECT_EQ(hermes.push("box> there").content, "<toolbox> there");
  // Once what follows <tool_call> cannot be a call, it is text at once.
  EXPECT_EQ(hermes.push(" <tool_call>").content, " ");
  EXPECT_EQ(hermes.push(" tags").content, "<tool_call> tags");
  EXPECT_TRUE(hermes.finish().empty());

  ToolCallParser deepseek(ToolCallFormat::deepseek, tools());
  const std::string begin = "<｜tool▁calls▁begin｜>";
  EXPECT_EQ(deepseek.push("A" + begin.substr(0, 4)).content, "A");  // inside a UTF-8 character
  EXPECT_EQ(deepseek.push(begin.substr(4, 5)).content, "");
  EXPECT_EQ(deepseek.push("!").content, begin.substr(0, 9) + "!");

  ToolCallParser llama(ToolCallFormat::llama3_json, tools());
  EXPECT_EQ(llama.push(" \n").content, "");  // may still be a call
  EXPECT_EQ(llama.push("<|python").content, "");
  EXPECT_EQ(llama.push("_tag|> ").content, "");
  EXPECT_EQ(llama.push("x").content, " \n<|python_tag|> x");

  ToolCallParser harmony(ToolCallFormat::harmony, tools());
  auto d = harmony.push("<|channel|>analysis<|message|>Thinking <|e");
  EXPECT_EQ(d.reasoning, "Thinking ");
  d = harmony.push("nd|><|start|>assistant<|channel|>final<|message|>Answer");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer");
}

// ---- look-alikes stay text ---------------------------------------------------------------------

void expect_text(ToolCallFormat format, const std::string& text, const json& with = tools()) {
  SCOPED_TRACE(std::string(tool_call_format_name(format)) + ": " + text);
  for (std::size_t piece : {0, 1, 5}) {
    const Result r = parse(format, text, piece, with);
    EXPECT_EQ(r.content, text);
    EXPECT_EQ(r.reasoning, "");
    EXPECT_TRUE(r.calls.empty());
  }
}

TEST(ToolCallsLookAlikes, StayTextByteForByte) {
  const ToolCallFormat hermes = ToolCallFormat::hermes;
  // An unknown function, malformed JSON, arguments that are not an object, a block never closed.
  expect_text(hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  expect_text(hermes,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": }"
              "\n</tool_call>");
  expect_text(hermes,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1, 2]}\n"
              "</tool_call>");
  expect_text(hermes,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"[1]\"}\n"
              "</tool_call>");
  expect_text(hermes, "Here: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}");
  // A mention of the marker mid-sentence.
  expect_text(hermes, "Models write <tool_call> before a call and </tool_call> after it.");
  expect_text(ToolCallFormat::qwen3_xml,
              "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</function>\n"
              "</tool_call>");
  expect_text(ToolCallFormat::qwen3_xml, "<tool_call>\n<function=nope>\n</function>\n</tool_call>");
  expect_text(ToolCallFormat::llama3_json, "{\"name\": \"nope\", \"parameters\": {}}");
  expect_text(ToolCallFormat::llama3_json,
              "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}} and more");
  expect_text(ToolCallFormat::mistral,
              "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": 1}]");
  expect_text(ToolCallFormat::mistral, "See [TOOL_CALLS] in the docs.");
  expect_text(ToolCallFormat::deepseek,
              "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
              "<｜tool▁calls▁end｜>");
  expect_text(ToolCallFormat::deepseek,
              "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\":"
              "<｜tool▁call▁end｜>");
  expect_text(ToolCallFormat::kimi,
              "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
              "<|tool_call_argument_begin|>\"Paris\"<|tool_call_end|><|tool_calls_section_end|>");
  expect_text(ToolCallFormat::glm,
              "<tool_call>get_weather\n<arg_key>location</arg_key>\n</tool_call>");
  expect_text(ToolCallFormat::glm, "Use <tool_call>NAME</tool_call> to call.");
  // A harmony message to a function that was not offered is given back whole.
  expect_text(ToolCallFormat::harmony,
              "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>");
  expect_text(ToolCallFormat::harmony,
              "<|channel|>commentary to=functions.get_weather<|message|>{\"location\": }<|end|>");
  expect_text(ToolCallFormat::none,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>");
}

TEST(ToolCallsLookAlikes, ARealCallAfterAMention) {
  expect_result(ToolCallFormat::hermes,
                "Calls use <tool_call> tags. <tool_call>\n{\"name\": \"get_weather\", "
                "\"arguments\": {\"location\": \"Paris, France\"}}\n</tool_call>",
                "Calls use <tool_call> tags. ", {kParis});
}

TEST(ToolCallsLookAlikes, NoToolsNoCalls) {
  const std::string hermes =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n"
      "</tool_call>";
  const std::string kimi =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
  for (const json& none : {json(), json::array()}) {
    expect_text(ToolCallFormat::hermes, hermes, none);
    expect_text(ToolCallFormat::kimi, kimi, none);
    expect_text(ToolCallFormat::llama3_json, "{\"name\": \"get_weather\", \"parameters\": {}}",
                none);
    expect_text(ToolCallFormat::mistral, "[TOOL_CALLS]get_weather[ARGS]{}", none);
    // harmony still splits its channels.
    const Result r = parse(ToolCallFormat::harmony,
                           "<|channel|>analysis<|message|>T<|end|><|start|>assistant to=functions."
                           "get_weather<|channel|>commentary json<|message|>{}<|call|>",
                           3, none);
    EXPECT_EQ(r.reasoning, "T");
    EXPECT_EQ(r.content,
              "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{}"
              "<|call|>");
    EXPECT_TRUE(r.calls.empty());
  }
}

// ---- format names ------------------------------------------------------------------------------

TEST(ToolCallsFormats, NamesRoundTrip) {
  const std::vector<std::string> want = {"none",        "hermes",  "qwen3-xml",
                                         "llama3-json", "mistral", "harmony",
                                         "deepseek",    "kimi",    "glm"};
  EXPECT_EQ(rkv::server::tool_call_format_names(), want);
  for (const std::string& name : want) {
    const ToolCallFormat f = rkv::server::parse_tool_call_format(name);
    EXPECT_EQ(rkv::server::tool_call_format_name(f), name);
  }
  try {
    rkv::server::parse_tool_call_format("hermes2");
    FAIL() << "no error";
  } catch (const rkv::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("hermes2"), std::string::npos) << message;
    for (const std::string& name : want) EXPECT_NE(message.find(name), std::string::npos) << name;
  }
}

TEST(ToolCallsFormats, OpeningsWithoutATemplateVariant) {
  using rkv::server::tool_call_opening;
  EXPECT_EQ(tool_call_opening(ToolCallFormat::none, ""), "");
  EXPECT_EQ(tool_call_opening(ToolCallFormat::none, "", "f"), "");
  EXPECT_EQ(tool_call_opening(ToolCallFormat::hermes, "", "f"),
            "<tool_call>\n{\"name\": \"f\", \"arguments\": ");
  EXPECT_EQ(tool_call_opening(ToolCallFormat::mistral, "[TOOL_CALLS][", "f"),
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": ");
  EXPECT_EQ(tool_call_opening(ToolCallFormat::mistral, "[ARGS]", "f"), "[TOOL_CALLS]f[ARGS]");
  EXPECT_EQ(tool_call_opening(ToolCallFormat::deepseek, "", "f"),
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>");
  EXPECT_EQ(tool_call_opening(ToolCallFormat::deepseek, "```json", "f"),
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n");
}

// ---- the golden chat templates -----------------------------------------------------------------

using rkv::test::read_text;

// What every template of the corpus teaches (templates/ and templates_extra/).
const std::map<std::string, ToolCallFormat>& expected_formats() {
  using F = ToolCallFormat;
  static const std::map<std::string, ToolCallFormat> m = {
      {"Apertus-8B-Instruct", F::none},
      {"Apriel-1.6-15b-Thinker-fixed", F::none},  // <tool_calls>[...]</tool_calls>
      {"Bielik-11B-v3.0-Instruct", F::hermes},
      {"ByteDance-Seed-OSS", F::none},  // <seed:tool_call>
      {"Cohere2MoE", F::none},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", F::none},
      {"GLM-4.6", F::glm},
      {"GigaChat3-10B-A1.8B", F::none},
      {"HuggingFaceTB-SmolLM3-3B", F::none},
      {"Kimi-K2-Instruct", F::kimi},
      {"Kimi-K2-Thinking", F::kimi},
      {"LFM2-8B-A1B", F::none},
      {"LFM2.5-Instruct", F::none},
      {"MiMo-VL", F::hermes},
      {"MiniMax-M1", F::none},  // <tool_calls>
      {"NVIDIA-Nemotron-Nano-v2", F::none},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", F::hermes},
      {"Qwen-QwQ-32B", F::hermes},
      {"Qwen-Qwen2.5-7B-Instruct", F::hermes},
      {"Qwen-Qwen3-0.6B", F::hermes},
      {"Qwen3.5-4B", F::qwen3_xml},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", F::deepseek},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", F::deepseek},
      {"deepseek-ai-DeepSeek-V3.1", F::deepseek},
      {"deepseek-ai-DeepSeek-V4", F::none},  // DSML
      {"fireworks-ai-llama-3-firefunction-v2", F::none},
      {"google-gemma-2-2b-it", F::none},
      {"google-gemma-4-31B-it-interleaved", F::none},
      {"ibm-granite-granite-3.3-2B-Instruct", F::none},
      {"ibm-granite-granite-4.0", F::hermes},
      {"llama-cpp-deepseek-r1", F::deepseek},
      {"llama-cpp-rwkv-world", F::none},
      {"meetkai-functionary-medium-v3.1", F::none},  // <function=f>{...}</function>
      {"meta-llama-Llama-3.1-8B-Instruct", F::llama3_json},
      {"meta-llama-Llama-3.2-3B-Instruct", F::llama3_json},
      {"microsoft-Phi-3.5-mini-instruct", F::none},
      {"mistralai-Ministral-3-14B-Reasoning-2512", F::mistral},
      {"mistralai-Mistral-Nemo-Instruct-2407", F::mistral},
      {"muse-glimmer", F::none},
      {"openai-gpt-oss-120b", F::harmony},
      {"openbmb-MiniCPM5-1B", F::none},
      {"poolside-Laguna-S-2.1", F::glm},
      {"poolside-Laguna-XS.2", F::glm},
      {"unsloth-Apriel-1.5", F::none},  // <tool_calls>[...]</tool_calls>
      {"upstage-Solar-Open-100B", F::none},
      // templates_extra/
      {"CohereForAI-c4ai-command-r-plus-tool_use", F::none},
      {"GLM-4.7-Flash", F::glm},
      {"GigaChat3.1-10B-A1.8B", F::none},
      {"Kimi-K3", F::none},
      {"LFM2.5-8B-A1B", F::none},
      {"MiniMax-M2", F::none},  // <invoke>
      {"MiniMax-M3", F::none},
      {"Mistral-Small-3.2-24B-Instruct-2506", F::mistral},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", F::qwen3_xml},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", F::hermes},
      {"Qwen3-Coder", F::qwen3_xml},
      {"Reka-Edge", F::hermes},
      {"StepFun3.5-Flash", F::qwen3_xml},
      {"deepseek-ai-DeepSeek-V3.2", F::none},
      {"deepseek-ai-DeepSeek-V4-Flash-0731", F::none},
      {"google-gemma-4-31B-it", F::none},
      {"ibm-granite-granite-4.1", F::hermes},
      {"meetkai-functionary-medium-v3.2", F::none},
      {"meta-llama-Llama-3.3-70B-Instruct", F::llama3_json},
      {"moonshotai-Kimi-K2", F::kimi},
      {"poolside-Laguna-XS-2.1", F::glm},
      {"tencent-Hy3", F::none},
      {"unsloth-mistral-Devstral-Small-2507", F::mistral},
  };
  return m;
}

struct CorpusTemplate {
  std::string name;  // the file name without .jinja
  std::string source;
  std::optional<std::string> bos, eos;
};

// bos/eos of the templates_extra/ ones (their cases are held back), as their tokenizers have them.
const std::map<std::string, std::pair<std::optional<std::string>, std::optional<std::string>>>&
extra_tokens() {
  using T = std::pair<std::optional<std::string>, std::optional<std::string>>;
  static const std::map<std::string, T> m = {
      {"GLM-4.7-Flash", {std::nullopt, "<|endoftext|>"}},
      {"Mistral-Small-3.2-24B-Instruct-2506", {"<s>", "</s>"}},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", {"<s>", "<|im_end|>"}},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", {"<|begin_of_text|>", "<|im_end|>"}},
      {"Qwen3-Coder", {std::nullopt, "<|im_end|>"}},
      {"Reka-Edge", {std::nullopt, "<sep>"}},
      {"StepFun3.5-Flash", {std::nullopt, "<|im_end|>"}},
      {"ibm-granite-granite-4.1", {"<|end_of_text|>", "<|end_of_text|>"}},
      {"meta-llama-Llama-3.3-70B-Instruct", {"<|begin_of_text|>", "<|eot_id|>"}},
      {"moonshotai-Kimi-K2", {"[BOS]", "[EOS]"}},
      {"poolside-Laguna-XS-2.1", {"<s>", "</s>"}},
      {"unsloth-mistral-Devstral-Small-2507", {"<s>", "</s>"}},
  };
  return m;
}

std::vector<CorpusTemplate> corpus_templates(const std::filesystem::path& dir) {
  std::map<std::string, std::pair<std::optional<std::string>, std::optional<std::string>>> tokens =
      extra_tokens();
  std::ifstream cases(dir / "cases.jsonl");
  for (std::string line; std::getline(cases, line);) {
    if (line.empty()) continue;
    const json c = json::parse(line);
    std::string name = c.at("template").get<std::string>();
    name.resize(name.size() - 6);
    const auto token = [&](const char* key) -> std::optional<std::string> {
      if (c.at(key).is_null()) return std::nullopt;
      return c.at(key).get<std::string>();
    };
    tokens.emplace(name, std::make_pair(token("bos_token"), token("eos_token")));
  }
  std::vector<CorpusTemplate> all;
  for (const char* sub : {"templates", "templates_extra"}) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir / sub))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      CorpusTemplate t{f.stem().string(), read_text(f), {}, {}};
      if (auto it = tokens.find(t.name); it != tokens.end()) std::tie(t.bos, t.eos) = it->second;
      all.push_back(std::move(t));
    }
  }
  return all;
}

std::filesystem::path chat_templates_dir(const std::filesystem::path& shared) {
  return shared / "golden" / "chat_templates";
}

TEST(ToolCallsCorpus, DetectsEveryTemplatesFormat) {
  RKV_REQUIRE_SHARED(shared);
  const auto templates = corpus_templates(chat_templates_dir(shared));
  EXPECT_EQ(templates.size(), expected_formats().size());
  for (const CorpusTemplate& t : templates) {
    const auto it = expected_formats().find(t.name);
    ASSERT_NE(it, expected_formats().end()) << t.name << " is not in the table";
    EXPECT_EQ(tool_call_format_name(rkv::server::detect_tool_call_format(t.source)),
              tool_call_format_name(it->second))
        << t.name;
  }
}

std::string render(const CorpusTemplate& t, const ojson& conversation, std::size_t n_messages,
                   bool add_generation_prompt) {
  using rkv::jinja::Value;
  ojson messages = ojson::array();
  for (std::size_t i = 0; i < n_messages; ++i) messages.push_back(conversation["messages"][i]);
  rkv::jinja::Variables vars;
  rkv::jinja::bind(vars, "messages", rkv::jinja::from_json(messages));
  rkv::jinja::bind(vars, "tools", rkv::jinja::from_json(conversation["tools"]));
  rkv::jinja::bind(vars, "documents", Value::none());
  rkv::jinja::bind(vars, "add_generation_prompt", Value::boolean(add_generation_prompt));
  if (t.bos) rkv::jinja::bind(vars, "bos_token", Value::str(*t.bos));
  if (t.eos) rkv::jinja::bind(vars, "eos_token", Value::str(*t.eos));
  rkv::jinja::RenderOptions options;
  options.now = rkv::jinja::parse_date("2026-01-15");
  return rkv::jinja::Template::compile(t.source).render(vars, options);
}

// The think block a prompt ends with (<think>\n, or <think>\n</think> where thinking is off), or
// empty.
std::string_view think_opening(std::string_view prompt) {
  const std::size_t at = prompt.rfind("<think>");
  if (at == std::string_view::npos) return {};
  std::string_view rest = prompt.substr(at + 7);
  rest = rest.substr(std::min(rest.size(), rest.find_first_not_of(" \t\r\n")));
  if (rest.starts_with("</think>")) rest.remove_prefix(8);
  if (rest.find_first_not_of(" \t\r\n") != std::string_view::npos) return {};
  return prompt.substr(at);
}

// What the model generates for the conversation's assistant message (the text after the prompt
// of the messages before it), or nullopt with `why` when the renderings do not line up.
std::optional<std::string> generated_part(const CorpusTemplate& t, ojson conversation,
                                          std::string& why) {
  std::size_t assistant = 0;
  while (conversation["messages"][assistant]["role"] != "assistant") ++assistant;
  // Tried in turn: the prompt as rendered; without the think block it opens (the history leaves
  // the reasoning out); the conversation without its system message (Mistral Nemo moves it into
  // the last user turn, which is no longer the last once the answer follows).
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt == 2) {
      if (conversation["messages"][0]["role"] != "system") break;
      conversation["messages"].erase(0);
      --assistant;
    }
    std::string prompt = render(t, conversation, assistant, true);
    const std::string full = render(t, conversation, assistant + 1, false);
    if (attempt == 1) prompt.resize(prompt.size() - think_opening(prompt).size());
    if (full.starts_with(prompt)) return full.substr(prompt.size());
  }
  why = "the prompt is not a prefix of the rendered answer";
  return std::nullopt;
}

// The answer as the parser sees it: the reasoning block (split off before) dropped, cut at the
// end of the turn.
std::string answer_of(std::string gen, const CorpusTemplate& t) {
  if (const std::size_t think = gen.find("</think>"); think != std::string::npos)
    gen.erase(0, think + 8);
  // The end-of-turn markers of the families (Laguna closes a turn with </assistant>).
  std::vector<std::string> ends = {"<|im_end|>",    "<|eot_id|>",
                                   "<|eom_id|>",    "<|call|>",
                                   "<|end|>",       "</s>",
                                   "</assistant>",  "<｜end▁of▁sentence｜>",
                                   "<|endoftext|>", "<|end_of_text|>",
                                   "[EOS]"};
  if (t.eos && !t.eos->empty()) ends.push_back(*t.eos);
  std::size_t cut = gen.size();
  for (const std::string& end : ends) cut = std::min(cut, gen.find(end));
  return gen.substr(0, cut);
}

int failures() {
  return testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
}

struct RoundTrip {
  std::set<std::string> passed, skipped;
};

// Renders the conversation's tool call with every template that has a format, and reads it back.
RoundTrip round_trip(const std::filesystem::path& dir, const std::string& conversation_file) {
  const ojson conversation = ojson::parse(read_text(dir / "conversations" / conversation_file));
  const ojson* call = nullptr;
  for (const ojson& m : conversation["messages"])
    if (m.contains("tool_calls")) call = &m["tool_calls"][0]["function"];
  const std::string name = (*call)["name"].get<std::string>();
  const json arguments = (*call)["arguments"].is_string()
                             ? json::parse((*call)["arguments"].get<std::string>())
                             : json::parse((*call)["arguments"].dump());
  const json request_tools = json::parse(conversation["tools"].dump());
  RoundTrip result;
  for (const CorpusTemplate& t : corpus_templates(dir)) {
    const ToolCallFormat format = rkv::server::detect_tool_call_format(t.source);
    if (format == ToolCallFormat::none) continue;
    SCOPED_TRACE(t.name + " (" + std::string(tool_call_format_name(format)) + ")");
    std::string why;
    std::optional<std::string> gen;
    try {
      gen = generated_part(t, conversation, why);
    } catch (const std::exception& e) {
      why = std::string("the template does not render it: ") + e.what();
    }
    if (!gen) {
      std::cout << "  skipped " << t.name << " with " << conversation_file << ": " << why << "\n";
      result.skipped.insert(t.name);
      continue;
    }
    const std::string answer = answer_of(*gen, t);
    if (answer.find(name) == std::string::npos) {
      std::cout << "  skipped " << t.name << " with " << conversation_file
                << ": the template leaves the call out\n";
      result.skipped.insert(t.name);
      continue;
    }
    SCOPED_TRACE("answer: " + answer);
    const int failures_before = failures();
    for (std::size_t piece : {0, 1, 3}) {
      const Result r = parse(format, answer, piece, request_tools);
      EXPECT_EQ(r.content.find_first_not_of(" \t\r\n"), std::string::npos) << r.content;
      EXPECT_EQ(r.calls.size(), 1u);
      if (r.calls.size() != 1) continue;
      EXPECT_EQ(r.calls[0].name, name);
      EXPECT_EQ(json::parse(r.calls[0].arguments), arguments);
    }
    // The forced opening is how the template begins the call.
    const std::string_view trimmed = std::string_view(answer).substr(
        std::min(answer.size(), answer.find_first_not_of(" \t\r\n")));
    for (const std::string& opening : {rkv::server::tool_call_opening(format, t.source),
                                       rkv::server::tool_call_opening(format, t.source, name)}) {
      EXPECT_TRUE(answer.starts_with(opening) || trimmed.starts_with(opening)) << opening;
    }
    if (failures() == failures_before) {
      std::cout << "  read back " << t.name << " (" << tool_call_format_name(format) << ")\n";
      result.passed.insert(t.name);
    }
  }
  return result;
}

TEST(ToolCallsCorpus, TemplatesRenderACallThatReadsBack) {
  RKV_REQUIRE_SHARED(shared);
  const auto dir = chat_templates_dir(shared);
  const RoundTrip c05 = round_trip(dir, "c05_tool_call.json");
  // The families that must be covered, and their templates in the corpus.
  const std::map<std::string, std::vector<std::string>> families = {
      {"Qwen3", {"Qwen-Qwen3-0.6B"}},
      {"Qwen2.5", {"Qwen-Qwen2.5-7B-Instruct"}},
      {"QwQ", {"Qwen-QwQ-32B"}},
      {"Hermes-3", {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use"}},
      {"Qwen3.5", {"Qwen3.5-4B"}},
      {"DeepSeek-V3.1", {"deepseek-ai-DeepSeek-V3.1"}},
      {"DeepSeek-R1-Distill",
       {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"}},
      {"Kimi-K2", {"moonshotai-Kimi-K2", "Kimi-K2-Instruct", "Kimi-K2-Thinking"}},
      {"GLM-4.6", {"GLM-4.6"}},
      {"gpt-oss", {"openai-gpt-oss-120b"}},
      {"Mistral-Nemo", {"mistralai-Mistral-Nemo-Instruct-2407"}},
      {"Llama-3.1/3.2", {"meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct"}},
  };
  for (const auto& [family, names] : families) {
    EXPECT_TRUE(std::any_of(names.begin(), names.end(),
                            [&](const std::string& n) { return c05.passed.count(n) > 0; }))
        << family << " is not covered";
  }
  std::cout << "  " << c05.passed.size() << " templates read back, " << c05.skipped.size()
            << " skipped\n";
  EXPECT_GE(c05.passed.size(), 25u);
}

// The OpenAI wire form (content null, arguments a JSON string) reaches templates that c05's empty
// content does not (DeepSeek-R1-Distill-Llama writes calls only for a null content).
TEST(ToolCallsCorpus, WireFormCallsReadBack) {
  RKV_REQUIRE_SHARED(shared);
  const RoundTrip c10 = round_trip(chat_templates_dir(shared), "c10_openai_wire_tool_call.json");
  EXPECT_EQ(c10.passed.count("deepseek-ai-DeepSeek-R1-Distill-Llama-8B"), 1u);
  EXPECT_GE(c10.passed.size(), 15u);
}

}  // namespace
