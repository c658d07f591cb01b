// GGUF files: the reader's validation (malformed files built here), the model and the
// SentencePiece-style vocabulary against llama.cpp's goldens on a real trained model
// (../shared/golden/gguf: karpathy's stories260K; tolerances from its README), and a GGUF written
// here from a safetensors checkpoint giving the same logits as the checkpoint itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/quant.h"
#include "engine/steering.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "model/safetensors.h"
#include "rkv/chat_template.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

// ---- a GGUF writer for the tests ---------------------------------------------------------------

void put_u32(std::string& s, std::uint32_t v) {
  s.append(reinterpret_cast<const char*>(&v), 4);
}
void put_u64(std::string& s, std::uint64_t v) {
  s.append(reinterpret_cast<const char*>(&v), 8);
}
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

struct GgufBuilder {
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::string data;
    std::optional<std::uint64_t> offset;  // default: packed, aligned
    bool write = true;                    // false: the info only, no data in the file
  };
  std::uint32_t version = 3;
  std::string kv;  // encoded entries
  std::uint64_t n_kv = 0;
  std::vector<Tensor> tensors;
  std::size_t alignment = 32;

  void add_u32(const std::string& key, std::uint32_t v) {
    put_str(kv, key);
    put_u32(kv, 4);
    put_u32(kv, v);
    ++n_kv;
  }
  void add_f32(const std::string& key, float v) {
    put_str(kv, key);
    put_u32(kv, 6);
    kv.append(reinterpret_cast<const char*>(&v), 4);
    ++n_kv;
  }
  void add_str(const std::string& key, const std::string& v) {
    put_str(kv, key);
    put_u32(kv, 8);
    put_str(kv, v);
    ++n_kv;
  }
  void add_str_array(const std::string& key, const std::vector<std::string>& v) {
    put_str(kv, key);
    put_u32(kv, 9);
    put_u32(kv, 8);
    put_u64(kv, v.size());
    for (const auto& e : v) put_str(kv, e);
    ++n_kv;
  }
  void add_i32_array(const std::string& key, const std::vector<std::int32_t>& v) {
    put_str(kv, key);
    put_u32(kv, 9);
    put_u32(kv, 5);
    put_u64(kv, v.size());
    for (std::int32_t e : v) kv.append(reinterpret_cast<const char*>(&e), 4);
    ++n_kv;
  }
  void add_bool(const std::string& key, bool v) {
    put_str(kv, key);
    put_u32(kv, 7);
    kv += static_cast<char>(v ? 1 : 0);
    ++n_kv;
  }
  void add_f32_tensor(const std::string& name, std::vector<std::uint64_t> dims,
                      const std::vector<float>& values) {
    std::string data(values.size() * 4, '\0');
    std::memcpy(data.data(), values.data(), data.size());
    tensors.push_back({name, std::move(dims), 0, std::move(data), std::nullopt});
  }

  std::string build() const {
    std::string s = "GGUF";
    put_u32(s, version);
    put_u64(s, tensors.size());
    put_u64(s, n_kv);
    s += kv;
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (const auto& t : tensors) {
      put_str(s, t.name);
      put_u32(s, static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) put_u64(s, d);
      put_u32(s, t.type);
      const std::uint64_t at = t.offset.value_or(offset);
      put_u64(s, at);
      offsets.push_back(at);
      offset = (at + t.data.size() + alignment - 1) / alignment * alignment;
    }
    while (s.size() % alignment != 0) s += '\0';
    const std::size_t data_start = s.size();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].write) continue;
      if (s.size() < data_start + offsets[i]) s.resize(data_start + offsets[i], '\0');
      if (s.size() == data_start + offsets[i]) s += tensors[i].data;
    }
    return s;
  }
};

// A small valid file: two metadata entries and two f32 tensors.
GgufBuilder small_file() {
  GgufBuilder b;
  b.add_str("general.architecture", "llama");
  b.add_u32("llama.block_count", 1);
  b.add_f32_tensor("a", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.add_f32_tensor("b", {3}, {9, 10, 11});
  return b;
}

// The message of the rkv::Error that opening `bytes` as a GGUF file throws ("" if none).
std::string gguf_error(const test::TempDir& dir, const std::string& bytes,
                       const std::string& name = "bad.gguf") {
  const auto path = dir.write(name, bytes);
  try {
    GgufFile file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufReader, ReadsMetadataAndTensors) {
  test::TempDir dir("gguf");
  const auto path = dir.write("ok.gguf", small_file().build());
  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count"), 1u);
  EXPECT_FALSE(f.get_uint("llama.missing").has_value());
  EXPECT_THROW(f.get_uint("general.architecture"), Error);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* a = f.find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dims, (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(a->nbytes, 32u);
  float v[8];
  std::memcpy(v, a->data, 32);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[7], 8.0f);
  const GgufTensor* b = f.find_tensor("b");
  ASSERT_NE(b, nullptr);
  std::memcpy(v, b->data, 12);
  EXPECT_EQ(v[2], 11.0f);
  EXPECT_EQ(b->offset % 32, 0u);
}

TEST(GgufReader, EveryTruncationIsAClearError) {
  test::TempDir dir("gguf");
  const std::string bytes = small_file().build();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string msg = gguf_error(dir, bytes.substr(0, n));
    ASSERT_FALSE(msg.empty()) << "a file cut to " << n << " of " << bytes.size()
                              << " bytes was accepted";
    EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                msg.find("impossible in a file") != std::string::npos)
        << "cut to " << n << ": " << msg;
  }
}

TEST(GgufReader, MalformedHeadersAreNamed) {
  test::TempDir dir("gguf");
  const std::string good = small_file().build();

  std::string bad = good;
  std::memcpy(bad.data(), "GGML", 4);
  EXPECT_NE(gguf_error(dir, bad).find("not a GGUF file (it begins with 'GGML'"), std::string::npos);

  GgufBuilder b = small_file();
  b.version = 99;
  EXPECT_NE(gguf_error(dir, b.build()).find("unsupported GGUF version 99"), std::string::npos);
  b.version = 1;
  EXPECT_NE(gguf_error(dir, b.build()).find("unsupported GGUF version 1"), std::string::npos);

  // Absurd tensor count (bytes 8..15) and metadata count (16..23).
  bad = good;
  const std::uint64_t huge = std::uint64_t{1} << 60;
  std::memcpy(bad.data() + 8, &huge, 8);
  EXPECT_NE(gguf_error(dir, bad).find("tensor count 1152921504606846976 is impossible"),
            std::string::npos);
  bad = good;
  std::memcpy(bad.data() + 16, &huge, 8);
  EXPECT_NE(gguf_error(dir, bad).find("metadata count"), std::string::npos);

  // Absurd string length: the first key's length (bytes 24..31).
  bad = good;
  const std::uint64_t long_len = std::uint64_t{1} << 62;
  std::memcpy(bad.data() + 24, &long_len, 8);
  EXPECT_NE(gguf_error(dir, bad).find("runs past the end of the file"), std::string::npos)
      << gguf_error(dir, bad);

  // Absurd array length and unknown value type.
  GgufBuilder arr;
  put_str(arr.kv, "tokenizer.ggml.tokens");
  put_u32(arr.kv, 9);
  put_u32(arr.kv, 8);
  put_u64(arr.kv, std::uint64_t{1} << 40);
  arr.n_kv = 1;
  EXPECT_NE(gguf_error(dir, arr.build()).find("the array 'tokenizer.ggml.tokens' claims"),
            std::string::npos);
  GgufBuilder nested;
  put_str(nested.kv, "x");
  put_u32(nested.kv, 9);
  put_u32(nested.kv, 9);
  put_u64(nested.kv, 1);
  nested.n_kv = 1;
  EXPECT_NE(gguf_error(dir, nested.build()).find("array of arrays"), std::string::npos);
  GgufBuilder vt;
  put_str(vt.kv, "x");
  put_u32(vt.kv, 77);
  put_u32(vt.kv, 0);
  vt.n_kv = 1;
  EXPECT_NE(gguf_error(dir, vt.build()).find("unknown value type 77"), std::string::npos);

  GgufBuilder dup = small_file();
  dup.add_u32("llama.block_count", 2);
  EXPECT_NE(gguf_error(dir, dup.build()).find("'llama.block_count' appears twice"),
            std::string::npos);
  GgufBuilder align = small_file();
  align.add_u32("general.alignment", 3);
  EXPECT_NE(gguf_error(dir, align.build()).find("power of two"), std::string::npos);
}

