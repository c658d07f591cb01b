// Chat templates: each built-in family rendered for a short conversation against hand-written
// strings (from the families' official template texts), names; Jinja templates (the model's own,
// or given) with the variables apply_chat_template binds, their errors, the choice of template,
// and the shipped tiny models' own templates against the prompts rkv rendered for them before
// they had one.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/record_log.h"
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

// The prompts rkv rendered for the shipped tiny models before they had a chat template of their
// own (the "raw" family then picked for them: the contents joined by "\n"), and their ids,
// recorded from that code: their own templates must give exactly these.
struct TinyCase {
  std::vector<ChatMessage> messages;
  std::string prompt;
  std::vector<int32_t> ids;
};

const std::vector<TinyCase>& tiny_cases() {
  static const std::vector<TinyCase> cases = {
      {{{"user", "2:a\n6:b\nans=a ans+b\n"}},
       "2:a\n6:b\nans=a ans+b\n",
       {359, 10, 472, 10, 1285, 3237, 10}},
      {{{"system", "S"}, {"user", "Hi"}}, "S\nHi", {83, 10, 72, 105}},
      {{{"user", "a"}, {"assistant", "<think>\nx\n</think>\n\nb"}, {"user", "c"}},
       "a\n<think>\nx\n</think>\n\nb\nc",
       {97, 10,  60,  116, 104, 105, 110, 107, 62, 10, 120, 10, 60,
        47, 116, 104, 105, 110, 107, 62,  10,  10, 98, 10,  99}},
      {{{"user", "h\xc3\xa9llo {{ x }} <|endoftext|>\n"}},
       "h\xc3\xa9llo {{ x }} <|endoftext|>\n",
       {104, 195, 169, 108, 108, 111, 32, 123, 123, 298, 32, 125, 125, 32, 3309, 10}},
  };
  return cases;
}

TEST(ChatTemplate, ShippedTinyModelsRenderTheirOwnTemplatesAsBefore) {
  for (const char* name : {"rkv-tiny-reasoner", "rkv-tiny-redundant"}) {
    SCOPED_TRACE(name);
    const Tokenizer tok = Tokenizer::load(test::source_dir() / "models" / name);
    ASSERT_FALSE(tok.chat_template_text().empty());
    const ChatTemplate t = resolve_chat_template(tok);
    ASSERT_EQ(t.kind, ChatTemplateKind::kJinja) << t.error;
    EXPECT_EQ(t.bos_token, std::nullopt);
    EXPECT_EQ(t.eos_token, std::optional<std::string>("<|endoftext|>"));
    for (const TinyCase& c : tiny_cases()) {
      const std::string prompt = render_chat(t, c.messages, true);
      EXPECT_EQ(prompt, c.prompt);
      EXPECT_EQ(render_chat(t, c.messages, false), c.prompt);
      EXPECT_EQ(tok.encode(prompt, t.add_special_tokens()), c.ids);
      EXPECT_FALSE(prompt_opens_think(prompt));
    }
    // As the raw family did, a role other than system/user/assistant is refused, by name.
    try {
      render_chat(t, {{"user", "a"}, {"tool", "x"}}, true);
      FAIL() << "expected rkv::Error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "the model's chat template: TemplateError: chat message role \"tool\" is not "
                "supported (use system, user or assistant)");
    }
  }
}

TEST(ChatTemplate, JinjaBindsWhatApplyChatTemplateBinds) {
  const std::string text =
      "{{ messages | length }}|{{ messages[0].role }}:{{ messages[0]['content'] }}|"
      "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ bos_token is defined }}|{{ eos_token }}|{{ extra | default('-') }}";
  const ChatTemplate t = make_jinja_chat_template(text, "t", std::nullopt, std::string("</s>"));
  EXPECT_EQ(render_chat(t, {{"user", "Hi"}}, true), "1|user:Hi|True|True|True|False|</s>|-");
  EXPECT_EQ(render_chat(t, {{"user", "Hi"}, {"assistant", "A"}}, false),
            "2|user:Hi|True|True|False|False|</s>|-");
  // The kwargs are bound last: they may replace the tokens.
  const nlohmann::ordered_json kwargs = {{"extra", {1, "a"}}, {"eos_token", "E"}};
  EXPECT_EQ(render_chat(t, {{"user", "Hi"}}, true, kwargs),
            "1|user:Hi|True|True|True|False|E|[1, 'a']");
  const ChatTemplate with_bos = make_jinja_chat_template(text, "t", std::string("<s>"));
  EXPECT_EQ(render_chat(with_bos, {{"user", "Hi"}}, true), "1|user:Hi|True|True|True|True||-");
  // Roles are the template's business.
  EXPECT_EQ(render_chat(t, {{"tool", "r"}}, true), "1|tool:r|True|True|True|False|</s>|-");
  EXPECT_THROW(render_chat(t, {{"user", "Hi"}}, true, {{"messages", 1}}), Error);
  EXPECT_THROW(render_chat(t, {{"user", "Hi"}}, true, {{"add_generation_prompt", false}}), Error);
  EXPECT_THROW(render_chat(t, {{"user", "Hi"}}, true, nlohmann::ordered_json::array()), Error);
  // A built-in family takes no kwargs.
  EXPECT_THROW(render_chat(make_chat_template(ChatTemplateKind::kChatml), {{"user", "Hi"}}, true,
                           {{"enable_thinking", false}}),
               Error);
}

