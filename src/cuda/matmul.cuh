// Matrix products on the GPU: y[T][N] = x[T][K] w[N][K]^T for weights in device memory in their
// stored dtype (F32, BF16, F16) and float32 activations.
//  - Up to kGemvMaxRows rows (and K a multiple of 8): the backend's GEMV, the weights read once for
//    all rows, the activations multiplied as float32 (rounded to the weights' type first with
//    MatmulPrecision::Rounded).
//  - More rows: cuBLAS. F32 weights by SGEMM in pedantic math (no TF32). BF16 and F16 weights by
//    GemmEx with float32 accumulation on the activations split into two 16-bit parts, x = hi + lo:
//    Exact multiplies both in one GEMM of 2T columns (the weights are read once) and adds the two
//    halves of its output; Rounded multiplies hi alone. F16 activations are scaled by 2^-4 first
//    (and the product by 2^4) so that values up to 2^20 stay inside f16's range.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <span>

#include "core/dtype.h"
#include "cuda/cuda_util.cuh"
#include "kernels/kernels.h"

namespace rkv::cuda {

struct DeviceWeight {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int rows = 0;  // N
  int cols = 0;  // K
};

struct MatmulTarget {
  DeviceWeight w;
  float* y = nullptr;
};

class DeviceMatmul {
 public:
  explicit DeviceMatmul(cudaStream_t stream);
  ~DeviceMatmul();
  DeviceMatmul(const DeviceMatmul&) = delete;
  DeviceMatmul& operator=(const DeviceMatmul&) = delete;

  // Makes room for products of up to T rows of up to K columns and up to `outputs` values
  // (T x N), so that run() allocates nothing for them (a pass sizes everything before it touches
  // a cache).
  void reserve(int T, int K, std::size_t outputs);
  // y = x w^T, on the stream. Throws rkv::Error for an unsupported dtype or a cuBLAS failure.
  void run(const float* x, int T, const DeviceWeight& w, kernels::MatmulPrecision precision,
           float* y);
  // y_p = x w_p^T for each target. Up to kGemvMaxRows rows, with weights of one dtype and K: one
  // GEMV launch for all of them (the same arithmetic per row as run()); else run() for each.
  void run_many(const float* x, int T, std::span<const MatmulTarget> targets,
                kernels::MatmulPrecision precision);
  // Bytes of its scratch buffers.
  std::size_t workspace_bytes() const { return parts_.bytes() + rounded_.bytes() + two_.bytes(); }

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceBuffer parts_;    // [2][T][K] 16-bit: hi, then lo
  DeviceBuffer rounded_;  // [T][K] float: the GEMV's rounded activations
  DeviceBuffer two_;      // [2][T][N] float: the products of hi and of lo
};

}  // namespace rkv::cuda
