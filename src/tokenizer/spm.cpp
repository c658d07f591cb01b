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

void load_spm_tokens(Tokenizer::Impl& impl, const std::vector<std::string>& tokens,
                     const std::vector<double>* scores, const std::vector<int64_t>* types,
                     const GgufFail& fail) {
  const std::size_t n = tokens.size();
  impl.spm = true;
  impl.byte_ids.fill(-1);
  impl.scores.assign(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& text = tokens[i];
    const int64_t type = types != nullptr ? (*types)[i] : kGgufNormal;
    if (scores != nullptr) {
      // A NaN would break the merge queue's ordering.
      if (std::isnan((*scores)[i]))
        fail("tokenizer.ggml.scores[" + std::to_string(i) + "] (token '" + text + "') is NaN");
      impl.scores[i] = static_cast<float>((*scores)[i]);
    }
    switch (type) {
      case kGgufNormal:
        impl.set_token(id, text, unescape_spaces(text), 0);
        break;
      case kGgufUnknown:
      case kGgufControl:
      case kGgufUserDefined: {
        const bool special = type != kGgufUserDefined;
        impl.set_token(id, text, text,
                       static_cast<uint8_t>(Tokenizer::Impl::kAdded |
                                            (special ? Tokenizer::Impl::kSpecial : 0)));
        if (!text.empty()) impl.added.add({text, id, special, false, false});
        break;
      }
      case kGgufUnused:
        impl.set_token(id, text, std::string(), 0);
        break;
      case kGgufByte: {
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
}

}  // namespace tokenizer
}  // namespace rkv
