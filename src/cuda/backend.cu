// The CUDA backend's entry in the backend registry (backend/backend_registry.h): the one place
// where the rest of rkv meets the functions of cuda_api.h.
#include "backend/backend_registry.h"
#include "cuda/cuda_api.h"

namespace rkv {

namespace {

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() const noexcept override { return cuda::device_count(); }
  std::string summary() const override { return cuda::summary(); }
  CudaLimits measure_limits() const override {
    const cuda::Limits l = cuda::measure_limits();
    return {l.copy_gb_per_s, l.bf16_gemm_gflop_per_s};
  }
  std::unique_ptr<ForwardOps> make_forward(const Model& model) const override {
    return cuda::make_forward(model);
  }
  std::string memory_report(const ForwardOps& ops) const override {
    return cuda::memory_report(ops);
  }
  std::size_t free_bytes() const override { return cuda::memory().free; }
};

}  // namespace

void register_cuda_backend() {
  static const CudaBackend backend;
  register_backend(Device::Cuda, &backend);
}

}  // namespace rkv
