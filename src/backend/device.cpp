// --device: parsing, what the CUDA side says (through the backend registry: this file includes
// nothing of src/cuda/), and the choice auto makes.
#include "rkv/device.h"

#include <cerrno>
#include <cstdlib>

#include "backend/backend_registry.h"
#include "core/error.h"

namespace rkv {

namespace {

const char* const kBuiltWithoutCuda =
    "rkv was built without CUDA (configure with nvcc on PATH, or -DRKV_CUDA=on)";

// RKV_TEST_FAKE_CUDA_DEVICES (rkv/device.h): the number of pretend devices, or -1 when unset or
// not a number >= 0.
int fake_cuda_devices() {
  const char* text = std::getenv("RKV_TEST_FAKE_CUDA_DEVICES");
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || n < 0 || n > 1024) return -1;
  return static_cast<int>(n);
}

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
  if (const int fake = fake_cuda_devices(); fake >= 0) return fake;
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

std::string device_refusal(Device device, const DeviceNeeds& needs) {
  if (device == Device::Cpu) return {};
  // The CUDA backend's reach (docs/GPU.md): the forward pass and fullkv caches. Engine::prepare
  // refuses the rest on a device, with these words.
  if (needs.per_request_settings)
    return "each request of rkv serve may choose its KV method, and the CUDA backend runs fullkv "
           "only; --device cuda serves fullkv on the GPU";
  if (!needs.compressing_methods.empty())
    return "the CUDA backend runs fullkv only; --kv-method " + needs.compressing_methods.front() +
           " runs on the CPU";
  if (needs.steering) return "the CUDA backend runs no steering; --steering runs on the CPU";
  if (needs.kv_dtype == KvDtype::q8_0)
    return "the CUDA backend has no q8_0 KV cache; --kv-dtype q8_0 runs on the CPU";
  if (needs.llamacpp_attention)
    return "the CUDA backend has no llama.cpp attention; --attention-precision llamacpp runs on "
           "the CPU";
  return {};
}

DeviceChoice choose_device(std::optional<Device> requested, const DeviceNeeds& needs) {
  if (requested) {
    if (*requested == Device::Cuda && cuda_device_count() == 0)
      throw Error("--device cuda: " + cuda_summary() + "; run with --device cpu");
    return {*requested, {}};
  }
  if (cuda_device_count() == 0) return {Device::Cpu, {}};  // as before: nothing to choose, no line
  const std::string refusal = device_refusal(Device::Cuda, needs);
  if (!refusal.empty()) return {Device::Cpu, "device: cpu (auto: " + refusal + ")"};
  return {Device::Cuda, "device: cuda (auto: a GPU is visible and the CUDA backend runs this run)"};
}

Device resolve_device(std::optional<Device> requested, const DeviceNeeds& needs) {
  return choose_device(requested, needs).device;
}

}  // namespace rkv
