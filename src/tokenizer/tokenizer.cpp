// rkv::Tokenizer's public interface: choosing the loader, encode/decode, token lookups.
#include "rkv/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/utf8.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace rkv {

namespace tokenizer {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open the file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path.string() + ": cannot read the file");
  return std::move(buffer).str();
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(path.string() + ": malformed JSON: " + e.what());
  }
}

std::string token_content(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) {
    auto it = value.find("content");
    if (it != value.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

}  // namespace tokenizer

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (is_gguf_path(path)) {
    auto impl = std::make_shared<Impl>();
    impl->dir = path;
    tokenizer::load_gguf_vocab(*impl, path);
    return Tokenizer(std::move(impl));
  }
  fs::path dir = path;
  if (fs::is_regular_file(path, ec)) {
    // A path to one of the tokenizer's files stands for its directory.
    dir = path.parent_path();
    if (dir.empty()) dir = ".";
  }
  if (!fs::is_directory(dir, ec)) {
    throw Error(path.string() +
                ": tokenizer directory does not exist (expected a directory with "
                "tokenizer.json, or vocab.json and merges.txt)");
  }
  auto impl = std::make_shared<Impl>();
  impl->dir = dir;
  const bool fast = fs::exists(dir / "tokenizer.json", ec);
  if (fast) {
    tokenizer::load_tokenizer_json(*impl, dir / "tokenizer.json");
  } else if (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec)) {
    tokenizer::load_vocab_and_merges(*impl, dir);
  } else {
    throw Error(dir.string() +
                ": no tokenizer found: expected tokenizer.json, or vocab.json and merges.txt");
  }
  impl->index_bytes();
  tokenizer::load_config(*impl, dir);
  return Tokenizer(std::move(impl));
}

namespace {

// SentencePiece-style (llama.cpp's SPM path): a space before the text and after each control or
// user-defined token written in it; the BOS is added even when the text begins with one, as
// llama.cpp does (its golden ids have two).
std::vector<int32_t> encode_spm_text(const Tokenizer::Impl& m, const std::string& clean,
                                     bool add_special) {
  std::vector<int32_t> ids;
  if (add_special) ids = m.prefix_ids;
  bool after_special = true;
  for (const auto& segment : m.added.split(clean)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      after_special = true;
      continue;
    }
    if (m.spm_add_space_prefix && after_special) {
      m.encode_spm(" " + std::string(segment.text), ids);
    } else {
      m.encode_spm(segment.text, ids);
    }
    after_special = false;
  }
  if (add_special) ids.insert(ids.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return ids;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& m = *impl_;
  std::string clean = replace_invalid_utf8(text);
  if (m.spm) return encode_spm_text(m, clean, add_special);
  if (m.nfc && m.nfc_whole_text) clean = nfc_normalize(clean);
  std::vector<int32_t> ids;
  ids.reserve(clean.size() / 3 + 4);
  for (const auto& segment : m.added.split(clean)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      m.encode_plain(segment.text, ids);
    }
  }
  if (add_special) {
    // Never double the BOS (or any prefix/suffix) when the text already carries it, as a
    // rendered chat template does.
    if (!m.prefix_ids.empty()) {
      const bool has_prefix = ids.size() >= m.prefix_ids.size() &&
                              std::equal(m.prefix_ids.begin(), m.prefix_ids.end(), ids.begin());
      if (!has_prefix) ids.insert(ids.begin(), m.prefix_ids.begin(), m.prefix_ids.end());
    }
    if (!m.suffix_ids.empty()) {
      const bool has_suffix = ids.size() >= m.suffix_ids.size() &&
                              std::equal(m.suffix_ids.rbegin(), m.suffix_ids.rend(), ids.rbegin());
      if (!has_suffix) ids.insert(ids.end(), m.suffix_ids.begin(), m.suffix_ids.end());
    }
  }
  return ids;
}

namespace {

void check_id(const Tokenizer::Impl& m, int32_t id) {
  if (id < 0 || static_cast<std::size_t>(id) >= m.flags.size() ||
      (m.flags[static_cast<std::size_t>(id)] & Tokenizer::Impl::kPresent) == 0) {
    throw Error("token id " + std::to_string(id) + " is not in the vocabulary of " +
                m.dir.string() + " (valid ids: 0 to " + std::to_string(m.flags.size() - 1) + ")");
  }
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  // SentencePiece-style: the space the encoder put before the text is dropped from the first
  // token after a leading BOS, as llama.cpp's detokenizer does (StreamingDecoder keeps it: it
  // continues a prompt).
  std::size_t strip_at = ids.size();
  if (m.spm && m.spm_add_space_prefix) strip_at = !ids.empty() && ids[0] == m.bos ? 1 : 0;
  std::string bytes;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check_id(m, id);
    const uint8_t flags = m.flags[static_cast<std::size_t>(id)];
    if (skip_special && (flags & Impl::kSpecial) != 0) continue;
    std::string_view piece = m.id_to_bytes[static_cast<std::size_t>(id)];
    if (i == strip_at && (flags & (Impl::kAdded | Impl::kByte)) == 0 && !piece.empty() &&
        piece.front() == ' ')
      piece.remove_prefix(1);
    bytes += piece;
  }
  return replace_invalid_utf8(bytes);
}

std::string Tokenizer::token_text(int32_t id) const {
  check_id(*impl_, id);
  return impl_->id_to_bytes[static_cast<std::size_t>(id)];
}

std::string Tokenizer::token_string(int32_t id) const {
  check_id(*impl_, id);
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

int32_t Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->vocab.find(std::string(token));
  return it == impl_->vocab.end() ? -1 : it->second;
}

std::size_t Tokenizer::min_tokens(std::size_t bytes) const {
  return bytes / (impl_->max_token_bytes * (impl_->nfc ? 3 : 1));
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->flags.size());
}
int32_t Tokenizer::bos_id() const {
  return impl_->bos;
}
bool Tokenizer::adds_bos() const {
  return impl_->bos >= 0 && !impl_->prefix_ids.empty() && impl_->prefix_ids.front() == impl_->bos;
}
const std::vector<int32_t>& Tokenizer::eos_ids() const {
  return impl_->eos;
}
bool Tokenizer::is_eos(int32_t id) const {
  return std::binary_search(impl_->eos.begin(), impl_->eos.end(), id);
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(*impl_, id);
  return (impl_->flags[static_cast<std::size_t>(id)] & Impl::kSpecial) != 0;
}

bool Tokenizer::is_added(int32_t id) const {
  check_id(*impl_, id);
  return (impl_->flags[static_cast<std::size_t>(id)] & Impl::kAdded) != 0;
}

const std::string& Tokenizer::chat_template_text() const {
  return impl_->chat_template;
}

const std::optional<std::string>& Tokenizer::bos_token() const {
  return impl_->bos_token;
}

const std::optional<std::string>& Tokenizer::eos_token() const {
  return impl_->eos_token;
}
const std::filesystem::path& Tokenizer::dir() const {
  return impl_->dir;
}

}  // namespace rkv
