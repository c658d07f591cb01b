// One sequence alone (generate_alone) and a bare chunked prefill into a cache (prefill).
#pragma once

#include <span>

#include "core/thread_pool.h"
#include "engine/batch_engine.h"
#include "model/model.h"

namespace rkv {

// Runs one request alone through a batch engine: the same loop serves a single stream and a
// batch, so a sequence produces the same tokens alone and beside others. The tests' and tools'
// way to generate from token ids without a tokenizer (front ends use rkv::Engine). Throws
// rkv::Error for an invalid request (BatchEngine::submit).
BatchResult generate_alone(const Model& model, ThreadPool& pool, BatchRequest request,
                           BatchEngineOptions options = {});

// Runs `tokens` through the model in chunks of `chunk` rows (positions start at
// `first_position`); writes the logits of the last token to `last_logits` when not null.
void prefill(const Model& model, KvCache& cache, std::span<const int> tokens, int first_position,
             int chunk, ForwardScratch& scratch, ThreadPool& pool, float* last_logits,
             ForwardObserver* observer = nullptr);

}  // namespace rkv
