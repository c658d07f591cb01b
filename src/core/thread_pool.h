// A small fork-join pool for the kernels. Decode runs a few hundred parallel regions per token,
// each a few microseconds long, so workers spin briefly before they sleep; waking through a
// condition variable alone would cost more than the work.
//
// The caller never waits for a worker that has not started: tasks are claimed from a shared
// counter, the calling thread claims them too, and it waits only for workers that are inside
// the current job. On a machine whose cores are busy with other processes, a descheduled
// worker therefore slows a region down by at most the task it holds.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace rkv {

// [0, n) as min(max_chunks, units) contiguous ranges of whole units of `align` (the last range
// ends at n), their sizes at most one unit apart: how parallel_ranges shares out a range.
class RangeSplit {
 public:
  RangeSplit(std::size_t n, std::size_t align, std::size_t max_chunks);
  std::size_t chunks() const { return chunks_; }
  // Range c (c < chunks()) as [begin, end).
  std::pair<std::size_t, std::size_t> range(std::size_t c) const;

 private:
  std::size_t n_, align_, chunks_, per_, extra_;
};

class ThreadPool {
 public:
  // n_threads counts the calling thread: ThreadPool(1) runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task) for every task in [0, n_tasks), spread over the threads; returns when all
  // are done. Tasks are handed out dynamically, so uneven tasks balance themselves. Not
  // re-entrant: fn must not call parallel_for on the same pool.
  void parallel_for(std::size_t n_tasks, const std::function<void(std::size_t)>& fn);

  // Splits [0, n) into about `chunks_per_thread * size()` contiguous ranges whose boundaries are
  // multiples of `align` (RangeSplit) and calls fn(begin, end) for each.
  void parallel_ranges(std::size_t n, std::size_t align,
                       const std::function<void(std::size_t, std::size_t)>& fn,
                       int chunks_per_thread = 1);

 private:
  struct Job {
    const std::function<void(std::size_t)>* fn;
    std::size_t n_tasks;
    std::atomic<std::size_t> next{0};
  };
  void worker_loop();
  static void run_tasks(Job& job);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<Job*> job_{nullptr};        // the job in progress, null between jobs
  std::atomic<std::uint64_t> job_id_{0};  // bumped for every job
  std::atomic<int> active_{0};            // workers that may be touching job_
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

// Number of hardware threads, at least 1.
int default_thread_count();

}  // namespace rkv
