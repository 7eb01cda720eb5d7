// Scheduler and BlockManager: admission only with blocks, chunked prefill under the token
// budget, decode-first ordering, preemption of the newest sequence, queue bound, that every
// block returns to the pool, and the prefix cache (publish, match, reference counts, eviction,
// the lookahead token, duplicates, admission from a cached prefix).
#include <gtest/gtest.h>

#include <memory>

#include "engine/scheduler.h"

namespace pg {
namespace {

std::unique_ptr<Sequence> make_seq(uint64_t id, std::vector<int32_t> prompt) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->n_prompt = int64_t(prompt.size());
  s->tokens = std::move(prompt);
  return s;
}

std::unique_ptr<Sequence> make_seq(uint64_t id, int64_t prompt_len) {
  return make_seq(id, std::vector<int32_t>(static_cast<size_t>(prompt_len), 7));
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


std::vector<int32_t> iota_tokens(int64_t n, int32_t first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = first + int32_t(i);
  return t;
}

TEST(PrefixCache, MatchTakesPublishedBlocksAndKeepsThemUntilEvicted) {
  BlockManager bm(6, 4, /*prefix_caching=*/true);
  const std::vector<int32_t> toks = iota_tokens(14);  // blocks 0..2 full, 3 partial
  std::vector<int32_t> a;
  std::vector<uint64_t> ha;
  int64_t checked = 0;
  ASSERT_TRUE(bm.ensure(a, 14));
  bm.publish(toks, 9, a, ha, checked);  // KV complete for 9 positions: blocks 0 and 1
  EXPECT_EQ(bm.n_cached(), 2);
  EXPECT_EQ(checked, 2);
  bm.publish(toks, 14, a, ha, checked);  // block 2 too; the partial block 3 never
  EXPECT_EQ(bm.n_cached(), 3);

  std::vector<int32_t> longer = toks;
  longer.insert(longer.end(), {7, 8, 9});
  std::vector<int32_t> b;
  std::vector<uint64_t> hb;
  EXPECT_EQ(bm.match(longer, 16, b, hb), 12);  // three whole blocks within the first 16 tokens
  EXPECT_EQ(b, std::vector<int32_t>(a.begin(), a.begin() + 3));
  EXPECT_EQ(bm.n_free(), 2);  // shared blocks are counted once
  std::vector<int32_t> c;
  std::vector<uint64_t> hc;
  EXPECT_EQ(bm.match(longer, 11, c, hc), 8);  // max_tokens 11: two blocks
  bm.release(c);

  std::vector<int32_t> other = toks;
  other[5] = 0;  // differs in block 1
  std::vector<int32_t> d;
  std::vector<uint64_t> hd;
  EXPECT_EQ(bm.match(other, 14, d, hd), 4);
  bm.release(d);

  bm.release(a);
  bm.release(b);
  EXPECT_EQ(bm.n_free(), 6);  // cached blocks count as free
  EXPECT_EQ(bm.n_cached(), 3);
  std::vector<int32_t> e;
  std::vector<uint64_t> he;
  EXPECT_EQ(bm.match(toks, 14, e, he), 12);  // still there after every table let them go
  bm.release(e);
  // Taking every block evicts the cached ones: the 3 uncached blocks first, then the oldest released.
  std::vector<int32_t> f;
  ASSERT_TRUE(bm.ensure(f, 4 * 4));
  EXPECT_EQ(bm.n_cached(), 2);
  ASSERT_TRUE(bm.ensure(f, 6 * 4));
  EXPECT_EQ(bm.n_cached(), 0);
  EXPECT_EQ(bm.n_free(), 0);
  bm.release(f);
  std::vector<int32_t> g;
  std::vector<uint64_t> hg;
  EXPECT_EQ(bm.match(toks, 14, g, hg), 0);
}

TEST(PrefixCache, LookaheadTokenIsPartOfTheKey) {
  BlockManager bm(8, 4, true, /*lookahead=*/1);
  const std::vector<int32_t> toks = iota_tokens(12);
  std::vector<int32_t> a;
  std::vector<uint64_t> ha;
  int64_t checked = 0;
  ASSERT_TRUE(bm.ensure(a, 12));
  bm.publish(toks, 8, a, ha, checked);  // block 1's key needs token 8: not ready
  EXPECT_EQ(bm.n_cached(), 1);
  bm.publish(toks, 9, a, ha, checked);
  EXPECT_EQ(bm.n_cached(), 2);
  std::vector<int32_t> same = toks, next_differs = toks;
  next_differs[8] = 1;  // the token after block 1
  std::vector<int32_t> b, c;
  std::vector<uint64_t> hb, hc;
  EXPECT_EQ(bm.match(same, 12, b, hb), 8);
  EXPECT_EQ(bm.match(next_differs, 12, c, hc), 4);
}

TEST(PrefixCache, DuplicateContentStaysPrivateAndOffMeansNothingIsShared) {
  BlockManager bm(4, 4, true);
  const std::vector<int32_t> toks = iota_tokens(8);
  std::vector<int32_t> a, b;
  std::vector<uint64_t> ha, hb;
  int64_t ca = 0, cb = 0;
  ASSERT_TRUE(bm.ensure(a, 8));
  ASSERT_TRUE(bm.ensure(b, 8));
  bm.publish(toks, 8, a, ha, ca);
  bm.publish(toks, 8, b, hb, cb);  // computed twice (admitted together): b's copies stay private
  EXPECT_EQ(bm.n_cached(), 2);
  bm.release(b);
  bm.release(a);
  EXPECT_EQ(bm.n_free(), 4);
  std::vector<int32_t> c;
  std::vector<uint64_t> hc;
  ASSERT_TRUE(bm.ensure(c, 8));  // the two private blocks first: the cached ones survive
  EXPECT_EQ(bm.n_cached(), 2);
  bm.release(c);

  BlockManager off(4, 4);
  std::vector<int32_t> d, e;
  std::vector<uint64_t> hd, he;
  int64_t cd = 0;
  ASSERT_TRUE(off.ensure(d, 8));
  off.publish(toks, 8, d, hd, cd);
  EXPECT_EQ(off.n_cached(), 0);
  EXPECT_EQ(off.match(toks, 8, e, he), 0);
}

TEST(Scheduler, AdmitsFromACachedPrefixAndComputesTheRest) {
  BlockManager bm(16, 4, true);
  Scheduler sch({.max_num_seqs = 8, .max_num_batched_tokens = 100, .max_waiting = 8}, bm);
  auto a = make_seq(1, iota_tokens(10));
  ASSERT_TRUE(sch.add(a.get()).ok());
  auto s = sch.schedule();
  run_step(sch, s);
  sch.publish(a.get(), a->n_computed);
  EXPECT_EQ(bm.n_cached(), 2);
  // The same 10 tokens and more: two cached blocks, the rest computed.
  auto b = make_seq(2, iota_tokens(13));
  ASSERT_TRUE(sch.add(b.get()).ok());
  s = sch.schedule();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].seq, b.get());
  EXPECT_EQ(s[1].start, 8);
  EXPECT_EQ(s[1].n_new, 5);
  EXPECT_EQ(std::vector<int32_t>(b->block_table.begin(), b->block_table.begin() + 2),
            std::vector<int32_t>(a->block_table.begin(), a->block_table.begin() + 2));
  EXPECT_EQ(sch.prefix_queries(), 10 + 13);
  EXPECT_EQ(sch.prefix_hits(), 8);
  run_step(sch, s);
  // Exactly the cached tokens: the last block is computed again, for the last token's logits.
  auto c = make_seq(3, iota_tokens(8));
  ASSERT_TRUE(sch.add(c.get()).ok());
  s = sch.schedule();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2].start, 4);
  EXPECT_EQ(s[2].n_new, 4);
  run_step(sch, s);
  // Drafts at the end of a waiting sequence are not looked up.
  sch.remove(c.get());
  auto d = make_seq(4, iota_tokens(10));
  d->n_drafts = 2;  // tokens 8, 9 are drafts: at most positions 0..6 may come from the cache
  ASSERT_TRUE(sch.add(d.get()).ok());
  s = sch.schedule();
  EXPECT_EQ(d->n_computed, 4);
  for (Sequence* q : {a.get(), b.get(), d.get()}) sch.remove(q);
  EXPECT_EQ(bm.n_used(), 0);
}

