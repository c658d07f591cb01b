#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"

namespace rkv {

namespace {

using nlohmann::json;

int get_int(const json& j, const char* key, const std::string& source, int fallback,
            bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw Error(source + ": missing required field '" + key + "'");
    return fallback;
  }
  if (!it->is_number_integer()) {
    // A whole float (4096.0) counts. Its range is checked before converting it: converting a
    // double outside long long's range is undefined (found by fuzz/config.cpp with 5.2e25).
    if (!it->is_number() || it->get<double>() != std::floor(it->get<double>()))
      throw Error(source + ": field '" + key + "' must be an integer");
    const double d = it->get<double>();
    if (!(d >= 0.0 && d <= double((1LL << 31) - 1)))
      throw Error(source + ": field '" + key + "' is out of range");
    return static_cast<int>(d);
  }
  const long long v = it->get<long long>();
  if (v < 0 || v > (1LL << 31) - 1) throw Error(source + ": field '" + key + "' is out of range");
  return static_cast<int>(v);
}

float get_float(const json& j, const char* key, const std::string& source, float fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw Error(source + ": field '" + key + "' must be a number");
  return static_cast<float>(it->get<double>());
}

void add_ids(const json& v, std::vector<int>& out, const std::string& source, const char* key) {
  if (v.is_null()) return;
  if (v.is_number_integer()) {
    out.push_back(v.get<int>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) throw Error(source + ": '" + key + "' must hold integers");
      out.push_back(e.get<int>());
    }
  } else {
    throw Error(source + ": '" + key + "' must be an integer or a list of integers");
  }
}

json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what());
  }
}

}  // namespace

std::string ModelConfig::arch_label() const {
  switch (arch) {
    case Architecture::Llama:
      return "llama";
    case Architecture::Qwen2:
      return "qwen2";
    case Architecture::Qwen3:
      return "qwen3";
    case Architecture::Qwen3Moe:
      return "qwen3moe";
    case Architecture::GptOss:
      return "gpt-oss";
    case Architecture::Qwen35:
      return "qwen35";
    case Architecture::Qwen35Moe:
      return "qwen35moe";
  }
  return "?";
}

namespace {
// Index of `layer` among the layers of `kind` (-1 when it is another kind), and their count.
int index_among(const ModelConfig& c, int layer, LayerKind kind) {
  if (c.layer_kind(layer) != kind) return -1;
  int i = 0;
  for (int l = 0; l < layer; ++l) i += c.layer_kind(l) == kind ? 1 : 0;
  return i;
}
int count_of(const ModelConfig& c, LayerKind kind) {
  int n = 0;
  for (int l = 0; l < c.num_layers; ++l) n += c.layer_kind(l) == kind ? 1 : 0;
  return n;
}
}  // namespace

int ModelConfig::kv_layer(int layer) const {
  return layer_kinds.empty() ? layer : index_among(*this, layer, LayerKind::Attention);
}
int ModelConfig::kv_layers() const {
  return layer_kinds.empty() ? num_layers : count_of(*this, LayerKind::Attention);
}
int ModelConfig::window_layer(int layer) const {
  return index_among(*this, layer, LayerKind::SlidingWindow);
}
int ModelConfig::window_layers() const {
  return count_of(*this, LayerKind::SlidingWindow);
}
int ModelConfig::delta_net_layer(int layer) const {
  return index_among(*this, layer, LayerKind::DeltaNet);
}
int ModelConfig::delta_net_layers() const {
  return count_of(*this, LayerKind::DeltaNet);
}

namespace {

// The Hugging Face classes (config.json's "architectures") and model types rkv reads. Qwen3.5's
// *ForConditionalGeneration classes (the published checkpoints) nest the text model's
// hyper-parameters under "text_config"; their vision tower is not loaded.
struct KnownArch {
  const char* cls;
  const char* model_type;
  Architecture arch;
  bool nested;
};
constexpr KnownArch kKnownArchs[] = {
    {"LlamaForCausalLM", "llama", Architecture::Llama, false},
    {"Qwen2ForCausalLM", "qwen2", Architecture::Qwen2, false},
    {"Qwen3ForCausalLM", "qwen3", Architecture::Qwen3, false},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Architecture::Qwen3Moe, false},
    {"GptOssForCausalLM", "gpt_oss", Architecture::GptOss, false},
    {"Qwen3_5ForCausalLM", "qwen3_5_text", Architecture::Qwen35, false},
    {"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", Architecture::Qwen35Moe, false},
    {"Qwen3_5ForConditionalGeneration", "qwen3_5", Architecture::Qwen35, true},
    {"Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", Architecture::Qwen35Moe, true},
};

