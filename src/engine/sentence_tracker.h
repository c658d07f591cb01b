// SkipKV's sentence tracking for one sequence (ALGORITHMS.md 5): the generated tokens are split
// into sentences at delimiter tokens (a run of consecutive delimiters ends ONE sentence), each
// sentence keeps its span of original positions, its label (non-execution when its text holds
// one of the keywords) and the running mean of its tokens' final-layer hidden states. When a
// sentence completes, its cosine with every earlier sentence still cached is computed once, so
// the penalties (the largest similarity above tau with a LATER sentence) are kept up to date in
// O(sentences * hidden) per sentence instead of O(sentences^2 * hidden) per compression.
//
// The penalties are published per ORIGINAL POSITION (position_penalty()), which is exactly what
// rkv::LayerView::position_penalty wants: the cache stores each entry's original position, so
// no span ever needs re-mapping into cache indices after evictions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rkv {

class SentenceTracker {
 public:
  struct Sentence {
    std::int32_t begin = 0;  // original position of its first token
    std::int32_t end = 0;    // original position of its last token (its last delimiter), inclusive
    bool non_execution = false;  // its text contains a keyword
    bool complete = false;       // its delimiter run ended and the next sentence began
    bool forgotten = false;      // none of its entries is cached any more: embedding freed
    int hidden_count = 0;        // hidden states averaged into its embedding
    float penalty = 0.0f;        // largest cosine > tau with a later sentence, else 0
  };

  // delimiters: texts of the tokens that end a sentence (exact match of a token's text);
  // keywords: case-sensitive substrings marking a non-execution sentence; tau: the redundancy
  // threshold; embeddings: whether hidden states are averaged and penalties computed (skipkv),
  // or only the segmentation and labels are kept (steering alone).
  SentenceTracker(std::vector<std::string> delimiters, std::vector<std::string> keywords, float tau,
                  bool embeddings);

  // The next generated token, as the input of a decode step: its original position (strictly
  // increasing) and its text. Returns whether it is a delimiter. A non-delimiter that follows a
  // delimiter completes the previous sentence (its embedding is final by then: every one of its
  // tokens was an input of an earlier step) and opens a new one.
  bool push_token(std::int32_t position, std::string_view text);

  // The final-layer hidden state [hidden_size] of the token at `position`; only the most recently
  // pushed token's state is taken (once), anything else (prompt rows) is ignored. The first call
  // fixes the hidden size; a different size later throws rkv::Error.
  void add_hidden(std::int32_t position, const float* hidden, int hidden_size);

  // Whether the most recently pushed token is a delimiter.
  bool last_is_delimiter() const { return last_is_delimiter_; }
  // N_o of the steering strength: sentences labelled non-execution so far, the open one included.
  int non_execution_count() const { return non_execution_count_; }
  const std::vector<Sentence>& sentences() const { return sentences_; }
  // [positions seen] penalty of the sentence of each original position (0 elsewhere).
  std::span<const float> position_penalty() const { return position_penalty_; }
  // The embedding (mean hidden state) of a completed, not forgotten sentence; empty otherwise.
  std::span<const float> embedding(std::size_t sentence) const;

  // Frees the embeddings of completed sentences none of whose positions is cached any more:
  // cached[p] != 0 when some (layer, KV head) still holds position p (positions beyond the span
  // count as cached). Such a sentence can never be evicted again, and as the LATER sentence of
  // a pair it was compared with every earlier one when it completed, so it is never needed.
  void forget_uncached(std::span<const std::uint8_t> cached);
  // Bytes held by embeddings (bounded by the cached sentences, not the generation length).
  std::size_t embedding_bytes() const;

 private:
  void complete_current();
  void raise_penalty(std::size_t sentence, float value);

  std::vector<std::string> delimiters_;
  std::vector<std::string> keywords_;
  float tau_;
  bool embeddings_;
  std::size_t longest_keyword_ = 0;

  std::vector<Sentence> sentences_;
  std::vector<std::vector<float>> means_;  // [sentence][hidden], empty until complete / forgotten
  std::vector<float> position_penalty_;    // [positions seen]
  std::vector<float> current_sum_;         // [hidden] of the open sentence
  std::string keyword_tail_;  // last bytes of the open sentence's text (keywords across tokens)
  int hidden_size_ = 0;
  std::int32_t last_position_ = -1;
  std::int32_t last_hidden_position_ = -1;
  bool last_is_delimiter_ = false;
  int non_execution_count_ = 0;
};

}  // namespace rkv
