// AVX2 + FMA + F16C matmul row kernels (f32 FMA for every weight dtype; bf16 and f16 are
// upcast exactly: bf16 by zero-extending to 32 bits and shifting left 16, f16 by vcvtph2ps).
//
//  * decode (T < kGemmMinT): GEMV over the weights in their natural [N][K] layout, R rows x TT
//    inputs of independent accumulators, four horizontal sums at once at the end.
//  * prefill: blocked GEMM; panels of 16 weight rows x kKc columns are converted to f32 and
//    transposed (8x8 register transposes) into [k][16], kNc rows at a time, then reused by a
//    6 x 16 outer-product micro-kernel for every block of kMc input rows.
//
// Everything here has internal linkage and uses no out-of-line library templates, so no code
// compiled with -mavx2 can be picked by the linker for another translation unit.

// GCC 12's _mm*_undefined_*() (used inside some intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/avx2_util.h"
#include "kernels/kernels.h"
#include "kernels/prefetch.h"

namespace rkv::kernels {

MatmulRowsFn matmul_rows_avx2_fn();

namespace {

// Rows from which the packed GEMM is used. Decode batches below it take the GEMV (f16 weights:
// batch 9, 16 and 33 measured 102%, 93% and 61% faster through the GEMV than through the GEMM,
// docs/PERFORMANCE-LOG.md 2026-11-23); prefill chunks keep the GEMM.
constexpr std::size_t kGemmMinT = 34;
constexpr std::size_t kKc = 256;  // K block of the GEMM (multiple of 8)
constexpr int kMr = 6;            // input rows per GEMM micro-kernel

constexpr std::size_t min_sz(std::size_t a, std::size_t b) {
  return a < b ? a : b;
}

template <DType D>
constexpr std::size_t elem_size() {
  return D == DType::F32 ? 4 : 2;
}

// One weight as f32 (scalar tails).
template <DType D>
inline float load1(const void* row, std::size_t k) {
  if constexpr (D == DType::F32) {
    return static_cast<const float*>(row)[k];
  } else {
    const std::uint16_t h = static_cast<const std::uint16_t*>(row)[k];
    if constexpr (D == DType::BF16) {
      const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    } else {
      return _cvtsh_ss(h);
    }
  }
}

// 8 consecutive weights of a row as f32.
template <DType D>
inline __m256 load8(const void* row, std::size_t k) {
  if constexpr (D == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + k);
  } else {
    const __m128i h = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(row) + k));
    if constexpr (D == DType::BF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// Weights k .. k + n - 1 (n < 8) of a row as f32, zero beyond.
template <DType D>
inline __m256 load8_partial(const void* row, std::size_t k, std::size_t n) {
  alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) tmp[i] = load1<D>(row, k + i);
  return _mm256_load_ps(tmp);
}

inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

inline float hsum1(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---- decode: GEMV tiles ---------------------------------------------------------------------

template <DType D, int R, int TT>
void gemv_tile(const float* x, std::size_t ldx, const char* w, std::size_t rb, std::size_t K,
               std::size_t pf, float* y, std::size_t ldy) {
  constexpr std::size_t es = elem_size<D>();
  constexpr std::size_t step = 64 / es;  // one cache line of weights per row per iteration
  __m256 acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps();
  std::size_t k = 0;
  for (; k + step <= K; k += step) {
    for (int r = 0; r < R; ++r) prefetch_ahead(w + r * rb + k * es, pf);
    for (std::size_t s = 0; s < step; s += 8) {
      __m256 xv[TT];
      for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + k + s);
      for (int r = 0; r < R; ++r) {
        const __m256 wv = load8<D>(w + r * rb, k + s);
        for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
  }
  for (; k + 8 <= K; k += 8) {
    __m256 xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + k);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load8<D>(w + r * rb, k);
      for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  float tail[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) {
      float s = 0.0f;
      for (std::size_t kk = k; kk < K; ++kk) s += x[t * ldx + kk] * load1<D>(w + r * rb, kk);
      tail[r][t] = s;
    }
  for (int t = 0; t < TT; ++t) {
    int r = 0;
    for (; r + 4 <= R; r += 4) {
      const __m128 s = hsum4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t]);
      _mm_storeu_ps(y + t * ldy + r, _mm_add_ps(s, _mm_setr_ps(tail[r][t], tail[r + 1][t],
                                                               tail[r + 2][t], tail[r + 3][t])));
    }
    for (; r < R; ++r) y[t * ldy + r] = hsum1(acc[r][t]) + tail[r][t];
  }
}

template <DType D, int TT>
void gemv_rows_tt(const float* x, std::size_t ldx, const char* w, std::size_t rb, std::size_t K,
                  std::size_t pf, std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  constexpr int kR = 4;
  std::size_t n = n0;
  for (; n + kR <= n1; n += kR) gemv_tile<D, kR, TT>(x, ldx, w + n * rb, rb, K, pf, y + n, ldy);
  for (; n < n1; ++n) gemv_tile<D, 1, TT>(x, ldx, w + n * rb, rb, K, pf, y + n, ldy);
}

template <DType D>
void gemv_rows(const float* x, std::size_t T, const WeightView& w, std::size_t n0, std::size_t n1,
               float* y, std::size_t ldy) {
  const std::size_t K = w.cols;
  const std::size_t rb = K * elem_size<D>();
  const char* wb = static_cast<const char*>(w.data);
  constexpr std::size_t kNb = 8;
  const std::size_t pf = kNb * rb;  // prefetch the next block (as in matmul_avx512bf16.cpp)
  for (std::size_t nb = n0; nb < n1; nb += kNb) {
    const std::size_t ne = min_sz(n1, nb + kNb);
    for (std::size_t t0 = 0; t0 < T; t0 += 2) {
      const float* xt = x + t0 * K;
      float* yt = y + t0 * ldy;
      if (T - t0 >= 2) {
        gemv_rows_tt<D, 2>(xt, K, wb, rb, K, pf, nb, ne, yt, ldy);
      } else {
        gemv_rows_tt<D, 1>(xt, K, wb, rb, K, pf, nb, ne, yt, ldy);
      }
    }
  }
}

// ---- prefill: packed GEMM -------------------------------------------------------------------

// Packs weight rows [n, n + nr) (nr <= 16), columns [kc, kc + kl), as f32 into
// out[(k - kc) * 16 + i]; rows beyond nr and columns beyond kl (to the next multiple of 8) are 0.
template <DType D>
void pack16(const WeightView& w, std::size_t n, std::size_t nr, std::size_t kc, std::size_t kl,
            float* out) {
  const std::size_t rb = w.cols * elem_size<D>();
  const char* base = static_cast<const char*>(w.data) + n * rb;
  for (std::size_t g = 0; g < 2; ++g) {
    for (std::size_t k = 0; k < kl; k += 8) {
      const std::size_t left = kl - k;
      __m256 r[8];
      for (std::size_t i = 0; i < 8; ++i) {
        const std::size_t row = 8 * g + i;
        if (row >= nr) {
          r[i] = _mm256_setzero_ps();
        } else if (left >= 8) {
          r[i] = load8<D>(base + row * rb, kc + k);
        } else {
          r[i] = load8_partial<D>(base + row * rb, kc + k, left);
        }
      }
      transpose8x8(r);
      for (std::size_t j = 0; j < 8; ++j) _mm256_store_ps(out + (k + j) * 16 + 8 * g, r[j]);
    }
  }
}

// y[i][j] (+)= sum_k x[i][k] * b[k][j] for i < MR, j < 16 (only the first ncols stored).
template <int MR>
void micro(const float* x, std::size_t ldx, const float* b, std::size_t kl, float* y,
           std::size_t ldy, std::size_t ncols, bool accumulate) {
  // Every loop over i is unrolled so that the 2 * MR accumulators live in registers: a loop
  // left rolled makes GCC keep c[][] in memory and store all of it on every k (measured: 12
  // stores per k capped the 6 x 16 kernel at about 30% of the FMA peak).
  __m256 c[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) c[i][0] = c[i][1] = _mm256_setzero_ps();
  const float* xr[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx;
  for (std::size_t k = 0; k < kl; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * 16);
    const __m256 b1 = _mm256_load_ps(b + k * 16 + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(xr[i] + k);
      c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* yp = y + i * ldy;
    if (ncols == 16) {
      __m256 v0 = c[i][0], v1 = c[i][1];
      if (accumulate) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(yp));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(yp + 8));
      }
      _mm256_storeu_ps(yp, v0);
      _mm256_storeu_ps(yp + 8, v1);
    } else {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, c[i][0]);
      _mm256_store_ps(tmp + 8, c[i][1]);
      for (std::size_t j = 0; j < ncols; ++j) yp[j] = accumulate ? yp[j] + tmp[j] : tmp[j];
    }
  }
}

