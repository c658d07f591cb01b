// Requests for the tests that drive the batch engine (the scheduler) directly, with a hand-made
// compression vocabulary: Engine::prepare takes the tokenizer's, and the test models have none.
#pragma once

#include <algorithm>
#include <utility>

#include "engine/batch_engine.h"
#include "engine/kv_memory.h"
#include "model/model.h"
#include "rkv/engine.h"

namespace rkv::test {

// A greedy request of token ids in and out: prompt_len ids that differ with `seed`, max_new
// tokens, eos ignored (so every run generates exactly max_new), no compression.
inline Request greedy_ids_request(int prompt_len, int max_new, int seed) {
  Request r;
  for (int i = 0; i < prompt_len; ++i) r.prompt_ids.push_back(3 + (i * 31 + seed * 97) % 500);
  r.decode_text = false;
  r.max_new_tokens = max_new;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  return r;
}

// `r` (token ids in prompt_ids) as Engine::prepare leaves it for a model without a tokenizer:
// the model's eos ids, max_new_tokens clipped to the context, the KV dtype resolved and the slot
// sized by KvMemory. The settings are not validated here: the tests give valid ones.
inline PreparedRequest prepared_request(const Model& model, Request r) {
  PreparedRequest p;
  p.prompt = r.prompt_ids;
  p.eos_ids = model.config().eos_token_ids;
  const int prompt = static_cast<int>(p.prompt.size());
  p.max_new_tokens = std::min(r.max_new_tokens, model.config().max_position_embeddings - prompt);
  p.cache_capacity = KvMemory::capacity_for(r.compression, prompt - r.seed_tokens,
                                            p.max_new_tokens + r.seed_tokens);
  r.kv_dtype = r.kv_dtype.value_or(model.default_kv_dtype());
  p.slot_bytes = KvCache::slot_bytes_for(
      KvMemory::shape_for(model, r.compression, p.cache_capacity, *r.kv_dtype));
  p.request = std::move(r);
  return p;
}

// One request alone through a batch engine whose compression vocabulary is `vocab`.
inline BatchResult run_alone(const Model& model, ThreadPool& pool, const PreparedRequest& r,
                             CompressionVocab vocab = {}) {
  BatchEngineOptions options;
  options.compression_vocab = std::move(vocab);
  BatchEngine engine(model, pool, std::move(options));
  engine.submit(r);
  engine.run();
  return engine.take_results().at(0);
}

}  // namespace rkv::test
