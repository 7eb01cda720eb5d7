// StepLayout: one forward step's sequences flattened into per-token arrays (ids, positions,
// owning sequence, context lengths, block tables, output rows), validated once for every
// backend: token ids in the vocabulary, positions within the context, blocks that exist.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "formats/model_config.h"

namespace pg {

struct SeqStep;

struct StepLayout {
  int64_t T = 0;           // new tokens in the step, all sequences
  int64_t max_blocks = 1;  // row stride of `tables`
  std::vector<int32_t> tokens, token_seq;  // [T]
  std::vector<int32_t> tables;             // [n_seqs, max_blocks] physical block ids (0-padded)
  std::vector<int64_t> positions, ctx_len;  // [T]: position, and positions attended (position + 1)
  std::vector<int64_t> out_rows;  // token index of every output row
};

// Fills `layout` (cleared first). `min_table_stride` (0: none) pads the table rows to at least
// that many blocks, so a backend can keep one fixed stride (CUDA graphs).
Status layout_step(const ModelConfig& cfg, std::span<const SeqStep> seqs, int64_t n_blocks, int64_t block_size,
                   StepLayout& layout, int64_t min_table_stride = 0);

// Graph buckets (CudaRunner): steps whose sequences all carry q new tokens replay a graph
// captured for `bucket` sequences of q tokens, the extra ones padded.
struct GraphBucketLimits {
  int64_t max_seqs = 1;              // largest bucket
  int64_t max_q = 1;                 // most tokens per sequence a graph covers
  int64_t block_size = 1;            // padded sequences' q positions stay in one (scratch) block
  int64_t max_tokens = 1;            // bucket x q: at most the activations' tokens
  int64_t max_rows = 1;              // bucket x q: at most the logits rows
  int64_t tensor_core_min_rows = 0;  // projections of >= this many rows take another kernel (0: none)
};
// The bucket of a step of n_seqs sequences of q tokens; 0: no graph (run eagerly). Powers of two
// up to max_seqs, except that a step below tensor_core_min_rows rows never lands in a bucket at or
// above it (its projections would change kernels): it gets the largest bucket below the line.
int64_t graph_bucket(int64_t n_seqs, int64_t q, const GraphBucketLimits& lim);

// L (n_seqs sequences of q tokens each, tables of stride `stride`; every row out, or with
// !every_row_out each sequence's last row, as an MTP catch-up pass has them) padded to `bucket`
// sequences: the padded ones are token 0 at positions 0..q-1 of `scratch_block`, their rows out
// the same way, after the real rows. T becomes bucket x q.
StepLayout pad_graph_step(const StepLayout& L, int64_t bucket, int64_t q, int32_t scratch_block, int64_t stride,
                          bool every_row_out = true);

}  // namespace pg
