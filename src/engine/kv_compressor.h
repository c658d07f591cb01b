// Decode-time KV compression inside the engine (ALGORITHMS.md 1): when to compress (triggers),
// prefill compression, H2O's per-step accumulation, and applying a policy's Selection to a
// sequence's cache. The policies themselves are the pure functions of rkv/compression.h.
//
// SkipKV (ALGORITHMS.md 5) lives behind the same two classes, so any engine that creates one
// SequenceCompressor per sequence and one CompressionObserver per forward pass gets it:
//  - the SequenceCompressor owns the sequence's SentenceTracker (method skipkv, or steering on):
//    begin_decode_step() feeds it the step's input token (its text from CompressionVocab::
//    token_text), the observer's final_hidden() feeds it that token's final-layer hidden state,
//    and compress_layer_now() hands the tracker's per-position penalties to compress_layer;
//  - steering (SteeringParams) is applied by the observer's after_layer(): a_t * v is added to
//    layer k's output for the row of the sequence's current decode token when that token is a
//    delimiter, a_t from the sequence's own count of non-execution sentences.
// Prompt rows (prefill) are neither tracked nor steered: sentences are the generated text's.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/sentence_tracker.h"
#include "engine/steering.h"
#include "model/model.h"
#include "rkv/compression.h"

namespace rkv {

// Token ids the triggers need, looked up from the tokenizer (empty when unknown).
struct CompressionVocab {
  std::vector<int> newline_ids;  // the line-break tokens of ALGORITHMS.md 1 (`newline` trigger)
  int think_end_id = -1;         // </think> (`think_only`)
  // The raw text of a token id ("" for an id without one). skipkv and steering need it: a token
  // is a sentence delimiter when its text is one of CompressionParams::delimiters, and keywords
  // are found in the sentence's text (also across token boundaries). Cheap to copy (the
  // tokenizer's tables are shared).
  std::function<std::string(int)> token_text;
};

// One compression, as reported to a trace.
struct CompressionEvent {
  std::int64_t step = 0;  // tokens of the sequence processed when it happened
  int layer = 0;
  int n_before = 0;
  const KvCache* cache = nullptr;
  const Diagnostics* diagnostics = nullptr;  // per head scores (may be empty vectors)
  const LayerView* view = nullptr;           // the inputs (for --dump-case), before compaction
  const Selection* selection = nullptr;      // what is kept (indices into the cache before)
  const CompressionParams* params = nullptr;
};
using CompressionListener = std::function<void(const CompressionEvent&)>;

// The compression state of one sequence.
class SequenceCompressor {
 public:
  // Throws rkv::Error for invalid params or steering, and when skipkv or steering is asked for
  // without vocab.token_text.
  SequenceCompressor(const CompressionParams& params, CompressionVocab vocab,
                     SteeringParams steering = {});

  const CompressionParams& params() const { return params_; }
  bool enabled() const { return params_.method != Method::fullkv; }
  // Entries per (layer, KV head) the sequence's cache needs: budget + buffer (at least the
  // prompt, which is compressed only after prefill; plus everything after </think> with
  // think_only); fullkv: prompt + max_new_tokens.
  int cache_capacity(int prompt_tokens, int max_new_tokens) const;
  // Queries the cache's ring must keep.
  int window() const;
  // Prepares a new cache (per-entry state of new entries).
  void init_cache(KvCache& cache) const;

  // Before a decode step whose input token is `token` at position `position` (so `position+1`
  // tokens have been processed once its KV is appended): decides whether this step compresses.
  void begin_decode_step(int token, std::int64_t position, const KvCache& cache);
  bool due() const { return due_; }
  // After prefill of `prompt_tokens`: compresses every layer once when the prompt exceeds the
  // budget (ALGORITHMS.md 1, prefill).
  void compress_after_prefill(KvCache& cache, std::int64_t prompt_tokens, ThreadPool* pool);
  // Compresses one layer now (when the policy says n_all warrants it).
  void compress_layer_now(KvCache& cache, int layer, std::int64_t seq_len, ThreadPool* pool);

