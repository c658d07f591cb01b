// Where the forward pass runs (--device): the CPU kernels, or the CUDA backend (src/cuda,
// docs/GPU.md) when rkv was built with it (CMake RKV_CUDA) and a CUDA device is visible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rkv {

enum class Device : std::uint8_t { Cpu, Cuda };

// "cpu", "cuda".
std::string_view device_name(Device device);
// "cpu" or "cuda"; "auto" gives nullopt (resolve_device picks). Throws rkv::Error naming the
// accepted values otherwise.
std::optional<Device> parse_device(std::string_view name);

// Whether this build has the CUDA backend.
bool cuda_built();
// CUDA devices the driver shows this process: 0 when the backend is not built, there is no
// driver, or CUDA_VISIBLE_DEVICES hides them all. Never throws.
int cuda_device_count();
// One line on the CUDA side: the device's name, memory and compute capability, or why there is
// none ("rkv was built without CUDA", "no CUDA device is visible: ...").
std::string cuda_summary();

// The CUDA device's measured ceilings (about 2 s): a 1 GiB device-to-device copy (bytes read plus
// written per second) and a bf16 cuBLAS GEMM of 8192^3. Throws rkv::Error without a device.
struct CudaLimits {
  double copy_gb_per_s = 0.0;
  double bf16_gemm_gflop_per_s = 0.0;
};
CudaLimits measure_cuda_limits();

// The device to run on: the one asked for, or for nullopt (auto) cuda when it is built and a
// device is visible, else cpu. Asking for cuda where it cannot run throws rkv::Error saying why
// and naming --device cpu.
Device resolve_device(std::optional<Device> requested);

}  // namespace rkv