TEST(GgufReader, MalformedTensorInfosAreNamed) {
  test::TempDir dir("gguf");
  GgufBuilder b = small_file();
  b.tensors[1].type = 1234;
  EXPECT_NE(gguf_error(dir, b.build()).find("tensor b has unknown ggml type 1234"),
            std::string::npos);

  b = small_file();
  b.tensors[1].offset = 1 << 20;
  b.tensors[1].write = false;
  std::string msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("tensor b: its data (12 bytes at offset 1048576) lies outside"),
            std::string::npos)
      << msg;

  // The last tensor's data cut short by the end of the file.
  const std::string full = small_file().build();
  msg = gguf_error(dir, full.substr(0, full.size() - 1));
  EXPECT_NE(msg.find("tensor b: its data"), std::string::npos) << msg;

  b = small_file();
  b.tensors[1].offset = 8;
  msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("not a multiple of the 32-byte alignment"), std::string::npos) << msg;

  b = small_file();
  b.tensors[1].dims = {3, 4};  // 48 bytes from offset 32 reach into nothing
  b.tensors[0].dims = {4, 4};  // 64 bytes from offset 0 overlap b at 32
  b.tensors[1].data.resize(48);
  b.tensors[1].offset = 32;
  msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;

  b = small_file();
  b.tensors[0].dims = {std::uint64_t{1} << 40, std::uint64_t{1} << 40};
  msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("tensor a: its dimensions overflow"), std::string::npos) << msg;

  b = small_file();
  b.tensors[0].dims = {2, 2, 2, 2, 2};
  msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("has 5 dimensions"), std::string::npos) << msg;

  b = small_file();
  b.tensors[0].type = 8;  // Q8_0: 4 columns are not a block of 32
  msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("not a multiple of its block of 32"), std::string::npos) << msg;

  b = small_file();
  b.tensors[1].name = "a";
  msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("tensor a appears twice"), std::string::npos) << msg;
}

// ---- model-level errors on files built here ----------------------------------------------------

// A complete one-layer llama GGUF (random values), so that one thing at a time can be broken.
GgufBuilder tiny_llama(const std::string& arch = "llama") {
  GgufBuilder b;
  const std::uint64_t H = 8, I = 12, V = 6, heads = 2, kv_heads = 1, D = H / heads;
  b.add_str("general.architecture", arch);
  b.add_u32(arch + ".embedding_length", H);
  b.add_u32(arch + ".block_count", 1);
  b.add_u32(arch + ".attention.head_count", heads);
  b.add_u32(arch + ".attention.head_count_kv", kv_heads);
  b.add_u32(arch + ".feed_forward_length", I);
  b.add_u32(arch + ".context_length", 64);
  b.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  b.add_str("tokenizer.ggml.model", "llama");
  b.add_str_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>",
                                            "\xE2\x96\x81"
                                            "a",
                                            "b", "c"});
  std::uint32_t seed = 1;
  auto values = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
    }
    return v;
  };
  b.add_f32_tensor("token_embd.weight", {H, V}, values(H * V));
  b.add_f32_tensor("output_norm.weight", {H}, values(H));
  b.add_f32_tensor("blk.0.attn_q.weight", {H, heads * D}, values(H * heads * D));
  b.add_f32_tensor("blk.0.attn_k.weight", {H, kv_heads * D}, values(H * kv_heads * D));
  b.add_f32_tensor("blk.0.attn_v.weight", {H, kv_heads * D}, values(H * kv_heads * D));
  b.add_f32_tensor("blk.0.attn_output.weight", {heads * D, H}, values(H * heads * D));
  b.add_f32_tensor("blk.0.attn_norm.weight", {H}, values(H));
  b.add_f32_tensor("blk.0.ffn_gate.weight", {H, I}, values(H * I));
  b.add_f32_tensor("blk.0.ffn_up.weight", {H, I}, values(H * I));
  b.add_f32_tensor("blk.0.ffn_down.weight", {I, H}, values(H * I));
  b.add_f32_tensor("blk.0.ffn_norm.weight", {H}, values(H));
  return b;
}

std::string model_error(const test::TempDir& dir, const std::string& bytes) {
  const auto path = dir.write("model.gguf", bytes);
  try {
    Model::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufModel, TinyFileLoadsWithTiedOutput) {
  test::TempDir dir("gguf");
  const auto path = dir.write("tiny.gguf", tiny_llama().build());
  auto model = Model::load(path);
  EXPECT_EQ(model->config().hidden_size, 8);
  EXPECT_EQ(model->config().num_kv_heads, 1);
  EXPECT_EQ(model->config().head_dim, 4);
  EXPECT_EQ(model->config().vocab_size, 6);
  EXPECT_TRUE(model->config().tie_word_embeddings);
  KvCache cache(model->cache_shape(8, 4));
  ThreadPool pool(1);
  ForwardScratch scratch;
  std::vector<float> logits(6);
  ForwardRow row{&cache, 3, 0, true};
  model->forward({&row, 1}, scratch, pool, logits.data());
  for (float x : logits) EXPECT_TRUE(std::isfinite(x));
}

TEST(GgufModel, BadModelsAreRefusedClearly) {
  test::TempDir dir("gguf");
  EXPECT_NE(
      model_error(dir, tiny_llama("gpt2").build())
          .find("unsupported GGUF architecture 'gpt2' (supported: llama, qwen2, qwen3, qwen3moe, "
                "gpt-oss, qwen35, qwen35moe)"),
      std::string::npos);

  GgufBuilder b = tiny_llama();
  b.tensors.erase(b.tensors.begin() + 4);  // blk.0.attn_v.weight
  EXPECT_NE(model_error(dir, b.build()).find("missing tensor blk.0.attn_v.weight"),
            std::string::npos);

  b = tiny_llama();
  b.tensors[2].dims = {8, 4};  // attn_q with 4 rows instead of 8
  b.tensors[2].data.resize(8 * 4 * 4);
  std::string msg = model_error(dir, b.build());
  EXPECT_NE(msg.find("tensor blk.0.attn_q.weight has dimensions [8,4], expected [8,8]"),
            std::string::npos)
      << msg;

  // A quantized type this build does not read (Q4_1): refused, naming the type and the tensor.
  b = tiny_llama();
  b.tensors[7] = {"blk.0.ffn_gate.weight", {32, 12}, 3, std::string(12 * 20, '\0'), std::nullopt};
  msg = model_error(dir, b.build());
  EXPECT_NE(
      msg.find("tensor blk.0.ffn_gate.weight has the quantized type Q4_1, which this build "
               "does not read (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4)"),
      std::string::npos)
      << msg;

  b = tiny_llama();
  b.tensors[0].type = 26;  // I32
  msg = model_error(dir, b.build());
  EXPECT_NE(msg.find("tensor token_embd.weight has type I32"), std::string::npos) << msg;

  GgufBuilder no_eps;
  no_eps.add_str("general.architecture", "llama");
  no_eps.add_u32("llama.embedding_length", 8);
  no_eps.add_u32("llama.block_count", 1);
  no_eps.add_u32("llama.attention.head_count", 2);
  no_eps.add_u32("llama.feed_forward_length", 8);
  no_eps.add_u32("llama.context_length", 8);
  msg = model_error(dir, no_eps.build());
  EXPECT_NE(msg.find("missing metadata 'llama.attention.layer_norm_rms_epsilon'"),
            std::string::npos)
      << msg;

  GgufBuilder no_arch = small_file();
  no_arch.kv.clear();
  no_arch.n_kv = 0;
  EXPECT_NE(model_error(dir, no_arch.build()).find("missing metadata 'general.architecture'"),
            std::string::npos);
}

TEST(GgufTokenizer, UnsupportedOrMissingVocabularyIsNamed) {
  test::TempDir dir("gguf");
  GgufBuilder b = small_file();
  b.add_str("tokenizer.ggml.model", "bert");
  const auto path = dir.write("v.gguf", b.build());
  try {
    Tokenizer::load(path);
    FAIL() << "a bert vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model 'bert' is not supported"),
              std::string::npos)
        << e.what();
  }
  GgufBuilder nan = small_file();
  nan.add_str("tokenizer.ggml.model", "llama");
  nan.add_str_array("tokenizer.ggml.tokens", {"<unk>", "a"});
  put_str(nan.kv, "tokenizer.ggml.scores");
  put_u32(nan.kv, 9);
  put_u32(nan.kv, 6);
  put_u64(nan.kv, 2);
  const float scores[2] = {0.0f, std::nanf("")};
  nan.kv.append(reinterpret_cast<const char*>(scores), sizeof scores);
  ++nan.n_kv;
  try {
    Tokenizer::load(dir.write("nan.gguf", nan.build()));
    FAIL() << "a NaN score was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.scores[1] (token 'a') is NaN"),
              std::string::npos)
        << e.what();
  }
  const auto none = dir.write("none.gguf", small_file().build());
  try {
    Tokenizer::load(none);
    FAIL() << "a GGUF file without a vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no vocabulary in this GGUF file"), std::string::npos)
        << e.what();
  }
}

// ---- byte-level BPE ("gpt2") vocabularies ----------------------------------------------------

