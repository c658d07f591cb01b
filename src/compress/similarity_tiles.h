// The inner kernel of the redundancy score (redundancy.cpp): cosine similarities of a block of
// kSimRows normalised keys against a range of keys, from key-major (transposed) storage so the
// loop runs along contiguous columns. A portable version (GCC/Clang vector extensions) and an
// AVX2+FMA one (similarity_tiles_avx2.cpp, compiled with -mavx2 -mfma) exist; which runs follows
// the kernels' dispatcher (kernels::active_isa(), so RKV_ISA=reference forces the portable one).
#pragma once

#include <string_view>

namespace rkv::compress {

inline constexpr int kSimRows = 4;   // rows per block
inline constexpr int kSimCols = 16;  // column granularity: cols_pad and j0 are multiples of it

// out[r][j] = sum_c kn[i0 + r][c] * knt[c][j] for r < kSimRows and j in [j0, cols_pad).
// kn: [>= i0 + kSimRows][d] (rows past the real keys are zero); knt: [d][cols_pad];
// out: [kSimRows][cols_pad] (columns before j0 untouched).
using SimilarityRowsFn = void (*)(const float* kn, const float* knt, int d, int cols_pad, int i0,
                                  int j0, float* out);

void similarity_rows_portable(const float* kn, const float* knt, int d, int cols_pad, int i0,
                              int j0, float* out);
#if defined(__x86_64__)
void similarity_rows_avx2(const float* kn, const float* knt, int d, int cols_pad, int i0, int j0,
                          float* out);
#endif

// The implementation for this CPU, and its name ("avx2" or "portable").
SimilarityRowsFn similarity_rows_fn();
std::string_view similarity_rows_isa();

}  // namespace rkv::compress