// The flat (text-only) class and model type of an architecture, as to_json writes them.
const KnownArch& flat_arch(Architecture a) {
  for (const KnownArch& k : kKnownArchs)
    if (k.arch == a && !k.nested) return k;
  return kKnownArchs[0];
}

std::string get_string(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A boolean field: `fallback` when absent or null, an error when not a boolean.
bool get_bool(const json& j, const char* key, const std::string& source, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw Error(source + ": field '" + key + "' must be true or false");
  return it->get<bool>();
}

// YaRN (rope_type "yarn") as llama.cpp computes it (rope_inv_freq in model_load.cpp): the
// correction range floored and ceiled, cos and sin scaled by 0.1 ln(factor) + 1. Settings that
// would compute something else are refused, except "truncate": false (gpt-oss's config.json says
// it), with which transformers leaves the range unrounded: rkv rounds it as llama.cpp does, so a
// safetensors checkpoint gives its GGUF file's logits (ModelConfig has no field for the other).
void parse_yarn(const json& s, ModelConfig& c, const std::string& source) {
  RopeScaling& y = c.rope_scaling;
  y.yarn = true;
  y.factor = get_float(s, "factor", source, 1.0f);
  y.original_max_position_embeddings =
      get_int(s, "original_max_position_embeddings", source, c.max_position_embeddings, false);
  y.beta_fast = get_float(s, "beta_fast", source, 32.0f);
  y.beta_slow = get_float(s, "beta_slow", source, 1.0f);
  if (!(y.factor >= 1.0f) || !std::isfinite(y.factor) || y.original_max_position_embeddings <= 0 ||
      !(y.beta_fast > 0.0f) || !(y.beta_slow > 0.0f) || !std::isfinite(y.beta_fast) ||
      !std::isfinite(y.beta_slow))
    throw Error(source +
                ": invalid yarn rope_scaling parameters (factor must be at least 1, "
                "original_max_position_embeddings and the betas positive)");
  for (const char* key : {"mscale", "mscale_all_dim"})
    if (auto it = s.find(key); it != s.end() && !it->is_null())
      throw Error(source + ": yarn rope_scaling with '" + key + "' is not supported");
  if (get_float(s, "extrapolation_factor", source, 1.0f) != 1.0f)
    throw Error(source +
                ": yarn rope_scaling with extrapolation_factor other than 1 is not supported");
  const double expected =
      y.factor > 1.0f ? 0.1 * std::log(static_cast<double>(y.factor)) + 1.0 : 1.0;
  const double attention = get_float(s, "attention_factor", source, static_cast<float>(expected));
  if (std::abs(attention - expected) > 1e-6 * expected)
    throw Error(source + ": yarn rope_scaling attention_factor " + std::to_string(attention) +
                " is not supported (rkv scales by YaRN's 0.1 ln(factor) + 1 = " +
                std::to_string(expected) + ")");
}

// The model's layer kinds from "layer_types", each entry one of `names` (kinds in the same order).
std::vector<LayerKind> layer_types(const json& t, int layers, const std::string& source,
                                   std::initializer_list<std::pair<const char*, LayerKind>> names) {
  auto it = t.find("layer_types");
  if (it == t.end() || it->is_null()) return {};
  if (!it->is_array() || it->size() != static_cast<std::size_t>(layers))
    throw Error(source + ": 'layer_types' must be a list of num_hidden_layers (" +
                std::to_string(layers) + ") strings");
  std::vector<LayerKind> kinds;
  for (const json& e : *it) {
    const std::string name = e.is_string() ? e.get<std::string>() : e.dump();
    bool found = false;
    for (const auto& [n, kind] : names)
      if (name == n) {
        kinds.push_back(kind);
        found = true;
      }
    if (!found) {
      std::string supported;
      for (const auto& [n, kind] : names)
        supported += (supported.empty() ? "" : ", ") + std::string(n);
      throw Error(source + ": unsupported layer type '" + name +
                  "' in 'layer_types' (supported: " + supported + ")");
    }
  }
  return kinds;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  ModelConfig c;
  std::string cls;
  if (auto it = j.find("architectures");
      it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    cls = (*it)[0].get<std::string>();
  const std::string model_type = get_string(j, "model_type");
  if (cls.empty() && model_type.empty())
    throw Error(source + ": missing 'architectures' (and 'model_type')");
  const std::string& arch_name = cls.empty() ? model_type : cls;
  const KnownArch* known = nullptr;
  for (const KnownArch& k : kKnownArchs)
    if (arch_name == k.cls || arch_name == k.model_type) known = &k;
  if (known == nullptr) {
    std::string supported;
    for (const KnownArch& k : kKnownArchs)
      supported += (supported.empty() ? "" : ", ") + std::string(k.cls);
    throw Error(source + ": unsupported " +
                (cls.empty()
                     ? "model_type '" + model_type + "'"
                     : "architecture '" + cls + "'" +
                           (model_type.empty() ? "" : " (model_type '" + model_type + "')")) +
                " (supported: " + supported + ")");
  }
  c.architecture_name = arch_name;
  c.arch = known->arch;
  const bool gpt_oss = c.arch == Architecture::GptOss;
  const bool qwen35 = c.arch == Architecture::Qwen35 || c.arch == Architecture::Qwen35Moe;
  const bool moe = c.arch == Architecture::Qwen3Moe || gpt_oss || c.arch == Architecture::Qwen35Moe;

  // The text model's hyper-parameters: the object itself, or its text_config.
  const json* text = &j;
  std::string src = source;
  if (known->nested) {
    auto it = j.find("text_config");
    if (it == j.end() || !it->is_object())
      throw Error(source + ": " + arch_name +
                  " needs a 'text_config' object (the text model's hyper-parameters)");
    text = &*it;
    src = source + " (text_config)";
    const char* want = flat_arch(c.arch).model_type;
    if (const std::string mt = get_string(*text, "model_type"); !mt.empty() && mt != want)
      throw Error(src + ": unsupported model_type '" + mt + "' (expected '" + want + "')");
  }
  const json& t = *text;

  // Quantized checkpoints: gpt-oss's MXFP4 experts only (the published form).
  for (const json* q : {&j, &t}) {
    auto it = q->find("quantization_config");
    if (it == q->end() || it->is_null()) continue;
    const std::string method = it->is_object() ? get_string(*it, "quant_method") : "";
    if (!(gpt_oss && method == "mxfp4"))
      throw Error(source + ": unsupported quantization_config (quant_method '" + method +
                  "'); rkv reads float checkpoints (F32, BF16, F16), and gpt_oss's MXFP4 experts "
                  "(quant_method 'mxfp4')");
  }
  if (auto act = t.find("hidden_act"); act != t.end() && act->is_string() && *act != "silu")
    throw Error(src + ": unsupported hidden_act '" + act->get<std::string>() + "' (only silu)");

  c.hidden_size = get_int(t, "hidden_size", src, 0, true);
  // A mixture of experts has no dense FFN (Qwen3 MoE's intermediate_size is unused; gpt-oss's is
  // the experts').
  c.intermediate_size = get_int(t, "intermediate_size", src, 0, !moe || gpt_oss);
  c.num_layers = get_int(t, "num_hidden_layers", src, 0, true);
  c.num_heads = get_int(t, "num_attention_heads", src, 0, true);
  c.num_kv_heads = get_int(t, "num_key_value_heads", src, c.num_heads, false);
  c.vocab_size = get_int(t, "vocab_size", src, 0, true);
  c.max_position_embeddings = get_int(t, "max_position_embeddings", src, 32768, false);
  if (moe) {
    MoeConfig& e = c.moe;
    e.experts = get_int(t, gpt_oss ? "num_local_experts" : "num_experts", src, 0, true);
    e.experts_used =
        get_int(t, "num_experts_per_tok", src,
                gpt_oss ? get_int(t, "experts_per_token", src, 0, false) : 0, !gpt_oss);
    e.expert_ff = gpt_oss ? c.intermediate_size : get_int(t, "moe_intermediate_size", src, 0, true);
    if (c.arch == Architecture::Qwen35Moe)
      e.shared_ff = get_int(t, "shared_expert_intermediate_size", src, 0, true);
    if (e.experts <= 0 || e.experts_used <= 0 || e.expert_ff <= 0 ||
        (c.arch == Architecture::Qwen35Moe && e.shared_ff <= 0))
      throw Error(src +
                  ": the experts' sizes (count, per token, intermediate size) must be positive");
    if (e.experts_used > e.experts)
      throw Error(src + ": num_experts_per_tok exceeds the number of experts");
    e.routing = gpt_oss ? MoeConfig::Routing::TopKSoftmax : MoeConfig::Routing::SoftmaxTopK;
    if (c.intermediate_size == 0) c.intermediate_size = e.expert_ff;
    if (!gpt_oss) {
      // Qwen's router renormalises the top-k probabilities: Qwen3 MoE says so (its default is
      // false, every published checkpoint sets it), Qwen3.5 MoE always does.
      const bool norm = get_bool(t, "norm_topk_prob", src, c.arch == Architecture::Qwen35Moe);
      if (!norm)
        throw Error(src +
                    ": norm_topk_prob false (or absent) is not supported: rkv renormalises "
                    "the top-k router weights (norm_topk_prob true)");
      if (get_int(t, "decoder_sparse_step", src, 1, false) != 1)
        throw Error(src +
                    ": decoder_sparse_step other than 1 (dense layers between the mixtures "
                    "of experts) is not supported");
      if (auto it = t.find("mlp_only_layers");
          it != t.end() && !it->is_null() && !(it->is_array() && it->empty()))
        throw Error(src +
                    ": mlp_only_layers (dense layers among the mixtures of experts) is not "
                    "supported");
    } else if (get_float(t, "swiglu_limit", src, 7.0f) != 7.0f) {
      throw Error(src + ": swiglu_limit other than 7 is not supported");
    }
  }
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
      c.num_kv_heads <= 0 || c.vocab_size <= 0)
    throw Error(src +
                ": sizes (hidden, intermediate, layers, heads, kv heads, vocab) must be positive");
  // The hybrid and MoE models hold a kind per layer (and to_json writes them): a bound keeps a
  // malformed count from allocating gigabytes.
  if (!c.is_dense_transformer() && c.num_layers > 65536)
    throw Error(src + ": num_hidden_layers " + std::to_string(c.num_layers) +
                " is larger than 65536");
  if (c.num_heads % c.num_kv_heads != 0)
    throw Error(src + ": num_attention_heads (" + std::to_string(c.num_heads) +
                ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                ")");
  const int default_head_dim = c.hidden_size / c.num_heads;
  c.head_dim = get_int(t, "head_dim", src, default_head_dim, false);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    throw Error(src + ": head_dim must be a positive even number, got " +
                std::to_string(c.head_dim));
  c.rms_norm_eps = get_float(t, "rms_norm_eps", src, 1e-6f);

  // RoPE: rope_theta, partial_rotary_factor and rope_scaling, or (transformers v5, Qwen3.5)
  // all three in one rope_parameters object.
  const json* scaling = nullptr;
  float partial = 1.0f;
  const char* scaling_key = "rope_scaling";
  if (auto rp = t.find("rope_parameters"); rp != t.end() && !rp->is_null()) {
    if (!rp->is_object()) throw Error(src + ": rope_parameters must be an object or null");
    if (!rp->contains("rope_type") && !rp->contains("rope_theta"))
      for (auto e = rp->begin(); e != rp->end(); ++e)
        if (e->is_object())
          throw Error(src + ": rope_parameters per layer type ('" + e.key() +
                      "', ...) are not supported");
    c.rope_theta = get_float(*rp, "rope_theta", src, get_float(t, "rope_theta", src, 10000.0f));
    partial = get_float(*rp, "partial_rotary_factor", src,
                        get_float(t, "partial_rotary_factor", src, 1.0f));
    scaling = &*rp;
    scaling_key = "rope_parameters";
  } else {
    c.rope_theta = get_float(t, "rope_theta", src, 10000.0f);
    partial = get_float(t, "partial_rotary_factor", src, 1.0f);
    if (auto it = t.find("rope_scaling"); it != t.end() && !it->is_null()) {
      if (!it->is_object()) throw Error(src + ": rope_scaling must be an object or null");
      scaling = &*it;
    }
  }
  if (c.rope_theta <= 0.0f) throw Error(src + ": rope_theta must be positive");
  if (!(partial > 0.0f && partial <= 1.0f))
    throw Error(src + ": partial_rotary_factor must lie in (0, 1]");
  {
    const double dims = static_cast<double>(c.head_dim) * static_cast<double>(partial);
    const int rope_dims = static_cast<int>(std::lround(dims));
    if (std::abs(dims - rope_dims) > 1e-3 || rope_dims % 2 != 0 || rope_dims <= 0)
      throw Error(src + ": partial_rotary_factor " + std::to_string(partial) + " of head_dim " +
                  std::to_string(c.head_dim) + " is not a positive even number of dimensions");
    if (rope_dims != c.head_dim) {
      if (!qwen35)
        throw Error(src + ": partial_rotary_factor " + std::to_string(partial) +
                    " is supported for Qwen3.5 only");
      c.rope_dim = rope_dims;
    }
  }
  if (scaling != nullptr) {
    const json& s = *scaling;
    std::string type = get_string(s, "rope_type");
    if (type.empty()) type = get_string(s, "type");
    const bool new_arch = !c.is_dense_transformer();
    if (type == "llama3") {
      c.rope_scaling.llama3 = true;
      c.rope_scaling.factor = get_float(s, "factor", src, 8.0f);
      c.rope_scaling.low_freq_factor = get_float(s, "low_freq_factor", src, 1.0f);
      c.rope_scaling.high_freq_factor = get_float(s, "high_freq_factor", src, 4.0f);
      c.rope_scaling.original_max_position_embeddings =
          get_int(s, "original_max_position_embeddings", src, 8192, false);
      if (c.rope_scaling.factor <= 0 ||
          c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor ||
          c.rope_scaling.original_max_position_embeddings <= 0)
        throw Error(src + ": invalid llama3 rope_scaling parameters");
    } else if (type == "yarn" && new_arch) {
      parse_yarn(s, c, src);
    } else if (!(type == "default" || type.empty() || (type == "mrope" && qwen35))) {
      throw Error(src + ": unsupported rope_scaling type '" + type + "' (" + scaling_key +
                  "; supported: llama3, and yarn for qwen3_moe, gpt_oss and Qwen3.5)");
    }
    // Multimodal RoPE sections (Qwen3.5): a text token's positions are equal in every section,
    // so the sections reduce to plain RoPE as long as they cover every frequency pair.
    if (auto ms = s.find("mrope_section"); ms != s.end() && !ms->is_null()) {
      if (!ms->is_array()) throw Error(src + ": mrope_section must be a list of integers");
      long long pairs = 0;
      for (const json& v : *ms) {
        if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > (1 << 20))
          throw Error(src + ": mrope_section must be a list of integers");
        pairs += v.get<long long>();
      }
      if (pairs != c.rotary_dim() / 2)
        throw Error(src + ": mrope_section covers " + std::to_string(pairs) +
                    " frequency pairs, but the rotary dimensions have " +
                    std::to_string(c.rotary_dim() / 2));
    }
  }

  // Layer kinds, the attention's extras and the Gated DeltaNet's shapes.
  if (gpt_oss) {
    c.layer_kinds = layer_types(t, c.num_layers, src,
                                {{"sliding_attention", LayerKind::SlidingWindow},
                                 {"full_attention", LayerKind::Attention}});
    if (c.layer_kinds.empty())  // GptOssConfig's default: the even layers slide
      for (int l = 0; l < c.num_layers; ++l)
        c.layer_kinds.push_back(l % 2 == 0 ? LayerKind::SlidingWindow : LayerKind::Attention);
    if (c.window_layers() > 0) {
      c.sliding_window = get_int(t, "sliding_window", src, 0, true);
      if (c.sliding_window <= 0 || c.sliding_window > c.max_position_embeddings)
        throw Error(src + ": sliding_window must be positive and at most max_position_embeddings");
    }
    c.attention_sinks = true;
    c.output_bias = true;
  } else if (qwen35) {
    c.layer_kinds = layer_types(
        t, c.num_layers, src,
        {{"linear_attention", LayerKind::DeltaNet}, {"full_attention", LayerKind::Attention}});
    if (c.layer_kinds.empty()) {
      const int interval = get_int(t, "full_attention_interval", src, 4, false);
      if (interval <= 0) throw Error(src + ": full_attention_interval must be positive");
      for (int l = 0; l < c.num_layers; ++l)
        c.layer_kinds.push_back((l + 1) % interval == 0 ? LayerKind::Attention
                                                        : LayerKind::DeltaNet);
    }
    DeltaNetConfig& d = c.delta_net;
    d.k_heads = get_int(t, "linear_num_key_heads", src, 0, true);
    d.v_heads = get_int(t, "linear_num_value_heads", src, 0, true);
    d.head_k_dim = get_int(t, "linear_key_head_dim", src, 0, true);
    d.head_v_dim = get_int(t, "linear_value_head_dim", src, 0, true);
    d.conv_kernel = get_int(t, "linear_conv_kernel_dim", src, 0, true);
    if (d.k_heads <= 0 || d.v_heads <= 0 || d.head_k_dim <= 0 || d.head_v_dim <= 0 ||
        d.conv_kernel <= 0)
      throw Error(src + ": the linear attention's sizes (linear_*) must be positive");
    if (d.v_heads % d.k_heads != 0)
      throw Error(src + ": linear_num_value_heads (" + std::to_string(d.v_heads) +
                  ") is not a multiple of linear_num_key_heads (" + std::to_string(d.k_heads) +
                  ")");
    if (!get_bool(t, "attn_output_gate", src, true))
      throw Error(src + ": attn_output_gate false is not supported (Qwen3.5 gates its attention)");
    c.attention_gate = true;
  } else {
    // Every layer attends to the whole sequence (a sliding window would be silently ignored).
    layer_types(t, c.num_layers, src, {{"full_attention", LayerKind::Attention}});
    if (get_bool(t, "use_sliding_window", src, false) && c.arch == Architecture::Qwen3Moe)
      throw Error(src + ": use_sliding_window true is not supported");
    if (c.arch == Architecture::Qwen3Moe)
      c.layer_kinds.assign(static_cast<std::size_t>(c.num_layers), LayerKind::Attention);
  }
  if (!c.layer_kinds.empty() && c.kv_layers() == 0)
    throw Error(src + ": the model has no full-attention layer");

  if (auto it = t.find("tie_word_embeddings"); it != t.end() && it->is_boolean())
    c.tie_word_embeddings = it->get<bool>();
  // A nested config may say it at the top level instead (Qwen3_5Config's own field).
  if (auto it = j.find("tie_word_embeddings"); known->nested && it != j.end() && it->is_boolean())
    c.tie_word_embeddings = c.tie_word_embeddings || it->get<bool>();
  // Qwen2 always has q/k/v biases, gpt-oss by default; the others only when attention_bias says so.
  c.attention_bias = c.arch == Architecture::Qwen2 || gpt_oss;
  if (auto it = t.find("attention_bias");
      it != t.end() && it->is_boolean() && c.arch != Architecture::Qwen2)
    c.attention_bias = it->get<bool>();
  c.qk_norm = c.arch == Architecture::Qwen3 || c.arch == Architecture::Qwen3Moe || qwen35;

  c.bos_token_id = get_int(t, "bos_token_id", src, -1, false);
  if (auto it = t.find("eos_token_id"); it != t.end())
    add_ids(*it, c.eos_token_ids, src, "eos_token_id");
  if (known->nested) {
    if (c.bos_token_id < 0) c.bos_token_id = get_int(j, "bos_token_id", source, -1, false);
    if (auto it = j.find("eos_token_id"); it != j.end())
      add_ids(*it, c.eos_token_ids, source, "eos_token_id");
  }
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw Error(dir.string() + ": not a model directory (expected config.json and *.safetensors)");
  const auto config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) throw Error(config_path.string() + ": file not found");
  ModelConfig c = from_json(read_json_file(config_path), config_path.string());
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    const json g = read_json_file(gen_path);
    if (g.is_object()) {
      if (auto it = g.find("eos_token_id"); it != g.end())
        add_ids(*it, c.eos_token_ids, gen_path.string(), "eos_token_id");
      if (c.bos_token_id < 0)
        c.bos_token_id = get_int(g, "bos_token_id", gen_path.string(), -1, false);
    }
  }
  std::sort(c.eos_token_ids.begin(), c.eos_token_ids.end());
  c.eos_token_ids.erase(std::unique(c.eos_token_ids.begin(), c.eos_token_ids.end()),
                        c.eos_token_ids.end());
  return c;
}