TEST(Scheduler, WaitsForABlockAnotherSequenceIsComputing) {
  BlockManager bm(32, 4, true);
  Scheduler sch({.max_num_seqs = 8, .max_num_batched_tokens = 6, .max_waiting = 8}, bm);
  // b: the same prompt as a (the second of n choices).
  auto a = make_seq(1, iota_tokens(14)), b = make_seq(2, iota_tokens(14)), c = make_seq(3, iota_tokens(5, 900));
  for (Sequence* q : {a.get(), b.get(), c.get()}) ASSERT_TRUE(sch.add(q).ok());
  // Step 1: a takes 6 tokens of budget; b waits for a's first block; c (behind it) is not held up
  // by b, but the budget is spent.
  auto s = sch.schedule();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].seq, a.get());
  EXPECT_EQ(sch.n_waiting(), 2);
  run_step(sch, s);
  sch.publish(a.get(), a->n_computed);  // block 0 published (6 computed)
  // Step 2: a goes on; b's first block is cached, its second (4..8) is a's next: b waits again.
  s = sch.schedule();
  ASSERT_EQ(s.size(), 1u);
  run_step(sch, s);
  sch.publish(a.get(), a->n_computed);  // 12 computed: blocks 0..2
  s = sch.schedule();  // a's last 2 tokens; b takes blocks 0..2 from the cache, computes 12..13; c
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].seq, b.get());
  EXPECT_EQ(s[1].start, 12);
  EXPECT_EQ(s[1].n_new, 2);
  EXPECT_EQ(s[2].seq, c.get());
  EXPECT_EQ(sch.prefix_hits(), 12);
  run_step(sch, s);
  for (Sequence* q : {a.get(), b.get(), c.get()}) sch.remove(q);
  EXPECT_EQ(bm.n_used(), 0);
}

TEST(Scheduler, DoesNotWaitForWhatItCouldNotShare) {
  BlockManager bm(32, 4, true);
  Scheduler sch({.max_num_seqs = 8, .max_num_batched_tokens = 100, .max_waiting = 8}, bm);
  auto a = make_seq(1, iota_tokens(14)), b = make_seq(2, iota_tokens(14)), c = make_seq(3, iota_tokens(3));
  b->tokens[2] = 1;  // differs inside the first block
  // c shares a's first tokens but has no whole block to take.
  for (Sequence* q : {a.get(), b.get(), c.get()}) ASSERT_TRUE(sch.add(q).ok());
  EXPECT_EQ(sch.schedule().size(), 3u);
}

}  // namespace
}  // namespace pg
