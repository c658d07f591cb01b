#include "model/random_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/byte_level.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/rng.h"
#include "model/gguf_writer.h"
#include "model/safetensors.h"

namespace rkv {

using nlohmann::json;

namespace {

struct ShapeEntry {
  const char* name;
  const char* family;  // "qwen", "r1-qwen", "r1-llama"
  ModelConfig config;
};

ModelConfig make(Architecture arch, const char* arch_name, int hidden, int inter, int layers,
                 int heads, int kv_heads, int head_dim, int vocab, float theta, float eps,
                 bool tied, int max_pos) {
  ModelConfig c;
  c.arch = arch;
  c.architecture_name = arch_name;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = vocab;
  c.rope_theta = theta;
  c.rms_norm_eps = eps;
  c.tie_word_embeddings = tied;
  c.max_position_embeddings = max_pos;
  c.attention_bias = arch == Architecture::Qwen2;
  c.qk_norm = arch == Architecture::Qwen3;
  return c;
}

const std::vector<ShapeEntry>& shapes() {
  static const std::vector<ShapeEntry> table = [] {
    std::vector<ShapeEntry> t;
    t.push_back({"tiny", "qwen",
                 make(Architecture::Qwen2, "Qwen2ForCausalLM", 128, 384, 4, 4, 2, 32, 1024, 1e6f,
                      1e-6f, true, 4096)});
    // The tiny shape with DeepSeek-R1's tokens and chat template (its generation prompt opens a
    // <think> block): tests of reasoning handling on a model that loads in milliseconds.
    t.push_back({"tiny-r1", "r1-qwen",
                 make(Architecture::Qwen2, "Qwen2ForCausalLM", 128, 384, 4, 4, 2, 32, 1024, 1e6f,
                      1e-6f, true, 4096)});
    // The tiny shape as a Qwen3 (per-head q_norm and k_norm, no biases): tests of what sits
    // between the projections and RoPE.
    t.push_back({"tiny-qwen3", "qwen",
                 make(Architecture::Qwen3, "Qwen3ForCausalLM", 128, 384, 4, 4, 2, 32, 1024, 1e6f,
                      1e-6f, true, 4096)});
    // The tiny shape with rows of 256 and 512: K-quant super-blocks fit every matrix (GGUF
    // tests of Q4_K/Q6_K through a whole model).
    t.push_back({"tiny-256", "qwen",
                 make(Architecture::Qwen2, "Qwen2ForCausalLM", 256, 512, 2, 4, 2, 64, 1024, 1e6f,
                      1e-6f, true, 4096)});
    // The same as a Llama (untied output, no biases, rotary pairs permuted in GGUF files).
    t.push_back({"tiny-llama-256", "r1-llama",
                 make(Architecture::Llama, "LlamaForCausalLM", 256, 512, 2, 4, 2, 64, 1024, 5e5f,
                      1e-5f, false, 4096)});
    // tiny-llama-256 with Llama-3.1's rope scaling from an original context of 64, so that the
    // scaling changes most frequencies (GGUF files carry it as rope_freqs.weight).
    ModelConfig scaled = make(Architecture::Llama, "LlamaForCausalLM", 256, 512, 2, 4, 2, 64, 1024,
                              5e5f, 1e-5f, false, 4096);
    scaled.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 64};
    t.push_back({"tiny-llama3-rope", "r1-llama", scaled});
    t.push_back({"qwen2.5-0.5b", "qwen",
                 make(Architecture::Qwen2, "Qwen2ForCausalLM", 896, 4864, 24, 14, 2, 64, 151936,
                      1e6f, 1e-6f, true, 32768)});
    t.push_back({"qwen3-0.6b", "qwen",
                 make(Architecture::Qwen3, "Qwen3ForCausalLM", 1024, 3072, 28, 16, 8, 128, 151936,
                      1e6f, 1e-6f, true, 40960)});
    t.push_back({"r1-distill-qwen-1.5b", "r1-qwen",
                 make(Architecture::Qwen2, "Qwen2ForCausalLM", 1536, 8960, 28, 12, 2, 128, 151936,
                      1e4f, 1e-6f, false, 131072)});
    ModelConfig llama = make(Architecture::Llama, "LlamaForCausalLM", 4096, 14336, 32, 32, 8, 128,
                             128256, 5e5f, 1e-5f, false, 131072);
    llama.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 8192};
    t.push_back({"r1-distill-llama-8b", "r1-llama", llama});
    // The mixture-of-experts and hybrid families (GGUF only), each with a reduced-depth variant
    // for benchmarks on a machine that cannot hold the whole model twice.
    auto qwen3moe = [](int layers) {
      ModelConfig c = make(Architecture::Qwen3Moe, "Qwen3MoeForCausalLM", 2048, 6144, layers, 32, 4,
                           128, 151936, 1e6f, 1e-6f, false, 40960);
      c.moe = {128, 8, 768, 0, MoeConfig::Routing::SoftmaxTopK};
      c.qk_norm = true;
      return c;
    };
    t.push_back({"qwen3-30b-a3b", "qwen", qwen3moe(48)});
    t.push_back({"qwen3-30b-a3b-24l", "qwen", qwen3moe(24)});
    auto gpt_oss = [](int layers) {
      ModelConfig c = make(Architecture::GptOss, "GptOssForCausalLM", 2880, 2880, layers, 64, 8, 64,
                           201088, 150000.0f, 1e-5f, false, 131072);
      c.moe = {32, 4, 2880, 0, MoeConfig::Routing::TopKSoftmax};
      c.attention_bias = c.output_bias = c.attention_sinks = true;
      c.sliding_window = 128;
      c.rope_scaling.yarn = true;
      c.rope_scaling.factor = 32.0f;
      c.rope_scaling.original_max_position_embeddings = 4096;
      c.layer_kinds.assign(static_cast<std::size_t>(layers), LayerKind::Attention);
      for (int l = 0; l < layers; l += 2)
        c.layer_kinds[static_cast<std::size_t>(l)] = LayerKind::SlidingWindow;
      return c;
    };
    t.push_back({"gpt-oss-20b", "qwen", gpt_oss(24)});
    t.push_back({"gpt-oss-20b-12l", "qwen", gpt_oss(12)});
    auto qwen35 = [](int layers) {
      ModelConfig c = make(Architecture::Qwen35, "Qwen3_5ForCausalLM", 2560, 9216, layers, 16, 4,
                           256, 248320, 1e7f, 1e-6f, true, 262144);
      c.qk_norm = c.attention_gate = true;
      c.rope_dim = 64;
      c.delta_net = {16, 32, 128, 128, 4};
      c.layer_kinds.assign(static_cast<std::size_t>(layers), LayerKind::DeltaNet);
      for (int l = 3; l < layers; l += 4)
        c.layer_kinds[static_cast<std::size_t>(l)] = LayerKind::Attention;
      return c;
    };
    t.push_back({"qwen3.5-4b", "qwen", qwen35(32)});
    t.push_back({"qwen3.5-4b-8l", "qwen", qwen35(8)});
    // Tiny versions of the three (the golden arch files' shapes, with a vocabulary), for tests.
    auto tiny = [](ModelConfig c, int heads, int kv_heads, int head_dim) {
      c.hidden_size = 64;
      c.vocab_size = 1024;
      c.num_heads = heads;
      c.num_kv_heads = kv_heads;
      c.head_dim = head_dim;
      return c;
    };
    ModelConfig tiny_moe = tiny(qwen3moe(3), 4, 2, 32);
    tiny_moe.moe = {8, 2, 32, 0, MoeConfig::Routing::SoftmaxTopK};
    t.push_back({"tiny-qwen3moe", "qwen", tiny_moe});
    ModelConfig tiny_oss = tiny(gpt_oss(4), 8, 2, 16);
    tiny_oss.sliding_window = 8;
    tiny_oss.moe = {8, 4, 64, 0, MoeConfig::Routing::TopKSoftmax};
    t.push_back({"tiny-gpt-oss", "qwen", tiny_oss});
    ModelConfig tiny_35 = tiny(qwen35(4), 4, 2, 64);
    tiny_35.intermediate_size = 128;
    tiny_35.rope_dim = 16;
    // 3 v heads per k head: Qwen3.5's v-head reordering is then not its own inverse (as it is
    // with 2 and 2), so the checkpoint test pins its direction.
    tiny_35.delta_net = {2, 6, 16, 16, 4};
    t.push_back({"tiny-qwen35", "qwen", tiny_35});
    return t;
  }();
  return table;
}

