// Software prefetch shared by the x86 kernels (*_avx2.cpp, *_avx512*.cpp).
#pragma once

#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

namespace rkv::kernels {
namespace {

// The address `bytes` after p. Kernels prefetch a fixed distance ahead of what they read, so near
// the end of an array the address lies past it: that is harmless (a prefetch never faults), and
// the address is formed as an integer, not by pointer arithmetic.
inline const char* ahead_of(const void* p, std::size_t bytes) {
  return reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + bytes);
}

// Prefetch (into L1) of the line `bytes` after p.
inline void prefetch_ahead(const void* p, std::size_t bytes) {
  _mm_prefetch(ahead_of(p, bytes), _MM_HINT_T0);
}

// The same into L2 only (the T2 hint). The decode attention's streams (reads spread thinly
// among many FMAs) ran faster with it on an Intel Xeon with AMX (docs/PERFORMANCE.md, "The
// decode attention's prefetches into L2"). The likely reason, not confirmed (that machine shows
// no performance counters): a prefetch into L1 holds one of the core's few L1 miss buffers for
// the whole trip to memory, which caps the core's reads in flight.
inline void prefetch_l2_ahead(const void* p, std::size_t bytes) {
  _mm_prefetch(ahead_of(p, bytes), _MM_HINT_T2);
}

}  // namespace
}  // namespace rkv::kernels
