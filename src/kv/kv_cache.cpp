#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kv/kv_codec.h"

namespace rkv {

namespace {
std::size_t fixed_window_floats(const KvCacheShape& shape) {
  return 2 * static_cast<std::size_t>(shape.window_layers) *
         static_cast<std::size_t>(shape.kv_heads) * static_cast<std::size_t>(shape.sliding_window) *
         static_cast<std::size_t>(shape.head_dim);
}
}  // namespace

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.head_dim <= 0 || shape.capacity <= 0 ||
      shape.window < 0 || shape.q_heads <= 0 || shape.window_layers < 0 ||
      shape.sliding_window < 0 || (shape.window_layers > 0) != (shape.sliding_window > 0))
    throw Error("invalid KV cache shape");
  row_bytes_ = kv_row_bytes(shape.dtype, shape.head_dim);
  lengths_.assign(static_cast<std::size_t>(shape.layers), 0);
  ring_count_.assign(static_cast<std::size_t>(shape.layers), 0);
  ring_next_.assign(static_cast<std::size_t>(shape.layers), 0);
  if (shape.on_device && (shape.window_layers > 0 || shape.recurrent_floats > 0))
    throw Error("sliding-window and linear-attention layers run with --device cpu in this build");
  window_kv_.resize(fixed_window_floats(shape));
  window_lengths_.assign(static_cast<std::size_t>(shape.window_layers), 0);
  recurrent_.assign(shape.recurrent_floats, 0.0f);
  if (shape.on_device) {
    if (shape.window != 0)
      throw Error(
          "a KV cache on a device keeps no query window: compression methods run with --device "
          "cpu in this build");
    return;  // the backend allocates the rows in its memory (set_device_storage)
  }
  const std::size_t entries =
      static_cast<std::size_t>(shape.layers) * shape.kv_heads * shape.capacity;
  keys_.resize(entries * row_bytes_);
  values_.resize(entries * row_bytes_);
  positions_.resize(entries);
  state_.resize(entries);
  ring_.resize(static_cast<std::size_t>(shape.layers) * shape.window * shape.q_heads *
               shape.head_dim);
}

namespace {
void require_host(const KvCacheShape& shape, const char* what) {
  if (shape.on_device)
    throw Error(std::string("KV cache: ") + what +
                " needs host memory, and this cache lives on a device (its backend writes it)");
}
}  // namespace

void KvCache::note_device_append(int layer, int n) {
  int& len = lengths_[static_cast<std::size_t>(layer)];
  if (!shape_.on_device) throw Error("KV cache: note_device_append on a cache in host memory");
  if (n < 0 || len + n > shape_.capacity)
    throw Error("KV cache is full (" + std::to_string(shape_.capacity) +
                " entries per head): raise the context size");
  len += n;
}

void KvCache::append(int layer, const float* k, const float* v, std::int32_t position) {
  require_host(shape_, "append");
  int& len = lengths_[static_cast<std::size_t>(layer)];
  if (len >= shape_.capacity)
    throw Error("KV cache is full (" + std::to_string(shape_.capacity) +
                " entries per head): raise the context size or use a compression method");
  const std::size_t d = static_cast<std::size_t>(shape_.head_dim);
  for (int h = 0; h < shape_.kv_heads; ++h) {
    const std::size_t at = offset(layer, h) + static_cast<std::size_t>(len);
    kv_encode_row(shape_.dtype, k + h * d, shape_.head_dim, keys_.data() + at * row_bytes_);
    kv_encode_row(shape_.dtype, v + h * d, shape_.head_dim, values_.data() + at * row_bytes_);
    positions_[at] = position;
    state_[at] = initial_state_;
  }
  ++len;
}

void KvCache::compact(int layer, const std::vector<std::vector<std::int32_t>>& kept,
                      const std::vector<std::vector<float>>& new_state) {
  require_host(shape_, "compaction");
  if (static_cast<int>(kept.size()) != shape_.kv_heads)
    throw Error("compaction: expected one kept list per KV head");
  const int len = length(layer);
  const std::size_t n_keep = kept[0].size();
  const std::size_t rb = row_bytes_;
  for (int h = 0; h < shape_.kv_heads; ++h) {
    const auto& idx = kept[static_cast<std::size_t>(h)];
    if (idx.size() != n_keep) throw Error("compaction: every KV head must keep the same count");
    std::byte* K = keys_.data() + offset(layer, h) * rb;
    std::byte* V = values_.data() + offset(layer, h) * rb;
    std::int32_t* P = positions_.data() + offset(layer, h);
    float* S = state_.data() + offset(layer, h);
    // Ascending indices let us move entries down in place: destination i <= source idx[i].
    for (std::size_t i = 0; i < n_keep; ++i) {
      const std::int32_t src = idx[i];
      if (src < 0 || src >= len || (i > 0 && src <= idx[i - 1]))
        throw Error("compaction: kept indices must be ascending and inside the cache");
      if (static_cast<std::size_t>(src) != i) {
        std::memcpy(K + i * rb, K + static_cast<std::size_t>(src) * rb, rb);
        std::memcpy(V + i * rb, V + static_cast<std::size_t>(src) * rb, rb);
        P[i] = P[src];
        S[i] = S[src];
      }
    }
    if (!new_state.empty()) {
      const auto& st = new_state[static_cast<std::size_t>(h)];
      if (st.size() != n_keep) throw Error("compaction: new state must match the kept count");
      std::copy(st.begin(), st.end(), S);
    }
  }
  lengths_[static_cast<std::size_t>(layer)] = static_cast<int>(n_keep);
}

