// What the AMX kernels share (matmul_avx512bf16.cpp's bf16 GEMM, matmul_quant_amxint8.cpp's
// quantized one): the tile configuration (and scratch.h's per-thread buffer). Include only from
// translation units compiled with -mamx-tile; everything is internal to each of them.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/scratch.h"

namespace rkv::kernels {
namespace {

// LDTILECFG's 64-byte operand, palette 1: tile t has rows[t] rows of colsb[t] bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// LDTILECFG on c. The empty asm with c's address and a memory clobber keeps GCC from dropping
// the stores that filled c: it does not always count the builtin as reading them (GCC 12 removed
// every row and column count of a config filled in a range-for over a braced list).
inline void load_tiles(const TileConfig& c) {
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

}  // namespace
}  // namespace rkv::kernels
