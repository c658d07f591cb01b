// The forward pass's steps on a CUDA device (ForwardOps): weights copied to device memory in their
// stored dtype, activations and KV caches there too, one stream; matrix products by DeviceMatmul
// (matmul.cuh). The only host round trip of a pass is the logits' copy back. Everything a pass
// needs is allocated in begin(), before any cache is written, and the caches' new lengths are
// recorded in end(), so a pass that fails leaves every cache as it was.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/cuda_api.h"
#include "cuda/cuda_util.cuh"
#include "cuda/kernels.cuh"
#include "cuda/matmul.cuh"
#include "model/model.h"

namespace rkv::cuda {

namespace {

// Bytes of KV caches held on the device, for the memory report.
std::atomic<std::size_t> g_kv_bytes{0};

// A cache's rows on the device ([layers][kv_heads][capacity] entries), owned by its KvCache.
struct KvStorage {
  void* keys = nullptr;
  void* values = nullptr;
  std::int32_t* positions = nullptr;
  std::size_t bytes = 0;
};

void release_kv(void* p) {
  auto* s = static_cast<KvStorage*>(p);
  cudaFree(s->keys);
  cudaFree(s->values);
  cudaFree(s->positions);
  g_kv_bytes -= s->bytes;
  delete s;
}

// Allocates the rows of a cache on the device and attaches them to it.
void attach_storage(KvCache& cache) {
  const KvCacheShape& shape = cache.shape();
  if (shape.dtype == KvDtype::q8_0)
    throw Error(
        "a q8_0 KV cache has no CUDA kernels: use --kv-dtype bf16, f16 or f32 on --device "
        "cuda, or run with --device cpu");
  const std::size_t entries = static_cast<std::size_t>(shape.layers) * shape.kv_heads *
                              static_cast<std::size_t>(shape.capacity);
  const std::size_t half = KvCache::kv_bytes_for(shape) / 2;
  auto* s = new KvStorage;
  s->bytes = 2 * half + entries * sizeof(std::int32_t);
  const cudaError_t a = cudaMalloc(&s->keys, half);
  const cudaError_t b = a == cudaSuccess ? cudaMalloc(&s->values, half) : a;
  const cudaError_t c = b == cudaSuccess ? cudaMalloc(reinterpret_cast<void**>(&s->positions),
                                                      entries * sizeof(std::int32_t))
                                         : b;
  if (c != cudaSuccess) {
    cudaFree(s->keys);
    cudaFree(s->values);
    delete s;
    check(c, ("allocating a KV cache of " + std::to_string(2 * half >> 20) + " MiB").c_str());
  }
  g_kv_bytes += s->bytes;
  cache.set_device_storage(s, release_kv);
}

struct DeviceLayer {
  std::array<DeviceWeight, 7> proj;  // by Proj
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

std::size_t align_up(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}

class CudaOps final : public ForwardOps {
 public:
  explicit CudaOps(const Model& model) : m_(model), c_(model.config()) {
    if (c_.head_dim > 256 || c_.head_dim % 8 != 0)
      throw Error("the CUDA backend supports head sizes that are multiples of 8 up to 256, not " +
                  std::to_string(c_.head_dim) + ": run with --device cpu");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    try {
      matmul_ = std::make_unique<DeviceMatmul>(stream_);
      upload_weights();
    } catch (...) {
      matmul_.reset();
      cudaStreamDestroy(stream_);
      throw;
    }
  }
  ~CudaOps() override {
    cudaStreamSynchronize(stream_);
    matmul_.reset();
    cudaStreamDestroy(stream_);
  }
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  void begin(std::span<const ForwardRow> rows) override;
  void rms_norm(Norm norm, int layer, Act in, Act out) override {
    const float* w = norm == Norm::Final   ? final_norm_
                     : norm == Norm::Input ? layers_[static_cast<std::size_t>(layer)].input_norm
                                           : layers_[static_cast<std::size_t>(layer)].post_norm;
    if (pending_add_ && pending_add_->first == in) {
      // The residual add before this norm, in its launch (add() left it pending).
      const Act residual = pending_add_->second;
      pending_add_.reset();
      cuda::add_rms_norm(buf(in), buf(residual), w, buf(out), T_, c_.hidden_size, c_.rms_norm_eps,
                         stream_);
      return;
    }
    flush_add();
    cuda::rms_norm(buf(in), w, buf(out), T_, c_.hidden_size, c_.rms_norm_eps, stream_);
  }
  void project(int layer, Act in, std::span<const Product> products) override {
    flush_add();
    // Products of one precision (q, k and v; gate and up) go to the device as one launch.
    const auto l = static_cast<std::size_t>(layer);
    std::array<MatmulTarget, kGemvMaxTargets> targets;
    std::size_t count = 0;
    kernels::MatmulPrecision precision{};
    auto flush = [&] {
      matmul_->run_many(buf(in), T_, std::span<const MatmulTarget>(targets.data(), count),
                        precision);
      count = 0;
    };
    for (const Product& p : products) {
      const kernels::MatmulPrecision pp = projection(m_.layer(layer), p.proj).precision;
      if (count > 0 && (pp != precision || count == targets.size())) flush();
      precision = pp;
      targets[count++] = {layers_[l].proj[static_cast<std::size_t>(p.proj)], buf(p.out)};
    }
    flush();
  }
  void prepare_qkv(int layer) override {
    flush_add();
    const DeviceLayer& w = layers_[static_cast<std::size_t>(layer)];
    QkvParams p;
    p.q = buf(Act::Q);
    p.k = buf(Act::K);
    p.v = buf(Act::V);
    p.q_bias = w.q_bias;
    p.k_bias = w.k_bias;
    p.v_bias = w.v_bias;
    p.q_norm = c_.qk_norm ? w.q_norm : nullptr;
    p.k_norm = c_.qk_norm ? w.k_norm : nullptr;
    p.eps = c_.rms_norm_eps;
    p.cos = cos_.as<float>();
    p.sin = sin_.as<float>();
    p.T = T_;
    p.q_heads = c_.num_heads;
    p.kv_heads = c_.num_kv_heads;
    p.head_dim = c_.head_dim;
    cuda::prepare_qkv(p, stream_);
  }
  void append_kv(int layer, std::span<const ForwardRow> rows) override {
    flush_add();
    cuda::kv_append(buf(Act::K), buf(Act::V), d_rows_,
                    d_index_ + static_cast<std::size_t>(layer) * T_, T_, c_.num_kv_heads,
                    c_.head_dim, layer, kv_dtype_, stream_);
  }
  void attention(int layer, std::span<const ForwardRow> rows, AttentionProbs* probs) override {
    flush_add();
    if (probs != nullptr)
      throw Error(
          "the CUDA backend does not hand back attention probabilities (h2o): run with --device "
          "cpu");
    const float scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    cuda::attention(buf(Act::Q), buf(Act::Attn), d_rows_,
                    d_index_ + static_cast<std::size_t>(layer) * T_, T_, c_.num_heads,
                    c_.num_kv_heads, c_.head_dim, layer, kv_dtype_, scale, max_keys_,
                    attention_ws_.as<float>(), stream_);
  }
  // dst += src, left pending: a norm of dst next takes it into its own launch; any other step
  // launches it first (flush_add).
  void add(Act dst, Act src) override {
    flush_add();
    pending_add_ = std::make_pair(dst, src);
  }
  void silu_mul() override {
    flush_add();
    cuda::silu_mul(buf(Act::Gate), buf(Act::Up),
                   static_cast<std::size_t>(T_) * c_.intermediate_size, stream_);
  }
  bool on_host() const override { return false; }
  float* host(Act) override { return nullptr; }
  void logits(std::span<const ForwardRow> rows, Act in, float* out) override;
  // The pass is through: the caches' lengths take its rows, in every layer.
  void end(std::span<const ForwardRow>) override {
    flush_add();
    for (const auto& [cache, count] : sequences_)
      for (int l = 0; l < c_.num_layers; ++l) cache->note_device_append(l, count);
  }