const ShapeEntry& find_shape(const std::string& name) {
  for (const auto& s : shapes())
    if (name == s.name) return s;
  std::string known;
  for (const auto& s : shapes()) known += std::string(known.empty() ? "" : ", ") + s.name;
  throw Error("unknown model shape '" + name + "' (known: " + known + ")");
}

struct Specials {
  std::vector<std::string> tokens;
  std::string bos, eos;
  bool add_bos = false;
  std::string chat_template;
};

// The id of a special token in a vocabulary of `vocab_size`: the specials take its last ids, in
// order; -1 for a token that is not one of them.
int special_token_id(const Specials& s, int vocab_size, const std::string& content) {
  const int first = vocab_size - static_cast<int>(s.tokens.size());
  for (std::size_t i = 0; i < s.tokens.size(); ++i)
    if (s.tokens[i] == content) return first + static_cast<int>(i);
  return -1;
}

Specials family_specials(const std::string& family) {
  Specials s;
  if (family == "qwen") {
    s.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    s.eos = "<|im_end|>";
    s.chat_template =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
        "'<|im_start|>assistant\\n' }}{% endif %}";
  } else {
    s.tokens = {"<｜begin▁of▁sentence｜>",
                "<｜end▁of▁sentence｜>",
                "<｜User｜>",
                "<｜Assistant｜>",
                "<think>",
                "</think>"};
    s.bos = "<｜begin▁of▁sentence｜>";
    s.eos = "<｜end▁of▁sentence｜>";
    s.add_bos = true;
    s.chat_template =
        "{{bos_token}}{% for message in messages %}{% if message['role'] == 'user' "
        "%}{{'<｜User｜>' + "
        "message['content']}}{% endif %}{% endfor %}{% if add_generation_prompt "
        "%}{{'<｜Assistant｜><think>\\n'}}{% endif %}";
  }
  return s;
}

const char* kQwenRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

std::string family_of(const ModelConfig& c) {
  for (const auto& s : shapes())
    if (s.config.architecture_name == c.architecture_name &&
        s.config.hidden_size == c.hidden_size && s.config.vocab_size == c.vocab_size)
      return s.family;
  return c.arch == Architecture::Llama ? "r1-llama" : "qwen";
}

}  // namespace

std::vector<std::string> known_shapes() {
  std::vector<std::string> names;
  for (const auto& s : shapes()) names.push_back(s.name);
  return names;
}

ModelConfig shape_config(const std::string& name) {
  return find_shape(name).config;
}

namespace {

// The synthetic byte-level BPE vocabulary of a shape: the 256 byte tokens, merges until the
// regular part is full, then the family's special tokens. Written as tokenizer.json (+
// tokenizer_config.json) for safetensors checkpoints and as tokenizer.ggml.* for GGUF files.
struct SyntheticVocab {
  Specials specials;
  bool qwen = true;
  int n_regular = 0;
  std::vector<std::string> tokens;  // [vocab_size]: byte-level forms, then the specials' content
  std::vector<std::string> merges;  // "left right", in rank order
  bool is_special(int i) const {    // <think> and </think> are added but not special
    const std::string& t = specials.tokens[static_cast<std::size_t>(i)];
    return t != "<think>" && t != "</think>";
  }
};

SyntheticVocab synthetic_vocab(const ModelConfig& config, const std::string& family) {
  SyntheticVocab v;
  v.specials = family_specials(family);
  v.qwen = family != "r1-llama";
  const int n_special = static_cast<int>(v.specials.tokens.size());
  v.n_regular = config.vocab_size - n_special;
  if (v.n_regular < 256)
    throw Error("vocabulary of " + std::to_string(config.vocab_size) +
                " is too small for a byte-level tokenizer");
  std::vector<std::string> symbols;  // GPT-2's byte-level form of each byte
  for (int b = 0; b < 256; ++b) symbols.push_back(byte_level_char(static_cast<unsigned char>(b)));
  // Bytes in the order merges are made: space, lower-case letters, digits, punctuation, the rest.
  std::vector<int> order;
  std::set<int> seen;
  auto add = [&](int b) {
    if (seen.insert(b).second) order.push_back(b);
  };
  add(' ');
  for (int b = 'a'; b <= 'z'; ++b) add(b);
  add('\n');
  for (int b = '0'; b <= '9'; ++b) add(b);
  for (int b = 'A'; b <= 'Z'; ++b) add(b);
  for (int b = 0; b < 256; ++b) add(b);

  std::set<std::string> known(symbols.begin(), symbols.end());
  v.tokens = symbols;
  // Pairs of bytes first, then (pair, byte) combinations, until the vocabulary is full.
  const std::size_t pair_count = order.size() * order.size();
  for (std::size_t i = 0; static_cast<int>(v.tokens.size()) < v.n_regular; ++i) {
    std::string left, right;
    if (i < pair_count) {
      left = symbols[static_cast<std::size_t>(order[i / order.size()])];
      right = symbols[static_cast<std::size_t>(order[i % order.size()])];
    } else {
      const std::size_t j = i - pair_count;
      left = v.tokens[256 + j / order.size()];
      right = symbols[static_cast<std::size_t>(order[j % order.size()])];
    }
    std::string merged = left + right;
    if (!known.insert(merged).second) continue;
    v.tokens.push_back(std::move(merged));
    v.merges.push_back(left + " " + right);
  }
  for (const auto& t : v.specials.tokens) v.tokens.push_back(t);
  return v;
}

void write_tokenizer_of_family(const std::filesystem::path& dir, const ModelConfig& config,
                               const std::string& family) {
  const SyntheticVocab v = synthetic_vocab(config, family);
  const Specials& specials = v.specials;
  const int n_special = static_cast<int>(specials.tokens.size());
  const int n_regular = v.n_regular;
  json vocab = json::object();
  for (int i = 0; i < n_regular; ++i) vocab[v.tokens[static_cast<std::size_t>(i)]] = i;
  json merges = v.merges;
  json added = json::array();
  json decoder = json::object();
  for (int i = 0; i < n_special; ++i) {
    const int id = n_regular + i;
    const std::string& content = specials.tokens[static_cast<std::size_t>(i)];
    const bool special = v.is_special(i);
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
    decoder[std::to_string(id)] = {{"content", content},   {"lstrip", false},
                                   {"normalized", false},  {"rstrip", false},
                                   {"single_word", false}, {"special", special}};
  }
  const bool qwen = v.qwen;
  json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  tok["normalizer"] = qwen ? json{{"type", "NFC"}} : json(nullptr);
  tok["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", json::array({{{"type", "Split"},
                                      {"pattern", {{"Regex", qwen ? kQwenRegex : kLlama3Regex}}},
                                      {"behavior", "Isolated"},
                                      {"invert", false}},
                                     {{"type", "ByteLevel"},
                                      {"add_prefix_space", false},
                                      {"trim_offsets", false},
                                      {"use_regex", false}}})}};
  if (specials.add_bos) {
    const int bos_id = n_regular;  // the first special token
    tok["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", specials.bos}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", specials.bos}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{specials.bos, {{"id", specials.bos}, {"ids", {bos_id}}, {"tokens", {specials.bos}}}}}}};
  } else {
    tok["post_processor"] = {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", false},
                             {"use_regex", false}};
  }
  tok["decoder"] = {{"type", "ByteLevel"},
                    {"add_prefix_space", true},
                    {"trim_offsets", true},
                    {"use_regex", true}};
  tok["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", ""},
                  {"end_of_word_suffix", ""},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  // Llama-3's tokenizer takes a word that is itself a token whole.
                  {"ignore_merges", !qwen},
                  {"vocab", vocab},
                  {"merges", merges}};
  std::ofstream(dir / "tokenizer.json") << tok.dump();

  json cfg;
  cfg["add_bos_token"] = specials.add_bos;
  cfg["add_eos_token"] = false;
  cfg["added_tokens_decoder"] = decoder;
  cfg["bos_token"] = specials.bos.empty() ? json(nullptr) : json(specials.bos);
  cfg["eos_token"] = specials.eos;
  cfg["chat_template"] = specials.chat_template;
  cfg["model_max_length"] = config.max_position_embeddings;
  cfg["tokenizer_class"] = qwen ? "Qwen2Tokenizer" : "LlamaTokenizerFast";
  std::ofstream(dir / "tokenizer_config.json") << cfg.dump(2);
}

