// Malformed checkpoints and bad requests give clear errors that name the file and tensor, and
// never crash. Sharded checkpoints load and give the same logits as the single file.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

// A small checkpoint written by make-model's code (f32 so byte edits are easy to reason about).
fs::path tiny_checkpoint(const TempDir& dir) {
  RandomCheckpointOptions options;
  options.shape = "tiny";
  options.dtype = DType::F32;
  options.seed = 7;
  write_random_checkpoint(dir.path(), options);
  return dir.path();
}

// Rewrites model.safetensors through `edit`, which may change the list of tensors.
void rewrite_tensors(const fs::path& dir,
                     const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<std::uint8_t>> copies;
  {
    TensorStore store(dir);
    for (const auto& [name, info] : store.tensors()) {
      auto bytes = std::make_shared<std::vector<std::uint8_t>>(
          static_cast<const std::uint8_t*>(info.data),
          static_cast<const std::uint8_t*>(info.data) + info.nbytes);
      tensors.push_back({name, info.dtype, info.shape, [bytes](std::uint8_t* out, std::size_t n) {
                           std::memcpy(out, bytes->data(), std::min(n, bytes->size()));
                         }});
    }
  }
  edit(tensors);
  write_safetensors(dir / "model.safetensors", tensors);
}

std::string load_error(const fs::path& dir) {
  try {
    Model::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded without error)";
}

TEST(ModelErrors, MissingDirectoryAndConfig) {
  EXPECT_NE(load_error("/nonexistent/rkv-model").find("not a model directory"), std::string::npos);
  TempDir dir;
  EXPECT_NE(load_error(dir.path()).find("config.json: file not found"), std::string::npos);
}

TEST(ModelErrors, InvalidConfigJsonAndUnknownArchitecture) {
  TempDir dir;
  tiny_checkpoint(dir);
  std::ofstream(dir.path() / "config.json") << "{not json";
  EXPECT_NE(load_error(dir.path()).find("invalid JSON"), std::string::npos);
  std::ofstream(dir.path() / "config.json")
      << R"({"architectures": ["GPT2LMHeadModel"], "hidden_size": 8})";
  const std::string err = load_error(dir.path());
  EXPECT_NE(err.find("unsupported architecture 'GPT2LMHeadModel'"), std::string::npos) << err;
}

TEST(ModelErrors, ConfigFieldsAreValidated) {
  TempDir dir;
  tiny_checkpoint(dir);
  auto config = test::read_json(dir.path() / "config.json");
  config["num_key_value_heads"] = 3;  // 4 heads are not a multiple of 3
  std::ofstream(dir.path() / "config.json") << config.dump();
  EXPECT_NE(load_error(dir.path()).find("not a multiple of num_key_value_heads"),
            std::string::npos);
  config["num_key_value_heads"] = 2;
  config.erase("hidden_size");
  std::ofstream(dir.path() / "config.json") << config.dump();
  EXPECT_NE(load_error(dir.path()).find("missing required field 'hidden_size'"), std::string::npos);
  config["hidden_size"] = 128;
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  std::ofstream(dir.path() / "config.json") << config.dump();
  EXPECT_NE(load_error(dir.path()).find("unsupported rope_scaling type 'yarn'"), std::string::npos);
  // Floats for integer fields: a fraction is not an integer, and one beyond long long's range is
  // out of range rather than undefined behaviour (found by fuzz/config.cpp).
  config.erase("rope_scaling");
  for (const auto& [value, message] :
       {std::pair{nlohmann::json(5.2e25), "field 'hidden_size' is out of range"},
        std::pair{nlohmann::json(-1e300), "field 'hidden_size' is out of range"},
        std::pair{nlohmann::json(128.5), "field 'hidden_size' must be an integer"}}) {
    config["hidden_size"] = value;
    std::ofstream(dir.path() / "config.json") << config.dump();
    EXPECT_NE(load_error(dir.path()).find(message), std::string::npos) << value;
  }
}

TEST(ModelErrors, MissingTensorIsNamed) {
  TempDir dir;
  tiny_checkpoint(dir);
  rewrite_tensors(dir.path(), [](auto& tensors) {
    std::erase_if(tensors, [](const TensorToWrite& t) {
      return t.name == "model.layers.2.mlp.up_proj.weight";
    });
  });
  const std::string err = load_error(dir.path());
  EXPECT_NE(err.find("missing tensor model.layers.2.mlp.up_proj.weight"), std::string::npos) << err;
}

TEST(ModelErrors, WrongShapeIsNamedWithBothShapes) {
  TempDir dir;
  tiny_checkpoint(dir);
  rewrite_tensors(dir.path(), [](auto& tensors) {
    for (auto& t : tensors)
      if (t.name == "model.layers.1.self_attn.q_proj.weight") t.shape = {64, 256};
  });
  const std::string err = load_error(dir.path());
  EXPECT_NE(
      err.find(
          "model.safetensors: tensor model.layers.1.self_attn.q_proj.weight has shape [64,256], "
          "expected [128,128]"),
      std::string::npos)
      << err;
}

