#include "engine/query_stats.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "core/error.h"
#include "model/safetensors.h"

namespace rkv {

namespace {

constexpr const char* kFormat = "rkv-query-stats";
constexpr const char* kVersion = "1";
constexpr const char* kTensors[3] = {"q_mean_real", "q_mean_imag", "q_abs_mean"};

// The name a model goes by in messages and in the file: its directory's (or GGUF file's) name.
std::string model_name(const Model& model) {
  std::string name = model.dir().filename().string();
  if (name.empty()) name = model.dir().parent_path().filename().string();
  return name;
}

std::int64_t parse_meta_int(const std::map<std::string, std::string>& meta, const std::string& key,
                            const std::string& source) {
  auto it = meta.find(key);
  if (it == meta.end())
    throw Error(source + ": query statistics metadata has no '" + key +
                "' (recompute the file with rkv calibrate)");
  std::int64_t v = 0;
  const std::string& t = it->second;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size())
    throw Error(source + ": query statistics metadata '" + key + "' is not an integer: '" + t +
                "'");
  return v;
}

// TriAttention's statistics pair each head's dimensions in tri::half_layout: the rotated pairs,
// then (partial RoPE, Qwen3.5) the unrotated dimensions as pairs of frequency 0. A rotation with
// a magnitude (YaRN) over part of the head would put that magnitude on the unrotated pairs too:
// no model does that, and it is refused, naming why.
void require_scorable_rotary(const ModelConfig& c, float rope_magnitude) {
  if (c.rotary_dim() % 2 != 0 || c.rotary_dim() > c.head_dim)
    throw Error("TriAttention's query statistics need an even number of rotary dimensions; this " +
                c.arch_label() + " model rotates " + std::to_string(c.rotary_dim()) + " of " +
                std::to_string(c.head_dim));
  if (c.rotary_dim() != c.head_dim && rope_magnitude != 1.0f)
    throw Error("TriAttention's query statistics cannot score a head that rotates " +
                std::to_string(c.rotary_dim()) + " of " + std::to_string(c.head_dim) +
                " dimensions with a RoPE magnitude (YaRN); use another method for this model");
}

std::string meta_or(const std::map<std::string, std::string>& meta, const std::string& key) {
  auto it = meta.find(key);
  return it == meta.end() ? std::string() : it->second;
}

// Sums of the un-rotated queries of every (layer, query head, frequency pair) over the
// sequences run through the model so far (spec 2.1), in double.
class QueryMoments {
 public:
  QueryMoments(const Model& model, ThreadPool& pool) : model_(model), pool_(pool) {
    const ModelConfig& c = model.config();
    // The queries are read from the cache's query ring, which only a host cache has.
    if (model.device() != Device::Cpu)
      throw Error(
          "query statistics are computed on the CPU only: load the model with --device cpu");
    if (c.head_dim % 2 != 0)
      throw Error("query statistics need an even head size (this model's is " +
                  std::to_string(c.head_dim) + ")");
    require_scorable_rotary(c, model.rope_magnitude());
    layout_ = tri::half_layout(c.head_dim, c.rotary_dim());
    const std::size_t cells =
        static_cast<std::size_t>(c.kv_layers()) * c.num_heads * c.head_dim / 2;
    re_.assign(cells, 0.0);
    im_.assign(cells, 0.0);
    abs_.assign(cells, 0.0);
  }

