// Built-in chat template renderers (DeepSeek-R1, ChatML/Qwen2.5, Qwen3, Llama-3, raw) and the
// detection of the family from a Jinja template's markers. The output follows each family's
// official template text exactly for system/user/assistant conversations.
#include "rkv/chat_template.h"

#include "core/error.h"
#include "rkv/tokenizer.h"

namespace rkv {

namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>\n";

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// Jinja string literals write a newline as "\n"; templates read from files may hold either form.
bool contains_either(std::string_view text, const std::string& with_newlines) {
  std::string escaped;
  for (char c : with_newlines) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
  return contains(text, with_newlines) || contains(text, escaped);
}

std::string_view strip(std::string_view s, std::string_view chars, bool left, bool right) {
  while (left && !s.empty() && chars.find(s.front()) != std::string_view::npos) s.remove_prefix(1);
  while (right && !s.empty() && chars.find(s.back()) != std::string_view::npos) s.remove_suffix(1);
  return s;
}

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

// A system message that the template writes as one literal when the conversation has none,
// e.g. Qwen2.5's "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.".
std::string literal_default_system(std::string_view text) {
  for (std::string_view opening : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
    for (std::size_t pos = text.find(opening); pos != std::string_view::npos;
         pos = text.find(opening, pos + 1)) {
      const std::size_t begin = pos + opening.size();
      const std::size_t end = text.find("<|im_end|>", begin);
      if (end == std::string_view::npos) break;
      const std::string_view literal = text.substr(begin, end - begin);
      if (literal.empty() || literal.find_first_of("'\"{}+") != std::string_view::npos) continue;
      std::string out;
      for (std::size_t i = 0; i < literal.size(); ++i) {
        if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'n') {
          out += '\n';
          ++i;
        } else {
          out += literal[i];
        }
      }
      return out;
    }
  }
  return {};
}

void check_roles(const std::vector<ChatMessage>& messages) {
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      throw Error("chat message role \"" + m.role +
                  "\" is not supported (use system, user or assistant)");
    }
  }
}

std::string render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  const bool qwen3 =
      t.kind == ChatTemplateKind::kQwen3 || t.kind == ChatTemplateKind::kQwen3NoThink;
  std::string out;
  const bool first_is_system = !messages.empty() && messages.front().role == "system";
  if (!first_is_system && !t.default_system.empty()) {
    out.append(kImStart).append("system\n").append(t.default_system).append(kImEnd);
  }
  // Qwen3 keeps the reasoning only in assistant turns after the last user message.
  std::size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (std::size_t i = messages.size(); i-- > 0;) {
    const std::string_view c = messages[i].content;
    const bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (messages[i].role == "user" && !tool_response) {
      last_query = i;
      break;
    }
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "assistant" || !qwen3) {
      out.append(kImStart).append(m.role).append("\n").append(m.content).append(kImEnd);
      continue;
    }
    std::string_view content = m.content;
    std::string_view reasoning;
    if (const std::size_t close = content.find("</think>"); close != std::string_view::npos) {
      reasoning = strip(content.substr(0, close), "\n", false, true);
      if (const std::size_t open = reasoning.rfind("<think>"); open != std::string_view::npos) {
        reasoning = reasoning.substr(open + 7);
      }
      reasoning = strip(reasoning, "\n", true, false);
      content = strip(content.substr(content.rfind("</think>") + 8), "\n", true, false);
    }
    out.append(kImStart).append("assistant\n");
    if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
      out.append("<think>\n").append(strip(reasoning, "\n", true, true)).append("\n</think>\n\n");
      content = strip(content, "\n", true, false);
    }
    out.append(content).append(kImEnd);
  }
  if (add_generation_prompt) {
    out.append(kImStart).append("assistant\n");
    if (t.kind == ChatTemplateKind::kQwen3NoThink) {
      out.append("<think>\n\n</think>\n\n");
    } else if (t.open_think) {
      out.append("<think>\n");
    }
  }
  return out;
}

