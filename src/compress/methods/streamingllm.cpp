// streamingllm (ALGORITHMS.md 4; golden README 6.1): the first `sinks` entries and the most recent
// budget - sinks. No scores, no queries, no state.
#include <string>

#include "compress/registry.h"
#include "core/error.h"

namespace rkv::compress {
namespace {

Pipeline stages(const CompressionParams& p) {
  Pipeline s;
  s.select = Pipeline::Select::sinks_recent;
  s.sinks = p.sinks;
  return s;
}

// Only streamingllm keeps sinks; other methods ignore the setting.
void validate(const CompressionParams& p, const std::string& method_suffix) {
  if (p.sinks < 0 || p.sinks >= p.budget) {
    throw Error("kv sinks must be in [0, budget = " + std::to_string(p.budget) + "), got " +
                std::to_string(p.sinks) + method_suffix);
  }
}

}  // namespace

MethodRecord streamingllm_method() {
  MethodRecord r =
      new_record(Method::streamingllm, "streamingllm",
                 "keep the first `sinks` entries and the most recent budget - sinks; no scores",
                 "ALGORITHMS.md 4");
  r.info.reference_compresses_at_budget = true;
  r.info.params = compressing_params({"sinks"});
  r.info.case_dump = true;
  r.stages = stages;
  r.validate = validate;
  return r;
}

}  // namespace rkv::compress