void KvCache::push_query(int layer, const float* q) {
  if (shape_.window == 0) return;  // (always so for a cache on a device)
  const std::size_t per = static_cast<std::size_t>(shape_.q_heads) * shape_.head_dim;
  const std::size_t l = static_cast<std::size_t>(layer);
  float* slot = ring_.data() + (l * shape_.window + ring_next_[l]) * per;
  std::memcpy(slot, q, per * sizeof(float));
  ring_next_[l] = (ring_next_[l] + 1) % shape_.window;
  ring_count_[l] = std::min(ring_count_[l] + 1, shape_.window);
}

void KvCache::window_queries(int layer, std::vector<float>& out) const {
  const std::size_t l = static_cast<std::size_t>(layer);
  const int count = ring_count_[l];
  const std::size_t d = static_cast<std::size_t>(shape_.head_dim);
  const std::size_t per = static_cast<std::size_t>(shape_.q_heads) * d;
  out.resize(static_cast<std::size_t>(count) * per);
  const int oldest = (ring_next_[l] - count + shape_.window) % std::max(1, shape_.window);
  for (int w = 0; w < count; ++w) {
    const float* slot = ring_.data() + (l * shape_.window + (oldest + w) % shape_.window) * per;
    for (int h = 0; h < shape_.q_heads; ++h)
      std::memcpy(out.data() + (static_cast<std::size_t>(h) * count + w) * d, slot + h * d,
                  d * sizeof(float));
  }
}

void KvCache::set_window_length(int i, int n) {
  if (n < 0 || n > shape_.sliding_window)
    throw Error("KV cache: a sliding-window layer holds at most " +
                std::to_string(shape_.sliding_window) + " entries, not " + std::to_string(n));
  window_lengths_[static_cast<std::size_t>(i)] = n;
}

void KvCache::clear() {
  std::fill(window_lengths_.begin(), window_lengths_.end(), 0);
  std::fill(recurrent_.begin(), recurrent_.end(), 0.0f);
  std::fill(lengths_.begin(), lengths_.end(), 0);
  std::fill(ring_count_.begin(), ring_count_.end(), 0);
  std::fill(ring_next_.begin(), ring_next_.end(), 0);
}

std::size_t KvCache::kv_bytes_for(const KvCacheShape& shape) {
  return 2 * static_cast<std::size_t>(shape.layers) * static_cast<std::size_t>(shape.kv_heads) *
         static_cast<std::size_t>(shape.capacity) * kv_row_bytes(shape.dtype, shape.head_dim);
}

KvTokenBytes KvCache::token_bytes_for(const KvCacheShape& shape) {
  const std::size_t heads =
      static_cast<std::size_t>(shape.layers) * static_cast<std::size_t>(shape.kv_heads);
  KvTokenBytes b;
  b.keys = b.values = heads * kv_row_bytes(shape.dtype, shape.head_dim);
  b.positions = heads * sizeof(std::int32_t);
  b.state = heads * sizeof(float);
  return b;
}

std::size_t KvCache::ring_bytes_for(const KvCacheShape& shape) {
  return static_cast<std::size_t>(shape.layers) * static_cast<std::size_t>(shape.window) *
         static_cast<std::size_t>(shape.q_heads) * static_cast<std::size_t>(shape.head_dim) *
         sizeof(float);
}

std::size_t KvCache::fixed_state_bytes_for(const KvCacheShape& shape) {
  return (fixed_window_floats(shape) + shape.recurrent_floats) * sizeof(float);
}

std::size_t KvCache::slot_bytes_for(const KvCacheShape& shape) {
  return static_cast<std::size_t>(shape.capacity) * token_bytes_for(shape).total() +
         ring_bytes_for(shape) + fixed_state_bytes_for(shape);
}

std::size_t KvCache::used_kv_bytes() const {
  std::size_t entries = 0;
  for (int len : lengths_) entries += static_cast<std::size_t>(len);
  return entries * 2 * static_cast<std::size_t>(shape_.kv_heads) * row_bytes_;
}

}  // namespace rkv
