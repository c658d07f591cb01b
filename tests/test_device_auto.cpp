// --device auto on a machine with a GPU, pretended by the test seam RKV_TEST_FAKE_CUDA_DEVICES
// (rkv/device.h): it picks the GPU only for what the CUDA backend runs (fullkv, no steering, no
// q8_0 cache, exact attention) and the CPU otherwise, saying which and why; the README's
// quickstart (R-KV) then runs unchanged on the CPU. Without the seam and without a GPU, auto is
// the CPU and says nothing, as it always did.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"
#include "rkv/compression.h"
#include "rkv/device.h"
#include "test_util.h"

namespace rkv {
namespace {

// Sets RKV_TEST_FAKE_CUDA_DEVICES for a scope, and puts back what was there.
class FakeCudaDevices {
 public:
  explicit FakeCudaDevices(const char* count) {
    if (const char* old = std::getenv(kName)) old_ = old;
    ::setenv(kName, count, 1);
  }
  ~FakeCudaDevices() {
    if (old_)
      ::setenv(kName, old_->c_str(), 1);
    else
      ::unsetenv(kName);
  }
  FakeCudaDevices(const FakeCudaDevices&) = delete;
  FakeCudaDevices& operator=(const FakeCudaDevices&) = delete;

 private:
  static constexpr const char* kName = "RKV_TEST_FAKE_CUDA_DEVICES";
  std::optional<std::string> old_;
};

// A run of one method, as the commands describe it (the method's record says if it compresses).
DeviceNeeds method(const std::string& name) {
  DeviceNeeds needs;
  if (method_info(name).compresses) needs.compressing_methods = {name};
  return needs;
}

TEST(DeviceAuto, WithAGpuReportedPresentPicksTheCpuForRkvAndTheGpuForFullkv) {
  const FakeCudaDevices gpu("1");
  ASSERT_EQ(cuda_device_count(), 1);

  const DeviceChoice rkv = choose_device(std::nullopt, method("rkv"));
  EXPECT_EQ(rkv.device, Device::Cpu);
  EXPECT_EQ(rkv.note,
            "device: cpu (auto: the CUDA backend runs fullkv only; --kv-method rkv runs on the "
            "CPU)");
  EXPECT_EQ(resolve_device(std::nullopt, method("rkv")), Device::Cpu);

  const DeviceChoice fullkv = choose_device(std::nullopt, method("fullkv"));
  EXPECT_EQ(fullkv.device, Device::Cuda);
  EXPECT_NE(fullkv.note.find("device: cuda (auto:"), std::string::npos) << fullkv.note;
  EXPECT_EQ(resolve_device(std::nullopt), Device::Cuda);  // nothing asked: fullkv

  // Every setting the backend lacks sends auto to the CPU, naming it.
  DeviceNeeds several;
  several.compressing_methods = {"snapkv"};  // rkv eval --methods fullkv,snapkv
  EXPECT_EQ(choose_device(std::nullopt, several).device, Device::Cpu);
  EXPECT_NE(choose_device(std::nullopt, several).note.find("--kv-method snapkv"),
            std::string::npos);
  DeviceNeeds steering = method("fullkv");
  steering.steering = true;
  EXPECT_EQ(choose_device(std::nullopt, steering).device, Device::Cpu);
  EXPECT_NE(choose_device(std::nullopt, steering).note.find("--steering"), std::string::npos);
  DeviceNeeds q8 = method("fullkv");
  q8.kv_dtype = KvDtype::q8_0;
  EXPECT_EQ(choose_device(std::nullopt, q8).device, Device::Cpu);
  EXPECT_NE(choose_device(std::nullopt, q8).note.find("q8_0"), std::string::npos);
  DeviceNeeds bf16 = method("fullkv");
  bf16.kv_dtype = KvDtype::bf16;
  EXPECT_EQ(choose_device(std::nullopt, bf16).device, Device::Cuda);
  DeviceNeeds llamacpp = method("fullkv");
  llamacpp.llamacpp_attention = true;
  EXPECT_EQ(choose_device(std::nullopt, llamacpp).device, Device::Cpu);
  // rkv serve: each request may pick any method, so auto serves on the CPU.
  DeviceNeeds serve;
  serve.per_request_settings = true;
  EXPECT_EQ(choose_device(std::nullopt, serve).device, Device::Cpu);
  EXPECT_NE(choose_device(std::nullopt, serve).note.find("--device cuda"), std::string::npos);

  // A named device is what was asked for, whatever the run needs, and says nothing.
  EXPECT_EQ(choose_device(Device::Cpu, method("fullkv")).device, Device::Cpu);
  EXPECT_EQ(choose_device(Device::Cpu, method("fullkv")).note, "");
  EXPECT_EQ(choose_device(Device::Cuda, method("rkv")).device, Device::Cuda);
  EXPECT_EQ(device_refusal(Device::Cpu, steering), "");
}

TEST(DeviceAuto, WithoutAGpuAutoIsTheCpuAndSaysNothing) {
  const FakeCudaDevices none("0");
  EXPECT_EQ(cuda_device_count(), 0);
  for (const DeviceNeeds& needs : {method("rkv"), method("fullkv"), DeviceNeeds{}}) {
    const DeviceChoice choice = choose_device(std::nullopt, needs);
    EXPECT_EQ(choice.device, Device::Cpu);
    EXPECT_EQ(choice.note, "");
  }
  EXPECT_THROW(resolve_device(Device::Cuda), Error);
}

// The README's quickstart (scripts/quickstart.sh) on a machine where a GPU is reported: auto
// runs R-KV on the CPU, says so in one line, and prints what it prints without a GPU.
TEST(DeviceAuto, TheQuickstartRunsOnTheCpuWhenAGpuIsReported) {
  const std::filesystem::path model = test::shipped_model_dir();
  const std::string quickstart = test::rkv_binary() + " generate -m " + model.string() + " -f " +
                                 (model / "example_prompt.txt").string() +
                                 " -n 1024 --temp 0 --kv-method rkv --kv-budget 224 "
                                 "--kv-buffer 16";
  const std::string err = testing::TempDir() + "device_auto_stderr.txt";
  std::string plain, with_gpu, log;
  ASSERT_EQ(test::run_command("RKV_TEST_FAKE_CUDA_DEVICES=0 " + quickstart + " 2>/dev/null", plain),
            0);
  ASSERT_EQ(test::run_command("RKV_TEST_FAKE_CUDA_DEVICES=1 " + quickstart + " 2>" + err, with_gpu),
            0);
  EXPECT_EQ(with_gpu, plain);
  EXPECT_NE(plain.find("\\boxed{3}"), std::string::npos) << plain;
  test::run_command("cat " + err, log);
  EXPECT_NE(log.find("rkv: device: cpu (auto: the CUDA backend runs fullkv only; --kv-method rkv "
                     "runs on the CPU)"),
            std::string::npos)
      << log;
  // Without a GPU the line is not there: a CPU-only machine prints what it always printed.
  ASSERT_EQ(
      test::run_command("RKV_TEST_FAKE_CUDA_DEVICES=0 " + quickstart + " 2>&1 >/dev/null", log), 0);
  EXPECT_EQ(log.find("device:"), std::string::npos) << log;
}

// fullkv with a pretend GPU: auto chooses cuda, but nothing runs there: moving the model to the
// pretend device is refused (no backend in this build, or no device for the CUDA runtime), and
// auto then runs on the CPU, saying why.
TEST(DeviceAuto, APretendGpuRunsNothingAndAutoFallsBackToTheCpu) {
  const std::string base = test::rkv_binary() + " generate -m " + test::self_made_model().string() +
                           " --prompt-ids 5,6,7 -n 2 --temp 0 --print-ids";
  std::string plain, faked;
  ASSERT_EQ(test::run_command("RKV_TEST_FAKE_CUDA_DEVICES=0 " + base + " 2>/dev/null", plain), 0);
  ASSERT_EQ(test::run_command("RKV_TEST_FAKE_CUDA_DEVICES=1 " + base + " 2>&1", faked), 0) << faked;
  EXPECT_NE(faked.find("rkv: device: cpu (auto: the CUDA backend cannot take this model"),
            std::string::npos)
      << faked;
  EXPECT_NE(faked.find(plain), std::string::npos) << faked;  // the same ids, from the CPU
  // Named, the pretend device is refused with the reason, never run.
  ASSERT_EQ(
      test::run_command("RKV_TEST_FAKE_CUDA_DEVICES=1 " + base + " --device cuda 2>&1", faked), 1)
      << faked;
  EXPECT_NE(faked.find(cuda_built() ? "CUDA error" : "built without CUDA"), std::string::npos)
      << faked;
}

}  // namespace
}  // namespace rkv
