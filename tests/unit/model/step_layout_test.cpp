// StepLayout's graph helpers (model/step_layout.h): which bucket a uniform step replays and how
// its padding looks, as CudaRunner relies on: buckets hold the step, never cross the tensor-core
// line, padded sequences touch only the scratch block and leave the real rows as they were.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "model/deepseek_model.h"
#include "model/step_layout.h"

namespace pg {
namespace {

GraphBucketLimits limits() {
  GraphBucketLimits l;
  l.max_seqs = 64, l.max_q = 5, l.block_size = 16, l.max_tokens = 2048, l.max_rows = 320, l.tensor_core_min_rows = 17;
  return l;
}

TEST(GraphBucket, HoldsTheStepAndKeepsItsKernelRegime) {
  const GraphBucketLimits l = limits();
  for (int64_t q = 1; q <= 5; ++q)
    for (int64_t n = 1; n <= 64; ++n) {
      const int64_t b = graph_bucket(n, q, l);
      ASSERT_GT(b, 0) << "n " << n << " q " << q;
      EXPECT_GE(b, n) << "n " << n << " q " << q;
      EXPECT_LE(b, l.max_seqs);
      EXPECT_LE(b * q, l.max_rows);
      EXPECT_EQ(n * q < 17, b * q < 17) << "n " << n << " q " << q << " bucket " << b;
      if (q == 1) {
        EXPECT_EQ(b & (b - 1), 0) << "decode buckets are powers of two: " << b;
      }
    }
  EXPECT_EQ(graph_bucket(5, 3, l), 5);  // 8 x 3 = 24 rows would cross: the line's bucket, 16 / 3
  EXPECT_EQ(graph_bucket(5, 2, l), 8);
  EXPECT_EQ(graph_bucket(3, 1, l), 4);
  GraphBucketLimits exact = l;
  exact.tensor_core_min_rows = 0;  // no tensor-core line: powers of two
  EXPECT_EQ(graph_bucket(5, 3, exact), 8);
}

TEST(GraphBucket, NoGraphOutsideTheLimits) {
  GraphBucketLimits l = limits();
  EXPECT_EQ(graph_bucket(65, 1, l), 0);  // more sequences than the largest bucket
  EXPECT_EQ(graph_bucket(1, 6, l), 0);   // more tokens per sequence than a graph covers
  EXPECT_EQ(graph_bucket(0, 1, l), 0);
  l.block_size = 2;
  EXPECT_EQ(graph_bucket(1, 3, l), 0);  // padded positions 0..2 would leave the scratch block
  l = limits();
  l.max_rows = 100;
  EXPECT_EQ(graph_bucket(33, 4, l), 0);  // 64 x 4 rows of logits do not fit
  EXPECT_EQ(graph_bucket(20, 4, l), 0);  // 32 x 4 = 128 > 100
  EXPECT_EQ(graph_bucket(16, 4, l), 16);
}

TEST(PadGraphStep, RealRowsUnchangedPaddedRowsInTheScratchBlock) {
  ModelConfig c;
  c.vocab_size = 100, c.max_position_embeddings = 256;
  const int64_t bs = 16, n_blocks = 20, stride = 16, q = 3;
  std::vector<std::vector<int32_t>> toks = {{5, 6, 7}, {8, 9, 10}, {11, 12, 13}};
  std::vector<std::vector<int32_t>> tables = {{3, 4}, {7}, {1, 2, 9}};
  std::vector<SeqStep> seqs;
  const int64_t starts[] = {20, 4, 40};
  for (size_t i = 0; i < toks.size(); ++i) seqs.push_back(SeqStep{toks[i], starts[i], tables[i], /*all_logits=*/true});
  StepLayout L;
  ASSERT_TRUE(layout_step(c, seqs, n_blocks, bs, L, stride).ok());
  const int64_t bucket = 4;
  const StepLayout P = pad_graph_step(L, bucket, q, int32_t(n_blocks), stride);
  ASSERT_EQ(P.T, bucket * q);
  ASSERT_EQ(P.tokens.size(), size_t(P.T));
  ASSERT_EQ(P.tables.size(), size_t(bucket * stride));
  std::vector<int64_t> all(size_t(P.T));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(P.out_rows, all);  // every row out, real ones first, in token order
  for (int64_t t = 0; t < L.T; ++t) {
    EXPECT_EQ(P.tokens[size_t(t)], L.tokens[size_t(t)]);
    EXPECT_EQ(P.positions[size_t(t)], L.positions[size_t(t)]);
    EXPECT_EQ(P.ctx_len[size_t(t)], L.ctx_len[size_t(t)]);
    EXPECT_EQ(P.token_seq[size_t(t)], L.token_seq[size_t(t)]);
  }
  for (size_t i = 0; i < L.tables.size(); ++i) EXPECT_EQ(P.tables[i], L.tables[i]);
  for (int64_t t = L.T; t < P.T; ++t) {
    const int64_t j = (t - L.T) % q;
    EXPECT_EQ(P.tokens[size_t(t)], 0);
    EXPECT_EQ(P.positions[size_t(t)], j);
    EXPECT_EQ(P.ctx_len[size_t(t)], j + 1);
    EXPECT_EQ(P.token_seq[size_t(t)], int32_t(L.T / q + (t - L.T) / q));
    // Its position's block: the scratch block, never one a sequence owns.
    const int64_t seq = P.token_seq[size_t(t)];
    EXPECT_LT(P.positions[size_t(t)], bs);
    EXPECT_EQ(P.tables[size_t(seq * stride + P.positions[size_t(t)] / bs)], int32_t(n_blocks));
  }
}

TEST(PadGraphStep, LastRowsOutForTheMtpCatchUp) {
  // An MTP catch-up pass: two sequences of q = 3 tokens, each its last row out, padded to 4: the
  // padded sequences' last rows follow the real ones' (rows 2 and 5), then 8 and 11.
  ModelConfig c;
  c.vocab_size = 100, c.max_position_embeddings = 4096;
  const int64_t bs = 16, n_blocks = 20, stride = 4, q = 3;
  std::vector<std::vector<int32_t>> toks = {{5, 6, 7}, {8, 9, 10}};
  std::vector<std::vector<int32_t>> tables = {{3, 4}, {7}};
  std::vector<SeqStep> seqs;
  const int64_t starts[] = {20, 4};
  for (size_t i = 0; i < toks.size(); ++i) seqs.push_back(SeqStep{toks[i], starts[i], tables[i]});
  StepLayout L;
  ASSERT_TRUE(layout_step(c, seqs, n_blocks, bs, L, stride).ok());
  ASSERT_EQ(L.out_rows, (std::vector<int64_t>{2, 5}));
  const StepLayout P = pad_graph_step(L, 4, q, int32_t(n_blocks), stride, /*every_row_out=*/false);
  EXPECT_EQ(P.T, 12);
  EXPECT_EQ(P.out_rows, (std::vector<int64_t>{2, 5, 8, 11}));
  EXPECT_EQ(P.positions, (std::vector<int64_t>{20, 21, 22, 4, 5, 6, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(P.token_seq, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}));
  EXPECT_EQ(P.tables[size_t(2 * stride)], int32_t(n_blocks));
  EXPECT_EQ(P.tables[size_t(3 * stride)], int32_t(n_blocks));
}

TEST(PadGraphStep, DecodeBucketIsTheOldPadding) {
  // q = 1: padded rows are token 0 at position 0 of the scratch block, one row each.
  StepLayout L;
  L.T = 1, L.max_blocks = 4;
  L.tokens = {42}, L.token_seq = {0}, L.positions = {9}, L.ctx_len = {10}, L.out_rows = {0};
  L.tables = {5, 6, 0, 0};
  const StepLayout P = pad_graph_step(L, 2, 1, 30, 4);
  EXPECT_EQ(P.T, 2);
  EXPECT_EQ(P.tokens, (std::vector<int32_t>{42, 0}));
  EXPECT_EQ(P.positions, (std::vector<int64_t>{9, 0}));
  EXPECT_EQ(P.ctx_len, (std::vector<int64_t>{10, 1}));
  EXPECT_EQ(P.out_rows, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(P.tables, (std::vector<int32_t>{5, 6, 0, 0, 30, 0, 0, 0}));
}

}  // namespace
}  // namespace pg
