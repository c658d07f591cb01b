// The KV cache of one sequence (DESIGN.md properties 1 and 2).
//
// Every (layer, KV head) owns contiguous arrays of keys, values, original positions and one
// float of per-entry policy state, all of a fixed capacity allocated up front: a compressed
// sequence needs at most budget + buffer entries, a fullkv one its whole context. All heads of a
// layer hold the same number of entries, but after a compression each head holds its own set of
// tokens. Keys are stored after RoPE, so eviction never re-rotates anything (ALGORITHMS.md 1.4).
//
// The query ring keeps, per layer, the post-RoPE queries of all query heads for the last
// `window` tokens: the observation window that compression scores with (ALGORITHMS.md 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rkv {

struct KvCacheShape {
  int layers = 0;
  int kv_heads = 0;
  int q_heads = 0;
  int head_dim = 0;
  int capacity = 0;  // entries per (layer, KV head)
  int window = 0;    // queries kept per layer in the query ring (0: none)
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  int length(int layer) const { return lengths_[static_cast<std::size_t>(layer)]; }
  int capacity() const { return shape_.capacity; }

  // [length][head_dim] arrays of one (layer, KV head).
  float* keys(int layer, int head) { return keys_.data() + offset(layer, head) * stride(); }
  const float* keys(int layer, int head) const {
    return keys_.data() + offset(layer, head) * stride();
  }
  float* values(int layer, int head) { return values_.data() + offset(layer, head) * stride(); }
  const float* values(int layer, int head) const {
    return values_.data() + offset(layer, head) * stride();
  }
  // [length] original positions and per-entry policy state of one (layer, KV head).
  std::int32_t* positions(int layer, int head) { return positions_.data() + offset(layer, head); }
  const std::int32_t* positions(int layer, int head) const {
    return positions_.data() + offset(layer, head);
  }
  float* state(int layer, int head) { return state_.data() + offset(layer, head); }
  const float* state(int layer, int head) const { return state_.data() + offset(layer, head); }

  // Appends one token to every KV head of `layer`: k and v are [kv_heads][head_dim]. Its policy
  // state starts at initial_state(). Throws rkv::Error when the layer is full.
  void append(int layer, const float* k, const float* v, std::int32_t position);

  // The policy state of a new entry (0 for accumulators, kNoState for G-KV's "no score yet").
  float initial_state() const { return initial_state_; }
  void set_initial_state(float value) { initial_state_ = value; }

  // The single place that moves cache memory after a compression (plan, then apply): keeps, for
  // every KV head of `layer`, the entries kept[h] (ascending indices, the same count for every
  // head) and, when new_state is not empty, sets their state to new_state[h].
  void compact(int layer, const std::vector<std::vector<std::int32_t>>& kept,
               const std::vector<std::vector<float>>& new_state);

  // Query ring. push_query stores q ([q_heads][head_dim]) as the newest window query of `layer`.
  void push_query(int layer, const float* q);
  int window_size(int layer) const { return ring_count_[static_cast<std::size_t>(layer)]; }
  // Copies the window queries of `layer`, oldest first, as [q_heads][window_size][head_dim].
  void window_queries(int layer, std::vector<float>& out) const;

  void clear();
  // Bytes of the key/value arrays at full capacity (what the sequence holds).
  std::size_t allocated_kv_bytes() const { return kv_bytes_for(shape_); }
  // The same for any shape, without allocating: 2 * layers * kv_heads * capacity * head_dim * 4.
  static std::size_t kv_bytes_for(const KvCacheShape& shape);
  // Bytes of keys and values actually in use now, summed over layers.
  std::size_t used_kv_bytes() const;

 private:
  std::size_t stride() const { return static_cast<std::size_t>(shape_.head_dim); }
  std::size_t offset(int layer, int head) const {
    return (static_cast<std::size_t>(layer) * shape_.kv_heads + head) * shape_.capacity;
  }

  KvCacheShape shape_;
  std::vector<float> keys_;              // [layers][kv_heads][capacity][head_dim]
  std::vector<float> values_;            // [layers][kv_heads][capacity][head_dim]
  std::vector<std::int32_t> positions_;  // [layers][kv_heads][capacity]
  std::vector<float> state_;             // [layers][kv_heads][capacity]
  std::vector<int> lengths_;             // [layers]
  std::vector<float> ring_;              // [layers][window][q_heads][head_dim]
  std::vector<int> ring_count_;          // [layers] queries held (<= window)
  std::vector<int> ring_next_;           // [layers] slot the next query goes to
  float initial_state_ = 0.0f;
};

}  // namespace rkv
