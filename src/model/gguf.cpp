#include "model/gguf.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace rkv {

namespace {

// ggml's type table (ggml.h, ggml.c type_traits): ids 4, 5, 31-33 and 36-38 are retired.
constexpr std::array<GgmlTypeInfo, 32> kGgmlTypes = {{
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
}};

constexpr std::uint64_t kMaxAlignment = std::uint64_t{1} << 20;

// A cursor over the file's bytes; every read checks what is left and names what it was reading.
class Reader {
 public:
  Reader(const std::byte* data, std::size_t size, std::string where)
      : data_(data), size_(size), where_(std::move(where)) {}

  std::size_t pos() const { return pos_; }
  std::size_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const { throw Error(where_ + ": " + what); }

  void need(std::size_t n, const std::string& what) const {
    if (n > left())
      fail("truncated GGUF file: " + what + " at byte " + std::to_string(pos_) + " needs " +
           std::to_string(n) + " bytes, only " + std::to_string(left()) + " are left");
  }

  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // little-endian on every platform we build for
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    const auto n = read<std::uint64_t>("the length of " + what);
    if (n > left())
      fail("the length of " + what + " (" + std::to_string(n) + " bytes, at byte " +
           std::to_string(pos_ - 8) + ") runs past the end of the file (" + std::to_string(left()) +
           " bytes left): truncated or corrupt");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }

 private:
  const std::byte* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::string where_;
};

// Bytes of one scalar of type t in the file; 0 for String/Array (variable).
std::size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::Uint8:
    case GgufValueType::Int8:
    case GgufValueType::Bool:
      return 1;
    case GgufValueType::Uint16:
    case GgufValueType::Int16:
      return 2;
    case GgufValueType::Uint32:
    case GgufValueType::Int32:
    case GgufValueType::Float32:
      return 4;
    case GgufValueType::Uint64:
    case GgufValueType::Int64:
    case GgufValueType::Float64:
      return 8;
    case GgufValueType::String:
    case GgufValueType::Array:
      return 0;
  }
  return 0;
}

GgufValueType checked_value_type(Reader& r, std::uint32_t raw, const std::string& key) {
  if (raw > static_cast<std::uint32_t>(GgufValueType::Float64))
    r.fail("metadata '" + key + "' has unknown value type " + std::to_string(raw) +
           " (GGUF value types are 0 to 12): corrupt or not a GGUF file");
  return static_cast<GgufValueType>(raw);
}

// Reads one scalar or string of type t: into `integer`/`real`/`text` of v when `into_array` is
// false, else appended to v's array.
void read_element(Reader& r, GgufValueType t, const std::string& key, GgufValue& v,
                  bool into_array) {
  std::int64_t i = 0;
  double d = 0.0;
  bool is_int = true;
  const std::string what = "the value of '" + key + "'";
  switch (t) {
    case GgufValueType::Uint8:
      i = r.read<std::uint8_t>(what);
      break;
    case GgufValueType::Int8:
      i = r.read<std::int8_t>(what);
      break;
    case GgufValueType::Bool:
      i = r.read<std::uint8_t>(what) != 0 ? 1 : 0;
      break;
    case GgufValueType::Uint16:
      i = r.read<std::uint16_t>(what);
      break;
    case GgufValueType::Int16:
      i = r.read<std::int16_t>(what);
      break;
    case GgufValueType::Uint32:
      i = r.read<std::uint32_t>(what);
      break;
    case GgufValueType::Int32:
      i = r.read<std::int32_t>(what);
      break;
    case GgufValueType::Uint64:
      // Kept as its bit pattern; get_uint reads it back unsigned.
      i = static_cast<std::int64_t>(r.read<std::uint64_t>(what));
      break;
    case GgufValueType::Int64:
      i = r.read<std::int64_t>(what);
      break;
    case GgufValueType::Float32:
      d = r.read<float>(what);
      is_int = false;
      break;
    case GgufValueType::Float64:
      d = r.read<double>(what);
      is_int = false;
      break;
    case GgufValueType::String: {
      std::string s = r.read_string(what);
      if (into_array)
        v.texts.push_back(std::move(s));
      else
        v.text = std::move(s);
      return;
    }
    case GgufValueType::Array:
      r.fail("metadata '" + key + "' is an array of arrays, which is not supported");
  }
  if (into_array) {
    if (is_int)
      v.integers.push_back(i);
    else
      v.reals.push_back(d);
  } else {
    v.integer = i;
    v.real = d;
  }
}

