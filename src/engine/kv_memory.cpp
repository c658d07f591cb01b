#include "engine/kv_memory.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kernels/attention.h"

namespace rkv {

KvMemory::KvMemory(const CompressionParams& params, CompressionVocab vocab, SteeringParams steering)
    : params_(params),
      method_(params.info()),
      vocab_(std::move(vocab)),
      steering_(std::move(steering)) {
  // Steering alone only needs the segmentation and labels (N_o); skipkv also the embeddings.
  if (method_.needs.final_hidden || steering_.enabled()) {
    sentences_ = std::make_unique<SentenceTracker>(params_.delimiters, params_.keywords,
                                                   params_.tau, method_.needs.final_hidden);
  }
}

int KvMemory::capacity_for(const CompressionParams& params, int prompt_tokens, int max_new_tokens) {
  const std::int64_t total = static_cast<std::int64_t>(prompt_tokens) + std::max(1, max_new_tokens);
  if (!params.info().compresses) return static_cast<int>(total);
  // Between compressions at most `buffer` tokens arrive, so budget + buffer bounds the cache
  // (ALGORITHMS.md 1); a longer prompt is held whole until the end of prefill.
  std::int64_t capacity =
      std::max<std::int64_t>(prompt_tokens, params.budget_for(total) + params.buffer);
  if (params.think_only) capacity += max_new_tokens;  // no compression after </think>
  return static_cast<int>(std::min(capacity, total));
}

KvCacheShape KvMemory::shape_for(const Model& model, const CompressionParams& params, int capacity,
                                 KvDtype dtype) {
  return model.cache_shape(capacity, params.info().compresses ? params.window : 0, dtype);
}

void KvMemory::allocate(const KvCacheShape& shape) {
  cache_ = std::make_unique<KvCache>(shape);
  // G-KV: a new entry has no global score yet; H2O: its accumulator starts at 0.
  cache_->set_initial_state(method_.initial_state);
}

void KvMemory::begin_decode_step(int token, std::int64_t position) {
  seq_len_ = position + 1;
  due_ = false;
  decode_position_ = position;
  if (sentences_) {
    if (compressions_ != compressions_seen_) forget_evicted_sentences();
    decode_token_is_delimiter_ =
        sentences_->push_token(static_cast<std::int32_t>(position), vocab_.token_text(token));
  }
  if (!compresses()) return;
  if (params_.think_only && (think_done_ || token == vocab_.think_end_id)) {
    think_done_ = true;
    return;
  }
  if (params_.trigger == Trigger::every_buffer) {
    due_ = seq_len_ % params_.buffer == 0;
  } else {
    due_ = std::find(vocab_.newline_ids.begin(), vocab_.newline_ids.end(), token) !=
           vocab_.newline_ids.end();
  }
  // The bound of budget + buffer entries holds whatever the trigger: a line longer than the
  // buffer compresses anyway (only the `newline` trigger can get here).
  if (cache_->length(0) + 1 > params_.budget_for(seq_len_) + params_.buffer) due_ = true;
}

void KvMemory::compress_all_layers(std::int64_t tokens, ThreadPool* pool) {
  if (!compresses()) return;
  seq_len_ = tokens;
  for (int layer = 0; layer < cache_->shape().layers; ++layer) compress_layer(layer, tokens, pool);
}

void KvMemory::compress_layer(int layer, std::int64_t seq_len, ThreadPool* pool) {
  KvCache& cache = *cache_;
  const int n_all = cache.length(layer);
  if (!should_compress(n_all, params_, seq_len)) return;
  const auto t0 = std::chrono::steady_clock::now();
  const KvCacheShape& shape = cache.shape();
  LayerView view;
  view.q_heads = shape.q_heads;
  view.kv_heads = shape.kv_heads;
  view.head_dim = shape.head_dim;
  view.n_all = n_all;
  view.seq_len = seq_len;
  view.layer = layer;
  cache.window_queries(layer, queries_);
  view.window = cache.window_size(layer);
  view.queries = queries_.data();
  const bool stateful = method_.needs.reads_entry_state;
  // The policies read float32 keys: a cache stored in another dtype converts this layer's keys,
  // head by head, to scratch (a float32 cache is read in place).
  if (cache.dtype() != KvDtype::f32) keys_f32_.resize(static_cast<std::size_t>(shape.kv_heads));
  for (int h = 0; h < shape.kv_heads; ++h) {
    const KvRows keys = cache.keys(layer, h);
    if (const float* f = keys.f32()) {
      view.keys.push_back(f);
    } else {
      auto& scratch = keys_f32_[static_cast<std::size_t>(h)];
      scratch.resize(static_cast<std::size_t>(n_all) * static_cast<std::size_t>(shape.head_dim));
      kernels::kv_to_f32(keys, scratch.data());
      view.keys.push_back(scratch.data());
    }
    view.positions.push_back(cache.positions(layer, h));
    if (stateful) view.state.push_back(cache.state(layer, h));
  }
  if (sentences_) view.position_penalty = sentences_->position_penalty();
  Diagnostics diagnostics;
  const Selection selection =
      rkv::compress_layer(view, params_, listener_ ? &diagnostics : nullptr, pool);
  if (!selection.compressed) return;
  if (listener_) {
    CompressionEvent event;
    event.step = seq_len;
    event.layer = layer;
    event.n_before = n_all;
    event.cache = &cache;
    event.diagnostics = &diagnostics;
    event.view = &view;
    event.selection = &selection;
    event.params = &params_;
    listener_(event);
  }
  cache.compact(layer, selection.kept, selection.new_state);
  ++compressions_;
  compression_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void KvMemory::accumulate(int layer, int kv_head, const float* probs, int G, int n) {
  float* accumulator = cache_->accumulator(layer, kv_head);
  accumulate_h2o(probs, G, 1, n, std::span<float* const>(&accumulator, 1));
}

void KvMemory::observe_final_hidden(std::int32_t position, const float* hidden, int hidden_size) {
  if (!sentences_ || !wants_final_hidden() || position != decode_position_) return;
  sentences_->add_hidden(position, hidden, hidden_size);
}

float KvMemory::steer(int layer, std::int32_t position, float* hidden, int hidden_size) const {
  if (!steering_.enabled() || layer != steering_.vector->layer || position != decode_position_ ||
      !decode_token_is_delimiter_) {
    return 0.0f;
  }
  const float a = steering_.strength(sentences_->non_execution_count());
  if (a == 0.0f) return 0.0f;  // adds nothing: keep the unsteered bits exactly
  const float* v = steering_.vector->values.data();
  const int n = std::min(hidden_size, steering_.vector->hidden_size());
  for (int i = 0; i < n; ++i) hidden[i] += a * v[i];
  return a;
}

void KvMemory::forget_evicted_sentences() {
  const KvCache& cache = *cache_;
  compressions_seen_ = compressions_;
  if (!wants_final_hidden()) return;  // only embeddings cost memory
  // Which positions some (layer, KV head) still holds: a sentence with none can never be
  // evicted again, so its embedding is dropped (memory stays bounded by the cache).
  cached_.assign(static_cast<std::size_t>(seq_len_), 0);
  const KvCacheShape& shape = cache.shape();
  for (int layer = 0; layer < shape.layers; ++layer) {
    const int n = cache.length(layer);
    for (int h = 0; h < shape.kv_heads; ++h) {
      const std::int32_t* pos = cache.positions(layer, h);
      for (int i = 0; i < n; ++i)
        if (pos[i] >= 0 && pos[i] < seq_len_) cached_[static_cast<std::size_t>(pos[i])] = 1;
    }
  }
  sentences_->forget_uncached(cached_);
}

}  // namespace rkv
