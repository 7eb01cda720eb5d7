// StepLayout: a step's sequences flattened and validated once for every backend.
#include "model/step_layout.h"

#include <algorithm>

#include "model/deepseek_model.h"

namespace pg {

Status layout_step(const ModelConfig& c, std::span<const SeqStep> seqs, int64_t n_blocks, int64_t bs, StepLayout& L,
                   int64_t min_table_stride) {
  L = StepLayout{};
  L.max_blocks = std::max<int64_t>(1, min_table_stride);
  for (const SeqStep& s : seqs) {
    L.T += int64_t(s.tokens.size());
    L.max_blocks = std::max<int64_t>(L.max_blocks, int64_t(s.block_table.size()));
  }
  L.tables.assign(size_t(int64_t(seqs.size()) * L.max_blocks), 0);
  L.tokens.reserve(static_cast<size_t>(L.T));
  int64_t t0 = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const SeqStep& s = seqs[si];
    const int64_t n = int64_t(s.tokens.size()), end = s.start_pos + n;
    if (n == 0) return invalid_argument("forward: sequence {} has no new tokens", si);
    if (s.start_pos < 0 || end > c.max_position_embeddings)
      return out_of_range("forward: positions {}..{} exceed the model's context of {} tokens", s.start_pos, end - 1,
                          c.max_position_embeddings);
    if (int64_t(s.block_table.size()) * bs < end)
      return invalid_argument("forward: sequence {} has {} KV blocks for {} positions", si, s.block_table.size(), end);
    for (int32_t b : s.block_table)
      if (b < 0 || b >= n_blocks) return invalid_argument("forward: KV block id {} out of range", b);
    std::copy(s.block_table.begin(), s.block_table.end(), L.tables.begin() + int64_t(si) * L.max_blocks);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t tok = s.tokens[size_t(i)];
      if (tok < 0 || tok >= c.vocab_size)
        return invalid_argument("forward: token id {} is outside the vocabulary [0, {})", tok, c.vocab_size);
      L.tokens.push_back(tok);
      L.token_seq.push_back(int32_t(si));
      L.positions.push_back(s.start_pos + i);
      L.ctx_len.push_back(s.start_pos + i + 1);
    }
    if (s.no_logits) {
    } else if (s.all_logits) {
      for (int64_t i = 0; i < n; ++i) L.out_rows.push_back(t0 + i);
    } else {
      L.out_rows.push_back(t0 + n - 1);
    }
    t0 += n;
  }
  return ok_status();
}

int64_t graph_bucket(int64_t n_seqs, int64_t q, const GraphBucketLimits& lim) {
  if (n_seqs < 1 || n_seqs > lim.max_seqs || q < 1 || q > lim.max_q || q > lim.block_size) return 0;
  int64_t b = 1;
  while (b < n_seqs) b *= 2;
  b = std::min(b, lim.max_seqs);
  const int64_t tc = lim.tensor_core_min_rows;
  if (tc > 0 && n_seqs * q < tc && b * q >= tc) b = (tc - 1) / q;  // >= n_seqs, since n_seqs * q <= tc - 1
  return b * q <= lim.max_tokens && b * q <= lim.max_rows ? b : 0;
}

StepLayout pad_graph_step(const StepLayout& L, int64_t bucket, int64_t q, int32_t scratch_block, int64_t stride,
                          bool every_row_out) {
  StepLayout P = L;
  P.tables.resize(size_t(bucket * stride), 0);
  for (int64_t i = L.T / q; i < bucket; ++i) {
    for (int64_t j = 0; j < q; ++j) {
      if (every_row_out || j == q - 1) P.out_rows.push_back(int64_t(P.tokens.size()));
      P.tokens.push_back(0);
      P.token_seq.push_back(int32_t(i));
      P.positions.push_back(j);
      P.ctx_len.push_back(j + 1);
    }
    P.tables[size_t(i * stride)] = scratch_block;
  }
  P.T = bucket * q;
  P.max_blocks = stride;
  return P;
}

}  // namespace pg
