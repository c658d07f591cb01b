// The SentencePiece-style vocabulary of GGUF files (tokenizer.ggml.model = "llama"), encoded as
// llama.cpp does: spaces become U+2581 ("▁"), the text is split into UTF-8 characters, and the
// adjacent pair whose concatenation is the vocabulary token with the highest score is merged
// (leftmost first on equal scores) until no pair forms a token; a piece left without a token
// becomes its bytes' <0xXX> tokens. Control, unknown and user-defined tokens written in the text
// are matched first and encoded as themselves (leftmost, longest on ties, by the matcher of the
// byte-level path; llama.cpp takes the longest token first over the whole text, which differs
// only when two such tokens overlap); a space is put before the text at the start and after each
// such token (add_space_prefix).
#include <cmath>
#include <queue>

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/json_tables.h"
#include "tokenizer/tokenizer_impl.h"

namespace rkv {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

// Bytes of the UTF-8 character that starts with byte c (1 for a stray continuation byte).
std::size_t utf8_char_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

struct Symbol {
  int prev;
  int next;
  std::size_t start;
  std::size_t n;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  std::size_t size;
};

// Highest score first, then the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::Impl::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(raw.size() + raw.size() / 4);
  for (char c : raw) {
    if (c == ' ')
      text += kSpaceMark;
    else
      text += c;
  }
  std::vector<Symbol> symbols;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t n =
        std::min(utf8_char_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, index + 1, pos, n});
    pos += n;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::size_t size = symbols[left].n + symbols[right].n;
    auto it = vocab.find(text.substr(symbols[left].start, size));
    if (it == vocab.end() || static_cast<std::size_t>(it->second) >= scores.size()) return;
    queue.push({left, right, scores[static_cast<std::size_t>(it->second)], size});
  };
  for (std::size_t i = 1; i < symbols.size(); ++i)
    try_pair(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(b.left)];
    Symbol& right = symbols[static_cast<std::size_t>(b.right)];
    // Stale: one side was merged since this pair was queued.
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = b.left;
    try_pair(left.prev, b.left);
    try_pair(b.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<std::size_t>(i)];
    auto it = vocab.find(text.substr(s.start, s.n));
    if (it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    for (std::size_t k = 0; k < s.n; ++k) {
      const auto b = static_cast<unsigned char>(text[s.start + k]);
      if (byte_ids[b] < 0) {
        static const char* hex = "0123456789ABCDEF";
        throw Error(dir.string() + ": the byte 0x" + std::string{hex[b >> 4], hex[b & 15]} +
                    " has no token (<0x" + std::string{hex[b >> 4], hex[b & 15]} +
                    "> or itself) in the vocabulary, so this text cannot be encoded");
      }
      out.push_back(byte_ids[b]);
    }
  }
}

namespace tokenizer {

namespace {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string unescape_spaces(const std::string& token) {
  std::string out;
  out.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    if (token.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
      out += ' ';
      i += kSpaceMark.size();
    } else {
      out += token[i++];
    }
  }
  return out;
}

}  // namespace

