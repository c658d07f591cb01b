// One sequence of the continuous batch: its request, its KV slot and compressor, its sampler,
// and where it stands (prefilling, decoding, finished). The batch engine's scheduler reads and
// advances these; nothing else owns sequence state.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/batch_request.h"
#include "engine/kv_compressor.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"

namespace rkv {

struct Sequence {
  using Clock = std::chrono::steady_clock;

  std::uint64_t id = 0;
  BatchRequest request;
  int max_new = 0;                  // max_new_tokens clipped to the context
  int capacity = 0;                 // entries per (layer, KV head) of its slot
  std::size_t slot_bytes = 0;       // the slot's bytes (the cache at capacity)
  KvDtype kv_dtype = KvDtype::f32;  // what its cache stores keys and values in
  std::unique_ptr<SequenceCompressor> compressor;
  std::unique_ptr<KvCache> cache;  // allocated at admission, freed at retirement
  std::unique_ptr<Sampler> sampler;
  int prefilled = 0;    // prompt tokens already run
  int next_token = -1;  // sampled and not yet fed to the model
  std::vector<int> generated;
  bool finished = false;
  std::string stop_reason;  // "eos", "length", "stopped", "cancelled", "error"
  std::string error;        // what failed, for "error"
  Clock::time_point submitted, admitted, prefill_done;
  double decode_seconds = 0.0;
  int max_entries = 0;  // most entries a head held after any step

  int prompt_size() const { return static_cast<int>(request.prompt.size()); }
  bool prefilling() const { return prefilled < prompt_size(); }
  bool admitted_yet() const { return cache != nullptr; }
  void finish(const std::string& reason) {
    finished = true;
    stop_reason = reason;
  }
};

}  // namespace rkv
