// Chat templates. A conversation is rendered with the model's own Jinja chat template
// (tokenizer_config.json's chat_template, its "default" entry when it is a list of named
// templates, chat_template.jinja, or a GGUF file's tokenizer.chat_template) or a Jinja template
// given instead of it (--chat-template-file), by rkv's Jinja interpreter (src/jinja) exactly as
// transformers' apply_chat_template renders it:
//
//   messages               [{"role": ..., "content": ..., more fields}, ...]
//   tools                  the request's tools (OpenAI's function schemas), none without
//   documents              none
//   add_generation_prompt  true for a request (the prompt ends with the assistant's opening)
//   bos_token, eos_token   the tokenizer config's tokens (undefined when it has none)
//   then every key of the request's template kwargs (e.g. {"enable_thinking": false})
//
// The rendered prompt is encoded without the tokenizer's post-processor (add_special = false),
// as transformers tokenizes a rendered chat: the template prints the BOS itself when the model
// wants one. Special tokens the template prints ("<|im_start|>") are split out of the text and
// encoded as their single ids, as in any text.
//
// Built-in renderers remain only as named choices (--chat-template NAME), never picked from a
// model's template text:
//
//   deepseek-r1
//   <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜>{answer}<｜end▁of▁sentence｜>
//                  generation prompt "<｜Assistant｜><think>\n"
//   chatml         <|im_start|>{role}\n{content}<|im_end|>\n ... generation prompt
//                  "<|im_start|>assistant\n"
//   qwen3          ChatML as Qwen3 writes it: the reasoning of earlier assistant turns dropped;
//                  generation prompt "<|im_start|>assistant\n"
//   qwen3-nothink  qwen3 with "<think>\n\n</think>\n\n" after the generation prompt
//                  (enable_thinking=false)
//   llama3 <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> raw
//   the messages' contents joined by "\n", no markup
//
// A built-in prompt is encoded with add_special = true (so "raw" gets the BOS the model expects;
// Tokenizer::encode never doubles a BOS that deepseek-r1 and llama3 write themselves).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rkv {

class Tokenizer;
namespace jinja {
class Template;
}

// kJinja: a Jinja template (the model's or a file); kNone: no usable template (rendering throws
// the reason); the others: the built-in renderers.
enum class ChatTemplateKind {
  kNone,
  kJinja,
  kRaw,
  kChatml,
  kQwen3,
  kQwen3NoThink,
  kDeepseekR1,
  kLlama3
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" (a Jinja template may accept others)
  std::string content;
  // More fields of the message for a Jinja template, after role and content (null or a JSON
  // object): an assistant's "tool_calls" and "reasoning_content", a tool's "tool_call_id" and
  // "name". The built-in renderers ignore them.
  nlohmann::ordered_json fields = nullptr;
};

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kNone;
  // kJinja: the compiled template, and where it came from ("the model's chat template",
  // "chat template file t.jinja"), which its errors name.
  std::shared_ptr<const jinja::Template> jinja;
  std::string origin;
  // kJinja: the bos_token and eos_token variables; unset ones stay undefined.
  std::optional<std::string> bos_token, eos_token;
  // kNone: why there is no template (what rendering throws).
  std::string error;
  // kJinja: the template's source (the server reads which tool-call syntax it teaches).
  std::string source;
  // kJinja: the date strftime_now() formats, "YYYY-MM-DD" at 12:00:00 (tests that compare with
  // golden renderings); empty: the current local time.
  std::string fixed_date;

  // Whether the prompt is encoded with the tokenizer's post-processor (the built-in families)
  // or without it (a Jinja template, which prints the BOS itself).
  bool add_special_tokens() const { return kind != ChatTemplateKind::kJinja; }
};

// The built-in families' names: "deepseek-r1", "chatml", "qwen3", "qwen3-nothink", "llama3",
// "raw".
std::string_view chat_template_name(ChatTemplateKind kind);
const std::vector<std::string>& chat_template_names();
// A built-in family by name; an unknown name throws rkv::Error listing the valid ones.
ChatTemplateKind parse_chat_template_name(std::string_view name);

// A built-in family's template.
ChatTemplate make_chat_template(ChatTemplateKind kind);
// Compiles a Jinja template; a syntax error throws rkv::Error naming `origin` and the error.
ChatTemplate make_jinja_chat_template(std::string_view text, std::string origin,
                                      std::optional<std::string> bos_token = std::nullopt,
                                      std::optional<std::string> eos_token = std::nullopt);

// The template a model's requests are rendered with:
//   `name` a built-in family's name: that family (template_text must be unset);
//   `name` "" or "auto": template_text when given (origin says where from: a file name), else the
//   tokenizer's own chat template. A model without one (or without a tokenizer), or whose
//   template does not compile, gives kind kNone: the engine loads, and rendering a chat throws
//   a message saying what to give instead.
// bos_token and eos_token come from the tokenizer (Tokenizer::bos_token(), eos_token()).
// Throws rkv::Error for an unknown name, a family name together with a template text, or a
// template_text that does not compile.
ChatTemplate resolve_chat_template(const Tokenizer* tokenizer, std::string_view name = {},
                                   const std::optional<std::string>& template_text = std::nullopt,
                                   std::string_view origin = {});
ChatTemplate resolve_chat_template(const Tokenizer& tokenizer, std::string_view name = {});

// Renders a conversation. add_generation_prompt appends the opening of the assistant's turn.
// `kwargs` (null or a JSON object): more variables, bound last as apply_chat_template's
// **kwargs ("messages" and "add_generation_prompt" may not be among them); only a Jinja template
// takes them, and `tools` (null or a JSON array of function schemas), bound as `tools`. Throws
// rkv::Error: kNone's reason; a Jinja template's failure ("the model's chat template:
// TemplateError: ...", its raise_exception text included); for a built-in family, a role other than
// system/user/assistant.
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const nlohmann::ordered_json& kwargs = nullptr,
                        const nlohmann::ordered_json& tools = nullptr);
std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// How the template closes a thought before the answer: what it writes between an assistant
// turn's reasoning_content and its content, found by rendering such a turn ("\n</think>\n\n"
// for Qwen3 and Qwen3.5; "</think>\n" for GLM-4.6). "\n</think>\n\n" (DeepSeek-R1's own
// close) when the template renders no reasoning_content (the DeepSeek-R1 templates drop it), when
// what it writes there holds no </think>, or for a built-in family.
std::string thought_close(const ChatTemplate& chat_template);

// Whether a rendered prompt leaves a reasoning block open: it ends with "<think>", possibly
// followed by whitespace ("<think>\n": DeepSeek-R1, QwQ). Generation then starts inside the
// reasoning (the server's reasoning_content split, the engine's reasoning token count).
bool prompt_opens_think(std::string_view prompt);

}  // namespace rkv
