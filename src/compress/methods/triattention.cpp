// triattention (TRIATTENTION.md): every generated entry scored by the attention a typical future
// query would pay it, predicted from the model's calibrated pre-RoPE query statistics
// (triattention.cpp); the prompt pinned and counted in the budget. It decides once per step for
// every layer together (its per_head and union selections combine all layers' scores), after
// the forward pass, when the cache has grown to budget + buffer (the reference's slack trigger
// with divide_length = buffer), and cuts it back to budget.
#include <algorithm>
#include <vector>

#include "compress/registry.h"
#include "core/error.h"

namespace rkv::compress {
namespace {

tri::Params reference_params(const CompressionParams& p) {
  tri::Params t;
  t.budget = p.budget;
  t.divide_length = p.buffer;
  t.slack_trigger = true;
  t.count_prompt_tokens = true;
  t.normalize_scores = p.normalize;
  t.reference_phases = false;  // the post-RoPE form: O(head_dim) per key (triattention.h)
  t.mode = p.selection == TriSelection::per_head    ? tri::Mode::per_head
           : p.selection == TriSelection::union_all ? tri::Mode::union_all
                                                    : tri::Mode::per_layer_perhead;
  return t;
}

bool due(const CompressionParams& params, int n_all, int prefix, std::int64_t next_position) {
  return tri::should_compress(reference_params(params), n_all, prefix, next_position);
}

SequencePlan plan(const SequenceView& view, const CompressionParams& params, ThreadPool* pool) {
  if (view.query_stats == nullptr)
    throw Error("triattention needs the model's query statistics (rkv calibrate)");
  const tri::Stats& stats = *view.query_stats;
  const int rotary_dim = 2 * static_cast<int>(view.rope_frequencies.size());
  if (stats.layers != view.layers || stats.q_heads != view.q_heads ||
      2 * stats.freqs != view.head_dim || rotary_dim > view.head_dim) {
    throw Error("triattention: the query statistics are for " + std::to_string(stats.layers) +
                " layers of " + std::to_string(stats.q_heads) + " heads of size " +
                std::to_string(2 * stats.freqs) + ", the cache has " + std::to_string(view.layers) +
                " of " + std::to_string(view.q_heads) + " of size " +
                std::to_string(view.head_dim));
  }
  if (view.prefix >= params.budget)
    throw Error("triattention: the prompt (" + std::to_string(view.prefix) +
                " entries) does not fit under the budget (" + std::to_string(params.budget) + ")");
  tri::Rope rope;
  rope.omega.assign(view.rope_frequencies.begin(), view.rope_frequencies.end());
  rope.scale = view.rope_scale;  // attention_scaling: 1 but for YaRN (gpt-oss)
  rope.offsets = tri::geometric_offsets(params.offset_max);
  // Partial RoPE (Qwen3.5): the keys in the statistics' layout (tri::half_layout), the unrotated
  // pairs at frequency 0.
  std::vector<std::vector<tri::HeadKeys>> laid_out;
  std::vector<std::vector<float>> storage;
  if (rotary_dim < view.head_dim) {
    if (view.rope_scale != 1.0)
      throw Error(
          "triattention: a head that rotates part of its dimensions with a RoPE "
          "magnitude cannot be scored");
    rope.omega.resize(static_cast<std::size_t>(stats.freqs), 0.0f);
    const std::vector<int> layout = tri::half_layout(view.head_dim, rotary_dim);
    const std::size_t D = static_cast<std::size_t>(view.head_dim);
    laid_out = view.keys;
    for (auto& layer : laid_out)
      for (tri::HeadKeys& head : layer) {
        std::vector<float>& k = storage.emplace_back(static_cast<std::size_t>(head.n) * D);
        for (std::size_t j = 0; j < static_cast<std::size_t>(head.n); ++j)
          for (std::size_t i = 0; i < D; ++i)
            k[j * D + i] = head.keys[j * D + static_cast<std::size_t>(layout[i])];
        head.keys = k.data();
      }
  }
  SequencePlan out;
  out.decision =
      tri::decide(laid_out.empty() ? view.keys : laid_out, view.head_dim, view.q_heads, view.prefix,
                  stats, rope, reference_params(params), view.round_start, pool);
  out.compressed = out.decision.compressed;
  if (!out.compressed) return out;
  // Units: per_head and union one list per KV head (every layer), per_layer_perhead one per
  // (layer, KV head). Stored ascending: order has no effect on anything (spec 5.5).
  const bool per_layer = params.selection == TriSelection::per_layer_perhead;
  out.kept.assign(static_cast<std::size_t>(view.layers), {});
  for (int l = 0; l < view.layers; ++l) {
    for (int h = 0; h < view.kv_heads; ++h) {
      const auto& unit =
          out.decision.kept[static_cast<std::size_t>(per_layer ? l * view.kv_heads + h : h)];
      std::vector<std::int32_t> kept(unit.begin(), unit.end());
      std::sort(kept.begin(), kept.end());
      out.kept[static_cast<std::size_t>(l)].push_back(std::move(kept));
    }
  }
  return out;
}

}  // namespace

MethodRecord triattention_method() {
  MethodRecord r = new_record(
      Method::triattention, "triattention",
      "TriAttention: the attention a typical future query will pay each generated entry, "
      "predicted from the model's calibrated pre-RoPE query statistics (a trigonometric series "
      "in the distance plus a magnitude term); the prompt pinned, every layer decided at once",
      "TRIATTENTION.md 2-6");
  // The paper's runs (spec 7): budget 2048 counting the prompt, divide_length 128, per_head,
  // normalised scores, offsets up to 65536.
  r.info.defaults.budget = 2048;
  r.info.defaults.buffer = 128;
  r.info.needs.keys = true;
  r.info.needs.positions = true;
  r.info.needs.query_stats = true;
  r.info.timing = Timing::whole_pass;
  r.info.pins_prompt = true;
  r.info.trace_fields = {"final_score"};  // each head's combined score of the generated entries
  r.info.params = {"method",    "budget",    "buffer",    "think_only",
                   "selection", "normalize", "offset_max"};
  // Never run per layer (compress_layer refuses a whole_pass method): an empty pipeline.
  r.stages = [](const CompressionParams&) { return Pipeline{}; };
  r.whole_pass_due = due;
  r.plan_whole_pass = plan;
  return r;
}

}  // namespace rkv::compress