// One weight tensor of a random checkpoint: its values are uniform in center +- half_width, drawn
// in row-major order from Rng(seed), so the same seed gives the same weights in every format.
struct WeightSpec {
  std::string name;  // Hugging Face name
  std::vector<std::int64_t> shape;
  float center, half_width;
  std::uint64_t seed;
  // DeltaNet's decay rates: -exp of the uniform value (ssm_a = -exp(A_log)).
  bool neg_exp = false;
  // The next n elements of the tensor, drawn from `rng` (Rng(seed) for the first).
  void generate(Rng& rng, float* out, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) {
      const float u = static_cast<float>(rng.next() >> 40) * 0x1.0p-24f;  // [0,1)
      out[i] = center + (2.0f * u - 1.0f) * half_width;
      if (neg_exp) out[i] = -std::exp(out[i]);
    }
  }
};

// The weights of a mixture-of-experts or hybrid model (Qwen3 MoE, gpt-oss, Qwen3.5), by their
// GGUF names (llama.cpp's, shapes in Hugging Face order: [experts][out][in] for the experts'
// stacks): uniform as weight_specs draws them, DeltaNet's decay rates -exp(U(-4, 0.7)) and its
// dt biases 1 +- 0.5, gpt-oss's biases +-0.2 and sinks +-1.
std::vector<WeightSpec> arch_weight_specs(const ModelConfig& c, std::uint64_t seed) {
  const std::int64_t H = c.hidden_size, D = c.head_dim, V = c.vocab_size;
  const std::int64_t QD = c.num_heads * D, KD = c.num_kv_heads * D;
  std::vector<WeightSpec> specs;
  std::uint64_t tensor_index = 0;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float center,
                 float half_width) {
    specs.push_back(
        {name, std::move(shape), center, half_width, seed * 1000003ull + tensor_index++});
  };
  auto linear = [&](const std::string& name, std::vector<std::int64_t> shape) {
    const float in = static_cast<float>(shape.back());
    add(name, std::move(shape), 0.0f, std::sqrt(3.0f / in));
  };
  add("token_embd.weight", {V, H}, 0.0f, std::sqrt(3.0f));
  if (!c.tie_word_embeddings) linear("output.weight", {V, H});
  add("output_norm.weight", {H}, 1.0f, 0.25f);
  const bool oai = c.arch == Architecture::GptOss;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {H}, 1.0f, 0.25f);
    add(p + (c.arch == Architecture::Qwen3Moe ? "ffn_norm.weight" : "post_attention_norm.weight"),
        {H}, 1.0f, 0.25f);
    if (c.layer_kind(l) == LayerKind::DeltaNet) {
      const DeltaNetConfig& d = c.delta_net;
      const std::int64_t C = d.conv_channels(), Hv = d.v_heads, Vd = Hv * d.head_v_dim;
      linear(p + "attn_qkv.weight", {C, H});
      linear(p + "attn_gate.weight", {Vd, H});
      add(p + "ssm_conv1d.weight", {C, d.conv_kernel}, 0.0f, std::sqrt(3.0f) * 0.5f);
      add(p + "ssm_dt.bias", {Hv}, 1.0f, 0.5f);
      add(p + "ssm_a", {Hv}, -1.65f, 2.35f);  // exp's argument in [-4, 0.7]
      specs.back().neg_exp = true;
      linear(p + "ssm_beta.weight", {Hv, H});
      linear(p + "ssm_alpha.weight", {Hv, H});
      add(p + "ssm_norm.weight", {d.head_v_dim}, 1.0f, 0.25f);
      linear(p + "ssm_out.weight", {H, Vd});
    } else {
      linear(p + "attn_q.weight", {c.attention_gate ? 2 * QD : QD, H});
      linear(p + "attn_k.weight", {KD, H});
      linear(p + "attn_v.weight", {KD, H});
      linear(p + "attn_output.weight", {H, QD});
      if (oai) {
        add(p + "attn_q.bias", {QD}, 0.0f, 0.2f);
        add(p + "attn_k.bias", {KD}, 0.0f, 0.2f);
        add(p + "attn_v.bias", {KD}, 0.0f, 0.2f);
        add(p + "attn_output.bias", {H}, 0.0f, 0.2f);
        add(p + "attn_sinks.weight", {c.num_heads}, 0.0f, 1.0f);
      }
      if (c.qk_norm) {
        add(p + "attn_q_norm.weight", {D}, 1.0f, 0.25f);
        add(p + "attn_k_norm.weight", {D}, 1.0f, 0.25f);
      }
    }
    if (c.moe.experts > 0) {
      const std::int64_t E = c.moe.experts, F = c.moe.expert_ff;
      linear(p + "ffn_gate_inp.weight", {E, H});
      if (oai) add(p + "ffn_gate_inp.bias", {E}, 0.0f, 0.2f);
      linear(p + "ffn_gate_exps.weight", {E, F, H});
      linear(p + "ffn_up_exps.weight", {E, F, H});
      linear(p + "ffn_down_exps.weight", {E, H, F});
      if (oai) {
        add(p + "ffn_gate_exps.bias", {E, F}, 0.0f, 0.2f);
        add(p + "ffn_up_exps.bias", {E, F}, 0.0f, 0.2f);
        add(p + "ffn_down_exps.bias", {E, H}, 0.0f, 0.2f);
      }
      if (c.moe.shared_ff > 0) {
        const std::int64_t Fs = c.moe.shared_ff;
        add(p + "ffn_gate_inp_shexp.weight", {H}, 0.0f, std::sqrt(3.0f / static_cast<float>(H)));
        linear(p + "ffn_gate_shexp.weight", {Fs, H});
        linear(p + "ffn_up_shexp.weight", {Fs, H});
        linear(p + "ffn_down_shexp.weight", {H, Fs});
      }
    } else {
      const std::int64_t I = c.intermediate_size;
      linear(p + "ffn_gate.weight", {I, H});
      linear(p + "ffn_up.weight", {I, H});
      linear(p + "ffn_down.weight", {H, I});
    }
  }
  return specs;
}

