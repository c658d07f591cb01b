// The part of the blocked attention kernels (attention_avx512.cpp, attention_avx2.cpp) that does
// not depend on the vector width: the loop over blocks of keys and over groups of heads.
// Include only from those files; everything is internal to each of them.
//
// Kernel (one per instruction set) provides
//   static constexpr int kLanes;                       keys per block (of whole vectors)
//   template <int D, class Row, bool Full> static void transpose_block(const std::byte* block,
//                                                  std::size_t row_bytes, int rows, float* kt);
//     kLanes rows of D keys of the cache dtype read by Row (row stride row_bytes), as float32 and
//     transposed: kt[k * kLanes + i] = block[i][k]; rows >= `rows` read as zeros (the last,
//     partial block: Full is false)
//   template <int D, int GB> static void scores_block(const float* q, int g0, const float* kt,
//                                                     int n, int j0, int rows, float scale,
//                                                     float* probs);
//     probs[g][j0, j0 + rows) = scale * q[g] . keys[j] for heads g0 .. g0 + GB
#pragma once

#include <cstddef>

#include "kernels/prefetch.h"

namespace rkv::kernels {
namespace {

constexpr int kGroup = 8;     // heads per pass over a transposed key block
constexpr int kPvChunk = 64;  // values per chunk of the output pass (16 KiB at d = 64)
// Cache rows prefetched ahead of the one read. The hardware prefetcher alone left the kernel
// waiting on memory (measured: rkv_bench --benchmark_filter=Attention, docs/PERFORMANCE-LOG.md).
constexpr std::size_t kPrefetchRows = 64;

// Kernel::scores_block for gb <= GB heads.
template <class Kernel, int D, int GB>
void scores_group(int gb, const float* q, int g0, const float* kt, int n, int j0, int rows,
                  float scale, float* probs) {
  if constexpr (GB > 1) {
    if (gb < GB) return scores_group<Kernel, D, GB - 1>(gb, q, g0, kt, n, j0, rows, scale, probs);
  }
  Kernel::template scores_block<D, GB>(q, g0, kt, n, j0, rows, scale, probs);
}

// probs[g][j] = scale * q[g] . keys[j] for g < G, j < n: each block of kLanes keys is read from
// memory once, converted to float32, transposed, and reused from L1 by every head.
template <class Kernel, class Row, int D>
void scores(const float* q, int G, const std::byte* keys, std::size_t row_bytes, int n, float scale,
            float* probs) {
  constexpr int L = Kernel::kLanes;
  alignas(64) float kt[D * L];
  for (int j0 = 0; j0 < n; j0 += L) {
    const int rows = n - j0 < L ? n - j0 : L;
    const std::byte* block = keys + static_cast<std::size_t>(j0) * row_bytes;
    if (rows == L) {
      Kernel::template transpose_block<D, Row, true>(block, row_bytes, rows, kt);
    } else {  // the last, partial block: zero rows after the cache's end
      Kernel::template transpose_block<D, Row, false>(block, row_bytes, rows, kt);
    }
    for (int g0 = 0; g0 < G; g0 += kGroup)
      scores_group<Kernel, D, kGroup>(G - g0 < kGroup ? G - g0 : kGroup, q, g0, kt, n, j0, rows,
                                      scale, probs);
  }
}

}  // namespace
}  // namespace rkv::kernels
