#include "kernels/limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
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
  const std::size_t part = n / kReadStreams;
  float s[8] = {};
  for (std::size_t i = 0; i < part; i += 8)
    for (std::size_t k = 0; k < kReadStreams; ++k)
      for (std::size_t j = 0; j < 8; ++j) s[j] += p[k * part + i + j];
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

// Keeps the loops' sums observable so that no loop is optimised away.
void keep(const std::vector<float>& sink) {
  volatile float kept = 0.0f;
  for (float s : sink) kept = kept + s;
  (void)kept;
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

LimitProbe::LimitProbe(ThreadPool& pool, Isa isa, std::size_t read_bytes, int repetitions)
    : pool_(pool), isa_(isa), loops_(limit_loops_for(isa)), repetitions_(repetitions) {
  if (loops_ == nullptr || !isa_supported(isa))
    throw Error("cannot measure machine limits with " + std::string(isa_name(isa)) +
                ": not supported on this CPU or build");
  const std::size_t threads = static_cast<std::size_t>(pool.size());
  // Each thread streams its own contiguous slice (a multiple of the loops' kReadStreams * 64
  // floats), as the GEMV's row split does; the buffer is written first so that every page is
  // mapped before timing.
  const std::size_t unit = kReadStreams * 64;
  per_thread_ = std::max<std::size_t>(read_bytes / sizeof(float) / threads / unit, 1) * unit;
  buffer_.resize(per_thread_ * threads);
  sink_.assign(threads, 0.0f);
  pool.parallel_for(threads, [&](std::size_t t) {
    std::fill(buffer_.begin() + static_cast<std::ptrdiff_t>(t * per_thread_),
              buffer_.begin() + static_cast<std::ptrdiff_t>((t + 1) * per_thread_), 1e-6f);
  });
}

double LimitProbe::read_gb_per_s() {
  double best = 1e30;
  for (int r = 0; r < repetitions_; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.parallel_for(sink_.size(), [&](std::size_t t) {
      sink_[t] += loops_->read_sum(buffer_.data() + t * per_thread_, per_thread_);
    });
    best = std::min(best, seconds_since(t0));
  }
  keep(sink_);
  return static_cast<double>(buffer_.size() * sizeof(float)) / best / 1e9;
}

double LimitProbe::peak_gflop_per_s() {
  // The compute loop: long enough (tens of milliseconds) that thread start-up does not count.
  const std::size_t iterations = std::size_t{1} << 22;
  double best = 1e30;
  for (int r = 0; r < repetitions_; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.parallel_for(sink_.size(), [&](std::size_t t) {
      sink_[t] += loops_->compute(iterations, static_cast<float>(t) + sink_[t] * 1e-30f);
    });
    best = std::min(best, seconds_since(t0));
  }
  keep(sink_);
  return static_cast<double>(iterations) * loops_->flops_per_iteration *
         static_cast<double>(sink_.size()) / best / 1e9;
}

MachineLimits measure_machine_limits(ThreadPool& pool, Isa isa, std::size_t read_bytes,
                                     int repetitions) {
  LimitProbe probe(pool, isa, read_bytes, repetitions);
  MachineLimits out;
  out.threads = pool.size();
  out.isa = isa;
  out.compute_name = probe.compute_name();
  out.read_gb_per_s = probe.read_gb_per_s();
  out.peak_gflop_per_s = probe.peak_gflop_per_s();
  return out;
}

}  // namespace rkv::kernels
