#include "engine/model_runner.h"

#include "core/error.h"

namespace rkv {

void ModelRunner::run(std::span<const ForwardRow> rows, std::span<KvMemory* const> memory,
                      float* logits) {
  if (rows.empty()) return;
  if (memory.size() != rows.size()) throw Error("model runner: one KV memory per row is needed");
  const ModelConfig& c = model_.config();
  rows_.assign(rows.begin(), rows.end());
  segments_.clear();
  bool attention = false, steering = false, final_hidden = false, host = false;
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    if (r == 0 || rows_[r].cache != rows_[r - 1].cache) segments_.push_back(r);
    const KvMemory& m = *memory[r];
    rows_[r].want_attention = m.wants_attention();
    attention = attention || m.wants_attention();
    steering = steering || m.steers();
    final_hidden = final_hidden || m.wants_final_hidden();
    host = host || m.needs_host();
  }
  segments_.push_back(rows_.size());
  const std::size_t n_seq = segments_.size() - 1;

  const std::unique_ptr<ForwardOps> ops = model_.ops(scratch_, pool_);
  if (host && !ops->on_host())
    throw Error(
        "KV compression, steering and sentence tracking run on --device cpu only in this build "
        "(the CUDA backend runs fullkv): run with --device cpu");
  ForwardPass pass(c, *ops, rows_);
  const auto H = static_cast<std::size_t>(c.hidden_size);
  const int G = c.group_size(), Hkv = c.num_kv_heads;
  for (int l = 0; l < c.num_layers; ++l) {
    pass.append_kv(l);
    // The cache layer of l: compression, and H2O's accumulation, work on the full-attention
    // layers only (a sliding-window ring or a DeltaNet state never grows).
    const int kl = pass.kv_layer(l);
    // Decode-time compression (ALGORITHMS.md 1): after the step's keys are in, before attention
    // reads them; only a sequence with one row (a decode step) in the pass.
    for (std::size_t s = 0; s < n_seq && kl >= 0; ++s) {
      const std::size_t r = segments_[s];
      if (segments_[s + 1] - r != 1 || !memory[r]->due()) continue;
      memory[r]->compress_layer(kl, rows_[r].position + 1, rows_[r].position, &pool_);
    }
    pass.attend(l, attention && kl >= 0 ? &probs_ : nullptr);
    if (attention && kl >= 0) {
      // One task per (sequence, KV head), its rows in order: no two threads touch one array.
      pool_.parallel_for(n_seq * static_cast<std::size_t>(Hkv), [&](std::size_t task) {
        const std::size_t s = task / static_cast<std::size_t>(Hkv);
        const int h = static_cast<int>(task % static_cast<std::size_t>(Hkv));
        for (std::size_t r = segments_[s]; r < segments_[s + 1]; ++r) {
          if (!rows_[r].want_attention) continue;
          const int n = probs_.entries[r];
          const std::size_t head = static_cast<std::size_t>(h) * G * static_cast<std::size_t>(n);
          memory[r]->accumulate(kl, h, probs_.data.data() + probs_.offset[r] + head, G, n);
        }
      });
    }
    if (steering) {
      float* hidden = pass.hidden();
      for (std::size_t r = 0; r < rows_.size(); ++r)
        if (memory[r]->steers())
          memory[r]->steer(l, rows_[r].position, hidden + r * H, c.hidden_size);
    }
  }
  pass.finish(logits);
  // Methods that decide for every layer at once (MethodInfo timing whole_pass: TriAttention)
  // compress a decode step's cache now, after its last layer (TRIATTENTION.md 6.3).
  for (std::size_t s = 0; s < n_seq; ++s)
    if (segments_[s + 1] - segments_[s] == 1) memory[segments_[s]]->end_decode_step(&pool_);
  if (final_hidden) {
    const float* hidden = pass.final_hidden();
    for (std::size_t r = 0; r < rows_.size(); ++r)
      if (memory[r]->wants_final_hidden())
        memory[r]->observe_final_hidden(rows_[r].position, hidden + r * H, c.hidden_size);
  }
}

}  // namespace rkv
