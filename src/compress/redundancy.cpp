// R-KV redundancy (ALGORITHMS.md 3; golden README 6.4, reproduced exactly, quirks included):
// cosine similarity of every pair of keys, diagonal zeroed, in every row the entry of the
// LARGEST column above the threshold zeroed (column 0 when there is none), column mean divided by
// n_all, softmax over all n_all entries.
//
// The n_all x n_all matrix is never stored. Because S is symmetric, every pair i < j is computed
// once, kSimRows rows at a time by the register-tiled kernel of similarity_tiles.h, and counted
// for both entries. The per-row zeroing is applied afterwards by subtracting S[i, r(i)] from
// column r(i), which needs only, per row, the largest similar column and its cosine (and row 0's
// cosines for the column-0 quirk).
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
  thread_local std::vector<float> kn;     // [rows_pad][d], zero rows past n
  thread_local std::vector<float> knt;    // [d][cols_pad], key-major, zero columns past n
  thread_local std::vector<float> block;  // [kSimRows][cols_pad]: S of one block of rows
  kn.assign(static_cast<std::size_t>(rows_pad) * d, 0.0f);
  knt.assign(static_cast<std::size_t>(d) * cols_pad, 0.0f);
  block.resize(static_cast<std::size_t>(kSimRows) * cols_pad);
  normalise_keys(keys, n, d, kn.data());
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) {
      knt[static_cast<std::size_t>(c) * cols_pad + i] = kn[static_cast<std::size_t>(i) * d + c];
    }
  }

  // Per entry, split by the side of the diagonal a pair lands on (pairs i < j are visited once,
  // from row i): the "upper" part is row i's own columns j > i, the "lower" part collects the
  // columns' view S[j, i] = S[i, j] of the rows before them.
  std::vector<float> upper_sum(n, 0.0f), lower_sum(n, 0.0f);
  std::vector<std::int32_t> upper_above(n, 0), lower_above(n, 0);
  std::vector<std::int32_t> upper_last(n, -1), lower_last(n, -1);  // largest similar index
  std::vector<float> upper_cos(n, 0.0f), lower_cos(n, 0.0f);       // its cosine
  std::vector<float> row0(n, 0.0f);  // S[0, j] = S[j, 0], for the column-0 quirk

  const SimilarityRowsFn similarity_rows = similarity_rows_fn();
  for (int i0 = 0; i0 < n; i0 += kSimRows) {
    similarity_rows(kn.data(), knt.data(), d, cols_pad, i0, (i0 + 1) / kSimCols * kSimCols,
                    block.data());
    for (int r = 0; r < kSimRows && i0 + r < n; ++r) {
      const int i = i0 + r;
      const float* s = block.data() + static_cast<std::size_t>(r) * cols_pad;
      if (i == 0) std::copy(s + 1, s + n, row0.begin() + 1);
      // Row side: sum and count over j > i (eight partial sums so the loop vectorises).
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::int32_t count = 0;
      int j = i + 1;
      for (; j + 8 <= n; j += 8) {
        for (int l = 0; l < 8; ++l) {
          part[l] += s[j + l];
          count += s[j + l] > threshold ? 1 : 0;
        }
      }
      float tail = 0.0f;
      for (; j < n; ++j) {
        tail += s[j];
        count += s[j] > threshold ? 1 : 0;
      }
      upper_sum[i] = ((part[0] + part[4]) + (part[1] + part[5])) +
                     ((part[2] + part[6]) + (part[3] + part[7])) + tail;
      upper_above[i] = count;
      for (int k = n - 1; k > i && count > 0; --k) {
        if (s[k] > threshold) {
          upper_last[i] = k;
          upper_cos[i] = s[k];
          break;
        }
      }
      // Column side: row i is the newest similar row so far of every column j > i it matches.
      for (int k = i + 1; k < n; ++k) {
        const bool similar = s[k] > threshold;
        lower_sum[k] += s[k];
        lower_above[k] += similar ? 1 : 0;
        lower_last[k] = similar ? i : lower_last[k];
        lower_cos[k] = similar ? s[k] : lower_cos[k];
      }
    }
  }

  std::vector<double> total(n);
  std::vector<std::int32_t> retain(n), above(n);
  for (int i = 0; i < n; ++i) {
    total[i] = static_cast<double>(upper_sum[i]) + static_cast<double>(lower_sum[i]);
    above[i] = upper_above[i] + lower_above[i];
  }
  const bool diagonal_similar = 0.0f > threshold;  // the zeroed diagonal, for a negative T
  for (int i = 0; i < n; ++i) {
    int last = upper_last[i] >= 0 ? upper_last[i] : lower_last[i];
    float last_cosine = upper_last[i] >= 0 ? upper_cos[i] : lower_cos[i];
    if (diagonal_similar) {
      ++above[i];
      if (upper_last[i] < 0) {
        last = i;
        last_cosine = 0.0f;
      }
    }
    // README 6.4 step 3; `first` is the reference's degenerate option (7.3): always column 0.
    const bool has_similar = direction == RetainDirection::last && last >= 0;
    retain[i] = has_similar ? last : 0;
    const float zeroed = has_similar ? last_cosine : (i == 0 ? 0.0f : row0[i]);
    if (retain[i] != i) total[retain[i]] -= zeroed;
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
