// Portable similarity tile kernel and the run-time choice (see similarity_tiles.h).
#include "compress/similarity_tiles.h"

#include <cstring>
#include <vector>

#include "kernels/kernels.h"

namespace rkv::compress {
namespace {

// Eight floats; on an SSE2-only target GCC splits each operation into two 4-wide ones.
typedef float V8 __attribute__((vector_size(32)));

// The kernels' one dispatcher decides (kernels::active_isa(): the best the CPU runs, or
// RKV_ISA): the portable tile for the reference, the AVX2+FMA tile for every x86 instruction set
// above it (an AVX-512 machine runs it too; the tile is a small part of a compression).
bool use_avx2() {
#if defined(__x86_64__)
  static const bool ok = kernels::active_isa() != kernels::Isa::Reference;
  return ok;
#else
  return false;
#endif
}

}  // namespace

void similarity_rows_portable(const float* kn, const float* knt, int d, int cols_pad, int i0,
                              int j0, float* out) {
  const float* a0 = kn + static_cast<std::size_t>(i0) * d;
  const float* a1 = a0 + d;
  const float* a2 = a1 + d;
  const float* a3 = a2 + d;
  const std::size_t ld = static_cast<std::size_t>(cols_pad);
  // A 4 x 8 register tile: four accumulators, one column vector loaded per step of c.
  for (int j = j0; j < cols_pad; j += 8) {
    V8 c0 = {}, c1 = {}, c2 = {}, c3 = {};
    const float* b = knt + j;
    for (int c = 0; c < d; ++c, b += ld) {
      V8 v;
      std::memcpy(&v, b, sizeof v);
      c0 += a0[c] * v;
      c1 += a1[c] * v;
      c2 += a2[c] * v;
      c3 += a3[c] * v;
    }
    std::memcpy(out + j, &c0, sizeof c0);
    std::memcpy(out + ld + j, &c1, sizeof c1);
    std::memcpy(out + 2 * ld + j, &c2, sizeof c2);
    std::memcpy(out + 3 * ld + j, &c3, sizeof c3);
  }
}

void similarity_block_portable(const float* kn, const float* knt, int d, int cols_pad, int i0,
                               const SimilarityTally& t) {
  const int n = t.n;
  const int j0 = (i0 + 1) / kSimCols * kSimCols;
  thread_local std::vector<float> block;  // [kSimRows][cols_pad]
  block.resize(static_cast<std::size_t>(kSimRows) * cols_pad);
  similarity_rows_portable(kn, knt, d, cols_pad, i0, j0, block.data());
  for (int r = 0; r < kSimRows && i0 + r < n; ++r) {
    const int i = i0 + r;
    const float* s = block.data() + static_cast<std::size_t>(r) * cols_pad;
    for (int j = i + 1; j < n; ++j) {
      if (!(s[j] > t.threshold)) continue;
      t.upper_last[i] = j;  // j ascends: the last hit is the largest
      t.upper_cos[i] = s[j];
      ++t.upper_above[i];
      t.lower_last[j] = i;  // rows ascend across calls: the last hit is the largest
      t.lower_cos[j] = s[j];
      ++t.lower_above[j];
    }
  }
}

SimilarityRowsFn similarity_rows_fn() {
#if defined(__x86_64__)
  if (use_avx2()) return &similarity_rows_avx2;
#endif
  return &similarity_rows_portable;
}

SimilarityBlockFn similarity_block_fn() {
#if defined(__x86_64__)
  if (use_avx2()) return &similarity_block_avx2;
#endif
  return &similarity_block_portable;
}

std::string_view similarity_rows_isa() {
  return use_avx2() ? "avx2" : "portable";
}

}  // namespace rkv::compress
