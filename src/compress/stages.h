// The scoring stages that the compression presets compose (DESIGN.md property 4). Each stage is
// one small file of src/compress/ and works on ONE KV head; compress_layer.cpp wires them into the
// per-method pipelines. All arithmetic is float32, as in the references the goldens come from.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "rkv/compression.h"

namespace rkv::compress {

// The G query heads of one KV head inside a LayerView's query block.
struct QueryGroup {
  const float* first = nullptr;  // [G][window][head_dim]: the group's heads are consecutive
  int heads = 1;                 // G
  int window = 0;
  int head_dim = 0;
};

// ---- attention importance (attention_rkv.cpp, attention_gkv.cpp) --------------------------------

// R-KV / SnapKV (ALGORITHMS.md 2.1-2.4): logits Q K^T / sqrt(d) of the window queries over the
// n candidate keys, max over the group ON THE LOGITS, softmax of each row over the candidates
// only, mean over the rows. logits_out: [window][n] (may be null); mean_out: [n].
void attention_rkv(const QueryGroup& q, const float* keys, int n_all, float* logits_out,
                   float* mean_out);

// G-KV (ALGORITHMS.md 2, last paragraph): softmax of each window query over ALL visible keys
// (window query r sees entries 0..n+r), max over the group AFTER the softmax, window columns
// dropped. probs_out: [window][n] (may be null); mean_out: [n].
void attention_gkv(const QueryGroup& q, const float* keys, int n_all, float* probs_out,
                   float* mean_out);

// Causal attention of `rows` queries that sit at the END of the n_all entries (query r is entry
// n_all - rows + r): softmax per query head over its visible entries, max over the group after
// the softmax; row r's first n_out columns go to rows_out[r] (if not null) and are summed into
// col_sum[n_out] (overwritten). attention_gkv and gkv_prefill_scores are this with n_out = n and
// n_out = n_all.
void causal_group_attention(const QueryGroup& q, const float* keys, int n_all, int n_out,
                            float* rows_out, float* col_sum);

// out[t][j] = queries[t] . keys[j] for t < rows, j < n: the logits of a query group, unscaled,
// by the kernels' matmul rows for the active instruction set (kernels/kernels.h), single-threaded
// (compress_layer's heads run on the pool). queries: [rows][d], keys: [n][d], out: [rows][n].
void group_logits(const float* queries, int rows, const float* keys, int n, int d, float* out);

// ---- GQA group pooling (gqa_pool.cpp)
// -------------------------------------------------------------

// out[i] = max over g of in[g][i]: the element-wise max over a query group (R-KV pools logits,
// G-KV probabilities; neither averages). `out` may alias in[0].
void group_max(std::span<const float* const> in, int len, float* out);

// ---- small vector stages (normalize.cpp, max_pool.cpp, global_smoothing.cpp) --------------------

// Divides by the maximum when it is positive (G-KV's per-head normalisation); a vector whose
// maximum is not positive is left as it is rather than turned into NaN/inf.
void normalize_by_max(std::span<float> v);

// Same-size 1-D max pooling, stride 1, window [i - kernel/2, i + kernel/2] clipped to the vector
// (out-of-range neighbours are ignored, as with -inf padding). kernel odd; 1 copies.
void max_pool_1d(std::span<const float> in, int kernel, std::span<float> out);

// G-KV global score (ALGORITHMS.md 4, golden README 6.3 step 6): per entry, with old = old_state[i]
// when has_state(), else the entry's own local score (max, mean) or 0 (sum):
//   max: g = max(a * old, local);  mean: g = a * old + (1 - a) * local;  sum: g = a * old + local.
// old_state may be empty (no entry has a score yet). old_out (optional, size n) receives `old`.
void smooth_global(std::span<const float> local, std::span<const float> old_state,
                   Smoothing smoothing, float decay, std::span<float> global_out,
                   std::span<float> old_out = {});

// ---- attention-shift indicator (attention_shift.cpp) --------------------------------------------

// Unbiased (N-1) standard deviation of every column of rows[window][n] over the window rows
// (needs window >= 2).
void column_std_unbiased(const float* rows, int window, int n, float* std_out);

// ---- redundancy (redundancy.cpp)
// ------------------------------------------------------------------

// Which column each row zeroes (golden README 6.4 step 3, 7.3). `first` is the reference's
// degenerate option: it always zeroes column 0. No preset uses it.
enum class RetainDirection { last, first };

// Optional per-entry outputs of redundancy_scores (the golden `redundancy` cases check them).
struct RedundancyDetail {
  std::vector<std::int32_t> retain_index;       // [n_all] the column zeroed in each row
  std::vector<std::int32_t> n_above_threshold;  // [n_all] entries with cosine > T in each row
  std::vector<float> column_mean;               // [n_all] s before the softmax
};

// R-KV redundancy (ALGORITHMS.md 3, golden README 6.4) over all n_all keys of one head:
// cosine matrix, diagonal zeroed, per row the LARGEST column with cosine > threshold zeroed
// (column 0 when none: the reference's quirk), column mean divided by n_all, softmax over all
// n_all. out: [n_all]. O(n_all^2 d) time, O(n_all d) memory: the matrix is never stored.
void redundancy_scores(const float* keys, int n_all, int head_dim, float threshold, float* out,
                       RetainDirection direction = RetainDirection::last,
                       RedundancyDetail* detail = nullptr);

// The same computed naively from the full matrix (the test oracle, and the golden's
// `cosine_zeroed`): returns the zeroed cosine matrix [n_all][n_all] and writes `out` [n_all].
std::vector<float> redundancy_reference(const float* keys, int n_all, int head_dim, float threshold,
                                        float* out,
                                        RetainDirection direction = RetainDirection::last);

// ---- sentence penalty (sentence_penalty.cpp) ----------------------------------------------------

// SkipKV (ALGORITHMS.md 5): out[i] = position_penalty[positions[i]] for the first n entries, 0
// where the position lies outside the table (prompt tokens, the sentence still being written).
// positions may be null only when position_penalty is empty (no penalties at all).
void sentence_penalty_of(const std::int32_t* positions, int n,
                         std::span<const float> position_penalty, std::span<float> out);

// ---- selection (selection.cpp)
// ----------------------------------------------------------------------

// The `count` best of score[0..n) by descending score (ties: lower index first; NaN ranks
// lowest). The selector takes a COUNT, never a ratio.
std::vector<std::int32_t> top_k_by_score(std::span<const float> score, int count);

// Kept indices of a scored compression: `top` sorted ascending, then the window n..n_all-1.
std::vector<std::int32_t> kept_with_window(std::vector<std::int32_t> top, int n, int n_all);

// StreamingLLM: the first `sinks` entries and the most recent budget - sinks (ascending).
std::vector<std::int32_t> sinks_and_recent(int n_all, int budget, int sinks);

// The `random` method: `count` distinct indices of [0, n) drawn uniformly (every subset of that
// size equally likely: a partial Fisher-Yates shuffle driven by splitmix64 with rejection, so the
// draws are the same on every platform), unsorted. count is clamped to [0, n].
std::vector<std::int32_t> uniform_sample(int n, int count, std::uint64_t seed);
// The seed of one compression of one (layer, KV head) of a sequence of seq_len tokens.
std::uint64_t draw_seed(std::uint32_t seed, int layer, int head, std::int64_t seq_len);

}  // namespace rkv::compress