// GPT-2's byte-level form of a byte (bytes_to_unicode), written independently of rkv's table.
std::string byte_level_form(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// A small gpt2 vocabulary: the 256 bytes, "ab" and "Ġa" by merges, an added token; `edit`
// changes the builder before it is written.
std::string gpt2_vocab_error(const test::TempDir& dir,
                             const std::function<void(GgufBuilder&)>& edit,
                             std::vector<std::string> extra_tokens = {}) {
  GgufBuilder b;
  b.add_str("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> tokens;
  for (int i = 0; i < 256; ++i) tokens.push_back(byte_level_form(i));
  tokens.push_back("ab");
  tokens.push_back(
      "\xC4\xA0"
      "a");
  for (auto& t : extra_tokens) tokens.push_back(std::move(t));
  b.add_str_array("tokenizer.ggml.tokens", tokens);
  edit(b);
  try {
    Tokenizer::load(dir.write("gpt2.gguf", b.build()));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufTokenizer, Gpt2VocabularyErrorsAreNamed) {
  test::TempDir dir("gguf");
  auto merges = [](std::vector<std::string> m) {
    return [m](GgufBuilder& b) {
      b.add_str("tokenizer.ggml.pre", "qwen2");
      b.add_str_array("tokenizer.ggml.merges", m);
    };
  };
  EXPECT_EQ(gpt2_vocab_error(dir, merges({"a b", "\xC4\xA0 a"})), "");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {gpt2_vocab_error(dir,
                        [](GgufBuilder& b) {
                          b.add_str("tokenizer.ggml.pre", "falcon");
                          b.add_str_array("tokenizer.ggml.merges", {"a b"});
                        }),
       "tokenizer.ggml.pre 'falcon' is not supported"},
      {gpt2_vocab_error(dir, [](GgufBuilder& b) { b.add_str("tokenizer.ggml.pre", "qwen2"); }),
       "metadata tokenizer.ggml.merges is missing"},
      {gpt2_vocab_error(dir, merges({"a b", "a b c"})),
       "tokenizer.ggml.merges[1] is not two tokens separated by one space: 'a b c'"},
      {gpt2_vocab_error(dir, merges({"ab"})), "tokenizer.ggml.merges[0] is not two tokens"},
      {gpt2_vocab_error(dir, merges({"b c"})),
       "tokenizer.ggml.merges[0] ('b c') refers to the token 'bc', which is not in "
       "tokenizer.ggml.tokens"},
      {gpt2_vocab_error(dir, merges({"a b"}), {"ab"}), "holds the same token twice"},
      {gpt2_vocab_error(dir,
                        [&](GgufBuilder& b) {
                          merges({"a b"})(b);
                          std::vector<std::int32_t> types(258, 1);
                          types[7] = 9;
                          b.add_i32_array("tokenizer.ggml.token_type", types);
                        }),
       "token 7 has unknown type 9"},
  };
  for (const auto& [message, expected] : cases)
    EXPECT_NE(message.find(expected), std::string::npos) << message << "\nexpected: " << expected;
}

// Hand-worked: with the merges "a b" then "Ġ a", " ab" splits by the pre-tokenizer into the
// word " ab" = bytes [Ġ, a, b]; rank 0 merges a+b first, leaving [Ġ, ab] (no merge joins them).
// "<x>" is a user-defined token, matched in the text; the BOS is added by the file's flag.
TEST(GgufTokenizer, Gpt2TinyVocabularyHandWorked) {
  test::TempDir dir("gguf");
  GgufBuilder b;
  b.add_str("tokenizer.ggml.model", "gpt2");
  b.add_str("tokenizer.ggml.pre", "gpt-2");
  std::vector<std::string> tokens;
  for (int i = 0; i < 256; ++i) tokens.push_back(byte_level_form(i));
  tokens.push_back("ab");  // 256
  tokens.push_back(
      "\xC4\xA0"
      "a");                 // 257
  tokens.push_back("<x>");  // 258, user-defined
  tokens.push_back("<s>");  // 259, control
  b.add_str_array("tokenizer.ggml.tokens", tokens);
  std::vector<std::int32_t> types(260, 1);
  types[258] = 4;
  types[259] = 3;
  b.add_i32_array("tokenizer.ggml.token_type", types);
  b.add_str_array("tokenizer.ggml.merges", {"a b", "\xC4\xA0 a"});
  b.add_u32("tokenizer.ggml.bos_token_id", 259);
  b.add_u32("tokenizer.ggml.eos_token_id", 259);
  b.add_bool("tokenizer.ggml.add_bos_token", true);
  const Tokenizer tok = Tokenizer::load(dir.write("t.gguf", b.build()));
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.bos_id(), 259);
  EXPECT_EQ(tok.encode(" ab", false), (std::vector<int32_t>{0x20 + 0, 256}));
  EXPECT_EQ(tok.encode(" a", false), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok.encode("ab<x> a"), (std::vector<int32_t>{259, 256, 258, 257}));
  EXPECT_TRUE(tok.is_added(258));
  EXPECT_FALSE(tok.is_special(258));
  EXPECT_TRUE(tok.is_special(259));
  EXPECT_EQ(tok.decode({256, 258, 257}), "ab<x> a");
}

// make-model's GGUF file carries the same vocabulary as its safetensors checkpoint's
// tokenizer.json: both load to the same ids, specials and chat template (Qwen2 style, and
// Llama-3 style with a BOS and whole-word lookups).
TEST(GgufTokenizer, MakeModelGgufVocabularyEqualsItsTokenizerJson) {
  test::TempDir dir("gguf-vocab");
  const std::vector<std::string> texts = {
      "",
      "Hello world, 12345 tokens!  \n\tcaf\xC3\xA9 e\xCC\x81 the quick brown fox",
      "<think>\nLet x = 3. Then 2x + 1 = 7.\n</think>\n\\boxed{7}<|im_end|>",
      "<\xEF\xBD\x9C"
      "User\xEF\xBD\x9C>hi there<\xEF\xBD\x9C"
      "Assistant\xEF\xBD\x9C>",
      "   leading spaces and trailing   ",
      "\xF0\x9F\x98\x80 emoji, \xE4\xB8\xAD\xE6\x96\x87",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbb 0000000000"};
  for (const std::string shape : {"tiny", "tiny-llama-256"}) {
    SCOPED_TRACE(shape);
    RandomCheckpointOptions o;
    o.shape = shape;
    o.dtype = DType::F32;
    write_random_checkpoint(dir.path() / shape, o);
    write_random_gguf(dir.path() / (shape + ".gguf"), o);
    const Tokenizer json_tok = Tokenizer::load(dir.path() / shape);
    const Tokenizer gguf_tok = Tokenizer::load(dir.path() / (shape + ".gguf"));
    EXPECT_EQ(gguf_tok.vocab_size(), json_tok.vocab_size());
    EXPECT_EQ(gguf_tok.bos_id(), json_tok.bos_id());
    EXPECT_EQ(gguf_tok.adds_bos(), json_tok.adds_bos());
    EXPECT_EQ(gguf_tok.eos_ids(), json_tok.eos_ids());
    EXPECT_EQ(gguf_tok.chat_template_text(), json_tok.chat_template_text());
    // A chat template's bos_token and eos_token: the config's texts, the GGUF ids' tokens.
    EXPECT_EQ(gguf_tok.bos_token(), json_tok.bos_token());
    EXPECT_EQ(gguf_tok.eos_token(), json_tok.eos_token());
    ASSERT_TRUE(json_tok.eos_token().has_value());
    const std::vector<ChatMessage> chat = {{"system", "S"}, {"user", "Hi"}};
    const ChatTemplate gguf_chat = resolve_chat_template(gguf_tok);
    ASSERT_EQ(gguf_chat.kind, ChatTemplateKind::kJinja) << gguf_chat.error;
    EXPECT_EQ(render_chat(gguf_chat, chat, true),
              render_chat(resolve_chat_template(json_tok), chat, true));
    for (int32_t id = 0; id < json_tok.vocab_size(); ++id) {
      ASSERT_EQ(gguf_tok.token_string(id), json_tok.token_string(id)) << id;
      ASSERT_EQ(gguf_tok.is_special(id), json_tok.is_special(id)) << id;
    }
    for (const auto& text : texts) {
      SCOPED_TRACE(text);
      const auto ids = json_tok.encode(text);
      EXPECT_EQ(gguf_tok.encode(text), ids);
      EXPECT_EQ(gguf_tok.decode(ids), json_tok.decode(ids));
    }
  }
}

// A real vocabulary through the GGUF path: the Qwen3 golden files (vocab.json, merges.txt, the
// added tokens of tokenizer_config.json) written as llama.cpp's converter writes them (tokens
// by id, control for special added tokens and user-defined for the others, merges as "a b",
// pre-tokenizer qwen2), then every golden case encoded to the Hugging Face ids.
TEST(GgufTokenizer, QwenGoldenCasesThroughAGgufVocabulary) {
  const fs::path shared = test::shared_dir();
  const fs::path src = shared / "golden" / "tokenizer" / "qwen3_0.6b";
  if (!fs::exists(src)) GTEST_SKIP() << "../shared (the golden files) is not beside the repository";
  const auto vocab = test::read_json(src / "vocab.json");
  const auto config = test::read_json(src / "tokenizer_config.json");
  std::vector<std::string> tokens(vocab.size());
  std::vector<std::int32_t> types(vocab.size(), 1);
  for (const auto& [text, id] : vocab.items()) tokens.at(id.get<std::size_t>()) = text;
  for (const auto& [key, value] : config["added_tokens_decoder"].items()) {
    const std::size_t id = std::stoul(key);
    if (id >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, 1);
    }
    tokens[id] = value["content"].get<std::string>();
    types[id] = value["special"].get<bool>() ? 3 : 4;
  }
  std::vector<std::string> merges;
  std::ifstream in(src / "merges.txt");
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
  GgufBuilder b;
  b.add_str("tokenizer.ggml.model", "gpt2");
  b.add_str("tokenizer.ggml.pre", "qwen2");
  b.add_str_array("tokenizer.ggml.tokens", tokens);
  b.add_i32_array("tokenizer.ggml.token_type", types);
  b.add_str_array("tokenizer.ggml.merges", merges);
  b.add_u32("tokenizer.ggml.eos_token_id", 151645);  // <|im_end|>
  b.add_bool("tokenizer.ggml.add_bos_token", false);
  test::TempDir dir("gguf-qwen");
  const Tokenizer tok = Tokenizer::load(dir.write("qwen3-vocab.gguf", b.build()));
  EXPECT_EQ(tok.vocab_size(), 151669);
  const auto golden = test::read_json(src / "golden_tokenizer.json");
  ASSERT_EQ(golden["cases"].size(), 66u);
  int index = 0;
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE("case " + std::to_string(index++) + ": " + c["text"].dump());
    const std::vector<int32_t> ids = tok.encode(c["text"].get<std::string>());
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>());
  }
}