using MicroFn = void (*)(const float*, std::size_t, const float*, std::size_t, float*, std::size_t,
                         std::size_t, bool);

template <std::size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> micro_table(std::index_sequence<I...>) {
  return {&micro<static_cast<int>(I) + 1>...};
}

constexpr std::array<MicroFn, kMr> kMicro = micro_table(std::make_index_sequence<kMr>());

// Cache blocking: kNc weight rows are packed (kNc / 16 panels of kKc x 16 f32, about 270 KiB,
// in L2) once per K block; then kMc input rows at a time (kMc x kKc f32 = 96 KiB, also in L2)
// sweep every panel, each panel staying in L1 for the kMc / kMr micro-kernels that reuse it.
constexpr std::size_t kNc = 256;
constexpr std::size_t kMc = 96;
constexpr std::size_t kPanelFloats = (kKc + 8) * 16;

// One thread's packed panels, allocated on first use (no std::vector: nothing instantiated in
// this AVX2 translation unit may be shared with others, see the top of the file).
struct PackBuffer {
  float* data = nullptr;
  float* get() {
    if (data == nullptr)
      data = static_cast<float*>(
          ::operator new[](kNc / 16 * kPanelFloats * sizeof(float), std::align_val_t{64}));
    return data;
  }
  ~PackBuffer() {
    if (data != nullptr) ::operator delete[](data, std::align_val_t{64});
  }
};

