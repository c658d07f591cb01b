// The device seam on any machine: --device's parsing and resolution, the forward pass strung once
// over a backend's steps (run_forward against a recording backend), KV caches whose rows live on
// a device, and the errors where CUDA cannot run. The CUDA backend itself is tested on a GPU
// (tests/gpu, ctest label gpu).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/forward_ops.h"
#include "model/model.h"
#include "rkv/device.h"
#include "test_util.h"

namespace rkv {
namespace {

TEST(Device, ParsesItsThreeNames) {
  EXPECT_EQ(parse_device("cpu"), Device::Cpu);
  EXPECT_EQ(parse_device("cuda"), Device::Cuda);
  EXPECT_EQ(parse_device("auto"), std::nullopt);
  try {
    parse_device("gpu");
    FAIL() << "gpu parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu, cuda or auto"), std::string::npos) << e.what();
  }
  EXPECT_EQ(device_name(Device::Cuda), "cuda");
}

TEST(Device, WithoutAGpuAutoIsCpuAndCudaIsRefusedSayingWhy) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: " << cuda_summary();
  EXPECT_EQ(resolve_device(std::nullopt), Device::Cpu);
  EXPECT_EQ(resolve_device(Device::Cpu), Device::Cpu);
  try {
    resolve_device(Device::Cuda);
    FAIL() << "cuda resolved without a device";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--device cpu"), std::string::npos) << what;
    EXPECT_NE(what.find(cuda_built() ? "no CUDA device" : "built without CUDA"), std::string::npos)
        << what;
  }
  auto model = Model::load(test::self_made_model());
  EXPECT_THROW(model->use_device(Device::Cuda), Error);
  EXPECT_EQ(model->device(), Device::Cpu);  // still usable where it was
  EXPECT_FALSE(model->cache_shape(8, 0).on_device);
}

TEST(Device, TheCliRefusesCudaWhereItCannotRunWithAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: " << cuda_summary();
  std::string out;
  const std::string base = test::rkv_binary() + " generate -m " + test::self_made_model().string() +
                           " --prompt-ids 5,6,7 -n 2";
  EXPECT_EQ(test::run_command(base + " --device cuda 2>&1", out), 1) << out;
  EXPECT_NE(out.find("--device cpu"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + " --device gpu 2>&1", out), 0) << out;
  EXPECT_NE(out.find("--device"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + " --device auto 2>&1", out), 0) << out;
}

KvCacheShape device_shape() {
  KvCacheShape s;
  s.layers = 2;
  s.kv_heads = 2;
  s.q_heads = 4;
  s.head_dim = 8;
  s.capacity = 5;
  s.window = 0;
  s.dtype = KvDtype::bf16;
  s.on_device = true;
  return s;
}

TEST(KvCacheOnDevice, HoldsLengthsOnlyAndRefusesHostWrites) {
  KvCache cache(device_shape());
  EXPECT_EQ(cache.keys(0, 1).data, nullptr);
  EXPECT_EQ(cache.values(1, 0).data, nullptr);
  EXPECT_EQ(cache.positions(0, 0), nullptr);
  EXPECT_EQ(cache.device_storage(), nullptr);
  const std::vector<float> kv(16, 1.0f);
  EXPECT_THROW(cache.append(0, kv.data(), kv.data(), 0), Error);
  cache.note_device_append(0, 3);
  cache.note_device_append(1, 5);
  EXPECT_EQ(cache.length(0), 3);
  EXPECT_EQ(cache.length(1), 5);
  EXPECT_THROW(cache.note_device_append(0, 3), Error);  // 6 > capacity 5
  EXPECT_EQ(cache.length(0), 3);
  EXPECT_THROW(cache.compact(1, {{0, 1}, {0, 1}}, {}), Error);
  // The same slot size as a host cache of the shape (what admission reserves).
  KvCacheShape host = device_shape();
  host.on_device = false;
  EXPECT_EQ(KvCache::slot_bytes_for(device_shape()), KvCache::slot_bytes_for(host));
  // Storage a backend attaches is released with the cache.
  static int released = 0;
  {
    KvCache owner(device_shape());
    owner.set_device_storage(new int(7), [](void* p) {
      ++released;
      delete static_cast<int*>(p);
    });
    EXPECT_EQ(*static_cast<int*>(owner.device_storage()), 7);
  }
  EXPECT_EQ(released, 1);
  KvCacheShape windowed = device_shape();
  windowed.window = 4;
  EXPECT_THROW(KvCache{windowed}, Error);
  KvCache plain(host);
  EXPECT_THROW(plain.note_device_append(0, 1), Error);
}

