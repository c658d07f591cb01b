// The KV cache of one sequence (DESIGN.md properties 1 and 2).
//
// Every (layer, KV head) owns contiguous arrays of keys, values, original positions and one
// float of per-entry policy state, all of a fixed capacity allocated up front: a compressed
// sequence needs at most budget + buffer entries, a fullkv one its whole context. All heads of a
// layer hold the same number of entries, but after a compression each head holds its own set of
// tokens. Keys are stored after RoPE, so eviction never re-rotates anything (ALGORITHMS.md 1.4).
//
// Keys and values are stored in the dtype chosen at construction (rkv/kv_dtype.h: f32, bf16,
// f16 or q8_0), one row of head_dim values per entry. The store is sealed: readers get
// read-only typed views (KvRows), which attention reads directly and compression converts to
// float32 per layer; the only writers are append(), compact() and accumulator(), the per-entry
// accumulation of H2O's attention mass.
//
// The query ring keeps, per layer, the post-RoPE queries of all query heads for the last
// `window` tokens: the observation window that compression scores with (ALGORITHMS.md 1). It is
// float32 whatever the dtype.
//
// Beside the compressible layers, a sequence of a hybrid model holds constant-size state that
// is part of its slot (and of the memory cap) but never compressed: the last `sliding_window`
// keys and values of each sliding-window layer (gpt-oss), float32, and the recurrent state of
// each linear-attention layer (Qwen3.5's Gated DeltaNet), `recurrent_floats` float32 in all.
// The `layers` above count the compressible (full-attention) layers only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/huge_pages.h"
#include "rkv/kv_dtype.h"

namespace rkv {

struct KvCacheShape {
  int layers = 0;
  int kv_heads = 0;
  int q_heads = 0;
  int head_dim = 0;
  int capacity = 0;              // entries per (layer, KV head)
  int window = 0;                // queries kept per layer in the query ring (0: none)
  KvDtype dtype = KvDtype::f32;  // element type of keys and values
  // Keys, values and positions live in a device's memory (Model::use_device), written by its
  // backend; the cache then holds only the lengths here, and no query ring (window must be 0).
  bool on_device = false;
  // Sliding-window layers: how many, and the keys each keeps (0: none).
  int window_layers = 0;
  int sliding_window = 0;
  // Recurrent state of the linear-attention layers, float32 values in all (0: none).
  std::size_t recurrent_floats = 0;
};

// Read-only rows of keys (or values) of one (layer, KV head): row j, j < n, holds head_dim
// values of `dtype` at data + j * row_bytes.
struct KvRows {
  const std::byte* data = nullptr;
  KvDtype dtype = KvDtype::f32;
  int head_dim = 0;
  std::size_t row_bytes = 0;
  int n = 0;

  const std::byte* row(int j) const { return data + static_cast<std::size_t>(j) * row_bytes; }
  // The rows as float32 when that is how they are stored, else nullptr.
  const float* f32() const {
    return dtype == KvDtype::f32 ? reinterpret_cast<const float*>(data) : nullptr;
  }
  // (kernels::kv_to_f32(rows, out) converts them to float32 on the active instruction set.)
};

// Bytes one cached token takes in a sequence's slot, summed over layers and KV heads.
struct KvTokenBytes {
  std::size_t keys = 0, values = 0;  // in the stored dtype (q8_0: scales included)
  std::size_t positions = 0;         // int32 each
  std::size_t state = 0;             // float32 per-entry policy state each
  std::size_t total() const { return keys + values + positions + state; }
};

class KvCache {
 public:
  // Throws rkv::Error for an invalid shape, or a dtype that cannot hold its head size.
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  KvDtype dtype() const { return shape_.dtype; }
  int length(int layer) const { return lengths_[static_cast<std::size_t>(layer)]; }
  int capacity() const { return shape_.capacity; }

  // The length(layer) rows of keys / values of one (layer, KV head).
  KvRows keys(int layer, int head) const { return rows(keys_, layer, head); }
  KvRows values(int layer, int head) const { return rows(values_, layer, head); }
  // [length] original positions and per-entry policy state of one (layer, KV head).
  const std::int32_t* positions(int layer, int head) const {
    return positions_.empty() ? nullptr : positions_.data() + offset(layer, head);
  }
  const float* state(int layer, int head) const {
    return state_.empty() ? nullptr : state_.data() + offset(layer, head);
  }
  // The same state, writable: for the per-step accumulation (H2O) only.
  float* accumulator(int layer, int head) {
    return state_.empty() ? nullptr : state_.data() + offset(layer, head);
  }

  // Appends one token to every KV head of `layer`: k and v are [kv_heads][head_dim] float32,
  // stored in the cache's dtype. Its policy state starts at initial_state(). Throws rkv::Error
  // when the layer is full.
  void append(int layer, const float* k, const float* v, std::int32_t position);

  // The policy state of a new entry (0 for accumulators, kNoState for G-KV's "no score yet").
  float initial_state() const { return initial_state_; }
  void set_initial_state(float value) { initial_state_ = value; }

  // The single place that moves cache memory after a compression (plan, then apply): keeps, for
  // every KV head of `layer`, the entries kept[h] (ascending indices, the same count for every
  // head) and, when new_state is not empty, sets their state to new_state[h]. Rows move as
  // stored (no conversion).
  void compact(int layer, const std::vector<std::vector<std::int32_t>>& kept,
               const std::vector<std::vector<float>>& new_state);

