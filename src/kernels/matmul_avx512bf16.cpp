// AVX512-BF16 matmul row kernels: VDPBF16PS on bf16 weights, f32/f16 weights go to the AVX-512
// kernels.
//
// VDPBF16PS multiplies pairs of adjacent bf16 elements and adds both products to an f32 lane.
// The weights are bf16 already; the activations are split into two bf16 parts, hi = bf16(x) and
// lo = bf16(x - hi), and each weight pair is multiplied by both: w*hi + w*lo. The products of
// two bf16 are exact in f32 and the accumulation is f32, and hi + lo represents x to about 2^-17
// relative, so the result stays within the tolerance of a float32 reference (rounding the
// activations to bf16 alone would not).
// With MatmulPrecision::Rounded (the llama.cpp-precision mode) the activations are rounded to bf16
// (hi) and lo is neither made nor multiplied: one VDPBF16PS per weight pair instead of two. The
// result is the same, bit for bit, as the two-product kernel's on activations rounded beforehand
// (their lo is zero, and adding a product of zeros leaves an f32 sum unchanged).
//
// The hi/lo split of x is made once per matrix product, for every thread's rows (matmul in
// dispatch.cpp, through bf16_split; the MatmulRowsFn here splits its own copy per call):
//  * decode (T < kGemmMinT): GEMV over the weight rows in their natural layout (which already is
//    VDPBF16PS's pair order), on activations in rows; on AMX tiles, the same rows as tiles (below).
//  * prefill: blocked GEMM; a panel of 48 weight rows x kKc columns is transposed in units of
//    bf16 pairs (16x16 transposes of 32-bit elements) into [k/2][48] pairs, and an outer-product
//    micro-kernel broadcasts x pairs against the packed panel. The activations are in groups of
//    8 rows (kernels.h's grouped layout), so that one pair's 8 (or 16, with lo) broadcasts read
//    one cache line.
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
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/amx_util.h"
#include "kernels/avx2_util.h"
#include "kernels/avx512_util.h"
#include "kernels/kernels.h"
#include "kernels/prefetch.h"

namespace rkv::kernels {

MatmulRowsFn matmul_rows_avx512bf16_fn();
Bf16SplitFn bf16_split_avx512bf16_fn();
Bf16RowsFn bf16_rows_avx512bf16_fn();

namespace {

// Rows from which the packed GEMM is used. Decode batches measured faster through the GEMV at
// 9, 16 and 33 rows (Qwen2.5-0.5B shapes, docs/PERFORMANCE-LOG.md 2026-11-23); larger blocks
// (prefill chunks) keep the GEMM.
constexpr std::size_t kGemmMinT = kBf16GemmMinT;
// K block of the GEMM (a multiple of 32). Against blocks of 256 (the panel in L1, the outputs
// accumulated once a block), pp512 in the llama.cpp-precision mode went from 398-431 to 457-475
// tokens/s with blocks of 8192 (2 threads, alternating, 2026-11-25). Blocks of 2048 leave the
// Qwen2.5-0.5B shape's K = 896 whole and cut its down projection's 4864 in three: one thread of
// `rkv_bench Matmul/down/T512` in the exact mode ran at 154-166 GFLOP/s against 139-152 unblocked
// (3 alternating rounds, 2026-11-28, Zen 5 EPYC; blocks of 512 gave 154-168 and 1024 150-163,
// not told apart from 2048).
constexpr std::size_t kKc = 2048;
// The GEMM micro-kernel: kMr input rows x kNv vectors of 16 weight rows (a panel of
// kBf16GemmPanel rows), 24 accumulators. Measured in L1 on the 2-core Zen 4 (one core, K block
// 256, 2026-11-25): 8 x 3 runs at 213-228 GFLOP/s, 12 x 2 (the earlier shape) at 191-197, against
// a peak loop of 228-235: per pair of K it issues 8 broadcasts and 3 loads for 24 VDPBF16PS, where
// 12 x 2 issues 12 and 2. (Broadcasts folded into VDPBF16PS as {1to16} memory operands ran at 60.)
constexpr std::size_t kMr = kBf16GroupRows;  // 8
constexpr int kNv = 3;
static_assert(kBf16GemmPanel == 16 * kNv);

constexpr std::size_t min_sz(std::size_t a, std::size_t b) {
  return a < b ? a : b;
}
constexpr std::size_t round_up(std::size_t a, std::size_t m) {
  return (a + m - 1) / m * m;
}

thread_local Scratch tls_x;
thread_local Scratch tls_packed;  // the GEMM's packed weight panel

inline __mmask32 tail_mask32(std::size_t n) {
  return n >= 32 ? 0xffffffffu : static_cast<__mmask32>((1u << n) - 1u);
}

inline __m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh&>(v);
}
inline __m256i as_si256(__m256bh v) {
  return reinterpret_cast<__m256i&>(v);
}

// The two bf16 parts of 16 floats: hi = bf16(v), and lo = bf16(v - hi) (both layouts' split).
inline __m256i split_hi(__m512 v) {
  return as_si256(_mm512_cvtneps_pbh(v));
}
inline __m256i split_lo(__m512 v, __m256i hi) {
  const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
  return as_si256(_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf)));
}