TEST(GgufTokenizer, TinyVocabularyMergesByScoreWithByteFallback) {
  test::TempDir dir("gguf");
  GgufBuilder b;
  b.add_str("tokenizer.ggml.model", "llama");
  const std::string sp = "\xE2\x96\x81";
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int i = 0; i < 256; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", i);
    tokens.push_back(buf);
  }
  // 259: "▁", 260: "a", 261: "b", 262: "ab", 263: "▁a", 264: "▁ab"
  for (const std::string& t :
       {sp, std::string("a"), std::string("b"), std::string("ab"), sp + "a", sp + "ab"})
    tokens.push_back(t);
  b.add_str_array("tokenizer.ggml.tokens", tokens);
  put_str(b.kv, "tokenizer.ggml.scores");
  put_u32(b.kv, 9);
  put_u32(b.kv, 6);
  put_u64(b.kv, tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    // "▁a" (-1) beats "ab" (-2), so " ab" becomes "▁a" + "b" unless "▁ab" (-0.5) forms after.
    const float score = i == 262 ? -2.0f : i == 263 ? -1.0f : i == 264 ? -0.5f : -10.0f;
    b.kv.append(reinterpret_cast<const char*>(&score), 4);
  }
  ++b.n_kv;
  put_str(b.kv, "tokenizer.ggml.token_type");
  put_u32(b.kv, 9);
  put_u32(b.kv, 5);
  put_u64(b.kv, tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int32_t type = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    put_u32(b.kv, static_cast<std::uint32_t>(type));
  }
  ++b.n_kv;
  b.add_u32("tokenizer.ggml.bos_token_id", 1);
  b.add_u32("tokenizer.ggml.eos_token_id", 2);
  const Tokenizer tok = Tokenizer::load(dir.write("v.gguf", b.build()));
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{1, 264}));
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{264}));
  // "é" has no token: its two bytes; "\n" likewise.
  EXPECT_EQ(tok.encode("ba\xC3\xA9\n", false),
            (std::vector<int32_t>{259, 261, 260, 3 + 0xC3, 3 + 0xA9, 3 + 0x0A}));
  EXPECT_EQ(tok.encode("</s>ab", false), (std::vector<int32_t>{2, 264}));
  EXPECT_EQ(tok.decode({1, 264, 264}), "<s>ab ab");
  EXPECT_EQ(tok.decode({1, 264, 264}, true), "ab ab");
  EXPECT_EQ(tok.decode({259, 261, 260, 3 + 0xC3, 3 + 0xA9}), "ba\xC3\xA9");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_TRUE(tok.is_eos(2));
  EXPECT_TRUE(tok.adds_bos());
  EXPECT_EQ(tok.token_string(264), sp + "ab");
  EXPECT_EQ(tok.token_text(264), " ab");
  StreamingDecoder stream(tok);
  EXPECT_EQ(stream.push(264), " ab");
  EXPECT_EQ(stream.push(3 + 0xC3), "");
  EXPECT_EQ(stream.pending_bytes(), 1u);
  EXPECT_EQ(stream.push(3 + 0xA9), "\xC3\xA9");
}

// ---- a checkpoint written as GGUF gives the checkpoint's logits ---------------------------------

// GGUF name of a Hugging Face tensor name ("" for none).
std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "lm_head.weight") return "output.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return "";
  const std::size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  const std::pair<const char*, const char*> names[] = {
      {"self_attn.q_proj.", "attn_q."},          {"self_attn.k_proj.", "attn_k."},
      {"self_attn.v_proj.", "attn_v."},          {"self_attn.o_proj.", "attn_output."},
      {"mlp.gate_proj.", "ffn_gate."},           {"mlp.up_proj.", "ffn_up."},
      {"mlp.down_proj.", "ffn_down."},           {"input_layernorm.", "attn_norm."},
      {"post_attention_layernorm.", "ffn_norm."}};
  for (const auto& [from, to] : names)
    if (rest.rfind(from, 0) == 0) return "blk." + layer + "." + to + rest.substr(strlen(from));
  return "";
}

// The checkpoint in `dir` as a GGUF file of architecture `arch`; with `permute`, the Q/K rows
// (and biases) in llama.cpp's llama order: GGUF row 2j+s of a head is Hugging Face row s*D/2+j.
std::string gguf_from_checkpoint(const fs::path& dir, const std::string& arch, bool permute) {
  const ModelConfig c = ModelConfig::load(dir);
  const TensorStore store(dir);
  GgufBuilder b;
  b.add_str("general.architecture", arch);
  b.add_u32(arch + ".embedding_length", static_cast<std::uint32_t>(c.hidden_size));
  b.add_u32(arch + ".block_count", static_cast<std::uint32_t>(c.num_layers));
  b.add_u32(arch + ".attention.head_count", static_cast<std::uint32_t>(c.num_heads));
  b.add_u32(arch + ".attention.head_count_kv", static_cast<std::uint32_t>(c.num_kv_heads));
  b.add_u32(arch + ".attention.key_length", static_cast<std::uint32_t>(c.head_dim));
  b.add_u32(arch + ".feed_forward_length", static_cast<std::uint32_t>(c.intermediate_size));
  b.add_u32(arch + ".context_length", static_cast<std::uint32_t>(c.max_position_embeddings));
  b.add_u32(arch + ".vocab_size", static_cast<std::uint32_t>(c.vocab_size));
  b.add_f32(arch + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  b.add_f32(arch + ".rope.freq_base", c.rope_theta);
  const std::size_t D = static_cast<std::size_t>(c.head_dim);
  for (const auto& [name, t] : store.tensors()) {
    const std::string to = gguf_name(name);
    EXPECT_FALSE(to.empty()) << name;
    if (to.empty()) continue;
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(t.data, t.dtype, i);
    const bool qk =
        to.find("attn_q.") != std::string::npos || to.find("attn_k.") != std::string::npos;
    if (permute && qk) {
      const std::size_t cols = t.shape.size() == 2 ? static_cast<std::size_t>(t.shape[1]) : 1;
      const std::size_t rows = v.size() / cols;
      std::vector<float> out(v.size());
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t head = r / D, j = r % D;
        const std::size_t from = head * D + (j % 2) * (D / 2) + j / 2;
        std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(from * cols), cols,
                    out.begin() + static_cast<std::ptrdiff_t>(r * cols));
      }
      v = std::move(out);
    }
    std::vector<std::uint64_t> dims(t.shape.rbegin(), t.shape.rend());
    b.add_f32_tensor(to, dims, v);
  }
  return b.build();
}

TEST(GgufModel, CheckpointAsGgufGivesTheSameLogits) {
  const fs::path& dir = test::self_made_model();  // the tiny Qwen2 shape, f32
  auto reference = Model::load(dir);
  test::TempDir tmp("gguf");
  const std::pair<const char*, bool> variants[] = {{"qwen2", false}, {"llama", true}};
  for (const auto& [arch, permute] : variants) {
    SCOPED_TRACE(arch);
    const auto gguf_path =
        tmp.write(std::string(arch) + ".gguf", gguf_from_checkpoint(dir, arch, permute));
    auto model = Model::load(gguf_path);
    if (std::string(arch) == "qwen2") {  // same architecture, sizes and values: same fingerprint
      EXPECT_EQ(model_fingerprint(gguf_path, model->config()),
                model_fingerprint(dir, reference->config()));
    }
    const int V = model->config().vocab_size;
    ASSERT_EQ(V, reference->config().vocab_size);
    EXPECT_EQ(model->config().tie_word_embeddings, reference->config().tie_word_embeddings);
    EXPECT_TRUE(model->config().attention_bias);
    const std::vector<int32_t> ids = {5, 17, 3, 42, 8, 1, 99};
    ThreadPool pool(1);
    std::vector<float> a(ids.size() * static_cast<std::size_t>(V)), b(a.size());
    for (auto* m : {reference.get(), model.get()}) {
      KvCache cache(m->cache_shape(16, 4, KvDtype::f32));
      ForwardScratch scratch;
      std::vector<ForwardRow> rows;
      for (std::size_t i = 0; i < ids.size(); ++i)
        rows.push_back({&cache, ids[i], static_cast<int>(i), true});
      m->forward(rows, scratch, pool, m == reference.get() ? a.data() : b.data());
    }
    double diff = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i)
      diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    EXPECT_LE(diff, 1e-5) << "max |logit difference| between the checkpoint and its GGUF";
  }
  // Without the permutation, the llama file's rotary pairs differ: the logits must change (the
  // test above would not notice a loader that skipped the un-permutation otherwise).
  auto wrong = Model::load(tmp.write("wrong.gguf", gguf_from_checkpoint(dir, "llama", false)));
  const std::vector<int32_t> ids = {5, 17, 3, 42};
  ThreadPool pool(1);
  const int V = reference->config().vocab_size;
  std::vector<float> a(static_cast<std::size_t>(V)), b(a.size());
  for (auto* m : {reference.get(), wrong.get()}) {
    KvCache cache(m->cache_shape(16, 4, KvDtype::f32));
    ForwardScratch scratch;
    std::vector<ForwardRow> rows;
    for (std::size_t i = 0; i < ids.size(); ++i)
      rows.push_back({&cache, ids[i], static_cast<int>(i), i + 1 == ids.size()});
    m->forward(rows, scratch, pool, m == reference.get() ? a.data() : b.data());
  }
  double diff = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
  EXPECT_GT(diff, 1e-4);
}