  // Query ring. push_query stores q ([q_heads][head_dim]) as the newest window query of `layer`.
  void push_query(int layer, const float* q);
  int window_size(int layer) const { return ring_count_[static_cast<std::size_t>(layer)]; }
  // Copies the window queries of `layer`, oldest first, as [q_heads][window_size][head_dim].
  void window_queries(int layer, std::vector<float>& out) const;

  // ---- constant-size state (hybrid models) ----
  // Sliding-window layer i's keys and values ([kv_heads][sliding_window][head_dim] float32 each),
  // its newest window_length(i) entries (oldest first, at the start of each head's rows).
  float* window_keys(int i) { return window_kv_.data() + window_offset(i, 0); }
  float* window_values(int i) { return window_kv_.data() + window_offset(i, 1); }
  int window_length(int i) const { return window_lengths_[static_cast<std::size_t>(i)]; }
  void set_window_length(int i, int n);
  // The recurrent state, recurrent_floats values (zero in a new or cleared cache).
  float* recurrent() { return recurrent_.data(); }

  // Empties the cache: no entries, no queries, window rings empty, recurrent state zero.
  void clear();

  // ---- a cache on a device (shape().on_device) ----
  // Its rows live in memory its backend allocates on first use and attaches here, freed with the
  // cache. keys(), values(), positions() and state() have no host data (nullptr), and append,
  // compact and push_query throw: the backend writes the rows and then records them.
  void* device_storage() const { return device_.get(); }
  void set_device_storage(void* storage, void (*release)(void*)) {
    device_ = DeviceStorage(storage, release);
  }
  // Records n entries its backend wrote after the length(layer) ones of `layer`. Throws
  // rkv::Error when they do not fit.
  void note_device_append(int layer, int n);

  // Bytes of the key/value arrays at full capacity (what the sequence holds).
  std::size_t allocated_kv_bytes() const { return kv_bytes_for(shape_); }
  // The same for any shape, without allocating: 2 * layers * kv_heads * capacity * row bytes,
  // where a row of head_dim values takes 4 * head_dim bytes in f32, 2 * head_dim in bf16 and
  // f16, and 34 * head_dim / 32 in q8_0. Throws rkv::Error where the dtype cannot hold the
  // head size.
  static std::size_t kv_bytes_for(const KvCacheShape& shape);
  // Bytes of one cached token in a slot: keys, values, positions and policy state.
  static KvTokenBytes token_bytes_for(const KvCacheShape& shape);
  // Bytes of the query ring (float32 queries of every query head, `window` per layer).
  static std::size_t ring_bytes_for(const KvCacheShape& shape);
  // Bytes of the constant-size state: the sliding-window rings and the recurrent state.
  static std::size_t fixed_state_bytes_for(const KvCacheShape& shape);
  // Everything a KvCache of this shape allocates: capacity * token_bytes_for(shape).total()
  // plus ring_bytes_for(shape) plus fixed_state_bytes_for(shape). What admission (--kv-memory)
  // reserves per sequence.
  static std::size_t slot_bytes_for(const KvCacheShape& shape);
  // Bytes of keys and values actually in use now, summed over layers.
  std::size_t used_kv_bytes() const;

 private:
  // The rows: long arrays that every decode step streams, on huge pages where offered.
  using RowStore = std::vector<std::byte, HugePageAllocator<std::byte>>;
  std::size_t offset(int layer, int head) const {
    return (static_cast<std::size_t>(layer) * shape_.kv_heads + head) * shape_.capacity;
  }
  KvRows rows(const RowStore& store, int layer, int head) const {
    if (store.empty()) return {nullptr, shape_.dtype, shape_.head_dim, row_bytes_, length(layer)};
    return {store.data() + offset(layer, head) * row_bytes_, shape_.dtype, shape_.head_dim,
            row_bytes_, length(layer)};
  }

  std::size_t window_offset(int i, int which) const {
    return ((static_cast<std::size_t>(i) * 2 + static_cast<std::size_t>(which)) *
            static_cast<std::size_t>(shape_.kv_heads) * shape_.sliding_window) *
           shape_.head_dim;
  }

  KvCacheShape shape_;
  std::size_t row_bytes_ = 0;            // bytes of one key (or value) row
  RowStore keys_;                        // [layers][kv_heads][capacity] rows
  RowStore values_;                      // [layers][kv_heads][capacity] rows
  std::vector<std::int32_t> positions_;  // [layers][kv_heads][capacity]
  std::vector<float> state_;             // [layers][kv_heads][capacity]
  std::vector<int> lengths_;             // [layers]
  std::vector<float> ring_;              // [layers][window][q_heads][head_dim]
  std::vector<int> ring_count_;          // [layers] queries held (<= window)
  std::vector<int> ring_next_;           // [layers] slot the next query goes to
  std::vector<float> window_kv_;         // [window_layers][2][kv_heads][sliding_window][head_dim]
  std::vector<int> window_lengths_;      // [window_layers]
  std::vector<float> recurrent_;         // [recurrent_floats]
  float initial_state_ = 0.0f;
  using DeviceStorage = std::unique_ptr<void, void (*)(void*)>;
  DeviceStorage device_{nullptr, nullptr};
};

}  // namespace rkv
