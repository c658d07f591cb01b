#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rkv {

using nlohmann::json;

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

std::string TensorInfo::shape_string() const {
  return shape_to_string(shape);
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path, bool allow_bytes)
    : file_(std::make_unique<MappedFile>(path)) {
  const std::string where = path.string();
  const std::size_t size = file_->size();
  if (size < 8)
    throw Error(where + ": truncated safetensors file (" + std::to_string(size) + " bytes)");
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, file_->data(), 8);  // little-endian on every platform we build for
  if (header_len > size - 8 || header_len > (100u << 20))
    throw Error(where + ": invalid safetensors header length " + std::to_string(header_len) +
                " (file has " + std::to_string(size) +
                " bytes): truncated or not a safetensors file");
  const char* header_begin = reinterpret_cast<const char*>(file_->data()) + 8;
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {
    throw Error(where + ": invalid safetensors header JSON: " + e.what());
  }
  if (!header.is_object()) throw Error(where + ": safetensors header is not a JSON object");
  const std::byte* data_begin = file_->data() + 8 + header_len;
  const std::size_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const std::string ctx = where + ": tensor " + it.key();
    const json& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") ||
        !t.contains("data_offsets"))
      throw Error(ctx + ": malformed entry (needs dtype, shape, data_offsets)");
    TensorInfo info;
    info.name = it.key();
    info.file = where;
    const std::string dt = t["dtype"].is_string() ? t["dtype"].get<std::string>() : "?";
    if (dt == "F32")
      info.dtype = DType::F32;
    else if (dt == "BF16")
      info.dtype = DType::BF16;
    else if (dt == "F16")
      info.dtype = DType::F16;
    else if (dt == "U8" && allow_bytes)
      info.bytes = true;
    else
      throw Error(ctx + ": unsupported dtype " + dt +
                  (allow_bytes ? " (supported: F32, BF16, F16, and U8 for MXFP4 blocks and scales)"
                               : " (supported: F32, BF16, F16)"));
    const auto element =
        info.bytes ? std::int64_t{1} : static_cast<std::int64_t>(dtype_size(info.dtype));
    if (!t["shape"].is_array()) throw Error(ctx + ": shape is not a list");
    for (const auto& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0) throw Error(ctx + ": invalid shape");
      info.shape.push_back(d.get<std::int64_t>());
    }
    const json& off = t["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw Error(ctx + ": data_offsets must be two non-negative integers");
    const std::uint64_t b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    if (b > e || e > data_size)
      throw Error(ctx + ": data_offsets [" + std::to_string(b) + "," + std::to_string(e) +
                  "] lie outside the file's " + std::to_string(data_size) +
                  " data bytes: the file is truncated or corrupt");
    info.nbytes = static_cast<std::size_t>(e - b);
    // The byte size, multiplied in numel()'s order with overflow checks: a shape whose element
    // count or size overflows int64 is rejected here, so numel() never overflows later (found by
    // fuzz/safetensors.cpp: [2^62,4] was signed overflow, and its wrapped size could match).
    std::int64_t need = 1;
    bool overflow = false;
    for (auto d : info.shape) overflow = overflow || __builtin_mul_overflow(need, d, &need);
    overflow = overflow || __builtin_mul_overflow(need, element, &need);
    if (overflow)
      throw Error(ctx + ": shape " + info.shape_string() + " of " + dt + " is too large");
    if (static_cast<std::uint64_t>(need) != info.nbytes)
      throw Error(ctx + ": shape " + info.shape_string() + " of " + dt + " needs " +
                  std::to_string(need) + " bytes but data_offsets give " +
                  std::to_string(info.nbytes));
    if (b % static_cast<std::uint64_t>(element) != 0 ||
        (8 + header_len) % static_cast<std::uint64_t>(element) != 0)
      throw Error(ctx + ": data is not aligned to its element size");
    info.data = data_begin + b;
    tensors_[info.name] = std::move(info);
  }
}

TensorStore::TensorStore(const std::filesystem::path& dir, bool allow_bytes) : dir_(dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> paths;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(dir / "model.safetensors")) {
    paths.push_back(dir / "model.safetensors");
  } else if (fs::exists(index)) {
    json j;
    try {
      std::ifstream in(index);
      j = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(index.string() + ": invalid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index.string() + ": missing 'weight_map'");
    std::vector<std::string> names;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) throw Error(index.string() + ": weight_map values must be file names");
      names.push_back(it->get<std::string>());
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (const auto& n : names) {
      if (n.find('/') != std::string::npos || n.find("..") != std::string::npos)
        throw Error(index.string() + ": shard name '" + n + "' must be a plain file name");
      if (!fs::exists(dir / n)) throw Error(index.string() + ": shard " + n + " is missing");
      paths.push_back(dir / n);
    }
  } else if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") paths.push_back(e.path());
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty())
    throw Error(dir.string() +
                ": no model.safetensors, model.safetensors.index.json or *.safetensors");
  for (const auto& p : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(p, allow_bytes));
    for (const auto& [name, info] : files_.back()->tensors()) {
      if (tensors_.count(name))
        throw Error(p.string() + ": tensor " + name + " also appears in " + tensors_[name].file);
      tensors_[name] = info;
    }
  }
}

const TensorInfo& TensorStore::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(dir_.string() + ": missing tensor " + name);
  return it->second;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  auto nbytes_of = [](const TensorToWrite& t) {
    std::uint64_t n = t.u8 ? 1 : dtype_size(t.dtype);
    for (auto d : t.shape) n *= static_cast<std::uint64_t>(d);
    return n;
  };
  std::uint64_t offset = 0;
  for (const auto* t : sorted) {
    const char* dt = t->u8                     ? "U8"
                     : t->dtype == DType::F32  ? "F32"
                     : t->dtype == DType::BF16 ? "BF16"
                                               : "F16";
    header[t->name] = {
        {"dtype", dt}, {"shape", t->shape}, {"data_offsets", {offset, offset + nbytes_of(*t)}}};
    offset += nbytes_of(*t);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path.string() + ": cannot write");
  const std::uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::vector<std::uint8_t> buffer;
  for (const auto* t : sorted) {
    buffer.assign(nbytes_of(*t), 0);
    if (t->fill) t->fill(buffer.data(), buffer.size());
    out.write(reinterpret_cast<const char*>(buffer.data()),
              static_cast<std::streamsize>(buffer.size()));
  }
  if (!out) throw Error(path.string() + ": write failed");
}

}  // namespace rkv
