// AMX-INT8 kernels for block-quantized weights in prefill (Q4_K, Q6_K and Q8_0, from
// kQuantAmxMinT activation rows; fewer rows and the other types run the AVX512-VNNI kernels).
//
// The arithmetic is the reference's for blocks of 32 (quantized_rows_reference on Q8_0): the
// activations are 8-bit blocks of 32 (quant::quantize_activations) for every type here, Q4_K and
// Q6_K included (matmul quantizes them so where the tiles run them; off the tiles those two take
// super-blocks of 256), the weights the small integers of quant::decode_block32 (w = f * mul * q
// - min), and each block's integer dot product is exact; only the float scaling and summing
// differ in order. TDPBSSD computes those integer dot products
// sixteen weight rows by sixteen activation rows at a time, one scale group per instruction (32
// elements; 16 for Q6_K, whose scales cover 16), and the vector units scale and add each 16x16
// result:
//   acc[n][t] += C[n][t] * (f * mul)[n] * dx[t]  (- min[n] * dx[t] * sum[t] for Q4_K's mins).
//
// Operands: A is sixteen weight rows of one scale group, unpacked once per panel of weight rows
// into int8 tiles of 16 x G contiguous bytes (one per scale group of each group of 16 rows); B is
// sixteen activation rows in TDPBSSD's B layout (row k4 holds elements 4 k4 .. 4 k4 + 3 of each of
// the sixteen rows), transposed once per call from the quantized activations (16x16 transposes of
// 32-bit groups). C rows are weight rows, its lanes activation rows, so the per-row scale is a
// broadcast and the per-activation one a vector. Tiles: C 0 and 3, A 1 and 4, B 2 and 5: the
// product of the next scale group runs on the tiles while the vector units scale this one's. The
// loops hold a panel of unpacked weight rows (about kPanelBytes) while the activations stream past
// in chunks of about kChunkBytes, sizes chosen to fit L2 (not tuned: a variant that also sliced K
// to keep each tile's operands in L1 measured the same).
//
// Everything here has internal linkage and uses no out-of-line library templates (see
// matmul_avx2.cpp).

// GCC 12's _mm*_undefined_*() (used inside some intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/quant.h"
#include "kernels/amx_util.h"
#include "kernels/avx512_util.h"
#include "kernels/kernels.h"

