#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RKV_CPU_RELAX() _mm_pause()
#else
#define RKV_CPU_RELAX() \
  do {                  \
  } while (0)
#endif

namespace rkv {

int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks(Job& job) {
  for (;;) {
    const std::size_t task = job.next.fetch_add(1, std::memory_order_relaxed);
    if (task >= job.n_tasks) break;
    (*job.fn)(task);
  }
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    // Wait for a new job: spin (about 50 microseconds), then yield, then sleep.
    int spins = 0;
    while (job_id_.load(std::memory_order_acquire) == seen &&
           !stop_.load(std::memory_order_relaxed)) {
      if (++spins < 2000) {
        RKV_CPU_RELAX();
      } else if (spins < 2100) {
        std::this_thread::yield();
      } else {
        std::unique_lock<std::mutex> lock(mutex_);
        sleeping_.fetch_add(1);
        wake_.wait(lock, [&] { return job_id_.load() != seen || stop_.load(); });
        sleeping_.fetch_sub(1);
      }
    }
    if (stop_.load()) return;
    seen = job_id_.load(std::memory_order_acquire);
    // Announce ourselves before looking at the job (the caller clears job_ and then waits for
    // active_ to drop to zero, both sequentially consistent: a worker either sees the job and is
    // waited for, or sees null and never touches it).
    active_.fetch_add(1);
    if (Job* job = job_.load(); job != nullptr) run_tasks(*job);
    active_.fetch_sub(1);
  }
}

void ThreadPool::parallel_for(std::size_t n_tasks, const std::function<void(std::size_t)>& fn) {
  if (n_tasks == 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (std::size_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n_tasks = n_tasks;
  job_.store(&job);
  job_id_.fetch_add(1);
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);  // orders the bump against a worker going to sleep
    wake_.notify_all();
  }
  run_tasks(job);
  job_.store(nullptr);
  for (int spins = 0; active_.load() != 0; ++spins) {
    if (spins < 4000) {
      RKV_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::parallel_ranges(std::size_t n, std::size_t align,
                                 const std::function<void(std::size_t, std::size_t)>& fn,
                                 int chunks_per_thread) {
  const RangeSplit split(n, align,
                         static_cast<std::size_t>(n_threads_) * std::max(1, chunks_per_thread));
  parallel_for(split.chunks(), [&](std::size_t c) {
    const auto [begin, end] = split.range(c);
    fn(begin, end);
  });
}

RangeSplit::RangeSplit(std::size_t n, std::size_t align, std::size_t max_chunks)
    : n_(n), align_(std::max<std::size_t>(1, align)) {
  const std::size_t units = (n + align_ - 1) / align_;
  chunks_ = std::min(units, max_chunks);
  per_ = chunks_ == 0 ? 0 : units / chunks_;
  extra_ = chunks_ == 0 ? 0 : units % chunks_;
}

std::pair<std::size_t, std::size_t> RangeSplit::range(std::size_t c) const {
  const std::size_t u0 = c * per_ + std::min(c, extra_);
  const std::size_t u1 = u0 + per_ + (c < extra_ ? 1 : 0);
  return {u0 * align_, std::min(n_, u1 * align_)};
}

}  // namespace rkv
