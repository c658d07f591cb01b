// Fast reading of the two big tables in tokenizer files. A SAX parse builds the usual JSON
// value for everything except the vocabulary object and the merges array, which are streamed
// to callbacks instead: building 150k-entry JSON maps costs more than the rest of loading.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::tokenizer {

struct JsonTables {
  // Where the vocabulary object is ({} = the root object, as in vocab.json); nullopt: nowhere.
  std::optional<std::vector<std::string>> vocab_path;
  std::optional<std::vector<std::string>> merges_path;
  // token -> id; called for each vocabulary entry (an id that is not an integer is an error).
  std::function<void(const std::string& token, int64_t id)> on_vocab;
  // Each merge, from either the "a b" or the ["a", "b"] form; `index` counts from 0.
  std::function<void(std::string_view left, std::string_view right, std::size_t index)> on_merge;
};

// Parses the file's text; throws rkv::Error naming `file` on malformed JSON or bad tables.
// Returns the document without the streamed tables.
nlohmann::json parse_json_with_tables(const std::string& text, const std::filesystem::path& file,
                                      const JsonTables& tables);

}  // namespace rkv::tokenizer