GgufValue read_value(Reader& r, GgufValueType t, const std::string& key) {
  GgufValue v;
  v.type = t;
  if (t != GgufValueType::Array) {
    read_element(r, t, key, v, false);
    return v;
  }
  v.array_type =
      checked_value_type(r, r.read<std::uint32_t>("the element type of '" + key + "'"), key);
  if (v.array_type == GgufValueType::Array)
    r.fail("metadata '" + key + "' is an array of arrays, which is not supported");
  const auto n = r.read<std::uint64_t>("the length of the array '" + key + "'");
  // Each element needs at least its scalar size (a string at least its 8-byte length).
  const std::size_t min_size =
      v.array_type == GgufValueType::String ? 8 : scalar_size(v.array_type);
  if (n > r.left() / min_size)
    r.fail("the array '" + key + "' claims " + std::to_string(n) + " elements of " +
           std::string(gguf_value_type_name(v.array_type)) + ", more than the " +
           std::to_string(r.left()) + " bytes left can hold: truncated or corrupt");
  const auto count = static_cast<std::size_t>(n);
  if (v.array_type == GgufValueType::String)
    v.texts.reserve(count);
  else if (v.array_type == GgufValueType::Float32 || v.array_type == GgufValueType::Float64)
    v.reals.reserve(count);
  else
    v.integers.reserve(count);
  for (std::size_t k = 0; k < count; ++k) read_element(r, v.array_type, key, v, true);
  return v;
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::Uint8:
      return "uint8";
    case GgufValueType::Int8:
      return "int8";
    case GgufValueType::Uint16:
      return "uint16";
    case GgufValueType::Int16:
      return "int16";
    case GgufValueType::Uint32:
      return "uint32";
    case GgufValueType::Int32:
      return "int32";
    case GgufValueType::Float32:
      return "float32";
    case GgufValueType::Bool:
      return "bool";
    case GgufValueType::String:
      return "string";
    case GgufValueType::Array:
      return "array";
    case GgufValueType::Uint64:
      return "uint64";
    case GgufValueType::Int64:
      return "int64";
    case GgufValueType::Float64:
      return "float64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  return type != GgufValueType::Float32 && type != GgufValueType::Float64 &&
         type != GgufValueType::String && type != GgufValueType::Array;
}

std::size_t GgufValue::array_size() const {
  if (type != GgufValueType::Array) return 0;
  if (array_type == GgufValueType::String) return texts.size();
  if (array_type == GgufValueType::Float32 || array_type == GgufValueType::Float64)
    return reals.size();
  return integers.size();
}

std::uint32_t ggml_type_id(DType t) {
  switch (t) {
    case DType::F32:
      return kGgmlF32;
    case DType::F16:
      return kGgmlF16;
    case DType::BF16:
      return kGgmlBf16;
    case DType::Q4_0:
      return 2;
    case DType::Q5_0:
      return 6;
    case DType::Q8_0:
      return 8;
    case DType::Q4_K:
      return 12;
    case DType::Q6_K:
      return 14;
    case DType::MXFP4:
      return 39;
  }
  return kGgmlF32;
}

std::optional<DType> dtype_of_ggml_type(std::uint32_t id) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_0,
                  DType::Q4_K, DType::Q6_K, DType::MXFP4})
    if (ggml_type_id(t) == id) return t;
  return std::nullopt;
}

