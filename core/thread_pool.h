// ThreadPool: a fixed set of worker threads for data-parallel CPU ops. parallel_for splits
// [0, n) into contiguous chunks; results never depend on the thread count because every op
// gives each output element to exactly one chunk and reduces it in a fixed order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pg {

class ThreadPool {
 public:
  // n_threads <= 0: one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }  // workers + the calling thread

  // Runs fn(begin, end) over chunks covering [0, n); at most size() chunks, each at least
  // `min_chunk` long. Blocks until all chunks are done. Not reentrant.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

  // The process-wide pool (size set once by set_global_threads, default: hardware threads).
  static ThreadPool& global();
  static void set_global_threads(int n_threads);

 private:
  void worker_loop(int idx);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0, job_chunks_ = 0;
  int64_t next_chunk_ = 0, chunks_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace pg
