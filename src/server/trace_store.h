// `rkv serve --viz N`: the compression traces of the last N requests (every choice), kept in
// memory for the /viz page while they run and after they finish.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/compression_trace.h"

namespace rkv::server {

class TraceStore {
 public:
  // The trace text of one choice, appended to by the engine thread and read by HTTP threads.
  struct Entry {
    std::string id;  // the response id ("cmpl-7")
    int choice = 0;
    std::string method;
    std::unique_ptr<CompressionTrace> trace;  // writes into text
    mutable std::mutex mutex;
    std::string text;
    bool finished = false;
  };

  explicit TraceStore(int capacity) : capacity_(capacity) {}
  bool enabled() const { return capacity_ > 0; }

  // A new trace for choice `choice` of response `id`; the oldest traces beyond the capacity
  // (in requests) are dropped. The tokenizer must outlive the store.
  std::shared_ptr<Entry> add(const std::string& id, int choice, const std::string& method,
                             const Tokenizer* tokenizer);
  // The trace's text so far, and whether the request has finished ("" when unknown).
  std::shared_ptr<const Entry> find(const std::string& id, int choice) const;
  // Newest first.
  std::vector<std::shared_ptr<const Entry>> list() const;

 private:
  int capacity_;
  mutable std::mutex mutex_;
  std::deque<std::shared_ptr<Entry>> entries_;  // oldest first
  std::deque<std::string> ids_;                 // distinct response ids, oldest first
};

}  // namespace rkv::server