// ---- quantized tensors ------------------------------------------------------------------------

// A quantized tensor whose size does not fit its block layout is refused, naming it: a row that
// is not a multiple of the block (Q4_0: 32, Q4_K and Q6_K: 256), data that the blocks of its
// dimensions would carry past the end of the file.
TEST(GgufQuantized, MalformedQuantizedTensorsAreNamed) {
  test::TempDir dir("gguf");
  const std::pair<std::uint32_t, std::uint64_t> bad_rows[] = {{2, 48}, {12, 32}, {14, 288}};
  for (const auto& [type, cols] : bad_rows) {
    GgufBuilder b = small_file();
    b.tensors[0] = {"q", {cols, 2}, type, std::string(1024, '\0'), std::nullopt};
    const std::string msg = gguf_error(dir, b.build());
    const std::string block = type == 2 ? "32" : "256";
    EXPECT_NE(msg.find("tensor q of type " + std::string(ggml_type_info(type)->name) + " has " +
                       std::to_string(cols) + " columns, not a multiple of its block of " + block),
              std::string::npos)
        << msg;
  }
  // Two rows of Q8_0 blocks need 2 x 34 bytes; the file ends 10 bytes short.
  GgufBuilder b;
  b.add_str("general.architecture", "llama");
  b.tensors.push_back({"q", {32, 2}, 8, std::string(58, '\1'), std::nullopt});
  std::string msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("tensor q: its data (68 bytes at offset 0) lies outside the file's 58 data "
                     "bytes: truncated or corrupt"),
            std::string::npos)
      << msg;
  // Q6_K's 210-byte blocks: a 256 x 3 tensor is 630 bytes.
  b.tensors[0] = {"q", {256, 3}, 14, std::string(630, '\1'), std::nullopt};
  EXPECT_EQ(gguf_error(dir, b.build()), "");
  b.tensors[0].data.resize(629);
  msg = gguf_error(dir, b.build());
  EXPECT_NE(msg.find("tensor q: its data (630 bytes at offset 0) lies outside"), std::string::npos)
      << msg;
}

// The GGUF text of a model file's metadata (the u32, f32, bool, string and array entries
// make-model writes), so a file can be rewritten with other tensors.
void copy_metadata(const GgufFile& from, GgufBuilder& to) {
  for (const auto& [key, v] : from.metadata()) {
    switch (v.type) {
      case GgufValueType::Uint32:
        to.add_u32(key, static_cast<std::uint32_t>(v.integer));
        break;
      case GgufValueType::Float32:
        to.add_f32(key, static_cast<float>(v.real));
        break;
      case GgufValueType::String:
        to.add_str(key, v.text);
        break;
      case GgufValueType::Bool:
        to.add_bool(key, v.integer != 0);
        break;
      case GgufValueType::Array:
        if (v.array_type == GgufValueType::String) {
          to.add_str_array(key, v.texts);
          break;
        }
        if (v.array_type == GgufValueType::Int32) {
          to.add_i32_array(key, std::vector<std::int32_t>(v.integers.begin(), v.integers.end()));
          break;
        }
        ADD_FAILURE() << "metadata " << key << ": an array of an unexpected type";
        break;
      default:
        ADD_FAILURE() << "metadata " << key << " of an unexpected type";
    }
  }
}

// Logits of every position of `ids` (f32 KV cache).
std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& ids) {
  const auto V = static_cast<std::size_t>(m.config().vocab_size);
  std::vector<float> out(ids.size() * V);
  KvCache cache(m.cache_shape(64, 8, KvDtype::f32));
  ForwardScratch scratch;
  ThreadPool pool(2);
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < ids.size(); ++i)
    rows.push_back({&cache, ids[i], static_cast<int>(i), true});
  m.forward(rows, scratch, pool, out.data());
  return out;
}

// make-model --format gguf: each quantized type (and the Q4_K_M mix) written, loaded, and run;
// its logits compared with the same file's weights dequantized to f32 (written here as an f32
// GGUF). The two differ only by the 8-bit activations of the quantized matmuls (bounded per
// product by the kernel tests): measured 0.66-0.72 on tiny-256's logits (spanning about 110)
// and 0.042-0.055 on tiny-llama-256's (spanning about 7.5), held to 2% of the span. The two
// shapes cover tied and untied outputs, and the llama Q/K rows put back in order while quantized. A
// weight decoded wrongly moves the logits by the weights' whole scale; the weights' own
// quantization (these files against the f32 file of the same seed) moves them by 9.5 (Q4_0), 8.2
// (Q4_K), 4.9 (Q5_0), 2.2 (Q6_K) and 0.5 (Q8_0).
TEST(GgufQuantized, MakeModelFilesMatchTheirDequantizedWeights) {
  test::TempDir dir("gguf-q");
  const std::vector<int32_t> ids = {5, 17, 3, 42, 8, 1, 99, 300, 7, 1000};
  for (const char* shape : {"tiny-256", "tiny-llama-256"})
    for (const char* dtype : {"q8_0", "q4_0", "q5_0", "q4_k", "q6_k", "q4_k_m"}) {
      SCOPED_TRACE(std::string(shape) + " " + dtype);
      const bool tied = std::string(shape) == "tiny-256";
      RandomCheckpointOptions options;
      options.shape = shape;
      options.seed = 3;
      options.q4_k_m = std::string(dtype) == "q4_k_m";
      options.dtype = options.q4_k_m ? DType::Q4_K : parse_dtype(dtype);
      const fs::path path = dir.path() / (std::string(shape) + dtype + ".gguf");
      write_random_gguf(path, options);
      const GgufFile file(path);
      // Every matrix in the requested type (tiny-256's rows are 256 or 512 long).
      for (const GgufTensor& t : file.tensors()) {
        if (t.dims.size() == 1) {
          EXPECT_STREQ(t.type->name.data(), "F32") << t.name;
          continue;
        }
        std::string want = options.q4_k_m ? "Q4_K" : std::string(dtype_name(options.dtype));
        for (auto& ch : want) ch = static_cast<char>(std::toupper(ch));
        // The output matrix (tiny-256 ties it to the embedding); use_more_bits(1, 2) for the last
        // layer's attn_v and ffn_down.
        if (options.q4_k_m &&
            (t.name == (tied ? "token_embd.weight" : "output.weight") ||
             t.name == "blk.1.attn_v.weight" || t.name == "blk.1.ffn_down.weight"))
          want = "Q6_K";
        EXPECT_EQ(std::string(t.type->name), want) << t.name;
      }
      GgufBuilder f32;
      copy_metadata(file, f32);
      for (const GgufTensor& t : file.tensors()) {
        std::vector<float> v(static_cast<std::size_t>(t.numel()));
        const auto dt = t.dims.size() == 1 ? DType::F32 : parse_dtype(t.type->name);
        const auto cols = static_cast<std::size_t>(t.dims[0]);
        for (std::size_t r = 0; r < v.size() / cols; ++r) {
          const auto* row =
              reinterpret_cast<const std::uint8_t*>(t.data) + r * dtype_row_bytes(dt, cols);
          if (dtype_is_quantized(dt))
            quant::dequantize_row(dt, row, cols, v.data() + r * cols);
          else
            std::memcpy(v.data() + r * cols, row, cols * 4);
        }
        f32.add_f32_tensor(t.name, {t.dims.begin(), t.dims.end()}, v);
      }
      const auto quantized = Model::load(path);
      const auto dequantized =
          Model::load(dir.write(std::string(shape) + dtype + "-f32.gguf", f32.build()));
      EXPECT_LT(quantized->weight_bytes() * 3, dequantized->weight_bytes());
      const auto a = all_logits(*quantized, ids), b = all_logits(*dequantized, ids);
      double diff = 0.0, lo = b[0], hi = b[0];
      for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(a[i]));
        diff = std::max(diff, std::abs(double(a[i]) - b[i]));
        lo = std::min(lo, double(b[i]));
        hi = std::max(hi, double(b[i]));
      }
      std::printf(
          "[gguf] make-model %s %s: max |logit difference| vs its dequantized f32 weights %.4g "
          "(logits span %.3g)\n",
          shape, dtype, diff, hi - lo);
      EXPECT_LE(diff, 0.02 * (hi - lo));
    }
}

// The same seed gives the same weights in both formats: make-model's f32 GGUF (GGUF names, Q/K
// rows in llama.cpp's rotary-pair order for the llama shape) gives its f32 checkpoint's logits.
TEST(GgufQuantized, MakeModelF32GgufEqualsItsCheckpoint) {
  test::TempDir dir("gguf-mm");
  const std::vector<int32_t> ids = {5, 17, 3, 42, 8, 1, 99};
  for (const char* shape : {"tiny-256", "tiny-llama-256"}) {
    SCOPED_TRACE(shape);
    RandomCheckpointOptions options;
    options.shape = shape;
    options.seed = 9;
    options.dtype = DType::F32;
    write_random_checkpoint(dir.path() / shape, options);
    const fs::path file = dir.path() / (std::string(shape) + ".gguf");
    write_random_gguf(file, options);
    const auto a = all_logits(*Model::load(dir.path() / shape), ids);
    const auto b = all_logits(*Model::load(file), ids);
    double diff = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    EXPECT_LE(diff, 1e-5);
  }
}