  // Runs one sequence (positions 0..n-1) through the model `chunk` tokens per pass and adds its
  // queries; after each pass, step(tokens of this sequence done).
  void add(std::span<const int> tokens, int chunk, const std::function<void(std::int64_t)>& step) {
    const ModelConfig& c = model_.config();
    if (tokens.empty()) return;
    if (c.max_position_embeddings > 0 &&
        tokens.size() > static_cast<std::size_t>(c.max_position_embeddings))
      throw Error("a calibration sequence has " + std::to_string(tokens.size()) +
                  " tokens, more than the model's context of " +
                  std::to_string(c.max_position_embeddings) + " (truncate it)");
    const int n = static_cast<int>(tokens.size());
    chunk = std::min(chunk, n);
    // The statistics are kept per cache layer (the full-attention layers, ModelConfig::kv_layer).
    const int L = c.kv_layers(), Hq = c.num_heads, D = c.head_dim, F = D / 2;
    // The whole sequence stays in the cache (later chunks attend to it); the ring holds one
    // chunk's queries, read after each pass. f32 keeps the keys as the forward pass made them.
    KvCache cache(model_.cache_shape(n, chunk, KvDtype::f32));
    for (int begin = 0; begin < n; begin += chunk) {
      const int m = std::min(chunk, n - begin);
      rows_.clear();
      for (int i = 0; i < m; ++i) rows_.push_back({&cache, tokens[begin + i], begin + i, false});
      model_.forward(rows_, scratch_, pool_, nullptr);

      // The rotation the CPU pass applied to each row (Model::rope_rotation). Inverting with
      // those same values (divided by cos^2 + sin^2, which float rounding leaves a few 1e-8 off
      // 1) gives back the pre-RoPE query to float32 rounding.
      cos_.resize(static_cast<std::size_t>(m) * F);
      sin_.resize(static_cast<std::size_t>(m) * F);
      norm_.resize(static_cast<std::size_t>(m) * F);
      const int Fr = c.rotary_dim() / 2;
      for (int i = 0; i < m; ++i) {
        const std::size_t k0 = static_cast<std::size_t>(i) * F;
        model_.rope_rotation(begin + i, cos_.data() + k0, sin_.data() + k0);
        for (int f = Fr; f < F; ++f) {  // partial RoPE: the unrotated pairs turn by angle 0
          cos_[k0 + f] = 1.0f;
          sin_[k0 + f] = 0.0f;
        }
        for (int f = 0; f < F; ++f)
          norm_[k0 + f] = static_cast<double>(cos_[k0 + f]) * cos_[k0 + f] +
                          static_cast<double>(sin_[k0 + f]) * sin_[k0 + f];
      }

      for (int l = 0; l < L; ++l) {
        cache.window_queries(l, ring_);  // [Hq][count][D], oldest first
        const int count = cache.window_size(l);
        // A last, shorter chunk leaves older queries in the ring: this chunk's are the newest m.
        const int first = count - m;
        for (int h = 0; h < Hq; ++h) {
          const std::size_t cell = (static_cast<std::size_t>(l) * Hq + h) * F;
          double* re = re_.data() + cell;
          double* im = im_.data() + cell;
          double* ab = abs_.data() + cell;
          for (int i = 0; i < m; ++i) {
            const float* q = ring_.data() + (static_cast<std::size_t>(h) * count + first + i) * D;
            const std::size_t k0 = static_cast<std::size_t>(i) * F;
            for (int f = 0; f < F; ++f) {
              // The forward pass made x = a cos - b sin, y = b cos + a sin from the pair (a, b)
              // at layout positions f and f + F (q[f], q[f + F] when every dimension rotates).
              const double x = q[layout_[static_cast<std::size_t>(f)]];
              const double y = q[layout_[static_cast<std::size_t>(f + F)]];
              const double cs = cos_[k0 + f], sn = sin_[k0 + f], nrm = norm_[k0 + f];
              const double a = (x * cs + y * sn) / nrm;
              const double b = (y * cs - x * sn) / nrm;
              re[f] += a;
              im[f] += b;
              ab[f] += std::hypot(a, b);
            }
          }
        }
      }
      if (step) step(begin + m);
    }
    tokens_ += n;
  }

  std::int64_t tokens() const { return tokens_; }

  QueryStats finish() const {
    if (tokens_ == 0) throw Error("query statistics need at least one token of text");
    const ModelConfig& c = model_.config();
    QueryStats out;
    out.tokens = tokens_;
    out.model = model_name(model_);
    out.rotary_dim = c.rotary_dim();
    tri::Stats& s = out.stats;
    s.layers = c.kv_layers();
    s.q_heads = c.num_heads;
    s.freqs = c.head_dim / 2;
    const auto n = static_cast<double>(tokens_);
    for (double v : re_) s.mean_re.push_back(v / n);
    for (double v : im_) s.mean_im.push_back(v / n);
    for (double v : abs_) s.abs_mean.push_back(v / n);
    return out;
  }

 private:
  const Model& model_;
  ThreadPool& pool_;
  std::vector<double> re_, im_, abs_;  // [layers][q_heads][F] sums
  std::int64_t tokens_ = 0;
  ForwardScratch scratch_;
  std::vector<ForwardRow> rows_;
  std::vector<int> layout_;  // tri::half_layout of the model's head
  std::vector<float> ring_, cos_, sin_;
  std::vector<double> norm_;
};

}  // namespace