const GgmlTypeInfo* ggml_type_info(std::uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::int64_t GgufTensor::numel() const {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;  // checked against overflow when the file was opened
  return n;
}

std::string GgufTensor::dims_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

GgufFile::GgufFile(const std::filesystem::path& path, MappedFile::Mode mode)
    : file_(std::make_shared<MappedFile>(path, mode)) {
  const std::string where = path.string();
  const std::size_t size = file_->size();
  Reader r(file_->data(), size, where);
  if (size < 4) r.fail("truncated GGUF file (" + std::to_string(size) + " bytes)");
  char magic[4];
  std::memcpy(magic, file_->data(), 4);
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    std::string shown;
    for (char c : magic) shown += (c >= 32 && c < 127) ? c : '?';
    r.fail("not a GGUF file (it begins with '" + shown + "', expected 'GGUF')");
  }
  r.read<std::uint32_t>("the magic");
  version_ = r.read<std::uint32_t>("the version");
  if (version_ != 2 && version_ != 3)
    r.fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2 and 3)");
  const auto n_tensors = r.read<std::uint64_t>("the tensor count");
  const auto n_kv = r.read<std::uint64_t>("the metadata count");
  // A tensor info is at least 24 bytes (name length, n_dims, type, offset); a metadata entry at
  // least 13 (key length, value type, a one-byte value).
  if (n_tensors > r.left() / 24)
    r.fail("tensor count " + std::to_string(n_tensors) + " is impossible in a file of " +
           std::to_string(size) + " bytes: corrupt");
  if (n_kv > r.left() / 13)
    r.fail("metadata count " + std::to_string(n_kv) + " is impossible in a file of " +
           std::to_string(size) + " bytes: corrupt");

  for (std::uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.read_string("metadata key #" + std::to_string(k));
    const auto type =
        checked_value_type(r, r.read<std::uint32_t>("the value type of '" + key + "'"), key);
    GgufValue value = read_value(r, type, key);
    if (metadata_.count(key)) r.fail("metadata key '" + key + "' appears twice");
    metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer() || a->integer <= 0 ||
        static_cast<std::uint64_t>(a->integer) > kMaxAlignment ||
        (a->integer & (a->integer - 1)) != 0)
      r.fail("general.alignment must be a power of two from 1 to " + std::to_string(kMaxAlignment));
    alignment_ = static_cast<std::size_t>(a->integer);
  }

  tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = r.read_string("the name of tensor #" + std::to_string(k));
    const std::string ctx = "tensor " + t.name;
    const auto n_dims = r.read<std::uint32_t>("the dimension count of " + ctx);
    if (n_dims < 1 || n_dims > 4)
      r.fail(ctx + " has " + std::to_string(n_dims) + " dimensions (GGUF allows 1 to 4)");
    std::int64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = r.read<std::uint64_t>("a dimension of " + ctx);
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<std::int64_t>(dim), &numel))
        r.fail(ctx + ": its dimensions overflow (dimension " + std::to_string(dim) + ")");
      t.dims.push_back(static_cast<std::int64_t>(dim));
    }
    const auto type_id = r.read<std::uint32_t>("the type of " + ctx);
    t.type = ggml_type_info(type_id);
    if (t.type == nullptr)
      r.fail(ctx + " has unknown ggml type " + std::to_string(type_id) +
             " (not a tensor type this reader knows): corrupt or from a newer llama.cpp");
    t.offset = r.read<std::uint64_t>("the data offset of " + ctx);
    if (t.dims[0] % t.type->block_elements != 0)
      r.fail(ctx + " of type " + std::string(t.type->name) + " has " + std::to_string(t.dims[0]) +
             " columns, not a multiple of its block of " + std::to_string(t.type->block_elements));
    std::int64_t nbytes = 0;
    if (__builtin_mul_overflow(numel / t.type->block_elements,
                               static_cast<std::int64_t>(t.type->block_bytes), &nbytes))
      r.fail(ctx + " " + t.dims_string() + " is too large");
    t.nbytes = static_cast<std::size_t>(nbytes);
    if (tensor_index_.count(t.name)) r.fail("tensor " + t.name + " appears twice");
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const std::size_t header_end = r.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  const std::size_t data_size = data_offset_ <= size ? size - data_offset_ : 0;
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : tensors_) {
    const std::string ctx = "tensor " + t.name;
    if (t.offset % alignment_ != 0)
      r.fail(ctx + ": data offset " + std::to_string(t.offset) + " is not a multiple of the " +
             std::to_string(alignment_) + "-byte alignment: corrupt");
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      r.fail(ctx + ": its data (" + std::to_string(t.nbytes) + " bytes at offset " +
             std::to_string(t.offset) + ") lies outside the file's " + std::to_string(data_size) +
             " data bytes: truncated or corrupt");
    t.data = file_->data() + data_offset_ + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& a = *by_offset[i - 1];
    const GgufTensor& b = *by_offset[i];
    if (a.nbytes > 0 && b.nbytes > 0 && a.offset + a.nbytes > b.offset)
      r.fail("tensors " + a.name + " and " + b.name + " overlap in the data section: corrupt");
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<std::uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_integer())
    throw Error(path().string() + ": metadata '" + key + "' is a " +
                std::string(gguf_value_type_name(v->type)) + ", expected an integer");
  if (v->type == GgufValueType::Uint64) return static_cast<std::uint64_t>(v->integer);
  if (v->integer < 0)
    throw Error(path().string() + ": metadata '" + key + "' is negative (" +
                std::to_string(v->integer) + ")");
  return static_cast<std::uint64_t>(v->integer);
}

