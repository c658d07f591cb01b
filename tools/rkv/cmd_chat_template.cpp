// rkv chat-template: renders a chat template with rkv's Jinja interpreter (src/jinja) exactly as
// transformers' apply_chat_template would, and prints the prompt with nothing added.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "command.h"
#include "core/error.h"
#include "core/record_log.h"
#include "jinja/template.h"
#include "model/gguf.h"

namespace rkv::cli {
namespace {

struct ChatTemplateOptions {
  std::string model;
  std::string template_file;
  std::string messages;
  std::string tools;
  std::string documents;
  bool add_generation_prompt = false;
  std::string kwargs;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::string date;
};

// The template a model carries: tokenizer_config.json's "chat_template" (a string, or a list of
// {name, template} of which "default" is taken), else chat_template.jinja, or a GGUF file's
// tokenizer.chat_template.
std::string model_template(const std::string& model) {
  namespace fs = std::filesystem;
  const fs::path path(model);
  if (fs::is_regular_file(path)) {
    const GgufFile gguf(path, MappedFile::Mode::Map);
    if (auto t = gguf.get_string("tokenizer.chat_template")) return *t;
    throw Error(model + ": the GGUF file has no tokenizer.chat_template; give --template FILE");
  }
  if (!fs::is_directory(path)) throw Error(model + ": no such model directory or GGUF file");
  const fs::path config = path / "tokenizer_config.json";
  if (fs::exists(config)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(config, "the model's tokenizer_config.json"));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config.string() + ": malformed JSON: " + e.what());
    }
    if (j.is_object() && j.contains("chat_template")) {
      const auto& t = j["chat_template"];
      if (t.is_string()) return t.get<std::string>();
      if (t.is_array()) {
        std::string first;
        for (const auto& entry : t) {
          if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string())
            throw Error(config.string() + ": chat_template entries need a \"template\" string");
          if (first.empty()) first = entry["template"].get<std::string>();
          if (entry.value("name", "") == "default") return entry["template"].get<std::string>();
        }
        if (!first.empty()) return first;
      }
    }
  }
  if (fs::exists(path / "chat_template.jinja"))
    return read_file(path / "chat_template.jinja", "the model's chat_template.jinja");
  throw Error(model +
              ": the model has no chat template (tokenizer_config.json's chat_template or "
              "chat_template.jinja); give --template FILE");
}

nlohmann::ordered_json read_json_array(const std::string& file, const char* flag) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(read_file(file, std::string("the file given with ") + flag));
  } catch (const nlohmann::json::exception& e) {
    throw Error(file + ": malformed JSON (" + flag + "): " + e.what());
  }
  if (!j.is_array()) throw Error(file + ": " + flag + " must hold a JSON array");
  return j;
}

void run_chat_template(const ChatTemplateOptions& o) {
  if (o.model.empty() == o.template_file.empty())
    throw Error("give the template with -m MODEL or --template FILE (one of them)");
  const std::string source = o.template_file.empty()
                                 ? model_template(o.model)
                                 : read_file(o.template_file, "the file given with --template");
  jinja::Variables vars;
  auto bind = [&](const std::string& name, jinja::Value v) {
    jinja::bind(vars, name, std::move(v));
  };
  bind("messages", jinja::from_json(read_json_array(o.messages, "--messages")));
  bind("tools", o.tools.empty() ? jinja::Value::none()
                                : jinja::from_json(read_json_array(o.tools, "--tools")));
  bind("documents", o.documents.empty()
                        ? jinja::Value::none()
                        : jinja::from_json(read_json_array(o.documents, "--documents")));
  bind("add_generation_prompt", jinja::Value::boolean(o.add_generation_prompt));
  if (o.bos_token) bind("bos_token", jinja::Value::str(*o.bos_token));
  if (o.eos_token) bind("eos_token", jinja::Value::str(*o.eos_token));
  if (!o.kwargs.empty()) {
    nlohmann::ordered_json kw;
    try {
      kw = nlohmann::ordered_json::parse(o.kwargs);
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("--kwargs: malformed JSON: ") + e.what());
    }
    if (!kw.is_object()) throw Error("--kwargs must be a JSON object");
    for (const auto& [k, v] : kw.items()) bind(k, jinja::from_json(v));
  }
  jinja::RenderOptions options;
  if (!o.date.empty()) {
    options.now = jinja::parse_date(o.date);
    if (!options.now) throw Error("--date: expected a date YYYY-MM-DD, got '" + o.date + "'");
  }
  std::string prompt;
  try {
    prompt = jinja::Template::compile(source).render(vars, options);
  } catch (const jinja::Error& e) {
    throw Error(std::string(jinja::error_kind_name(e.kind())) + ": " + e.what());
  }
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
}

const RegisterCommand kRegister{
    "chat-template",
    "Render a chat template (the model's own, or a file) as transformers' apply_chat_template "
    "does, and print the prompt exactly",
    [](CLI::App& app) {
      auto o = std::make_shared<ChatTemplateOptions>();
      app.add_option("-m,--model", o->model,
                     "A model directory (its tokenizer_config.json chat_template, the \"default\" "
                     "entry of a list of named templates, or chat_template.jinja) or a .gguf file "
                     "(tokenizer.chat_template); give this or --template")
          ->type_name("DIR|FILE");
      app.add_option("--template", o->template_file,
                     "A Jinja chat template file to render instead of a model's")
          ->type_name("FILE");
      app.add_option("--messages", o->messages,
                     "A JSON file holding the array of messages, bound to `messages` (required)")
          ->type_name("FILE")
          ->required();
      app.add_option("--tools", o->tools,
                     "A JSON file holding the array of tool schemas, bound to `tools` (default: "
                     "tools is none)")
          ->type_name("FILE");
      app.add_option("--documents", o->documents,
                     "A JSON file holding the array of documents, bound to `documents` (default: "
                     "documents is none)")
          ->type_name("FILE");
      app.add_flag("--add-generation-prompt", o->add_generation_prompt,
                   "Bind add_generation_prompt to true (default: false)");
      app.add_option("--kwargs", o->kwargs,
                     "A JSON object whose keys are bound as variables after all the others, e.g. "
                     "'{\"enable_thinking\": false}' (default: none)")
          ->type_name("JSON");
      app.add_option("--bos-token", o->bos_token,
                     "Bind bos_token to this text (default: bos_token is left undefined)")
          ->type_name("TEXT");
      app.add_option("--eos-token", o->eos_token,
                     "Bind eos_token to this text (default: eos_token is left undefined)")
          ->type_name("TEXT");
      app.add_option("--date", o->date,
                     "The date strftime_now() formats, at 12:00:00 (default: the local time now)")
          ->type_name("YYYY-MM-DD");
      app.callback([o]() { run_chat_template(*o); });
    }};

}  // namespace
}  // namespace rkv::cli
