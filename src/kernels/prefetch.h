// Software prefetch shared by the x86 kernels (*_avx2.cpp, *_avx512*.cpp).
#pragma once

#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

namespace rkv::kernels {
namespace {

// Prefetch (into L1) of the line `bytes` after p. Kernels prefetch a fixed distance ahead of
// what they read, so near the end of an array the address lies past it: that is harmless (a
// prefetch never faults), and the address is formed as an integer, not by pointer arithmetic.
inline void prefetch_ahead(const void* p, std::size_t bytes) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + bytes),
               _MM_HINT_T0);
}

}  // namespace
}  // namespace rkv::kernels