// A backend that records its steps; its activations are "on a device" unless `on_host`.
class RecordingOps final : public ForwardOps {
 public:
  explicit RecordingOps(bool on_host) : on_host_(on_host) {}
  std::vector<std::string> calls;
  void begin(std::span<const ForwardRow> rows) override {
    calls.push_back("begin " + std::to_string(rows.size()));
  }
  void rms_norm(Norm norm, int layer, Act in, Act out) override {
    calls.push_back("norm" + std::to_string(static_cast<int>(norm)) + " " + std::to_string(layer) +
                    " " + std::to_string(static_cast<int>(in)) + ">" +
                    std::to_string(static_cast<int>(out)));
  }
  void project(int layer, Act in, std::span<const Product> products) override {
    std::string c = "project " + std::to_string(layer) + " " + std::to_string(static_cast<int>(in));
    for (const Product& p : products)
      c += " " + std::to_string(static_cast<int>(p.proj)) + ">" +
           std::to_string(static_cast<int>(p.out));
    calls.push_back(c);
  }
  void prepare_qkv(int layer) override { calls.push_back("qkv " + std::to_string(layer)); }
  void append_kv(int layer, std::span<const ForwardRow>) override {
    calls.push_back("append " + std::to_string(layer));
  }
  void attention(int layer, std::span<const ForwardRow>, AttentionProbs*) override {
    calls.push_back("attention " + std::to_string(layer));
  }
  void add(Act dst, Act src) override {
    calls.push_back("add " + std::to_string(static_cast<int>(dst)) + "+" +
                    std::to_string(static_cast<int>(src)));
  }
  void silu_mul() override { calls.push_back("silu"); }
  bool on_host() const override { return on_host_; }
  float* host(Act) override { return on_host_ ? &scratch_ : nullptr; }
  void logits(std::span<const ForwardRow>, Act in, float*) override {
    calls.push_back("logits " + std::to_string(static_cast<int>(in)));
  }
  void end(std::span<const ForwardRow> rows) override {
    calls.push_back("end " + std::to_string(rows.size()));
  }

 private:
  bool on_host_;
  float scratch_ = 0.0f;
};

ModelConfig two_layers() {
  ModelConfig c;
  c.num_layers = 2;
  c.vocab_size = 10;
  return c;
}

TEST(RunForward, StringsTheStepsOfEveryLayerInOrder) {
  KvCacheShape shape = device_shape();
  shape.on_device = false;
  KvCache cache(shape);
  const std::vector<ForwardRow> rows = {{&cache, 1, 0, false}, {&cache, 2, 1, true}};
  RecordingOps ops(true);
  float logits = 0.0f;
  run_forward(two_layers(), ops, rows, &logits);
  // Act: X 0, XN 1, Q 2, K 3, V 4, Attn 5, Gate 6, Up 7; Proj: Q 0 ... Down 6;
  // Norm: Input 0, Post 1, Final 2.
  std::vector<std::string> expected = {"begin 2"};
  for (const std::string l : {"0", "1"}) {
    for (const std::string& c :
         {"norm0 " + l + " 0>1", "project " + l + " 1 0>2 1>3 2>4", "qkv " + l, "append " + l,
          "attention " + l, "project " + l + " 5 3>1", std::string("add 0+1"),
          "norm1 " + l + " 0>1", "project " + l + " 1 4>6 5>7", std::string("silu"),
          "project " + l + " 6 6>1", std::string("add 0+1")})
      expected.push_back(c);
  }
  expected.push_back("norm2 0 0>1");
  expected.push_back("logits 1");
  expected.push_back("end 2");
  EXPECT_EQ(ops.calls, expected);
}

TEST(ForwardPass, TheCallerDrivesTheStepsInOrderAndReadsHostMemoryOnlyOnTheHost) {
  const ModelConfig config = two_layers();  // a pass reads the config it was given: keep it alive
  KvCacheShape shape = device_shape();
  KvCache cache(shape);
  const std::vector<ForwardRow> rows = {{&cache, 1, 0, false}};
  {
    // On a device backend the residual stream and final hidden states are not the caller's.
    RecordingOps ops(false);
    ForwardPass pass(config, ops, rows);
    EXPECT_FALSE(pass.on_host());
    pass.append_kv(0);
    pass.attend(0);
    EXPECT_EQ(pass.hidden(), nullptr);
    pass.append_kv(1);
    pass.attend(1);
    pass.finish(nullptr);
    EXPECT_EQ(pass.final_hidden(), nullptr);
    // No logits asked for: no logits step.
    EXPECT_EQ(ops.calls[ops.calls.size() - 2], "norm2 0 0>1");
    EXPECT_EQ(ops.calls.back(), "end 1");
  }
  RecordingOps ops(true);
  ForwardPass pass(config, ops, rows);
  EXPECT_TRUE(pass.on_host());
  // A step out of order is refused before it runs: attention needs the layer's keys first, and
  // a layer is finished before the next begins.
  EXPECT_THROW(pass.attend(0), Error);
  EXPECT_THROW(pass.finish(nullptr), Error);
  pass.append_kv(0);
  EXPECT_THROW(pass.append_kv(1), Error);
  pass.attend(0);
  EXPECT_NE(pass.hidden(), nullptr);
  EXPECT_EQ(pass.final_hidden(), nullptr);  // not before the final norm
  EXPECT_EQ(ops.calls.back(), "add 0+1");
}

TEST(RunForward, ValidatesTheRowsBeforeAnyStep) {
  KvCache cache(device_shape());  // capacity 5
  RecordingOps ops(false);
  const std::vector<ForwardRow> bad_token = {{&cache, 10, 0, true}};
  EXPECT_THROW(run_forward(two_layers(), ops, bad_token, nullptr), Error);
  std::vector<ForwardRow> too_many;
  for (int i = 0; i < 6; ++i) too_many.push_back({&cache, 1, i, false});
  EXPECT_THROW(run_forward(two_layers(), ops, too_many, nullptr), Error);
  EXPECT_TRUE(ops.calls.empty());
}

}  // namespace
}  // namespace rkv
