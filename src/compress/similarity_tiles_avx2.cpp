// AVX2 + FMA similarity tile kernel (see similarity_tiles.h). CMake compiles files named
// *_avx2.cpp with -mavx2 -mfma -mf16c; similarity_rows_fn() picks this wherever
// kernels::active_isa() is above the reference.
#include "compress/similarity_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace rkv::compress {

void similarity_rows_avx2(const float* kn, const float* knt, int d, int cols_pad, int i0, int j0,
                          float* out) {
  const float* a0 = kn + static_cast<std::size_t>(i0) * d;
  const float* a1 = a0 + d;
  const float* a2 = a1 + d;
  const float* a3 = a2 + d;
  const std::size_t ld = static_cast<std::size_t>(cols_pad);
  // A 4 x 16 register tile: eight accumulators, two column vectors loaded per step of c.
  for (int j = j0; j < cols_pad; j += 16) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    const float* b = knt + j;
    for (int c = 0; c < d; ++c, b += ld) {
      const __m256 v0 = _mm256_loadu_ps(b);
      const __m256 v1 = _mm256_loadu_ps(b + 8);
      __m256 x = _mm256_broadcast_ss(a0 + c);
      c00 = _mm256_fmadd_ps(x, v0, c00);
      c01 = _mm256_fmadd_ps(x, v1, c01);
      x = _mm256_broadcast_ss(a1 + c);
      c10 = _mm256_fmadd_ps(x, v0, c10);
      c11 = _mm256_fmadd_ps(x, v1, c11);
      x = _mm256_broadcast_ss(a2 + c);
      c20 = _mm256_fmadd_ps(x, v0, c20);
      c21 = _mm256_fmadd_ps(x, v1, c21);
      x = _mm256_broadcast_ss(a3 + c);
      c30 = _mm256_fmadd_ps(x, v0, c30);
      c31 = _mm256_fmadd_ps(x, v1, c31);
    }
    _mm256_storeu_ps(out + j, c00);
    _mm256_storeu_ps(out + j + 8, c01);
    _mm256_storeu_ps(out + ld + j, c10);
    _mm256_storeu_ps(out + ld + j + 8, c11);
    _mm256_storeu_ps(out + 2 * ld + j, c20);
    _mm256_storeu_ps(out + 2 * ld + j + 8, c21);
    _mm256_storeu_ps(out + 3 * ld + j, c30);
    _mm256_storeu_ps(out + 3 * ld + j + 8, c31);
  }
}

}  // namespace rkv::compress
#endif
