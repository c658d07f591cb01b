#include "engine/kv_compressor.h"

#include <algorithm>
#include <chrono>

namespace rkv {

SequenceCompressor::SequenceCompressor(const CompressionParams& params, CompressionVocab vocab)
    : params_(params), vocab_(std::move(vocab)) {
  params_.validate();
}

int SequenceCompressor::cache_capacity(int prompt_tokens, int max_new_tokens) const {
  const std::int64_t total = static_cast<std::int64_t>(prompt_tokens) + std::max(1, max_new_tokens);
  if (!enabled()) return static_cast<int>(total);
  // Between compressions at most `buffer` tokens arrive, so budget + buffer bounds the cache
  // (ALGORITHMS.md 1); a longer prompt is held whole until the end of prefill.
  std::int64_t capacity = std::max<std::int64_t>(prompt_tokens, params_.budget_for(total) + params_.buffer);
  if (params_.think_only) capacity += max_new_tokens;  // no compression after </think>
  return static_cast<int>(std::min(capacity, total));
}

int SequenceCompressor::window() const { return enabled() ? params_.window : 0; }

void SequenceCompressor::init_cache(KvCache& cache) const {
  // G-KV: a new entry has no global score yet; H2O: its accumulator starts at 0.
  cache.set_initial_state(params_.method == Method::gkv ? kNoState : 0.0f);
}

void SequenceCompressor::begin_decode_step(int token, std::int64_t position, const KvCache& cache) {
  seq_len_ = position + 1;
  due_ = false;
  if (!enabled()) return;
  if (params_.think_only && (think_done_ || token == vocab_.think_end_id)) {
    think_done_ = true;
    return;
  }
  if (params_.trigger == Trigger::every_buffer) {
    due_ = seq_len_ % params_.buffer == 0;
  } else {
    due_ = std::find(vocab_.newline_ids.begin(), vocab_.newline_ids.end(), token) != vocab_.newline_ids.end();
  }
  // The bound of budget + buffer entries holds whatever the trigger: a line longer than the
  // buffer compresses anyway (only the `newline` trigger can get here).
  if (cache.length(0) + 1 > params_.budget_for(seq_len_) + params_.buffer) due_ = true;
}

void SequenceCompressor::compress_after_prefill(KvCache& cache, std::int64_t prompt_tokens, ThreadPool* pool) {
  if (!enabled()) return;
  seq_len_ = prompt_tokens;
  for (int layer = 0; layer < cache.shape().layers; ++layer) compress_layer_now(cache, layer, prompt_tokens, pool);
}

void SequenceCompressor::compress_layer_now(KvCache& cache, int layer, std::int64_t seq_len, ThreadPool* pool) {
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
  cache.window_queries(layer, queries_);
  view.window = cache.window_size(layer);
  view.queries = queries_.data();
  const bool stateful = params_.method == Method::gkv || params_.method == Method::h2o;
  for (int h = 0; h < shape.kv_heads; ++h) {
    view.keys.push_back(cache.keys(layer, h));
    view.positions.push_back(cache.positions(layer, h));
    if (stateful) view.state.push_back(cache.state(layer, h));
  }
  Diagnostics diagnostics;
  const Selection selection = compress_layer(view, params_, listener_ ? &diagnostics : nullptr, pool);
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
  compression_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void SequenceCompressor::accumulate(KvCache& cache, int layer, int kv_head, const float* probs, int G, int n) const {
  float* accumulator = cache.state(layer, kv_head);
  accumulate_h2o(probs, G, 1, n, std::span<float* const>(&accumulator, 1));
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

void CompressionObserver::attention_probs(int layer, std::span<const ForwardRow> rows, std::size_t row, int kv_head,
                                          const float* probs, int G, int n) {
  auto it = compressors_.find(rows[row].cache);
  if (it == compressors_.end() || it->second->params().method != Method::h2o) return;
  it->second->accumulate(*rows[row].cache, layer, kv_head, probs, G, n);
}

}  // namespace rkv
