// skipkv (ALGORITHMS.md 2, 3, 5): R-KV's scores mixed with SkipKV's weight sigma, minus the
// penalty of the entry's sentence (sentence_penalty.cpp) when a later sentence repeats it. The
// engine tracks the sentences (their tokens' text, and the mean final hidden state of each) and
// hands the penalties in as LayerView::position_penalty. Adaptive steering is separate.
#include "compress/registry.h"

namespace rkv::compress {
namespace {

Pipeline stages(const CompressionParams& p) {
  Pipeline s = importance_minus_redundancy(p, p.sigma);
  s.sentence_penalty = true;
  return s;
}

}  // namespace

MethodRecord skipkv_method() {
  MethodRecord r = new_record(
      Method::skipkv, "skipkv",
      "SkipKV: sigma * importance - (1 - sigma) * redundancy - the penalty of the entry's "
      "sentence when a later sentence repeats it (cosine of mean final hidden states > "
      "tau); adaptive steering is separate (--steering)",
      "ALGORITHMS.md 2, 3, 5");
  r.info.needs.window_queries = true;
  r.info.needs.keys = true;
  r.info.needs.positions = true;
  r.info.needs.token_text = true;
  r.info.needs.final_hidden = true;
  // R-KV's scores (kernel 7, threshold 0.5, window 8) mixed with sigma [0.1]: the member defaults.
  r.info.reference_compresses_at_budget = true;
  r.info.params = compressing_params(
      {"window", "kernel", "threshold", "sigma", "tau", "delimiters", "keywords"});
  r.info.trace_fields = importance_minus_redundancy_fields();
  r.info.trace_fields.push_back("sentence_penalty");
  r.stages = stages;
  return r;
}

}  // namespace rkv::compress
