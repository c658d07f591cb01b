// The public entry points: check the view against what the method's stages need, apply the
// trigger rule, and run the method's pipeline on every KV head (in parallel with a pool).
#include <string>

#include "compress/registry.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "rkv/compression.h"

namespace rkv {
namespace {

void check_view(const LayerView& v, const CompressionParams& p) {
  if (method_info(p.method).timing == Timing::whole_pass) {
    throw Error("kv method " + std::string(method_name(p.method)) +
                " decides for every layer at once after the forward pass (plan_whole_pass), "
                "not one layer at a time");
  }
  const auto shape = [&] {
    return " (q_heads " + std::to_string(v.q_heads) + ", kv_heads " + std::to_string(v.kv_heads) +
           ", head_dim " + std::to_string(v.head_dim) + ", n_all " + std::to_string(v.n_all) +
           ", window " + std::to_string(v.window) + ")";
  };
  if (v.kv_heads < 1 || v.q_heads < v.kv_heads || v.q_heads % v.kv_heads != 0) {
    throw Error("compression view: q_heads must be a positive multiple of kv_heads" + shape());
  }
  if (v.head_dim < 1 || v.n_all < 0) {
    throw Error("compression view: head_dim must be positive and n_all non-negative" + shape());
  }
  const auto per_head = [&](std::size_t size, const char* what, bool required) {
    if (size == 0 && !required) return;
    if (size != static_cast<std::size_t>(v.kv_heads)) {
      throw Error(std::string("compression view: ") + what + " needs one array per KV head, got " +
                  std::to_string(size) + shape());
    }
  };
  const MethodInfo& info = method_info(p.method);
  const StageNeeds& needs = info.needs;
  per_head(v.keys.size(), "keys", needs.keys);
  per_head(v.positions.size(), "positions", needs.positions);
  for (int h = 0; h < static_cast<int>(v.positions.size()); ++h) {
    if (v.positions[h] == nullptr && needs.positions) {
      throw Error("compression view: method " + std::string(method_name(p.method)) +
                  " needs the original positions of KV head " + std::to_string(h));
    }
  }
  per_head(v.state.size(), "state", needs.entry_state);
  for (int h = 0; h < static_cast<int>(v.keys.size()); ++h) {
    if (v.keys[h] == nullptr) {
      throw Error("compression view: keys of KV head " + std::to_string(h) + " is null");
    }
  }
  for (int h = 0; h < static_cast<int>(v.state.size()); ++h) {
    if (v.state[h] == nullptr && needs.entry_state) {
      throw Error("compression view: method " + std::string(method_name(p.method)) +
                  " needs per-entry state (accumulators) for KV head " + std::to_string(h));
    }
  }
  // A method that keeps a window of recent entries needs at least that many.
  if (info.reads("window") && v.n_all < p.window) {
    throw Error("compression view: fewer entries than the window" + shape());
  }
  if (needs.window_queries) {
    if (v.queries == nullptr) {
      throw Error("compression view: method " + std::string(method_name(p.method)) +
                  " needs the window queries" + shape());
    }
    if (v.window != p.window) {
      throw Error("compression view: " + std::to_string(v.window) +
                  " window queries given, the parameters ask for window " +
                  std::to_string(p.window) + shape());
    }
  }
}

Selection run(const LayerView& view, const CompressionParams& params, int budget, Diagnostics* diag,
              ThreadPool* pool) {
  const compress::MethodRecord& record = compress::method_record(params.method);
  const compress::Pipeline pipeline = record.stages(params);
  // h2o reads no queries: its "window" is just the recent entries it protects.
  LayerView local_view;
  const LayerView* v = &view;
  if (!record.info.needs.window_queries && view.window != params.window) {
    local_view = view;
    local_view.window = params.window;
    v = &local_view;
  }
  Selection sel;
  sel.compressed = true;
  sel.kept.resize(view.kv_heads);
  sel.new_state.resize(view.kv_heads);
  if (diag != nullptr) diag->heads.assign(view.kv_heads, HeadDiagnostics{});
  auto one = [&](std::size_t h) {
    auto res = compress::run_head(*v, pipeline, static_cast<int>(h), budget,
                                  diag != nullptr ? &diag->heads[h] : nullptr);
    sel.kept[h] = std::move(res.kept);
    sel.new_state[h] = std::move(res.new_state);
  };
  if (pool != nullptr && pool->size() > 1 && view.kv_heads > 1) {
    pool->parallel_for(static_cast<std::size_t>(view.kv_heads), one);
  } else {
    for (int h = 0; h < view.kv_heads; ++h) one(static_cast<std::size_t>(h));
  }
  return sel;
}

std::int64_t effective_len(const LayerView& view) {
  return view.seq_len > 0 ? view.seq_len : view.n_all;
}

}  // namespace

bool should_compress(int n_all, const CompressionParams& params, std::int64_t seq_len) {
  if (!method_info(params.method).compresses) return false;
  return n_all > params.budget_for(seq_len > 0 ? seq_len : n_all);
}

Selection compress_layer(const LayerView& view, const CompressionParams& params, Diagnostics* diag,
                         ThreadPool* pool) {
  params.validate();
  check_view(view, params);
  if (!should_compress(view.n_all, params, effective_len(view))) return Selection{};
  return run(view, params, params.budget_for(effective_len(view)), diag, pool);
}

Selection score_and_select(const LayerView& view, const CompressionParams& params,
                           Diagnostics* diag, ThreadPool* pool) {
  params.validate();
  check_view(view, params);
  const int budget = params.budget_for(effective_len(view));
  if (view.n_all < budget) {
    throw Error("score_and_select: " + std::to_string(view.n_all) +
                " entries, fewer than the budget " + std::to_string(budget));
  }
  if (!method_info(params.method).compresses) return Selection{};
  return run(view, params, budget, diag, pool);
}

}  // namespace rkv
