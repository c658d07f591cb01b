// A bare chunked prefill into a cache (prefill), optionally reading a layer's residual stream,
// and one request alone through the engine (generate_alone).
#pragma once

#include <functional>
#include <span>

#include "core/thread_pool.h"
#include "model/model.h"
#include "rkv/engine.h"

namespace rkv {

// Called after layer `layer` of a pass with its rows and their residual stream [rows][hidden].
using LayerStatesFn =
    std::function<void(int layer, std::span<const ForwardRow> rows, const float* hidden)>;

// Runs `tokens` through the model in chunks of `chunk` rows (positions start at
// `first_position`); writes the logits of the last token to `last_logits` when not null. With
// `after_layer`, the pass is driven layer by layer and each layer's output handed to it (the
// steering calibration reads one layer's states this way; host backends only).
void prefill(const Model& model, KvCache& cache, std::span<const int> tokens, int first_position,
             int chunk, ForwardScratch& scratch, ThreadPool& pool, float* last_logits,
             const LayerStatesFn& after_layer = {});

// Runs one request alone through an rkv::Engine (prepare, submit, run): the same loop serves a
// single stream and a batch, so a sequence produces the same tokens alone and beside others.
// The tests' and tools' way to generate from token ids without a front end. Throws rkv::Error
// for an invalid request (Engine::prepare).
Completion generate_alone(const Model& model, ThreadPool& pool, Request request,
                          EngineOptions options = {}, const Tokenizer* tokenizer = nullptr);

}  // namespace rkv
