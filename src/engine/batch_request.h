// What the batch engine takes and gives back for one sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/kv_compressor.h"
#include "engine/sampler.h"
#include "engine/steering.h"
#include "rkv/kv_dtype.h"

namespace rkv {

struct BatchRequest {
  std::vector<int> prompt;
  int max_new_tokens = 512;
  // The last seed_tokens of the prompt stand for tokens already generated (rkv bench
  // --steady-state starts sequences at staggered depths this way). They are prefilled like the
  // prompt, but a compressing method takes them in chunks of at most its buffer, compressing
  // after each (as after a prompt, ALGORITHMS.md 1), so the cache needs only budget + buffer
  // entries, as it would after generating them. 0: none.
  int seed_tokens = 0;
  SamplingParams sampling;
  std::vector<int> eos_ids;
  bool ignore_eos = false;
  CompressionParams compression = CompressionParams::defaults(Method::fullkv);
  CompressionVocab compression_vocab;
  CompressionListener on_compression;
  SteeringParams steering;  // SkipKV adaptive steering (default: none)
  // The KV cache's dtype (default: the engine's, else the model's default_kv_dtype()).
  std::optional<KvDtype> kv_dtype;
  // Called with every generated token (eos excluded); returning false finishes the request.
  std::function<bool(int token)> on_token;
  // Optional per-token timing hook: called after each decode step of this sequence with the
  // token's position and the step's wall time in seconds (the latency-against-position plot).
  std::function<void(int position, double seconds)> on_step_time;
};

struct BatchResult {
  std::uint64_t id = 0;
  std::vector<int> tokens;
  std::string stop_reason;  // "eos", "length", "stopped", "cancelled", "error"
  std::string error;        // "error": what failed (the forward pass that carried the sequence)
  int prompt_tokens = 0;
  std::size_t kv_bytes = 0;  // the sequence's slot
  KvDtype kv_dtype = KvDtype::f32;
  int cache_capacity = 0;
  std::int64_t compressions = 0;
  double compression_seconds = 0.0;
  std::size_t kv_bytes_used = 0;  // entries held at the end
  int max_cache_entries = 0;      // most entries a head held after any step
  double queued_seconds = 0.0, prefill_seconds = 0.0, decode_seconds = 0.0;
};

}  // namespace rkv
