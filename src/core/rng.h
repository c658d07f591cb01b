// A small deterministic random generator (xoshiro256** seeded by splitmix64): the same seed gives
// the same draws on every platform. The sampler draws tokens with it; random-weight checkpoints
// (model/random_checkpoint) and the benchmarks draw their values with it.
#pragma once

#include <cstdint>

namespace rkv {

class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();
  double uniform();  // [0, 1)

 private:
  std::uint64_t s_[4];
};

}  // namespace rkv
