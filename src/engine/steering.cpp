#include "engine/steering.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "engine/generator.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace rkv {

namespace {

constexpr const char* kTensorName = "steering_vector";
constexpr const char* kKind = "steering-vector";

int parse_meta_int(const std::map<std::string, std::string>& meta, const std::string& key,
                   const std::string& source) {
  auto it = meta.find(key);
  if (it == meta.end()) throw Error(source + ": steering vector metadata has no '" + key + "'");
  int v = 0;
  const std::string& t = it->second;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size())
    throw Error(source + ": steering vector metadata '" + key + "' is not an integer: '" + t + "'");
  return v;
}

struct Fnv1a {
  std::uint64_t h = 1469598103934665603ull;
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  }
  void text(const std::string& s) { bytes(s.data(), s.size() + 1); }  // with the terminator
  void number(std::int64_t v) { bytes(&v, sizeof v); }
};

// Captures the output of one decoder layer for chosen positions.
class LayerCapture {
 public:
  LayerCapture(int layer, int hidden, const std::vector<std::int32_t>& positions)
      : layer_(layer), hidden_(hidden), positions_(positions) {
    states_.resize(positions.size() * static_cast<std::size_t>(hidden));
  }
  void after_layer(int layer, std::span<const ForwardRow> rows, const float* hidden) {
    if (layer != layer_) return;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto it = std::lower_bound(positions_.begin(), positions_.end(), rows[r].position);
      if (it == positions_.end() || *it != rows[r].position) continue;
      const auto slot = static_cast<std::size_t>(it - positions_.begin());
      std::memcpy(states_.data() + slot * static_cast<std::size_t>(hidden_),
                  hidden + r * static_cast<std::size_t>(hidden_),
                  static_cast<std::size_t>(hidden_) * sizeof(float));
    }
  }
  const float* state(std::size_t slot) const {
    return states_.data() + slot * static_cast<std::size_t>(hidden_);
  }

 private:
  int layer_, hidden_;
  const std::vector<std::int32_t>& positions_;  // ascending
  std::vector<float> states_;                   // [positions][hidden]
};

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

}  // namespace

void SteeringParams::validate() const {
  if (!std::isfinite(a0)) throw Error("steering a0 must be a finite number");
  if (!std::isfinite(gamma)) throw Error("steering gamma must be a finite number");
}

int default_steering_layer(int num_layers) {
  if (num_layers <= 0) throw Error("default_steering_layer: the model has no layers");
  if (num_layers >= 28 && num_layers <= 32) return 20;
  const int k = static_cast<int>(std::lround(0.72 * num_layers));
  return std::clamp(k, 0, num_layers - 1);
}

std::string model_fingerprint(const std::filesystem::path& model_dir, const ModelConfig& config) {
  Fnv1a f;
  f.text(config.architecture_name);
  for (int v : {config.hidden_size, config.intermediate_size, config.num_layers, config.num_heads,
                config.num_kv_heads, config.head_dim, config.vocab_size})
    f.number(v);
  const auto add = [&](const std::string& name, const void* data, DType dtype, std::size_t numel,
                       std::size_t count) {
    count = std::min(count, numel);
    f.text(name);
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint16_t b = f32_to_bf16(load_as_f32(data, dtype, i));
      f.bytes(&b, sizeof b);
    }
  };
  const auto hidden = static_cast<std::size_t>(config.hidden_size);
  if (is_gguf_path(model_dir)) {
    // The same tensors under their GGUF names (same row-major layout), hashed under the
    // Hugging Face names; weights of other types than F32/F16/BF16 are left out.
    const GgufFile g(model_dir, MappedFile::Mode::Map);
    const auto add_gguf = [&](const std::string& gguf_name, const std::string& name,
                              std::size_t count) {
      const GgufTensor* t = g.find_tensor(gguf_name);
      if (t == nullptr) return;
      const std::uint32_t id = t->type->id;
      if (id != kGgmlF32 && id != kGgmlF16 && id != kGgmlBf16) return;
      const DType dt = id == kGgmlF32 ? DType::F32 : id == kGgmlF16 ? DType::F16 : DType::BF16;
      add(name, t->data, dt, static_cast<std::size_t>(t->numel()), count);
    };
    add_gguf("output_norm.weight", "model.norm.weight", hidden);
    add_gguf("token_embd.weight", "model.embed_tokens.weight", 4 * hidden);
  } else {
    const TensorStore store(model_dir);
    const auto add_values = [&](const std::string& name, std::size_t count) {
      if (!store.contains(name)) return;
      const TensorInfo& t = store.get(name);
      add(name, t.data, t.dtype, static_cast<std::size_t>(t.numel()), count);
    };
    add_values("model.norm.weight", hidden);
    add_values("model.embed_tokens.weight", 4 * hidden);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(f.h));
  return out;
}

std::string steering_vector_digest(const SteeringVector& vector) {
  Fnv1a f;
  f.number(vector.layer);
  f.bytes(vector.values.data(), vector.values.size() * sizeof(float));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
  return hex;
}

