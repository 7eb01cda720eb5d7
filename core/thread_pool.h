// ThreadPool: a fixed set of worker threads for data-parallel CPU ops. parallel_for splits
// [0, n) into contiguous chunks; results never depend on the thread count because every op
// gives each output element to exactly one chunk and reduces it in a fixed order.
#pragma once

#include <atomic>
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
  // `min_chunk` long. Blocks until all chunks are done. One caller at a time; not reentrant.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

  // The process-wide pool (size set once by set_global_threads, default: hardware threads).
  static ThreadPool& global();
  static void set_global_threads(int n_threads);

 private:
  void worker_loop();
  // Claims and runs chunks of the job of generation `gen` until none is left.
  void run_chunks(uint32_t gen);

  std::vector<std::thread> workers_;
  // The job: ticket_ = generation (32 bits) | chunk count (16) | next chunk to claim (16). A
  // worker claims a chunk by compare-and-swap on it, so a claim can only succeed on the job the
  // caller still waits for; fn_ / n_ / chunk_ are read only after a successful claim.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> done_{0};  // chunks finished of the current job
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  uint32_t gen_ = 0;  // the caller's count of jobs
  std::atomic<bool> stop_{false};
  // Sleeping: workers wait for a new generation, the caller for the last chunk, each after a
  // short spin (a decode step runs ~40 jobs a token: a futex wake per job cost 20% of it).
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
};

}  // namespace pg
