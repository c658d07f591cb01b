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

bool use_avx512() {
#if defined(__x86_64__)
  static const bool ok = kernels::active_isa() == kernels::Isa::Avx512 ||
                         kernels::active_isa() == kernels::Isa::Avx512Bf16;
  return ok;
#else
  return false;
#endif
}

}  // namespace

void similarity_rows_portable(const float* kn, const float* knt, int d, int cols_pad, int i0,
                              int j0, float* out) {
  const float* a = kn + static_cast<std::size_t>(i0) * d;
  const std::size_t ld = static_cast<std::size_t>(cols_pad);
  // A kSimRows x 8 register tile: one accumulator per row, one column vector loaded per step of c.
  for (int j = j0; j < cols_pad; j += 8) {
    V8 acc[kSimRows] = {};
    const float* b = knt + panel_index(0, j, d);
    for (int c = 0; c < d; ++c, b += kSimCols) {
      V8 v;
      std::memcpy(&v, b, sizeof v);
      for (int r = 0; r < kSimRows; ++r) acc[r] += a[static_cast<std::size_t>(r) * d + c] * v;
    }
    for (int r = 0; r < kSimRows; ++r) std::memcpy(out + r * ld + j, &acc[r], sizeof acc[r]);
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
      ++t.upper_above[i];
      t.lower_last[j] = i;  // rows ascend across calls: the last hit is the largest
      ++t.lower_above[j];
    }
  }
}

SimilarityBlockFn similarity_block_fn() {
#if defined(__x86_64__)
  if (use_avx512()) return &similarity_block_avx512;
  if (use_avx2()) return &similarity_block_avx2;
#endif
  return &similarity_block_portable;
}

std::string_view similarity_rows_isa() {
  return use_avx512() ? "avx512" : use_avx2() ? "avx2" : "portable";
}

}  // namespace rkv::compress
