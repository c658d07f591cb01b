// The OpenAI-compatible request and response bodies (chat completions and completions): parsing
// a request body into engine requests, with an OpenAI error object for anything invalid, and
// building the JSON of responses and streamed chunks. No I/O here: server.cpp does the HTTP.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "rkv/engine.h"
#include "rkv/tokenizer.h"

namespace rkv::server {

// An invalid request: answered with `status` and the OpenAI error object.
struct ApiError : std::runtime_error {
  ApiError(int status_, std::string message, std::string param_ = {},
           std::string type_ = "invalid_request_error", std::string code_ = {})
      : std::runtime_error(std::move(message)),
        status(status_),
        param(std::move(param_)),
        type(std::move(type_)),
        code(std::move(code_)) {}
  int status;
  std::string param, type, code;
};

// Parses a request body as a JSON object. Every string in it must be valid UTF-8: invalid bytes
// get a 400 naming the field that holds them ("messages[0].content", "kv.method", a key's path).
nlohmann::json parse_request_json(const std::string& body);

// JSON text of a response: never throws on text that is not valid UTF-8 (U+FFFD instead), the
// last guard behind the validation of what requests send.
std::string dump_json(const nlohmann::json& j);

// {"error": {"message", "type", "param", "code"}}
nlohmann::json error_body(const std::string& message, const std::string& type,
                          const std::string& param = {}, const std::string& code = {});

// The server's defaults for what a request leaves out (the `rkv serve` generate flags).
struct RequestDefaults {
  int max_tokens = 2048;  // clipped to what fits the context when the request gives none
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings of a request that gives none
  bool seeded = false;  // sampling.seed is the server's --seed; else each request draws one
  CompressionParams compression = CompressionParams::none();
  SteeringParams steering;
  bool reasoning_inline = false;  // --reasoning-format none
  int thinking_budget = -1;       // --thinking-budget (-1: none)
  std::string thinking_budget_message;
  // Variables for the chat template that every request gets (--chat-template-kwargs), under the
  // request's own chat_template_kwargs (null or a JSON object).
  nlohmann::ordered_json chat_template_kwargs;
  int max_n = 16;
};

// tool_choice: how a request lets the model use its tools.
enum class ToolChoice {
  none,       // no tools, or "none": the template still renders them; no call is parsed
  automatic,  // "auto" (the default with tools): calls are parsed when the model writes them
  required,   // "required": the engine opens a call where the answer begins
  function,   // {"type": "function", "function": {"name": ...}}: opens a call of that function
};

struct ParsedRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool reasoning_inline = false;
  int n = 1;
  std::string model;
  Request request;  // the prompt, sampling, stops and compression (seed of choice 0)
  bool max_tokens_given = false;
  // Tools: request.tools holds the validated array (key order as sent) for the template.
  ToolChoice tool_choice = ToolChoice::none;
  std::string tool_choice_name;     // ToolChoice::function: the function
  bool parallel_tool_calls = true;  // false: at most one call per choice is returned
};

// Parses a /v1/chat/completions (chat = true) or /v1/completions body. Throws ApiError (400).
ParsedRequest parse_completion_request(const std::string& body, bool chat,
                                       const RequestDefaults& defaults, std::uint64_t random_seed);

// "kv": {"method": "rkv", "budget": 512, ...}: every --kv-* setting by its table name.
CompressionParams parse_kv_object(const nlohmann::json& kv, const CompressionParams& defaults);

// "kv": {"dtype": "bf16"}: the KV cache dtype a request asks for (none: the server's default).
std::optional<KvDtype> parse_kv_dtype_field(const nlohmann::json& kv);

// What the response reports of one choice's KV cache.
nlohmann::json kv_report(const std::vector<Completion>& choices);
// A choice's `logprobs` object (null when the request asked for none): chat's {"content":
// [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}, or completions' {"tokens",
// "token_logprobs", "top_logprobs", "text_offset"}. Token texts are the tokenizer's, decoded on
// their own (U+FFFD for a token that is part of a character; `bytes` has its raw bytes).
// `text_offset`: where the first token's text starts in the choice's text (completions).
nlohmann::json logprobs_body(std::span<const TokenLogprob> logprobs, const Tokenizer& tokenizer,
                             bool chat, std::size_t text_offset = 0);

// usage: prompt, completion and reasoning tokens over the choices (the prompt counted once).
nlohmann::json usage_body(const std::vector<Completion>& choices);

}  // namespace rkv::server
