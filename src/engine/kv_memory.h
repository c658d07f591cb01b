// One sequence's KV memory (ALGORITHMS.md 1): the only owner and writer of its KvCache besides
// the forward pass's appends. It decides when to compress (triggers), plans a compression with
// the pure policy of rkv/compression.h and applies the plan (KvCache::compact: plan, then
// apply, as llama.cpp's memory contexts do), keeps H2O's accumulators and G-KV's per-entry
// state, and holds SkipKV's sentence tracker and steering. It reads what the method needs
// (window queries, keys, positions, attention probabilities, final hidden states, token text),
// asked of the method's record by need (MethodInfo::needs), never by the method's name.
//
// The engine's model runner (engine/model_runner.h) drives it between the layers of a pass:
//  - begin_decode_step() before a decode step: the step's input token (its text from
//    CompressionVocab::token_text for the sentence tracker) decides whether the step compresses;
//  - compress_layer() between a layer's KV append and its attention when due();
//  - accumulate() with the attention probabilities of its rows (h2o);
//  - steer() on the residual stream after the steering layer (a_t * v on a delimiter token);
//  - observe_final_hidden() with the final norm's output (skipkv sentence embeddings).
// Prompt rows (prefill) are neither tracked nor steered: sentences are the generated text's.
// Its settings are the request's after Engine::prepare, the one place they are validated.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/query_stats.h"
#include "engine/sentence_tracker.h"
#include "engine/steering.h"
#include "kv/kv_cache.h"
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
  // The first position whose attention reads the compacted cache: step - 1 for a decode step's
  // compression (between that token's KV append and its attention), step after a prompt, a
  // chunk of seed tokens or a whole-pass method's step (after the pass). Positions before it
  // saw the cache as it was; every later one sees the kept entries plus the positions appended
  // from `step` on, up to itself (docs/USAGE.md, "Attention masks from a trace").
  std::int64_t first_reader = 0;
  int layer = 0;
  int n_before = 0;
  const KvCache* cache = nullptr;
  const Diagnostics* diagnostics = nullptr;  // per head scores (may be empty vectors)
  const LayerView* view = nullptr;           // the inputs (for --dump-case), before compaction
  const Selection* selection = nullptr;      // what is kept (indices into the cache before)
  const CompressionParams* params = nullptr;
};
using CompressionListener = std::function<void(const CompressionEvent&)>;

// What a method needs of the model itself beyond its caches (needs.query_stats): TriAttention's
// calibration statistics (`rkv calibrate`) and the model's RoPE frequencies.
struct ModelCalibration {
  std::shared_ptr<const QueryStats> query_stats;  // null: none loaded
  std::span<const float> rope_frequencies;        // [head_dim / 2]; the model outlives the memory
  float rope_scale = 1.0f;                        // YaRN's magnitude on cos and sin (1 otherwise)
};

class KvMemory {
 public:
  // Entries per (layer, KV head) a sequence's cache needs: budget + buffer (at least the
  // prompt, which is compressed only after prefill; plus everything after </think> with
  // think_only); a method that never compresses: prompt + max_new_tokens.
  static int capacity_for(const CompressionParams& params, int prompt_tokens, int max_new_tokens);
  // The shape of a cache of `capacity` entries per (layer, KV head) for the method: the model's
  // layers and heads, the query ring the method reads (none for one that never compresses), and
  // `dtype`. What admission allocates and what Engine::prepare sizes the slot by.
  static KvCacheShape shape_for(const Model& model, const CompressionParams& params, int capacity,
                                KvDtype dtype);

  // `params` and `steering` as Engine::prepare validated them; skipkv and steering need
  // vocab.token_text (prepare refuses them without a tokenizer); triattention needs
  // calibration.query_stats (prepare refuses it without).
  KvMemory(const CompressionParams& params, CompressionVocab vocab, SteeringParams steering = {},
           ModelCalibration calibration = {});