QueryStats calibrate_queries(const Model& model, ThreadPool& pool, std::span<const int> tokens,
                             int chunk,
                             const std::function<void(std::int64_t, std::int64_t)>& progress) {
  if (chunk < 1) throw Error("query statistics: the chunk must be at least 1 token");
  QueryMoments moments(model, pool);
  const auto total = static_cast<std::int64_t>(tokens.size());
  moments.add(tokens, chunk, [&](std::int64_t done) {
    if (progress) progress(done, total);
  });
  return moments.finish();
}

QueryStats calibrate_queries(const Model& model, ThreadPool& pool,
                             std::span<const std::vector<int>> sequences, int chunk,
                             const std::function<void(std::int64_t, std::int64_t)>& progress) {
  if (chunk < 1) throw Error("query statistics: the chunk must be at least 1 token");
  QueryMoments moments(model, pool);
  std::int64_t total = 0;
  for (const auto& s : sequences) total += static_cast<std::int64_t>(s.size());
  for (const auto& s : sequences) {
    const std::int64_t before = moments.tokens();
    moments.add(s, chunk, [&](std::int64_t done) {
      if (progress) progress(before + done, total);
    });
  }
  return moments.finish();
}

void save_query_stats(const std::string& path, const QueryStats& q) {
  const tri::Stats& s = q.stats;
  const std::size_t cells = static_cast<std::size_t>(std::max(0, s.layers)) *
                            static_cast<std::size_t>(std::max(0, s.q_heads)) *
                            static_cast<std::size_t>(std::max(0, s.freqs));
  if (cells == 0 || s.mean_re.size() != cells || s.mean_im.size() != cells ||
      s.abs_mean.size() != cells)
    throw Error(path + ": cannot save query statistics that are not [layers][q_heads][freqs]");
  if (q.tokens < 1) throw Error(path + ": cannot save query statistics over no tokens");
  const std::vector<std::int64_t> shape = {s.layers, s.q_heads, s.freqs};
  const auto fill_from = [](const std::vector<double>& values) {
    return [&values](std::uint8_t* bytes, std::size_t nbytes) {
      std::vector<float> f(values.begin(), values.end());
      std::memcpy(bytes, f.data(), std::min(nbytes, f.size() * sizeof(float)));
    };
  };
  std::map<std::string, std::string> meta;
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["tokens"] = std::to_string(q.tokens);
  meta["head_dim"] = std::to_string(2 * s.freqs);
  // Only a partial rotation is recorded, so a full one's file is as before.
  if (q.rotary_dim > 0 && q.rotary_dim != 2 * s.freqs)
    meta["rotary_dim"] = std::to_string(q.rotary_dim);
  meta["rope_style"] = "half";
  meta["model"] = q.model;
  meta["text"] = q.text;
  write_safetensors(path,
                    {{kTensors[0], DType::F32, shape, fill_from(s.mean_re)},
                     {kTensors[1], DType::F32, shape, fill_from(s.mean_im)},
                     {kTensors[2], DType::F32, shape, fill_from(s.abs_mean)}},
                    meta);
}