// Weights: uniform with the variance of N(0, 1/fan_in) for linear layers, N(0,1)-like
// embeddings and norms of 1 +- 0.25 (so an engine that ignores a norm weight would fail).
std::vector<WeightSpec> weight_specs(const ModelConfig& c, std::uint64_t seed) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim, V = c.vocab_size;
  const std::int64_t QD = c.num_heads * D, KD = c.num_kv_heads * D;
  std::vector<WeightSpec> specs;
  std::uint64_t tensor_index = 0;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float center,
                 float half_width) {
    specs.push_back(
        {name, std::move(shape), center, half_width, seed * 1000003ull + tensor_index++});
  };
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    add(name, {out, in}, 0.0f, std::sqrt(3.0f / static_cast<float>(in)));
  };
  add("model.embed_tokens.weight", {V, H}, 0.0f, std::sqrt(3.0f));
  if (!c.tie_word_embeddings) linear("lm_head.weight", V, H);
  // A tied model whose final norm is all positive mostly repeats its last token (the output
  // projection is the embedding); mixed signs, as in the golden checkpoints, avoid that.
  if (c.tie_word_embeddings)
    add("model.norm.weight", {H}, 0.0f, std::sqrt(3.0f));
  else
    add("model.norm.weight", {H}, 1.0f, 0.25f);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    linear(p + "self_attn.q_proj.weight", QD, H);
    linear(p + "self_attn.k_proj.weight", KD, H);
    linear(p + "self_attn.v_proj.weight", KD, H);
    linear(p + "self_attn.o_proj.weight", H, QD);
    linear(p + "mlp.gate_proj.weight", I, H);
    linear(p + "mlp.up_proj.weight", I, H);
    linear(p + "mlp.down_proj.weight", H, I);
    add(p + "input_layernorm.weight", {H}, 1.0f, 0.25f);
    add(p + "post_attention_layernorm.weight", {H}, 1.0f, 0.25f);
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {QD}, 0.0f, 0.5f);
      add(p + "self_attn.k_proj.bias", {KD}, 0.0f, 0.5f);
      add(p + "self_attn.v_proj.bias", {KD}, 0.0f, 0.5f);
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {D}, 1.0f, 0.25f);
      add(p + "self_attn.k_norm.weight", {D}, 1.0f, 0.25f);
    }
  }
  return specs;
}

// Stores n floats as `dtype` (F32, BF16 or F16).
void store_floats(const float* v, std::size_t n, DType dtype, std::uint8_t* bytes) {
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      std::memcpy(bytes + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(bytes + 2 * i, &h, 2);
    }
  }
}

// One MXFP4 row (cols a multiple of 32) in Hugging Face's layout: per block of 32, 16 bytes of
// codes (value 2i in the low nibble of byte i, 2i + 1 in the high one) and one exponent byte.
// The codes and exponents are ggml's (quantize_row); only the nibbles' positions differ.
void hf_mxfp4_row(const float* row, std::size_t cols, std::uint8_t* blocks, std::uint8_t* scales) {
  const std::size_t nb = cols / 32;
  std::vector<std::uint8_t> q(nb * 17);
  quant::quantize_row(DType::MXFP4, row, cols, q.data());
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* g = q.data() + b * 17;
    scales[b] = g[0];
    auto code = [&](std::size_t j) { return j < 16 ? g[1 + j] & 15 : g[1 + j - 16] >> 4; };
    for (std::size_t i = 0; i < 16; ++i)
      blocks[b * 16 + i] = static_cast<std::uint8_t>(code(2 * i) | code(2 * i + 1) << 4);
  }
}

