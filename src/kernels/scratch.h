// A per-thread, grow-only, 64-byte aligned scratch buffer for the kernels that lay out weights or
// activations per call (the AMX GEMMs, the AVX512-VNNI panels of Q4_K/Q6_K, the activations
// matmul splits or quantizes once per product). Plain code, no library templates: safe to include
// from translation units compiled for any instruction set; everything is internal to each of them.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace rkv::kernels {
namespace {

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

// n elements of T in s.
template <class T>
T* scratch_array(Scratch& s, std::size_t n) {
  return static_cast<T*>(s.get(n * sizeof(T)));
}

}  // namespace
}  // namespace rkv::kernels
