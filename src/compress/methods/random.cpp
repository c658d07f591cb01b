// random (not in ALGORITHMS.md: the floor every scoring method must beat, issue 19;
// docs/METHODS.md): the window and budget - window other entries drawn uniformly per KV head
// (selection.cpp's uniform_sample), seeded by seed, layer, head and sequence length.
#include "compress/registry.h"

namespace rkv::compress {
namespace {

Pipeline stages(const CompressionParams& p) {
  Pipeline s;
  s.select = Pipeline::Select::random;
  s.seed = p.seed;
  return s;
}

}  // namespace

MethodRecord random_method() {
  MethodRecord r =
      new_record(Method::random, "random",
                 "the floor every scoring method must beat: keep the window and budget - window "
                 "entries drawn uniformly at random per KV head (seeded by seed, layer, head and "
                 "sequence length)",
                 "not in ALGORITHMS.md (issue 19; docs/METHODS.md)");
  r.info.params = compressing_params({"window", "seed"});
  r.info.trace_fields = {"top_k"};
  r.stages = stages;
  return r;
}

}  // namespace rkv::compress
