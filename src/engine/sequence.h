// One sequence of the continuous batch: its prepared request, its KV memory (the cache and its
// compression), its sampler, and where it stands (prefilling, decoding, finished). The batch
// engine's scheduler reads and advances these; nothing else owns sequence state.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv_memory.h"
#include "engine/sampler.h"
#include "rkv/engine.h"

namespace rkv {

// What the batch engine calls back for one sequence, on the thread that steps.
struct SequenceHooks {
  // Called with every generated token (eos excluded); returning false finishes the request.
  std::function<bool(int token)> on_token;
  // With Request::logprobs >= 0: the token's log-probabilities, just before on_token.
  std::function<void(const TokenLogprob&)> on_logprob;
  // After each decode step of this sequence: the token's position and the step's wall time in
  // seconds (the latency-against-position plot).
  std::function<void(int position, double seconds)> on_step_time;
};

// What the batch engine gives back for one sequence.
struct BatchResult {
  std::uint64_t id = 0;
  std::vector<int> tokens;
  std::vector<TokenLogprob> logprobs;  // Request::logprobs >= 0: one per sampled token
  int reasoning_tokens = 0;            // generated tokens up to and including </think>
  std::string stop_reason;             // "eos", "length", "stopped", "cancelled", "error"
  std::string error;  // "error": what failed (the forward pass that carried the sequence)
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

struct Sequence {
  using Clock = std::chrono::steady_clock;

  std::uint64_t id = 0;
  PreparedRequest request;
  SequenceHooks hooks;
  std::unique_ptr<KvMemory> memory;  // its cache allocated at admission, freed at retirement
  std::unique_ptr<Sampler> sampler;
  int prefilled = 0;    // prompt tokens already run
  int next_token = -1;  // sampled and not yet fed to the model
  std::vector<int> generated;
  std::vector<TokenLogprob> logprobs;  // Request::logprobs >= 0
  // Inside a thought (<think> opened, by the prompt or the output), the generated tokens of the
  // chain of thought (markers included), and for Request::thinking_budget its tokens between the
  // markers so far and the closing tokens still to write instead of sampling.
  bool thinking = false;
  int reasoning_tokens = 0;
  int thought_tokens = 0;
  bool thought_closed = false;
  std::deque<int> forced;
  // Where the answer begins (after the prompt, or after the open thought's </think>), the
  // request's answer prefix is forced; answer_started says that point has passed.
  bool answer_started = false;
  std::size_t script_pos = 0;  // Request::scripted_reply or replay_ids: tokens written so far
  bool finished = false;
  std::string stop_reason;  // "eos", "length", "stopped", "cancelled", "error"
  std::string error;        // what failed, for "error"
  Clock::time_point submitted, admitted, prefill_done;
  double decode_seconds = 0.0;
  int max_entries = 0;  // most entries a head held after any step

  int prompt_size() const { return static_cast<int>(request.prompt.size()); }
  int seed_tokens() const { return request.request.seed_tokens; }
  KvDtype kv_dtype() const { return *request.request.kv_dtype; }
  bool prefilling() const { return prefilled < prompt_size(); }
  bool admitted_yet() const { return memory->allocated(); }
  void finish(const std::string& reason) {
    finished = true;
    stop_reason = reason;
  }
};

}  // namespace rkv