std::shared_ptr<const QueryStats> load_query_stats(const std::string& path, const Model& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw Error(path + ": query statistics file not found (compute one with rkv calibrate)");
  const SafetensorsFile file(path);
  const auto& meta = file.metadata();
  const std::string format = meta_or(meta, "format");
  if (format != kFormat)
    throw Error(path + ": not an rkv query statistics file (its metadata has format '" + format +
                "', expected '" + kFormat + "'; compute one with rkv calibrate)");
  const std::string version = meta_or(meta, "version");
  if (version != kVersion)
    throw Error(path + ": query statistics file version '" + version + "', this rkv reads " +
                "version " + kVersion + " (recompute it with rkv calibrate)");
  const std::string rope_style = meta_or(meta, "rope_style");
  if (rope_style != "half")
    throw Error(path + ": query statistics with rope_style '" + rope_style +
                "'; rkv pairs (q[f], q[f + d/2]) and reads only 'half'");

  const ModelConfig& c = model.config();
  const std::string made_for = meta_or(meta, "model");
  std::vector<std::int64_t> shape;
  std::vector<const TensorInfo*> infos;
  for (const char* name : kTensors) {
    auto it = file.tensors().find(name);
    if (it == file.tensors().end())
      throw Error(path + ": query statistics file has no tensor '" + name + "'");
    const TensorInfo& t = it->second;
    if (t.dtype != DType::F32) throw Error(path + ": tensor " + name + " is not float32");
    if (t.shape.size() != 3)
      throw Error(path + ": tensor " + name + " has shape " + t.shape_string() +
                  ", expected [layers, q_heads, head_dim / 2]");
    if (shape.empty()) shape = t.shape;
    if (t.shape != shape)
      throw Error(path + ": tensor " + name + " has shape " + t.shape_string() + " but " +
                  kTensors[0] + " has " + shape_to_string(shape));
    infos.push_back(&t);
  }
  const std::int64_t head_dim = parse_meta_int(meta, "head_dim", path);
  if (head_dim != 2 * shape[2])
    throw Error(path + ": metadata says head_dim " + std::to_string(head_dim) + " but the tensors" +
                " have " + std::to_string(shape[2]) + " frequency pairs per head");
  require_scorable_rotary(c, model.rope_magnitude());
  // Files from before partial RoPE was scored have no rotary_dim: every dimension rotated.
  const std::int64_t rotary_dim =
      meta.count("rotary_dim") != 0 ? parse_meta_int(meta, "rotary_dim", path) : head_dim;
  if (rotary_dim != c.rotary_dim() && head_dim == c.head_dim)
    throw Error(path + ": the statistics are for a head that rotates " +
                std::to_string(rotary_dim) + " of " + std::to_string(head_dim) +
                " dimensions, this model rotates " + std::to_string(c.rotary_dim()) +
                " (compute them for it with rkv calibrate)");
  if (shape[0] != c.kv_layers() || shape[1] != c.num_heads || head_dim != c.head_dim)
    throw Error(path + ": the statistics are for " + std::to_string(shape[0]) + " layers x " +
                std::to_string(shape[1]) + " query heads of size " + std::to_string(head_dim) +
                (made_for.empty() ? std::string() : " (model '" + made_for + "')") +
                ", this model has " + std::to_string(c.kv_layers()) + " layers x " +
                std::to_string(c.num_heads) + " query heads of size " + std::to_string(c.head_dim) +
                " (compute them for it with rkv calibrate)");
  const std::int64_t tokens = parse_meta_int(meta, "tokens", path);
  if (tokens < 1)
    throw Error(path + ": query statistics over " + std::to_string(tokens) + " tokens");

  auto q = std::make_shared<QueryStats>();
  q->tokens = tokens;
  q->model = made_for;
  q->text = meta_or(meta, "text");
  q->origin = path;
  q->rotary_dim = static_cast<int>(rotary_dim);
  tri::Stats& s = q->stats;
  s.layers = c.kv_layers();
  s.q_heads = c.num_heads;
  s.freqs = c.head_dim / 2;
  std::vector<double>* dst[3] = {&s.mean_re, &s.mean_im, &s.abs_mean};
  const auto cells = static_cast<std::size_t>(infos[0]->numel());
  for (int k = 0; k < 3; ++k) {
    std::vector<double>& v = *dst[k];
    v.resize(cells);
    const TensorInfo& t = *infos[static_cast<std::size_t>(k)];
    for (std::size_t i = 0; i < cells; ++i) {
      const float x = load_as_f32(t.data, t.dtype, i);
      if (!std::isfinite(x) || (k == 2 && x < 0.0f))
        throw Error(path + ": " + kTensors[k] + " element " + std::to_string(i) + " is " +
                    (std::isfinite(x) ? "negative" : "not finite"));
      v[i] = x;
    }
  }
  return q;
}

std::string default_query_stats_path(const std::string& model_path) {
  namespace fs = std::filesystem;
  const fs::path p(model_path);
  std::error_code ec;
  // A GGUF model is one file: its statistics go beside it, named after it.
  if (fs::is_regular_file(p, ec) || p.extension() == ".gguf")
    return (p.parent_path() / (p.stem().string() + ".query_stats.safetensors")).string();
  return (p / "query_stats.safetensors").string();
}

}  // namespace rkv
