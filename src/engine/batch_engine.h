// Continuous batching under a KV memory cap (DESIGN.md property 5, issue "Continuous batching").
//
// Every step is one forward pass that advances every running sequence by one token, with the
// prompts of newly admitted sequences prefilled in chunks inside the same passes, so the weights
// are read once per step for all sequences. Each sequence has its own compression method,
// budget, sampling and stop conditions, and its own fixed-size KV cache (its "slot"): a
// request is admitted only when its slot fits under the memory cap, so the cap can never be
// exceeded, and a request whose slot alone exceeds the cap is rejected at submission.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kv_compressor.h"
#include "engine/sampler.h"
#include "engine/steering.h"
#include "model/model.h"

namespace rkv {

struct BatchRequest {
  std::vector<int> prompt;
  int max_new_tokens = 512;
  SamplingParams sampling;
  std::vector<int> eos_ids;
  bool ignore_eos = false;
  CompressionParams compression = CompressionParams::defaults(Method::fullkv);
  CompressionVocab compression_vocab;
  CompressionListener on_compression;
  SteeringParams steering;  // SkipKV adaptive steering (default: none)
  // Called with every generated token (eos excluded); returning false finishes the request.
  std::function<bool(int token)> on_token;
  // Optional per-token timing hook: called after each decode step of this sequence with the
  // token's position and the step's wall time in seconds (the latency-against-position plot).
  std::function<void(int position, double seconds)> on_step_time;
};

struct BatchResult {
  std::uint64_t id = 0;
  std::vector<int> tokens;
  std::string stop_reason;  // "eos", "length", "stopped"
  int prompt_tokens = 0;
  std::size_t kv_bytes = 0;  // the sequence's slot
  int cache_capacity = 0;
  std::int64_t compressions = 0;
  double compression_seconds = 0.0;
  std::size_t kv_bytes_used = 0;  // entries held at the end
  int max_cache_entries = 0;      // most entries a head held after any step
  double queued_seconds = 0.0, prefill_seconds = 0.0, decode_seconds = 0.0;
};

struct BatchEngineOptions {
  std::size_t kv_memory_bytes = 0;  // 0: no cap
  int max_batch = 0;                // most sequences running at once (0: no limit but the cap)
  int prefill_chunk = 256;          // prompt tokens per step, over all prefilling sequences
  int context_size = 0;             // 0: the model's max_position_embeddings
};

class BatchEngine {
 public:
  BatchEngine(const Model& model, ThreadPool& pool, BatchEngineOptions options);
  ~BatchEngine();

  // Bytes of a sequence's KV slot for this request (its cache at capacity).
  std::size_t slot_bytes(const BatchRequest& request) const;
  // How many sequences like `request` fit under the cap at once (max_batch if no cap).
  int max_concurrent(const BatchRequest& request) const;

  // Queues a request. Throws rkv::Error when it is invalid (empty prompt, ids outside the
  // vocabulary, a prompt that does not fit the context, bad compression settings) or can never
  // fit under the memory cap; the engine and the other requests are untouched.
  std::uint64_t submit(BatchRequest request);

  // One engine step: admits what fits, runs one forward pass, samples, retires finished
  // sequences. Returns false when nothing is running or waiting.
  bool step();
  // Steps until every request has finished.
  void run();

  // Results of finished requests, in finishing order (moved out).
  std::vector<BatchResult> take_results();

  int running() const;
  int waiting() const;
  std::size_t kv_bytes_in_use() const { return kv_bytes_in_use_; }
  std::size_t peak_kv_bytes() const { return peak_kv_bytes_; }
  int peak_running() const { return peak_running_; }

 private:
  struct Sequence;
  void admit();
  void finish(Sequence& seq, const std::string& reason);

  const Model& model_;
  ThreadPool& pool_;
  BatchEngineOptions options_;
  ForwardScratch scratch_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<BatchResult> results_;
  std::uint64_t next_id_ = 1;
  std::size_t kv_bytes_in_use_ = 0;
  std::size_t peak_kv_bytes_ = 0;
  int peak_running_ = 0;
  std::vector<float> logits_;
};

// Parses "6GiB", "512MiB", "1.5G", "1000000" (bytes). Throws rkv::Error.
std::size_t parse_byte_size(const std::string& text);

}  // namespace rkv
