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

// The largest token id a tokenizer file may use (vocabulary, added tokens). The id tables are
// sized by the largest id, so a small file with one huge id would make the loader allocate
// gigabytes (found by fuzz/vocab_merges.cpp: 250 bytes asked for 3.5 GB, 2^30 was allowed, i.e.
// about 70 GB). Released vocabularies stay far below it (Qwen2/3 151,665 ids, Llama-3 128,256).
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 21) - 1;

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
