// rkv (ALGORITHMS.md 2, 3, 4; golden README 6.1, 6.4): R-KV's score, lambda * importance -
// (1 - lambda) * redundancy. Importance is SnapKV's (attention_rkv.cpp, max_pool.cpp); the
// redundancy of the keys is redundancy.cpp.
#include "compress/registry.h"

namespace rkv::compress {
namespace {

Pipeline stages(const CompressionParams& p) {
  return importance_minus_redundancy(p, p.lambda);
}

}  // namespace

MethodRecord rkv_method() {
  MethodRecord r = new_record(Method::rkv, "rkv",
                              "R-KV: lambda * importance - (1 - lambda) * redundancy of the keys",
                              "ALGORITHMS.md 2, 3, 4");
  r.info.needs.window_queries = true;
  r.info.needs.keys = true;
  r.info.reference_compresses_at_budget = true;
  r.info.params = compressing_params({"window", "kernel", "lambda", "threshold"});
  r.info.case_dump = true;
  r.info.trace_fields = importance_minus_redundancy_fields();
  r.stages = stages;
  return r;
}

}  // namespace rkv::compress
