// The two limits a CPU forward pass runs against, measured on the machine it runs on (issue 16):
// the rate at which the cores can stream memory (decode reads every weight once per token) and
// the rate at which they can multiply-add (prompt processing is a GEMM). rkv_bench and
// `rkv bench-decode` print them so that every speed figure can be read as a fraction of what the
// machine allows.
#pragma once

#include <cstddef>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace rkv::kernels {

// The streams a read loop runs side by side. A core reads memory faster from several streams
// than from one (more lines in flight, more prefetch streams): on the 2-core AMD EPYC (Zen 4) of
// docs/PERFORMANCE.md, 2026-12-01, this loop read 8-19% more than one of one stream a thread
// (`rkv_bench --benchmark_filter=Limits/avx512bf16/threads:2`, six alternating rounds), and
// decode (GEMVs of two streams a thread) read 5-17% faster than the one-stream loop. The limit is
// what the machine allows, so the loop reads the way that gets the most.
inline constexpr std::size_t kReadStreams = 4;

// One instruction set's measuring loops (limits_avx2.cpp, ...; the reference in limits.cpp).
struct LimitLoops {
  // Sums p[0..n) (n a multiple of kReadStreams * 64): a streaming read of the kReadStreams
  // quarters of the span side by side, one line of each in turn.
  float (*read_sum)(const float* p, std::size_t n);
  // Runs `iterations` rounds of independent multiply-add chains in registers and returns a
  // value that depends on all of them; flops_per_iteration is what one round computes (a fused
  // multiply-add counts 2; AVX512-BF16's dot product of a bf16 pair into f32 counts 4).
  float (*compute)(std::size_t iterations, float seed);
  double flops_per_iteration;
  const char* compute_name;  // the instruction measured, e.g. "f32 FMA (8 lanes)"
};

// The loops for `isa` (nullptr where this build has none).
const LimitLoops* limit_loops_for(Isa isa);

struct MachineLimits {
  double read_gb_per_s = 0.0;  // streaming read of a buffer far larger than the caches, all threads
  double peak_gflop_per_s = 0.0;  // the compute loop on all threads
  const char* compute_name = "";
  int threads = 0;
  Isa isa = Isa::Reference;
};

// Measures the limits again and again with `pool`'s threads and the loops of `isa`, each
// measurement the best of `repetitions` runs: for a benchmark that reads the limit just before
// and after each timed test (a shared machine's bandwidth moves by tens of percent within
// seconds). `read_bytes` is the buffer streamed, allocated and touched once, here.
class LimitProbe {
 public:
  LimitProbe(ThreadPool& pool, Isa isa, std::size_t read_bytes = std::size_t{512} << 20,
             int repetitions = 5);
  double read_gb_per_s();
  double peak_gflop_per_s();
  const char* compute_name() const { return loops_->compute_name; }
  int threads() const { return pool_.size(); }
  Isa isa() const { return isa_; }

 private:
  ThreadPool& pool_;
  Isa isa_;
  const LimitLoops* loops_;
  int repetitions_;
  std::size_t per_thread_;
  std::vector<float> buffer_;
  std::vector<float> sink_;  // the loops' results, kept so that no loop is optimised away
};

// Measures both limits once (a LimitProbe's two measurements).
MachineLimits measure_machine_limits(ThreadPool& pool, Isa isa,
                                     std::size_t read_bytes = std::size_t{512} << 20,
                                     int repetitions = 5);

}  // namespace rkv::kernels
