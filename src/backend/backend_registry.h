// The device backends as the rest of rkv reaches them (docs/GPU.md): an interface that a backend
// implements and registers for its Device, so that model/ (Model::use_device) and backend/
// (rkv/device.h: device count, summary, limits) call a backend without including its headers.
// Today there is one, the CUDA backend (src/cuda/backend.cu), compiled into its own library when
// CMake finds nvcc (RKV_HAVE_CUDA); a build without it has no backend for Device::Cuda, and the
// CPU, whose kernels the forward pass calls directly, needs none.
//
// Layers: backend/ sits beside kernels/, below model/; it knows Model and ForwardOps by name only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "rkv/device.h"

namespace rkv {

class Model;
class ForwardOps;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Devices the driver shows this process (0 without a driver or device). Never throws.
  virtual int device_count() const noexcept = 0;
  // One line: "NVIDIA H100 80GB HBM3, 79.2 GiB, compute capability 9.0, ...", or why there is no
  // device.
  virtual std::string summary() const = 0;
  // The device's measured ceilings (rkv/device.h's measure_cuda_limits).
  virtual CudaLimits measure_limits() const = 0;
  // The forward pass's steps on the device for this model: its weights copied to device memory.
  // Throws rkv::Error for weights or shapes the backend has no kernels for, and when the device
  // runs out of memory.
  virtual std::unique_ptr<ForwardOps> make_forward(const Model& model) const = 0;
  // "weights 14.96 GiB, workspace 0.31 GiB, KV caches 2.00 GiB; device 79.2 GiB, 61.9 GiB free"
  // for ops made by make_forward.
  virtual std::string memory_report(const ForwardOps& ops) const = 0;
  // Bytes of the device's memory free now.
  virtual std::size_t free_bytes() const = 0;
};

// The backend registered for `device`, or nullptr when this build has none (always for the CPU).
// Thread-safe.
const DeviceBackend* find_backend(Device device);

// Registers `backend` (not owned; it must outlive every use) for `device`, replacing any before.
void register_backend(Device device, const DeviceBackend* backend);

// Defined by the CUDA backend (src/cuda/backend.cu) and linked only in a build with it: registers
// that backend. find_backend calls it once, itself, under RKV_HAVE_CUDA (backend_registry.cpp
// says why not a static registrar).
void register_cuda_backend();

}  // namespace rkv
