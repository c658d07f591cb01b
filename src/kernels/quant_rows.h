// The loops over weight rows and activation rows that every instruction set's quantized kernels
// share (matmul_quant_avx2.cpp, matmul_quant_avx512vnni.cpp). An ISA supplies its tile as a class
// template Tile<D> with
//   template <int R, int TT> static void run(const std::uint8_t* w, std::size_t rb,
//       const quant::ActivationBlocks& x, std::size_t K, std::size_t t0, float* y,
//       std::size_t ldy);
// (y[t][r] = row r of the R weight rows at w, stride rb, . activation row t0 + t, for t < TT)
// and static constexpr bool kDecodeRowByRow (decode takes one weight row at a time, R = 1), and
// quantized_rows<Tile> is its QuantizedRowsFn. Include only from those files: everything
// here is internal to each of them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace rkv::kernels {
namespace {

constexpr std::size_t kQuantTChunk = 64;  // rows of x per pass over the weights (prefill)
constexpr int kQuantTileRows = 4;         // weight rows per tile (R)

// Decode's order of weight rows [n0, n1): two sequential streams, row i of the first half beside
// row i of the second (pair(n, apart) takes rows n and n + apart), then the odd row left
// (one(n)). Each stream reads adjacent rows, for the hardware prefetcher, and the two rows' sums
// are independent.
template <class Pair, class One>
void decode_halves(std::size_t n0, std::size_t n1, const Pair& pair, const One& one) {
  const std::size_t half = (n1 - n0) / 2;
  for (std::size_t i = 0; i < half; ++i) pair(n0 + i, half);
  if (n0 + 2 * half < n1) one(n1 - 1);
}

// Activation rows [t0, tn) in tiles of 4, then the 1-3 left; first, where the ISA's Tile has
// run_eights for the type, as many groups of 8 as there are through it.
template <template <DType> class Tile, DType D, int R>
void quant_tile_rows(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x,
                     std::size_t K, std::size_t t0, std::size_t tn, float* y, std::size_t ldy) {
  std::size_t t = t0;
  if constexpr (requires { Tile<D>::template run_eights<R>(w, rb, x, K, t0, tn, y, ldy); })
    t = Tile<D>::template run_eights<R>(w, rb, x, K, t0, tn, y, ldy);
  for (; t + 4 <= tn; t += 4) Tile<D>::template run<R, 4>(w, rb, x, K, t, y + t * ldy, ldy);
  switch (tn - t) {
    case 3:
      Tile<D>::template run<R, 3>(w, rb, x, K, t, y + t * ldy, ldy);
      break;
    case 2:
      Tile<D>::template run<R, 2>(w, rb, x, K, t, y + t * ldy, ldy);
      break;
    case 1:
      Tile<D>::template run<R, 1>(w, rb, x, K, t, y + t * ldy, ldy);
      break;
    default:
      break;
  }
}

// Output rows [n0, n1): the rows of x in chunks of kQuantTChunk (each chunk stays in cache while
// the weight rows stream past it), the weight rows in tiles of kQuantTileRows. Where the ISA's
// Tile<D>::kDecodeRowByRow, a single activation row (decode) meets one weight row at a time
// instead.
template <template <DType> class Tile, DType D>
void quant_rows_of(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                   std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  const std::size_t K = w.cols;
  const std::size_t rb = dtype_row_bytes(D, K);
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  constexpr int kR = kQuantTileRows;
  if (Tile<D>::kDecodeRowByRow && T == 1) {
    const auto one = [&](std::size_t n) {
      quant_tile_rows<Tile, D, 1>(base + n * rb, rb, x, K, 0, 1, y + n, ldy);
    };
    if constexpr (requires { requires Tile<D>::kDecodeHalves; })
      decode_halves(
          n0, n1,
          [&](std::size_t n, std::size_t apart) {
            Tile<D>::decode_pair(base + n * rb, rb, apart, x, K, y + n);
          },
          one);
    else
      for (std::size_t n = n0; n < n1; ++n) one(n);
    return;
  }
  for (std::size_t tc = 0; tc < T; tc += kQuantTChunk) {
    const std::size_t tn = tc + kQuantTChunk < T ? tc + kQuantTChunk : T;
    std::size_t n = n0;
    for (; n + kR <= n1; n += kR)
      quant_tile_rows<Tile, D, kR>(base + n * rb, rb, x, K, tc, tn, y + n, ldy);
    for (; n < n1; ++n) quant_tile_rows<Tile, D, 1>(base + n * rb, rb, x, K, tc, tn, y + n, ldy);
  }
}

template <template <DType> class Tile>
void quantized_rows(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                    std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  if (T == 0 || n0 >= n1) return;
  switch (w.dtype) {
    case DType::Q8_0:
      quant_rows_of<Tile, DType::Q8_0>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q4_0:
      quant_rows_of<Tile, DType::Q4_0>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q5_0:
      quant_rows_of<Tile, DType::Q5_0>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q4_K:
      quant_rows_of<Tile, DType::Q4_K>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q6_K:
      quant_rows_of<Tile, DType::Q6_K>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::MXFP4:
      quant_rows_of<Tile, DType::MXFP4>(x, T, w, n0, n1, y, ldy);
      break;
    default:  // float types never come here (matmul_rows_* handle them)
      break;
  }
}

}  // namespace
}  // namespace rkv::kernels