TEST(ChatTemplate, JinjaErrorsNameTheTemplate) {
  try {
    make_jinja_chat_template("{% if %}", "the chat template t.jinja");
    FAIL() << "expected rkv::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("the chat template t.jinja: TemplateSyntaxError: ", 0),
              0u)
        << e.what();
  }
  const ChatTemplate t = make_jinja_chat_template(
      "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}ok",
      "the model's chat template");
  EXPECT_EQ(render_chat(t, {{"user", "Hi"}}, true), "ok");
  try {
    render_chat(t, {{"system", "S"}}, true);
    FAIL() << "expected rkv::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the model's chat template: TemplateError: System role not supported");
  }
}

// A tokenizer directory: the shipped tiny model's tokenizer.json with this tokenizer_config.json.
std::filesystem::path tokenizer_with_config(const test::TempDir& dir,
                                            const nlohmann::json& config) {
  std::filesystem::copy_file(test::shipped_model_dir() / "tokenizer.json",
                             dir.path() / "tokenizer.json");
  dir.write("tokenizer_config.json", config.dump());
  return dir.path();
}

TEST(ChatTemplate, TheModelsOwnTemplateOrAClearError) {
  const nlohmann::json base = {{"eos_token", "<|endoftext|>"}, {"bos_token", nullptr}};
  {
    test::TempDir dir("chat-none");
    const Tokenizer tok = Tokenizer::load(tokenizer_with_config(dir, base));
    const ChatTemplate t = resolve_chat_template(tok);
    EXPECT_EQ(t.kind, ChatTemplateKind::kNone);
    try {
      render_chat(t, {{"user", "Hi"}}, true);
      FAIL() << "expected rkv::Error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("the model has no chat template"), std::string::npos) << m;
      EXPECT_NE(m.find("--chat-template-file FILE"), std::string::npos) << m;
      EXPECT_NE(m.find("--chat-template raw"), std::string::npos) << m;
    }
    // A built-in by name, or a template given instead of the model's.
    EXPECT_EQ(render_chat(resolve_chat_template(tok, "raw"), {{"user", "a"}, {"user", "b"}}, true),
              "a\nb");
    EXPECT_EQ(resolve_chat_template(tok, "qwen3").kind, ChatTemplateKind::kQwen3);
    const ChatTemplate given = resolve_chat_template(
        &tok, "auto", std::string("[{{ messages[0].content }}]{{ eos_token }}"),
        "the chat template x.jinja");
    EXPECT_EQ(given.kind, ChatTemplateKind::kJinja);
    EXPECT_EQ(given.origin, "the chat template x.jinja");
    EXPECT_EQ(render_chat(given, {{"user", "a"}}, true), "[a]<|endoftext|>");
    EXPECT_THROW(resolve_chat_template(&tok, "chatml", std::string("x")), Error);
    EXPECT_THROW(resolve_chat_template(&tok, "", std::string("{% for %}"), "f"), Error);
    EXPECT_THROW(resolve_chat_template(tok, "jinja2"), Error);
  }
  {
    // A model's template that does not compile: the model loads; chat says why and what to do.
    test::TempDir dir("chat-broken");
    nlohmann::json config = base;
    config["chat_template"] = "{% for m in messages %}";
    const Tokenizer tok = Tokenizer::load(tokenizer_with_config(dir, config));
    const ChatTemplate t = resolve_chat_template(tok);
    EXPECT_EQ(t.kind, ChatTemplateKind::kNone);
    EXPECT_NE(t.error.find("the model's chat template: TemplateSyntaxError"), std::string::npos)
        << t.error;
    EXPECT_NE(t.error.find("--chat-template-file"), std::string::npos) << t.error;
    EXPECT_THROW(render_chat(t, {{"user", "Hi"}}, true), Error);
  }
  {
    // A list of named templates: the "default" one.
    test::TempDir dir("chat-list");
    nlohmann::json config = base;
    config["chat_template"] = {{{"name", "tool_use"}, {"template", "T"}},
                               {{"name", "default"}, {"template", "D{{ messages | length }}"}}};
    const Tokenizer tok = Tokenizer::load(tokenizer_with_config(dir, config));
    EXPECT_EQ(render_chat(resolve_chat_template(tok), {{"user", "Hi"}}, true), "D1");
  }
  // Without a tokenizer: a built-in or a given template, and no token variables.
  EXPECT_EQ(resolve_chat_template(nullptr, "raw").kind, ChatTemplateKind::kRaw);
  EXPECT_EQ(resolve_chat_template(nullptr).kind, ChatTemplateKind::kNone);
  EXPECT_EQ(
      render_chat(resolve_chat_template(nullptr, "", std::string("{{ bos_token is defined }}")),
                  {{"user", "Hi"}}, true),
      "False");
}

