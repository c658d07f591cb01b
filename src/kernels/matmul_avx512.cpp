// AVX-512 matmul row kernels (f32 FMA for every weight dtype; bf16 and f16 are upcast exactly).
//
// Two regimes:
//  * decode (T < kGemmMinT): a GEMV over the weights in their natural [N][K] layout. Each weight
//    row is streamed once from memory; R rows x TT inputs of independent accumulators, the
//    horizontal sums of four outputs done together at the end.
//  * prefill (T >= kGemmMinT): a blocked GEMM. A panel of 32 weight rows x kKc columns is
//    transposed and converted once into an f32 [k][32] buffer (16x16 register transposes), then
//    reused for every block of kMr input rows by an outer-product micro-kernel (broadcast x,
//    2 x kMr zmm accumulators, no horizontal sums).
//
// Everything here has internal linkage and uses no out-of-line library templates, so no code
// compiled with -mavx512* can be picked by the linker for another translation unit.
// GCC 12's _mm*_undefined_*() (used inside many intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/avx512_util.h"
#include "kernels/kernels.h"
#include "kernels/prefetch.h"

namespace rkv::kernels {

MatmulRowsFn matmul_rows_avx512_fn();

namespace {

// Rows from which the packed GEMM is used. Decode batches below it take the GEMV (f16 weights:
// batch 9, 16 and 33 measured 83%, 56% and 23% faster through the GEMV than through the GEMM,
// docs/PERFORMANCE-LOG.md 2026-11-23); prefill chunks keep the GEMM.
constexpr std::size_t kGemmMinT = 34;
constexpr std::size_t kKc = 256;  // K block of the GEMM (multiple of 32)
constexpr int kMr = 12;           // input rows per GEMM micro-kernel

constexpr std::size_t min_sz(std::size_t a, std::size_t b) {
  return a < b ? a : b;
}

template <DType D>
constexpr std::size_t elem_size() {
  return D == DType::F32 ? 4 : 2;
}

// ---- weight loads: 16 consecutive weights of a row as f32 -----------------------------------

template <DType D>
inline __m512 load16(const void* row, std::size_t k) {
  if constexpr (D == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(row) + k));
    if constexpr (D == DType::BF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

template <DType D>
inline __m512 load16_masked(const void* row, std::size_t k, __mmask16 m) {
  if constexpr (D == DType::F32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const std::uint16_t*>(row) + k);
    if constexpr (D == DType::BF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// The four horizontal sums of a, b, c, d.
inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
  const __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
  const __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a8, b8), _mm256_hadd_ps(c8, d8));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// ---- decode: GEMV tiles ---------------------------------------------------------------------

// y[t][r] = dot(x[t], w[r]) for r < R, t < TT. Rows are rb bytes apart.
template <DType D, int R, int TT>
void gemv_tile(const float* x, std::size_t ldx, const char* w, std::size_t rb, std::size_t K,
               std::size_t pf, float* y, std::size_t ldy) {
  constexpr std::size_t es = elem_size<D>();
  constexpr std::size_t step = 64 / es;  // one cache line of weights per row per iteration
  __m512 acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();
  std::size_t k = 0;
  for (; k + step <= K; k += step) {
    for (int r = 0; r < R; ++r) prefetch_ahead(w + r * rb + k * es, pf);
    for (std::size_t s = 0; s < step; s += 16) {
      __m512 xv[TT];
      for (int t = 0; t < TT; ++t) xv[t] = _mm512_loadu_ps(x + t * ldx + k + s);
      for (int r = 0; r < R; ++r) {
        const __m512 wv = load16<D>(w + r * rb, k + s);
        for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
  }
  for (; k < K; k += 16) {
    const __mmask16 m = tail_mask16(K - k);
    __m512 xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + k);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load16_masked<D>(w + r * rb, k, m);
      for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int t = 0; t < TT; ++t) {
    int r = 0;
    for (; r + 4 <= R; r += 4)
      _mm_storeu_ps(y + t * ldy + r, hsum4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t]));
    for (; r < R; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

template <DType D, int TT>
void gemv_rows_tt(const float* x, std::size_t ldx, const char* w, std::size_t rb, std::size_t K,
                  std::size_t pf, std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  constexpr int kR = TT <= 2 ? 8 : 4;
  std::size_t n = n0;
  for (; n + kR <= n1; n += kR) gemv_tile<D, kR, TT>(x, ldx, w + n * rb, rb, K, pf, y + n, ldy);
  for (; n + 4 <= n1; n += 4) gemv_tile<D, 4, TT>(x, ldx, w + n * rb, rb, K, pf, y + n, ldy);
  for (; n < n1; ++n) gemv_tile<D, 1, TT>(x, ldx, w + n * rb, rb, K, pf, y + n, ldy);
}

// Adds row r's products with x for columns [k, k + 16) to a; m masks the columns past the end.
template <DType D>
inline void fma16(const char* r, const float* x, std::size_t k, __mmask16 m, __m512& a) {
  a = _mm512_fmadd_ps(load16_masked<D>(r, k, m), _mm512_maskz_loadu_ps(m, x + k), a);
}

// One input row (batch-1 decode), as in matmul_avx512bf16.cpp: a thread's rows [n0, n1) read as
// two long sequential streams (the first and the second half), one row of each at a time, every
// x load serving both; the accumulators stay in registers through the masked tail.
template <DType D>
void gemv_two_streams(const float* x, const char* w, std::size_t rb, std::size_t K, std::size_t n0,
                      std::size_t n1, float* y) {
  const std::size_t half = (n1 - n0) / 2;
  const std::size_t kfull = K / 16 * 16;
  const __mmask16 all = 0xffff, tail = tail_mask16(K - kfull);
  for (std::size_t i = 0; i < half; ++i) {
    const char* r0 = w + (n0 + i) * rb;
    const char* r1 = r0 + half * rb;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    for (std::size_t k = 0; k < kfull; k += 16) {
      fma16<D>(r0, x, k, all, a0);
      fma16<D>(r1, x, k, all, a1);
    }
    if (kfull < K) {
      fma16<D>(r0, x, kfull, tail, a0);
      fma16<D>(r1, x, kfull, tail, a1);
    }
    y[n0 + i] = _mm512_reduce_add_ps(a0);
    y[n0 + half + i] = _mm512_reduce_add_ps(a1);
  }
  if (2 * half < n1 - n0) {  // an odd row count: the last row alone
    const char* r = w + (n1 - 1) * rb;
    __m512 a = _mm512_setzero_ps();
    for (std::size_t k = 0; k < kfull; k += 16) fma16<D>(r, x, k, all, a);
    if (kfull < K) fma16<D>(r, x, kfull, tail, a);
    y[n1 - 1] = _mm512_reduce_add_ps(a);
  }
}

template <DType D>
void gemv_rows(const float* x, std::size_t T, const WeightView& w, std::size_t n0, std::size_t n1,
               float* y, std::size_t ldy) {
  const std::size_t K = w.cols;
  const std::size_t rb = K * elem_size<D>();
  const char* wb = static_cast<const char*>(w.data);
  if (T == 1) {
    gemv_two_streams<D>(x, wb, rb, K, n0, n1, y);
    return;
  }
  // Blocks of 8 weight rows outside, all the inputs inside: a block (8 x K) stays in L1/L2
  // while it is reused for the second group of four inputs.
  constexpr std::size_t kNb = 8;
  const std::size_t pf = kNb * rb;  // prefetch the next block (as in matmul_avx512bf16.cpp)
  for (std::size_t nb = n0; nb < n1; nb += kNb) {
    const std::size_t ne = min_sz(n1, nb + kNb);
    for (std::size_t t0 = 0; t0 < T; t0 += 4) {
      const float* xt = x + t0 * K;
      float* yt = y + t0 * ldy;
      switch (min_sz(4, T - t0)) {
        case 1:
          gemv_rows_tt<D, 1>(xt, K, wb, rb, K, pf, nb, ne, yt, ldy);
          break;
        case 2:
          gemv_rows_tt<D, 2>(xt, K, wb, rb, K, pf, nb, ne, yt, ldy);
          break;
        case 3:
          gemv_rows_tt<D, 3>(xt, K, wb, rb, K, pf, nb, ne, yt, ldy);
          break;
        default:
          gemv_rows_tt<D, 4>(xt, K, wb, rb, K, pf, nb, ne, yt, ldy);
          break;
      }
    }
  }
}

// ---- prefill: packed GEMM -------------------------------------------------------------------

// Packs weight rows [n, n + nr) (nr <= 16), columns [kc, kc + kl), as f32 into
// out[(k - kc) * ldo + i] (i < 16; rows beyond nr and columns beyond kl, up to the next multiple
// of 32, are zero).
template <DType D>
void pack16(const WeightView& w, std::size_t n, std::size_t nr, std::size_t kc, std::size_t kl,
            float* out, std::size_t ldo) {
  const std::size_t K = w.cols;
  const std::size_t rb = K * elem_size<D>();
  const char* base = static_cast<const char*>(w.data) + n * rb;
  if constexpr (D == DType::F32) {
    for (std::size_t k = 0; k < kl; k += 16) {
      const __mmask16 m = tail_mask16(kl - k);
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i)
        r[i] = i < nr ? _mm512_castps_si512(_mm512_maskz_loadu_ps(
                            m, reinterpret_cast<const float*>(base + i * rb) + kc + k))
                      : _mm512_setzero_si512();
      transpose16x16(r);
      for (int j = 0; j < 16; ++j) _mm512_store_ps(out + (k + j) * ldo, _mm512_castsi512_ps(r[j]));
    }
  } else {
    // 32 16-bit weights per row: 16 pairs (k, k+1) as 32-bit elements, transposed together.
    for (std::size_t k = 0; k < kl; k += 32) {
      const std::size_t left = kl - k;
      const __mmask32 m = left >= 32 ? 0xffffffffu : static_cast<__mmask32>((1u << left) - 1u);
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i)
        r[i] = i < nr ? _mm512_maskz_loadu_epi16(
                            m, reinterpret_cast<const std::uint16_t*>(base + i * rb) + kc + k)
                      : _mm512_setzero_si512();
      transpose16x16(r);
      for (int j = 0; j < 16; ++j) {
        __m512 even, odd;
        if constexpr (D == DType::BF16) {
          even = _mm512_castsi512_ps(_mm512_slli_epi32(r[j], 16));
          odd = _mm512_castsi512_ps(_mm512_and_si512(r[j], _mm512_set1_epi32(-65536)));
        } else {
          even = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(r[j]));
          odd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(r[j], 16)));
        }
        _mm512_store_ps(out + (k + 2 * j) * ldo, even);
        _mm512_store_ps(out + (k + 2 * j + 1) * ldo, odd);
      }
    }
  }
}

