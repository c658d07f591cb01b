// Byte-pair merging by rank: the BPE model itself, working on token ids. A word starts as the ids
// of its bytes and the adjacent pair with the lowest merge rank (leftmost on ties) is merged
// until no pair has a merge. Uses a priority queue over a linked list, so a long word costs
// O(n log n), not O(n^2). Also a small thread-safe cache of words already encoded.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rkv::tokenizer {

class BpeMerges {
 public:
  // Appends a merge; its rank is the number of merges added before it.
  void add(int32_t left, int32_t right, int32_t merged);
  std::size_t size() const { return merges_.size(); }
  void reserve(std::size_t n) { merges_.reserve(n); }

  // Merges the symbols in place.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  std::unordered_map<uint64_t, Merge> merges_;
};

// Raw word bytes -> ids. Bounded: cleared when it reaches its capacity.
class WordCache {
 public:
  static constexpr std::size_t kCapacity = 1 << 16;
  static constexpr std::size_t kMaxWordBytes = 128;

  bool find(std::string_view word, std::vector<int32_t>& out) const;
  void insert(std::string_view word, const std::vector<int32_t>& ids, std::size_t from);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::vector<int32_t>> map_;
};

}  // namespace rkv::tokenizer
