// The CUDA backend's functions: plain C++ declarations, implemented by the .cu files beside this
// one, compiled only when CMake builds the backend (RKV_HAVE_CUDA; docs/GPU.md). Only the backend's
// own files include it; the rest of rkv reaches these through the backend registry
// (backend/backend_registry.h), where backend.cu registers them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "model/forward_ops.h"

namespace rkv {
class Model;
}

namespace rkv::cuda {

// CUDA devices the driver shows (0 without a driver or device). Never throws.
int device_count() noexcept;
// "NVIDIA H100 80GB HBM3, 79.2 GiB, compute capability 9.0", or why there is no device.
std::string summary();

// Free and total bytes of the current device's memory.
struct Memory {
  std::size_t free = 0;
  std::size_t total = 0;
};
Memory memory();

// The card's two ceilings, measured (docs/GPU.md): a device-to-device copy of 1 GiB (bytes read
// plus bytes written over the time), and a bf16 cuBLAS GEMM of 8192^3 with float32 accumulation,
// both on random data, the best of several runs timed with events.
struct Limits {
  double copy_gb_per_s = 0.0;
  double bf16_gemm_gflop_per_s = 0.0;
};
Limits measure_limits();

// The forward pass's steps on the GPU: the model's weights copied to device memory in their
// stored dtype (f32, bf16, f16), activations and caches there too. Throws rkv::Error for weights
// it has no kernels for (quantized GGUF types) and when the device runs out of memory.
std::unique_ptr<ForwardOps> make_forward(const Model& model);
// "weights 14.96 GiB, workspace 0.31 GiB, KV caches 2.00 GiB; device 79.2 GiB, 61.9 GiB free"
// for ops made by make_forward.
std::string memory_report(const ForwardOps& ops);

}  // namespace rkv::cuda
