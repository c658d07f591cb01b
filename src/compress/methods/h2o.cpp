// h2o (ALGORITHMS.md 4): heavy hitters. The engine adds every decoding step's attention
// probabilities into the entries' state (accumulate_h2o, h2o.cpp); a compression keeps the top
// budget - window entries by accumulator plus the recent window, and the kept carry theirs on.
#include "compress/registry.h"

namespace rkv::compress {
namespace {

Pipeline stages(const CompressionParams&) {
  Pipeline s;
  s.select = Pipeline::Select::top_k;
  s.accumulated = true;
  s.carry_state = true;
  return s;
}

}  // namespace

MethodRecord h2o_method() {
  MethodRecord r =
      new_record(Method::h2o, "h2o",
                 "heavy hitters: attention accumulated at every decoding step (max over the query "
                 "group, accumulate_h2o) plus the recent window",
                 "ALGORITHMS.md 4");
  r.info.needs.entry_state = true;
  r.info.needs.reads_entry_state = true;
  r.info.needs.step_attention = true;
  r.info.params = compressing_params({"window"});
  r.info.trace_fields = {"attention_mean", "global_score", "importance", "final_score", "top_k"};
  r.stages = stages;
  return r;
}

}  // namespace rkv::compress