json ModelConfig::to_json() const {
  // Llama, Qwen2 and Qwen3 as before; the other architectures as their text-only Hugging Face
  // classes write them (which from_json reads back to the same configuration).
  const bool dense = is_dense_transformer();
  const bool qwen35 = arch == Architecture::Qwen35 || arch == Architecture::Qwen35Moe;
  json j;
  j["architectures"] = json::array({dense ? architecture_name : flat_arch(arch).cls});
  j["model_type"] = dense ? arch_label() : flat_arch(arch).model_type;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  json scaling = nullptr;
  if (rope_scaling.llama3) {
    scaling = {{"rope_type", "llama3"},
               {"factor", rope_scaling.factor},
               {"low_freq_factor", rope_scaling.low_freq_factor},
               {"high_freq_factor", rope_scaling.high_freq_factor},
               {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  } else if (rope_scaling.yarn) {
    scaling = {{"rope_type", "yarn"},
               {"factor", rope_scaling.factor},
               {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings},
               {"beta_fast", rope_scaling.beta_fast},
               {"beta_slow", rope_scaling.beta_slow}};
  }
  if (qwen35) {
    json p = scaling.is_object() ? scaling : json{{"rope_type", "default"}};
    p["rope_theta"] = rope_theta;
    p["partial_rotary_factor"] = static_cast<double>(rotary_dim()) / head_dim;
    const std::array<int, 3> sections = mrope_sections();
    p["mrope_section"] = json::array({sections[0], sections[1], sections[2]});
    p["mrope_interleaved"] = true;
    j["rope_parameters"] = p;
  } else {
    j["rope_theta"] = rope_theta;
    j["rope_scaling"] = scaling;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = attention_bias;
  j["hidden_act"] = "silu";
  if (moe.experts > 0) {
    j[arch == Architecture::GptOss ? "num_local_experts" : "num_experts"] = moe.experts;
    j["num_experts_per_tok"] = moe.experts_used;
    if (arch == Architecture::GptOss) {
      j["intermediate_size"] = moe.expert_ff;
      j["swiglu_limit"] = 7.0;
    } else {
      j["moe_intermediate_size"] = moe.expert_ff;
      j["norm_topk_prob"] = true;
    }
    if (moe.shared_ff > 0) j["shared_expert_intermediate_size"] = moe.shared_ff;
  }
  if (arch == Architecture::GptOss || qwen35) {
    json types = json::array();
    for (int l = 0; l < num_layers; ++l)
      types.push_back(layer_kind(l) == LayerKind::SlidingWindow ? "sliding_attention"
                      : layer_kind(l) == LayerKind::DeltaNet    ? "linear_attention"
                                                                : "full_attention");
    j["layer_types"] = types;
  }
  if (sliding_window > 0) j["sliding_window"] = sliding_window;
  if (qwen35) {
    j["linear_num_key_heads"] = delta_net.k_heads;
    j["linear_num_value_heads"] = delta_net.v_heads;
    j["linear_key_head_dim"] = delta_net.head_k_dim;
    j["linear_value_head_dim"] = delta_net.head_v_dim;
    j["linear_conv_kernel_dim"] = delta_net.conv_kernel;
  }
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids;
  j["torch_dtype"] = "bfloat16";
  return j;
}

}  // namespace rkv