void save_steering_vector(const std::filesystem::path& path, const SteeringVector& v) {
  if (v.values.empty()) throw Error(path.string() + ": cannot save an empty steering vector");
  std::map<std::string, std::string> meta = v.extra;
  meta["format"] = "pt";
  meta["rkv_kind"] = kKind;
  meta["layer"] = std::to_string(v.layer);
  meta["hidden_size"] = std::to_string(v.hidden_size());
  meta["num_layers"] = std::to_string(v.num_layers);
  meta["architecture"] = v.architecture;
  meta["model"] = v.model;
  meta["model_fingerprint"] = v.fingerprint;
  const std::vector<float>& values = v.values;
  write_safetensors(
      path,
      {{kTensorName,
        DType::F32,
        {static_cast<std::int64_t>(values.size())},
        [&values](std::uint8_t* bytes, std::size_t n) { std::memcpy(bytes, values.data(), n); }}},
      meta);
}

SteeringVector load_steering_vector(const std::filesystem::path& path) {
  const std::string src = path.string();
  if (!std::filesystem::exists(path)) throw Error(src + ": steering vector file not found");
  const SafetensorsFile file(path);
  const auto& meta = file.metadata();
  auto kind = meta.find("rkv_kind");
  if (kind == meta.end() || kind->second != kKind)
    throw Error(src + ": not an rkv steering vector (no rkv_kind=" + kKind +
                " in the safetensors metadata; make one with rkv steer-calibrate)");
  auto t = file.tensors().find(kTensorName);
  if (t == file.tensors().end())
    throw Error(src + ": steering vector file has no tensor '" + kTensorName + "'");
  const TensorInfo& info = t->second;
  if (info.shape.size() != 1 || info.shape[0] < 1)
    throw Error(src + ": tensor " + kTensorName + " has shape " + info.shape_string() +
                ", expected [hidden_size]");
  SteeringVector v;
  v.layer = parse_meta_int(meta, "layer", src);
  v.num_layers = parse_meta_int(meta, "num_layers", src);
  const int hidden = parse_meta_int(meta, "hidden_size", src);
  if (hidden != info.shape[0])
    throw Error(src + ": metadata says hidden_size " + std::to_string(hidden) + " but tensor " +
                kTensorName + " has shape " + info.shape_string());
  if (v.num_layers < 1 || v.layer < 0 || v.layer >= v.num_layers)
    throw Error(src + ": steering layer " + std::to_string(v.layer) + " is not a layer of a " +
                std::to_string(v.num_layers) + "-layer model");
  v.values.resize(static_cast<std::size_t>(hidden));
  for (std::size_t i = 0; i < v.values.size(); ++i) {
    v.values[i] = load_as_f32(info.data, info.dtype, i);
    if (!std::isfinite(v.values[i]))
      throw Error(src + ": steering vector element " + std::to_string(i) + " is not finite");
  }
  for (const auto& [key, value] : meta) {
    if (key == "architecture") {
      v.architecture = value;
    } else if (key == "model") {
      v.model = value;
    } else if (key == "model_fingerprint") {
      v.fingerprint = value;
    } else if (key != "format" && key != "rkv_kind" && key != "layer" && key != "num_layers" &&
               key != "hidden_size") {
      v.extra[key] = value;
    }
  }
  return v;
}

void check_steering_vector(const SteeringVector& v, const ModelConfig& config,
                           const std::string& fingerprint, const std::string& source) {
  const std::string made_for = "it was made for " + (v.model.empty() ? std::string("another model")
                                                                     : "model '" + v.model + "'");
  if (v.hidden_size() != config.hidden_size)
    throw Error(source + ": steering vector has hidden size " + std::to_string(v.hidden_size()) +
                ", this model has " + std::to_string(config.hidden_size) + " (" + made_for +
                "; calibrate one for this model with rkv steer-calibrate)");
  if (v.layer < 0 || v.layer >= config.num_layers)
    throw Error(source + ": steering layer " + std::to_string(v.layer) +
                " does not exist in this " + std::to_string(config.num_layers) + "-layer model (" +
                made_for + ")");
  if (!v.fingerprint.empty() && !fingerprint.empty() && v.fingerprint != fingerprint)
    throw Error(source + ": steering vector does not belong to this model: " + made_for +
                " (fingerprint " + v.fingerprint + "), this model's fingerprint is " + fingerprint +
                "; calibrate one for this model with rkv steer-calibrate");
}

std::shared_ptr<const SteeringVector> load_steering_vector_for(const std::filesystem::path& path,
                                                               const Model& model) {
  auto v = std::make_shared<SteeringVector>(load_steering_vector(path));
  check_steering_vector(*v, model.config(), model_fingerprint(model.dir(), model.config()),
                        path.string());
  return v;
}

// ---- calibration ------------------------------------------------------------------------------

std::string_view thought_label_name(ThoughtLabel label) {
  switch (label) {
    case ThoughtLabel::execution:
      return "execution";
    case ThoughtLabel::reflection:
      return "reflection";
    case ThoughtLabel::transition:
      return "transition";
  }
  return "?";
}

