// Chat templates: a Jinja template (the model's own or a file's) rendered by src/jinja as
// transformers' apply_chat_template renders it, and the built-in renderers (DeepSeek-R1,
// ChatML, Qwen3, Llama-3, raw) that remain as named choices. The built-in output follows each
// family's official template text exactly for system/user/assistant conversations.
#include "rkv/chat_template.h"

#include "core/error.h"
#include "jinja/template.h"
#include "rkv/tokenizer.h"

namespace rkv {

namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>\n";

std::string_view strip(std::string_view s, std::string_view chars, bool left, bool right) {
  while (left && !s.empty() && chars.find(s.front()) != std::string_view::npos) s.remove_prefix(1);
  while (right && !s.empty() && chars.find(s.back()) != std::string_view::npos) s.remove_suffix(1);
  return s;
}

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

void check_roles(const std::vector<ChatMessage>& messages) {
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      throw Error("chat message role \"" + m.role +
                  "\" is not supported (use system, user or assistant)");
    }
  }
}

std::string render_chatml(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  const bool qwen3 = kind == ChatTemplateKind::kQwen3 || kind == ChatTemplateKind::kQwen3NoThink;
  std::string out;
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
    if (kind == ChatTemplateKind::kQwen3NoThink) out.append("<think>\n\n</think>\n\n");
  }
  return out;
}

std::string render_deepseek_r1(const std::vector<ChatMessage>& messages,
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
  if (add_generation_prompt) out.append("<｜Assistant｜><think>\n");
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

std::string jinja_failure(const ChatTemplate& t, const jinja::Error& e) {
  return t.origin + ": " + jinja::error_kind_name(e.kind()) + ": " + e.what();
}

std::string render_jinja(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                         bool add_generation_prompt, const nlohmann::ordered_json& kwargs,
                         const nlohmann::ordered_json& tools) {
  if (!kwargs.is_null() && !kwargs.is_object())
    throw Error("the chat template kwargs must be a JSON object");
  if (!tools.is_null() && !tools.is_array()) throw Error("the tools must be a JSON array");
  // The variables apply_chat_template binds: render(messages=..., tools=..., documents=...,
  // add_generation_prompt=..., **{**special_tokens_map, **kwargs}).
  jinja::Variables vars;
  auto bind = [&](const std::string& name, jinja::Value v) {
    jinja::bind(vars, name, std::move(v));
  };
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json message = {{"role", m.role}, {"content", m.content}};
    if (m.fields.is_object())
      for (const auto& [key, value] : m.fields.items())
        if (key != "role" && key != "content") message[key] = value;
    list.push_back(std::move(message));
  }
  try {
    bind("messages", jinja::from_json(list));
    bind("tools", tools.is_null() ? jinja::Value::none() : jinja::from_json(tools));
    bind("documents", jinja::Value::none());
    bind("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
    if (t.bos_token) bind("bos_token", jinja::Value::str(*t.bos_token));
    if (t.eos_token) bind("eos_token", jinja::Value::str(*t.eos_token));
    if (kwargs.is_object()) {
      for (const auto& [key, value] : kwargs.items()) {
        if (key == "messages" || key == "add_generation_prompt")
          throw Error("the chat template kwargs may not set \"" + key + "\"");
        bind(key, jinja::from_json(value));
      }
    }
    jinja::RenderOptions options;
    if (!t.fixed_date.empty()) {
      options.now = jinja::parse_date(t.fixed_date);
      if (!options.now)
        throw Error("the chat template's fixed date is not YYYY-MM-DD: " + t.fixed_date);
    }
    return t.jinja->render(vars, options);
  } catch (const jinja::Error& e) {
    throw Error(jinja_failure(t, e));
  }
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
    case ChatTemplateKind::kJinja:
      return "jinja";
    case ChatTemplateKind::kNone:
      return "none";
  }
  return "none";
}

