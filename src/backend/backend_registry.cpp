#include "backend/backend_registry.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>

namespace rkv {

namespace {

constexpr std::size_t kDevices = 2;  // Device::Cpu, Device::Cuda

std::array<std::atomic<const DeviceBackend*>, kDevices>& backends() {
  static std::array<std::atomic<const DeviceBackend*>, kDevices> table{};
  return table;
}

// The backends built into this program register here, once, before the first lookup.
//
// Why an explicit call and not a static registrar object in src/cuda/: the CUDA backend is a
// static library (rkvcuda) of its own, and a linker takes an object file out of a static
// library only when something already linked refers to a symbol it defines. Nothing would refer
// to a file whose only content is a registrar, so it would be left out and the backend would
// silently never register (the classic static-registration pitfall; --whole-archive would work
// around it, but in every program and test that links rkv). Calling register_cuda_backend() from
// here makes the reference explicit: whatever uses the registry links the backend's object
// files, and the backend registers exactly when it is first needed, without depending on the
// order of static initialisation. The call names a function, not a header: this file includes
// nothing of src/cuda/.
void register_built_in_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef RKV_HAVE_CUDA
    register_cuda_backend();
#endif
  });
}

std::size_t index_of(Device device) {
  return static_cast<std::size_t>(device);
}

}  // namespace

const DeviceBackend* find_backend(Device device) {
  register_built_in_backends();
  return backends()[index_of(device)].load(std::memory_order_acquire);
}

void register_backend(Device device, const DeviceBackend* backend) {
  backends()[index_of(device)].store(backend, std::memory_order_release);
}

}  // namespace rkv
