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

}  // namespace pg