// hi[k] = bf16(x[k]), lo[k] = bf16(x[k] - hi[k]) for k < n; zero for n <= k < npad (npad a
// multiple of 16). lo == nullptr: hi only.
void split_row(const float* x, std::size_t n, std::uint16_t* hi, std::uint16_t* lo,
               std::size_t npad) {
  for (std::size_t k = 0; k < npad; k += 16) {
    const __mmask16 m = k < n ? tail_mask16(n - k) : static_cast<__mmask16>(0);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
    const __m256i h = split_hi(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + k), h);
    if (lo != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + k), split_lo(v, h));
  }
}

// 32-bit pairs from one bf16 pair of a group of the grouped layout to the next: kMr hi pairs,
// then (lo) kMr lo pairs.
constexpr std::size_t group_pair_stride(bool lo) {
  return (lo ? 2 : 1) * kMr;
}

// Rows [0, n) of x (n <= kMr) into one group of the grouped layout (kernels.h): 16 elements of
// each of the kMr rows at a time are split as split_row does (rows past n: zero), and the 8 x 8
// matrix of their pairs is transposed so that each pair's rows are adjacent.
void split_group(const float* x, std::size_t n, std::size_t K, bool lo, std::size_t kpad,
                 std::uint32_t* out) {
  const std::size_t stride = group_pair_stride(lo);
  for (std::size_t k = 0; k < kpad; k += 16) {
    const __mmask16 m = k < K ? tail_mask16(K - k) : static_cast<__mmask16>(0);
    __m256 h[kMr], l[kMr];
    for (std::size_t i = 0; i < kMr; ++i) {
      const __m512 v = i < n ? _mm512_maskz_loadu_ps(m, x + i * K + k) : _mm512_setzero_ps();
      const __m256i hb = split_hi(v);
      h[i] = _mm256_castsi256_ps(hb);
      if (lo) l[i] = _mm256_castsi256_ps(split_lo(v, hb));
    }
    transpose8x8(h);
    if (lo) transpose8x8(l);
    for (std::size_t j = 0; j < 8; ++j) {
      float* o = reinterpret_cast<float*>(out + (k / 2 + j) * stride);
      _mm256_storeu_ps(o, h[j]);
      if (lo) _mm256_storeu_ps(o + kMr, l[j]);
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

// y[t][r] = dot(x[t], w[r]) for r < R, t < TT. xs row t: hi at xs + t * ldxs, lo at + kpad
// (read only when kLo). Each weight line read is matched by a prefetch of the line pf elements
// further on (the same column of the next block of rows, see gemv_rows).
template <int R, int TT, bool kLo>
void gemv_tile(const std::uint16_t* xs, std::size_t ldxs, std::size_t kpad, const std::uint16_t* w,
               std::size_t K, std::size_t pf, float* y, std::size_t ldy) {
  __m512 acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();
  std::size_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh xh[TT], xl[TT];
    for (int t = 0; t < TT; ++t) {
      xh[t] = as_bh(_mm512_loadu_si512(xs + t * ldxs + k));
      if constexpr (kLo) xl[t] = as_bh(_mm512_loadu_si512(xs + t * ldxs + kpad + k));
    }
    for (int r = 0; r < R; ++r) {
      const std::uint16_t* wr = w + r * K + k;
      prefetch_ahead(wr, pf * sizeof(std::uint16_t));
      const __m512bh wv = as_bh(_mm512_loadu_si512(wr));
      for (int t = 0; t < TT; ++t) {
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xh[t]);
        if constexpr (kLo) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xl[t]);
      }
    }
  }
  if (k < K) {
    const __mmask32 m = tail_mask32(K - k);
    __m512bh xh[TT], xl[TT];
    for (int t = 0; t < TT; ++t) {
      xh[t] = as_bh(_mm512_loadu_si512(xs + t * ldxs + k));
      if constexpr (kLo) xl[t] = as_bh(_mm512_loadu_si512(xs + t * ldxs + kpad + k));
    }
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(m, w + r * K + k));
      for (int t = 0; t < TT; ++t) {
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xh[t]);
        if constexpr (kLo) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xl[t]);
      }
    }
  }
  for (int t = 0; t < TT; ++t) {
    int r = 0;
    for (; r + 4 <= R; r += 4)
      _mm_storeu_ps(y + t * ldy + r, hsum4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t]));
    for (; r < R; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

// Adds row r's products with the input (hi, and lo when kLo) for columns [k, k + 32) to a / b;
// m masks the columns past the row's end.
template <bool kLo>
inline void dot32(const std::uint16_t* r, const std::uint16_t* xs, std::size_t kpad, std::size_t k,
                  __mmask32 m, __m512& a, __m512& b) {
  const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(m, r + k));
  a = _mm512_dpbf16_ps(a, wv, as_bh(_mm512_loadu_si512(xs + k)));
  if constexpr (kLo) b = _mm512_dpbf16_ps(b, wv, as_bh(_mm512_loadu_si512(xs + kpad + k)));
}

