// ThreadPool implementation: the caller publishes a job as a new ticket generation; workers
// (spinning briefly, then sleeping on a condition variable) and the caller claim its chunks by
// compare-and-swap on the ticket; the caller waits (spinning, then sleeping) for the last one.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PG_CPU_RELAX() _mm_pause()
#else
#define PG_CPU_RELAX() std::this_thread::yield()
#endif

namespace pg {
namespace {

// How long a thread polls for work (or for the job's end) before it sleeps: long enough to bridge
// the serial code between two jobs of a decode step, short enough that idle workers leave the
// cores to others. Past the first microseconds a poller yields, so oversubscribed cores still
// run whoever has work.
constexpr std::chrono::microseconds kSpinFor{100};
constexpr int kPauseRounds = 64;  // pause-only polls before the first yield

uint32_t ticket_gen(uint64_t t) { return uint32_t(t >> 32); }
int64_t ticket_chunks(uint64_t t) { return int64_t((t >> 16) & 0xffffu); }
int64_t ticket_next(uint64_t t) { return int64_t(t & 0xffffu); }

// Polls `ready` until it holds or kSpinFor has passed; returns whether it holds.
template <typename F>
bool spin_until(F ready) {
  for (int i = 0; i < kPauseRounds; ++i) {
    if (ready()) return true;
    PG_CPU_RELAX();
  }
  const auto until = std::chrono::steady_clock::now() + kSpinFor;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 16; ++i) {
      if (ready()) return true;
      PG_CPU_RELAX();
    }
    std::this_thread::yield();
  }
  return ready();
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  n_threads = std::min(n_threads, 0xffff);  // chunk indices are 16 bits in the ticket
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
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
  const int64_t chunks = (n + chunk - 1) / chunk;
  // No worker reads these now: every claim on the previous job failed or finished before it ended.
  fn_ = &fn;
  n_ = n;
  chunk_ = chunk;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = ++gen_;
  ticket_.store((uint64_t(gen) << 32) | (uint64_t(chunks) << 16), std::memory_order_release);
  { std::lock_guard<std::mutex> lk(mu_); }  // a worker between its check and its wait is now waiting
  cv_work_.notify_all();                     // (no system call when none sleeps)
  run_chunks(gen);  // the caller takes chunks too
  auto finished = [&] { return done_.load(std::memory_order_acquire) == chunks; };
  if (!spin_until(finished)) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, finished);
  }
}

void ThreadPool::run_chunks(uint32_t gen) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if (ticket_gen(t) != gen || ticket_next(t) >= ticket_chunks(t)) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    const int64_t c = ticket_next(t), chunks = ticket_chunks(t);
    (*fn_)(c * chunk_, std::min(n_, (c + 1) * chunk_));
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      { std::lock_guard<std::mutex> lk(mu_); }  // the caller between its check and its wait is now waiting
      cv_done_.notify_all();
      return;  // the last chunk: nothing is left to claim
    }
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    auto fresh = [&] { return stop_.load(std::memory_order_relaxed) || ticket_gen(ticket_.load(std::memory_order_acquire)) != seen; };
    if (!spin_until(fresh)) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_work_.wait(lk, fresh);
    }
    if (stop_.load()) return;
    seen = ticket_gen(ticket_.load(std::memory_order_acquire));
    run_chunks(seen);
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
