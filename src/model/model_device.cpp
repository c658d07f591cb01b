// Moving a model's forward pass to a device (Model::use_device), and the caches that follow it.
#include "core/error.h"
#include "model/model.h"
#ifdef RKV_HAVE_CUDA
#include "cuda/cuda_api.h"
#endif

namespace rkv {

void Model::use_device(Device device) {
  if (device == device_) return;
  if (device == Device::Cpu) {
    device_ops_.reset();
    device_ = Device::Cpu;
    return;
  }
  resolve_device(device);  // throws, saying why, where CUDA cannot run
#ifdef RKV_HAVE_CUDA
  device_ops_ = cuda::make_forward(*this);
  device_ = device;
#endif
}

std::string Model::device_memory_report() const {
#ifdef RKV_HAVE_CUDA
  if (device_ops_) return cuda::memory_report(*device_ops_);
#endif
  return {};
}

std::size_t Model::device_free_bytes() const {
#ifdef RKV_HAVE_CUDA
  if (device_ops_) return cuda::memory().free;
#endif
  return 0;
}

KvCacheShape Model::cache_shape(int capacity, int window, std::optional<KvDtype> dtype) const {
  KvCacheShape shape{config_.num_layers,
                     config_.num_kv_heads,
                     config_.num_heads,
                     config_.head_dim,
                     capacity,
                     window,
                     dtype.value_or(default_kv_dtype())};
  shape.on_device = device_ != Device::Cpu;
  return shape;
}

}  // namespace rkv
