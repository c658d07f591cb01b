// TriAttention (../shared/spec/TRIATTENTION.md): predicts the attention a typical future query
// pays each cached key from calibrated first moments of the pre-RoPE queries, and keeps the
// top-scoring generated entries of every KV head (the prompt pinned). Pure functions of the
// keys, their positions and the statistics: one compression decides for every layer at once
// (spec 6.3), so it runs after a whole forward pass, never layer by layer.
#pragma once

#include <cstdint>
#include <vector>

namespace rkv {
class ThreadPool;
}

namespace rkv::tri {

// The calibration statistics (spec 2.1): per layer and query head, per frequency pair f of the
// pre-RoPE query, the mean complex pair and the mean modulus. Flattened [layers][q_heads][F].
struct Stats {
  int layers = 0, q_heads = 0, freqs = 0;
  std::vector<double> mean_re, mean_im, abs_mean;
  // The (layer, query head) rows that take part in scoring, in order (spec 2.3, 5.3); empty:
  // all of them, by layer then head.
  std::vector<std::pair<int, int>> sampled;

  std::size_t at(int layer, int head, int f) const {
    return (static_cast<std::size_t>(layer) * q_heads + head) * freqs + f;
  }
};

// Statistics of pre-RoPE queries [layers][q_heads][tokens][head_dim] ("half" pairing: pair f is
// (x[f], x[f + d/2])), accumulated in double (spec 2.4).
Stats calibrate(const std::vector<float>& queries, int layers, int q_heads, int tokens,
                int head_dim);

// The model's rotary embedding as the score uses it (spec 3).
struct Rope {
  std::vector<float> omega;           // inv_freq[f], float32, F of them
  double scale = 1.0;                 // attention_scaling s (freq_scale_sq = s^2)
  std::vector<std::int64_t> offsets;  // 1, 2, 4, ... <= offset_max_length
};
std::vector<std::int64_t> geometric_offsets(std::int64_t max_length);

// The score's "half" layout over a whole head whose first rotary_dim dimensions are rotated
// (rotate-half within them; Qwen3.5's partial RoPE rotates a quarter): layout position i holds
// head dimension out[i], so that pair f is (out[f], out[f + head_dim / 2]). The rotated pairs
// (f, f + rotary_dim / 2) come first, at their frequencies; then the unrotated dimensions pair as
// (rotary_dim + g, rotary_dim + g + (head_dim - rotary_dim) / 2), at frequency 0: their part of
// q . k does not depend on the distance, which is what a zero frequency's term gives (spec 4.3's
// cosine at angle 0). With rotary_dim == head_dim it is the identity.
std::vector<int> half_layout(int head_dim, int rotary_dim);

enum class Mode { per_head, union_all, per_layer_perhead };
enum class Aggregation { mean, max };

struct Params {
  int budget = 2048;                       // entries kept per selection unit, the prompt included
  int divide_length = 128;                 // the slack/interval of the trigger (spec 6.1)
  bool slack_trigger = true;               // compress when E >= budget + divide_length
  bool count_prompt_tokens = true;         // E counts the prompt
  bool allow_prefill_compression = false;  // the prompt competes too (an ablation)
  bool normalize_scores = true;            // z-score each row over the decode entries
  Aggregation offsets_aggregation = Aggregation::mean;
  Aggregation layer_perhead_aggregation = Aggregation::max;  // per_layer_perhead's group reduce
  bool disable_mlr = false;
  bool disable_trig = false;
  Mode mode = Mode::per_head;
  // true: the score as the reference computes it (keys un-rotated in float32, float32 phases per
  // key and offset; what the golden replay prints). false: its post-RoPE form in double (spec
  // 4.3, "Equivalent post-RoPE form"): the offsets' mean rotation is one complex factor per
  // frequency, computed once, so a key costs O(head_dim) with no trigonometry. Exact in real
  // arithmetic; the two differ by the reference's phase rounding (about 1e-4 relative), which
  // every golden cut clears by a wide margin (spec 9.3). What the engine runs.
  bool reference_phases = true;
};

// One layer's keys of one KV head: n entries of head_dim floats (post-RoPE, as cached) with
// their original positions.
struct HeadKeys {
  const float* keys = nullptr;
  const std::int32_t* positions = nullptr;
  int n = 0;
};

// The pre-RoPE key of a cached one: rotated back from its position (spec 4.2 step 1), as the
// reference does in float32.
void unrotate(const float* key, std::int32_t position, const Rope& rope, int head_dim, float* out);

// The raw score of each entry for one (layer, query head): spec 4.3. `stats_row` indexes the
// row of Stats (layer * q_heads + head); `round_start` is R.
std::vector<double> raw_scores(const HeadKeys& keys, int head_dim, const Stats& stats, int layer,
                               int q_head, const Rope& rope, const Params& params,
                               std::int64_t round_start);

// Everything one compression computes, for the golden cases and the trace. Decode entries are
// the cache indices prefix..n-1 of every head.
struct Decision {
  bool compressed = false;
  int prefix = 0;  // P as selection used it
  int keep = 0;    // decode entries kept per unit
  // [rows][n_decode] with rows the sampled (layer, query head) pairs in order.
  std::vector<std::vector<double>> raw, normalized;
  // per_head: [kv_heads][n_decode]; union: [1][n_decode]; per_layer_perhead:
  // [layers * kv_heads][n_decode].
  std::vector<std::vector<double>> aggregated;
  // The cache indices each unit keeps, prompt first, then the kept decode entries in the
  // reference's order (descending score; union: ascending). Units as for `aggregated` (union:
  // one list per KV head, all the same).
  std::vector<std::vector<int>> kept;
};

// One compression of a cache whose every layer and KV head holds `n` entries, prefix of them
// the prompt (cache indices 0..prefix-1). keys[layer][kv_head]. kv heads = q_heads / group.
// With a pool, the (layer, query head) rows are scored in parallel.
Decision decide(const std::vector<std::vector<HeadKeys>>& keys, int head_dim, int q_heads,
                int prefix, const Stats& stats, const Rope& rope, const Params& params,
                std::int64_t round_start, ThreadPool* pool = nullptr);

// Whether the trigger fires after a decode step that left `cache_len` entries of which `prefix`
// are the prompt, with `absolute_position` the position the next token gets (spec 6.1).
bool should_compress(const Params& params, int cache_len, int prefix,
                     std::int64_t absolute_position);

}  // namespace rkv::tri
