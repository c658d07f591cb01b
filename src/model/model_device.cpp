// Moving a model's forward pass to a device (Model::use_device), and the caches that follow it.
#include "backend/backend_registry.h"
#include "core/error.h"
#include "model/model.h"

namespace rkv {

void Model::use_device(Device device) {
  if (device == device_) return;
  if (device == Device::Cpu) {
    device_ops_.reset();
    device_ = Device::Cpu;
    return;
  }
  if (!config_.is_dense_transformer())
    throw Error("--device " + std::string(device_name(device)) + ": the " + config_.arch_label() +
                " architecture runs on the CPU only in this build; run with --device cpu");
  resolve_device(device);  // throws, saying why, where CUDA cannot run
  const DeviceBackend* backend = find_backend(device);
  // Only a test's pretend device (RKV_TEST_FAKE_CUDA_DEVICES) gets past resolve_device without
  // a backend: it is refused here, before anything runs.
  if (backend == nullptr)
    throw Error("--device " + std::string(device_name(device)) + ": " + cuda_summary() +
                "; run with --device cpu");
  device_ops_ = backend->make_forward(*this);
  device_ = device;
}

std::string Model::device_memory_report() const {
  if (device_ops_)
    if (const DeviceBackend* backend = find_backend(device_))
      return backend->memory_report(*device_ops_);
  return {};
}

std::size_t Model::device_free_bytes() const {
  if (device_ops_)
    if (const DeviceBackend* backend = find_backend(device_)) return backend->free_bytes();
  return 0;
}

KvCacheShape Model::cache_shape(int capacity, int window, std::optional<KvDtype> dtype) const {
  KvCacheShape shape{config_.kv_layers(),
                     config_.num_kv_heads,
                     config_.num_heads,
                     config_.head_dim,
                     capacity,
                     window,
                     dtype.value_or(default_kv_dtype())};
  shape.on_device = device_ != Device::Cpu;
  shape.window_layers = config_.window_layers();
  shape.sliding_window = shape.window_layers > 0 ? config_.sliding_window : 0;
  shape.recurrent_floats =
      static_cast<std::size_t>(config_.delta_net_layers()) * config_.delta_net.state_floats();
  return shape;
}

}  // namespace rkv
