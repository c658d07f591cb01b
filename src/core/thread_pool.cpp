#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

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
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  for (;;) {
    const std::size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    (*fn_)(task);
  }
}

void ThreadPool::worker_loop(int /*index*/) {
  std::uint64_t seen = 0;
  for (;;) {
    // Spin for a while (about 50 microseconds), then sleep until the next generation.
    std::uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      RKV_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    run_tasks();
    pending_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(std::size_t n_tasks, const std::function<void(std::size_t)>& fn) {
  if (n_tasks == 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (std::size_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  fn_ = &fn;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  pending_workers_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // The lock orders the generation bump against a worker that is about to sleep.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  run_tasks();
  while (pending_workers_.load(std::memory_order_acquire) != 0) RKV_CPU_RELAX();
  fn_ = nullptr;
}

void ThreadPool::parallel_ranges(std::size_t n, std::size_t align,
                                 const std::function<void(std::size_t, std::size_t)>& fn,
                                 int chunks_per_thread) {
  if (n == 0) return;
  align = std::max<std::size_t>(1, align);
  const std::size_t units = (n + align - 1) / align;
  const std::size_t chunks =
      std::min<std::size_t>(units, static_cast<std::size_t>(n_threads_ * std::max(1, chunks_per_thread)));
  const std::size_t per = units / chunks, extra = units % chunks;
  parallel_for(chunks, [&](std::size_t c) {
    const std::size_t u0 = c * per + std::min(c, extra);
    const std::size_t u1 = u0 + per + (c < extra ? 1 : 0);
    fn(u0 * align, std::min(n, u1 * align));
  });
}

}  // namespace rkv
