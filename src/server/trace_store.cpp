#include "server/trace_store.h"

#include <algorithm>

namespace rkv::server {

std::shared_ptr<TraceStore::Entry> TraceStore::add(const std::string& id, int choice,
                                                   const std::string& method,
                                                   const Tokenizer* tokenizer) {
  auto entry = std::make_shared<Entry>();
  entry->id = id;
  entry->choice = choice;
  entry->method = method;
  Entry* raw = entry.get();
  entry->trace = std::make_unique<CompressionTrace>(
      [raw](const std::string& line) {
        std::lock_guard lock(raw->mutex);
        raw->text += line;
        raw->text += '\n';
      },
      tokenizer);
  std::lock_guard lock(mutex_);
  if (ids_.empty() || ids_.back() != id) ids_.push_back(id);
  while (static_cast<int>(ids_.size()) > capacity_) {
    const std::string oldest = ids_.front();
    ids_.pop_front();
    std::erase_if(entries_, [&](const std::shared_ptr<Entry>& e) { return e->id == oldest; });
  }
  entries_.push_back(entry);
  return entry;
}

std::shared_ptr<const TraceStore::Entry> TraceStore::find(const std::string& id, int choice) const {
  std::lock_guard lock(mutex_);
  for (const auto& e : entries_)
    if (e->id == id && e->choice == choice) return e;
  return nullptr;
}

std::vector<std::shared_ptr<const TraceStore::Entry>> TraceStore::list() const {
  std::lock_guard lock(mutex_);
  return {entries_.rbegin(), entries_.rend()};
}

}  // namespace rkv::server
