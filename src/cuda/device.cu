// What the CUDA runtime says about the machine (rkv/device.h's cuda_device_count, cuda_summary).
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

Memory memory() {
  Memory m;
  check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
  return m;
}

}  // namespace rkv::cuda
