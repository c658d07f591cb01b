// Portable similarity tile kernel and the run-time choice (see similarity_tiles.h).
#include "compress/similarity_tiles.h"

#include <cstring>

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

SimilarityRowsFn similarity_rows_fn() {
#if defined(__x86_64__)
  if (use_avx2()) return &similarity_rows_avx2;
#endif
  return &similarity_rows_portable;
}

std::string_view similarity_rows_isa() {
  return use_avx2() ? "avx2" : "portable";
}

}  // namespace rkv::compress