// One input row (batch-1 decode). A thread's rows [n0, n1) are read as two long sequential
// streams, the first half and the second half, one row of each at a time, so that every input
// load serves two weight rows and the hardware prefetcher runs two streams. Within a row the
// accumulators are plain variables and the tail is masked, so nothing leaves the registers (the
// earlier kernel, one row at a time, kept its accumulators on the stack for the tail, and GCC
// loaded each weight vector twice). Measured on the 2-core AMD EPYC (Zen 4) with AVX512-BF16,
// 2026-11-25, a decode step's weights (Qwen2.5-0.5B shape) in an alternating microbenchmark, -O3:
// when the machine reads 44 GB/s this kernel moves 36-37 GB/s against 33-35 for the earlier one (in
// the exact mode; 41-43 in the rounded one); when it reads 31-33 GB/s both sit at that bandwidth.
// Three and four streams measured the same as two; in L2 it runs at 75 GB/s per core (the earlier:
// 21).
template <bool kLo>
void gemv_rows_stream(const std::uint16_t* xs, std::size_t kpad, const std::uint16_t* w,
                      std::size_t K, std::size_t n0, std::size_t n1, float* y) {
  const std::size_t half = (n1 - n0) / 2;
  const std::size_t kfull = K / 32 * 32;
  const __mmask32 all = 0xffffffffu, tail = tail_mask32(K - kfull);
  for (std::size_t i = 0; i < half; ++i) {
    const std::uint16_t* r0 = w + (n0 + i) * K;
    const std::uint16_t* r1 = r0 + half * K;
    __m512 a0 = _mm512_setzero_ps(), b0 = a0, a1 = a0, b1 = a0;
    for (std::size_t k = 0; k < kfull; k += 32) {
      dot32<kLo>(r0, xs, kpad, k, all, a0, b0);
      dot32<kLo>(r1, xs, kpad, k, all, a1, b1);
    }
    if (kfull < K) {
      dot32<kLo>(r0, xs, kpad, kfull, tail, a0, b0);
      dot32<kLo>(r1, xs, kpad, kfull, tail, a1, b1);
    }
    y[n0 + i] = _mm512_reduce_add_ps(_mm512_add_ps(a0, b0));
    y[n0 + half + i] = _mm512_reduce_add_ps(_mm512_add_ps(a1, b1));
  }
  if (2 * half < n1 - n0) {  // an odd row count: the last row alone
    const std::uint16_t* r = w + (n1 - 1) * K;
    __m512 a = _mm512_setzero_ps(), b = a;
    for (std::size_t k = 0; k < kfull; k += 32) dot32<kLo>(r, xs, kpad, k, all, a, b);
    if (kfull < K) dot32<kLo>(r, xs, kpad, kfull, tail, a, b);
    y[n1 - 1] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
  }
}

template <int TT, bool kLo>
void gemv_rows_tt(const std::uint16_t* xs, std::size_t ldxs, std::size_t kpad,
                  const std::uint16_t* w, std::size_t K, std::size_t pf, std::size_t n0,
                  std::size_t n1, float* y, std::size_t ldy) {
  constexpr int kR = TT <= 2 ? 8 : 4;
  std::size_t n = n0;
  for (; n + kR <= n1; n += kR)
    gemv_tile<kR, TT, kLo>(xs, ldxs, kpad, w + n * K, K, pf, y + n, ldy);
  for (; n + 4 <= n1; n += 4) gemv_tile<4, TT, kLo>(xs, ldxs, kpad, w + n * K, K, pf, y + n, ldy);
  for (; n < n1; ++n) gemv_tile<1, TT, kLo>(xs, ldxs, kpad, w + n * K, K, pf, y + n, ldy);
}

template <bool kLo>
void gemv_rows(const std::uint16_t* xs, std::size_t T, std::size_t kpad, const WeightView& w,
               std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  const std::size_t K = w.cols;
  const std::size_t ldxs = Bf16Activations::row_stride(kpad, kLo);
  const auto* wb = static_cast<const std::uint16_t*>(w.data);
  if (T == 1) {
    gemv_rows_stream<kLo>(xs, kpad, wb, K, n0, n1, y);
    return;
  }
  // Blocks of kNb weight rows, each read from memory once and reused from cache by every group
  // of 4 input rows. The tiles prefetch the next block while they work on this one: with a
  // shorter distance (768 bytes along the same row) decode measured 11% slower at batch 1 and
  // 28% at batch 7 (docs/PERFORMANCE-LOG.md, 2026-11-23), stalled at the start of every block.
  constexpr std::size_t kNb = 8;
  const std::size_t pf = kNb * K;
  for (std::size_t nb = n0; nb < n1; nb += kNb) {
    const std::size_t ne = min_sz(n1, nb + kNb);
    for (std::size_t t0 = 0; t0 < T; t0 += 4) {
      const std::uint16_t* xt = xs + t0 * ldxs;
      float* yt = y + t0 * ldy;
      switch (min_sz(4, T - t0)) {
        case 1:
          gemv_rows_tt<1, kLo>(xt, ldxs, kpad, wb, K, pf, nb, ne, yt, ldy);
          break;
        case 2:
          gemv_rows_tt<2, kLo>(xt, ldxs, kpad, wb, K, pf, nb, ne, yt, ldy);
          break;
        case 3:
          gemv_rows_tt<3, kLo>(xt, ldxs, kpad, wb, K, pf, nb, ne, yt, ldy);
          break;
        default:
          gemv_rows_tt<4, kLo>(xt, ldxs, kpad, wb, K, pf, nb, ne, yt, ldy);
          break;
      }
    }
  }
}

