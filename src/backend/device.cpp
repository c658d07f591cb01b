// --device: parsing, resolution, and what the CUDA side says, through the backend registry (this
// file includes nothing of src/cuda/).
#include "rkv/device.h"

#include "backend/backend_registry.h"
#include "core/error.h"

namespace rkv {

namespace {

const char* const kBuiltWithoutCuda =
    "rkv was built without CUDA (configure with nvcc on PATH, or -DRKV_CUDA=on)";

}  // namespace

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
  return find_backend(Device::Cuda) != nullptr;
}

int cuda_device_count() {
  const DeviceBackend* backend = find_backend(Device::Cuda);
  return backend != nullptr ? backend->device_count() : 0;
}

std::string cuda_summary() {
  const DeviceBackend* backend = find_backend(Device::Cuda);
  return backend != nullptr ? backend->summary() : kBuiltWithoutCuda;
}

CudaLimits measure_cuda_limits() {
  resolve_device(Device::Cuda);
  const DeviceBackend* backend = find_backend(Device::Cuda);
  if (backend == nullptr) throw Error(std::string("--device cuda: ") + kBuiltWithoutCuda);
  return backend->measure_limits();
}

Device resolve_device(std::optional<Device> requested) {
  if (!requested) return cuda_device_count() > 0 ? Device::Cuda : Device::Cpu;
  if (*requested == Device::Cuda && cuda_device_count() == 0)
    throw Error("--device cuda: " + cuda_summary() + "; run with --device cpu");
  return *requested;
}

}  // namespace rkv
