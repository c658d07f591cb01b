// `--trace FILE`: one JSON line per (compression, KV head) with the kept original positions and
// summaries of the scores the policy ranked by.
#pragma once

#include <fstream>
#include <mutex>
#include <string>

#include "engine/kv_compressor.h"

namespace rkv {

class CompressionTrace {
 public:
  // Throws rkv::Error when the file cannot be written.
  explicit CompressionTrace(const std::string& path);
  void record(const CompressionEvent& event);
  std::int64_t lines() const { return lines_; }

 private:
  std::ofstream out_;
  std::mutex mutex_;
  std::int64_t lines_ = 0;
};

}  // namespace rkv