// The Hugging Face checkpoint of a mixture-of-experts or hybrid shape: the values of
// arch_weight_specs (llama.cpp's names and layout, so a seed gives the same model in both formats)
// held as the model's own text-only class holds them. The inverse of llama.cpp's converter, as
// tests/tools/gguf_to_hf.py describes it: Qwen3.5's norms stored as w - 1 and A_log = log(-a),
// its v heads grouped by k head again; gpt-oss's experts input-major with gate and up interleaved
// (or, with MXFP4, output-major *_blocks / *_scales); Qwen's routed experts as the fused
// gate_up_proj [E, 2F, H] that transformers v5 keeps (rkv also reads per-expert tensors).
std::vector<TensorToWrite> arch_hf_tensors(const ModelConfig& c, std::uint64_t seed, DType dtype) {
  const bool qwen35 = c.arch == Architecture::Qwen35 || c.arch == Architecture::Qwen35Moe;
  const bool oai = c.arch == Architecture::GptOss;
  const bool mxfp4_experts = dtype == DType::MXFP4;  // then every other matrix is bf16
  if (mxfp4_experts) dtype = DType::BF16;
  std::map<std::string, WeightSpec> spec;
  for (WeightSpec& w : arch_weight_specs(c, seed)) spec.emplace(w.name, std::move(w));
  // A whole tensor's values, in llama.cpp's layout.
  auto values = [](const WeightSpec& w) {
    std::size_t n = 1;
    for (auto d : w.shape) n *= static_cast<std::size_t>(d);
    std::vector<float> v(n);
    Rng rng(w.seed);
    w.generate(rng, v.data(), n);
    return v;
  };
  std::vector<TensorToWrite> out;
  // A tensor copied in its layout, through `transform` (on all its values) when given.
  auto copy = [&](const std::string& hf, const std::string& gguf, DType t,
                  std::function<void(std::vector<float>&)> transform = {},
                  std::vector<std::int64_t> shape = {}) {
    const WeightSpec w = spec.at(gguf);
    out.push_back({hf, t, shape.empty() ? w.shape : shape,
                   [w, t, transform, values](std::uint8_t* bytes, std::size_t) {
                     std::vector<float> v = values(w);
                     if (transform) transform(v);
                     store_floats(v.data(), v.size(), t, bytes);
                   }});
  };
  auto minus_one = [](std::vector<float>& v) {
    for (float& x : v) x -= 1.0f;
  };
  const auto norm_fix = qwen35 ? std::function<void(std::vector<float>&)>(minus_one)
                               : std::function<void(std::vector<float>&)>();
  copy("model.embed_tokens.weight", "token_embd.weight", dtype);
  if (!c.tie_word_embeddings) copy("lm_head.weight", "output.weight", dtype);
  copy("model.norm.weight", "output_norm.weight", DType::F32, norm_fix);

  // Qwen3.5's v heads: llama.cpp tiles them (GGUF block g uses k head g mod Hk), the checkpoint
  // groups them (HF block h = GGUF block (h mod r) Hk + h / r, r = Hv / Hk). Blocks of `s`
  // elements from element `first` of each of `rows` rows of `width`.
  const DeltaNetConfig& d = c.delta_net;
  auto group_v_heads = [d](std::size_t first, std::size_t s, std::size_t rows, std::size_t width) {
    return [=](std::vector<float>& v) {
      const std::size_t Hk = static_cast<std::size_t>(d.k_heads);
      const std::size_t Hv = static_cast<std::size_t>(d.v_heads), r = Hv / Hk;
      std::vector<float> src;
      for (std::size_t row = 0; row < rows; ++row) {
        float* base = v.data() + row * width + first;
        src.assign(base, base + Hv * s);
        for (std::size_t h = 0; h < Hv; ++h)
          std::copy_n(src.data() + ((h % r) * Hk + h / r) * s, s, base + h * s);
      }
    };
  };

  for (int l = 0; l < c.num_layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    const std::string p = "model.layers." + std::to_string(l) + ".";
    copy(p + "input_layernorm.weight", g + "attn_norm.weight", DType::F32, norm_fix);
    copy(p + "post_attention_layernorm.weight",
         g + (c.arch == Architecture::Qwen3Moe ? "ffn_norm.weight" : "post_attention_norm.weight"),
         DType::F32, norm_fix);
    if (c.layer_kind(l) == LayerKind::DeltaNet) {
      const std::string a = p + "linear_attn.";
      const std::size_t H = static_cast<std::size_t>(c.hidden_size);
      const std::size_t C = static_cast<std::size_t>(d.conv_channels());
      const std::size_t K = static_cast<std::size_t>(d.conv_kernel);
      const std::size_t qk = 2 * static_cast<std::size_t>(d.k_heads) * d.head_k_dim;
      const std::size_t dv = static_cast<std::size_t>(d.head_v_dim);
      const std::size_t Hv = static_cast<std::size_t>(d.v_heads);
      // The v part of qkv's rows, the conv's v channels, z's rows: blocks of dv rows.
      copy(a + "in_proj_qkv.weight", g + "attn_qkv.weight", dtype,
           group_v_heads(qk * H, dv * H, 1, C * H));
      copy(a + "in_proj_z.weight", g + "attn_gate.weight", dtype,
           group_v_heads(0, dv * H, 1, Hv * dv * H));
      // The per-head gates, the conv taps and the routers stay f32, as in the GGUF file.
      copy(a + "in_proj_b.weight", g + "ssm_beta.weight", DType::F32,
           group_v_heads(0, H, 1, Hv * H));
      copy(a + "in_proj_a.weight", g + "ssm_alpha.weight", DType::F32,
           group_v_heads(0, H, 1, Hv * H));
      copy(a + "out_proj.weight", g + "ssm_out.weight", dtype, group_v_heads(0, dv, H, Hv * dv));
      copy(a + "conv1d.weight", g + "ssm_conv1d.weight", DType::F32,
           group_v_heads(qk * K, dv * K, 1, C * K),
           {static_cast<std::int64_t>(C), 1, static_cast<std::int64_t>(K)});
      copy(a + "dt_bias", g + "ssm_dt.bias", DType::F32, group_v_heads(0, 1, 1, Hv));
      const auto grouped = group_v_heads(0, 1, 1, Hv);
      copy(a + "A_log", g + "ssm_a", DType::F32, [grouped](std::vector<float>& v) {
        for (float& x : v) x = static_cast<float>(std::log(-static_cast<double>(x)));
        grouped(v);
      });
      copy(a + "norm.weight", g + "ssm_norm.weight", DType::F32);
    } else {
      const std::string a = p + "self_attn.";
      copy(a + "q_proj.weight", g + "attn_q.weight", dtype);
      copy(a + "k_proj.weight", g + "attn_k.weight", dtype);
      copy(a + "v_proj.weight", g + "attn_v.weight", dtype);
      copy(a + "o_proj.weight", g + "attn_output.weight", dtype);
      if (oai) {
        for (const char* x : {"q", "k", "v"})
          copy(a + x + "_proj.bias", g + "attn_" + x + ".bias", DType::F32);
        copy(a + "o_proj.bias", g + "attn_output.bias", DType::F32);
        copy(a + "sinks", g + "attn_sinks.weight", DType::F32);
      }
      if (c.qk_norm) {
        copy(a + "q_norm.weight", g + "attn_q_norm.weight", DType::F32, norm_fix);
        copy(a + "k_norm.weight", g + "attn_k_norm.weight", DType::F32, norm_fix);
      }
    }
    const std::string m = p + "mlp.";
    if (c.moe.experts == 0) {
      copy(m + "gate_proj.weight", g + "ffn_gate.weight", dtype);
      copy(m + "up_proj.weight", g + "ffn_up.weight", dtype);
      copy(m + "down_proj.weight", g + "ffn_down.weight", dtype);
      continue;
    }
    const std::size_t E = static_cast<std::size_t>(c.moe.experts);
    const std::size_t F = static_cast<std::size_t>(c.moe.expert_ff);
    const std::size_t H = static_cast<std::size_t>(c.hidden_size);
    const std::int64_t e64 = c.moe.experts, f64 = c.moe.expert_ff, h64 = c.hidden_size;
    const WeightSpec gate = spec.at(g + "ffn_gate_exps.weight");
    const WeightSpec up = spec.at(g + "ffn_up_exps.weight");
    const WeightSpec down = spec.at(g + "ffn_down_exps.weight");
    const std::string ex = m + "experts.";
    if (oai) {
      copy(m + "router.weight", g + "ffn_gate_inp.weight", DType::F32);
      copy(m + "router.bias", g + "ffn_gate_inp.bias", DType::F32);
      // The biases: gate and up interleaved on the last axis.
      const WeightSpec gb = spec.at(g + "ffn_gate_exps.bias"), ub = spec.at(g + "ffn_up_exps.bias");
      out.push_back({ex + "gate_up_proj_bias",
                     DType::F32,
                     {e64, 2 * f64},
                     [gb, ub, values](std::uint8_t* bytes, std::size_t) {
                       const std::vector<float> a = values(gb), b = values(ub);
                       std::vector<float> v(2 * a.size());
                       for (std::size_t i = 0; i < a.size(); ++i) {
                         v[2 * i] = a[i];
                         v[2 * i + 1] = b[i];
                       }
                       store_floats(v.data(), v.size(), DType::F32, bytes);
                     }});
      copy(ex + "down_proj_bias", g + "ffn_down_exps.bias", DType::F32);
      if (mxfp4_experts) {
        // Output-major, blocks of 32 along the input: gate_up rows interleaved (2f gate, 2f + 1
        // up), down as llama.cpp holds it.
        const std::size_t hb = H / 32, fb = F / 32;
        auto fill_gate_up = [gate, up, E, F, H, hb](std::uint8_t* bytes, bool scales) {
          Rng rg(gate.seed), ru(up.seed);
          std::vector<float> row(H);
          std::vector<std::uint8_t> blocks(hb * 16), sc(hb);
          for (std::size_t r = 0; r < E * F; ++r)
            for (int which = 0; which < 2; ++which) {
              (which == 0 ? gate : up).generate(which == 0 ? rg : ru, row.data(), H);
              hf_mxfp4_row(row.data(), H, blocks.data(), sc.data());
              const std::size_t to = 2 * r + static_cast<std::size_t>(which);
              if (scales)
                std::copy(sc.begin(), sc.end(), bytes + to * hb);
              else
                std::copy(blocks.begin(), blocks.end(), bytes + to * hb * 16);
            }
        };
        auto fill_down = [down, E, F, H, fb](std::uint8_t* bytes, bool scales) {
          Rng rng(down.seed);
          std::vector<float> row(F);
          std::vector<std::uint8_t> blocks(fb * 16), sc(fb);
          for (std::size_t r = 0; r < E * H; ++r) {
            down.generate(rng, row.data(), F);
            hf_mxfp4_row(row.data(), F, blocks.data(), sc.data());
            if (scales)
              std::copy(sc.begin(), sc.end(), bytes + r * fb);
            else
              std::copy(blocks.begin(), blocks.end(), bytes + r * fb * 16);
          }
        };
        const std::int64_t hb64 = h64 / 32, fb64 = f64 / 32;
        out.push_back({ex + "gate_up_proj_blocks",
                       DType::F32,
                       {e64, 2 * f64, hb64, 16},
                       [fill_gate_up](std::uint8_t* b, std::size_t) { fill_gate_up(b, false); },
                       true});
        out.push_back({ex + "gate_up_proj_scales",
                       DType::F32,
                       {e64, 2 * f64, hb64},
                       [fill_gate_up](std::uint8_t* b, std::size_t) { fill_gate_up(b, true); },
                       true});
        out.push_back({ex + "down_proj_blocks",
                       DType::F32,
                       {e64, h64, fb64, 16},
                       [fill_down](std::uint8_t* b, std::size_t) { fill_down(b, false); },
                       true});
        out.push_back({ex + "down_proj_scales",
                       DType::F32,
                       {e64, h64, fb64},
                       [fill_down](std::uint8_t* b, std::size_t) { fill_down(b, true); },
                       true});
        continue;
      }
      // Float experts, input-major: gate_up [E, H, 2F] with [e, h, 2f] = gate[e, f, h] and
      // [e, h, 2f + 1] = up[e, f, h]; down [E, F, H] with [e, f, h] = down[e, h, f].
      out.push_back({ex + "gate_up_proj",
                     dtype,
                     {e64, h64, 2 * f64},
                     [gate, up, E, F, H, dtype](std::uint8_t* bytes, std::size_t) {
                       Rng rg(gate.seed), ru(up.seed);
                       std::vector<float> a(F * H), b(F * H), v(H * 2 * F);
                       const std::size_t es = dtype_size(dtype);
                       for (std::size_t e = 0; e < E; ++e) {
                         gate.generate(rg, a.data(), a.size());
                         up.generate(ru, b.data(), b.size());
                         for (std::size_t f = 0; f < F; ++f)
                           for (std::size_t h = 0; h < H; ++h) {
                             v[h * 2 * F + 2 * f] = a[f * H + h];
                             v[h * 2 * F + 2 * f + 1] = b[f * H + h];
                           }
                         store_floats(v.data(), v.size(), dtype, bytes + e * v.size() * es);
                       }
                     }});
      out.push_back({ex + "down_proj",
                     dtype,
                     {e64, f64, h64},
                     [down, E, F, H, dtype](std::uint8_t* bytes, std::size_t) {
                       Rng rng(down.seed);
                       std::vector<float> a(H * F), v(F * H);
                       const std::size_t es = dtype_size(dtype);
                       for (std::size_t e = 0; e < E; ++e) {
                         down.generate(rng, a.data(), a.size());
                         for (std::size_t h = 0; h < H; ++h)
                           for (std::size_t f = 0; f < F; ++f) v[f * H + h] = a[h * F + f];
                         store_floats(v.data(), v.size(), dtype, bytes + e * v.size() * es);
                       }
                     }});
      continue;
    }
    copy(m + "gate.weight", g + "ffn_gate_inp.weight", DType::F32);
    // Fused: gate_up [E, 2F, H], expert e's gate rows first, then its up rows; down unchanged.
    out.push_back({ex + "gate_up_proj",
                   dtype,
                   {e64, 2 * f64, h64},
                   [gate, up, E, F, H, dtype](std::uint8_t* bytes, std::size_t) {
                     Rng rg(gate.seed), ru(up.seed);
                     std::vector<float> v(2 * F * H);
                     const std::size_t es = dtype_size(dtype);
                     for (std::size_t e = 0; e < E; ++e) {
                       gate.generate(rg, v.data(), F * H);
                       up.generate(ru, v.data() + F * H, F * H);
                       store_floats(v.data(), v.size(), dtype, bytes + e * v.size() * es);
                     }
                   }});
    copy(ex + "down_proj", g + "ffn_down_exps.weight", dtype);
    if (c.moe.shared_ff > 0) {
      copy(m + "shared_expert_gate.weight", g + "ffn_gate_inp_shexp.weight", DType::F32, {},
           {1, h64});
      copy(m + "shared_expert.gate_proj.weight", g + "ffn_gate_shexp.weight", dtype);
      copy(m + "shared_expert.up_proj.weight", g + "ffn_up_shexp.weight", dtype);
      copy(m + "shared_expert.down_proj.weight", g + "ffn_down_shexp.weight", dtype);
    }
  }
  return out;
}

}  // namespace

