// DeviceMatmul (matmul.cuh).
#include <cstdint>
#include <string>

#include "cuda/kernels.cuh"
#include "cuda/matmul.cuh"

namespace rkv::cuda {

namespace {
// f16's largest finite value is 65504: in the exact precision, activations are scaled by
// 2^-kF16Shift before their split and the product by 2^kF16Shift after (powers of two: exact). The
// rounded precision rounds x itself to f16, as the GEMV path, the CPU and llama.cpp do, so that a
// row's product does not depend on how many rows share its pass.
constexpr int kF16Shift = 4;
}  // namespace

DeviceMatmul::DeviceMatmul(cudaStream_t stream) : stream_(stream) {
  check(cublasCreate(&blas_), "cublasCreate");
  try {
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
    // Float32 products in float32: no TF32 (the golden tolerance is for float32 arithmetic).
    check(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  } catch (...) {
    cublasDestroy(blas_);
    throw;
  }
}

DeviceMatmul::~DeviceMatmul() {
  cublasDestroy(blas_);
}

void DeviceMatmul::reserve(int T, int K, std::size_t outputs) {
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(K);
  parts_.grow(2 * n * 2, "the activations' 16-bit parts");
  rounded_.grow(n * sizeof(float), "the rounded activations");
  two_.grow(2 * outputs * sizeof(float), "the products' two halves");
}

void DeviceMatmul::run(const float* x, int T, const DeviceWeight& w,
                       kernels::MatmulPrecision precision, float* y) {
  if (T == 0) return;
  const bool rounded = precision == kernels::MatmulPrecision::Rounded && w.dtype != DType::F32;
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(w.cols);
  if (T <= kGemvMaxRows && w.cols % 8 == 0) {
    if (rounded) {
      rounded_.grow(n * sizeof(float), "the rounded activations");
      round_activations(x, n, w.dtype, rounded_.as<float>(), stream_);
      x = rounded_.as<float>();
    }
    gemv(x, T, w.data, w.dtype, w.rows, w.cols, y, stream_);
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  if (w.dtype == DType::F32) {
    check(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, w.rows, T, w.cols, &one,
                      static_cast<const float*>(w.data), w.cols, x, w.cols, &zero, y, w.rows),
          "cublasSgemm");
    return;
  }
  if (w.dtype != DType::BF16 && w.dtype != DType::F16)
    throw Error("matmul: the CUDA backend has no kernel for " + std::string(dtype_name(w.dtype)) +
                " weights");
  const cudaDataType type = w.dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const int shift = w.dtype == DType::F16 && !rounded ? kF16Shift : 0;
  const float scale_in = 1.0f / static_cast<float>(1 << shift);
  const float alpha = static_cast<float>(1 << shift);
  parts_.grow(2 * n * 2, "the activations' 16-bit parts");
  auto* hi = parts_.as<std::uint16_t>();
  split_activations(x, n, w.dtype, scale_in, hi, rounded ? nullptr : hi + n, stream_);
  if (rounded) {
    check(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, w.rows, T, w.cols, &alpha, w.data, type,
                       w.cols, hi, type, w.cols, &zero, y, CUDA_R_32F, w.rows, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    return;
  }
  // hi and lo as 2T columns of one product: the weights are read once for both.
  const std::size_t outputs = static_cast<std::size_t>(T) * static_cast<std::size_t>(w.rows);
  two_.grow(2 * outputs * sizeof(float), "the products' two halves");
  check(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, w.rows, 2 * T, w.cols, &alpha, w.data, type,
                     w.cols, hi, type, w.cols, &zero, two_.as<float>(), CUDA_R_32F, w.rows,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  sum_halves(two_.as<float>(), outputs, y, stream_);
}

void DeviceMatmul::run_many(const float* x, int T, std::span<const MatmulTarget> targets,
                            kernels::MatmulPrecision precision) {
  if (targets.empty() || T == 0) return;
  const DeviceWeight& first = targets.front().w;
  bool fused = T <= kGemvMaxRows && first.cols % 8 == 0 &&
               targets.size() <= static_cast<std::size_t>(kGemvMaxTargets);
  for (const MatmulTarget& t : targets)
    fused = fused && t.w.dtype == first.dtype && t.w.cols == first.cols;
  if (!fused) {
    for (const MatmulTarget& t : targets) run(x, T, t.w, precision, t.y);
    return;
  }
  if (precision == kernels::MatmulPrecision::Rounded && first.dtype != DType::F32) {
    const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(first.cols);
    rounded_.grow(n * sizeof(float), "the rounded activations");
    round_activations(x, n, first.dtype, rounded_.as<float>(), stream_);
    x = rounded_.as<float>();
  }
  GemvTarget g[kGemvMaxTargets];
  for (std::size_t p = 0; p < targets.size(); ++p)
    g[p] = {targets[p].w.data, targets[p].w.rows, targets[p].y};
  gemv(x, T, std::span<const GemvTarget>(g, targets.size()), first.dtype, first.cols, stream_);
}

}  // namespace rkv::cuda
