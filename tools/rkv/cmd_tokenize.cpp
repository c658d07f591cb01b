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
  bool tokens = false;
  bool no_special = false;
};

void run_tokenize(const TokenizeOptions& o) {
  if (o.tokenizer_dir.empty()) {
    throw Error("give the tokenizer directory with --tokenizer DIR (or --model DIR)");
  }
  if (!o.text.empty() && !o.file.empty()) throw Error("give --text or --file, not both");
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