TEST(ChatTemplate, PromptOpensThink) {
  EXPECT_TRUE(prompt_opens_think("<｜Assistant｜><think>\n"));
  EXPECT_TRUE(prompt_opens_think("<|im_start|>assistant\n<think>"));
  EXPECT_TRUE(prompt_opens_think("<think>\n\n"));
  EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_think("<think>x"));
  EXPECT_FALSE(prompt_opens_think(""));
  EXPECT_TRUE(
      prompt_opens_think(render_chat(ChatTemplateKind::kDeepseekR1, {{"user", "Hi"}}, true)));
  EXPECT_FALSE(
      prompt_opens_think(render_chat(ChatTemplateKind::kQwen3NoThink, {{"user", "Hi"}}, true)));
}

TEST(ChatTemplate, SpecialTokensARenderedPromptPrintsAreSingleIds) {
  // The self-made tiny checkpoint's tokenizer has <|im_start|> and <|im_end|> as special tokens
  // and a ChatML template of its own.
  const Tokenizer tok = Tokenizer::load(test::self_made_model());
  const ChatTemplate t = resolve_chat_template(tok);
  ASSERT_EQ(t.kind, ChatTemplateKind::kJinja) << t.error;
  const std::string prompt = render_chat(t, {{"user", "Hi"}}, true);
  ASSERT_EQ(prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const int32_t im_start = tok.token_id("<|im_start|>");
  const int32_t im_end = tok.token_id("<|im_end|>");
  ASSERT_GE(im_start, 0);
  ASSERT_GE(im_end, 0);
  std::vector<int32_t> expected = {im_start};
  for (int32_t id : tok.encode("user\nHi", false)) expected.push_back(id);
  expected.push_back(im_end);
  for (int32_t id : tok.encode("\n", false)) expected.push_back(id);
  expected.push_back(im_start);
  for (int32_t id : tok.encode("assistant\n", false)) expected.push_back(id);
  EXPECT_EQ(tok.encode(prompt, t.add_special_tokens()), expected);
}

TEST(ChatTemplate, Qwen3TokenizerTemplateRendersAndEncodes) {
  RKV_REQUIRE_SHARED(shared);
  const Tokenizer tok = Tokenizer::load(shared / "golden" / "tokenizer" / "qwen3_0.6b");
  const ChatTemplate t = resolve_chat_template(tok);
  ASSERT_EQ(t.kind, ChatTemplateKind::kJinja) << t.error;
  EXPECT_EQ(resolve_chat_template(tok, "qwen3-nothink").kind, ChatTemplateKind::kQwen3NoThink);
  EXPECT_THROW(resolve_chat_template(tok, "nope"), Error);
  const std::string prompt = render_chat(t, {{"user", "Hello world"}}, true);
  // The model's template and the built-in qwen3 agree on a plain conversation.
  EXPECT_EQ(prompt, render_chat(ChatTemplateKind::kQwen3, {{"user", "Hello world"}}, true));
  EXPECT_EQ(render_chat(t, {{"user", "Hello world"}}, true, {{"enable_thinking", false}}),
            render_chat(ChatTemplateKind::kQwen3NoThink, {{"user", "Hello world"}}, true));
  // <|im_start|> user \n Hello world <|im_end|> \n <|im_start|> assistant \n
  EXPECT_EQ(tok.encode(prompt, t.add_special_tokens()),
            (std::vector<int32_t>{151644, 872, 198, 9707, 1879, 151645, 198, 151644, 77091, 198}));
}

}  // namespace
}  // namespace rkv

namespace rkv {
namespace {

// thought_close against what Jinja2 renders between an assistant turn's reasoning_content and
// its content with each template (python3-jinja2 in transformers' environment, by hand).
TEST(ChatTemplate, ThoughtCloseIsWhatTheTemplateWritesBetweenReasoningAndAnswer) {
  RKV_REQUIRE_SHARED(shared);
  const auto close_of = [&](const std::string& name) {
    const auto text =
        read_file(shared / "golden/chat_templates/templates" / (name + ".jinja"), "a template");
    return thought_close(make_jinja_chat_template(text, name, "<s>", "</s>"));
  };
  EXPECT_EQ(close_of("Qwen-Qwen3-0.6B"), "\n</think>\n\n");
  EXPECT_EQ(close_of("Qwen3.5-4B"), "\n</think>\n\n");
  EXPECT_EQ(close_of("GLM-4.6"), "</think>\n");
  // Renders no reasoning_content: DeepSeek-R1's close.
  EXPECT_EQ(close_of("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"), "\n</think>\n\n");
  // Writes "</seed:think>\n", which holds no </think>: the default.
  EXPECT_EQ(close_of("ByteDance-Seed-OSS"), "\n</think>\n\n");
  EXPECT_EQ(thought_close(make_chat_template(ChatTemplateKind::kChatml)), "\n</think>\n\n");
}

}  // namespace
}  // namespace rkv
