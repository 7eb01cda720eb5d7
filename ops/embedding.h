// embedding: the rows of a token-embedding table (embed_tokens), dequantized to f32, one per
// token, as transformers' nn.Embedding; the table keeps its stored format (ops/matrix.h).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/matrix.h"

namespace pg::ops {

struct EmbeddingArgs {
  const Matrix* table = nullptr;    // [vocab, H] f32 | bf16 | DeepSeek FP8 blocks (rows = vocab, cols = H)
  const int32_t* tokens = nullptr;  // [m], each in [0, vocab): the caller validates them
  float* y = nullptr;               // [m, H] f32, row stride y_stride
  int64_t m = 0;
  int64_t y_stride = 0;             // elements; 0 = H
};

Status validate(const EmbeddingArgs& a);

}  // namespace pg::ops