template <DType D>
void gemm_rows(const float* x, std::size_t T, const WeightView& w, std::size_t n0, std::size_t n1,
               float* y, std::size_t ldy) {
  const std::size_t K = w.cols;
  thread_local PackBuffer buffer;
  float* packed = buffer.get();
  for (std::size_t nc = n0; nc < n1; nc += kNc) {
    const std::size_t nc_end = min_sz(n1, nc + kNc);
    for (std::size_t kc = 0; kc < K; kc += kKc) {
      const std::size_t kl = min_sz(kKc, K - kc);
      const bool accumulate = kc > 0;
      for (std::size_t nb = nc, p = 0; nb < nc_end; nb += 16, ++p)
        pack16<D>(w, nb, min_sz(16, nc_end - nb), kc, kl, packed + p * kPanelFloats);
      for (std::size_t tc = 0; tc < T; tc += kMc) {
        const std::size_t tc_end = min_sz(T, tc + kMc);
        for (std::size_t nb = nc, p = 0; nb < nc_end; nb += 16, ++p) {
          const std::size_t nr = min_sz(16, nc_end - nb);
          for (std::size_t t0 = tc; t0 < tc_end; t0 += kMr) {
            const std::size_t mr = min_sz(kMr, tc_end - t0);
            kMicro[mr - 1](x + t0 * K + kc, K, packed + p * kPanelFloats, kl, y + t0 * ldy + nb,
                           ldy, nr, accumulate);
          }
        }
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

void matmul_rows_avx2(const float* x, std::size_t T, const WeightView& w, std::size_t n0,
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
      quantized_rows_from_f32(Isa::Avx2, x, T, w, n0, n1, y, ldy);
      break;
  }
}

}  // namespace

MatmulRowsFn matmul_rows_avx2_fn() {
  return &matmul_rows_avx2;
}

}  // namespace rkv::kernels