ChatTemplateKind parse_chat_template_name(std::string_view name) {
  for (auto kind :
       {ChatTemplateKind::kDeepseekR1, ChatTemplateKind::kChatml, ChatTemplateKind::kQwen3,
        ChatTemplateKind::kQwen3NoThink, ChatTemplateKind::kLlama3, ChatTemplateKind::kRaw}) {
    if (chat_template_name(kind) == name) return kind;
  }
  std::string valid;
  for (const std::string& n : chat_template_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw Error("unknown chat template \"" + std::string(name) +
              "\" (valid: auto, the model's own, or a built-in: " + valid + ")");
}

ChatTemplate make_chat_template(ChatTemplateKind kind) {
  if (kind == ChatTemplateKind::kJinja || kind == ChatTemplateKind::kNone)
    throw Error("make_chat_template: not a built-in chat template");
  ChatTemplate t;
  t.kind = kind;
  t.origin = "the built-in chat template " + std::string(chat_template_name(kind));
  return t;
}

ChatTemplate make_jinja_chat_template(std::string_view text, std::string origin,
                                      std::optional<std::string> bos_token,
                                      std::optional<std::string> eos_token) {
  ChatTemplate t;
  t.kind = ChatTemplateKind::kJinja;
  t.origin = std::move(origin);
  try {
    t.jinja = std::make_shared<const jinja::Template>(jinja::Template::compile(text));
  } catch (const jinja::Error& e) {
    throw Error(jinja_failure(t, e));
  }
  t.bos_token = std::move(bos_token);
  t.eos_token = std::move(eos_token);
  t.source = std::string(text);
  return t;
}

ChatTemplate resolve_chat_template(const Tokenizer* tokenizer, std::string_view name,
                                   const std::optional<std::string>& template_text,
                                   std::string_view origin) {
  std::optional<std::string> bos, eos;
  if (tokenizer != nullptr) {
    bos = tokenizer->bos_token();
    eos = tokenizer->eos_token();
  }
  if (!name.empty() && name != "auto") {
    const ChatTemplateKind kind = parse_chat_template_name(name);
    if (template_text)
      throw Error("both a chat template file and the built-in chat template \"" +
                  std::string(name) + "\" were given: give one");
    return make_chat_template(kind);
  }
  if (template_text) {
    return make_jinja_chat_template(
        *template_text, origin.empty() ? "the given chat template" : std::string(origin), bos, eos);
  }
  const std::string hint =
      ": give a Jinja template with --chat-template-file FILE, or name a built-in one: "
      "--chat-template raw joins the messages' contents without markup (the others: "
      "deepseek-r1, chatml, qwen3, qwen3-nothink, llama3)";
  ChatTemplate none;
  if (tokenizer == nullptr) {
    none.error = "chat messages need a chat template, and there is no tokenizer";
    return none;
  }
  const std::string& text = tokenizer->chat_template_text();
  if (text.empty()) {
    none.error =
        "the model has no chat template (no chat_template in tokenizer_config.json, no "
        "chat_template.jinja, no tokenizer.chat_template in a GGUF file)" +
        hint;
    return none;
  }
  try {
    return make_jinja_chat_template(text, "the model's chat template", bos, eos);
  } catch (const Error& e) {
    none.error = std::string(e.what()) + hint;
    return none;
  }
}

ChatTemplate resolve_chat_template(const Tokenizer& tokenizer, std::string_view name) {
  return resolve_chat_template(&tokenizer, name);
}

std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const nlohmann::ordered_json& kwargs,
                        const nlohmann::ordered_json& tools) {
  switch (t.kind) {
    case ChatTemplateKind::kNone:
      throw Error(t.error.empty() ? std::string("there is no chat template") : t.error);
    case ChatTemplateKind::kJinja:
      return render_jinja(t, messages, add_generation_prompt, kwargs, tools);
    default:
      break;
  }
  if (!kwargs.is_null() && !kwargs.empty())
    throw Error("chat template kwargs need a Jinja chat template; " + t.origin + " takes none");
  if (!tools.is_null() && !tools.empty())
    throw Error("tools need a Jinja chat template that renders them; " + t.origin +
                " renders none");
  check_roles(messages);
  switch (t.kind) {
    case ChatTemplateKind::kDeepseekR1:
      return render_deepseek_r1(messages, add_generation_prompt);
    case ChatTemplateKind::kChatml:
    case ChatTemplateKind::kQwen3:
    case ChatTemplateKind::kQwen3NoThink:
      return render_chatml(t.kind, messages, add_generation_prompt);
    case ChatTemplateKind::kLlama3:
      return render_llama3(messages, add_generation_prompt);
    default:
      return render_raw(messages);
  }
}

std::string thought_close(const ChatTemplate& t) {
  static const std::string kDefault = "\n</think>\n\n";
  if (t.kind != ChatTemplateKind::kJinja) return kDefault;
  // Marks no template writes itself.
  const std::string thought = "rkv-thought-mark-5b1f", answer = "rkv-answer-mark-5b1f";
  ChatMessage turn{"assistant", answer};
  turn.fields = {{"reasoning_content", thought}};
  std::string text;
  try {
    text = render_chat(t, {{"user", "Hi"}, turn}, false);
  } catch (const Error&) {
    return kDefault;
  }
  const std::size_t from = text.find(thought);
  const std::size_t to = from == std::string::npos ? from : text.find(answer, from);
  if (to == std::string::npos) return kDefault;
  std::string close = text.substr(from + thought.size(), to - from - thought.size());
  return close.find("</think>") == std::string::npos ? kDefault : close;
}

std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  return render_chat(make_chat_template(kind), messages, add_generation_prompt);
}

bool prompt_opens_think(std::string_view prompt) {
  return strip(prompt, kWhitespace, false, true).ends_with("<think>");
}

}  // namespace rkv