  std::string memory_report() const {
    std::size_t workspace = matmul_->workspace_bytes();
    for (const DeviceBuffer* b :
         {&act_[0], &act_[1], &act_[2], &act_[3], &act_[4], &act_[5], &act_[6], &act_[7], &cos_,
          &sin_, &logits_hidden_, &logits_, &meta_, &attention_ws_})
      workspace += b->bytes();
    const Memory mem = memory();
    char line[256];
    const double GiB = 1 << 30;
    std::snprintf(line, sizeof(line),
                  "weights %.2f GiB, workspace %.2f GiB, KV caches %.2f GiB; device %.1f GiB, "
                  "%.1f GiB free",
                  static_cast<double>(weight_bytes_) / GiB, static_cast<double>(workspace) / GiB,
                  static_cast<double>(g_kv_bytes.load()) / GiB,
                  static_cast<double>(mem.total) / GiB, static_cast<double>(mem.free) / GiB);
    return line;
  }

 private:
  float* buf(Act a) const { return act_[static_cast<std::size_t>(a)].as<float>(); }
  void flush_add() {
    if (!pending_add_) return;
    const auto [dst, src] = *pending_add_;
    pending_add_.reset();
    cuda::add(buf(dst), buf(src), static_cast<std::size_t>(T_) * c_.hidden_size, stream_);
  }

