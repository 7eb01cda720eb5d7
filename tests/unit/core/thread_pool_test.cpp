// ThreadPool (core/thread_pool.h): every index of every job runs exactly once, in chunks of at
// least min_chunk, whatever the pool size; many short jobs back to back (the decode step's
// pattern, where workers catch a job while spinning) and jobs after the workers went to sleep;
// a pool made and destroyed around a single job, and one destroyed idle.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

namespace pg {
namespace {

// Runs one job of n indices and checks that each ran once and every chunk held >= min_chunk.
void check_job(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> chunks{0}, short_chunks{0};
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    chunks.fetch_add(1);
    if (e - b < min_chunk && e != n) short_chunks.fetch_add(1);
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
  }, min_chunk);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "index " << i << " of " << n;
  EXPECT_LE(chunks.load(), pool.size());
  EXPECT_EQ(short_chunks.load(), 0) << "n " << n << " min_chunk " << min_chunk;
}

TEST(ThreadPool, EveryIndexOnceAtEverySize) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000})
      for (int64_t min_chunk : {1, 2, 5, 100}) check_job(pool, n, min_chunk);
  }
}

TEST(ThreadPool, ManyShortJobsBackToBack) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int j = 0; j < 20000; ++j)
    pool.parallel_for(8, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 20000 * 8);
}

TEST(ThreadPool, JobsAfterTheWorkersSlept) {
  ThreadPool pool(3);
  for (int j = 0; j < 5; ++j) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the workers' spin
    check_job(pool, 300, 1);
  }
}

TEST(ThreadPool, WorkersShareTheJob) {
  // Chunks that wait for each other can only finish if different threads run them together.
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  pool.parallel_for(2, [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 2);
}

TEST(ThreadPool, MadeAndDestroyedAroundJobs) {
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(3);
    if (i % 2) check_job(pool, 50, 1);  // else destroyed without a job
  }
}

}  // namespace
}  // namespace pg
