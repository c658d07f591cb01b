// Methods that decide once per step for every layer of a sequence together (MethodInfo::timing
// whole_pass), after the last layer of the forward pass: TriAttention, whose per_head and union
// selections combine every layer's scores (TRIATTENTION.md 6.3). The engine's KV memory asks
// due() after each decode step and, when it says so, plan() with a view of the whole cache; it
// then applies each layer's part of the plan (KvCache::compact), as it applies a per-layer
// method's Selection. Pure: reads the view, writes nothing else.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compress/triattention.h"
#include "rkv/compression.h"

namespace rkv {
class ThreadPool;
}

namespace rkv::compress {

// One sequence's cache, every layer. All (layer, KV head) hold n_all entries; cache indices
// 0..prefix-1 are the prompt (pinned).
struct SequenceView {
  int layers = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int n_all = 0;
  int prefix = 0;
  std::int64_t round_start = 0;  // tokens processed so far: the next token's position
  // [layers][kv_heads]: the float32 keys (post-RoPE, as cached) and original positions.
  std::vector<std::vector<tri::HeadKeys>> keys;
  // needs.query_stats: the model's calibration ([layers][q_heads][head_dim / 2]) and its RoPE
  // inverse frequencies [head_dim / 2] (angle = position * frequency).
  const tri::Stats* query_stats = nullptr;
  std::span<const float> rope_frequencies;
  double rope_scale = 1.0;  // the magnitude RoPE puts on cos and sin (YaRN's mscale; else 1)
};

struct SequencePlan {
  bool compressed = false;
  // [layers][kv_heads]: the cache indices each keeps, ascending.
  std::vector<std::vector<std::vector<std::int32_t>>> kept;
  tri::Decision decision;  // the scores behind it (traces)
};

// Whether a decode step that left n_all entries, prefix of them the prompt, compresses now;
// next_position is the position the next token gets.
bool whole_pass_due(const CompressionParams& params, int n_all, int prefix,
                    std::int64_t next_position);
// Plans one compression of the whole sequence. Throws rkv::Error for a view the method cannot
// read (statistics of another shape, no statistics).
SequencePlan plan_whole_pass(const SequenceView& view, const CompressionParams& params,
                             ThreadPool* pool = nullptr);

}  // namespace rkv::compress