// ---- prefill: packed GEMM -------------------------------------------------------------------

// Bytes ahead in each weight row that pack16_pairs prefetches: with it (and the grouped inputs and
// K blocks that came in the same change) the packing went from 5.1% to 2.2% of a pp512 pass in
// `perf` (Qwen2.5-0.5B bf16 shape, 2 threads, 2026-11-28).
constexpr std::size_t kPackPrefetch = 512;

// Packs bf16 weight rows [n, n + nr) (nr <= 16), columns [kc, kc + kl), as pairs:
// out[p * ldo + i] = (w[n + i][kc + 2p], w[n + i][kc + 2p + 1]). Rows beyond nr and columns
// beyond kl (up to the next multiple of 32) are zero.
void pack16_pairs(const std::uint16_t* w, std::size_t K, std::size_t n, std::size_t nr,
                  std::size_t kc, std::size_t kl, std::uint32_t* out, std::size_t ldo) {
  const std::uint16_t* base = w + n * K + kc;
  for (std::size_t k = 0; k < kl; k += 32) {
    const __mmask32 m = tail_mask32(kl - k);
    __m512i r[16];
    for (std::size_t i = 0; i < 16; ++i) {
      if (i >= nr) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      prefetch_ahead(base + i * K + k, kPackPrefetch);
      r[i] = _mm512_maskz_loadu_epi16(m, base + i * K + k);
    }
    transpose16x16(r);
    for (std::size_t j = 0; j < 16; ++j) _mm512_store_si512(out + (k / 2 + j) * ldo, r[j]);
  }
}

