// Decode-time KV compression inside the engine (ALGORITHMS.md 1): when to compress (triggers),
// prefill compression, H2O's per-step accumulation, and applying a policy's Selection to a
// sequence's cache. The policies themselves are the pure functions of rkv/compression.h.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "rkv/compression.h"

namespace rkv {

// Token ids the triggers need, looked up from the tokenizer (empty when unknown).
struct CompressionVocab {
  std::vector<int> newline_ids;  // the line-break tokens of ALGORITHMS.md 1 (`newline` trigger)
  int think_end_id = -1;         // </think> (`think_only`)
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
  SequenceCompressor(const CompressionParams& params, CompressionVocab vocab);

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

 private:
  CompressionParams params_;
  CompressionVocab vocab_;
  bool due_ = false;
  bool think_done_ = false;
  std::int64_t seq_len_ = 0;
  std::int64_t compressions_ = 0;
  double compression_seconds_ = 0.0;
  CompressionListener listener_;
  std::vector<float> queries_;  // scratch: window queries
};

// The forward-pass observer that runs the compressors of the sequences in a batch.
class CompressionObserver : public ForwardObserver {
 public:
  explicit CompressionObserver(ThreadPool* pool) : pool_(pool) {}
  void attach(const KvCache* cache, SequenceCompressor* compressor) { compressors_[cache] = compressor; }
  void detach(const KvCache* cache) { compressors_.erase(cache); }

  void after_kv_append(int layer, std::span<const ForwardRow> rows) override;
  bool wants_attention_probs() const override;
  void attention_probs(int layer, std::span<const ForwardRow> rows, std::size_t row, int kv_head,
                       const float* probs, int G, int n) override;

 private:
  ThreadPool* pool_;
  std::unordered_map<const KvCache*, SequenceCompressor*> compressors_;
};

}  // namespace rkv
