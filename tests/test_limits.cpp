// The machine-limit measurements (kernels/limits.h) and the matmul footprint bench-decode reads
// its figures against: the loops compute what they claim (so that their flop and byte counts
// are real work), and the footprint is the sum of the model's matrices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/limits.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "test_util.h"

namespace rkv {
namespace {

using kernels::Isa;

TEST(MachineLimits, EveryLoopComputesItsClosedForm) {
  int checked = 0;
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    const kernels::LimitLoops* loops = kernels::limit_loops_for(isa);
    if (loops == nullptr || !kernels::isa_supported(isa)) continue;
    SCOPED_TRACE(std::string(kernels::isa_name(isa)));
    ++checked;
    // The read loop sums every element once: each of the four quarters of 1024 holds 0..63
    // sixteen times plus 64 times its index q, so the sum is 4 * 16 * 2016 + 1024 * 64 * (0 + 1 +
    // 2 + 3) (exact in float32 partial sums); a loop that read one quarter four times, or
    // missed one, would give another.
    std::vector<float> data(4096);
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<float>(i % 64 + 64 * (i / 1024));
    EXPECT_FLOAT_EQ(loops->read_sum(data.data(), data.size()), 4.0f * 16 * 2016 + 1024.0f * 64 * 6);
    EXPECT_GT(loops->flops_per_iteration, 0.0);
    if (isa == Isa::Avx512Bf16) {
      // 12 chains of 16 lanes, chain j starting at seed + j; every iteration adds to lanes 0-7
      // the dot product of the bf16 pairs (seed, seed) . (-1e-3, -1e-3) and to lanes 8-15
      // (0.5, 0.5) . (1e-3, 1e-3), the operands rounded to bf16.
      const std::size_t n = 1000;
      const float seed = 2.0f;
      const double bs = bf16_to_f32(f32_to_bf16(seed)), b3 = bf16_to_f32(f32_to_bf16(1e-3f));
      double want = 0.0;
      for (int j = 0; j < 12; ++j) want += 16.0 * (seed + j);
      want += 12.0 * static_cast<double>(n) * (8 * 2 * bs * -b3 + 8 * 2 * 0.5 * b3);
      EXPECT_NEAR(loops->compute(n, seed), want, 1e-3 * std::abs(want));
      continue;
    }
    // The compute loop iterates x <- 0.999 x + 0.001 in every lane of every chain, chain j
    // starting at seed + j: after n steps x = 1 + 0.999^n (x0 - 1). Its result is the sum of
    // all lanes, so the lanes of a chain weigh (flops per iteration / 2 / chains).
    const std::size_t n = 1000;
    const float seed = 2.0f;
    const float got = loops->compute(n, seed);
    const int chains = isa == Isa::Reference ? 8 : 12;
    const double lanes = loops->flops_per_iteration / 2.0 / chains;
    double want = 0.0;
    for (int j = 0; j < chains; ++j) want += lanes * (1.0 + std::pow(0.999, n) * (seed + j - 1.0));
    EXPECT_NEAR(got, want, 1e-3 * want);
  }
  EXPECT_GE(checked, 1);
}

TEST(MachineLimits, MeasuresPositiveRatesOnEverySupportedIsa) {
  ThreadPool pool(2);
  for (Isa isa : {Isa::Reference, Isa::Avx2}) {
    if (!kernels::isa_supported(isa)) continue;
    const kernels::MachineLimits m =
        kernels::measure_machine_limits(pool, isa, std::size_t{8} << 20, 1);
    EXPECT_EQ(m.threads, 2);
    EXPECT_TRUE(std::isfinite(m.read_gb_per_s) && m.read_gb_per_s > 0.0);
    EXPECT_TRUE(std::isfinite(m.peak_gflop_per_s) && m.peak_gflop_per_s > 0.0);
  }
  // An instruction set this CPU lacks is an error, not a silent fallback.
  for (Isa isa : {Isa::Avx512, Isa::Avx512Bf16}) {
    if (kernels::isa_supported(isa)) continue;
    try {
      kernels::measure_machine_limits(pool, isa, 1 << 20, 1);
      ADD_FAILURE() << "measured " << kernels::isa_name(isa) << " on a CPU without it";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
    }
  }
}

TEST(MatmulFootprint, IsEveryProjectionAndTheOutputHead) {
  auto model = Model::load(test::self_made_model());  // f32
  const ModelConfig& c = model->config();
  const std::size_t h = static_cast<std::size_t>(c.hidden_size);
  const std::size_t q = static_cast<std::size_t>(c.num_heads * c.head_dim);
  const std::size_t kv = static_cast<std::size_t>(c.num_kv_heads * c.head_dim);
  const std::size_t ffn = static_cast<std::size_t>(c.intermediate_size);
  const std::size_t per_layer = q * h + 2 * kv * h + h * q + 3 * ffn * h;
  const std::size_t params = static_cast<std::size_t>(c.num_layers) * per_layer +
                             static_cast<std::size_t>(c.vocab_size) * h;
  const Model::MatmulFootprint f = model->matmul_footprint();
  EXPECT_EQ(f.params, params);
  EXPECT_EQ(f.bytes, 4 * params);
  EXPECT_EQ(f.head_params, static_cast<std::size_t>(c.vocab_size) * h);
  // The matrices are most of the checkpoint: what is left is the embedding (tied here or not)
  // and the norms and biases.
  EXPECT_LE(f.bytes, model->weight_bytes() + static_cast<std::size_t>(c.vocab_size) * h * 4);

  // Quantized weights count their blocks: a Q8_0 row of 256 values is 8 blocks of 34 bytes.
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("rkv-footprint-" + std::to_string(::getpid()) + ".gguf");
  RandomCheckpointOptions o;
  o.shape = "tiny-256";
  o.dtype = DType::Q8_0;
  write_random_gguf(file, o);
  auto q8 = Model::load(file);
  std::filesystem::remove(file);
  const Model::MatmulFootprint fq = q8->matmul_footprint();
  EXPECT_EQ(fq.bytes, fq.params / 32 * 34);
}

}  // namespace
}  // namespace rkv
