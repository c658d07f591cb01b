// What the AMX kernels share (matmul_avx512bf16.cpp's bf16 GEMM, matmul_quant_amxint8.cpp's
// quantized one): the tile configuration and a per-thread scratch buffer. Include only from
// translation units compiled with -mamx-tile; everything is internal to each of them.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

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

// A per-thread, grow-only, 64-byte aligned scratch buffer.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(p_); }
  void* get(std::size_t bytes) {
    if (bytes > cap_) {
      std::free(p_);
      cap_ = (bytes + 4095) / 4096 * 4096;
      p_ = std::aligned_alloc(64, cap_);
      if (p_ == nullptr) {
        cap_ = 0;
        throw std::bad_alloc();
      }
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  std::size_t cap_ = 0;
};

}  // namespace
}  // namespace rkv::kernels
