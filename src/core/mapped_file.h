// The bytes of a whole file, read-only, used in place (weights are never converted or copied
// tensor by tensor).
//
// By default the file is read once into anonymous memory backed by transparent huge pages:
// decode streams every weight once per token, and on 4 KiB page-cache pages the TLB misses cost
// about half the decode speed (measured in docs/PERFORMANCE-LOG.md). RKV_LOAD_MODE=mmap maps the
// file instead (for models larger than the free memory; pages load on first use).
#pragma once

#include <cstddef>
#include <filesystem>

namespace rkv {

class MappedFile {
 public:
  // How the bytes come into memory: Default follows RKV_LOAD_MODE (read into memory unless it
  // says mmap); Map always maps the file, so that reading a small part of a large file (a GGUF
  // file's vocabulary) touches only that part.
  enum class Mode { Default, Map };
  // Throws rkv::Error naming the file when it cannot be opened, read or mapped.
  explicit MappedFile(const std::filesystem::path& path, Mode mode = Mode::Default);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_len_ = 0;
};

}  // namespace rkv
