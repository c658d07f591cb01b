// What the CUDA runtime says about the machine (rkv/device.h's cuda_device_count, cuda_summary).
#include <cstdint>
#include <cstdio>

#include "cuda/cuda_api.h"
#include "cuda/cuda_util.cuh"

namespace rkv::cuda {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string summary() {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device is visible: ") + cudaGetErrorString(status);
  }
  if (n == 0) return "no CUDA device is visible";
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  char numbers[128];
  std::snprintf(numbers, sizeof(numbers),
                ", %.1f GiB, compute capability %d.%d, %d multiprocessors",
                static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.major, prop.minor,
                prop.multiProcessorCount);
  return std::string(prop.name) + numbers;
}

namespace {

// Pseudo-random bf16 values in [-1, 1) (a hash of the index), so no timing runs on zeros.
__global__ void fill_random_bf16(std::uint16_t* p, std::size_t n, unsigned seed) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  const float f = static_cast<float>(h & 0xffffffu) / 8388608.0f - 1.0f;
  p[i] = static_cast<std::uint16_t>(__float_as_uint(f) >> 16);
}

// Milliseconds of the fastest of `runs` runs of fn, timed with events on the default stream.
template <typename Fn>
float best_ms(int runs, Fn fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  float best = 1e30f;
  try {
    fn();  // warm-up
    for (int r = 0; r < runs; ++r) {
      check(cudaEventRecord(a), "cudaEventRecord");
      fn();
      check(cudaEventRecord(b), "cudaEventRecord");
      check(cudaEventSynchronize(b), "cudaEventSynchronize");
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
      best = ms < best ? ms : best;
    }
  } catch (...) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    throw;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace

Limits measure_limits() {
  Limits limits;
  {
    const std::size_t bytes = std::size_t{1} << 30;
    DeviceBuffer src(bytes, "the bandwidth test"), dst(bytes, "the bandwidth test");
    fill_random_bf16<<<static_cast<unsigned>((bytes / 2 + 255) / 256), 256>>>(
        src.as<std::uint16_t>(), bytes / 2, 1);
    check_launch("fill_random_bf16");
    const float ms = best_ms(10, [&] {
      check(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    });
    limits.copy_gb_per_s = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  }
  {
    const int n = 8192;
    const std::size_t elems = static_cast<std::size_t>(n) * n;
    DeviceBuffer a(elems * 2, "the GEMM test"), b(elems * 2, "the GEMM test"),
        c(elems * 4, "the GEMM test");
    fill_random_bf16<<<static_cast<unsigned>((elems + 255) / 256), 256>>>(a.as<std::uint16_t>(),
                                                                          elems, 2);
    fill_random_bf16<<<static_cast<unsigned>((elems + 255) / 256), 256>>>(b.as<std::uint16_t>(),
                                                                          elems, 3);
    check_launch("fill_random_bf16");
    cublasHandle_t handle = nullptr;
    check(cublasCreate(&handle), "cublasCreate");
    const float one = 1.0f, zero = 0.0f;
    try {
      const float ms = best_ms(5, [&] {
        check(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16BF, n,
                           b.get(), CUDA_R_16BF, n, &zero, c.get(), CUDA_R_32F, n,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      });
      limits.bf16_gemm_gflop_per_s = 2.0 * n * static_cast<double>(n) * n / (ms * 1e-3) / 1e9;
    } catch (...) {
      cublasDestroy(handle);
      throw;
    }
    cublasDestroy(handle);
  }
  return limits;
}

Memory memory() {
  Memory m;
  check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
  return m;
}

}  // namespace rkv::cuda
