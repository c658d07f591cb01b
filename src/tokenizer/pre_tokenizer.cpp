// Regex splitting with PCRE2 (PCRE2_UTF | PCRE2_UCP so \s, \p{L}, \p{N} follow Unicode).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>

#include "core/error.h"

namespace rkv::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& where)
    : code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (literal) options |= PCRE2_LITERAL;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &error, &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(where + ": pre-tokenizer regex does not compile at offset " +
                std::to_string(offset) + ": " + reinterpret_cast<const char*>(message) +
                " (pattern: " + pattern + ")");
  }
  // JIT is an optimisation only; without it pcre2_match interprets the pattern.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view text,
                     std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  struct MatchData {
    pcre2_match_data* data;
    ~MatchData() { pcre2_match_data_free(data); }
  } match{pcre2_match_data_create_from_pattern(code_->code, nullptr)};
  if (match.data == nullptr) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(std::string("tokenizer: pre-tokenizer regex failed on a text of ") +
                  std::to_string(text.size()) +
                  " bytes: " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const std::size_t begin = ovector[0];
    const std::size_t end = ovector[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {
      // Skip an empty match by one whole character.
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
}

void PreTokenizer::add_split(const std::string& pattern, bool literal, SplitBehavior behavior,
                             bool invert, const std::string& where) {
  steps_.push_back({Regex(pattern, literal, where), behavior, invert});
}

namespace {

struct Span {
  std::size_t begin, end;
  bool is_match;
};

// Applies one Split step to one word, following the Hugging Face delimiter behaviours.
void split_word(std::string_view word, const Regex& regex, SplitBehavior behavior, bool invert,
                std::vector<std::pair<std::size_t, std::size_t>>& scratch,
                std::vector<std::string_view>& out) {
  scratch.clear();
  regex.find_all(word, scratch);
  std::vector<Span> spans;
  spans.reserve(scratch.size() * 2 + 1);
  std::size_t pos = 0;
  for (const auto& [b, e] : scratch) {
    if (b > pos) spans.push_back({pos, b, invert});
    spans.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < word.size()) spans.push_back({pos, word.size(), invert});

  std::vector<Span> pieces;
  pieces.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      pieces = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) pieces.push_back(s);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) {
          pieces.back().begin = it->begin;
        } else {
          pieces.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match && previous_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
  }
  for (const Span& s : pieces) {
    if (s.end > s.begin) out.push_back(word.substr(s.begin, s.end - s.begin));
  }
}

}  // namespace

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  words.push_back(text);
  std::vector<std::pair<std::size_t, std::size_t>> scratch;
  for (const Step& step : steps_) {
    std::vector<std::string_view> next;
    next.reserve(words.size() * 2);
    for (std::string_view word : words) {
      split_word(word, step.regex, step.behavior, step.invert, scratch, next);
    }
    words = std::move(next);
  }
  return words;
}

}  // namespace rkv::tokenizer
