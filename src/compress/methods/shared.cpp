// What the method records share: the common record, the common parameters, and the two scores
// more than one method builds on (SnapKV's importance; R-KV's importance minus redundancy).
#include "compress/registry.h"

namespace rkv::compress {

MethodRecord new_record(Method method, std::string_view name, std::string_view summary,
                        std::string_view spec) {
  MethodRecord r;
  r.info.method = method;
  r.info.name = name;
  r.info.summary = summary;
  r.info.spec = spec;
  r.info.defaults.method = method;  // member defaults: ALGORITHMS.md 1 and the rkv preset
  return r;
}

std::vector<std::string_view> compressing_params(std::initializer_list<std::string_view> own) {
  std::vector<std::string_view> names = {"method", "budget", "buffer", "trigger", "think_only"};
  names.insert(names.end(), own.begin(), own.end());
  return names;
}

Pipeline window_importance(const CompressionParams& p) {
  Pipeline s;
  s.select = Pipeline::Select::top_k;
  s.attention = Pipeline::Attention::rkv;
  s.pool_kernel = p.kernel;
  return s;
}

Pipeline importance_minus_redundancy(const CompressionParams& p, float mix) {
  Pipeline s = window_importance(p);
  s.redundancy = true;
  s.threshold = p.threshold;
  s.lambda = mix;
  return s;
}

std::vector<std::string_view> window_importance_fields() {
  return {"attention", "attention_mean", "importance", "final_score", "top_k"};
}

std::vector<std::string_view> importance_minus_redundancy_fields() {
  return {"attention",      "attention_mean", "importance",  "redundancy_full",
          "redundancy_raw", "redundancy",     "final_score", "top_k"};
}

}  // namespace rkv::compress
