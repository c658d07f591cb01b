// fullkv (ALGORITHMS.md 4): never evicts. The baseline every accuracy figure is relative to, and
// the one method whose record says compresses = false (CompressionParams::none() is its preset).
#include "compress/registry.h"

namespace rkv::compress {

MethodRecord fullkv_method() {
  MethodRecord r =
      new_record(Method::fullkv, "fullkv", "never evict: the baseline every figure is relative to",
                 "ALGORITHMS.md 4");
  r.info.compresses = false;
  r.info.params = {"method"};
  r.stages = [](const CompressionParams&) { return Pipeline{}; };  // keep_all
  return r;
}

}  // namespace rkv::compress
