// validate(): the shape and pointer contracts of the MLA helper ops (embedding, mla_kv_write,
// head_linear). Pointers may be device pointers: nothing they point to is read here.
#include <cmath>

#include "ops/embedding.h"
#include "ops/head_linear.h"
#include "ops/mla_kv_write.h"

namespace pg::ops {

Status validate(const EmbeddingArgs& a) {
  if (!a.table) return invalid_argument("embedding: no table");
  PG_TRY(validate_matrix(*a.table));
  if (a.m < 0 || (a.m > 0 && (!a.tokens || !a.y))) return invalid_argument("embedding: m={} with null tokens/y", a.m);
  if (a.y_stride && a.y_stride < a.table->cols)
    return invalid_argument("embedding: y_stride {} < hidden size {}", a.y_stride, a.table->cols);
  return ok_status();
}

Status validate(const MlaKvWriteArgs& a) {
  if (!a.table || a.rope_dim <= 0 || a.rope_dim % 2 || int64_t(a.table->inv_freq.size()) != a.rope_dim / 2)
    return invalid_argument("mla_kv_write: rope_dim {} does not match the RoPE table", a.rope_dim);
  if (a.kv_lora_rank <= 0 || a.block_size <= 0 || a.max_blocks_per_seq <= 0 || a.n_blocks <= 0 || a.m < 0)
    return invalid_argument("mla_kv_write: bad dims m={} kv_lora_rank={} block_size={} max_blocks_per_seq={} n_blocks={}",
                            a.m, a.kv_lora_rank, a.block_size, a.max_blocks_per_seq, a.n_blocks);
  const int64_t d = a.kv_lora_rank + a.rope_dim;
  if (a.kv_stride && a.kv_stride < d) return invalid_argument("mla_kv_write: kv_stride {} < row {}", a.kv_stride, d);
  if (a.m && (!a.kv || !a.norm_weight || !a.positions || !a.block_tables || !a.token_seq))
    return invalid_argument("mla_kv_write: null input");
  if (a.m && !a.cache == !a.cache_bf16)
    return invalid_argument("mla_kv_write: the cache pool must be given once, as cache (f32) or cache_bf16, got {}",
                            a.cache ? "both" : "neither");
  return ok_status();
}

Status validate(const HeadLinearArgs& a) {
  if (a.m < 0 || a.n_heads <= 0 || a.n <= 0 || a.k <= 0)
    return invalid_argument("head_linear: bad dims m={} n_heads={} n={} k={}", a.m, a.n_heads, a.n, a.k);
  if (a.m && (!a.x || !a.w || !a.y)) return invalid_argument("head_linear: null input");
  if (!std::isfinite(a.y_scale)) return invalid_argument("head_linear: y_scale {} is not finite", a.y_scale);
  if (a.w_format == HeadWeight::kFp8) {
    if (a.m && !a.w_scale) return invalid_argument("head_linear: FP8 weights without their scales");
    if (a.scale_group < 16 || (a.scale_group & (a.scale_group - 1)) != 0)
      return invalid_argument("head_linear: FP8 scale_group {} must be a power of two >= 16", a.scale_group);
  }
  if (a.x_row_stride < 0 || a.x_head_stride < 0 || a.y_row_stride < 0 || a.y_head_stride < 0)
    return invalid_argument("head_linear: negative stride");
  if (a.m == 0) return ok_status();
  // y must not overlap itself: heads laid out inside rows, or rows inside heads.
  const int64_t last_head = (a.n_heads - 1) * a.y_head_stride, last_row = (a.m - 1) * a.y_row_stride;
  const bool heads_in_rows = (a.n_heads == 1 || a.y_head_stride >= a.n) && (a.m == 1 || a.y_row_stride >= last_head + a.n);
  const bool rows_in_heads = (a.m == 1 || a.y_row_stride >= a.n) && (a.n_heads == 1 || a.y_head_stride >= last_row + a.n);
  if (!heads_in_rows && !rows_in_heads)
    return invalid_argument("head_linear: y strides (row {}, head {}) overlap outputs of width {}", a.y_row_stride,
                            a.y_head_stride, a.n);
  return ok_status();
}

}  // namespace pg::ops
