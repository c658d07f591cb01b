// Error checking and device memory for the CUDA backend: every CUDA and cuBLAS call's status is
// checked, and a failure becomes an rkv::Error naming the call (out of memory included), never an
// abort.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "core/error.h"

namespace rkv::cuda {

inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::string message = std::string("CUDA error in ") + what + ": " + cudaGetErrorString(status);
  if (status == cudaErrorMemoryAllocation) {
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess)
      message += " (device memory: " + std::to_string(free >> 20) + " MiB free of " +
                 std::to_string(total >> 20) + " MiB)";
  }
  (void)cudaGetLastError();  // clear a sticky-free error so later calls report their own
  throw Error(message);
}

// After a kernel launch: a bad launch configuration shows here.
inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

inline void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("cuBLAS error in ") + what + ": " + cublasGetStatusString(status));
}

// cudaMalloc'd bytes, freed on destruction; grow() reallocates (contents not kept).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, const char* what) { grow(bytes, what); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  // Makes room for at least `bytes` (the old contents are lost when it reallocates).
  void grow(std::size_t bytes, const char* what) {
    if (bytes <= bytes_) return;
    release();
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), what);
    ptr_ = p;
    bytes_ = bytes;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace rkv::cuda