TEST(ModelErrors, UnsupportedDtypeTruncationAndBadHeader) {
  TempDir dir;
  tiny_checkpoint(dir);
  const fs::path file = dir.path() / "model.safetensors";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Truncated: the last tensor's data runs past the end of the file.
  std::ofstream(file, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 100));
  std::string err = load_error(dir.path());
  EXPECT_NE(err.find("truncated or corrupt"), std::string::npos) << err;
  // A header length larger than the file.
  std::string bad = bytes;
  const std::uint64_t huge = 1ull << 40;
  std::memcpy(bad.data(), &huge, 8);
  std::ofstream(file, std::ios::binary).write(bad.data(), static_cast<std::streamsize>(bad.size()));
  err = load_error(dir.path());
  EXPECT_NE(err.find("invalid safetensors header length"), std::string::npos) << err;
  // Too short to hold a header at all.
  std::ofstream(file, std::ios::binary).write(bytes.data(), 5);
  EXPECT_NE(load_error(dir.path()).find("truncated safetensors file"), std::string::npos);
  // An unsupported dtype, written by hand.
  const std::string header =
      R"({"model.norm.weight":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})";
  std::string out(8, '\0');
  const std::uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  out += header + "abcd";
  std::ofstream(file, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
  err = load_error(dir.path());
  EXPECT_NE(err.find("tensor model.norm.weight: unsupported dtype I8"), std::string::npos) << err;
  // A shape whose element count overflows (found by fuzz/safetensors.cpp): an error, not UB, and
  // not accepted through a size that wraps to the data_offsets' 0 bytes.
  for (const char* shape : {"[4611686018427387904,4]", "[4294967296,4294967296,0]"}) {
    const std::string h = std::string(R"({"model.norm.weight":{"dtype":"F32","shape":)") + shape +
                          R"(,"data_offsets":[0,0]}})";
    std::string o(8, '\0');
    const std::uint64_t n = h.size();
    std::memcpy(o.data(), &n, 8);
    o += h;
    std::ofstream(file, std::ios::binary).write(o.data(), static_cast<std::streamsize>(o.size()));
    err = load_error(dir.path());
    EXPECT_NE(err.find("is too large"), std::string::npos) << err;
  }
}

TEST(ModelErrors, ShardedCheckpointMatchesSingleFile) {
  const fs::path src = test::self_made_model();
  TempDir dir;
  for (const char* f : {"config.json", "generation_config.json"})
    fs::copy_file(src / f, dir.path() / f);
  // Split the tensors over two shards listed in an index.
  TensorStore store(src);
  std::vector<TensorToWrite> a, b;
  nlohmann::json weight_map;
  int i = 0;
  for (const auto& [name, info] : store.tensors()) {
    const TensorInfo copy = info;
    TensorToWrite t{name, info.dtype, info.shape,
                    [copy](std::uint8_t* out, std::size_t n) { std::memcpy(out, copy.data, n); }};
    const bool first = (i++ % 2) == 0;
    (first ? a : b).push_back(t);
    weight_map[name] =
        first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir.path() / "model-00001-of-00002.safetensors", a);
  write_safetensors(dir.path() / "model-00002-of-00002.safetensors", b);
  std::ofstream(dir.path() / "model.safetensors.index.json")
      << nlohmann::json{{"weight_map", weight_map}}.dump();

  auto single = Model::load(src);
  auto sharded = Model::load(dir.path());
  ThreadPool pool(1);
  ForwardScratch scratch;
  const int V = single->config().vocab_size;
  std::vector<float> la(V), lb(V);
  const std::vector<int> ids = {1, 5, 9, 200};
  KvCache ca(single->cache_shape(8, 0)), cb(sharded->cache_shape(8, 0));
  prefill(*single, ca, ids, 0, 16, scratch, pool, la.data());
  prefill(*sharded, cb, ids, 0, 16, scratch, pool, lb.data());
  EXPECT_EQ(la, lb);

  fs::remove(dir.path() / "model-00002-of-00002.safetensors");
  EXPECT_NE(load_error(dir.path()).find("shard model-00002-of-00002.safetensors is missing"),
            std::string::npos);
}

TEST(ModelErrors, BadRequestsLeaveTheCacheUntouched) {
  TempDir dir;
  auto model = Model::load(tiny_checkpoint(dir));
  ThreadPool pool(1);
  ForwardScratch scratch;
  KvCache cache(model->cache_shape(4, 0));
  std::vector<float> logits(static_cast<std::size_t>(model->config().vocab_size));
  ForwardRow bad{&cache, 99999, 0, true};
  EXPECT_THROW(model->forward({&bad, 1}, scratch, pool, logits.data()), Error);
  EXPECT_EQ(cache.length(0), 0);
  std::vector<ForwardRow> too_many;
  for (int i = 0; i < 5; ++i) too_many.push_back({&cache, 3, i, false});
  EXPECT_THROW(model->forward(too_many, scratch, pool, nullptr), Error);
  EXPECT_EQ(cache.length(0), 0);

  EngineOptions options;
  options.context_size = 8;
  Request long_prompt;
  long_prompt.prompt_ids.assign(8, 3);
  long_prompt.decode_text = false;
  try {
    generate_alone(*model, pool, long_prompt, options);
    FAIL() << "a prompt longer than the context must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit the context of 8 tokens"),
              std::string::npos);
  }
  Request empty;
  empty.decode_text = false;
  EXPECT_THROW(generate_alone(*model, pool, empty, options), Error);
}

}  // namespace
}  // namespace rkv
