// The inner kernel of the redundancy score (redundancy.cpp): cosine similarities of a block of
// kSimRows normalised keys against the keys after them, from key-major (transposed) storage in
// panels of kSimCols keys, so that a tile reads one contiguous panel. A portable version
// (GCC/Clang vector extensions), an AVX2+FMA one (similarity_tiles_avx2.cpp, compiled with
// -mavx2 -mfma) and an AVX-512 one (similarity_tiles_avx512.cpp) exist; which runs follows the
// kernels' dispatcher (kernels::active_isa(), so RKV_ISA=reference forces the portable one and
// RKV_ISA=avx2 the AVX2 one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rkv::compress {

inline constexpr int kSimRows = 6;   // rows per block
inline constexpr int kSimCols = 16;  // keys per panel: cols_pad and j0 are multiples of it

// Where component c of key j lies in the panelled key-major storage `knt` of keys of size d:
// panel j / kSimCols holds [d][kSimCols] floats, one after the other.
inline std::size_t panel_index(int c, int j, int d) {
  return static_cast<std::size_t>(j / kSimCols) * kSimCols * d +
         static_cast<std::size_t>(c) * kSimCols + j % kSimCols;
}

// out[r][j] = sum_c kn[i0 + r][c] * knt[panel_index(c, j, d)] for r < kSimRows and j in
// [j0, cols_pad). kn: [>= i0 + kSimRows][d] (rows past the real keys are zero); knt: cols_pad
// keys, panelled (zero past the real keys); out: [kSimRows][cols_pad] (columns before j0
// untouched).
void similarity_rows_portable(const float* kn, const float* knt, int d, int cols_pad, int i0,
                              int j0, float* out);

// What redundancy_scores needs of the pairs i < j above the threshold, each pair visited once
// (from its row i): per row i, its largest column j > i with S[i, j] > threshold and the count of
// such j ("upper"); per column j, its largest row i < j with S[i, j] > threshold and the count of
// such i ("lower"). Index -1 and count 0 where there is none; the caller initialises the arrays
// so. Row arrays hold >= n entries, column arrays >= cols_pad.
struct SimilarityTally {
  int n = 0;
  float threshold = 0.0f;
  std::int32_t* upper_last = nullptr;
  std::int32_t* upper_above = nullptr;
  std::int32_t* lower_last = nullptr;
  std::int32_t* lower_above = nullptr;
};

// Tallies the pairs (i, j), i0 <= i < i0 + kSimRows, i < j < tally.n, into `tally` (rows must be
// visited in ascending i0 for the "largest row" of each column). kn and knt as above.
using SimilarityBlockFn = void (*)(const float* kn, const float* knt, int d, int cols_pad, int i0,
                                   const SimilarityTally& tally);

// Portable: the tile from similarity_rows_portable, then a scalar pass over it.
void similarity_block_portable(const float* kn, const float* knt, int d, int cols_pad, int i0,
                               const SimilarityTally& tally);
#if defined(__x86_64__)
// AVX2: the 4 x 16 tile is compared with the threshold in registers (no tile is stored); a tile
// with no cosine above it costs only the compare.
void similarity_block_avx2(const float* kn, const float* knt, int d, int cols_pad, int i0,
                           const SimilarityTally& tally);
// AVX-512: the AVX2 kernel's arithmetic on 16 lanes, a tile of kSimRows x 32; the same tallies
// bit for bit.
void similarity_block_avx512(const float* kn, const float* knt, int d, int cols_pad, int i0,
                             const SimilarityTally& tally);
#endif

// The implementation for this CPU, and its name ("avx512", "avx2" or "portable").
SimilarityBlockFn similarity_block_fn();
std::string_view similarity_rows_isa();

}  // namespace rkv::compress
