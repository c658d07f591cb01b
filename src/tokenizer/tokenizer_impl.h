// The tokenizer's state (shared by the loaders and the encode/decode code) and the loaders'
// entry points. Immutable after loading except for the word cache, which is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rkv/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace rkv {

struct Tokenizer::Impl {
  enum Flag : uint8_t { kPresent = 1, kAdded = 2, kSpecial = 4, kByte = 8 };

  std::filesystem::path dir;

  // Vocabulary: the byte-level form of each token (added tokens: their content) and its bytes.
  std::unordered_map<std::string, int32_t> vocab;  // vocabulary form -> id
  std::vector<std::string> id_to_token;            // [vocab_size] vocabulary form
  std::vector<std::string> id_to_bytes;            // [vocab_size] raw bytes
  std::vector<uint8_t> flags;                      // [vocab_size] Flag bits
  std::size_t max_token_bytes = 1;                 // the longest token's raw bytes
  std::array<int32_t, 256> byte_ids{};             // id of each single byte; -1 if none

  tokenizer::BpeMerges merges;
  bool ignore_merges = false;  // a word that is itself in the vocabulary skips merging
  tokenizer::AddedTokenMatcher added;
  tokenizer::PreTokenizer pre_tokenizer;
  bool nfc = false;             // NFC-normalize text
  bool nfc_whole_text = false;  // before splitting added tokens (Qwen2Tokenizer) vs. after
  bool add_prefix_space = false;

  // Post-processor (what add_special adds around a text).
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;

  int32_t bos = -1;
  std::vector<int32_t> eos;
  std::string chat_template;
  std::optional<std::string> bos_token, eos_token;  // texts for chat templates

  mutable tokenizer::WordCache cache;

  // SentencePiece-style vocabulary from a GGUF file (tokenizer.ggml.model "llama"): tokens are
  // merged by score instead of by merge rank, spaces are U+2581, bytes without a token of their
  // own fall back to the <0xXX> tokens (byte_ids), and a space is put before the text.
  bool spm = false;
  bool spm_add_space_prefix = true;
  std::vector<float> scores;  // [vocab_size]

  // Sets a token; grows the tables as needed.
  void set_token(int32_t id, const std::string& vocab_form, std::string bytes, uint8_t flag_bits);
  void add_added_token(const tokenizer::AddedToken& token);
  // Appends the merge of two vocabulary forms (rank: the merges added before it). Returns the
  // first of left, right and left + right that is not in the vocabulary, or nullopt when added.
  std::optional<std::string> add_merge(const std::string& left, const std::string& right);
  // Fills byte_ids; call after the vocabulary is complete.
  void index_bytes();
  // Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Appends the ids of plain text (no added tokens in it).
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  // SentencePiece-style: appends the ids of plain text (spaces not yet escaped).
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  // The id of a token string from a config ("<|im_end|>"); nullopt when unknown.
  std::optional<int32_t> find(const std::string& token) const;
};

namespace tokenizer {

// tokenizer.json (Hugging Face fast-tokenizer format).
void load_tokenizer_json(Tokenizer::Impl& impl, const std::filesystem::path& path);
// vocab.json + merges.txt (+ tokenizer_config.json's added_tokens_decoder), Qwen2Tokenizer style.
void load_vocab_and_merges(Tokenizer::Impl& impl, const std::filesystem::path& dir);
// tokenizer_config.json, chat_template.jinja and generation_config.json: BOS/EOS, add_bos_token,
// the chat template. Call last.
void load_config(Tokenizer::Impl& impl, const std::filesystem::path& dir);
// Adds the known end-of-text markers (<|endoftext|>, <|im_end|>, <|eot_id|>, ...) that are
// special tokens of the vocabulary to the EOS set, and sorts it.
void add_end_markers(Tokenizer::Impl& impl);
// The vocabulary in a GGUF file's metadata (tokenizer.ggml.*): SentencePiece-style ("llama") or
// byte-level BPE ("gpt2", with the pre-tokenizers qwen2, deepseek-r1-qwen, llama-bpe/llama3 and
// gpt-2). Complete: no load_config after.
void load_gguf_vocab(Tokenizer::Impl& impl, const std::filesystem::path& path);

// llama.cpp's token types (tokenizer.ggml.token_type).
enum GgufTokenType : int64_t {
  kGgufNormal = 1,
  kGgufUnknown = 2,
  kGgufControl = 3,
  kGgufUserDefined = 4,
  kGgufUnused = 5,
  kGgufByte = 6,
};
// Throws rkv::Error naming the GGUF file.
struct GgufFail {
  std::string where;
  [[noreturn]] void operator()(const std::string& what) const;
};
// The tokens of a SentencePiece-style GGUF vocabulary (spm.cpp); `scores` and `types` are null
// or of the tokens' length.
void load_spm_tokens(Tokenizer::Impl& impl, const std::vector<std::string>& tokens,
                     const std::vector<double>* scores, const std::vector<int64_t>* types,
                     const GgufFail& fail);

// Reads a whole file; rkv::Error naming the file when it cannot be read.
std::string read_file(const std::filesystem::path& path);
// Parses a JSON file; rkv::Error naming the file when it cannot be read or is malformed.
nlohmann::json read_json_file(const std::filesystem::path& path);
// "<s>" or {"content": "<s>", ...} as found in configs; empty for null or anything else.
std::string token_content(const nlohmann::json& value);

}  // namespace tokenizer
}  // namespace rkv
