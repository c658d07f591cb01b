// Where the forward pass runs (--device): the CPU kernels, or the CUDA backend (src/cuda,
// docs/GPU.md) when rkv was built with it (CMake RKV_CUDA) and a CUDA device is visible; auto
// picks the CUDA backend only for runs it supports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rkv/kv_dtype.h"

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
// Test seam: the environment variable RKV_TEST_FAKE_CUDA_DEVICES=N (N >= 0) makes it report N
// whatever the build and the machine, so that tests can see what --device auto chooses on a
// machine with a GPU. Nothing runs on such a pretend device: moving a model to it fails
// (Model::use_device: "rkv was built without CUDA", or the CUDA runtime's own error).
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

// What a run asks of the device, for --device auto. The CUDA backend runs the forward pass with
// fullkv caches of f32, bf16 or f16, exact attention and no steering (docs/GPU.md); a run that
// asks for anything else runs on the CPU.
struct DeviceNeeds {
  // The --kv-method names the run uses that compress (a method's record says whether it does:
  // MethodInfo::compresses; fullkv does not). Empty: none compresses.
  std::vector<std::string> compressing_methods;
  bool steering = false;            // a steering vector (--steering)
  std::optional<KvDtype> kv_dtype;  // --kv-dtype when given (none: the model's default)
  bool llamacpp_attention = false;  // --attention-precision llamacpp
  // rkv serve: each request chooses its own method, KV dtype and steering, so the server's
  // settings do not bound what the device must run.
  bool per_request_settings = false;
};

// Why the backend of `device` cannot run what `needs` asks: one phrase that names the setting and
// where it runs ("the CUDA backend runs fullkv only; --kv-method rkv runs on the CPU"), or ""
// when it can. The CPU runs everything.
std::string device_refusal(Device device, const DeviceNeeds& needs);

struct DeviceChoice {
  Device device = Device::Cpu;
  // For auto where a GPU is visible, the line to print on stderr saying which device it chose
  // and why ("device: cpu (auto: the CUDA backend runs fullkv only; --kv-method rkv runs on the
  // CPU)"). Empty when the device was named, and when no GPU is visible: a CPU-only machine says
  // nothing, as before.
  std::string note;
};

// The device to run on: the one asked for; for nullopt (auto) cuda when it is built, a device is
// visible and its backend runs all that `needs` asks (device_refusal), else cpu. Asking for cuda
// where it cannot run throws rkv::Error saying why and naming --device cpu; `needs` does not
// change what a named device gives (the requests are refused when prepared, naming --device
// cpu).
DeviceChoice choose_device(std::optional<Device> requested, const DeviceNeeds& needs = {});
// choose_device(requested, needs).device.
Device resolve_device(std::optional<Device> requested, const DeviceNeeds& needs = {});

}  // namespace rkv
