#include "core/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

namespace rkv {

namespace {
// Whole pages: a mapping rounded up to 2 MiB would let the kernel fault a huge page of memory
// for the last few rows.
std::size_t mapped_bytes(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}
}  // namespace

void* allocate_huge(std::size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new (bytes, std::align_val_t{64});
  void* p = ::mmap(nullptr, mapped_bytes(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::madvise(p, mapped_bytes(bytes), MADV_HUGEPAGE);  // advice only: refused, pages stay small
  return p;
}

void release_huge(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete (p, std::align_val_t{64});
    return;
  }
  ::munmap(p, mapped_bytes(bytes));
}

}  // namespace rkv