void load_gguf_vocab(Tokenizer::Impl& impl, const std::filesystem::path& path) {
  const GgufFile g(path, MappedFile::Mode::Map);
  const std::string where = path.string();
  auto fail = [&](const std::string& what) -> void { throw Error(where + ": " + what); };
  const auto model = g.get_string("tokenizer.ggml.model");
  if (!model)
    fail(
        "no vocabulary in this GGUF file (metadata tokenizer.ggml.model is missing); give a "
        "tokenizer with --tokenizer");
  if (*model != "llama")
    fail("tokenizer.ggml.model '" + *model +
         "' is not supported yet (supported: llama, the SentencePiece-style vocabulary); give a "
         "tokenizer directory with --tokenizer");
  const auto* tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty())
    fail("metadata tokenizer.ggml.tokens is missing or empty");
  if (static_cast<int64_t>(tokens->size()) > kMaxTokenId + 1)
    fail("tokenizer.ggml.tokens has " + std::to_string(tokens->size()) + " tokens, more than the " +
         std::to_string(kMaxTokenId + 1) + " supported");
  const std::size_t n = tokens->size();
  const auto* scores = g.get_real_array("tokenizer.ggml.scores");
  const auto* types = g.get_int_array("tokenizer.ggml.token_type");
  if (scores != nullptr && scores->size() != n)
    fail("tokenizer.ggml.scores has " + std::to_string(scores->size()) + " entries for " +
         std::to_string(n) + " tokens");
  if (types != nullptr && types->size() != n)
    fail("tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries for " +
         std::to_string(n) + " tokens");

  impl.spm = true;
  impl.byte_ids.fill(-1);
  impl.scores.assign(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& text = (*tokens)[i];
    const int64_t type = types != nullptr ? (*types)[i] : kNormal;
    if (scores != nullptr) {
      // A NaN would break the merge queue's ordering.
      if (std::isnan((*scores)[i]))
        fail("tokenizer.ggml.scores[" + std::to_string(i) + "] (token '" + text + "') is NaN");
      impl.scores[i] = static_cast<float>((*scores)[i]);
    }
    switch (type) {
      case kNormal:
        impl.set_token(id, text, unescape_spaces(text), 0);
        break;
      case kUnknown:
      case kControl:
      case kUserDefined: {
        const bool special = type != kUserDefined;
        impl.set_token(id, text, text,
                       static_cast<uint8_t>(Tokenizer::Impl::kAdded |
                                            (special ? Tokenizer::Impl::kSpecial : 0)));
        if (!text.empty()) impl.added.add({text, id, special, false, false});
        break;
      }
      case kUnused:
        impl.set_token(id, text, std::string(), 0);
        break;
      case kByte: {
        // "<0x0A>"
        const int hi = text.size() == 6 ? hex_digit(text[3]) : -1;
        const int lo = text.size() == 6 ? hex_digit(text[4]) : -1;
        if (text.compare(0, 3, "<0x") != 0 || text.size() != 6 || text[5] != '>' || hi < 0 ||
            lo < 0)
          fail("byte token " + std::to_string(i) + " is '" + text + "', expected <0xXX>");
        const int b = hi * 16 + lo;
        impl.set_token(id, text, std::string(1, static_cast<char>(b)), Tokenizer::Impl::kByte);
        if (impl.byte_ids[static_cast<std::size_t>(b)] < 0)
          impl.byte_ids[static_cast<std::size_t>(b)] = id;
        break;
      }
      default:
        fail("token " + std::to_string(i) + " has unknown type " + std::to_string(type) +
             " in tokenizer.ggml.token_type (known: 1 to 6)");
    }
  }
  // A byte without a <0xXX> token may still be a token of its own (llama.cpp's fallback).
  for (int b = 0; b < 256; ++b) {
    if (impl.byte_ids[static_cast<std::size_t>(b)] >= 0) continue;
    auto it = impl.vocab.find(std::string(1, static_cast<char>(b)));
    if (it != impl.vocab.end()) impl.byte_ids[static_cast<std::size_t>(b)] = it->second;
  }

  auto token_id = [&](const char* key) -> int32_t {
    const auto v = g.get_uint(key);
    if (!v) return -1;
    if (*v >= n) return -1;  // llama.cpp writes 4294967295 for "none"
    return static_cast<int32_t>(*v);
  };
  impl.bos = token_id("tokenizer.ggml.bos_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (const int32_t id = token_id(key); id >= 0) impl.eos.push_back(id);
  std::sort(impl.eos.begin(), impl.eos.end());
  impl.eos.erase(std::unique(impl.eos.begin(), impl.eos.end()), impl.eos.end());
  // SentencePiece vocabularies add the BOS and not the EOS unless the file says otherwise.
  if (g.get_bool("tokenizer.ggml.add_bos_token").value_or(true) && impl.bos >= 0)
    impl.prefix_ids.push_back(impl.bos);
  const int32_t eos = token_id("tokenizer.ggml.eos_token_id");
  if (g.get_bool("tokenizer.ggml.add_eos_token").value_or(false) && eos >= 0)
    impl.suffix_ids.push_back(eos);
  impl.spm_add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  if (const auto tmpl = g.get_string("tokenizer.chat_template")) impl.chat_template = *tmpl;
}

}  // namespace tokenizer
}  // namespace rkv