void write_synthetic_tokenizer(const std::filesystem::path& dir, const ModelConfig& config) {
  write_tokenizer_of_family(dir, config, family_of(config));
}

void write_random_checkpoint(const std::filesystem::path& dir,
                             const RandomCheckpointOptions& options, std::FILE* log) {
  const ShapeEntry& entry = find_shape(options.shape);
  ModelConfig c = entry.config;
  // gpt-oss's checkpoints hold MXFP4 experts (and bf16 elsewhere); every other safetensors
  // checkpoint holds f32, bf16 or f16.
  const bool mxfp4 = options.dtype == DType::MXFP4 && c.arch == Architecture::GptOss;
  if ((dtype_is_quantized(options.dtype) && !mxfp4) || options.q4_k_m)
    throw Error("make-model: --dtype " +
                std::string(options.q4_k_m ? "q4_k_m" : dtype_name(options.dtype)) +
                " needs --format gguf (safetensors checkpoints hold bf16, f16 or f32 weights, "
                "and MXFP4 experts for gpt-oss)");
  std::filesystem::create_directories(dir);
  const Specials specials = family_specials(entry.family);
  auto special_id = [&](const std::string& t) {
    return special_token_id(specials, c.vocab_size, t);
  };
  c.bos_token_id = specials.bos.empty() ? special_id("<|endoftext|>") : special_id(specials.bos);
  c.eos_token_ids = {special_id(specials.eos)};
  const DType matrices = mxfp4 ? DType::BF16 : options.dtype;
  json cj = c.to_json();
  cj["torch_dtype"] = matrices == DType::F32    ? "float32"
                      : matrices == DType::BF16 ? "bfloat16"
                                                : "float16";
  if (mxfp4)
    cj["quantization_config"] = {{"quant_method", "mxfp4"},
                                 {"modules_to_not_convert",
                                  {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"}}};
  cj["rkv_random_weights"] = {{"shape", options.shape}, {"seed", options.seed}};
  std::ofstream(dir / "config.json") << cj.dump(2);
  json gen = {{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_ids}};
  std::ofstream(dir / "generation_config.json") << gen.dump(2);
  if (log) std::fprintf(log, "make-model: writing tokenizer (%d tokens)\n", c.vocab_size);
  write_tokenizer_of_family(dir, c, entry.family);

  std::vector<TensorToWrite> tensors;
  if (c.is_dense_transformer()) {
    for (const WeightSpec& w : weight_specs(c, options.seed)) {
      const DType dtype = w.shape.size() == 1 ? DType::F32 : options.dtype;
      tensors.push_back({w.name, dtype, w.shape, [=](std::uint8_t* bytes, std::size_t nbytes) {
                           const std::size_t n = nbytes / dtype_size(dtype);
                           std::vector<float> values(n);
                           Rng rng(w.seed);
                           w.generate(rng, values.data(), n);
                           store_floats(values.data(), n, dtype, bytes);
                         }});
    }
  } else {
    tensors = arch_hf_tensors(c, options.seed, options.dtype);
  }
  if (log)
    std::fprintf(log, "make-model: writing %zu tensors to %s\n", tensors.size(),
                 (dir / "model.safetensors").c_str());
  write_safetensors(dir / "model.safetensors", tensors);
}

}  // namespace rkv

namespace rkv {

namespace {

// GGUF name of a Hugging Face tensor name, and its layer (-1 for none).
std::string gguf_tensor_name(const std::string& hf, int& layer) {
  layer = -1;
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "lm_head.weight") return "output.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  const std::string prefix = "model.layers.";
  const std::size_t dot = hf.find('.', prefix.size());
  layer = std::stoi(hf.substr(prefix.size(), dot - prefix.size()));
  const std::string rest = hf.substr(dot + 1);
  static const std::pair<const char*, const char*> names[] = {
      {"self_attn.q_proj.", "attn_q."},          {"self_attn.k_proj.", "attn_k."},
      {"self_attn.v_proj.", "attn_v."},          {"self_attn.o_proj.", "attn_output."},
      {"self_attn.q_norm.", "attn_q_norm."},     {"self_attn.k_norm.", "attn_k_norm."},
      {"mlp.gate_proj.", "ffn_gate."},           {"mlp.up_proj.", "ffn_up."},
      {"mlp.down_proj.", "ffn_down."},           {"input_layernorm.", "attn_norm."},
      {"post_attention_layernorm.", "ffn_norm."}};
  for (const auto& [from, to] : names)
    if (rest.rfind(from, 0) == 0)
      return "blk." + std::to_string(layer) + "." + to + rest.substr(std::strlen(from));
  throw Error("make-model: no GGUF name for tensor " + hf);
}

// llama-quantize's use_more_bits: the first and last eighth of the layers, and every third one
// between them.
bool use_more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// Llama-3.1's rope scaling as llama.cpp's converter writes it (rope_freqs.weight): for each
// frequency theta^(-2j/d), the divisor 1 (short wavelengths), factor (long ones) or, between,
// 1 / ((1 - smooth) / factor + smooth).
std::vector<float> llama3_rope_divisors(const ModelConfig& c) {
  const auto& s = c.rope_scaling;
  const double old_len = s.original_max_position_embeddings;
  const double low_wavelen = old_len / s.low_freq_factor;
  const double high_wavelen = old_len / s.high_freq_factor;
  std::vector<float> out;
  for (int j = 0; j < c.head_dim / 2; ++j) {
    const float freq =
        1.0f / std::pow(c.rope_theta, static_cast<float>(2 * j) / static_cast<float>(c.head_dim));
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(s.factor);
    } else {
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / s.factor + smooth)));
    }
  }
  return out;
}

