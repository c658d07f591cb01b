// Loads the "slow" format: vocab.json + merges.txt, with the added tokens from
// tokenizer_config.json's added_tokens_decoder. Processing follows transformers'
// Qwen2Tokenizer: NFC on the whole text first, then its pre-tokenizer regex.
#include <string_view>

#include "core/byte_level.h"
#include "core/error.h"
#include "tokenizer/json_tables.h"
#include "tokenizer/tokenizer_impl.h"

namespace rkv::tokenizer {

namespace {

void load_vocab(Tokenizer::Impl& impl, const std::filesystem::path& path) {
  std::size_t count = 0;
  JsonTables tables;
  tables.vocab_path = std::vector<std::string>{};
  tables.on_vocab = [&](const std::string& token, int64_t id) {
    impl.set_token(static_cast<int32_t>(id), token, byte_level_to_bytes(token), 0);
    ++count;
  };
  impl.vocab.reserve(160000);
  const nlohmann::json rest = parse_json_with_tables(read_file(path), path, tables);
  if (!rest.is_null() || count == 0) {
    throw Error(path.string() + ": expected a JSON object mapping token strings to ids");
  }
}

void load_merges(Tokenizer::Impl& impl, const std::filesystem::path& path) {
  const std::string text = read_file(path);
  impl.merges.reserve(impl.vocab.size());
  std::size_t line_number = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.substr(0, 8) == "#version")) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      throw Error(path.string() + ":" + std::to_string(line_number) +
                  ": expected two tokens separated by one space, got \"" + std::string(line) +
                  "\"");
    }
    const std::string left(line.substr(0, space));
    const std::string right(line.substr(space + 1));
    if (const auto missing = impl.add_merge(left, right)) {
      throw Error(path.string() + ":" + std::to_string(line_number) + ": the merge \"" +
                  std::string(line) + "\" refers to the token \"" + *missing +
                  "\", which is not in vocab.json");
    }
  }
}

void load_added_tokens(Tokenizer::Impl& impl, const std::filesystem::path& path) {
  const nlohmann::json config = read_json_file(path);
  if (!config.is_object()) throw Error(path.string() + ": expected a JSON object");
  auto decoder = config.find("added_tokens_decoder");
  if (decoder == config.end()) return;
  if (!decoder->is_object()) {
    throw Error(path.string() + ": added_tokens_decoder must be an object of id -> token");
  }
  for (const auto& [key, value] : decoder->items()) {
    AddedToken token;
    try {
      std::size_t used = 0;
      const long id = std::stol(key, &used);
      if (used != key.size() || id < 0 || id > kMaxTokenId) throw std::invalid_argument(key);
      token.id = static_cast<int32_t>(id);
    } catch (const std::exception&) {
      throw Error(path.string() + ": added_tokens_decoder key \"" + key + "\" is not a token id");
    }
    token.content = token_content(value);
    if (token.content.empty()) {
      throw Error(path.string() + ": added_tokens_decoder[" + key + "] has no \"content\"");
    }
    token.special = value.value("special", false);
    token.lstrip = value.value("lstrip", false);
    token.rstrip = value.value("rstrip", false);
    impl.add_added_token(token);
  }
}

}  // namespace

void load_vocab_and_merges(Tokenizer::Impl& impl, const std::filesystem::path& dir) {
  load_vocab(impl, dir / "vocab.json");
  load_merges(impl, dir / "merges.txt");
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    load_added_tokens(impl, dir / "tokenizer_config.json");
  }
  impl.nfc = true;
  impl.nfc_whole_text = true;
  impl.pre_tokenizer.add_split(kQwen2Pattern, false, SplitBehavior::kIsolated, false,
                               (dir / "vocab.json").string());
}

}  // namespace rkv::tokenizer
