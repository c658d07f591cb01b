// Chat through the engine and the CLI: a model's own Jinja template (tokenizer_config.json) is
// what Engine::prepare renders, with the request's template kwargs; --chat-template-file (the
// engine's chat_template_text) replaces it; a model without one is a clear error unless a
// built-in is named; the shipped model's prompts are the ones rendered before it had a template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "rkv/chat_template.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

using rkv::test::read_text;

// A random-weight checkpoint of `shape` in `dir` whose tokenizer_config.json chat_template is
// `chat_template` (removed when empty).
void write_checkpoint(const fs::path& dir, const std::string& shape,
                      const std::string& chat_template) {
  RandomCheckpointOptions o;
  o.shape = shape;
  o.dtype = DType::F32;
  o.seed = 11;
  write_random_checkpoint(dir, o);
  nlohmann::json config = test::read_json(dir / "tokenizer_config.json");
  if (chat_template.empty())
    config.erase("chat_template");
  else
    config["chat_template"] = chat_template;
  std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << config.dump(1);
}

std::vector<ChatMessage> messages_of(const ojson& conversation) {
  std::vector<ChatMessage> out;
  for (const auto& m : conversation.at("messages"))
    out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

// The golden cases (../shared/golden/chat_templates/cases.jsonl) of one template with the
// generation prompt, for conversations of plain string contents (what a Request carries).
std::vector<ojson> golden_cases(const fs::path& root, const std::string& template_file) {
  std::vector<ojson> out;
  std::ifstream in(root / "cases.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    ojson c = ojson::parse(line);
    if (c.at("template") != template_file || !c.contains("expected") ||
        !c.at("add_generation_prompt").get<bool>())
      continue;
    const ojson conversation = ojson::parse(read_text(root / "conversations" / c["conversation"]));
    if (conversation.contains("tools") || conversation.contains("documents")) continue;
    bool plain = true;
    for (const auto& m : conversation.at("messages"))
      plain = plain && m.size() == 2 && m.contains("role") && m.contains("content") &&
              m["content"].is_string();
    if (!plain) continue;
    c["messages"] = conversation["messages"];
    out.push_back(std::move(c));
  }
  return out;
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  explicit Loaded(const fs::path& dir)
      : model(Model::load(dir)), tokenizer(std::make_unique<Tokenizer>(Tokenizer::load(dir))) {}
};

// Every golden case of `template_file` (plain conversations, generation prompt) rendered by
// Engine::prepare for a model whose tokenizer_config.json carries the template: the prompt is
// the expected text encoded as transformers encodes a rendered chat (no post-processor), and the
// request starts in reasoning exactly when that text leaves a <think> open. Returns how many.
int check_golden_template_through_engine(const fs::path& root, const std::string& shape,
                                         const std::string& template_file, bool via_option) {
  SCOPED_TRACE(template_file);
  const std::string text = read_text(root / "templates" / template_file);
  test::TempDir dir("chat-engine");
  write_checkpoint(dir.path(), shape,
                   via_option ? std::string("{{ raise_exception('no') }}") : text);
  Loaded m(dir.path());
  ThreadPool pool(1);
  EngineOptions options;
  if (via_option) {
    options.chat_template_text = text;
    options.chat_template_origin = "the chat template " + template_file;
  }
  Engine engine(*m.model, m.tokenizer.get(), pool, options);
  EXPECT_EQ(engine.chat_template().kind, ChatTemplateKind::kJinja);
  int checked = 0;
  for (const ojson& c : golden_cases(root, template_file)) {
    SCOPED_TRACE(c["id"].get<std::string>());
    // The case's tokens are the model family's: the checkpoint's tokenizer config has the same.
    const auto token = [](const ojson& v) {
      return v.is_null() ? std::optional<std::string>() : v.get<std::string>();
    };
    EXPECT_EQ(m.tokenizer->bos_token(), token(c["bos_token"]));
    EXPECT_EQ(m.tokenizer->eos_token(), token(c["eos_token"]));
    Request r;
    r.messages = messages_of(c);
    r.chat_template_kwargs = c["extra"].empty() ? ojson() : c["extra"];
    r.max_new_tokens = 1;
    r.decode_text = false;
    const PreparedRequest p = engine.prepare(r);
    const std::string expected = c["expected"].get<std::string>();
    const auto ids = m.tokenizer->encode(expected, false);
    EXPECT_EQ(p.prompt, std::vector<int>(ids.begin(), ids.end()));
    EXPECT_EQ(p.starts_in_reasoning, prompt_opens_think(expected));
    ++checked;
  }
  return checked;
}

TEST(ChatEngine, TheModelsJinjaTemplateIsRenderedAsTransformersDoes) {
  RKV_REQUIRE_SHARED(shared);
  const fs::path root = shared / "golden" / "chat_templates";
  // Qwen3 (enable_thinking as a template kwarg), Qwen3.5 (its prompt opens <think>), and the
  // R1 distill (bos_token from the tokenizer config, the BOS printed once by the template).
  EXPECT_EQ(check_golden_template_through_engine(root, "tiny", "Qwen-Qwen3-0.6B.jinja", false), 6);
  EXPECT_EQ(check_golden_template_through_engine(root, "tiny", "Qwen3.5-4B.jinja", false), 6);
  EXPECT_EQ(check_golden_template_through_engine(
                root, "tiny-r1", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", false),
            4);
}

TEST(ChatEngine, AGivenTemplateReplacesTheModels) {
  RKV_REQUIRE_SHARED(shared);
  const fs::path root = shared / "golden" / "chat_templates";
  // The model's own template raises; the one given in the engine's options is rendered.
  EXPECT_EQ(check_golden_template_through_engine(root, "tiny", "Qwen-Qwen3-0.6B.jinja", true), 6);
}

TEST(ChatEngine, TheRenderedPromptIsTheRequestsPrompt) {
  test::TempDir dir("chat-own");
  write_checkpoint(dir.path(), "tiny-r1", "");
  Loaded m(dir.path());
  ThreadPool pool(1);
  Request r;
  r.messages = {{"user", "Hi"}};
  r.max_new_tokens = 1;
  r.decode_text = false;
  {
    // No template: chat is an error that says what to give; text and token prompts still work.
    Engine engine(*m.model, m.tokenizer.get(), pool);
    EXPECT_EQ(engine.chat_template().kind, ChatTemplateKind::kNone);
    try {
      engine.prepare(r);
      FAIL() << "expected rkv::Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the model has no chat template"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("--chat-template-file"), std::string::npos);
    }
    Request text;
    text.text = "Hi";
    text.decode_text = false;
    const auto hi = m.tokenizer->encode("Hi", true);
    EXPECT_EQ(engine.prepare(text).prompt, std::vector<int>(hi.begin(), hi.end()));
    Request kwargs_without_chat = text;
    kwargs_without_chat.chat_template_kwargs = {{"enable_thinking", false}};
    EXPECT_THROW(engine.prepare(kwargs_without_chat), Error);
  }
  {
    // raw by name: the contents, with the BOS the tokenizer adds to a text.
    EngineOptions raw;
    raw.chat_template = "raw";
    Engine engine(*m.model, m.tokenizer.get(), pool, raw);
    Request two = r;
    two.messages.push_back({"user", "there"});
    const auto ids = m.tokenizer->encode("Hi\nthere", true);
    const PreparedRequest p = engine.prepare(two);
    EXPECT_EQ(p.prompt, std::vector<int>(ids.begin(), ids.end()));
    EXPECT_EQ(p.prompt.front(), m.tokenizer->bos_id());
    EXPECT_FALSE(p.starts_in_reasoning);
  }
  {
    // A given template: its text exactly, the special tokens it prints as their ids, and the
    // BOS only where it prints one; the request's kwargs bound.
    EngineOptions o;
    o.chat_template_text =
        "{{ bos_token }}{% for m in messages %}<｜User｜>{{ m.content }}{% endfor %}"
        "<｜Assistant｜>{% if thinking %}<think>\n{% endif %}";
    Engine engine(*m.model, m.tokenizer.get(), pool, o);
    const PreparedRequest p = engine.prepare(r);
    const int bos = m.tokenizer->bos_id();
    const int user = m.tokenizer->token_id("<｜User｜>");
    const int assistant = m.tokenizer->token_id("<｜Assistant｜>");
    const auto hi = m.tokenizer->encode("Hi", false);
    std::vector<int> expected = {bos, user};
    expected.insert(expected.end(), hi.begin(), hi.end());
    expected.push_back(assistant);
    EXPECT_EQ(p.prompt, expected);
    EXPECT_FALSE(p.starts_in_reasoning);
    Request thinking = r;
    thinking.chat_template_kwargs = {{"thinking", true}};
    const PreparedRequest q = engine.prepare(thinking);
    EXPECT_TRUE(q.starts_in_reasoning);
    EXPECT_EQ(q.prompt.size(), expected.size() + 2);  // <think> and "\n"
    EXPECT_EQ(q.prompt[expected.size()], m.tokenizer->token_id("<think>"));
  }
  {
    // A template that prints no BOS gets none, although the tokenizer adds one to a text: a
    // rendered chat is encoded as transformers encodes it, without the post-processor.
    EngineOptions o;
    o.chat_template_text = "<｜User｜>{{ messages[0].content }}";
    Engine engine(*m.model, m.tokenizer.get(), pool, o);
    ASSERT_TRUE(m.tokenizer->adds_bos());
    const auto ids = m.tokenizer->encode("<｜User｜>Hi", false);
    EXPECT_EQ(engine.prepare(r).prompt, std::vector<int>(ids.begin(), ids.end()));
    EXPECT_NE(ids.front(), m.tokenizer->bos_id());
  }
  // A given template that does not compile, or given beside a built-in's name, stops the engine
  // from starting.
  EngineOptions broken;
  broken.chat_template_text = "{% if %}";
  EXPECT_THROW(Engine(*m.model, m.tokenizer.get(), pool, broken), Error);
  EngineOptions both;
  both.chat_template = "raw";
  both.chat_template_text = "x";
  EXPECT_THROW(Engine(*m.model, m.tokenizer.get(), pool, both), Error);
}

TEST(ChatEngine, TheShippedModelsChatPromptIsTheOneRenderedBefore) {
  // The prompt ids Engine::prepare gave the shipped model for a chat before the model had a
  // template of its own (the raw family), recorded from that code.
  const fs::path dir = test::shipped_model_dir();
  Loaded m(dir);
  ThreadPool pool(1);
  Engine engine(*m.model, m.tokenizer.get(), pool);
  ASSERT_EQ(engine.chat_template().kind, ChatTemplateKind::kJinja);
  Request r;
  r.messages = {{"system", "S"}, {"user", "Hi"}};
  r.decode_text = false;
  EXPECT_EQ(engine.prepare(r).prompt, (std::vector<int>{83, 10, 72, 105}));
  r.messages = {{"user", "2:a\n6:b\nans=a ans+b\n"}};
  const PreparedRequest p = engine.prepare(r);
  EXPECT_EQ(p.prompt, (std::vector<int>{359, 10, 472, 10, 1285, 3237, 10}));
  EXPECT_FALSE(p.starts_in_reasoning);
  // A held-out problem as a chat is the same prompt as the problem as a text.
  const std::string q = test::held_out_problems(1).at(0);
  r.messages = {{"user", q}};
  Request text;
  text.text = q;
  text.decode_text = false;
  EXPECT_EQ(engine.prepare(r).prompt, engine.prepare(text).prompt);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

TEST(ChatEngine, GenerateTakesAChatTemplateFileOrABuiltInName) {
  test::TempDir dir("chat-cli");
  const fs::path model = dir.path() / "model";
  write_checkpoint(model, "tiny", "");
  const fs::path file = dir.write(
      "chat.jinja",
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{{ '<|im_start|>assistant\\n' }}");
  const std::string rendered = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const std::string base = test::rkv_binary() + " generate -m " + model.string() +
                           " --temp 0 --ignore-eos -n 6 --print-ids -t 1 ";
  std::string chat, text, out;
  ASSERT_EQ(
      test::run_command(base + "--chat -p Hi --chat-template-file " + file.string() +
                            " 2>&1 >/dev/null | grep -o 'prompt tokens: [0-9]*'; " + base +
                            "--chat -p Hi --chat-template-file " + file.string() + " 2>/dev/null",
                        chat),
      0);
  ASSERT_EQ(test::run_command(base + "-p " + shell_quote(rendered) +
                                  " 2>&1 >/dev/null | grep -o 'prompt tokens: [0-9]*'; " + base +
                                  "-p " + shell_quote(rendered) + " 2>/dev/null",
                              text),
            0);
  // The same prompt (its token count) and the same greedy continuation as the rendered text.
  const Tokenizer tok = Tokenizer::load(model);
  EXPECT_EQ(chat.substr(0, chat.find('\n')),
            "prompt tokens: " + std::to_string(tok.encode(rendered, false).size()));
  EXPECT_EQ(chat, text);

  // The model has no template: a clear error, unless a built-in is named.
  EXPECT_EQ(test::run_command(base + "--chat -p Hi 2>&1", out), 1);
  EXPECT_NE(out.find("the model has no chat template"), std::string::npos) << out;
  EXPECT_NE(out.find("--chat-template raw"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + "--chat -p Hi --chat-template raw 2>/dev/null", out), 0);
  EXPECT_NE(test::run_command(base + "--chat -p Hi --chat-template raw --chat-template-file " +
                                  file.string() + " 2>&1",
                              out),
            0);
  EXPECT_NE(out.find("excludes"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + "--chat -p Hi --chat-template-file " +
                                  (dir.path() / "missing.jinja").string() + " 2>&1",
                              out),
            1);
  EXPECT_NE(out.find("missing.jinja"), std::string::npos) << out;
}

}  // namespace
}  // namespace rkv
