// The two limits a CPU forward pass runs against, measured on the machine it runs on (issue 16):
// the rate at which the cores can stream memory (decode reads every weight once per token) and
// the rate at which they can multiply-add (prompt processing is a GEMM). rkv_bench and
// `rkv bench-decode` print them so that every speed figure can be read as a fraction of what the
// machine allows.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace rkv::kernels {

// One instruction set's measuring loops (limits_avx2.cpp, ...; the reference in limits.cpp).
struct LimitLoops {
  // Sums p[0..n) (n a multiple of 64): a streaming read.
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

// Measures both limits with `pool`'s threads and the loops of `isa` (the best of `repetitions`
// runs each). `read_bytes` is the buffer streamed (it is allocated and touched first).
MachineLimits measure_machine_limits(ThreadPool& pool, Isa isa,
                                     std::size_t read_bytes = std::size_t{512} << 20,
                                     int repetitions = 5);

}  // namespace rkv::kernels
