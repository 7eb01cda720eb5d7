// ThreadPool implementation: workers sleep on a condition variable and take chunks of the
// current job by index; the caller works too and waits until every chunk is done.
#include "core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace pg {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, std::min<int64_t>(size(), n / std::max<int64_t>(1, min_chunk)));
  if (max_chunks == 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + max_chunks - 1) / max_chunks;
  std::unique_lock<std::mutex> lk(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  job_chunks_ = (n + chunk - 1) / chunk;
  next_chunk_ = 0;
  chunks_done_ = 0;
  ++generation_;
  cv_work_.notify_all();
  // The caller takes chunks too.
  while (next_chunk_ < job_chunks_) {
    const int64_t c = next_chunk_++;
    lk.unlock();
    fn(c * chunk, std::min(n, (c + 1) * chunk));
    lk.lock();
    ++chunks_done_;
  }
  cv_done_.wait(lk, [&] { return chunks_done_ == job_chunks_; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_work_.wait(lk, [&] { return stop_ || (generation_ != seen && job_ && next_chunk_ < job_chunks_); });
    if (stop_) return;
    seen = generation_;
    while (job_ && next_chunk_ < job_chunks_) {
      const int64_t c = next_chunk_++;
      const auto* fn = job_;
      const int64_t begin = c * job_chunk_, end = std::min(job_n_, (c + 1) * job_chunk_);
      lk.unlock();
      (*fn)(begin, end);
      lk.lock();
      if (++chunks_done_ == job_chunks_) cv_done_.notify_all();
    }
  }
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;
int g_pool_threads = 0;
}  // namespace

ThreadPool& ThreadPool::global() {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(g_pool_threads);
  return *g_pool;
}

void ThreadPool::set_global_threads(int n_threads) {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  g_pool_threads = n_threads;
  g_pool.reset();
}

}  // namespace pg
