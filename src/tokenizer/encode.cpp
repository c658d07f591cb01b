// Encoding: the vocabulary tables, and plain text -> words -> byte-level BPE ids.
#include <algorithm>

#include "core/byte_level.h"
#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace rkv {

void Tokenizer::Impl::set_token(int32_t id, const std::string& vocab_form, std::string bytes,
                                uint8_t flag_bits) {
  const auto index = static_cast<std::size_t>(id);
  if (index >= id_to_token.size()) {
    id_to_token.resize(index + 1);
    id_to_bytes.resize(index + 1);
    flags.resize(index + 1, 0);
  }
  id_to_token[index] = vocab_form;
  max_token_bytes = std::max({max_token_bytes, bytes.size(), vocab_form.size()});
  id_to_bytes[index] = std::move(bytes);
  flags[index] = static_cast<uint8_t>(flag_bits | kPresent);
  vocab[vocab_form] = id;
}

void Tokenizer::Impl::add_added_token(const tokenizer::AddedToken& token) {
  set_token(token.id, token.content, token.content,
            static_cast<uint8_t>(kAdded | (token.special ? kSpecial : 0)));
  added.add(token);
}

std::optional<std::string> Tokenizer::Impl::add_merge(const std::string& left,
                                                      const std::string& right) {
  std::string merged = left + right;
  int32_t ids[3];
  const std::string* parts[3] = {&left, &right, &merged};
  for (int k = 0; k < 3; ++k) {
    auto it = vocab.find(*parts[k]);
    if (it == vocab.end()) return *parts[k];
    ids[k] = it->second;
  }
  merges.add(ids[0], ids[1], ids[2]);
  return std::nullopt;
}

void Tokenizer::Impl::index_bytes() {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(byte_level_char(static_cast<unsigned char>(b)));
    byte_ids[b] = it == vocab.end() ? -1 : it->second;
  }
}

std::optional<int32_t> Tokenizer::Impl::find(const std::string& token) const {
  auto it = vocab.find(token);
  if (it == vocab.end()) return std::nullopt;
  return it->second;
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (cache.find(word, out)) return;
  const std::size_t from = out.size();
  if (ignore_merges) {
    std::string form;
    append_byte_level(form, word);
    auto it = vocab.find(form);
    if (it != vocab.end()) {
      out.push_back(it->second);
      cache.insert(word, out, from);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_ids[static_cast<unsigned char>(c)];
    if (id < 0) {
      static const char* hex = "0123456789ABCDEF";
      const auto b = static_cast<unsigned char>(c);
      throw Error((dir / "tokenizer").string() + ": the byte 0x" + hex[b >> 4] + hex[b & 15] +
                  " has no token in the vocabulary, so this text cannot be encoded");
    }
    symbols.push_back(id);
  }
  merges.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  cache.insert(word, out, from);
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc && !nfc_whole_text) {
    normalized = nfc_normalize(text);
    text = normalized;
  }
  if (add_prefix_space && !text.empty() && text.front() != ' ') {
    normalized = " " + std::string(text);
    text = normalized;
  }
  if (pre_tokenizer.empty()) {
    encode_word(text, out);
    return;
  }
  for (std::string_view word : pre_tokenizer.split(text)) encode_word(word, out);
}

}  // namespace rkv