std::string render_deepseek_r1(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt) {
  std::string system;  // the template keeps the last system message, written after the BOS
  for (const ChatMessage& m : messages) {
    if (m.role == "system") system = m.content;
  }
  std::string out = "<｜begin▁of▁sentence｜>" + system;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out.append("<｜User｜>").append(m.content);
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      if (const std::size_t close = content.rfind("</think>"); close != std::string_view::npos) {
        content = content.substr(close + 8);
      }
      out.append("<｜Assistant｜>").append(content).append("<｜end▁of▁sentence｜>");
    }
  }
  if (add_generation_prompt) {
    out.append("<｜Assistant｜>");
    if (t.open_think) out.append("<think>\n");
  }
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out = "<|begin_of_text|>";
  for (const ChatMessage& m : messages) {
    out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
    out.append(strip(m.content, kWhitespace, true, true)).append("<|eot_id|>");
  }
  if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

std::string render_raw(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out += '\n';
    out += messages[i].content;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = {"deepseek-r1",   "chatml", "qwen3",
                                                 "qwen3-nothink", "llama3", "raw"};
  return names;
}

std::string_view chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kDeepseekR1:
      return "deepseek-r1";
    case ChatTemplateKind::kChatml:
      return "chatml";
    case ChatTemplateKind::kQwen3:
      return "qwen3";
    case ChatTemplateKind::kQwen3NoThink:
      return "qwen3-nothink";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kRaw:
      return "raw";
  }
  return "raw";
}

ChatTemplateKind parse_chat_template_name(std::string_view name) {
  for (auto kind :
       {ChatTemplateKind::kDeepseekR1, ChatTemplateKind::kChatml, ChatTemplateKind::kQwen3,
        ChatTemplateKind::kQwen3NoThink, ChatTemplateKind::kLlama3, ChatTemplateKind::kRaw}) {
    if (chat_template_name(kind) == name) return kind;
  }
  std::string valid;
  for (const std::string& n : chat_template_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw Error("unknown chat template \"" + std::string(name) + "\" (valid: " + valid + ")");
}

ChatTemplateKind detect_chat_template(std::string_view text) {
  if (contains(text, "<｜Assistant｜>") || contains(text, "<｜User｜>")) {
    return ChatTemplateKind::kDeepseekR1;
  }
  if (contains(text, "<|start_header_id|>")) return ChatTemplateKind::kLlama3;
  if (contains(text, "<|im_start|>")) {
    if (contains(text, "enable_thinking") || contains(text, "<think>")) {
      return ChatTemplateKind::kQwen3;
    }
    return ChatTemplateKind::kChatml;
  }
  return ChatTemplateKind::kRaw;
}

ChatTemplateKind detect_chat_template(const Tokenizer& tokenizer) {
  return detect_chat_template(tokenizer.chat_template_text());
}

ChatTemplate make_chat_template(ChatTemplateKind kind, std::string_view text) {
  ChatTemplate t;
  t.kind = kind;
  switch (kind) {
    case ChatTemplateKind::kDeepseekR1:
      t.open_think = true;
      break;
    case ChatTemplateKind::kChatml:
    case ChatTemplateKind::kQwen3:
    case ChatTemplateKind::kQwen3NoThink:
      t.default_system = literal_default_system(text);
      // QwQ opens the reasoning block in its generation prompt.
      t.open_think = contains_either(text, "<|im_start|>assistant\n<think>\n");
      break;
    default:
      break;
  }
  return t;
}

ChatTemplate resolve_chat_template(const Tokenizer& tokenizer, std::string_view name) {
  const std::string& text = tokenizer.chat_template_text();
  const ChatTemplateKind kind =
      name.empty() || name == "auto" ? detect_chat_template(text) : parse_chat_template_name(name);
  return make_chat_template(kind, text);
}

std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  check_roles(messages);
  switch (t.kind) {
    case ChatTemplateKind::kDeepseekR1:
      return render_deepseek_r1(t, messages, add_generation_prompt);
    case ChatTemplateKind::kChatml:
    case ChatTemplateKind::kQwen3:
    case ChatTemplateKind::kQwen3NoThink:
      return render_chatml(t, messages, add_generation_prompt);
    case ChatTemplateKind::kLlama3:
      return render_llama3(messages, add_generation_prompt);
    case ChatTemplateKind::kRaw:
      return render_raw(messages);
  }
  return render_raw(messages);
}

std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  return render_chat(make_chat_template(kind), messages, add_generation_prompt);
}

}  // namespace rkv