namespace rkv::kernels {

QuantizedRowsFn quantized_rows_amx_int8_fn();
QuantizedRowsFn quantized_rows_avx512vnni_fn();  // matmul_quant_avx512vnni.cpp

namespace {

constexpr std::size_t kPanelBytes = std::size_t{1} << 20;  // unpacked weight rows per panel
constexpr std::size_t kChunkBytes = std::size_t{1} << 19;  // transposed activations per chunk

constexpr std::size_t min_sz(std::size_t a, std::size_t b) {
  return a < b ? a : b;
}

// Elements per scale group: Q6_K has a scale per 16, the others per 32.
template <DType D>
constexpr int kGroup = D == DType::Q6_K ? 16 : 32;

inline float h2f(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Weight row i of a group of 16 unpacked into the A tiles' layout: scale group g of the row (G
// int8, decode_block32's q) at q + 16 G g + G i, so that each tile is 16 G contiguous bytes; s[K /
// G] = f * mul per group, and (Q4_K) m[K / 32] = min per block. Equal to decode_block32, element
// for element.
template <DType D>
void unpack_row(const std::uint8_t* row, std::size_t K, std::size_t i, std::int8_t* q, float* s,
                float* m) {
  constexpr std::size_t G = kGroup<D>;
  // Elements e .. e + 31 of the row (32 of them: one group, or two for Q6_K).
  auto put32 = [&](std::size_t e, __m256i v) {
    if constexpr (G == 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16 * e + 32 * i), v);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * e + 16 * i), _mm256_castsi256_si128(v));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * (e + 16) + 16 * i),
                       _mm256_extracti128_si256(v, 1));
    }
  };
  if constexpr (D == DType::Q8_0) {
    for (std::size_t b = 0; b < K / 32; ++b) {
      const std::uint8_t* blk = row + b * 34;
      s[b] = h2f(blk);
      put32(32 * b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
    }
  } else if constexpr (D == DType::Q4_K) {
    for (std::size_t sb = 0; sb < K / 256; ++sb) {
      const std::uint8_t* blk = row + sb * 144;
      std::uint64_t sc8, m8;
      quant::q4_k_scales_mins(blk + 4, sc8, m8);
      const float d = h2f(blk), dmin = h2f(blk + 2);
      for (int j = 0; j < 8; ++j) {
        s[8 * sb + j] = d * static_cast<float>((sc8 >> (8 * j)) & 0xFF);
        m[8 * sb + j] = dmin * static_cast<float>((m8 >> (8 * j)) & 0xFF);
      }
      // Sub-block 2p is the low nibbles of qs[32p .. 32p + 31], 2p + 1 the high ones.
      for (int p = 0; p < 4; ++p) {
        const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * p));
        const __m256i lo = _mm256_and_si256(qs, _mm256_set1_epi8(0x0F));
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qs, 4), _mm256_set1_epi8(0x0F));
        put32(256 * sb + 64 * p, lo);
        put32(256 * sb + 64 * p + 32, hi);
      }
    }
  } else {  // Q6_K
    for (std::size_t sb = 0; sb < K / 256; ++sb) {
      const std::uint8_t* blk = row + sb * 210;
      const float d = h2f(blk + 208);
      const auto* scales = reinterpret_cast<const std::int8_t*>(blk + 192);
      for (int g = 0; g < 16; ++g) s[16 * sb + g] = d * static_cast<float>(scales[g]);
      // Half h (128 elements), quarter r (32 of them): the low (r < 2) or high nibbles of
      // ql[64 h + 32 (r % 2) ..], with bits 2r, 2r + 1 of qh[32 h ..] above them, minus 32.
      for (int h = 0; h < 2; ++h) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
        for (int r = 0; r < 4; ++r) {
          const __m256i ql =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (r % 2)));
          const __m256i lo =
              _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (r / 2)), _mm256_set1_epi8(0x0F));
          const __m256i hi = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * r), 4),
                                              _mm256_set1_epi8(0x30));
          const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
          put32(256 * sb + 128 * h + 32 * r, v);
        }
      }
    }
  }
}

// The activations of one call in B layout: for each group of 16 rows (zero rows past T), K / 4
// rows of 64 bytes (row k4: elements 4 k4 .. 4 k4 + 3 of each activation row), and per block of
// 32 the scales dx[16] and (for mins) dx * sum [16].
struct Activations {
  const std::uint8_t* b;  // [groups][K / 4][64]
  const float* dx;        // [groups][K / 32][16]
  const float* ds;        // [groups][K / 32][16]
};

thread_local Scratch tls_xb, tls_dx, tls_ds, tls_wq, tls_ws, tls_wm;

Activations transpose_activations(const quant::ActivationBlocks& x, std::size_t T, std::size_t K) {
  const std::size_t groups = (T + 15) / 16, nb = K / 32;
  auto* b = static_cast<std::uint8_t*>(tls_xb.get(groups * K * 16));
  auto* dx = static_cast<float*>(tls_dx.get(groups * nb * 16 * sizeof(float)));
  auto* ds = static_cast<float*>(tls_ds.get(groups * nb * 16 * sizeof(float)));
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t t0 = 16 * g, rows = min_sz(16, T - t0);
    for (std::size_t c = 0; c < K / 64; ++c) {
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_loadu_si512(x.q + (t0 + i) * K + 64 * c) : _mm512_setzero_si512();
      transpose16x16(r);
      std::uint8_t* out = b + g * K * 16 + c * 1024;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + 64 * i, r[i]);
    }
    for (std::size_t blk = 0; blk < nb; ++blk)
      for (std::size_t i = 0; i < 16; ++i) {
        const std::size_t at = (g * nb + blk) * 16 + i;
        const float d = i < rows ? x.d[(t0 + i) * nb + blk] : 0.0f;
        dx[at] = d;
        ds[at] = i < rows ? d * static_cast<float>(x.sum[(t0 + i) * nb + blk]) : 0.0f;
      }
  }
  return {b, dx, ds};
}

