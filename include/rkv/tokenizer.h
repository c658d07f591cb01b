// Byte-level BPE tokenizer (GPT-2 / Qwen2 / Llama-3 family), loaded from a Hugging Face model
// directory: tokenizer.json when present, else vocab.json + merges.txt (+ tokenizer_config.json).
//
// Encoding follows the reference tokenizers: added/special tokens are split out of the raw text
// first (exact, leftmost-longest match), the pieces between them are NFC-normalized when the
// tokenizer asks for it, split by the pre-tokenizer regex, mapped to GPT-2 byte-level characters
// and merged by BPE rank. Decoding maps the characters back to bytes and decodes UTF-8 with
// U+FFFD replacement (like Python's errors="replace").
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rkv {

// A loaded Tokenizer is immutable (apart from an internal, locked word cache), so one instance
// may be used from several threads; copies are cheap and share the tables.
class Tokenizer {
 public:
  // Reads DIR/tokenizer.json if present, otherwise DIR/vocab.json + DIR/merges.txt. Also reads
  // DIR/tokenizer_config.json (bos/eos tokens, add_bos_token, chat_template, added tokens),
  // DIR/chat_template.jinja and DIR/generation_config.json (eos_token_id) when present.
  // A path to a file stands for the directory holding it, except a .gguf file, whose vocabulary
  // is read from its metadata (tokenizer.ggml.model "llama": SentencePiece-style, as llama.cpp
  // encodes it). Missing or malformed files throw rkv::Error naming the file and the problem.
  static Tokenizer load(const std::filesystem::path& dir);

  // add_special: add the tokens the post-processor puts around a text (the BOS for Llama-3 and
  // DeepSeek-R1-Distill; nothing for Qwen). The BOS is never doubled: when the text itself
  // already begins with the BOS token (e.g. a rendered chat template that starts with
  // "<|begin_of_text|>"), no second one is prepended. Invalid UTF-8 in the text is replaced by
  // U+FFFD (one per maximal invalid subsequence) before encoding.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const;

  // Concatenates the tokens' bytes and decodes them as UTF-8 with U+FFFD replacement.
  // skip_special drops the tokens marked special (not the other added tokens such as <think>).
  // An id outside [0, vocab_size()) or without a token throws rkv::Error.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The raw bytes of one token (may be an incomplete UTF-8 sequence).
  std::string token_text(int32_t id) const;
  // The token as written in the vocabulary (byte-level form, e.g. "Ġworld"); always valid UTF-8.
  std::string token_string(int32_t id) const;
  // The id of a token given in its vocabulary form ("Ġworld", "<|im_end|>"); -1 when none.
  int32_t token_id(std::string_view token) const;

  // The fewest tokens encode(text, false) can give for a text of `bytes` bytes, known without
  // encoding it: no token covers more bytes than the longest one in the vocabulary, and NFC
  // shrinks a text by at most a factor of 3 (a Hangul L+V+T sequence to one syllable).
  std::size_t min_tokens(std::size_t bytes) const;

  // One past the largest token id (base vocabulary plus added tokens).
  int32_t vocab_size() const;
  // The BOS token id, -1 when the tokenizer has none.
  int32_t bos_id() const;
  // Whether encode(text, add_special=true) prepends the BOS.
  bool adds_bos() const;
  // Tokens that end generation: tokenizer_config's eos_token, generation_config's eos_token_id,
  // and the well-known end markers present as special tokens (<|endoftext|>, <|im_end|>,
  // <|eot_id|>, <|end_of_text|>, <｜end▁of▁sentence｜>). Sorted, no duplicates.
  const std::vector<int32_t>& eos_ids() const;
  bool is_eos(int32_t id) const;
  // Whether the id is an added token marked special (dropped by decode(skip_special=true)).
  bool is_special(int32_t id) const;
  // Whether the id is any added token (special or not, e.g. <think>).
  bool is_added(int32_t id) const;

  // The chat_template text from tokenizer_config.json (or chat_template.jinja); empty if none.
  const std::string& chat_template_text() const;
  // The bos_token and eos_token texts a chat template is given, as transformers gives them:
  // tokenizer_config.json's bos_token / eos_token (a string or {"content": ...}), nullopt when
  // the config has none (or null); for a GGUF file, the text of tokenizer.ggml.bos_token_id /
  // eos_token_id, as llama.cpp gives them.
  const std::optional<std::string>& bos_token() const;
  const std::optional<std::string>& eos_token() const;
  // The directory the tokenizer was loaded from.
  const std::filesystem::path& dir() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable after load; copies share it
  friend class StreamingDecoder;
};

// Turns a stream of generated ids into text without ever emitting a broken character: bytes of
// an incomplete UTF-8 sequence are held back until the sequence completes. Invalid bytes are
// emitted as U+FFFD as soon as they are known to be invalid.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // The complete text that this id finishes (possibly empty).
  std::string push(int32_t id);
  // Emits what is held back, with U+FFFD for an incomplete sequence, and resets.
  std::string flush();
  // Bytes held back right now (0 to 3).
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace rkv