  // Allocates the cache (at admission): shape_for() with capacity_for()'s capacity.
  // `prompt_tokens`: the prompt's entries, which a whole-pass method pins (TriAttention; the
  // seed tokens of Request::seed_tokens are not prompt).
  void allocate(const KvCacheShape& shape, int prompt_tokens = 0);
  bool allocated() const { return cache_ != nullptr; }
  // The cache, read-only; its writable pointer goes only to the forward pass's rows (appends).
  const KvCache& cache() const { return *cache_; }
  KvCache* cache_for_appends() { return cache_.get(); }

  const CompressionParams& params() const { return params_; }
  const MethodInfo& method() const { return method_; }
  bool compresses() const { return method_.compresses; }

  // Before a decode step whose input token is `token` at position `position` (so `position+1`
  // tokens have been processed once its KV is appended): decides whether this step compresses.
  void begin_decode_step(int token, std::int64_t position);
  // Whether the current decode step compresses layer by layer (between each layer's append and
  // attention): per_layer methods.
  bool due() const { return due_; }
  // After the forward pass of a decode step (a whole_pass method: TriAttention): compresses
  // every layer at once when its trigger says so. Nothing for a per_layer method.
  void end_decode_step(ThreadPool* pool);
  // Plans and applies one compression of `layer` now (when the policy says n_all warrants it),
  // `seq_len` tokens processed; `first_reader`: the first position whose attention reads the
  // result (CompressionEvent::first_reader).
  void compress_layer(int layer, std::int64_t seq_len, std::int64_t first_reader, ThreadPool* pool);
  // After a prompt (or a chunk of seed tokens) of `tokens`: compresses every layer once when it
  // exceeds the budget (ALGORITHMS.md 1, prefill). A whole-pass method never compresses a prompt
  // (TRIATTENTION.md 6.1), only seed tokens beyond the budget.
  void compress_all_layers(std::int64_t tokens, ThreadPool* pool);

  // Whether the runner must hand it every row's attention probabilities (h2o).
  bool wants_attention() const { return method_.needs.step_attention; }
  // H2O: adds one query token's attention probabilities ([G][n]) of (layer, kv_head) into the
  // per-entry accumulators.
  void accumulate(int layer, int kv_head, const float* probs, int G, int n);

  // ---- SkipKV ----
  // Whether the runner must hand it the final norm's output (skipkv's sentence embeddings).
  bool wants_final_hidden() const { return method_.needs.final_hidden; }
  const SteeringParams& steering() const { return steering_; }
  bool steers() const { return steering_.enabled(); }
  // Whether it reads or writes host memory during a pass (compression, steering, embeddings):
  // a device backend cannot serve it.
  bool needs_host() const { return compresses() || steers() || wants_final_hidden(); }
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

  void set_listener(CompressionListener listener) { listener_ = std::move(listener); }
  std::int64_t compressions() const { return compressions_; }
  double compression_seconds() const { return compression_seconds_; }

 private:
  void forget_evicted_sentences();
  // One whole-pass compression of every layer (plan, then apply), `tokens` processed so far.
  void compress_whole_pass(std::int64_t tokens, ThreadPool* pool);
  // Tells the listener (diagnostics and view may be null) and applies one layer's plan.
  void apply(int layer, std::int64_t step, std::int64_t first_reader, int n_before,
             const Selection& selection, const Diagnostics* diagnostics, const LayerView* view);

  CompressionParams params_;
  const MethodInfo& method_;  // the method's record: what it needs, asked by need
  CompressionVocab vocab_;
  SteeringParams steering_;
  ModelCalibration calibration_;
  int prompt_tokens_ = 0;           // pinned by a whole-pass method
  std::unique_ptr<KvCache> cache_;  // [layers][kv_heads][capacity] rows; null until admitted
  std::unique_ptr<SentenceTracker> sentences_;
  bool due_ = false;
  bool in_decode_step_ = false;  // between begin_decode_step and end_decode_step
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
  std::vector<std::vector<float>> keys_f32_;  // whole pass: [layers * kv_heads]
  std::vector<std::uint8_t> cached_;          // scratch: which positions some (layer, head) holds
};

}  // namespace rkv
