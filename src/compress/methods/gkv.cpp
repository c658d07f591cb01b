// gkv (ALGORITHMS.md 2 last paragraph, 3, 4; golden README 6.3): G-KV. The local attention
// score (attention_gkv.cpp), optionally shifted by gamma * std (attention_shift.cpp), normalised
// and smoothed with the entry's previous global score (global_smoothing.cpp, the entry state),
// optionally pooled, minus the normalised redundancy. Kept candidates store their global score.
#include "compress/registry.h"

namespace rkv::compress {
namespace {

Pipeline stages(const CompressionParams& p) {
  // G-KV normalises (local and redundancy) only with its score cache on (README 6.3, 7.2).
  const bool cache = p.smoothing != Smoothing::none;
  Pipeline s;
  s.select = Pipeline::Select::top_k;
  s.attention = Pipeline::Attention::gkv;
  s.shift_gamma = p.shift_gamma;
  s.normalize_local = cache && !p.disable_norm;
  s.smoothing = p.smoothing;
  s.decay = p.decay;
  s.pool_kernel = p.pooling ? p.kernel : 1;
  s.redundancy = p.redundancy;
  s.normalize_redundancy = cache && !p.disable_norm;
  s.lambda = p.lambda;
  s.threshold = p.threshold;
  s.store_global = cache;
  return s;
}

}  // namespace

MethodRecord gkv_method() {
  MethodRecord r = new_record(Method::gkv, "gkv",
                              "G-KV: normalised local attention smoothed into a global score "
                              "cache, minus the normalised redundancy",
                              "ALGORITHMS.md 2 (G-KV variant), 3, 4");
  // G-KV's own recipe (scripts/inference.sh): window 16, mix 0.5, cache on with max smoothing and
  // decay 0.8, redundancy on, pooling off (kernel 5 when turned on).
  CompressionParams& d = r.info.defaults;
  d.window = 16;
  d.lambda = 0.5f;
  d.kernel = 5;
  d.smoothing = Smoothing::max;
  d.decay = 0.8f;
  d.redundancy = true;
  d.pooling = false;
  r.info.needs.window_queries = true;
  r.info.needs.keys = true;
  r.info.needs.reads_entry_state = true;
  r.info.initial_state = kNoState;  // a new entry has no global score yet
  r.info.params =
      compressing_params({"window", "kernel", "lambda", "threshold", "smoothing", "decay",
                          "redundancy", "pooling", "disable_norm", "ratio", "shift_gamma"});
  r.info.trace_fields = {
      "attention",  "attention_mean", "shift_std",  "local_shifted",   "local_normalized",
      "old_score",  "global_score",   "importance", "redundancy_full", "redundancy_raw",
      "redundancy", "final_score",    "top_k"};
  r.stages = stages;
  return r;
}

}  // namespace rkv::compress