  const void* upload(const void* host, std::size_t bytes, const std::string& what) {
    auto it = uploaded_.find(host);
    if (it != uploaded_.end()) return it->second;  // tied embeddings: one copy
    DeviceBuffer b(bytes, what.c_str());
    check(cudaMemcpy(b.get(), host, bytes, cudaMemcpyHostToDevice), what.c_str());
    const void* p = b.get();
    weight_bytes_ += bytes;
    weights_.push_back(std::move(b));
    uploaded_[host] = p;
    return p;
  }
  DeviceWeight upload_matrix(const kernels::WeightView& w, const std::string& name) {
    if (dtype_is_quantized(w.dtype))
      throw Error(name + ": " + std::string(dtype_name(w.dtype)) +
                  " weights have no CUDA kernels in this build: run with --device cpu");
    const std::size_t bytes = w.rows * w.cols * dtype_size(w.dtype);
    return {upload(w.data, bytes, "copying " + name + " to the device"), w.dtype,
            static_cast<int>(w.rows), static_cast<int>(w.cols)};
  }
  const float* upload_vector(const std::vector<float>& v, const std::string& name) {
    if (v.empty()) return nullptr;
    return static_cast<const float*>(
        upload(v.data(), v.size() * sizeof(float), "copying " + name + " to the device"));
  }
  void upload_weights() {
    embed_ = upload_matrix(m_.embed_tokens(), "the token embeddings");
    lm_head_ = upload_matrix(m_.lm_head(), "lm_head");
    final_norm_ = upload_vector(m_.final_norm(), "the final norm");
    inv_freq_ = upload_vector(m_.rope_frequencies(), "the RoPE frequencies");
    layers_.resize(static_cast<std::size_t>(c_.num_layers));
    const Proj all[] = {Proj::Q, Proj::K, Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down};
    for (int l = 0; l < c_.num_layers; ++l) {
      const LayerWeights& w = m_.layer(l);
      DeviceLayer& d = layers_[static_cast<std::size_t>(l)];
      const std::string name = "layer " + std::to_string(l);
      for (Proj p : all)
        d.proj[static_cast<std::size_t>(p)] = upload_matrix(projection(w, p), name + " weights");
      d.q_bias = upload_vector(w.q_bias, name + " q bias");
      d.k_bias = upload_vector(w.k_bias, name + " k bias");
      d.v_bias = upload_vector(w.v_bias, name + " v bias");
      d.input_norm = upload_vector(w.input_norm, name + " input norm");
      d.post_norm = upload_vector(w.post_norm, name + " post-attention norm");
      d.q_norm = upload_vector(w.q_norm, name + " q norm");
      d.k_norm = upload_vector(w.k_norm, name + " k norm");
    }
  }

  const Model& m_;
  const ModelConfig& c_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceMatmul> matmul_;

