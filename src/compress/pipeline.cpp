// The per-head pipeline runner: the stages a method's Pipeline names, in order, on one KV head.
#include "compress/pipeline.h"

#include <algorithm>
#include <vector>

namespace rkv::compress {

namespace {

std::span<const float> head_state(const LayerView& view, int h, int count) {
  if (view.state.empty() || view.state[h] == nullptr) return {};
  return {view.state[h], static_cast<std::size_t>(count)};
}

}  // namespace

HeadResult run_head(const LayerView& view, const Pipeline& pl, int h, int budget,
                    HeadDiagnostics* diag) {
  const int n_all = view.n_all;
  HeadResult res;
  if (pl.select == Pipeline::Select::random) {
    std::vector<std::int32_t> drawn =
        uniform_sample(n_all - view.window, budget - view.window,
                       draw_seed(pl.seed, view.layer, h, view.seq_len > 0 ? view.seq_len : n_all));
    if (diag != nullptr) diag->top_k = drawn;
    res.kept = kept_with_window(std::move(drawn), n_all - view.window, n_all);
    res.new_state.assign(res.kept.size(), kNoState);
    return res;
  }
  if (pl.select != Pipeline::Select::top_k) {
    if (pl.select == Pipeline::Select::sinks_recent) {
      res.kept = sinks_and_recent(n_all, budget, pl.sinks);
    } else {
      res.kept.resize(n_all);
      for (int i = 0; i < n_all; ++i) res.kept[i] = i;
    }
    const auto state = head_state(view, h, n_all);
    res.new_state.assign(res.kept.size(), kNoState);
    if (pl.carry_state && !state.empty()) {
      for (std::size_t i = 0; i < res.kept.size(); ++i) res.new_state[i] = state[res.kept[i]];
    }
    return res;
  }

  // Scored selection. The caller guarantees n_all >= budget; at n_all == budget every candidate
  // is kept (R-KV's reference still scores that case, README 7.5).
  const int w = view.window;
  const int n = n_all - w;  // candidates
  const float* keys = view.keys.empty() ? nullptr : view.keys[h];
  const int group = view.q_heads / view.kv_heads;
  const QueryGroup q{view.queries + static_cast<std::size_t>(h) * group * w * view.head_dim, group,
                     w, view.head_dim};

  // 1. Local score (ALGORITHMS.md 2), or the accumulator (h2o).
  std::vector<float> local(n, 0.0f);
  std::vector<float> rows;  // [w][n] window attention, when a later stage or diag wants it
  if (pl.attention != Pipeline::Attention::none && (diag != nullptr || pl.shift_gamma)) {
    rows.resize(static_cast<std::size_t>(w) * n);
  }
  float* rows_ptr = rows.empty() ? nullptr : rows.data();
  if (pl.attention == Pipeline::Attention::rkv) {
    attention_rkv(q, keys, n_all, rows_ptr, local.data());
  } else if (pl.attention == Pipeline::Attention::gkv) {
    attention_gkv(q, keys, n_all, rows_ptr, local.data());
  }
  const auto state = head_state(view, h, n_all);
  if (pl.accumulated) {
    for (int i = 0; i < n && i < static_cast<int>(state.size()); ++i) {
      local[i] = has_state(state[i]) ? state[i] : 0.0f;
    }
  }
  if (diag != nullptr) {
    diag->attention = rows;
    diag->attention_mean = local;
  }

  // 2. Attention-shift indicator, then the max-normalisation (G-KV order: shift first).
  if (pl.shift_gamma) {
    std::vector<float> sd(n);
    column_std_unbiased(rows.data(), w, n, sd.data());
    for (int i = 0; i < n; ++i) local[i] += *pl.shift_gamma * sd[i];
    if (diag != nullptr) {
      diag->shift_std = sd;
      diag->local_shifted = local;
    }
  }
  if (pl.normalize_local) {
    normalize_by_max(local);
    if (diag != nullptr) diag->local_normalized = local;
  }

  // 3. Global score from the entries' previous scores.
  std::vector<float> global = local;
  const auto old_state = state.empty() ? state : state.first(n);
  if (pl.smoothing != Smoothing::none) {
    std::vector<float> old(n);
    smooth_global(local, old_state, pl.smoothing, pl.decay, global, old);
    if (diag != nullptr && !old_state.empty()) diag->old_score = std::move(old);
  }
  if (diag != nullptr && (pl.smoothing != Smoothing::none || pl.accumulated ||
                          pl.attention == Pipeline::Attention::gkv)) {
    diag->global_score = global;
  }

  // 4. 1-D max pooling -> importance.
  std::vector<float> importance(n);
  max_pool_1d(global, pl.pool_kernel, importance);
  if (diag != nullptr) diag->importance = importance;

  // 5. Redundancy over ALL n_all keys, window included; the window is dropped after the softmax.
  std::vector<float> final_score = importance;
  if (pl.redundancy) {
    std::vector<float> red_full(n_all);
    redundancy_scores(keys, n_all, view.head_dim, pl.threshold, red_full.data());
    std::vector<float> red(red_full.begin(), red_full.begin() + n);
    if (diag != nullptr) {
      diag->redundancy_full = red_full;
      diag->redundancy_raw = red;
    }
    if (pl.normalize_redundancy) normalize_by_max(red);
    for (int i = 0; i < n; ++i) {
      final_score[i] = pl.lambda * importance[i] - (1.0f - pl.lambda) * red[i];
    }
    if (diag != nullptr) diag->redundancy = std::move(red);
  }
  // 6. SkipKV: whole redundant sentences first (a penalty >= tau dwarfs the token scores).
  if (pl.sentence_penalty) {
    const std::int32_t* positions = view.positions.empty() ? nullptr : view.positions[h];
    std::vector<float> penalty(n);
    sentence_penalty_of(positions, n, view.position_penalty, penalty);
    for (int i = 0; i < n; ++i) final_score[i] -= penalty[i];
    if (diag != nullptr) diag->sentence_penalty = std::move(penalty);
  }
  if (diag != nullptr) diag->final_score = final_score;

  // 7. Selection: top budget - window candidates, ascending, then the window.
  std::vector<std::int32_t> top = top_k_by_score(final_score, budget - w);
  if (diag != nullptr) diag->top_k = top;
  res.kept = kept_with_window(std::move(top), n, n_all);

  res.new_state.assign(res.kept.size(), kNoState);
  for (std::size_t i = 0; i < res.kept.size(); ++i) {
    const int e = res.kept[i];
    if (pl.store_global && e < n) res.new_state[i] = global[e];  // before pooling/redundancy
    if (pl.carry_state && !state.empty()) res.new_state[i] = state[e];
  }
  return res;
}

}  // namespace rkv::compress
