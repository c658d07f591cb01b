// `--dump-case DIR`: saves the inputs of real compressions as case files in the format of
// ../shared/golden/compression, which `rkv policy-run --case FILE` replays. Only stateless
// policies can be dumped (streamingllm, snapkv, rkv): gkv, h2o and skipkv carry per-entry state
// (scores, accumulators, sentence penalties) that the case format has no field for.
#pragma once

#include <filesystem>
#include <mutex>

#include "engine/kv_memory.h"

namespace rkv {

class CaseDumper {
 public:
  // Throws rkv::Error when the method cannot be dumped or DIR cannot be created.
  CaseDumper(const std::filesystem::path& dir, Method method, int limit);
  // Writes one case file per compression event until `limit` files are written.
  void record(const CompressionEvent& event);
  int written() const { return written_; }

 private:
  std::filesystem::path dir_;
  int limit_;
  int written_ = 0;
  std::mutex mutex_;
};

}  // namespace rkv
