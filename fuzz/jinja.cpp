// Fuzzes the Jinja interpreter (src/jinja): compiles arbitrary template text and renders it with a
// fixed conversation (system, user, an assistant turn with reasoning and a tool call, a tool reply,
// two tool schemas), with and without a generation prompt. Input: the template text, then
// optionally "\n--8<--\n" and a JSON object of extra variables (kwargs). Templates are untrusted
// input: every failure must be a rkv::jinja::Error (an rkv::Error), and the resource bounds must
// stop every loop, recursion and allocation well within libFuzzer's limits.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_common.h"
#include "jinja/template.h"

namespace {

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json conv = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Paris? {{ not a tag }} é 漢字 🙂"},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "name": "get_weather", "tool_call_id": "c1", "content": "18C"},
      {"role": "assistant", "content": "<think>ok</think>It is 18C."},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}
    ],
    "tools": [
      {"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
      {"type": "function", "function": {"name": "noop", "parameters": {}}}
    ],
    "documents": null,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return conv;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = rkv_fuzz::split_parts(rkv_fuzz::as_text(data, size), 2);
  rkv::jinja::Template tmpl;
  try {
    tmpl = rkv::jinja::Template::compile(parts[0]);
  } catch (const rkv::Error&) {
    return 0;
  }
  nlohmann::ordered_json vars = conversation();
  if (parts.size() > 1) {
    const auto extra = nlohmann::ordered_json::parse(parts[1], nullptr, false);
    if (extra.is_object())
      for (const auto& [k, v] : extra.items()) vars[k] = v;
  }
  rkv::jinja::RenderOptions options;
  options.now = rkv::jinja::parse_date("2026-01-15");
  // Tighter than the defaults so that one input stays well under libFuzzer's -timeout and
  // -rss_limit_mb even with the sanitizers.
  options.max_output_bytes = 1u << 20;
  options.max_work = 2'000'000;
  options.max_call_depth = 64;
  for (bool generation_prompt : {false, true}) {
    vars["add_generation_prompt"] = generation_prompt;
    try {
      (void)tmpl.render(vars, options);
    } catch (const rkv::Error&) {
    }
  }
  return 0;
}
