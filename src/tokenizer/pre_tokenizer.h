// The pre-tokenizer: splits normalized text into words with one or more regular expressions
// (PCRE2, Unicode mode, JIT when available), as the Hugging Face "Split" pre-tokenizer does,
// with its delimiter behaviours. Words are views into the input text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::tokenizer {

// GPT-2's pattern (ByteLevel pre-tokenizer with use_regex=true).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2Tokenizer's pattern (digits one per word).
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama-3's pattern (digits in groups of up to three).
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

class Regex {
 public:
  // literal: the pattern is a plain string. Throws rkv::Error (mentioning `where`) when the
  // pattern does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte offsets of all non-overlapping, non-empty matches.
  // The text must be valid UTF-8.
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

class PreTokenizer {
 public:
  void add_split(const std::string& pattern, bool literal, SplitBehavior behavior, bool invert,
                 const std::string& where);
  bool empty() const { return steps_.empty(); }

  // The words of a text; with no split step, the whole text is one word.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Step {
    Regex regex;
    SplitBehavior behavior;
    bool invert;
  };
  std::vector<Step> steps_;
};

}  // namespace rkv::tokenizer