  // H2O: adds one query token's attention probabilities ([G][n]) of (layer, kv_head) into the
  // per-entry accumulators.
  void accumulate(KvCache& cache, int layer, int kv_head, const float* probs, int G, int n) const;

  void set_listener(CompressionListener listener) { listener_ = std::move(listener); }
  std::int64_t compressions() const { return compressions_; }
  double compression_seconds() const { return compression_seconds_; }

  // ---- SkipKV ----
  // Whether the observer must hand this sequence its final-layer hidden states (skipkv).
  bool wants_final_hidden() const { return params_.method == Method::skipkv; }
  const SteeringParams& steering() const { return steering_; }
  // The sentence tracker (null unless skipkv or steering).
  const SentenceTracker* sentences() const { return sentences_.get(); }
  // Final-layer hidden state [hidden_size] of this sequence's row at `position`: taken when it
  // is the current decode token (begin_decode_step), ignored otherwise.
  void observe_final_hidden(std::int32_t position, const float* hidden, int hidden_size);
  // Steering: adds a_t * v to `hidden` [hidden_size] (the output of `layer` for this sequence's
  // row at `position`) when layer is the vector's layer, position the current decode token's
  // and that token a delimiter. Returns a_t when applied, 0 otherwise. a_t = 0 adds nothing, so
  // a0 = gamma = 0 reproduces the unsteered computation bit for bit.
  float steer(int layer, std::int32_t position, float* hidden, int hidden_size) const;

 private:
  void forget_evicted_sentences(const KvCache& cache);

  CompressionParams params_;
  CompressionVocab vocab_;
  SteeringParams steering_;
  std::unique_ptr<SentenceTracker> sentences_;
  bool due_ = false;
  bool think_done_ = false;
  std::int64_t seq_len_ = 0;
  std::int64_t decode_position_ = -1;  // position of the current decode step's input token
  bool decode_token_is_delimiter_ = false;
  std::int64_t compressions_ = 0;
  std::int64_t compressions_seen_ = 0;  // compressions_ when sentences were last pruned
  double compression_seconds_ = 0.0;
  CompressionListener listener_;
  std::vector<float> queries_;  // scratch: window queries
  // scratch: [kv_heads][n_all][head_dim] float32 keys of a cache stored in another dtype
  std::vector<std::vector<float>> keys_f32_;
  std::vector<std::uint8_t> cached_;  // scratch: which positions some (layer, head) holds
};

// The forward-pass observer that runs the compressors of the sequences in a batch.
class CompressionObserver : public ForwardObserver {
 public:
  // hidden_size: the model's (ModelConfig::hidden_size). Needed by skipkv (sentence embeddings)
  // and steering; attach() throws rkv::Error for such a compressor when it is 0 or does not
  // match the steering vector.
  explicit CompressionObserver(ThreadPool* pool, int hidden_size = 0)
      : pool_(pool), hidden_size_(hidden_size) {}
  void attach(const KvCache* cache, SequenceCompressor* compressor);
  void detach(const KvCache* cache);

  void after_kv_append(int layer, std::span<const ForwardRow> rows) override;
  void after_layer(int layer, std::span<const ForwardRow> rows, float* hidden) override;
  void final_hidden(std::span<const ForwardRow> rows, const float* hidden) override;
  bool wants_attention_probs() const override;
  // True while an attached compressor compresses (any method but fullkv), steers or takes hidden
  // states.
  bool needs_host() const override;
  void attention_probs(int layer, std::span<const ForwardRow> rows, std::size_t row, int kv_head,
                       const float* probs, int G, int n) override;

 private:
  void count(const SequenceCompressor* compressor, int delta);

  ThreadPool* pool_;
  int hidden_size_;
  std::unordered_map<const KvCache*, SequenceCompressor*> compressors_;
  int steering_users_ = 0;  // attached compressors with steering
  int hidden_users_ = 0;    // attached compressors that want final hidden states
  int enabled_users_ = 0;   // attached compressors that compress (SequenceCompressor::enabled)
};

}  // namespace rkv
