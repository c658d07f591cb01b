#include "kernels/limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "core/error.h"

namespace rkv::kernels {

#if defined(__x86_64__)
const LimitLoops* limit_loops_avx2();
const LimitLoops* limit_loops_avx512();
const LimitLoops* limit_loops_avx512bf16();
#else
static const LimitLoops* limit_loops_avx2() {
  return nullptr;
}
static const LimitLoops* limit_loops_avx512() {
  return nullptr;
}
static const LimitLoops* limit_loops_avx512bf16() {
  return nullptr;
}
#endif

namespace {

float read_sum_reference(const float* p, std::size_t n) {
  float s[8] = {};
  for (std::size_t i = 0; i < n; i += 8)
    for (std::size_t j = 0; j < 8; ++j) s[j] += p[i + j];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

float compute_reference(std::size_t iterations, float seed) {
  float a[8];
  for (int j = 0; j < 8; ++j) a[j] = seed + static_cast<float>(j);
  const float m = 0.999f, c = 1e-3f;
  for (std::size_t i = 0; i < iterations; ++i)
    for (float& x : a) x = x * m + c;
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

constexpr LimitLoops kReference{&read_sum_reference, &compute_reference, 16.0,
                                "scalar f32 multiply-add"};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const LimitLoops* limit_loops_for(Isa isa) {
  switch (isa) {
    case Isa::Reference:
      return &kReference;
    case Isa::Avx2:
      return limit_loops_avx2();
    case Isa::Avx512:
      return limit_loops_avx512();
    case Isa::Avx512Bf16:
      return limit_loops_avx512bf16();
  }
  return nullptr;
}

MachineLimits measure_machine_limits(ThreadPool& pool, Isa isa, std::size_t read_bytes,
                                     int repetitions) {
  const LimitLoops* loops = limit_loops_for(isa);
  if (loops == nullptr || !isa_supported(isa))
    throw Error("cannot measure machine limits with " + std::string(isa_name(isa)) +
                ": not supported on this CPU or build");
  MachineLimits out;
  out.threads = pool.size();
  out.isa = isa;
  out.compute_name = loops->compute_name;
  const std::size_t threads = static_cast<std::size_t>(pool.size());
  // Each thread streams its own contiguous slice (a multiple of 64 floats), as the GEMV's row
  // split does; the buffer is written first so that every page is mapped before timing.
  const std::size_t per_thread =
      std::max<std::size_t>(read_bytes / sizeof(float) / threads / 64, 1) * 64;
  std::vector<float> buffer(per_thread * threads);
  pool.parallel_for(threads, [&](std::size_t t) {
    std::fill(buffer.begin() + static_cast<std::ptrdiff_t>(t * per_thread),
              buffer.begin() + static_cast<std::ptrdiff_t>((t + 1) * per_thread), 1e-6f);
  });
  std::vector<float> sink(threads);
  double best_read = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(threads, [&](std::size_t t) {
      sink[t] += loops->read_sum(buffer.data() + t * per_thread, per_thread);
    });
    best_read = std::min(best_read, seconds_since(t0));
  }
  out.read_gb_per_s = static_cast<double>(buffer.size() * sizeof(float)) / best_read / 1e9;
  // The compute loop: long enough (tens of milliseconds) that thread start-up does not count.
  const std::size_t iterations = std::size_t{1} << 22;
  double best_compute = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(threads, [&](std::size_t t) {
      sink[t] += loops->compute(iterations, static_cast<float>(t) + sink[t] * 1e-30f);
    });
    best_compute = std::min(best_compute, seconds_since(t0));
  }
  out.peak_gflop_per_s = static_cast<double>(iterations) * loops->flops_per_iteration *
                         static_cast<double>(threads) / best_compute / 1e9;
  // Keep the sums observable so that no loop is optimised away.
  volatile float keep = 0.0f;
  for (float s : sink) keep = keep + s;
  (void)keep;
  return out;
}

}  // namespace rkv::kernels
