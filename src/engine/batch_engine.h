// The scheduler of the continuous batch under a KV memory cap (DESIGN.md property 5): which
// sequences run, admission, retirement. The pass itself is the model runner's
// (engine/model_runner.h), compression the sequences' KV memories' (engine/kv_memory.h).
//
// Every step is one forward pass that advances every running sequence by one token, with the
// prompts of newly admitted sequences prefilled in chunks inside the same passes, so the weights
// are read once per step for all sequences. Each sequence has its own compression method,
// budget, sampling and stop conditions, and its own fixed-size KV cache (its "slot"): a
// request is admitted only when its slot fits under the memory cap, so the cap can never be
// exceeded. It takes prepared requests only (rkv::Engine::prepare is where a request is
// validated and its slot sized).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace rkv {

struct BatchEngineOptions {
  // 0: no cap. On a device the cap is at most its free memory less a tenth and 512 MiB for the
  // passes' workspace (the whole of that when 0), measured when the engine is made.
  std::size_t kv_memory_bytes = 0;
  int max_batch = 0;        // most sequences running at once (0: no limit but the cap)
  int prefill_chunk = 256;  // prompt tokens per step, over all prefilling sequences
  // The tokenizer's ids and text the compression triggers and sentence tracking read.
  CompressionVocab compression_vocab;
  // The model's TriAttention statistics (`rkv calibrate`; null: none, and Engine::prepare
  // refuses a method that needs them).
  std::shared_ptr<const QueryStats> query_stats;
};

class BatchEngine {
 public:
  BatchEngine(const Model& model, ThreadPool& pool, BatchEngineOptions options);
  ~BatchEngine();

  // The KV memory cap in force (BatchEngineOptions::kv_memory_bytes, after a device's limit).
  std::size_t kv_memory_bytes() const { return options_.kv_memory_bytes; }
  // How many sequences with slots like `request`'s fit under the cap at once (max_batch if no
  // cap).
  int max_concurrent(const PreparedRequest& request) const;

  // Queues a request prepared by rkv::Engine::prepare. Throws rkv::Error only when its slot is
  // larger than the whole cap (it could never be admitted); the engine is untouched then.
  std::uint64_t submit(PreparedRequest request, SequenceHooks hooks = {});

  // Finishes a request now: a waiting one leaves the queue, a running one frees its slot
  // (stop reason "cancelled"; its result is available at once). Call between steps, from the
  // thread that steps. Returns false when no unfinished request has this id.
  bool cancel(std::uint64_t id);

  // One engine step, in three phases (as a reader of nano-vllm's scheduler would look for them):
  // schedule() admits what fits under the cap and lays out the forward pass's rows (one decode
  // row per running sequence, then prompt chunks); run() is the forward pass; postprocess()
  // samples, applies the stop conditions and retires finished sequences. Returns false when
  // nothing is running or waiting.
  bool step();
  // Steps until every request has finished.
  void run();

  // Results of finished requests, in finishing order (moved out).
  std::vector<BatchResult> take_results();

  int running() const;
  int waiting() const;
  std::size_t kv_bytes_in_use() const { return kv_bytes_in_use_; }
  // Seconds spent compressing, summed over every sequence so far (running and retired).
  double compression_seconds() const;
  std::size_t peak_kv_bytes() const { return peak_kv_bytes_; }
  int peak_running() const { return peak_running_; }
  std::int64_t steps() const { return steps_; }          // forward passes run
  double step_seconds() const { return step_seconds_; }  // their total wall time

 private:
  // The rows of one forward pass and the sequence each row belongs to.
  struct StepPlan {
    std::vector<ForwardRow> rows;
    std::vector<Sequence*> row_seq;
    std::vector<KvMemory*> row_memory;
    std::size_t n_decode = 0;        // the first n_decode rows are decode rows
    std::vector<Sequence*> seeding;  // still prefilling seed tokens, compressed after the pass
  };
  void admit();
  StepPlan schedule();
  double run(StepPlan& plan);  // returns the forward pass's wall time
  void postprocess(const StepPlan& plan, double step_seconds);
  void retire(Sequence& seq);
  // The answer begins: Request::answer_prefix is queued to be written.
  static void start_answer(Sequence& seq);
  void retire_finished();
  // compress_all_layers for a sequence; false (the sequence ended with the error) if it throws.
  bool compress_or_fail(Sequence& s, std::int64_t tokens);

  const Model& model_;
  ThreadPool& pool_;
  BatchEngineOptions options_;
  ModelRunner runner_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<BatchResult> results_;
  std::uint64_t next_id_ = 1;
  std::size_t kv_bytes_in_use_ = 0;
  double retired_compression_seconds_ = 0.0;
  std::size_t peak_kv_bytes_ = 0;
  int peak_running_ = 0;
  std::int64_t steps_ = 0;
  double step_seconds_ = 0.0;
  std::vector<float> logits_;
  std::vector<float> logprob_scratch_;  // one row's log-probabilities
};

// The log-probabilities of `logits` [vocab] into all[vocab], and the `top` most likely tokens,
// best first (ties to the lower id); the returned token and logprob are left for the caller.
TokenLogprob top_logprobs(const float* logits, int vocab, int top, std::vector<float>& all);

// Parses "6GiB", "512MiB", "1.5G", "1000000" (bytes). Throws rkv::Error.
std::size_t parse_byte_size(const std::string& text);

}  // namespace rkv
