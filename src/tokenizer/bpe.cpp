// BPE merge loop (priority queue over a doubly linked list of symbols) and the word cache.
#include "tokenizer/bpe.h"

#include <queue>

namespace rkv::tokenizer {

void BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
  // A repeated pair keeps its first (lowest) rank, as in the reference implementations.
  merges_.emplace(key(left, right), Merge{static_cast<int32_t>(merges_.size()), merged});
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;    // -1 at the start
  int32_t next;    // -1 at the end
  int32_t length;  // number of bytes; 0 once merged into its left neighbour
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t length;  // left.length + right.length when queued; detects stale entries
  int32_t merged;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

void BpeMerges::apply(std::vector<int32_t>& ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  std::vector<Symbol> sym(ids.size());
  for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, 1};

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int32_t left) {
    const int32_t right = sym[left].next;
    if (left < 0 || right < 0) return;
    auto it = merges_.find(key(sym[left].id, sym[right].id));
    if (it == merges_.end()) return;
    queue.push(
        {it->second.rank, left, right, sym[left].length + sym[right].length, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = sym[c.left];
    Symbol& right = sym[c.right];
    // Symbols only grow, so an unchanged total length means the pair is still there.
    if (left.length == 0 || right.length == 0 || left.next != c.right ||
        left.length + right.length != c.length) {
      continue;
    }
    left.id = c.merged;
    left.length = c.length;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = c.left;
    right.length = 0;
    if (left.prev >= 0) push(left.prev);
    push(c.left);
  }

  ids.clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

bool WordCache::find(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > kMaxWordBytes) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = map_.find(std::string(word));
  if (it == map_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, const std::vector<int32_t>& ids, std::size_t from) {
  if (word.size() > kMaxWordBytes) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (map_.size() >= kCapacity) map_.clear();
  map_.emplace(std::string(word),
               std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end()));
}

}  // namespace rkv::tokenizer
