// An allocator for large, long-lived buffers that the kernels stream through (the KV cache's
// rows): from kHugePageBytes on, memory is mapped anonymously and marked MADV_HUGEPAGE before
// anything touches it, so that where the kernel's transparent huge pages are enabled ("always"
// or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled) its 2 MiB-aligned stretches are
// faulted in as 2 MiB pages, as the weights are (mapped_file.cpp). With 4 KiB pages every 16 bf16
// rows of 128 values take a TLB entry of their own; in rkv_bench's attention over a 4096-entry
// cache, huge pages took 0.94 of the time (docs/PERFORMANCE.md). The mapping is the buffer's size
// rounded up to whole pages, so no more memory is touched than with operator new. Smaller buffers
// come from operator new. Where huge pages are off, the memory is ordinary pages: nothing but
// speed depends on it.
#pragma once

#include <cstddef>
#include <new>

namespace rkv {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Raw storage of `bytes` bytes (aligned to at least 64), and its release with the same size.
void* allocate_huge(std::size_t bytes);
void release_huge(void* p, std::size_t bytes) noexcept;

template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() noexcept = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_huge(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { release_huge(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

}  // namespace rkv