template <DType D>
void configure_tiles() {
  constexpr int G = kGroup<D>;
  TileConfig c;
  for (int t : {0, 3}) {  // C: 16 weight rows x 16 int32
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  for (int t : {1, 4}) {  // A: 16 weight rows x G int8
    c.rows[t] = 16;
    c.colsb[t] = G;
  }
  for (int t : {2, 5}) {  // B: G / 4 rows of 16 x 4 int8
    c.rows[t] = G / 4;
    c.colsb[t] = 64;
  }
  load_tiles(c);
}

// acc[n] += C[n] * s[n] * dx (- m[n] * ds): one scale group's 16x16 integer sums (c), the weight
// rows' scales s (stride ls) and mins m (stride lm), the activation rows' dx and ds.
template <bool kMin>
inline void scale_group(const std::int32_t* c, const float* s, std::size_t ls, const float* m,
                        std::size_t lm, const float* dx, const float* ds, __m512 (&acc)[16]) {
  const __m512 dxv = _mm512_load_ps(dx);
  __m512 dsv = _mm512_setzero_ps();
  if constexpr (kMin) dsv = _mm512_load_ps(ds);
#pragma GCC unroll 16
  for (int n = 0; n < 16; ++n) {
    const __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * n));
    acc[n] = _mm512_fmadd_ps(v, _mm512_mul_ps(dxv, _mm512_set1_ps(s[n * ls])), acc[n]);
    if constexpr (kMin) acc[n] = _mm512_fnmadd_ps(dsv, _mm512_set1_ps(m[n * lm]), acc[n]);
  }
}

// y[t][n] for a group of 16 weight rows (unpacked: its A tiles at wq, 16 G bytes each; scales ws
// stride gs, mins wm stride nb) and the activation group xa (16 rows, of which `rows` are real),
// into y (nr columns). Software-pipelined: the product of scale group g + 1 runs on the tiles
// while the vector units scale group g's.
template <DType D>
void tile_block(const std::int8_t* wq, const float* ws, const float* wm, std::size_t K,
                const Activations& xa, std::size_t group, std::size_t rows, std::size_t nr,
                float* y, std::size_t ldy) {
  constexpr std::size_t G = kGroup<D>;
  constexpr bool kMin = D == DType::Q4_K;
  const std::size_t ng = K / G, nb = K / 32;
  const std::uint8_t* b = xa.b + group * K * 16;
  const float* dx = xa.dx + group * nb * 16;
  const float* ds = xa.ds + group * nb * 16;
  alignas(64) std::int32_t c0[256], c1[256];
  __m512 acc[16];
#pragma GCC unroll 16
  for (int n = 0; n < 16; ++n) acc[n] = _mm512_setzero_ps();
  // Scale group g's 16x16 sums, stored to c from the tiles, onto acc.
  auto scale = [&](std::size_t g, const std::int32_t* c) {
    const std::size_t blk = g * G / 32;
    scale_group<kMin>(c, ws + g, ng, wm + blk, nb, dx + 16 * blk, ds + 16 * blk, acc);
  };
  // Each group's sums are read back one step after they are stored (measured: the same speed as
  // reading them at once).
  _tile_loadd(1, wq, G);
  _tile_loadd(2, b, 64);
  _tile_zero(0);
  _tile_dpbssd(0, 1, 2);
  for (std::size_t g = 0; g < ng; g += 2) {  // ng is even
    _tile_loadd(4, wq + (g + 1) * 16 * G, G);
    _tile_loadd(5, b + (g + 1) * G * 16, 64);
    _tile_zero(3);
    _tile_dpbssd(3, 4, 5);
    _tile_stored(0, c0, 64);
    if (g > 0) scale(g - 1, c1);
    if (g + 2 < ng) {
      _tile_loadd(1, wq + (g + 2) * 16 * G, G);
      _tile_loadd(2, b + (g + 2) * G * 16, 64);
      _tile_zero(0);
      _tile_dpbssd(0, 1, 2);
    }
    _tile_stored(3, c1, 64);
    scale(g, c0);
  }
  scale(ng - 1, c1);
  // acc[n] lane t -> y[t][n].
  __m512i r[16];
#pragma GCC unroll 16
  for (int n = 0; n < 16; ++n) r[n] = _mm512_castps_si512(acc[n]);
  transpose16x16(r);
  const __mmask16 mask = tail_mask16(nr);
  for (std::size_t t = 0; t < rows; ++t)
    _mm512_mask_storeu_ps(y + t * ldy, mask, _mm512_castsi512_ps(r[t]));
}