// gguf_weight_type on the Qwen2.5-0.5B shape, llama-quantize's Q4_K_M rule: rows of 896 hold no
// 256-element super-block, so Q4_K falls back to Q5_0 and Q6_K to Q8_0; ffn_down (rows of 4864)
// keeps K-quants, Q6_K where use_more_bits(layer, 24).
TEST(GgufQuantized, Q4KMRuleOnTheQwen25Shape) {
  const ModelConfig c = shape_config("qwen2.5-0.5b");
  auto type = [&](const std::string& name, int layer, std::int64_t cols) {
    return gguf_weight_type(name, layer, c, cols, DType::Q4_K, true);
  };
  EXPECT_EQ(type("token_embd.weight", -1, 896), DType::Q8_0);  // tied output: Q6_K -> Q8_0
  EXPECT_EQ(type("blk.0.attn_q.weight", 0, 896), DType::Q5_0);
  EXPECT_EQ(type("blk.0.attn_v.weight", 0, 896), DType::Q8_0);  // first eighth: Q6_K -> Q8_0
  EXPECT_EQ(type("blk.4.attn_v.weight", 4, 896), DType::Q5_0);
  EXPECT_EQ(type("blk.5.attn_v.weight", 5, 896), DType::Q8_0);  // (5 - 3) % 3 == 2
  EXPECT_EQ(type("blk.0.ffn_down.weight", 0, 4864), DType::Q6_K);
  EXPECT_EQ(type("blk.4.ffn_down.weight", 4, 4864), DType::Q4_K);
  EXPECT_EQ(type("blk.5.ffn_down.weight", 5, 4864), DType::Q6_K);
  EXPECT_EQ(type("blk.21.ffn_down.weight", 21, 4864), DType::Q6_K);  // last eighth
  EXPECT_EQ(type("blk.9.ffn_gate.weight", 9, 896), DType::Q5_0);
  // Single types keep their type where the block fits.
  EXPECT_EQ(gguf_weight_type("blk.0.attn_q.weight", 0, c, 896, DType::Q8_0, false), DType::Q8_0);
  EXPECT_EQ(gguf_weight_type("blk.0.attn_q.weight", 0, c, 896, DType::Q6_K, false), DType::Q8_0);
}

// ---- against llama.cpp on stories260K ----------------------------------------------------------

const char* const kGoldenFiles[] = {"stories260K-f32.gguf", "stories260K-f16.gguf",
                                    "stories260K-bf16.gguf", "stories260K-q8_0.gguf",
                                    "stories260K-q4_0.gguf"};

TEST(GgufGolden, EveryFileParses) {
  RKV_REQUIRE_SHARED(shared);
  for (const char* name : kGoldenFiles) {
    SCOPED_TRACE(name);
    const GgufFile f(shared / "golden/gguf" / name);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.tensors().size(), 48u);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), 512u);
    EXPECT_EQ(f.get_uint("llama.block_count"), 5u);
    const GgufTensor* embd = f.find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->dims, (std::vector<std::int64_t>{64, 512}));
  }
}

// The quantized files hold Q8_0 (and Q4_0) matrices next to f16 ones (ffn_down: 172 columns);
// they load with every tensor's type kept, and their vocabulary reads as the f32 file's.
TEST(GgufGolden, QuantizedFilesLoadWithTheirTypes) {
  RKV_REQUIRE_SHARED(shared);
  for (const char* name : {"stories260K-q8_0.gguf", "stories260K-q4_0.gguf"}) {
    SCOPED_TRACE(name);
    const GgufFile f(shared / "golden/gguf" / name);
    std::map<std::string, int> types;
    for (const GgufTensor& t : f.tensors()) ++types[std::string(t.type->name)];
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type->name, "F16");
    EXPECT_EQ(f.find_tensor("output.weight")->type->name, "Q8_0");
    if (std::string(name) == "stories260K-q4_0.gguf") {
      EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type->name, "Q4_0");
      EXPECT_GT(types["Q4_0"], 0);
    } else {
      EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type->name, "Q8_0");
    }
    auto model = Model::load(shared / "golden/gguf" / name);
    EXPECT_EQ(model->config().vocab_size, 512);
    EXPECT_LT(model->weight_bytes(),
              fs::file_size(shared / "golden/gguf/stories260K-f32.gguf") / 2);
    EXPECT_EQ(Tokenizer::load(shared / "golden/gguf" / name).vocab_size(), 512);
  }
}

TEST(GgufGolden, TokenizerMatchesLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  const auto golden = test::read_json(shared / "golden/gguf/tokenizer.json");
  const Tokenizer tok = Tokenizer::load(shared / "golden/gguf/stories260K-f32.gguf");
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_TRUE(tok.is_eos(2));
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    if (c["ids_with_bos"].is_null()) continue;
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids_with_bos"].get<std::vector<int32_t>>();
    const auto ids = tok.encode(text);
    EXPECT_EQ(ids, expected) << "text: \"" << text << "\"";
    // Decoding gives the text back (the space put before it is dropped again), and so does the
    // streaming decoder, with that space.
    if (text.find("<s>") == std::string::npos) {
      EXPECT_EQ(tok.decode(ids, true), text);
      StreamingDecoder stream(tok, true);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      EXPECT_EQ(streamed, " " + text);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 29);
}

int argmax(const float* v, int n) {
  return static_cast<int>(std::max_element(v, v + n) - v);
}

