// Chat templates without Jinja: built-in renderers for the supported model families, chosen by
// looking for each family's markers in the model's chat_template text, or by name.
//
//   deepseek-r1
//   <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜>{answer}<｜end▁of▁sentence｜>
//                  generation prompt "<｜Assistant｜><think>\n"
//   chatml         <|im_start|>{role}\n{content}<|im_end|>\n ... generation prompt
//                  "<|im_start|>assistant\n" (Qwen2.5; its default system message is used when
//                  the model's template text contains one)
//   qwen3          ChatML as Qwen3 writes it: no default system, the reasoning of earlier
//                  assistant turns dropped; generation prompt "<|im_start|>assistant\n"
//   qwen3-nothink  qwen3 with "<think>\n\n</think>\n\n" after the generation prompt
//                  (enable_thinking=false)
//   llama3 <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> raw
//   the messages' contents joined by "\n", no markup
//
// BOS: deepseek-r1 and llama3 write the BOS text themselves. Tokenizer::encode never prepends
// a second BOS to a text that already starts with it, so a rendered prompt can be encoded with
// add_special=true (which also gives "raw" prompts the BOS that the model expects).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rkv {

class Tokenizer;

enum class ChatTemplateKind { kRaw, kChatml, kQwen3, kQwen3NoThink, kDeepseekR1, kLlama3 };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// A family plus the details taken from the model's own template text.
struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kRaw;
  // chatml/qwen3: the system turn written when the conversation has no system message.
  std::string default_system;
  // The generation prompt opens a reasoning block: "<think>\n" (DeepSeek-R1, QwQ).
  bool open_think = false;
};

// "deepseek-r1", "chatml", "qwen3", "qwen3-nothink", "llama3", "raw".
std::string_view chat_template_name(ChatTemplateKind kind);
// The accepted names, in the order above.
const std::vector<std::string>& chat_template_names();
// An unknown name throws rkv::Error listing the valid ones.
ChatTemplateKind parse_chat_template_name(std::string_view name);

// The family of a Jinja chat template, by its markers; kRaw when the text is empty or
// recognized as none of them.
ChatTemplateKind detect_chat_template(std::string_view template_text);
ChatTemplateKind detect_chat_template(const Tokenizer& tokenizer);

// The template for a family, with the details (default system message, "<think>\n" opening)
// read from the model's template text when given.
ChatTemplate make_chat_template(ChatTemplateKind kind, std::string_view template_text = {});
// The template for a tokenizer: `name` picks the family ("" or "auto": detect it from the
// tokenizer's chat_template); the details come from the tokenizer's template text.
ChatTemplate resolve_chat_template(const Tokenizer& tokenizer, std::string_view name = {});

// Renders a conversation. add_generation_prompt appends the opening of the assistant's turn.
// A role other than system/user/assistant throws rkv::Error.
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);
std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

}  // namespace rkv