// y[i][j] (+)= sum_k x[i][k] * b[k][j] for i < MR, j < 16 * NV (the last 16 masked by lastm).
template <int MR, int NV>
void micro(const float* x, std::size_t ldx, const float* b, std::size_t kl, float* y,
           std::size_t ldy, __mmask16 lastm, bool accumulate) {
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) c[i][j] = _mm512_setzero_ps();
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx;
#pragma GCC unroll 2
  for (std::size_t k = 0; k < kl; ++k) {
    __m512 bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = _mm512_load_ps(b + k * (16 * NV) + 16 * j);
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(xr[i][k]);
      for (int j = 0; j < NV; ++j) c[i][j] = _mm512_fmadd_ps(a, bv[j], c[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NV; ++j) {
      const __mmask16 m = j == NV - 1 ? lastm : static_cast<__mmask16>(0xffff);
      float* yp = y + i * ldy + 16 * j;
      __m512 v = c[i][j];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yp));
      _mm512_mask_storeu_ps(yp, m, v);
    }
  }
}

using MicroFn = void (*)(const float*, std::size_t, const float*, std::size_t, float*, std::size_t,
                         __mmask16, bool);

template <int NV, std::size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> micro_table(std::index_sequence<I...>) {
  return {&micro<static_cast<int>(I) + 1, NV>...};
}

