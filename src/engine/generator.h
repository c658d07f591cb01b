// Single-sequence generation: prefill (chunked), then decode token by token, sampling, eos and
// max-token stops, timing and KV-memory accounting. Callers handle text (streaming decode, stop
// strings) through the on_token callback.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kv_compressor.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace rkv {

struct GenerateOptions {
  int max_new_tokens = 512;
  SamplingParams sampling;
  std::vector<int> eos_ids;  // stop on any of these (the eos token is not emitted)
  bool ignore_eos = false;
  int context_size = 0;     // 0: the model's max_position_embeddings
  int prefill_chunk = 512;  // prompt tokens per forward pass
  // KV compression (default: fullkv, no eviction) and the token ids its triggers need.
  CompressionParams compression = CompressionParams::defaults(Method::fullkv);
  CompressionVocab compression_vocab;
  CompressionListener on_compression;  // observes every compression (traces, case dumps)
  // SkipKV adaptive steering (ALGORITHMS.md 5; default: none). The vector must fit the model.
  SteeringParams steering;
};

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  std::size_t kv_bytes_allocated = 0;  // the sequence's cache at capacity
  std::size_t kv_bytes_used = 0;       // entries held at the end
  std::string stop_reason;             // "eos", "length", "stopped" (by the callback)
  int cache_capacity = 0;              // entries per (layer, KV head)
  int max_cache_entries = 0;           // most entries a head held after any step
  std::int64_t compressions = 0;       // layer compressions performed
  double compression_seconds = 0.0;
  double decode_tokens_per_second() const;
  double prefill_tokens_per_second() const;
};

class Generator {
 public:
  Generator(const Model& model, ThreadPool& pool) : model_(model), pool_(pool) {}

  // Generates after `prompt`. on_token(id) is called for every generated token (eos excluded);
  // returning false stops generation. Throws rkv::Error for an empty prompt, token ids outside
  // the vocabulary, or a prompt that does not fit the context.
  GenerateStats generate(std::span<const int> prompt, const GenerateOptions& options,
                         const std::function<bool(int)>& on_token);

 private:
  const Model& model_;
  ThreadPool& pool_;
};

// Runs `tokens` through the model in chunks of `chunk` rows (positions start at
// `first_position`); writes the logits of the last token to `last_logits` when not null.
void prefill(const Model& model, KvCache& cache, std::span<const int> tokens, int first_position,
             int chunk, ForwardScratch& scratch, ThreadPool& pool, float* last_logits,
             ForwardObserver* observer = nullptr);

}  // namespace rkv