// llama.cpp's llama_ftype of the file (general.file_type; tools print it as the model's type).
std::uint32_t llama_file_type(const RandomCheckpointOptions& o) {
  if (o.q4_k_m) return 15;  // MOSTLY_Q4_K_M
  switch (o.dtype) {
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q8_0:
      return 7;
    case DType::Q5_0:
      return 8;
    case DType::Q4_K:
      return 14;  // MOSTLY_Q4_K_S: Q4_K throughout
    case DType::Q6_K:
      return 18;
    case DType::BF16:
      return 32;
    case DType::MXFP4:
      return 38;  // MOSTLY_MXFP4_MOE
    default:
      return 0;  // ALL_F32
  }
}

// The shape's vocabulary as llama.cpp's byte-level BPE metadata (tokenizer.ggml.model "gpt2",
// pre-tokenizer "qwen2" or "llama-bpe"), so that rkv and llama.cpp both run the file on its own.
void add_gguf_vocab(GgufWriter& g, const SyntheticVocab& v) {
  g.add_string("tokenizer.ggml.model", "gpt2");
  g.add_string("tokenizer.ggml.pre", v.qwen ? "qwen2" : "llama-bpe");
  g.add_string_array("tokenizer.ggml.tokens", v.tokens);
  std::vector<std::int32_t> types(v.tokens.size(), 1);  // llama.cpp's types: 1 normal
  for (std::size_t i = 0; i < v.specials.tokens.size(); ++i)
    types[static_cast<std::size_t>(v.n_regular) + i] =
        v.is_special(static_cast<int>(i)) ? 3 : 4;  // 3 control, 4 user-defined
  g.add_i32_array("tokenizer.ggml.token_type", types);
  g.add_string_array("tokenizer.ggml.merges", v.merges);
  auto id_of = [&](const std::string& content) {
    const int id = special_token_id(v.specials, static_cast<int>(v.tokens.size()), content);
    if (id < 0) throw Error("make-model: special token " + content + " is not in the vocabulary");
    return static_cast<std::uint32_t>(id);
  };
  if (!v.specials.bos.empty()) g.add_u32("tokenizer.ggml.bos_token_id", id_of(v.specials.bos));
  g.add_u32("tokenizer.ggml.eos_token_id", id_of(v.specials.eos));
  g.add_bool("tokenizer.ggml.add_bos_token", v.specials.add_bos);
  g.add_string("tokenizer.chat_template", v.specials.chat_template);
}

}  // namespace

DType gguf_weight_type(const std::string& gguf_name, int layer, const ModelConfig& c,
                       std::int64_t cols, DType dtype, bool q4_k_m) {
  DType t = dtype;
  if (q4_k_m) {
    const bool output =
        gguf_name == "output.weight" || (c.tie_word_embeddings && gguf_name == "token_embd.weight");
    const bool more_bits = (gguf_name.find("attn_v.weight") != std::string::npos ||
                            gguf_name.find("ffn_down") != std::string::npos) &&
                           use_more_bits(layer, c.num_layers);
    t = output || more_bits ? DType::Q6_K : DType::Q4_K;
  } else if (dtype == DType::MXFP4) {
    // MXFP4 is the experts' type (gpt-oss's files); the other matrices stay bf16.
    t = gguf_name.find("_exps.") != std::string::npos ? DType::MXFP4 : DType::BF16;
  }
  // The router, DeltaNet's conv taps and per-head gates stay f32, as llama-quantize leaves them
  // (llama.cpp's conv reads f32 taps only).
  if (gguf_name.find("ffn_gate_inp") != std::string::npos ||
      gguf_name.find("ssm_conv1d") != std::string::npos ||
      gguf_name.find("ssm_beta") != std::string::npos ||
      gguf_name.find("ssm_alpha") != std::string::npos)
    t = DType::F32;
  // Rows that are not a multiple of 256 cannot hold K-quant super-blocks: llama-quantize's
  // fallback (Q4_K -> Q5_0, Q6_K -> Q8_0).
  if (cols % 256 != 0) {
    if (t == DType::Q4_K) t = DType::Q5_0;
    if (t == DType::Q6_K) t = DType::Q8_0;
  }
  if (cols % static_cast<std::int64_t>(dtype_block_elements(t)) != 0) t = DType::F16;
  return t;
}