ThoughtLabel label_thought(std::string_view text) {
  // "starts with" is implied by "contains"; both are listed in ALGORITHMS.md 5 after SEAL.
  for (std::string_view k : {"Wait", "But wait", "Let me check", "double-check", "verify"})
    if (contains(text, k)) return ThoughtLabel::reflection;
  if (contains(text, "Alternatively")) return ThoughtLabel::transition;
  return ThoughtLabel::execution;
}

std::vector<Thought> split_thoughts(const std::vector<int>& output,
                                    const std::function<std::string(int)>& token_text,
                                    int stop_token) {
  std::vector<Thought> thoughts;
  std::string text;
  int begin = 0;
  bool prev_ends_newline = false;
  for (int i = 0; i < static_cast<int>(output.size()); ++i) {
    const int token = output[static_cast<std::size_t>(i)];
    if (stop_token >= 0 && token == stop_token) break;
    const std::string piece = token_text(token);
    text += piece;
    const bool delimiter =
        contains(piece, "\n\n") || (prev_ends_newline && !piece.empty() && piece.front() == '\n');
    prev_ends_newline = !piece.empty() && piece.back() == '\n';
    if (!delimiter) continue;
    Thought t;
    t.begin = begin;
    t.delimiter = i;
    t.text = std::move(text);
    t.label = label_thought(t.text);
    thoughts.push_back(std::move(t));
    text.clear();
    begin = i + 1;
    prev_ends_newline = false;  // a third newline does not end an empty thought
  }
  return thoughts;
}

SteeringCalibration::SteeringCalibration(const Model& model, int layer, std::string fingerprint,
                                         std::optional<KvDtype> kv_dtype)
    : model_(model), layer_(layer), fingerprint_(std::move(fingerprint)), kv_dtype_(kv_dtype) {
  const ModelConfig& c = model.config();
  if (layer < 0 || layer >= c.num_layers)
    throw Error("steering layer " + std::to_string(layer) + " does not exist: the model has " +
                std::to_string(c.num_layers) + " layers (0-" + std::to_string(c.num_layers - 1) +
                ")");
  execution_sum_.assign(static_cast<std::size_t>(c.hidden_size), 0.0);
  non_execution_sum_.assign(static_cast<std::size_t>(c.hidden_size), 0.0);
}

std::vector<Thought> SteeringCalibration::add_sample(
    const std::vector<int>& prompt, const std::vector<int>& output,
    const std::function<std::string(int)>& token_text, int stop_token, ThreadPool& pool,
    int prefill_chunk) {
  std::vector<Thought> thoughts = split_thoughts(output, token_text, stop_token);
  if (thoughts.empty()) return thoughts;
  // Only the tokens up to the last delimiter need to run.
  const std::size_t used = prompt.size() + static_cast<std::size_t>(thoughts.back().delimiter) + 1;
  std::vector<int> tokens(prompt);
  tokens.insert(tokens.end(), output.begin(),
                output.begin() + static_cast<std::ptrdiff_t>(used - prompt.size()));
  std::vector<std::int32_t> positions;
  for (const auto& t : thoughts)
    positions.push_back(static_cast<std::int32_t>(prompt.size()) + t.delimiter);
  const ModelConfig& c = model_.config();
  LayerCapture capture(layer_, c.hidden_size, positions);
  KvCache cache(model_.cache_shape(static_cast<int>(tokens.size()), 0, kv_dtype_));
  ForwardScratch scratch;
  prefill(model_, cache, tokens, 0, prefill_chunk, scratch, pool, nullptr,
          [&capture](int layer, std::span<const ForwardRow> rows, const float* hidden) {
            capture.after_layer(layer, rows, hidden);
          });
  for (std::size_t i = 0; i < thoughts.size(); ++i) {
    const bool exec = thoughts[i].label == ThoughtLabel::execution;
    std::vector<double>& sum = exec ? execution_sum_ : non_execution_sum_;
    const float* h = capture.state(i);
    for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += h[j];
    ++(exec ? n_execution_ : n_non_execution_);
  }
  return thoughts;
}

SteeringVector SteeringCalibration::finish() const {
  if (n_execution_ == 0 || n_non_execution_ == 0)
    throw Error("steering calibration found " + std::to_string(n_execution_) + " execution and " +
                std::to_string(n_non_execution_) +
                " non-execution thoughts; both kinds are needed (use more prompts or longer "
                "generations)");
  const ModelConfig& c = model_.config();
  SteeringVector v;
  v.layer = layer_;
  v.num_layers = c.num_layers;
  v.architecture = c.architecture_name;
  v.model = model_.dir().filename().string();
  if (v.model.empty()) v.model = model_.dir().parent_path().filename().string();
  v.fingerprint = fingerprint_;
  v.values.resize(execution_sum_.size());
  for (std::size_t j = 0; j < v.values.size(); ++j)
    v.values[j] = static_cast<float>(execution_sum_[j] / n_execution_ -
                                     non_execution_sum_[j] / n_non_execution_);
  v.extra["execution_thoughts"] = std::to_string(n_execution_);
  v.extra["non_execution_thoughts"] = std::to_string(n_non_execution_);
  return v;
}

}  // namespace rkv
