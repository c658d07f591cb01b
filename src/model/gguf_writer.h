// Writing GGUF files (v3; the layout of gguf.h): metadata, then tensor infos, then each tensor's
// data produced by a callback as it is written, so a large model never sits in memory at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace rkv {

class GgufWriter {
 public:
  void add_u32(const std::string& key, std::uint32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_i32_array(const std::string& key, const std::vector<std::int32_t>& v);
  // A tensor of Hugging Face shape `shape` (slowest-varying first; GGUF lists it reversed) of
  // type `dtype`; fill(bytes, nbytes) writes its data when the file is written. The row length
  // (last dimension) must be a multiple of the type's block.
  void add_tensor(const std::string& name, const std::vector<std::int64_t>& shape, DType dtype,
                  std::function<void(std::uint8_t* bytes, std::size_t nbytes)> fill);
  // Writes the file (alignment 32); rkv::Error naming the path on failure.
  void write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<std::int64_t> shape;
    DType dtype;
    std::size_t nbytes;
    std::function<void(std::uint8_t*, std::size_t)> fill;
  };
  std::string kv_;
  std::uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace rkv
