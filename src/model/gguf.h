// GGUF files (llama.cpp's model format, versions 2 and 3), memory-mapped and used in place like
// safetensors. Layout, little-endian: "GGUF", u32 version, u64 tensor count, u64 metadata count,
// the metadata (key string, u32 value type, value), the tensor infos (name string, u32 n_dims,
// n_dims u64 dimensions fastest-varying first, u32 ggml type, u64 offset), padding to the
// alignment (general.alignment, default 32), then the tensor data; strings are a u64 length and
// that many bytes. Everything is validated when the file is opened, before any tensor is read:
// counts and lengths against the bytes left, value and tensor types, dimensions against overflow,
// every tensor's data inside the file, aligned and not overlapping another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace rkv {

enum class GgufValueType : std::uint32_t {
  Uint8 = 0,
  Int8 = 1,
  Uint16 = 2,
  Int16 = 3,
  Uint32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  Uint64 = 10,
  Int64 = 11,
  Float64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars: integers (and bools) in `integer` (unsigned 64-bit values above
// INT64_MAX are refused when read), floats in `real`, strings in `text`. Arrays (of one scalar or
// string type; arrays of arrays are refused): `array_type` and the elements in `integers`,
// `reals` or `texts`.
struct GgufValue {
  GgufValueType type = GgufValueType::Uint8;
  GgufValueType array_type = GgufValueType::Uint8;
  std::int64_t integer = 0;
  double real = 0.0;
  std::string text;
  std::vector<std::int64_t> integers;
  std::vector<double> reals;
  std::vector<std::string> texts;

  bool is_integer() const;  // an integer or bool scalar
  bool is_real() const { return type == GgufValueType::Float32 || type == GgufValueType::Float64; }
  std::size_t array_size() const;
};

// ggml's tensor types: the id written in the file, the name llama.cpp gives it, the number of
// elements per block and the bytes per block (1 element for F32/F16/BF16).
struct GgmlTypeInfo {
  std::uint32_t id;
  std::string_view name;
  std::uint32_t block_elements;
  std::uint32_t block_bytes;
};
// nullptr for an id that is not a ggml type (or one ggml has retired).
const GgmlTypeInfo* ggml_type_info(std::uint32_t id);
inline constexpr std::uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlBf16 = 30;
// ggml's type id of a weight type, and the weight type of an id (nullopt for the ggml types rkv
// does not read: Q4_1, Q5_K, the IQ types, ...).
std::uint32_t ggml_type_id(DType t);
std::optional<DType> dtype_of_ggml_type(std::uint32_t id);

struct GgufTensor {
  std::string name;
  std::vector<std::int64_t> dims;  // as in the file: dims[0] is the fastest-varying (columns)
  const GgmlTypeInfo* type = nullptr;
  std::uint64_t offset = 0;  // from the start of the data section
  std::size_t nbytes = 0;
  const std::byte* data = nullptr;

  std::int64_t numel() const;
  std::string dims_string() const;  // "[64,512]" (file order)
};

class GgufFile {
 public:
  // Opens and validates the file; every problem is an rkv::Error naming the file. `mode`
  // Map reads only the pages touched (the tokenizer reads just the metadata of a large file).
  explicit GgufFile(const std::filesystem::path& path,
                    MappedFile::Mode mode = MappedFile::Mode::Default);

  const std::filesystem::path& path() const { return file_->path(); }
  std::uint32_t version() const { return version_; }
  std::size_t alignment() const { return alignment_; }
  std::size_t data_offset() const { return data_offset_; }  // where the data section starts

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  // Typed reads: nullopt when the key is absent; rkv::Error naming the key when its type or
  // value does not fit (a string where a number is expected, a negative count...).
  std::optional<std::uint64_t> get_uint(const std::string& key) const;
  std::optional<double> get_real(const std::string& key) const;  // any number
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  // An array of the given kind; rkv::Error when the key holds something else.
  const std::vector<std::string>* get_string_array(const std::string& key) const;
  const std::vector<double>* get_real_array(const std::string& key) const;
  const std::vector<std::int64_t>* get_int_array(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;

  // The mapped bytes, shared so that tensors can outlive this object's owner.
  std::shared_ptr<const MappedFile> mapped() const { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::uint32_t version_ = 0;
  std::size_t alignment_ = 32;
  std::size_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

// Whether the path names a GGUF file: a regular file whose name ends in .gguf or whose first
// four bytes are "GGUF".
bool is_gguf_path(const std::filesystem::path& path);

}  // namespace rkv
