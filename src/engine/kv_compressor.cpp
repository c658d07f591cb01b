#include "engine/kv_compressor.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kernels/attention.h"

namespace rkv {

SequenceCompressor::SequenceCompressor(const CompressionParams& params, CompressionVocab vocab,
                                       SteeringParams steering)
    : params_(params), vocab_(std::move(vocab)), steering_(std::move(steering)) {
  params_.validate();
  steering_.validate();
  const bool skipkv = params_.method == Method::skipkv;
  if ((skipkv || steering_.enabled()) && !vocab_.token_text) {
    throw Error(std::string(skipkv ? "kv method skipkv" : "steering") +
                " needs the tokenizer (sentence delimiters and keywords are found in the "
                "tokens' text), and none was given");
  }
  // Steering alone only needs the segmentation and labels (N_o); skipkv also the embeddings.
  if (skipkv || steering_.enabled()) {
    sentences_ = std::make_unique<SentenceTracker>(params_.delimiters, params_.keywords,
                                                   params_.tau, skipkv);
  }
}

int SequenceCompressor::cache_capacity(int prompt_tokens, int max_new_tokens) const {
  const std::int64_t total = static_cast<std::int64_t>(prompt_tokens) + std::max(1, max_new_tokens);
  if (!enabled()) return static_cast<int>(total);
  // Between compressions at most `buffer` tokens arrive, so budget + buffer bounds the cache
  // (ALGORITHMS.md 1); a longer prompt is held whole until the end of prefill.
  std::int64_t capacity =
      std::max<std::int64_t>(prompt_tokens, params_.budget_for(total) + params_.buffer);
  if (params_.think_only) capacity += max_new_tokens;  // no compression after </think>
  return static_cast<int>(std::min(capacity, total));
}

int SequenceCompressor::window() const {
  return enabled() ? params_.window : 0;
}

void SequenceCompressor::init_cache(KvCache& cache) const {
  // G-KV: a new entry has no global score yet; H2O: its accumulator starts at 0.
  cache.set_initial_state(params_.method == Method::gkv ? kNoState : 0.0f);
}

void SequenceCompressor::begin_decode_step(int token, std::int64_t position, const KvCache& cache) {
  seq_len_ = position + 1;
  due_ = false;
  decode_position_ = position;
  if (sentences_) {
    if (compressions_ != compressions_seen_) forget_evicted_sentences(cache);
    decode_token_is_delimiter_ =
        sentences_->push_token(static_cast<std::int32_t>(position), vocab_.token_text(token));
  }
  if (!enabled()) return;
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
  if (cache.length(0) + 1 > params_.budget_for(seq_len_) + params_.buffer) due_ = true;
}

void SequenceCompressor::compress_after_prefill(KvCache& cache, std::int64_t prompt_tokens,
                                                ThreadPool* pool) {
  if (!enabled()) return;
  seq_len_ = prompt_tokens;
  for (int layer = 0; layer < cache.shape().layers; ++layer)
    compress_layer_now(cache, layer, prompt_tokens, pool);
}

void SequenceCompressor::compress_layer_now(KvCache& cache, int layer, std::int64_t seq_len,
                                            ThreadPool* pool) {
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
  const bool stateful = params_.method == Method::gkv || params_.method == Method::h2o;
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
      compress_layer(view, params_, listener_ ? &diagnostics : nullptr, pool);
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

void SequenceCompressor::accumulate(KvCache& cache, int layer, int kv_head, const float* probs,
                                    int G, int n) const {
  float* accumulator = cache.accumulator(layer, kv_head);
  accumulate_h2o(probs, G, 1, n, std::span<float* const>(&accumulator, 1));
}

void SequenceCompressor::observe_final_hidden(std::int32_t position, const float* hidden,
                                              int hidden_size) {
  if (!sentences_ || !wants_final_hidden() || position != decode_position_) return;
  sentences_->add_hidden(position, hidden, hidden_size);
}

float SequenceCompressor::steer(int layer, std::int32_t position, float* hidden,
                                int hidden_size) const {
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

void SequenceCompressor::forget_evicted_sentences(const KvCache& cache) {
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

void CompressionObserver::attach(const KvCache* cache, SequenceCompressor* compressor) {
  const bool hidden = compressor->wants_final_hidden() || compressor->steering().enabled();
  if (hidden && hidden_size_ <= 0) {
    throw Error(
        "skipkv and steering need the model's hidden states: construct the CompressionObserver "
        "with the model's hidden size");
  }
  if (compressor->steering().enabled() &&
      compressor->steering().vector->hidden_size() != hidden_size_) {
    throw Error("the steering vector has hidden size " +
                std::to_string(compressor->steering().vector->hidden_size()) + ", the model has " +
                std::to_string(hidden_size_));
  }
  detach(cache);
  compressors_[cache] = compressor;
  count(compressor, 1);
}

void CompressionObserver::detach(const KvCache* cache) {
  auto it = compressors_.find(cache);
  if (it == compressors_.end()) return;
  count(it->second, -1);
  compressors_.erase(it);
}

void CompressionObserver::count(const SequenceCompressor* compressor, int delta) {
  if (compressor->steering().enabled()) steering_users_ += delta;
  if (compressor->wants_final_hidden()) hidden_users_ += delta;
  if (compressor->enabled()) enabled_users_ += delta;
}

bool CompressionObserver::needs_host() const {
  return steering_users_ > 0 || hidden_users_ > 0 || enabled_users_ > 0;
}

void CompressionObserver::after_layer(int layer, std::span<const ForwardRow> rows, float* hidden) {
  if (steering_users_ == 0) return;
  const auto H = static_cast<std::size_t>(hidden_size_);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto it = compressors_.find(rows[r].cache);
    if (it == compressors_.end()) continue;
    it->second->steer(layer, rows[r].position, hidden + r * H, hidden_size_);
  }
}

void CompressionObserver::final_hidden(std::span<const ForwardRow> rows, const float* hidden) {
  if (hidden_users_ == 0) return;
  const auto H = static_cast<std::size_t>(hidden_size_);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto it = compressors_.find(rows[r].cache);
    if (it == compressors_.end()) continue;
    it->second->observe_final_hidden(rows[r].position, hidden + r * H, hidden_size_);
  }
}

void CompressionObserver::after_kv_append(int layer, std::span<const ForwardRow> rows) {
  for (std::size_t r = 0; r < rows.size(); ++r) {
    // Compression happens at decode steps only: one row of the sequence in the pass.
    const bool alone = (r == 0 || rows[r - 1].cache != rows[r].cache) &&
                       (r + 1 == rows.size() || rows[r + 1].cache != rows[r].cache);
    if (!alone) continue;
    auto it = compressors_.find(rows[r].cache);
    if (it == compressors_.end() || !it->second->due()) continue;
    it->second->compress_layer_now(*rows[r].cache, layer, rows[r].position + 1, pool_);
  }
}

bool CompressionObserver::wants_attention_probs() const {
  for (const auto& [cache, compressor] : compressors_)
    if (compressor->params().method == Method::h2o) return true;
  return false;
}

void CompressionObserver::attention_probs(int layer, std::span<const ForwardRow> rows,
                                          std::size_t row, int kv_head, const float* probs, int G,
                                          int n) {
  auto it = compressors_.find(rows[row].cache);
  if (it == compressors_.end() || it->second->params().method != Method::h2o) return;
  it->second->accumulate(*rows[row].cache, layer, kv_head, probs, G, n);
}

}  // namespace rkv