// y[i][j] (+)= sum_p (xhi[i][p] + xlo[i][p]) . b[p][j] for i < MR, j < 16 * NV (the last 16
// masked by lastm). xs: one group of the grouped layout (kernels.h), from the block's first pair:
// pair p's hi at xs + p * G + i, its lo (only when kLo) at + kMr (G: group_pair_stride).
template <int MR, int NV, bool kLo>
void micro(const std::uint32_t* xs, const std::uint32_t* b, std::size_t kp, float* y,
           std::size_t ldy, __mmask16 lastm, bool accumulate) {
  constexpr std::size_t G = group_pair_stride(kLo);
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) c[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (std::size_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = as_bh(_mm512_load_si512(b + p * (16 * NV) + 16 * j));
    const std::uint32_t* a = xs + p * G;
    for (int i = 0; i < MR; ++i) {
      const __m512bh ah = as_bh(_mm512_set1_epi32(static_cast<int>(a[i])));
      for (int j = 0; j < NV; ++j) c[i][j] = _mm512_dpbf16_ps(c[i][j], ah, bv[j]);
      if constexpr (kLo) {
        const __m512bh al = as_bh(_mm512_set1_epi32(static_cast<int>(a[kMr + i])));
        for (int j = 0; j < NV; ++j) c[i][j] = _mm512_dpbf16_ps(c[i][j], al, bv[j]);
      }
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

using MicroFn = void (*)(const std::uint32_t*, const std::uint32_t*, std::size_t, float*,
                         std::size_t, __mmask16, bool);

template <int NV, bool kLo, std::size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> micro_table(std::index_sequence<I...>) {
  return {&micro<static_cast<int>(I) + 1, NV, kLo>...};
}

template <int NV, bool kLo>
constexpr std::array<MicroFn, kMr> kMicro = micro_table<NV, kLo>(std::make_index_sequence<kMr>());

// The micro-kernels for a panel of nv vectors (1 <= nv <= kNv).
template <bool kLo>
const std::array<MicroFn, kMr>& micro_for(int nv) {
  static_assert(kNv == 3);
  return nv == 3 ? kMicro<3, kLo> : nv == 2 ? kMicro<2, kLo> : kMicro<1, kLo>;
}

// The packed GEMM's outer loops, shared by the vector and the tile kernels: panel by panel of
// kBf16GemmPanel weight rows of [n0, n1), each over the whole of K (in blocks of kKc only past
// it), so that a panel's outputs are written once; each block is packed once into the thread's
// scratch and handed to `block(nb, nr, nv, kc, kl, packed)`, which multiplies every input row by
// it. (K blocks of 256 outermost, as before, streamed every panel's outputs through memory once
// per block: one thread's pp512 was 211-217 tokens/s that way against 225-234 a panel at a time
// with blocks of 256, alternating, 2026-11-25.)
template <class Block>
void for_each_packed_block(const WeightView& w, std::size_t n0, std::size_t n1, Block&& block) {
  const std::size_t K = w.cols;
  const auto* wb = static_cast<const std::uint16_t*>(w.data);
  auto* packed = static_cast<std::uint32_t*>(tls_packed.get(
      (round_up(min_sz(kKc, K), 32) / 2 + 16) * kBf16GemmPanel * sizeof(std::uint32_t)));
  for (std::size_t nb = n0; nb < n1; nb += kBf16GemmPanel) {
    const std::size_t nr = min_sz(kBf16GemmPanel, n1 - nb);
    const std::size_t nv = (nr + 15) / 16;
    for (std::size_t kc = 0; kc < K; kc += kKc) {
      const std::size_t kl = min_sz(kKc, K - kc);
      for (std::size_t v = 0; v < nv; ++v)
        pack16_pairs(wb, K, nb + 16 * v, min_sz(16, nr - 16 * v), kc, kl, packed + 16 * v, 16 * nv);
      block(nb, nr, nv, kc, kl, static_cast<const std::uint32_t*>(packed));
    }
  }
}

// The vector GEMM on activations in the grouped layout (kernels.h).
template <bool kLo>
void gemm_rows(const std::uint16_t* xs, std::size_t T, std::size_t kpad, const WeightView& w,
               std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  // Group g (input rows 8g..8g+7) at g * group32, as 32-bit pairs; pair p of it at p * G.
  const auto* xs32 = reinterpret_cast<const std::uint32_t*>(xs);
  const std::size_t group32 = kMr * Bf16Activations::row_stride(kpad, kLo) / 2;
  constexpr std::size_t G = group_pair_stride(kLo);
  for_each_packed_block(w, n0, n1,
                        [&](std::size_t nb, std::size_t nr, std::size_t nv, std::size_t kc,
                            std::size_t kl, const std::uint32_t* packed) {
                          const __mmask16 lastm = tail_mask16(nr - 16 * (nv - 1));
                          const std::array<MicroFn, kMr>& table =
                              micro_for<kLo>(static_cast<int>(nv));
                          const std::size_t kp = (kl + 1) / 2;
                          for (std::size_t t0 = 0; t0 < T; t0 += kMr) {
                            const std::size_t mr = min_sz(kMr, T - t0);
                            table[mr - 1](xs32 + t0 / kMr * group32 + kc / 2 * G, packed, kp,
                                          y + t0 * ldy + nb, ldy, lastm, kc > 0);
                          }
                        });
}

// ---- prefill on AMX tiles ---------------------------------------------------------------------
//
// The same panels as gemm_rows (pack16_pairs: [k/2][16 * nv] bf16 pairs, K zero-padded to a
// multiple of 32), which is the layout of TDPBF16PS's B operand: a tile of 16 pair rows (32 of K)
// by 16 weight rows, read with the panel's row stride. A block of 16 input rows is the A operand,
// read from the split activations in place (hi, and lo at + kpad), so both precisions keep their
// arithmetic: C += A_hi . B (+ A_lo . B), products of bf16 exact in f32, accumulated in f32.
// Tiles: C 0..nv-1 (16 x 16 f32), A_hi 3, A_lo 4, B 5..4+nv.

void load_tile_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  load_tiles(c);
}

// C tiles = 16 input rows x the panel's 16 * NV weight rows over kp pairs (a multiple of 16),
// stored to out (16 rows of 16 * kNv floats).
template <int NV, bool kLo>
void amx_block(const std::uint16_t* xs, std::size_t ldx_bytes, std::size_t kpad,
               const std::uint32_t* b, std::size_t ldb_bytes, std::size_t kp, float* out) {
  _tile_zero(0);
  if constexpr (NV > 1) _tile_zero(1);
  if constexpr (NV > 2) _tile_zero(2);
  for (std::size_t p = 0; p < kp; p += 16) {
    const std::uint32_t* bp = b + p * (ldb_bytes / 4);
    _tile_loadd(3, xs + 2 * p, ldx_bytes);
    if constexpr (kLo) _tile_loadd(4, xs + kpad + 2 * p, ldx_bytes);
    _tile_loadd(5, bp, ldb_bytes);
    _tile_dpbf16ps(0, 3, 5);
    if constexpr (kLo) _tile_dpbf16ps(0, 4, 5);
    if constexpr (NV > 1) {
      _tile_loadd(6, bp + 16, ldb_bytes);
      _tile_dpbf16ps(1, 3, 6);
      if constexpr (kLo) _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NV > 2) {
      _tile_loadd(7, bp + 32, ldb_bytes);
      _tile_dpbf16ps(2, 3, 7);
      if constexpr (kLo) _tile_dpbf16ps(2, 4, 7);
    }
  }
  constexpr std::size_t ldo = 16 * kNv * sizeof(float);
  _tile_stored(0, out, ldo);
  if constexpr (NV > 1) _tile_stored(1, out + 16, ldo);
  if constexpr (NV > 2) _tile_stored(2, out + 32, ldo);
}

using AmxBlockFn = void (*)(const std::uint16_t*, std::size_t, std::size_t, const std::uint32_t*,
                            std::size_t, std::size_t, float*);

template <bool kLo>
AmxBlockFn amx_block_for(std::size_t nv) {
  static_assert(kNv == 3);
  return nv == 3 ? &amx_block<3, kLo> : nv == 2 ? &amx_block<2, kLo> : &amx_block<1, kLo>;
}

thread_local Scratch tls_amx_tail;  // the last block's input rows, zero-padded to 16

template <bool kLo>
void amx_gemm_rows(const std::uint16_t* xs, std::size_t T, std::size_t kpad, const WeightView& w,
                   std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  const std::size_t ld = Bf16Activations::row_stride(kpad, kLo);
  // The last block of fewer than 16 rows, copied with zero rows after it.
  const std::size_t tfull = T / 16 * 16;
  std::uint16_t* tail = nullptr;
  if (tfull < T) {
    tail = static_cast<std::uint16_t*>(tls_amx_tail.get(16 * ld * sizeof(std::uint16_t)));
    std::memset(tail, 0, 16 * ld * sizeof(std::uint16_t));
    std::memcpy(tail, xs + tfull * ld, (T - tfull) * ld * sizeof(std::uint16_t));
  }
  alignas(64) float out[16 * kBf16GemmPanel];
  load_tile_config();
  for_each_packed_block(w, n0, n1,
                        [&](std::size_t nb, std::size_t nr, std::size_t nv, std::size_t kc,
                            std::size_t kl, const std::uint32_t* packed) {
                          const AmxBlockFn block = amx_block_for<kLo>(nv);
                          const std::size_t kp = round_up(kl, 32) / 2;
                          for (std::size_t t0 = 0; t0 < T; t0 += 16) {
                            const std::size_t mr = min_sz(16, T - t0);
                            const std::uint16_t* a = (t0 < tfull ? xs + t0 * ld : tail) + kc;
                            block(a, ld * sizeof(std::uint16_t), kpad, packed,
                                  16 * nv * sizeof(std::uint32_t), kp, out);
                            for (std::size_t i = 0; i < mr; ++i) {
                              float* yr = y + (t0 + i) * ldy + nb;
                              const float* o = out + i * kBf16GemmPanel;
                              if (kc == 0) {
                                std::memcpy(yr, o, nr * sizeof(float));
                              } else {
                                for (std::size_t j = 0; j < nr; ++j) yr[j] += o[j];
                              }
                            }
                          }
                        });
  _tile_release();
}

// ---- decode and small batches on AMX tiles ----------------------------------------------------
//
// Below kGemmMinT input rows the weights are the A operand, read in place: a tile is 16 weight
// rows x 32 columns (64 bytes of each row), so nothing is packed and the weights stream from
// memory once, as in the GEMV. The activations are the B operand: for each group of 16 input
// rows and each 32 columns, a tile of 16 bf16 pairs x 16 rows (hi, and for the exact precision
// lo), transposed once per call into tls_amx_b by pack16_pairs (the GEMM's packing of weight
// rows, here of input rows). C[i][t] (weight row i, input row t) += A . B_hi
// (+ A . B_lo) step by step along K, as the prefill tiles sum, so that an input row's result does
// not depend on the other rows of its batch: a sequence decoded alone gets the sums it gets in a
// batch. Two groups of input rows (32) share each A tile. Tiles: C 0 and 1 (the two groups), A 2,
// B 4 and 5 (group 0's hi and lo), 6 and 7 (group 1's). One input row alone (amx_one_row) takes
// tiles one column wide instead, with nothing packed.
//
// Blocks of 16 weight rows, each row fetched kAmxSmallAhead elements ahead: 16 rows at once are
// already more streams than the prefetchers follow well. On the Qwen2.5-0.5B bf16 file (2
// threads, 4 alternating rounds, 2026-11-29, Intel Xeon with AMX), `rkv bench-decode -d 0 -p 0`
// decoded 17.3-19.9 tokens/s this way against 16.3-19.7 for the GEMV; blocks of 32 rows gave
// 15.9-18.2, and of 64 rows 12.7-16.5 without the prefetches and 11.8-18.6 with them.
constexpr std::size_t kAmxSmallAhead = 128;

thread_local Scratch tls_amx_b;     // the input rows as B tiles
thread_local Scratch tls_amx_rows;  // weight rows at an edge, zero-padded to 16 x kpad

// 16 weight rows (a: the first row's column 0, lda bytes a row) by NG groups of 16 input rows
// (bt: group 0's hi tiles, step s at + 256 s; its lo tiles at + 256 S; group 1's at + gstride),
// over S steps of 32 columns; C tile g stored to c + 256 g (16 x 16 floats).
template <int NG, bool kLo>
void amx_small_block(const std::uint16_t* a, std::size_t lda, const std::uint32_t* bt,
                     std::size_t gstride, std::size_t S, float* c) {
  _tile_zero(0);
  if constexpr (NG > 1) _tile_zero(1);
  const std::size_t row = lda / sizeof(std::uint16_t);
  for (std::size_t s = 0; s < S; ++s) {
    const std::uint32_t* b = bt + s * 256;
    const std::uint16_t* as = a + 32 * s;
    for (std::size_t i = 0; i < 16; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(as + i * row + kAmxSmallAhead), _MM_HINT_T0);
    _tile_loadd(2, as, lda);
    _tile_loadd(4, b, 64);
    _tile_dpbf16ps(0, 2, 4);
    if constexpr (NG > 1) {
      _tile_loadd(6, b + gstride, 64);
      _tile_dpbf16ps(1, 2, 6);
    }
    if constexpr (kLo) {
      _tile_loadd(5, b + 256 * S, 64);
      _tile_dpbf16ps(0, 2, 5);
      if constexpr (NG > 1) {
        _tile_loadd(7, b + gstride + 256 * S, 64);
        _tile_dpbf16ps(1, 2, 7);
      }
    }
  }
  _tile_stored(0, c, 64);
  if constexpr (NG > 1) _tile_stored(1, c + 256, 64);
}

// The A operand for weight rows [nb, nb + nr) (nr <= 16): the rows in place when every row the
// tile reads is in the matrix and K fills whole steps; else copied, zero-padded, to 16 rows of
// kpad. lda: its row stride in bytes.
const std::uint16_t* weight_tile_rows(const WeightView& w, std::size_t kpad, std::size_t nb,
                                      std::size_t nr, std::size_t& lda) {
  const std::size_t K = w.cols;
  const auto* wb = static_cast<const std::uint16_t*>(w.data);
  lda = K * sizeof(std::uint16_t);
  if (K == kpad && nb + 16 <= w.rows) return wb + nb * K;
  auto* e = static_cast<std::uint16_t*>(tls_amx_rows.get(16 * kpad * sizeof(std::uint16_t)));
  std::memset(e, 0, 16 * kpad * sizeof(std::uint16_t));
  for (std::size_t i = 0; i < nr; ++i)
    std::memcpy(e + i * kpad, wb + (nb + i) * K, K * sizeof(std::uint16_t));
  lda = kpad * sizeof(std::uint16_t);
  return e;
}

// One input row (batch-1 decode): the B tiles are one column wide, so the row's own hi (and lo)
// bf16 pairs are the B operand as they lie (16 pairs of a step are 16 tile rows of 4 bytes), with
// nothing packed, and C is 16 weight rows x 1. Each output is the same TDPBF16PS sums, step by
// step, hi then lo, as in amx_small_block, so a row alone keeps the bits it gets in a batch
// (Matmul.Bf16DecodeRowsAloneEqualTheirBatchOnAmx).
template <bool kLo>
void amx_one_row(const std::uint16_t* xs, std::size_t kpad, const WeightView& w, std::size_t n0,
                 std::size_t n1, float* y) {
  const std::size_t S = kpad / 32;
  TileConfig cfg;
  cfg.rows[0] = 16;  // C: 16 weight rows x 1
  cfg.colsb[0] = 4;
  cfg.rows[2] = 16;  // A: 16 weight rows x 32 columns
  cfg.colsb[2] = 64;
  cfg.rows[4] = cfg.rows[5] = 16;  // B: 16 pairs of columns x 1 (hi, lo)
  cfg.colsb[4] = cfg.colsb[5] = 4;
  load_tiles(cfg);
  alignas(64) float c[16];
  for (std::size_t nb = n0; nb < n1; nb += 16) {
    const std::size_t nr = min_sz(16, n1 - nb);
    std::size_t lda = 0;
    const std::uint16_t* a = weight_tile_rows(w, kpad, nb, nr, lda);
    const std::size_t row = lda / sizeof(std::uint16_t);
    _tile_zero(0);
    for (std::size_t st = 0; st < S; ++st) {
      const std::uint16_t* as = a + 32 * st;
      for (std::size_t i = 0; i < 16; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(as + i * row + kAmxSmallAhead), _MM_HINT_T0);
      _tile_loadd(2, as, lda);
      _tile_loadd(4, xs + 32 * st, 4);
      _tile_dpbf16ps(0, 2, 4);
      if constexpr (kLo) {
        _tile_loadd(5, xs + kpad + 32 * st, 4);
        _tile_dpbf16ps(0, 2, 5);
      }
    }
    _tile_stored(0, c, 4);
    std::memcpy(y + nb, c, nr * sizeof(float));
  }
  _tile_release();
}

template <bool kLo>
void amx_small_rows(const std::uint16_t* xs, std::size_t T, std::size_t kpad, const WeightView& w,
                    std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  if (T == 1) {
    amx_one_row<kLo>(xs, kpad, w, n0, n1, y);
    return;
  }
  constexpr std::size_t parts = kLo ? 2 : 1;
  const std::size_t S = kpad / 32, groups = (T + 15) / 16;
  const std::size_t ld = Bf16Activations::row_stride(kpad, kLo), gstride = S * parts * 256;
  // The B tiles: group g, part q (hi, lo), step s at g * gstride + (q * S + s) * 256: input rows
  // 16 g .. 16 g + 15 (zero past T) packed as pairs, the part's kpad columns as one K block.
  auto* bt = static_cast<std::uint32_t*>(tls_amx_b.get(groups * gstride * sizeof(std::uint32_t)));
  for (std::size_t g = 0; g < groups; ++g)
    for (std::size_t q = 0; q < parts; ++q)
      pack16_pairs(xs + q * kpad, ld, 16 * g, min_sz(16, T - 16 * g), 0, kpad,
                   bt + g * gstride + q * S * 256, 16);
  alignas(64) float c[2 * 256];
  load_tile_config();
  for (std::size_t nb = n0; nb < n1; nb += 16) {
    const std::size_t nr = min_sz(16, n1 - nb);
    std::size_t lda = 0;
    const std::uint16_t* a = weight_tile_rows(w, kpad, nb, nr, lda);
    for (std::size_t g = 0; g < groups; g += 2) {
      const bool two = g + 1 < groups;
      (two ? &amx_small_block<2, kLo> : &amx_small_block<1, kLo>)(a, lda, bt + g * gstride, gstride,
                                                                  S, c);
      const std::size_t mt = min_sz(two ? 32 : 16, T - 16 * g);
      for (std::size_t t = 0; t < mt; ++t) {
        float* yr = y + (16 * g + t) * ldy + nb;
        const float* ct = c + (t / 16) * 256 + t % 16;
        for (std::size_t i = 0; i < nr; ++i) yr[i] = ct[16 * i];
      }
    }
  }
  _tile_release();
}

// Rows [0, n) of x into Bf16Activations::data: row by row (hi, then when lo, lo), or one group.
void bf16_split(const float* x, std::size_t n, std::size_t K, bool lo, std::size_t kpad,
                bool grouped, std::uint16_t* out) {
  if (grouped) {
    split_group(x, n, K, lo, kpad, reinterpret_cast<std::uint32_t*>(out));
    return;
  }
  const std::size_t ld = Bf16Activations::row_stride(kpad, lo);
  for (std::size_t t = 0; t < n; ++t)
    split_row(x + t * K, K, out + t * ld, lo ? out + t * ld + kpad : nullptr, kpad);
}

void bf16_rows(const Bf16Activations& x, const WeightView& w, std::size_t n0, std::size_t n1,
               float* y, std::size_t ldy) {
  if (x.T == 0 || n0 >= n1) return;
  if (w.cols == 0) {
    for (std::size_t t = 0; t < x.T; ++t)
      for (std::size_t n = n0; n < n1; ++n) y[t * ldy + n] = 0.0f;
    return;
  }
  // The layout is bf16_grouped(T)'s: grouped for the vector GEMM, rows for the tiles and the GEMV.
  if (x.T >= kGemmMinT && amx_enabled()) {
    (x.lo ? amx_gemm_rows<true> : amx_gemm_rows<false>)(x.data, x.T, x.kpad, w, n0, n1, y, ldy);
  } else if (x.T >= kGemmMinT) {
    (x.lo ? gemm_rows<true> : gemm_rows<false>)(x.data, x.T, x.kpad, w, n0, n1, y, ldy);
  } else if (amx_enabled()) {
    (x.lo ? amx_small_rows<true> : amx_small_rows<false>)(x.data, x.T, x.kpad, w, n0, n1, y, ldy);
  } else {
    (x.lo ? gemv_rows<true> : gemv_rows<false>)(x.data, x.T, x.kpad, w, n0, n1, y, ldy);
  }
}

void matmul_rows_avx512bf16(const float* x, std::size_t T, const WeightView& w, std::size_t n0,
                            std::size_t n1, float* y, std::size_t ldy) {
  if (w.dtype != DType::BF16) {
    static const MatmulRowsFn other = matmul_rows_for(Isa::Avx512);
    (other != nullptr ? other : &matmul_rows_reference)(x, T, w, n0, n1, y, ldy);
    return;
  }
  // Rounded: the activations are bf16 (hi) alone, one product per weight pair.
  const bool lo = w.precision != MatmulPrecision::Rounded;
  const std::size_t kpad = round_up(w.cols, 32);
  const std::size_t ld = Bf16Activations::row_stride(kpad, lo);
  const bool grouped = bf16_grouped(T);
  const std::size_t rows = grouped ? round_up(T, kMr) : T, step = grouped ? kMr : T;
  auto* xs = static_cast<std::uint16_t*>(tls_x.get(rows * ld * sizeof(std::uint16_t)));
  for (std::size_t t = 0; t < T; t += step)
    bf16_split(x + t * w.cols, min_sz(step, T - t), w.cols, lo, kpad, grouped, xs + t * ld);
  bf16_rows({xs, T, kpad, lo, grouped}, w, n0, n1, y, ldy);
}

}  // namespace

MatmulRowsFn matmul_rows_avx512bf16_fn() {
  return &matmul_rows_avx512bf16;
}

Bf16SplitFn bf16_split_avx512bf16_fn() {
  return &bf16_split;
}

Bf16RowsFn bf16_rows_avx512bf16_fn() {
  return &bf16_rows;
}

}  // namespace rkv::kernels
