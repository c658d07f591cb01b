// R-KV redundancy (ALGORITHMS.md 3; golden README 6.4, reproduced exactly, quirks included):
// cosine similarity of every pair of keys, diagonal zeroed, in every row the entry of the
// LARGEST column above the threshold zeroed (column 0 when there is none), column mean divided by
// n_all, softmax over all n_all entries.
//
// The n_all x n_all matrix is never stored. Its column sums need no pairs at all (the sum of the
// normalised keys, dotted with each key); the threshold does: because S is symmetric, every pair
// i < j is computed once, kSimRows rows at a time by the register-tiled kernel of
// similarity_tiles.h, which keeps per row its largest similar column and per column its largest
// similar row. The per-row zeroing is then one subtraction per row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compress/similarity_tiles.h"
#include "compress/stages.h"
#include "compress/vec_math.h"

namespace rkv::compress {
namespace {

int round_up(int v, int m) {
  return (v + m - 1) / m * m;
}

// kn[i] = k[i] / (||k[i]|| + 1e-8), as the reference normalises.
void normalise_keys(const float* keys, int n, int d, float* kn) {
  for (int i = 0; i < n; ++i) {
    const float* k = keys + static_cast<std::size_t>(i) * d;
    const float norm = std::sqrt(dot(k, k, d)) + 1e-8f;
    for (int c = 0; c < d; ++c) kn[static_cast<std::size_t>(i) * d + c] = k[c] / norm;
  }
}

// softmax of the column means, computed in double and rounded once.
void softmax_to(const std::vector<double>& s, float* out) {
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  std::vector<double> e(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) sum += (e[i] = std::exp(s[i] - m));
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<float>(e[i] / sum);
}

}  // namespace

void redundancy_scores(const float* keys, int n_all, int head_dim, float threshold, float* out,
                       RetainDirection direction, RedundancyDetail* detail) {
  const int n = n_all;
  const int d = head_dim;
  if (n <= 0) return;
  const int rows_pad = round_up(n, kSimRows);
  const int cols_pad = round_up(n, kSimCols);
  thread_local std::vector<float> kn;   // [rows_pad][d], zero rows past n
  thread_local std::vector<float> knt;  // key-major in panels of 16 keys, zero past n
  kn.assign(static_cast<std::size_t>(rows_pad) * d, 0.0f);
  knt.assign(static_cast<std::size_t>(d) * cols_pad, 0.0f);
  normalise_keys(keys, n, d, kn.data());
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) {
      knt[panel_index(c, i, d)] = kn[static_cast<std::size_t>(i) * d + c];
    }
  }

  // Column sums without the matrix: sum_{i != j} S[i, j] = kn[j] . (sum_i kn[i]) - kn[j] . kn[j],
  // in double. Only the threshold needs the pairs.
  std::vector<double> key_sum(d, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) key_sum[c] += kn[static_cast<std::size_t>(i) * d + c];
  }
  std::vector<double> total(n);
  for (int j = 0; j < n; ++j) {
    const float* k = kn.data() + static_cast<std::size_t>(j) * d;
    double all = 0.0, self = 0.0;
    for (int c = 0; c < d; ++c) {
      all += k[c] * key_sum[c];
      self += static_cast<double>(k[c]) * k[c];
    }
    total[j] = all - self;
  }

  // Per entry, split by the side of the diagonal a pair lands on (pairs i < j are visited once,
  // from row i, by similarity_tiles.h's block kernel): "upper" is row i's own columns j > i,
  // "lower" the view S[j, i] = S[i, j] of the rows before column j.
  std::vector<std::int32_t> upper_last(rows_pad, -1), lower_last(cols_pad, -1);
  std::vector<std::int32_t> upper_above(rows_pad, 0), lower_above(cols_pad, 0);
  const SimilarityTally tally{
      n, threshold, upper_last.data(), upper_above.data(), lower_last.data(), lower_above.data()};
  const SimilarityBlockFn similarity_block = similarity_block_fn();
  for (int i0 = 0; i0 < n; i0 += kSimRows) {
    similarity_block(kn.data(), knt.data(), d, cols_pad, i0, tally);
  }

  std::vector<std::int32_t> retain(n), above(n);
  for (int i = 0; i < n; ++i) above[i] = upper_above[i] + lower_above[i];
  const bool diagonal_similar = 0.0f > threshold;  // the zeroed diagonal, for a negative T
  for (int i = 0; i < n; ++i) {
    int last = upper_last[i] >= 0 ? upper_last[i] : lower_last[i];
    if (diagonal_similar) {
      ++above[i];
      if (upper_last[i] < 0) last = i;
    }
    // README 6.4 step 3; `first` is the reference's degenerate option (7.3): always column 0.
    retain[i] = direction == RetainDirection::last && last >= 0 ? last : 0;
    if (retain[i] == i) continue;  // the diagonal is zero already
    // The zeroed cosine, recomputed for this one pair.
    total[retain[i]] -= dot(kn.data() + static_cast<std::size_t>(i) * d,
                            kn.data() + static_cast<std::size_t>(retain[i]) * d, d);
  }
  std::vector<double> mean(n);
  for (int j = 0; j < n; ++j) mean[j] = total[j] / n;  // column mean over all n_all rows
  softmax_to(mean, out);

  if (detail != nullptr) {
    detail->retain_index = std::move(retain);
    detail->n_above_threshold = std::move(above);
    detail->column_mean.assign(mean.begin(), mean.end());
  }
}

std::vector<float> redundancy_reference(const float* keys, int n_all, int head_dim, float threshold,
                                        float* out, RetainDirection direction) {
  const int n = n_all;
  const int d = head_dim;
  std::vector<float> kn(static_cast<std::size_t>(n) * d);
  normalise_keys(keys, n, d, kn.data());
  std::vector<float> s(static_cast<std::size_t>(n) * n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      float v = 0.0f;
      for (int c = 0; c < d; ++c)
        v += kn[static_cast<std::size_t>(i) * d + c] * kn[static_cast<std::size_t>(j) * d + c];
      s[static_cast<std::size_t>(i) * n + j] = i == j ? 0.0f : v;
    }
  }
  for (int i = 0; i < n; ++i) {
    int r = 0;
    if (direction == RetainDirection::last) {
      for (int j = n - 1; j >= 0; --j) {
        if (s[static_cast<std::size_t>(i) * n + j] > threshold) {
          r = j;
          break;
        }
      }
    }
    s[static_cast<std::size_t>(i) * n + r] = 0.0f;
  }
  std::vector<double> mean(n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) mean[j] += s[static_cast<std::size_t>(i) * n + j];
  }
  for (double& m : mean) m /= n;
  if (n > 0) softmax_to(mean, out);
  return s;
}

}  // namespace rkv::compress
