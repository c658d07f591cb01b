// The whole-pass entry points: the method's record decides (registry.h).
#include "compress/whole_pass.h"

#include "compress/registry.h"
#include "core/error.h"

namespace rkv::compress {
namespace {

const MethodRecord& whole_pass_record(const CompressionParams& params) {
  const MethodRecord& r = method_record(params.method);
  if (r.plan_whole_pass == nullptr)
    throw Error("kv method " + std::string(r.info.name) +
                " decides layer by layer (compress_layer), not once for the whole pass");
  return r;
}

}  // namespace

bool whole_pass_due(const CompressionParams& params, int n_all, int prefix,
                    std::int64_t next_position) {
  return whole_pass_record(params).whole_pass_due(params, n_all, prefix, next_position);
}

SequencePlan plan_whole_pass(const SequenceView& view, const CompressionParams& params,
                             ThreadPool* pool) {
  params.validate();
  if (view.layers < 1 || view.kv_heads < 1 || view.q_heads % view.kv_heads != 0 ||
      static_cast<int>(view.keys.size()) != view.layers)
    throw Error("whole-pass view: one list of KV heads per layer is needed");
  for (const auto& layer : view.keys)
    if (static_cast<int>(layer.size()) != view.kv_heads)
      throw Error("whole-pass view: one key array per KV head is needed");
  return whole_pass_record(params).plan_whole_pass(view, params, pool);
}

}  // namespace rkv::compress