// The metadata llama.cpp reads for the mixture-of-experts and hybrid architectures (the keys of
// ../shared/golden/arch's files).
void add_arch_metadata(GgufWriter& g, const ModelConfig& c, const std::string& arch) {
  auto u32 = [&](const std::string& key, int v) {
    g.add_u32(arch + "." + key, static_cast<std::uint32_t>(v));
  };
  if (c.moe.experts > 0) {
    u32("expert_count", c.moe.experts);
    u32("expert_used_count", c.moe.experts_used);
    u32("expert_feed_forward_length", c.moe.expert_ff);
    if (c.moe.shared_ff > 0) u32("expert_shared_feed_forward_length", c.moe.shared_ff);
  }
  if (c.sliding_window > 0) u32("attention.sliding_window", c.sliding_window);
  if (c.rope_scaling.yarn) {
    g.add_string(arch + ".rope.scaling.type", "yarn");
    g.add_f32(arch + ".rope.scaling.factor", c.rope_scaling.factor);
    u32("rope.scaling.original_context_length", c.rope_scaling.original_max_position_embeddings);
  }
  if (c.rope_dim > 0) u32("rope.dimension_count", c.rope_dim);
  if (c.delta_net_layers() > 0) {
    const DeltaNetConfig& d = c.delta_net;
    // IMRoPE's sections (text positions make them plain RoPE), as config.json has them.
    const std::array<int, 3> sections = c.mrope_sections();
    g.add_i32_array(arch + ".rope.dimension_sections", {sections[0], sections[1], sections[2], 0});
    u32("ssm.conv_kernel", d.conv_kernel);
    u32("ssm.state_size", d.head_k_dim);
    u32("ssm.group_count", d.k_heads);
    u32("ssm.time_step_rank", d.v_heads);
    u32("ssm.inner_size", d.v_heads * d.head_v_dim);
    int interval = 0;
    while (interval < c.num_layers && c.layer_kind(interval) != LayerKind::Attention) ++interval;
    u32("full_attention_interval", interval + 1);
  }
}

void write_random_gguf(const std::filesystem::path& file, const RandomCheckpointOptions& options,
                       std::FILE* log) {
  const ShapeEntry& entry = find_shape(options.shape);
  const ModelConfig& c = entry.config;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  const std::string arch = c.arch_label();
  GgufWriter g;
  g.add_string("general.architecture", arch);
  g.add_string("general.name", "rkv random " + options.shape);
  g.add_u32("general.file_type", llama_file_type(options));
  g.add_u32(arch + ".embedding_length", static_cast<std::uint32_t>(c.hidden_size));
  g.add_u32(arch + ".block_count", static_cast<std::uint32_t>(c.num_layers));
  g.add_u32(arch + ".attention.head_count", static_cast<std::uint32_t>(c.num_heads));
  g.add_u32(arch + ".attention.head_count_kv", static_cast<std::uint32_t>(c.num_kv_heads));
  g.add_u32(arch + ".attention.key_length", static_cast<std::uint32_t>(c.head_dim));
  g.add_u32(arch + ".attention.value_length", static_cast<std::uint32_t>(c.head_dim));
  // gpt-oss's converter writes its expert size here (config.json's intermediate_size is it).
  g.add_u32(arch + ".feed_forward_length",
            static_cast<std::uint32_t>(c.arch == Architecture::GptOss ? c.moe.expert_ff
                                                                      : c.intermediate_size));
  g.add_u32(arch + ".context_length", static_cast<std::uint32_t>(c.max_position_embeddings));
  g.add_u32(arch + ".vocab_size", static_cast<std::uint32_t>(c.vocab_size));
  g.add_f32(arch + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  g.add_f32(arch + ".rope.freq_base", c.rope_theta);
  add_arch_metadata(g, c, arch);
  add_gguf_vocab(g, synthetic_vocab(c, entry.family));
  const std::size_t D = static_cast<std::size_t>(c.head_dim);
  std::map<DType, int> counts;
  const bool dense = c.is_dense_transformer();
  for (const WeightSpec& w :
       dense ? weight_specs(c, options.seed) : arch_weight_specs(c, options.seed)) {
    int layer = -1;
    const std::string name = dense ? gguf_tensor_name(w.name, layer) : w.name;
    if (!dense && name.rfind("blk.", 0) == 0) layer = std::stoi(name.substr(4));
    const std::int64_t cols = w.shape.back();
    // Vectors and biases (gpt-oss's experts' are [experts][n]) stay f32.
    const bool vector =
        w.shape.size() == 1 || (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
    const DType dtype =
        vector ? DType::F32 : gguf_weight_type(name, layer, c, cols, options.dtype, options.q4_k_m);
    ++counts[dtype];
    // llama.cpp's llama files hold the Q/K rows of each head in rotary-pair order: Hugging Face
    // row s * D/2 + j is written as row 2j + s (the loader undoes it).
    const bool permute =
        c.arch == Architecture::Llama && w.shape.size() == 2 &&
        (name.find("attn_q.") != std::string::npos || name.find("attn_k.") != std::string::npos);
    g.add_tensor(name, w.shape, dtype, [w, dtype, permute, D](std::uint8_t* bytes, std::size_t) {
      const std::size_t ncols = static_cast<std::size_t>(w.shape.back());
      std::size_t rows = 1;  // every dimension but the last (an expert stack's included)
      for (std::size_t i = 0; i + 1 < w.shape.size(); ++i)
        rows *= static_cast<std::size_t>(w.shape[i]);
      const std::size_t rb = dtype_row_bytes(dtype, ncols);
      std::vector<float> row(ncols);
      Rng rng(w.seed);
      for (std::size_t r = 0; r < rows; ++r) {
        w.generate(rng, row.data(), ncols);
        std::size_t to = r;
        if (permute) {
          const std::size_t head = r / D, i = r % D;
          to = head * D + 2 * (i % (D / 2)) + i / (D / 2);
        }
        std::uint8_t* out = bytes + to * rb;
        if (dtype_is_quantized(dtype))
          quant::quantize_row(dtype, row.data(), ncols, out);
        else
          store_floats(row.data(), ncols, dtype, out);
      }
    });
  }
  if (c.rope_scaling.llama3) {
    const std::vector<float> divisors = llama3_rope_divisors(c);
    g.add_tensor(
        "rope_freqs.weight", {static_cast<std::int64_t>(divisors.size())}, DType::F32,
        [divisors](std::uint8_t* bytes, std::size_t n) { std::memcpy(bytes, divisors.data(), n); });
    ++counts[DType::F32];
  }
  if (log) {
    std::string mix;
    for (const auto& [t, n] : counts)
      mix += (mix.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(dtype_name(t));
    std::fprintf(log, "make-model: writing %s (%s)\n", file.c_str(), mix.c_str());
  }
  g.write(file);
}

}  // namespace rkv