// The largest |logit - llama.cpp's| over the first 4 greedy steps of the three prompts of one
// golden file; the prompt ids and the 64 greedy ids are checked against llama.cpp's on the way.
double run_golden(const fs::path& shared, const std::string& name,
                  kernels::MatmulPrecision precision = kernels::MatmulPrecision::Exact,
                  kernels::AttentionPrecision attention = kernels::AttentionPrecision::Exact,
                  const std::string& golden_file = "golden.json") {
  const auto path = shared / "golden/gguf" / name;
  const auto golden = test::read_json(shared / "golden/gguf" / golden_file);
  const auto& runs = golden["models"][name];
  EXPECT_EQ(runs.size(), 3u);
  auto model = Model::load(path);
  model->set_matmul_precision(precision);
  model->set_attention_precision(attention);
  const Tokenizer tok = Tokenizer::load(path);
  const int V = model->config().vocab_size;
  EXPECT_EQ(V, 512);
  ThreadPool pool(2);
  double max_diff = 0.0;
  for (const auto& run : runs) {
    const std::string prompt = run["prompt"].get<std::string>();
    SCOPED_TRACE(name + ": " + prompt);
    const auto prompt_ids = run["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(prompt), prompt_ids);
    const auto expected = run["greedy_ids"].get<std::vector<int>>();
    const auto& step_logits = run["logits_first_steps"];
    // llama.cpp's goldens were made with an f32 K/V cache (the README): pin it, whatever the
    // weights' default cache dtype is.
    KvCache cache(model->cache_shape(128, 8, KvDtype::f32));
    ForwardScratch scratch;
    std::vector<float> logits(static_cast<std::size_t>(V));
    std::vector<ForwardRow> rows;
    for (std::size_t i = 0; i < prompt_ids.size(); ++i)
      rows.push_back({&cache, prompt_ids[i], static_cast<int>(i), i + 1 == prompt_ids.size()});
    model->forward(rows, scratch, pool, logits.data());
    std::vector<int> got;
    int pos = static_cast<int>(prompt_ids.size());
    for (std::size_t step = 0; step < expected.size(); ++step) {
      if (step < step_logits.size())
        for (int v = 0; v < V; ++v)
          max_diff = std::max(max_diff, std::abs(double(logits[static_cast<std::size_t>(v)]) -
                                                 step_logits[step][v].get<double>()));
      const int next = argmax(logits.data(), V);
      got.push_back(next);
      ForwardRow row{&cache, next, pos++, true};
      model->forward({&row, 1}, scratch, pool, logits.data());
    }
    EXPECT_EQ(got, expected) << "greedy ids differ from llama.cpp's";
  }
  // The measured agreement, for the record (docs/USAGE.md quotes it).
  std::printf("[gguf] %s: max |logit - llama.cpp's| over 3 prompts x 4 steps = %.3g\n",
              name.c_str(), max_diff);
  return max_diff;
}

TEST(GgufGolden, F32GreedyIdsAndLogitsMatchLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  const double diff = run_golden(shared, "stories260K-f32.gguf");
  EXPECT_LE(diff, 2e-2) << "max |logit - llama.cpp's| " << diff << " (README tolerance 2e-2)";
}

// golden_fa_off.json: the same runs with llama.cpp's plain f32 attention (flash attention off),
// which rkv's exact attention is; with the f32 cache llama.cpp used, the f32 file's logits agree
// to the goldens' printed digits (that README: 5.4e-5 for a float64 reference).
TEST(GgufGolden, F32MatchesLlamaCppWithFlashAttentionOff) {
  RKV_REQUIRE_SHARED(shared);
  const double diff = run_golden(shared, "stories260K-f32.gguf", kernels::MatmulPrecision::Exact,
                                 kernels::AttentionPrecision::Exact, "golden_fa_off.json");
  EXPECT_LE(diff, 1e-4) << "max |logit - llama.cpp's (flash attention off)| " << diff;
}

TEST(GgufGolden, F16GreedyIdsAndLogitsMatchLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  const double diff = run_golden(shared, "stories260K-f16.gguf");
  EXPECT_LE(diff, 5e-2) << "max |logit - llama.cpp's| " << diff << " (README tolerance 5e-2)";
}

// q8_0 and q4_0. rkv quantizes the activations to 8 bits in blocks of 32 before these products,
// as llama.cpp does (kernels.h), but its rounding noise is not llama.cpp's bit for bit: measured,
// rkv's logits lie 0.26-0.31 (q8_0) and 0.22-0.26 (q4_0) from llama.cpp's, about as far as each
// engine's activation rounding moves its own logits (and the README's float64 reference, without
// that rounding, lies up to 0.35 from llama.cpp's q8_0 logits). So these files are held to the
// README's rule for an engine that does not reproduce llama.cpp's quantization: at least 90% of
// the greedy ids (58 of 64 per prompt), counted step by step on llama.cpp's own continuation
// (teacher forcing: rkv's argmax at each step against llama.cpp's id, then llama.cpp's id fed
// in, so one early disagreement does not hide the agreement after it), and the largest logit
// difference reported (and held within the README's float64 reference's 0.35).
double run_golden_quantized(
    const fs::path& shared, const std::string& name,
    kernels::MatmulPrecision precision = kernels::MatmulPrecision::Exact,
    kernels::AttentionPrecision attention = kernels::AttentionPrecision::Exact) {
  const auto path = shared / "golden/gguf" / name;
  const auto golden = test::read_json(shared / "golden/gguf/golden.json");
  const auto& runs = golden["models"][name];
  EXPECT_EQ(runs.size(), 3u);
  auto model = Model::load(path);
  model->set_matmul_precision(precision);
  model->set_attention_precision(attention);
  const int V = model->config().vocab_size;
  ThreadPool pool(2);
  double max_diff = 0.0;
  for (const auto& run : runs) {
    const std::string prompt = run["prompt"].get<std::string>();
    SCOPED_TRACE(name + ": " + prompt);
    const auto prompt_ids = run["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = run["greedy_ids"].get<std::vector<int>>();
    const auto& step_logits = run["logits_first_steps"];
    KvCache cache(model->cache_shape(128, 8, KvDtype::f32));
    ForwardScratch scratch;
    std::vector<float> logits(static_cast<std::size_t>(V));
    std::vector<ForwardRow> rows;
    for (std::size_t i = 0; i < prompt_ids.size(); ++i)
      rows.push_back({&cache, prompt_ids[i], static_cast<int>(i), i + 1 == prompt_ids.size()});
    model->forward(rows, scratch, pool, logits.data());
    int agree = 0, prefix = -1;
    int pos = static_cast<int>(prompt_ids.size());
    for (std::size_t step = 0; step < expected.size(); ++step) {
      if (step < step_logits.size())
        for (int v = 0; v < V; ++v)
          max_diff = std::max(max_diff, std::abs(double(logits[static_cast<std::size_t>(v)]) -
                                                 step_logits[step][v].get<double>()));
      if (argmax(logits.data(), V) == expected[step])
        ++agree;
      else if (prefix < 0)
        prefix = static_cast<int>(step);
      ForwardRow row{&cache, expected[step], pos++, true};
      model->forward({&row, 1}, scratch, pool, logits.data());
    }
    std::printf(
        "[gguf] %s \"%s\": %d of 64 greedy ids equal llama.cpp's (first difference at "
        "step %d)\n",
        name.c_str(), prompt.c_str(), agree, prefix);
    EXPECT_GE(agree, 58) << "fewer than 90% of llama.cpp's greedy ids";
  }
  std::printf("[gguf] %s: max |logit - llama.cpp's| over 3 prompts x 4 steps = %.3g\n",
              name.c_str(), max_diff);
  return max_diff;
}

TEST(GgufGolden, Q8_0GreedyIdsAgreeWithLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  const double diff = run_golden_quantized(shared, "stories260K-q8_0.gguf");
  EXPECT_LE(diff, 0.35) << "max |logit - llama.cpp's| " << diff;
}

TEST(GgufGolden, Q4_0GreedyIdsAgreeWithLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  const double diff = run_golden_quantized(shared, "stories260K-q4_0.gguf");
  EXPECT_LE(diff, 0.35) << "max |logit - llama.cpp's| " << diff;
}

// bf16: prompt ids and all 64 greedy ids of every prompt equal llama.cpp's (checked here).
TEST(GgufGolden, Bf16GreedyIdsMatchLlamaCpp) {
  RKV_REQUIRE_SHARED(shared);
  run_golden(shared, "stories260K-bf16.gguf");
}

// llama.cpp's own arithmetic, for the files whose distance to its goldens is its rounding noise:
// activations rounded to the weights' 16-bit type before each product (--matmul-precision
// llamacpp) and its f16 flash attention (--attention-precision llamacpp: q, keys and values
// rounded to f16, the weighted sum of the values kept in f16; llama.cpp runs it by default on the
// CPU and casts its f32 cache to f16 for it). Which activations land next to a rounding tie
// depends on the order of every float32 sum before them, and the goldens were computed on an AVX2
// machine (a float64 emulation of llama.cpp reproduces them to 1e-4 with AVX2's summation orders
// and to 0.03-0.05 with AVX-512's). So the tolerances are asserted on rkv's AVX2 kernels, whose
// orders are those; ctest runs these tests once more with RKV_ISA=avx2 (CMakeLists.txt). On
// other kernels the figures are printed and must still beat the exact default.
bool on_avx2() {
  return kernels::active_isa() == kernels::Isa::Avx2;
}

// bf16: the README's 5e-2. The exact default lies 0.064 from llama.cpp's bf16 logits, which is
// llama.cpp's own rounding noise (its bf16 logits lie 0.0999 from its f32 ones); the bf16
// rounding of the activations alone does not reproduce it (0.073): the f16 attention is needed.
TEST(GgufGolden, Bf16WithinReadmeToleranceInLlamaCppArithmetic) {
  RKV_REQUIRE_SHARED(shared);
  const double exact = run_golden(shared, "stories260K-bf16.gguf");
  const double llamacpp =
      run_golden(shared, "stories260K-bf16.gguf", kernels::MatmulPrecision::Rounded,
                 kernels::AttentionPrecision::LlamaCpp);
  std::printf(
      "[gguf] bf16 (%s kernels): max |logit - llama.cpp's| exact %.3g, llama.cpp "
      "arithmetic %.3g\n",
      std::string(kernels::isa_name(kernels::active_isa())).c_str(), exact, llamacpp);
  EXPECT_LT(llamacpp, exact);
  if (on_avx2()) {
    EXPECT_LE(llamacpp, 5e-2) << "README tolerance for bf16";
  }
}

// f32: the f16 attention is what the remaining distance (9.4e-3, the float64 reference's too) was.
TEST(GgufGolden, F32CloserInLlamaCppArithmetic) {
  RKV_REQUIRE_SHARED(shared);
  const double exact = run_golden(shared, "stories260K-f32.gguf");
  const double llamacpp =
      run_golden(shared, "stories260K-f32.gguf", kernels::MatmulPrecision::Exact,
                 kernels::AttentionPrecision::LlamaCpp);
  std::printf(
      "[gguf] f32 (%s kernels): max |logit - llama.cpp's| exact %.3g, llama.cpp "
      "attention %.3g\n",
      std::string(kernels::isa_name(kernels::active_isa())).c_str(), exact, llamacpp);
  EXPECT_LT(llamacpp, 0.5 * exact);
}

// q8_0: the f16 ffn_down's input rounded to f16 and the f16 attention (neither alone moves the
// distance much). On AVX2, whose quantized dot products sum as llama.cpp's do (per block eight
// int32 lanes, each scaled and added by one FMA), the logits equal llama.cpp's to the 4 decimals
// the goldens keep, and every greedy id agrees (run_golden_quantized prints the counts).
TEST(GgufGolden, Q8_0CloserInLlamaCppArithmetic) {
  RKV_REQUIRE_SHARED(shared);
  const double exact = run_golden_quantized(shared, "stories260K-q8_0.gguf");
  const double llamacpp =
      run_golden_quantized(shared, "stories260K-q8_0.gguf", kernels::MatmulPrecision::Rounded,
                           kernels::AttentionPrecision::LlamaCpp);
  std::printf(
      "[gguf] q8_0 (%s kernels): max |logit - llama.cpp's| exact %.3g, llama.cpp "
      "arithmetic %.3g\n",
      std::string(kernels::isa_name(kernels::active_isa())).c_str(), exact, llamacpp);
  EXPECT_LT(llamacpp, 0.5 * exact);
  if (on_avx2()) {
    EXPECT_LE(llamacpp, 2e-4) << "llama.cpp's own arithmetic on AVX2";
  }
}

// ---- the command line ----------------------------------------------------------------------

// Issue 18's contract for a device rkv may not have: asked to run quantized weights on
// `--device cuda`, rkv either runs them or refuses with a clear error that names the device, and
// never crashes. This build has no --device option (the CUDA backend is issue 13), so the
// command line refuses it, naming it; a backend added later must keep this test passing.
TEST(GgufCli, QuantizedWeightsOnCudaRunOrAreRefusedClearly) {
  test::TempDir dir("gguf-device");
  RandomCheckpointOptions options;
  options.shape = "tiny-256";
  options.seed = 1;
  options.dtype = DType::Q8_0;
  const fs::path path = dir.path() / "q8.gguf";
  write_random_gguf(path, options);
  std::string out;
  const int code =
      test::run_command(test::rkv_binary() + " generate -m " + path.string() +
                            " --device cuda --prompt-ids 1,2,3 -n 2 --temp 0 -t 2 2>&1",
                        out);
  // The shell reports a signal as 128 + its number.
  ASSERT_GE(code, 0) << out;
  ASSERT_LT(code, 128) << "killed by a signal: " << out;
  if (code != 0) {
    EXPECT_NE(out.find("--device"), std::string::npos) << out;
  }
}

TEST(GgufCli, GenerateAndTokenizeTakeAGgufFile) {
  RKV_REQUIRE_SHARED(shared);
  const std::string file = (shared / "golden/gguf/stories260K-f32.gguf").string();
  const auto golden = test::read_json(shared / "golden/gguf/golden.json");
  const auto expected = golden["models"]["stories260K-f32.gguf"][0]["greedy_ids"];
  std::string out;
  // The README's command, with R-KV compressing (budget 64, buffer 16) as the text grows.
  ASSERT_EQ(test::run_command(test::rkv_binary() + " generate -m " + file +
                                  " -p 'Once upon a time' -n 32 --temp 0 --kv-method rkv "
                                  "--kv-budget 64 --kv-buffer 16 -t 2 2>/dev/null",
                              out),
            0);
  EXPECT_EQ(out.rfind(", there was a little girl named Lily.", 0), 0u) << out;
  // The first 32 greedy ids equal llama.cpp's (full cache: no compression before 64 entries).
  ASSERT_EQ(
      test::run_command(test::rkv_binary() + " generate -m " + file +
                            " -p 'Once upon a time' -n 32 --temp 0 --ignore-eos --print-ids -t 2 "
                            "2>/dev/null",
                        out),
      0);
  std::vector<int> want(expected.begin(), expected.begin() + 32);
  EXPECT_EQ(nlohmann::json::parse(out).get<std::vector<int>>(), want) << out;
  // The second oracle: llama2.c's run.c on the .bin files (200 steps); the GGUF file's context is
  // 128 tokens, so the first 123 generated tokens are compared, as text.
  ASSERT_EQ(
      test::run_command(test::rkv_binary() + " generate -m " + file +
                            " -p 'Once upon a time' -n 123 --temp 0 --ignore-eos -t 2 2>/dev/null",
                        out),
      0);
  std::ifstream ref_in(shared / "golden/gguf/llama2c_reference_once_upon_a_time.txt");
  const std::string ref((std::istreambuf_iterator<char>(ref_in)), std::istreambuf_iterator<char>());
  if (!out.empty() && out.back() == '\n') out.pop_back();  // generate ends its text with one
  EXPECT_GT(out.size(), 300u);
  EXPECT_EQ(ref.rfind("Once upon a time" + out, 0), 0u) << "rkv: " << out << "\nllama2.c: " << ref;
  ASSERT_EQ(
      test::run_command(
          test::rkv_binary() + " tokenize --tokenizer " + file + " --text 'Hello world' 2>&1", out),
      0);
  EXPECT_EQ(out, "[1,346,306,414,263,304,341]\n");
  // A quantized file runs too: on this prompt rkv's 32 greedy ids equal llama.cpp's (all 64 do,
  // GgufGolden.Q8_0GreedyIdsAgreeWithLlamaCpp).
  const auto expected_q8 = golden["models"]["stories260K-q8_0.gguf"][0]["greedy_ids"];
  ASSERT_EQ(
      test::run_command(test::rkv_binary() + " generate -m " +
                            (shared / "golden/gguf/stories260K-q8_0.gguf").string() +
                            " -p 'Once upon a time' -n 32 --temp 0 --ignore-eos --print-ids -t 2 "
                            "2>/dev/null",
                        out),
      0);
  std::vector<int> want_q8(expected_q8.begin(), expected_q8.begin() + 32);
  EXPECT_EQ(nlohmann::json::parse(out).get<std::vector<int>>(), want_q8) << out;
}

// ---- Llama-3.1 rope scaling -------------------------------------------------------------------

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - double(b[i])));
  return d;
}

