// Chat templates: each family rendered for a short conversation against hand-written strings
// (from the families' official template texts), detection from template text, names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "rkv/chat_template.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are helpful."},
    {"user", "Hi"},
    {"assistant", "<think>\nhmm\n</think>\n\nHello!"},
    {"user", "2+2?"},
};

TEST(ChatTemplate, DeepseekR1) {
  EXPECT_EQ(render_chat(ChatTemplateKind::kDeepseekR1, kConversation, true),
            "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>\n\nHello!"
            "<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>\n");
  EXPECT_EQ(render_chat(ChatTemplateKind::kDeepseekR1, {{"user", "Hi"}}, false),
            "<｜begin▁of▁sentence｜><｜User｜>Hi");
}

TEST(ChatTemplate, Chatml) {
  EXPECT_EQ(render_chat(ChatTemplateKind::kChatml, kConversation, true),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nHello!<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatmlDefaultSystemFromQwen25Template) {
  const std::string qwen25 =
      "{%- if messages[0]['role'] == 'system' %}\n"
      "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
      "    {%- else %}\n"
      "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
      "helpful assistant.<|im_end|>\\n' }}\n"
      "    {%- endif %}\n"
      "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";
  EXPECT_EQ(detect_chat_template(qwen25), ChatTemplateKind::kChatml);
  const ChatTemplate t = make_chat_template(ChatTemplateKind::kChatml, qwen25);
  EXPECT_EQ(t.default_system,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_FALSE(t.open_think);
  EXPECT_EQ(render_chat(t, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A system message of the conversation replaces the default.
  EXPECT_EQ(render_chat(t, {{"system", "S"}, {"user", "Hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3DropsEarlierReasoning) {
  const std::string expected_history =
      "<|im_start|>system\nYou are helpful.<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>user\n2+2?<|im_end|>\n";
  EXPECT_EQ(render_chat(ChatTemplateKind::kQwen3, kConversation, true),
            expected_history + "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatTemplateKind::kQwen3NoThink, kConversation, true),
            expected_history + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, Qwen3KeepsReasoningAfterTheLastQuery) {
  EXPECT_EQ(render_chat(ChatTemplateKind::kQwen3,
                        {{"user", "Hi"}, {"assistant", "<think>\nr\n</think>\n\nA"}}, false),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n");
  // The last assistant turn always gets a (possibly empty) think block.
  EXPECT_EQ(render_chat(ChatTemplateKind::kQwen3, {{"user", "Hi"}, {"assistant", "A"}}, false),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render_chat(ChatTemplateKind::kLlama3, kConversation, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful."
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n<think>\nhmm\n</think>\n\nHello!"
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // Contents are trimmed, as the template's "| trim" does.
  EXPECT_EQ(render_chat(ChatTemplateKind::kLlama3, {{"user", "  Hi \n"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, Raw) {
  EXPECT_EQ(render_chat(ChatTemplateKind::kRaw, kConversation, true),
            "You are helpful.\nHi\n<think>\nhmm\n</think>\n\nHello!\n2+2?");
  EXPECT_EQ(render_chat(ChatTemplateKind::kRaw, {{"user", "1+1="}}, true), "1+1=");
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
  EXPECT_THROW(render_chat(ChatTemplateKind::kChatml, {{"tool", "x"}}, true), Error);
}

TEST(ChatTemplate, DetectionFromTemplateText) {
  EXPECT_EQ(detect_chat_template(""), ChatTemplateKind::kRaw);
  EXPECT_EQ(detect_chat_template("{{ messages }}"), ChatTemplateKind::kRaw);
  EXPECT_EQ(detect_chat_template("{{bos_token}}{{'<｜User｜>' + message['content']}}"
                                 "{{'<｜Assistant｜><think>\\n'}}"),
            ChatTemplateKind::kDeepseekR1);
  EXPECT_EQ(detect_chat_template("{{ '<|start_header_id|>' + message['role'] }}"),
            ChatTemplateKind::kLlama3);
  EXPECT_EQ(detect_chat_template("{{- '<|im_start|>' + message.role }}"),
            ChatTemplateKind::kChatml);
  EXPECT_EQ(detect_chat_template("{{- '<|im_start|>' }}{%- if enable_thinking is defined %}"),
            ChatTemplateKind::kQwen3);
  // QwQ: ChatML with reasoning; its generation prompt opens the think block.
  const std::string qwq =
      "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}"
      "{{- '<|im_start|>assistant\\n<think>\\n' }}";
  EXPECT_EQ(detect_chat_template(qwq), ChatTemplateKind::kQwen3);
  const ChatTemplate t = make_chat_template(detect_chat_template(qwq), qwq);
  EXPECT_TRUE(t.open_think);
  EXPECT_EQ(render_chat(t, {{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
}

TEST(ChatTemplate, Names) {
  for (const std::string& name : chat_template_names()) {
    EXPECT_EQ(chat_template_name(parse_chat_template_name(name)), name);
  }
  EXPECT_EQ(parse_chat_template_name("qwen3-nothink"), ChatTemplateKind::kQwen3NoThink);
  try {
    parse_chat_template_name("jinja");
    FAIL() << "expected rkv::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("jinja"), std::string::npos);
    for (const std::string& name : chat_template_names()) {
      EXPECT_NE(message.find(name), std::string::npos) << message;
    }
  }
}

TEST(ChatTemplate, Qwen3TokenizerTemplateIsDetectedAndEncodes) {
  RKV_REQUIRE_SHARED(shared);
  const Tokenizer tok = Tokenizer::load(shared / "golden" / "tokenizer" / "qwen3_0.6b");
  EXPECT_EQ(detect_chat_template(tok), ChatTemplateKind::kQwen3);
  const ChatTemplate t = resolve_chat_template(tok);
  EXPECT_EQ(t.kind, ChatTemplateKind::kQwen3);
  EXPECT_TRUE(t.default_system.empty());
  EXPECT_FALSE(t.open_think);
  EXPECT_EQ(resolve_chat_template(tok, "qwen3-nothink").kind, ChatTemplateKind::kQwen3NoThink);
  EXPECT_THROW(resolve_chat_template(tok, "nope"), Error);
  const std::string prompt = render_chat(t, {{"user", "Hello world"}}, true);
  // <|im_start|> user \n Hello world <|im_end|> \n <|im_start|> assistant \n
  EXPECT_EQ(tok.encode(prompt),
            (std::vector<int32_t>{151644, 872, 198, 9707, 1879, 151645, 198, 151644, 77091, 198}));
}

}  // namespace
}  // namespace rkv