std::optional<double> GgufFile::get_real(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_real()) return v->real;
  if (v->is_integer() && v->type != GgufValueType::Bool)
    return v->type == GgufValueType::Uint64
               ? static_cast<double>(static_cast<std::uint64_t>(v->integer))
               : static_cast<double>(v->integer);
  throw Error(path().string() + ": metadata '" + key + "' is a " +
              std::string(gguf_value_type_name(v->type)) + ", expected a number");
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValueType::String)
    throw Error(path().string() + ": metadata '" + key + "' is a " +
                std::string(gguf_value_type_name(v->type)) + ", expected a string");
  return v->text;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValueType::Bool)
    throw Error(path().string() + ": metadata '" + key + "' is a " +
                std::string(gguf_value_type_name(v->type)) + ", expected a bool");
  return v->integer != 0;
}

namespace {

const GgufValue* array_of(const GgufFile& f, const std::string& key, bool (*fits)(GgufValueType),
                          const char* expected) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return nullptr;
  if (v->type != GgufValueType::Array || !fits(v->array_type))
    throw Error(f.path().string() + ": metadata '" + key + "' is " +
                (v->type == GgufValueType::Array
                     ? "an array of " + std::string(gguf_value_type_name(v->array_type))
                     : "a " + std::string(gguf_value_type_name(v->type))) +
                ", expected an array of " + expected);
  return v;
}

}  // namespace

const std::vector<std::string>* GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = array_of(
      *this, key, [](GgufValueType t) { return t == GgufValueType::String; }, "strings");
  return v == nullptr ? nullptr : &v->texts;
}

const std::vector<double>* GgufFile::get_real_array(const std::string& key) const {
  const GgufValue* v = array_of(
      *this, key,
      [](GgufValueType t) { return t == GgufValueType::Float32 || t == GgufValueType::Float64; },
      "floats");
  return v == nullptr ? nullptr : &v->reals;
}

const std::vector<std::int64_t>* GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = array_of(
      *this, key,
      [](GgufValueType t) {
        return t != GgufValueType::String && t != GgufValueType::Float32 &&
               t != GgufValueType::Float64 && t != GgufValueType::Array;
      },
      "integers");
  return v == nullptr ? nullptr : &v->integers;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  if (path.extension() == ".gguf") return true;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace rkv