// llama.cpp's converter (LlamaModel.generate_extra_tensors), restated: per frequency
// theta^(-2j/d) of wavelength w, the divisor 1 when w < old/high, factor when w > old/low, and
// 1 / ((1 - s) / factor + s) with s = (old / w - low) / (high - low) between.
std::vector<float> converter_rope_freqs(const ModelConfig& c) {
  const auto& r = c.rope_scaling;
  std::vector<float> out;
  for (int j = 0; j < c.head_dim / 2; ++j) {
    const double freq = std::pow(double(c.rope_theta), -2.0 * j / c.head_dim);
    const double w = 2.0 * M_PI / freq;
    const double old = r.original_max_position_embeddings;
    if (w < old / r.high_freq_factor) {
      out.push_back(1.0f);
    } else if (w > old / r.low_freq_factor) {
      out.push_back(r.factor);
    } else {
      const double s = (old / w - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1.0 - s) / r.factor + s)));
    }
  }
  return out;
}

// A copy of an f32 GGUF file's metadata and tensors, plus rope_freqs.weight = `divisors`.
std::string with_rope_freqs(const GgufFile& base, const std::vector<float>& divisors) {
  GgufBuilder b;
  copy_metadata(base, b);
  for (const auto& t : base.tensors()) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    b.add_f32_tensor(t.name, std::vector<std::uint64_t>(t.dims.begin(), t.dims.end()), v);
  }
  b.add_f32_tensor("rope_freqs.weight", {static_cast<std::uint64_t>(divisors.size())}, divisors);
  return b.build();
}

// The golden Llama-3.1-scaled checkpoint as a llama GGUF file with the converter's
// rope_freqs.weight gives the checkpoint's logits (which test_model_golden checks against
// Hugging Face); without the tensor the logits differ, so the divisors are really applied.
TEST(GgufModel, Llama3RopeScalingFromRopeFreqsMatchesTheGoldenCheckpoint) {
  const fs::path dir = test::shared_dir() / "golden" / "models" / "llama3_rope_scaled_f32";
  if (!fs::exists(dir)) GTEST_SKIP() << "../shared (the golden files) is not beside the repository";
  const auto reference = Model::load(dir);
  ASSERT_TRUE(reference->config().rope_scaling.llama3);
  const std::vector<float> divisors = converter_rope_freqs(reference->config());
  // The scaling must change some frequencies for this test to mean anything.
  ASSERT_NE(std::count(divisors.begin(), divisors.end(), 1.0f),
            static_cast<std::ptrdiff_t>(divisors.size()));
  std::vector<int32_t> ids;
  for (int i = 0; i < 60; ++i) ids.push_back((i * 37 + 11) % reference->config().vocab_size);
  const auto want = all_logits(*reference, ids);

  test::TempDir tmp("gguf-rope");
  const auto plain_path = tmp.write("plain.gguf", gguf_from_checkpoint(dir, "llama", true));
  const GgufFile plain(plain_path);
  const auto scaled = Model::load(tmp.write("scaled.gguf", with_rope_freqs(plain, divisors)));
  EXPECT_LE(max_abs_diff(all_logits(*scaled, ids), want), 1e-4);
  const auto unscaled = Model::load(plain_path);
  EXPECT_GT(max_abs_diff(all_logits(*unscaled, ids), want), 1e-3);

  // A divisor that is not positive is refused, naming the entry.
  std::vector<float> bad = divisors;
  bad[3] = 0.0f;
  try {
    Model::load(tmp.write("bad.gguf", with_rope_freqs(plain, bad)));
    FAIL() << "a zero rope_freqs divisor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_freqs.weight[3] is 0"), std::string::npos)
        << e.what();
  }
}

// make-model writes the scaling both ways (config.json's rope_scaling for safetensors, the
// rope_freqs.weight divisors for GGUF): the two files give the same logits.
TEST(GgufModel, MakeModelLlama3RopeScalingGgufEqualsItsCheckpoint) {
  test::TempDir dir("gguf-rope-mm");
  RandomCheckpointOptions o;
  o.shape = "tiny-llama3-rope";
  o.dtype = DType::F32;
  write_random_checkpoint(dir.path() / "st", o);
  write_random_gguf(dir.path() / "m.gguf", o);
  const auto st = Model::load(dir.path() / "st");
  const auto gg = Model::load(dir.path() / "m.gguf");
  ASSERT_TRUE(st->config().rope_scaling.llama3);
  ASSERT_NE(GgufFile(dir.path() / "m.gguf").find_tensor("rope_freqs.weight"), nullptr);
  std::vector<int32_t> ids;
  for (int i = 0; i < 60; ++i) ids.push_back((i * 53 + 7) % st->config().vocab_size);
  EXPECT_LE(max_abs_diff(all_logits(*st, ids), all_logits(*gg, ids)), 1e-4);
}

}  // namespace
}  // namespace rkv
