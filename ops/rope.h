// rope: rotary position embedding of DeepSeek's MLA (YaRN-scaled), applied in place to the
// rope part of q (every head) and k. Pairs are interleaved (x[2i], x[2i+1]) as DeepSeek's
// checkpoints are laid out (transformers' rope_interleave = true), or split halves
// (x[i], x[i + d/2]) when rope_interleave is false. Only dot products q_pe·k_pe are ever taken,
// so the output keeps the input's pair layout.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace pg::ops {

// Per-pair inverse frequencies and the cos/sin scale ("attention_factor"), computed once.
struct RopeTable {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  float attention_factor = 1.0f;
  bool interleave = true;
};

struct RopeArgs {
  float* x = nullptr;            // [m, n_heads, stride] f32; rope part at column `offset`
  const int64_t* positions = nullptr;  // [m]
  const RopeTable* table = nullptr;
  int64_t m = 0, n_heads = 1;
  int64_t head_stride = 0;       // elements between heads
  int64_t row_stride = 0;        // elements between rows
  int64_t offset = 0;            // first rope element within a head
  int64_t rope_dim = 0;          // even
};

Status validate(const RopeArgs& a);

}  // namespace pg::ops
