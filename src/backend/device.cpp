#include "rkv/device.h"

#include "core/error.h"
#ifdef RKV_HAVE_CUDA
#include "cuda/cuda_api.h"
#endif

namespace rkv {

std::string_view device_name(Device device) {
  switch (device) {
    case Device::Cpu:
      return "cpu";
    case Device::Cuda:
      return "cuda";
  }
  return "?";
}

std::optional<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  if (name == "auto") return std::nullopt;
  throw Error("unknown device '" + std::string(name) + "': expected cpu, cuda or auto");
}

bool cuda_built() {
#ifdef RKV_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef RKV_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::string cuda_summary() {
#ifdef RKV_HAVE_CUDA
  return cuda::summary();
#else
  return "rkv was built without CUDA (configure with nvcc on PATH, or -DRKV_CUDA=on)";
#endif
}

CudaLimits measure_cuda_limits() {
  resolve_device(Device::Cuda);
#ifdef RKV_HAVE_CUDA
  const cuda::Limits l = cuda::measure_limits();
  return {l.copy_gb_per_s, l.bf16_gemm_gflop_per_s};
#else
  return {};
#endif
}

Device resolve_device(std::optional<Device> requested) {
  if (!requested) return cuda_device_count() > 0 ? Device::Cuda : Device::Cpu;
  if (*requested == Device::Cuda && cuda_device_count() == 0)
    throw Error("--device cuda: " + cuda_summary() + "; run with --device cpu");
  return *requested;
}

}  // namespace rkv
