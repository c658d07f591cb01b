#include "model/gguf_writer.h"

#include <fstream>

#include "core/error.h"
#include "model/gguf.h"

namespace rkv {

namespace {

constexpr std::size_t kAlignment = 32;

void put_u32(std::string& s, std::uint32_t v) {
  s.append(reinterpret_cast<const char*>(&v), 4);
}
void put_u64(std::string& s, std::uint64_t v) {
  s.append(reinterpret_cast<const char*>(&v), 8);
}
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

// The key, the array type and the element type and count of an array entry.
void put_array_head(std::string& s, const std::string& key, std::uint32_t element_type,
                    std::size_t n) {
  put_str(s, key);
  put_u32(s, 9);  // array
  put_u32(s, element_type);
  put_u64(s, n);
}

}  // namespace

void GgufWriter::add_u32(const std::string& key, std::uint32_t v) {
  put_str(kv_, key);
  put_u32(kv_, 4);
  put_u32(kv_, v);
  ++n_kv_;
}

void GgufWriter::add_f32(const std::string& key, float v) {
  put_str(kv_, key);
  put_u32(kv_, 6);
  kv_.append(reinterpret_cast<const char*>(&v), 4);
  ++n_kv_;
}

void GgufWriter::add_bool(const std::string& key, bool v) {
  put_str(kv_, key);
  put_u32(kv_, 7);
  kv_ += static_cast<char>(v ? 1 : 0);
  ++n_kv_;
}

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  put_str(kv_, key);
  put_u32(kv_, 8);
  put_str(kv_, v);
  ++n_kv_;
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  put_array_head(kv_, key, 8, v.size());  // of strings
  for (const auto& s : v) put_str(kv_, s);
  ++n_kv_;
}

void GgufWriter::add_i32_array(const std::string& key, const std::vector<std::int32_t>& v) {
  put_array_head(kv_, key, 5, v.size());  // of int32
  for (std::int32_t x : v) kv_.append(reinterpret_cast<const char*>(&x), 4);
  ++n_kv_;
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<std::int64_t>& shape,
                            DType dtype,
                            std::function<void(std::uint8_t* bytes, std::size_t nbytes)> fill) {
  if (shape.empty()) throw Error("GGUF writer: tensor " + name + " has no dimensions");
  const auto cols = static_cast<std::size_t>(shape.back());
  if (cols % dtype_block_elements(dtype) != 0)
    throw Error("GGUF writer: tensor " + name + " has rows of " + std::to_string(cols) +
                " elements, not a multiple of " + std::string(dtype_name(dtype)) + "'s block of " +
                std::to_string(dtype_block_elements(dtype)));
  std::size_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= static_cast<std::size_t>(shape[i]);
  tensors_.push_back({name, shape, dtype, rows * dtype_row_bytes(dtype, cols), std::move(fill)});
}

void GgufWriter::write(const std::filesystem::path& path) const {
  std::string head = "GGUF";
  put_u32(head, 3);
  put_u64(head, tensors_.size());
  put_u64(head, n_kv_);
  head += kv_;
  std::uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_str(head, t.name);
    put_u32(head, static_cast<std::uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d)
      put_u64(head, static_cast<std::uint64_t>(*d));
    put_u32(head, ggml_type_id(t.dtype));
    put_u64(head, offset);
    offset += (t.nbytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  head.resize((head.size() + kAlignment - 1) / kAlignment * kAlignment, '\0');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path.string() + ": cannot open for writing");
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  std::vector<std::uint8_t> buf;
  for (const Tensor& t : tensors_) {
    buf.assign((t.nbytes + kAlignment - 1) / kAlignment * kAlignment, 0);
    t.fill(buf.data(), t.nbytes);
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    if (!out) throw Error(path.string() + ": write failed (disk full?)");
  }
  out.close();
  if (!out) throw Error(path.string() + ": write failed");
}

}  // namespace rkv
