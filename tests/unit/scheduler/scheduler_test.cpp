// Scheduler and BlockManager: admission only with blocks, chunked prefill under the token
// budget, decode-first ordering, preemption of the newest sequence, queue bound, and that every
// block returns to the pool.
#include <gtest/gtest.h>

#include <memory>

#include "engine/scheduler.h"

namespace pg {
namespace {

std::unique_ptr<Sequence> make_seq(uint64_t id, int64_t prompt_len) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens.assign(size_t(prompt_len), 7);
  s->n_prompt = prompt_len;
  return s;
}

// Runs a step: commit, and for sequences that sampled, append a token (as the engine does).
void run_step(Scheduler& sch, const std::vector<ScheduledSeq>& step) {
  sch.commit(step);
  for (const auto& s : step)
    if (s.sample) s.seq->tokens.push_back(1);
}

TEST(BlockManager, EnsureAndRelease) {
  BlockManager bm(4, 16);
  std::vector<int32_t> t;
  EXPECT_TRUE(bm.ensure(t, 17));
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(bm.n_free(), 2);
  EXPECT_FALSE(bm.ensure(t, 65));  // would need 5
  EXPECT_EQ(t.size(), 2u);         // unchanged
  bm.release(t);
  EXPECT_EQ(bm.n_free(), 4);
  EXPECT_TRUE(t.empty());
}

TEST(Scheduler, ChunkedPrefillUnderBudgetThenDecode) {
  BlockManager bm(64, 4);
  Scheduler sch({.max_num_seqs = 8, .max_num_batched_tokens = 10, .max_waiting = 8}, bm);
  auto a = make_seq(1, 23);
  ASSERT_TRUE(sch.add(a.get()).ok());
  auto s1 = sch.schedule();
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_EQ(s1[0].n_new, 10);
  EXPECT_FALSE(s1[0].sample);
  EXPECT_EQ(a->block_table.size(), 6u);  // blocks for the whole prompt at admission
  run_step(sch, s1);
  auto s2 = sch.schedule();
  run_step(sch, s2);
  auto s3 = sch.schedule();
  ASSERT_EQ(s3.size(), 1u);
  EXPECT_EQ(s3[0].n_new, 3);
  EXPECT_TRUE(s3[0].sample);
  run_step(sch, s3);
  // A second request arrives: the running one decodes first, the new one prefills with the rest.
  auto b = make_seq(2, 30);
  ASSERT_TRUE(sch.add(b.get()).ok());
  auto s4 = sch.schedule();
  ASSERT_EQ(s4.size(), 2u);
  EXPECT_EQ(s4[0].seq, a.get());
  EXPECT_EQ(s4[0].n_new, 1);
  EXPECT_EQ(s4[1].seq, b.get());
  EXPECT_EQ(s4[1].n_new, 9);
  run_step(sch, s4);
  sch.remove(a.get());
  sch.remove(b.get());
  EXPECT_EQ(bm.n_free(), 64);
}

TEST(Scheduler, AdmitsOnlyWhenBlocksExist) {
  BlockManager bm(6, 4);  // 24 token slots
  Scheduler sch({.max_num_seqs = 8, .max_num_batched_tokens = 100, .max_waiting = 8}, bm);
  auto a = make_seq(1, 16), b = make_seq(2, 12);
  ASSERT_TRUE(sch.add(a.get()).ok());
  ASSERT_TRUE(sch.add(b.get()).ok());
  auto s = sch.schedule();
  ASSERT_EQ(s.size(), 1u);  // b needs 3 blocks, 2 are free
  EXPECT_EQ(sch.n_waiting(), 1);
  run_step(sch, s);
  sch.remove(a.get());
  s = sch.schedule();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].seq, b.get());
}

TEST(Scheduler, PreemptsTheNewestWhenDecodeRunsOutOfBlocks) {
  BlockManager bm(4, 4);
  Scheduler sch({.max_num_seqs = 8, .max_num_batched_tokens = 100, .max_waiting = 8}, bm);
  auto a = make_seq(1, 8), b = make_seq(2, 8);  // 2 blocks each: pool full
  ASSERT_TRUE(sch.add(a.get()).ok());
  ASSERT_TRUE(sch.add(b.get()).ok());
  run_step(sch, sch.schedule());  // both prefilled, each sampled a 9th token
  std::vector<Sequence*> pre;
  auto s = sch.schedule(&pre);  // a needs a 3rd block for position 8: b (newest) is preempted
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0], b.get());
  EXPECT_EQ(b->n_computed, 0);
  EXPECT_EQ(b->n_preemptions, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].seq, a.get());
  EXPECT_EQ(sch.n_waiting(), 1);
  run_step(sch, s);
  sch.remove(a.get());
  // b comes back and recomputes its 9 tokens (prompt + the one generated) in one prefill.
  s = sch.schedule();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].seq, b.get());
  EXPECT_EQ(s[0].n_new, 9);
  EXPECT_TRUE(s[0].sample);
}

TEST(Scheduler, QueueBoundAndImpossibleRequests) {
  BlockManager bm(4, 4);
  Scheduler sch({.max_num_seqs = 1, .max_num_batched_tokens = 100, .max_waiting = 2}, bm);
  auto a = make_seq(1, 4), b = make_seq(2, 4), c = make_seq(3, 4), huge = make_seq(4, 16);
  EXPECT_TRUE(sch.add(a.get()).ok());
  EXPECT_TRUE(sch.add(b.get()).ok());
  EXPECT_EQ(sch.add(c.get()).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(sch.add(huge.get()).code(), StatusCode::kInvalidArgument);  // 17 positions > 16 slots
  auto s = sch.schedule();
  EXPECT_EQ(s.size(), 1u);  // max_num_seqs = 1
}

}  // namespace
}  // namespace pg