constexpr std::array<MicroFn, kMr> kMicro1 = micro_table<1>(std::make_index_sequence<kMr>());
constexpr std::array<MicroFn, kMr> kMicro2 = micro_table<2>(std::make_index_sequence<kMr>());

template <DType D>
void gemm_rows(const float* x, std::size_t T, const WeightView& w, std::size_t n0, std::size_t n1,
               float* y, std::size_t ldy) {
  const std::size_t K = w.cols;
  alignas(64) float packed[(kKc + 32) * 32];
  for (std::size_t kc = 0; kc < K; kc += kKc) {
    const std::size_t kl = min_sz(kKc, K - kc);
    const bool accumulate = kc > 0;
    for (std::size_t nb = n0; nb < n1; nb += 32) {
      const std::size_t nr = min_sz(32, n1 - nb);
      const int nv = nr > 16 ? 2 : 1;
      const std::size_t ldp = 16 * static_cast<std::size_t>(nv);
      pack16<D>(w, nb, min_sz(16, nr), kc, kl, packed, ldp);
      if (nv == 2) pack16<D>(w, nb + 16, nr - 16, kc, kl, packed + 16, ldp);
      const __mmask16 lastm = tail_mask16(nr - 16 * static_cast<std::size_t>(nv - 1));
      const std::array<MicroFn, kMr>& table = nv == 2 ? kMicro2 : kMicro1;
      for (std::size_t t0 = 0; t0 < T; t0 += kMr) {
        const std::size_t mr = min_sz(kMr, T - t0);
        table[mr - 1](x + t0 * K + kc, K, packed, kl, y + t0 * ldy + nb, ldy, lastm, accumulate);
      }
    }
  }
}

template <DType D>
void rows_dtype(const float* x, std::size_t T, const WeightView& w, std::size_t n0, std::size_t n1,
                float* y, std::size_t ldy) {
  if (T >= kGemmMinT) {
    gemm_rows<D>(x, T, w, n0, n1, y, ldy);
  } else {
    gemv_rows<D>(x, T, w, n0, n1, y, ldy);
  }
}

void matmul_rows_avx512(const float* x, std::size_t T, const WeightView& w, std::size_t n0,
                        std::size_t n1, float* y, std::size_t ldy) {
  if (T == 0 || n0 >= n1) return;
  if (w.cols == 0) {
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t n = n0; n < n1; ++n) y[t * ldy + n] = 0.0f;
    return;
  }
  switch (w.dtype) {
    case DType::F32:
      rows_dtype<DType::F32>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::BF16:
      rows_dtype<DType::BF16>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::F16:
      rows_dtype<DType::F16>(x, T, w, n0, n1, y, ldy);
      break;
    default:  // quantized weights
      quantized_rows_from_f32(Isa::Avx512, x, T, w, n0, n1, y, ldy);
      break;
  }
}

}  // namespace

MatmulRowsFn matmul_rows_avx512_fn() {
  return &matmul_rows_avx512;
}

}  // namespace rkv::kernels
