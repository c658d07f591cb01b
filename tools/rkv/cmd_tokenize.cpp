// rkv tokenize: prints the token ids of a text as a JSON list (and optionally the tokens).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#include "core/error.h"
#include "core/record_log.h"
#include "rkv/tokenizer.h"

namespace rkv::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer_dir;
  std::string text;
  std::string file;
  std::string jsonl;
  bool tokens = false;
  bool no_special = false;
};

// --jsonl: one JSON string (or object with a "text" string) per line in, one JSON list of ids
// per line out, the tokenizer loaded once.
void run_tokenize_lines(const TokenizeOptions& o) {
  std::ifstream in(o.jsonl, std::ios::binary);
  if (!in) throw Error("cannot open the file given with --jsonl: " + o.jsonl);
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer_dir);
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json item;
    try {
      item = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(o.jsonl + " line " + std::to_string(n) + ": not JSON (" + e.what() + ")");
    }
    if (item.is_object() && item.contains("text")) item = item["text"];
    if (!item.is_string())
      throw Error(o.jsonl + " line " + std::to_string(n) +
                  ": expected a JSON string or an object with a \"text\" string");
    const std::vector<int32_t> ids = tokenizer.encode(item.get<std::string>(), !o.no_special);
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  }
}

void run_tokenize(const TokenizeOptions& o) {
  if (o.tokenizer_dir.empty()) {
    throw Error("give the tokenizer directory with --tokenizer DIR (or --model DIR)");
  }
  if (!o.text.empty() && !o.file.empty()) throw Error("give --text or --file, not both");
  if (!o.jsonl.empty()) {
    if (!o.text.empty() || !o.file.empty())
      throw Error("give --jsonl alone, not with --text or --file");
    if (o.tokens) throw Error("--tokens prints one text's tokens: leave it out with --jsonl");
    run_tokenize_lines(o);
    return;
  }
  std::string text = o.text;
  if (!o.file.empty()) {
    text = read_file(o.file, "the file given with --file");
  }
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer_dir);
  const std::vector<int32_t> ids = tokenizer.encode(text, !o.no_special);
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  if (o.tokens) {
    nlohmann::json strings = nlohmann::json::array();
    for (int32_t id : ids) strings.push_back(tokenizer.token_string(id));
    std::printf("%s\n",
                strings.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
}

const RegisterCommand kRegister{
    "tokenize", "Print the token ids of a text as a JSON list", [](CLI::App& app) {
      auto o = std::make_shared<TokenizeOptions>();
      app.add_option("--tokenizer", o->tokenizer_dir,
                     "Directory with tokenizer.json, or vocab.json + merges.txt (required; "
                     "tokenizer_config.json beside them is read too), or a .gguf file with its "
                     "vocabulary (SentencePiece-style or byte-level BPE)")
          ->type_name("DIR|FILE");
      app.add_option("-m,--model", o->tokenizer_dir,
                     "Same as --tokenizer: a model directory holding the tokenizer files, or a "
                     ".gguf file")
          ->type_name("DIR|FILE");
      app.add_option("--text", o->text,
                     "The text to tokenize (default: empty text; give --text or --file)")
          ->type_name("TEXT");
      app.add_option("--file", o->file,
                     "Read the text to tokenize from this file, byte for byte (default: none)")
          ->type_name("FILE");
      app.add_option("--jsonl", o->jsonl,
                     "Tokenize many texts: one JSON string (or object with a \"text\" string) per "
                     "line of this file; prints one JSON list of ids per line (default: none)")
          ->type_name("FILE");
      app.add_flag("--tokens", o->tokens,
                   "Also print the tokens (vocabulary form, e.g. \"Ġworld\") as a JSON list on "
                   "a second line (default: off)");
      app.add_flag("--no-special", o->no_special,
                   "Do not add the tokens the tokenizer puts around a text, such as Llama-3's "
                   "BOS <|begin_of_text|> (default: off, so they are added; Qwen adds none)");
      app.footer(
          "Added and special tokens written in the text (e.g. <|im_start|>, <think>) are "
          "encoded as single tokens.\nExample: rkv tokenize --tokenizer models/qwen3 --text "
          "'Hello world'  prints  [9707,1879]\n");
      app.callback([o] { run_tokenize(*o); });
    }};

}  // namespace
}  // namespace rkv::cli