  std::vector<DeviceBuffer> weights_;
  std::unordered_map<const void*, const void*> uploaded_;
  std::size_t weight_bytes_ = 0;
  DeviceWeight embed_, lm_head_;
  const float* final_norm_ = nullptr;
  const float* inv_freq_ = nullptr;
  std::vector<DeviceLayer> layers_;

  // The pass's activations (by Act), RoPE tables and the products' scratch.
  std::array<DeviceBuffer, std::size(kActs)> act_;  // one per Act (QGate stays empty here)
  DeviceBuffer cos_, sin_, logits_hidden_, logits_;
  DeviceBuffer attention_ws_;  // attention's partial results over chunks of keys
  int max_keys_ = 0;           // the most cache entries a row of the pass attends over
  // The pass's row data, copied in one transfer: tokens, positions, cache rows, entry indices
  // ([layers][T]) and the rows that want logits.
  DeviceBuffer meta_;
  std::vector<std::byte> staging_;
  int T_ = 0;
  int n_logits_ = 0;
  KvDtype kv_dtype_ = KvDtype::f32;
  const int* d_tokens_ = nullptr;
  const int* d_positions_ = nullptr;
  const DeviceCacheRow* d_rows_ = nullptr;
  const int* d_index_ = nullptr;
  const int* d_logit_rows_ = nullptr;
  std::vector<std::pair<KvCache*, int>> sequences_;  // each cache of the pass, its row count
  std::optional<std::pair<Act, Act>> pending_add_;   // add(dst, src) not launched yet
};

void CudaOps::begin(std::span<const ForwardRow> rows) {
  pending_add_.reset();  // a pass that threw part-way left it; nothing reads it now
  // The previous pass may still be running on the stream: let it finish before buffers move.
  check(cudaStreamSynchronize(stream_), "the previous forward pass");
  if (m_.attention_precision() != kernels::AttentionPrecision::Exact)
    throw Error("--attention-precision llamacpp runs on --device cpu only");
  T_ = static_cast<int>(rows.size());
  const std::size_t T = rows.size();
  const std::size_t L = static_cast<std::size_t>(c_.num_layers);

  // The caches: all on the device, one dtype, rows allocated on first use.
  sequences_.clear();
  std::vector<int> rank(T);
  for (std::size_t r = 0; r < T; ++r) {
    KvCache* cache = rows[r].cache;
    if (r == 0 || rows[r - 1].cache != cache) {
      if (!cache->shape().on_device)
        throw Error(
            "forward on the GPU: a KV cache in host memory (make caches with "
            "Model::cache_shape after Model::use_device)");
      if (r == 0) kv_dtype_ = cache->dtype();
      if (cache->dtype() != kv_dtype_)
        throw Error("forward on the GPU: every KV cache of a pass must have the same dtype");
      if (cache->device_storage() == nullptr) attach_storage(*cache);
      sequences_.push_back({cache, 0});
      rank[r] = 0;
    } else {
      rank[r] = rank[r - 1] + 1;
    }
    ++sequences_.back().second;
  }

  // The row data, packed into one staging buffer and copied in one transfer.
  n_logits_ = 0;
  for (const ForwardRow& row : rows) n_logits_ += row.want_logits ? 1 : 0;
  const std::size_t off_tokens = 0;
  const std::size_t off_positions = align_up(off_tokens + T * sizeof(int), 256);
  const std::size_t off_rows = align_up(off_positions + T * sizeof(int), 256);
  const std::size_t off_index = align_up(off_rows + T * sizeof(DeviceCacheRow), 256);
  const std::size_t off_logits = align_up(off_index + L * T * sizeof(int), 256);
  const std::size_t total = align_up(off_logits + T * sizeof(int), 256);
  staging_.assign(total, std::byte{0});
  auto* tokens = reinterpret_cast<int*>(staging_.data() + off_tokens);
  auto* positions = reinterpret_cast<int*>(staging_.data() + off_positions);
  auto* cache_rows = reinterpret_cast<DeviceCacheRow*>(staging_.data() + off_rows);
  auto* index = reinterpret_cast<int*>(staging_.data() + off_index);
  auto* logit_rows = reinterpret_cast<int*>(staging_.data() + off_logits);
  int li = 0;
  max_keys_ = 0;
  for (std::size_t r = 0; r < T; ++r) {
    const ForwardRow& row = rows[r];
    tokens[r] = row.token;
    positions[r] = row.position;
    const auto* s = static_cast<const KvStorage*>(row.cache->device_storage());
    cache_rows[r] = {static_cast<std::byte*>(s->keys), static_cast<std::byte*>(s->values),
                     s->positions, row.cache->capacity(), row.position};
    for (std::size_t l = 0; l < L; ++l) {
      index[l * T + r] = row.cache->length(static_cast<int>(l)) + rank[r];
      max_keys_ = std::max(max_keys_, index[l * T + r] + 1);
    }
    if (row.want_logits) logit_rows[li++] = static_cast<int>(r);
  }
  meta_.grow(total, "the forward pass's row data");
  check(cudaMemcpyAsync(meta_.get(), staging_.data(), total, cudaMemcpyHostToDevice, stream_),
        "copying the row data");
  const auto* base = meta_.as<std::byte>();
  d_tokens_ = reinterpret_cast<const int*>(base + off_tokens);
  d_positions_ = reinterpret_cast<const int*>(base + off_positions);
  d_rows_ = reinterpret_cast<const DeviceCacheRow*>(base + off_rows);
  d_index_ = reinterpret_cast<const int*>(base + off_index);
  d_logit_rows_ = reinterpret_cast<const int*>(base + off_logits);

  const std::size_t H = static_cast<std::size_t>(c_.hidden_size);
  const std::size_t QD = static_cast<std::size_t>(c_.num_heads) * c_.head_dim;
  const std::size_t I = static_cast<std::size_t>(c_.intermediate_size);
  for (Act a : kActs)
    act_[static_cast<std::size_t>(a)].grow(T * act_width(c_, a) * sizeof(float),
                                           "the forward pass's activations");
  const int half = c_.head_dim / 2;
  cos_.grow(T * static_cast<std::size_t>(half) * sizeof(float), "the RoPE tables");
  sin_.grow(T * static_cast<std::size_t>(half) * sizeof(float), "the RoPE tables");
  const auto n = static_cast<std::size_t>(n_logits_);
  matmul_->reserve(T_, static_cast<int>(std::max({H, QD, I})),
                   std::max(T * std::max({H, QD, I}), n * static_cast<std::size_t>(c_.vocab_size)));
  logits_hidden_.grow(n * H * sizeof(float), "the logits' hidden states");
  attention_ws_.grow(attention_workspace_bytes(T_, c_.num_heads, c_.head_dim, max_keys_),
                     "attention's partial results");
  logits_.grow(n * static_cast<std::size_t>(c_.vocab_size) * sizeof(float), "the logits");

  embed(embed_.data, embed_.dtype, d_tokens_, T_, c_.hidden_size, buf(Act::X), stream_);
  rope_tables(d_positions_, inv_freq_, T_, half, cos_.as<float>(), sin_.as<float>(), stream_);
}

void CudaOps::logits(std::span<const ForwardRow> rows, Act in, float* out) {
  flush_add();
  const std::size_t V = static_cast<std::size_t>(c_.vocab_size);
  const auto n = static_cast<std::size_t>(n_logits_);
  gather_rows(buf(in), d_logit_rows_, n_logits_, c_.hidden_size, logits_hidden_.as<float>(),
              stream_);
  matmul_->run(logits_hidden_.as<float>(), n_logits_, lm_head_, m_.lm_head().precision,
               logits_.as<float>());
  check(cudaMemcpyAsync(out, logits_.get(), n * V * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "copying the logits back");
  check(cudaStreamSynchronize(stream_), "the forward pass");
}

}  // namespace

std::unique_ptr<ForwardOps> make_forward(const Model& model) {
  return std::make_unique<CudaOps>(model);
}

std::string memory_report(const ForwardOps& ops) {
  return dynamic_cast<const CudaOps&>(ops).memory_report();
}

}  // namespace rkv::cuda