template <DType D>
void amx_rows(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w, std::size_t n0,
              std::size_t n1, float* y, std::size_t ldy) {
  constexpr std::size_t G = kGroup<D>;
  const std::size_t K = w.cols, ng = K / G, nb = K / 32;
  const std::size_t rb = dtype_row_bytes(D, K);
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  const Activations xa = transpose_activations(x, T, K);
  const std::size_t groups = (T + 15) / 16;
  // A panel of weight rows (a multiple of 16) and a chunk of activation groups, each about
  // kPanelBytes / kChunkBytes of int8.
  const std::size_t panel = min_sz(1024, (kPanelBytes / K) / 16 * 16 + 16);
  const std::size_t chunk = kChunkBytes / (16 * K) + 1;
  auto* wq = static_cast<std::int8_t*>(tls_wq.get(panel * K));
  auto* ws = static_cast<float*>(tls_ws.get(panel * ng * sizeof(float)));
  auto* wm = static_cast<float*>(tls_wm.get(panel * nb * sizeof(float)));
  configure_tiles<D>();
  for (std::size_t p0 = n0; p0 < n1; p0 += panel) {
    const std::size_t np = min_sz(panel, n1 - p0), padded = (np + 15) / 16 * 16;
    for (std::size_t i = 0; i < np; ++i)
      unpack_row<D>(base + (p0 + i) * rb, K, i % 16, wq + i / 16 * 16 * K, ws + i * ng,
                    wm + i * nb);
    if (np < padded) {  // rows past the matrix: zero
      std::int8_t* last = wq + np / 16 * 16 * K;
      for (std::size_t g = 0; g < ng; ++g)
        std::memset(last + 16 * G * g + G * (np % 16), 0, G * (padded - np));
      std::memset(ws + np * ng, 0, (padded - np) * ng * sizeof(float));
      std::memset(wm + np * nb, 0, (padded - np) * nb * sizeof(float));
    }
    for (std::size_t c0 = 0; c0 < groups; c0 += chunk)
      for (std::size_t r0 = 0; r0 < np; r0 += 16)
        for (std::size_t g = c0; g < min_sz(c0 + chunk, groups); ++g)
          tile_block<D>(wq + r0 * K, ws + r0 * ng, wm + r0 * nb, K, xa, g, min_sz(16, T - 16 * g),
                        min_sz(16, np - r0), y + 16 * g * ldy + p0 + r0, ldy);
  }
  _tile_release();
}

void quantized_rows_amx(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                        std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  static const QuantizedRowsFn vnni = quantized_rows_avx512vnni_fn();
  // (quantized_on_tiles: not in the llama.cpp-precision mode, which keeps llama.cpp's summation
  // order, per block and lane as the VNNI kernels sum; Q8_0 two scale groups per step, a whole
  // transpose per 64 elements.)
  if (quantized_on_tiles(w, T) && n0 < n1) {
    switch (w.dtype) {
      case DType::Q4_K:
        amx_rows<DType::Q4_K>(x, T, w, n0, n1, y, ldy);
        return;
      case DType::Q6_K:
        amx_rows<DType::Q6_K>(x, T, w, n0, n1, y, ldy);
        return;
      case DType::Q8_0:
        amx_rows<DType::Q8_0>(x, T, w, n0, n1, y, ldy);
        return;
      default:
        break;
    }
  }
  vnni(x, T, w, n0, n1, y, ldy);
}

}  // namespace

QuantizedRowsFn quantized_rows_amx_int8_fn() {
  return &quantized_rows_amx;
}

}  // namespace rkv::kernels
