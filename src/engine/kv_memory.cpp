#include "engine/kv_memory.h"

#include <algorithm>
#include <chrono>

#include "compress/whole_pass.h"
#include "core/error.h"
#include "kernels/attention.h"

namespace rkv {

KvMemory::KvMemory(const CompressionParams& params, CompressionVocab vocab, SteeringParams steering,
                   ModelCalibration calibration)
    : params_(params),
      method_(params.info()),
      vocab_(std::move(vocab)),
      steering_(std::move(steering)),
      calibration_(std::move(calibration)) {
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
  // The query ring holds the window queries per-layer methods score with; a whole-pass method
  // (TriAttention) reads no live query.
  const MethodInfo& info = params.info();
  const bool ring = info.compresses && info.timing == Timing::per_layer;
  return model.cache_shape(capacity, ring ? params.window : 0, dtype);
}

void KvMemory::allocate(const KvCacheShape& shape, int prompt_tokens) {
  cache_ = std::make_unique<KvCache>(shape);
  prompt_tokens_ = prompt_tokens;
  // G-KV: a new entry has no global score yet; H2O: its accumulator starts at 0.
  cache_->set_initial_state(method_.initial_state);
}

void KvMemory::begin_decode_step(int token, std::int64_t position) {
  seq_len_ = position + 1;
  due_ = false;
  in_decode_step_ = true;
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
  if (method_.timing == Timing::whole_pass) return;  // decided after the pass: end_decode_step
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
  if (method_.timing == Timing::whole_pass) {
    if (tokens > prompt_tokens_ && cache_->length(0) > params_.budget)
      compress_whole_pass(tokens, pool);
    return;
  }
  for (int layer = 0; layer < cache_->shape().layers; ++layer)
    compress_layer(layer, tokens, tokens, pool);
}

void KvMemory::compress_layer(int layer, std::int64_t seq_len, std::int64_t first_reader,
                              ThreadPool* pool) {
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
  apply(layer, seq_len, first_reader, n_all, selection, &diagnostics, &view);
  compression_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void KvMemory::end_decode_step(ThreadPool* pool) {
  const bool decoding = in_decode_step_;
  in_decode_step_ = false;  // a prompt's single row is no decode step
  if (!decoding || method_.timing != Timing::whole_pass || !compresses() || think_done_) return;
  if (compress::whole_pass_due(params_, cache_->length(0), prompt_tokens_, seq_len_))
    compress_whole_pass(seq_len_, pool);
}

void KvMemory::compress_whole_pass(std::int64_t tokens, ThreadPool* pool) {
  KvCache& cache = *cache_;
  const KvCacheShape& shape = cache.shape();
  const auto t0 = std::chrono::steady_clock::now();
  compress::SequenceView view;
  view.layers = shape.layers;
  view.q_heads = shape.q_heads;
  view.kv_heads = shape.kv_heads;
  view.head_dim = shape.head_dim;
  view.n_all = cache.length(0);
  view.prefix = prompt_tokens_;
  view.round_start = tokens;
  if (calibration_.query_stats) view.query_stats = &calibration_.query_stats->stats;
  view.rope_frequencies = calibration_.rope_frequencies;
  view.rope_scale = calibration_.rope_scale;
  // The policy reads float32 keys: a cache in another dtype converts every layer's (scratch).
  if (cache.dtype() != KvDtype::f32)
    keys_f32_.resize(static_cast<std::size_t>(shape.layers) * shape.kv_heads);
  view.keys.resize(static_cast<std::size_t>(shape.layers));
  for (int l = 0; l < shape.layers; ++l) {
    if (cache.length(l) != view.n_all)
      throw Error("whole-pass compression: every layer must hold as many entries");
    for (int h = 0; h < shape.kv_heads; ++h) {
      const KvRows keys = cache.keys(l, h);
      const float* f = keys.f32();
      if (f == nullptr) {
        auto& scratch = keys_f32_[static_cast<std::size_t>(l) * shape.kv_heads + h];
        scratch.resize(static_cast<std::size_t>(view.n_all) * shape.head_dim);
        kernels::kv_to_f32(keys, scratch.data());
        f = scratch.data();
      }
      view.keys[static_cast<std::size_t>(l)].push_back({f, cache.positions(l, h), view.n_all});
    }
  }
  const compress::SequencePlan plan = compress::plan_whole_pass(view, params_, pool);
  if (!plan.compressed) return;
  for (int l = 0; l < shape.layers; ++l) {
    Selection selection;
    selection.compressed = true;
    selection.kept = plan.kept[static_cast<std::size_t>(l)];
    for (const auto& kept : selection.kept) selection.new_state.emplace_back(kept.size(), 0.0f);
    if (listener_ && !plan.decision.aggregated.empty()) {
      // The trace's score of each head: what its selection ranked (the prompt is not scored).
      Diagnostics diagnostics;
      const bool per_layer = plan.decision.aggregated.size() ==
                             static_cast<std::size_t>(shape.layers) * shape.kv_heads;
      for (int h = 0; h < shape.kv_heads; ++h) {
        const std::size_t unit =
            per_layer ? static_cast<std::size_t>(l) * shape.kv_heads + h
                      : std::min<std::size_t>(h, plan.decision.aggregated.size() - 1);
        const auto& score = plan.decision.aggregated[unit];
        diagnostics.heads.emplace_back().final_score.assign(score.begin(), score.end());
      }
      apply(l, tokens, tokens, view.n_all, selection, &diagnostics, nullptr);
    } else {
      apply(l, tokens, tokens, view.n_all, selection, nullptr, nullptr);
    }
  }
  compression_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void KvMemory::apply(int layer, std::int64_t step, std::int64_t first_reader, int n_before,
                     const Selection& selection, const Diagnostics* diagnostics,
                     const LayerView* view) {
  if (listener_) {
    CompressionEvent event;
    event.step = step;
    event.first_reader = first_reader;
    event.layer = layer;
    event.n_before = n_before;
    event.cache = cache_.get();
    event.diagnostics = diagnostics;
    event.view = view;
    event.selection = &selection;
    event.params = &params_;
    listener_(event);
  }
  cache_->compact(layer, selection.kept, selection.new_state);
  ++compressions_;  // layer compressions, whether planned per layer or for the whole pass
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
