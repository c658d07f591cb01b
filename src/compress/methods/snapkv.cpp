// snapkv (ALGORITHMS.md 2, 4; golden README 6.1): the window queries' attention over the
// candidates, max-pooled. The score itself is shared with rkv and skipkv (shared.cpp).
#include "compress/registry.h"

namespace rkv::compress {

MethodRecord snapkv_method() {
  MethodRecord r =
      new_record(Method::snapkv, "snapkv",
                 "window attention over the candidates (GQA max on logits), max-pooled (kernel 7)",
                 "ALGORITHMS.md 2, 4");
  r.info.needs.window_queries = true;
  r.info.needs.keys = true;
  r.info.reference_compresses_at_budget = true;
  r.info.params = compressing_params({"window", "kernel"});
  r.info.case_dump = true;
  r.info.trace_fields = window_importance_fields();
  r.stages = window_importance;
  return r;
}

}  // namespace rkv::compress
