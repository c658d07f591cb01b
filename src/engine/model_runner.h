// One forward pass for the batch (DESIGN.md property 7: the engine, not the model, applies
// compression between layers). The runner drives the model's steps (ForwardPass) layer by layer
// and, between them, asks each row's KV memory what it needs:
//   append_kv(l)  ->  a due decode sequence's memory compresses layer l (plan, then apply)
//   attend(l)     ->  h2o memories accumulate their rows' attention probabilities;
//                     steering memories add their vector to the residual stream
//   finish        ->  a whole-pass method's memory (TriAttention) compresses every layer of a
//                     due decode sequence at once; skipkv memories take the final hidden states
//                     of their decode rows
#pragma once

#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kv_memory.h"
#include "model/model.h"

namespace rkv {

class ModelRunner {
 public:
  ModelRunner(const Model& model, ThreadPool& pool) : model_(model), pool_(pool) {}

  // One pass over `rows` (ForwardRow; rows of one sequence consecutive, their cache the
  // memory's), memory[r] the KV memory of row r's sequence. Writes the logits of the rows with
  // want_logits, in row order, to logits[n][vocab]. A sequence with a single row in the pass is
  // a decode step: it compresses between layers when its memory says due() (begin_decode_step).
  // Throws rkv::Error when the model's backend cannot serve a memory that needs host memory.
  void run(std::span<const ForwardRow> rows, std::span<KvMemory* const> memory, float* logits);

 private:
  const Model& model_;
  ThreadPool& pool_;
  ForwardScratch scratch_;
  std::vector<ForwardRow> rows_;       // the pass's rows, want_attention set from the memories
  std::vector<std::size_t> segments_;  // first row of each sequence, then rows.size()
  AttentionProbs probs_;
};

}  // namespace rkv
