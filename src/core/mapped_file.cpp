#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace rkv {

namespace {

bool use_file_mapping() {
  const char* mode = std::getenv("RKV_LOAD_MODE");
  if (mode == nullptr || *mode == '\0' || std::string(mode) == "copy") return false;
  if (std::string(mode) == "mmap") return true;
  throw Error(std::string("RKV_LOAD_MODE=") + mode + ": expected copy or mmap");
}

// Reads the whole file into anonymous memory, asking for transparent huge pages.
void* read_into_memory(int fd, std::size_t size, std::size_t& mapped_len,
                       const std::string& where) {
  const std::size_t huge = std::size_t{2} << 20;
  mapped_len = (size + huge - 1) / huge * huge;
  void* p = ::mmap(nullptr, mapped_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error(where + ": cannot allocate " + std::to_string(size) +
                " bytes: " + std::strerror(errno));
  ::madvise(p, mapped_len, MADV_HUGEPAGE);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd, static_cast<char*>(p) + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::munmap(p, mapped_len);
      throw Error(where + ": read failed" +
                  (n < 0 ? std::string(": ") + std::strerror(err) : std::string()));
    }
    done += static_cast<std::size_t>(n);
  }
  ::mprotect(p, mapped_len, PROT_READ);
  return p;
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, Mode mode) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path.string() + ": cannot stat: " + std::strerror(err));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  try {
    if (size_ > 0 && mode == Mode::Default && !use_file_mapping()) {
      data_ =
          static_cast<const std::byte*>(read_into_memory(fd, size_, mapped_len_, path.string()));
    } else if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED)
        throw Error(path.string() + ": cannot memory-map: " + std::strerror(errno));
      data_ = static_cast<const std::byte*>(p);
      mapped_len_ = size_;
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), mapped_len_);
}

}  // namespace rkv
