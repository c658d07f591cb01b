// safetensors checkpoints (single file or sharded with model.safetensors.index.json), memory-
// mapped; tensors are used in place. Format: 8-byte little-endian header length N, N bytes of
// JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace rkv {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
  std::string file;  // the file it lives in, for error messages
  // A U8 tensor, read only where its reader allows raw bytes (gpt-oss's MXFP4 blocks and
  // scales): its bytes are `data`, one per element, and `dtype` is meaningless.
  bool bytes = false;

  std::int64_t numel() const;
  std::string shape_string() const;  // "[64,32]"
};

// "[64,32]"
std::string shape_to_string(const std::vector<std::int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps and validates the file: header length, JSON, dtypes (F32/BF16/F16, and U8 as raw bytes
  // with allow_bytes), offsets inside the file and consistent with the shape. Throws rkv::Error
  // naming the file and the tensor.
  explicit SafetensorsFile(const std::filesystem::path& path, bool allow_bytes = false);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All the tensors of a checkpoint directory: model.safetensors, or the shards listed in
// model.safetensors.index.json, or (failing both) every *.safetensors file in the directory.
class TensorStore {
 public:
  // allow_bytes: U8 tensors are read as raw bytes (TensorInfo::bytes), as SafetensorsFile.
  explicit TensorStore(const std::filesystem::path& dir, bool allow_bytes = false);
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws rkv::Error "<dir>: missing tensor <name>" when absent.
  const TensorInfo& get(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorInfo> tensors_;
};

// Writes tensors to a single safetensors file (used by make-model and the tests). Each tensor's
// bytes are produced by `fill` into a buffer of its size when it is written, so only one tensor
// is in memory at a time (an 8B model's checkpoint is written without holding 16 GB).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::function<void(std::uint8_t* bytes, std::size_t nbytes)> fill;
  bool u8 = false;  // raw bytes (MXFP4 blocks and scales): "U8", one byte an element, dtype unused
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace rkv
