#include "engine/sentence_tracker.h"

#include <algorithm>

#include "core/error.h"
#include "rkv/compression.h"

namespace rkv {

SentenceTracker::SentenceTracker(std::vector<std::string> delimiters,
                                 std::vector<std::string> keywords, float tau, bool embeddings)
    : delimiters_(std::move(delimiters)),
      keywords_(std::move(keywords)),
      tau_(tau),
      embeddings_(embeddings) {
  for (const auto& k : keywords_) longest_keyword_ = std::max(longest_keyword_, k.size());
}

bool SentenceTracker::push_token(std::int32_t position, std::string_view text) {
  if (position <= last_position_) {
    throw Error("sentence tracking: token position " + std::to_string(position) +
                " after position " + std::to_string(last_position_) + " (positions must increase)");
  }
  const bool delimiter =
      std::find(delimiters_.begin(), delimiters_.end(), text) != delimiters_.end();
  // A new sentence starts at the first token, and at the first non-delimiter after a delimiter
  // run (consecutive delimiters merge into the sentence they end).
  if (sentences_.empty() || (last_is_delimiter_ && !delimiter)) {
    if (!sentences_.empty()) complete_current();
    Sentence s;
    s.begin = position;
    sentences_.push_back(s);
    means_.emplace_back();
    keyword_tail_.clear();
    std::fill(current_sum_.begin(), current_sum_.end(), 0.0f);
  }
  Sentence& cur = sentences_.back();
  cur.end = position;
  if (!cur.non_execution && longest_keyword_ > 0) {
    // A keyword may be split over tokens: look in the tail of the text before this token plus
    // this token's text, then keep the last longest_keyword - 1 bytes.
    keyword_tail_.append(text);
    for (const auto& k : keywords_) {
      if (keyword_tail_.find(k) != std::string::npos) {
        cur.non_execution = true;
        ++non_execution_count_;
        break;
      }
    }
    if (keyword_tail_.size() >= longest_keyword_)
      keyword_tail_.erase(0, keyword_tail_.size() - (longest_keyword_ - 1));
  }
  if (embeddings_ && static_cast<std::size_t>(position) >= position_penalty_.size())
    position_penalty_.resize(static_cast<std::size_t>(position) + 1, 0.0f);
  last_position_ = position;
  last_is_delimiter_ = delimiter;
  return delimiter;
}

void SentenceTracker::add_hidden(std::int32_t position, const float* hidden, int hidden_size) {
  if (!embeddings_ || sentences_.empty() || position != last_position_ ||
      position == last_hidden_position_) {
    return;
  }
  if (hidden_size_ == 0) {
    if (hidden_size < 1) throw Error("sentence tracking: hidden size must be positive");
    hidden_size_ = hidden_size;
    current_sum_.assign(static_cast<std::size_t>(hidden_size), 0.0f);
  } else if (hidden_size != hidden_size_) {
    throw Error("sentence tracking: hidden state of size " + std::to_string(hidden_size) +
                " after states of size " + std::to_string(hidden_size_));
  }
  for (int i = 0; i < hidden_size; ++i) current_sum_[static_cast<std::size_t>(i)] += hidden[i];
  ++sentences_.back().hidden_count;
  last_hidden_position_ = position;
}

void SentenceTracker::complete_current() {
  const std::size_t idx = sentences_.size() - 1;
  Sentence& s = sentences_[idx];
  s.complete = true;
  if (!embeddings_ || s.hidden_count == 0) return;  // no embedding: never similar to anything
  std::vector<float>& mean = means_[idx];
  mean.resize(current_sum_.size());
  const float inv = 1.0f / static_cast<float>(s.hidden_count);
  for (std::size_t i = 0; i < mean.size(); ++i) mean[i] = current_sum_[i] * inv;
  // The new sentence is the LATER one of every pair it forms: only earlier ones are penalised.
  for (std::size_t k = 0; k < idx; ++k) {
    if (means_[k].empty()) continue;
    const float c = sentence_cosine(means_[k].data(), mean.data(), hidden_size_);
    if (c > tau_) raise_penalty(k, c);
  }
}

void SentenceTracker::raise_penalty(std::size_t sentence, float value) {
  Sentence& s = sentences_[sentence];
  if (!(value > s.penalty)) return;
  s.penalty = value;
  std::fill(position_penalty_.begin() + s.begin, position_penalty_.begin() + s.end + 1, value);
}

std::span<const float> SentenceTracker::embedding(std::size_t sentence) const {
  if (sentence >= means_.size()) return {};
  return means_[sentence];
}

void SentenceTracker::forget_uncached(std::span<const std::uint8_t> cached) {
  for (std::size_t i = 0; i < sentences_.size(); ++i) {
    Sentence& s = sentences_[i];
    if (!s.complete || s.forgotten) continue;
    bool any = false;
    for (std::int32_t p = s.begin; p <= s.end && !any; ++p)
      any = static_cast<std::size_t>(p) >= cached.size() || cached[static_cast<std::size_t>(p)];
    if (any) continue;
    s.forgotten = true;
    std::vector<float>().swap(means_[i]);
  }
}

std::size_t SentenceTracker::embedding_bytes() const {
  std::size_t bytes = current_sum_.capacity() * sizeof(float);
  for (const auto& m : means_) bytes += m.capacity() * sizeof(float);
  return bytes;
}

}  // namespace rkv
