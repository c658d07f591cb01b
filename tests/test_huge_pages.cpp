// core/huge_pages.h: the allocator behind the KV cache's rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/huge_pages.h"
#include "kv/kv_cache.h"

namespace rkv {
namespace {

// The kernel's transparent-huge-page mode: the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise" or "never"), "" if absent.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const auto a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
}

// The "THPeligible:" value of the mapping in /proc/self/smaps that holds address p (-1: none).
int thp_eligible(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(12));
    }
  }
  return -1;
}

TEST(HugePages, SmallAndLargeBuffersAreUsableAndAligned) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, kHugePageBytes - 1, kHugePageBytes,
                        3 * kHugePageBytes + 5}) {
    std::vector<std::uint8_t, HugePageAllocator<std::uint8_t>> v(n, 7);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % 64, 0u) << n;
    v.back() = 9;
    v.push_back(11);  // reallocates: the contents move to the new buffer
    if (n > 1) {
      EXPECT_EQ(v[0], 7);
    }
    EXPECT_EQ(v[n - 1], 9);
    EXPECT_EQ(v[n], 11);
  }
}

// A KV cache's rows are a mapping the kernel may back with huge pages (THPeligible: 1) wherever
// transparent huge pages are enabled, in "madvise" mode too.
TEST(HugePages, KvCacheRowsAreEligibleForHugePages) {
  const std::string mode = thp_mode();
  if (mode != "always" && mode != "madvise")
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' on this machine";
  KvCacheShape shape;
  shape.layers = 2;
  shape.kv_heads = 2;
  shape.q_heads = 4;
  shape.head_dim = 128;
  shape.capacity = 4096;  // 2 x 2 x 4096 rows of 512 bytes: 8 MiB each for keys and values
  const KvCache cache(shape);
  EXPECT_EQ(thp_eligible(cache.keys(0, 0).data), 1);
  EXPECT_EQ(thp_eligible(cache.values(1, 1).data), 1);
}

}  // namespace
}  // namespace rkv
