// The Status-returning launchers of the MLA helper ops (validate the Args, fill the Params of
// mla_ops_params.h, pick the path, launch). Host C++, no nvcc: the kernels are mla_ops.cu.
#include <climits>
#include <cstdint>

#include "ops/cuda/common/align.h"
#include "ops/cuda/common/weight_format.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/env.h"
#include "ops/cuda/mla_ops.h"
#include "ops/cuda/mla_ops_params.h"

namespace pg::ops::cuda {

Status embedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (a.table) PG_TRY(check_kernel_format(*a.table, "embedding"));
  PG_TRY(validate(a));
  if (a.m == 0) return ok_status();
  const Matrix& t = *a.table;
  const LinearWeight f = to_kernel_format(t.format);
  EmbeddingParams p;
  p.table = t.data, p.scale_inv = t.scale_inv, p.tokens = a.tokens, p.y = a.y;
  p.m = a.m, p.vocab = t.rows, p.hidden = t.cols, p.y_stride = a.y_stride ? a.y_stride : t.cols;
  p.block_rows = t.block_rows, p.block_cols = t.block_cols;
  p.scale_cols = t.format == WeightFormat::kFp8Block ? t.scale_cols() : 0;
  const int vec = linear_vec_elems(f);
  p.vec = t.cols % vec == 0 && aligned16(t.data) && aligned16(a.y) && p.y_stride % 4 == 0 &&
          (t.format != WeightFormat::kFp8Block || t.block_cols % vec == 0);  // a chunk inside one scale block
  if ((t.cols + kEmbeddingThreads - 1) / kEmbeddingThreads > INT32_MAX)
    return unsupported("embedding (CUDA): hidden size {}", t.cols);
  PG_CUDA_TRY(launch_embedding(f, p, stream));
  return ok_status();
}

namespace {

// The rope kernel's limits and Params (a non-empty RopeArgs that validated); cos / sin computed
// from inv_freq_device, else read from cos_sin_device (the step's, rope_cos_sin).
Result<RopeParams> rope_params(const RopeArgs& a, const float* inv_freq_device, const float* cos_sin_device) {
  if (!inv_freq_device && !cos_sin_device) return invalid_argument("rope (CUDA): no device inv_freq or cos / sin");
  if (a.m > INT32_MAX) return unsupported("rope (CUDA): {} rows", a.m);
  if (a.rope_dim * int64_t(sizeof(float)) > 48 * 1024)  // cos/sin in default shared memory
    return unsupported("rope (CUDA): rope_dim {}", a.rope_dim);
  if (a.n_heads * (a.rope_dim / 2) > int64_t(65535) * kRopeThreads)
    return unsupported("rope (CUDA): {} heads of {} pairs", a.n_heads, a.rope_dim / 2);
  RopeParams p;
  p.x = a.x, p.positions = a.positions, p.inv_freq = inv_freq_device, p.cos_sin = cos_sin_device;
  p.m = a.m, p.n_heads = a.n_heads, p.head_stride = a.head_stride, p.row_stride = a.row_stride;
  p.offset = a.offset, p.rope_dim = a.rope_dim;
  p.attention_factor = a.table->attention_factor, p.interleave = a.table->interleave;
  return p;
}

Result<MlaKvWriteParams> kv_write_params(const MlaKvWriteArgs& a, const float* inv_freq_device,
                                         const float* cos_sin_device) {
  if (!inv_freq_device && !cos_sin_device) return invalid_argument("mla_kv_write (CUDA): no device inv_freq or cos / sin");
  if (a.m > INT32_MAX) return unsupported("mla_kv_write (CUDA): {} tokens", a.m);
  MlaKvWriteParams p;
  p.kv = a.kv, p.norm_weight = a.norm_weight, p.positions = a.positions, p.inv_freq = inv_freq_device;
  p.cos_sin = cos_sin_device;
  p.block_tables = a.block_tables, p.token_seq = a.token_seq, p.cache = a.cache, p.cache16 = a.cache_bf16;
  p.m = a.m, p.kv_lora_rank = a.kv_lora_rank, p.rope_dim = a.rope_dim, p.block_size = a.block_size;
  p.max_blocks_per_seq = a.max_blocks_per_seq, p.n_blocks = a.n_blocks;
  p.kv_stride = a.kv_stride ? a.kv_stride : a.kv_lora_rank + a.rope_dim;
  p.eps = a.eps, p.attention_factor = a.table->attention_factor, p.interleave = a.table->interleave;
  return p;
}

// What head_linear launches for a non-empty HeadLinearArgs that validated.
struct HeadPlan {
  LinearWeight f = LinearWeight::kBF16;
  HeadLinearParams p;
  bool vector_path = false;
  int lanes = 4;            // vector path
  int m_tile = 1;           // vector path: tokens a pass (1, kHeadMTileSmall or kHeadMTileLarge)
  dim3 grid;                // vector path: (row blocks, token blocks)
};

Result<HeadPlan> head_plan(const HeadLinearArgs& a) {
  HeadPlan hp;
  hp.f = a.w_format == HeadWeight::kF32   ? LinearWeight::kF32
         : a.w_format == HeadWeight::kFp8 ? LinearWeight::kFp8Block
                                          : LinearWeight::kBF16;
  HeadLinearParams& p = hp.p;
  p.x = a.x, p.w = a.w, p.y = a.y, p.y_scale = a.y_scale;
  if (a.w_format == HeadWeight::kFp8) {  // validate: scale_group a power of two >= 16
    p.w_scale = a.w_scale, p.scale_cols = (a.k + a.scale_group - 1) / a.scale_group;
    p.log2_group = 0;
    while ((int64_t(1) << p.log2_group) < a.scale_group) ++p.log2_group;
  }
  p.x_row_stride = a.x_row_stride, p.x_head_stride = a.x_head_stride;
  p.y_row_stride = a.y_row_stride, p.y_head_stride = a.y_head_stride;
  p.m = a.m, p.n_heads = a.n_heads, p.n = a.n, p.k = a.k;
  const int vec = linear_vec_elems(hp.f);
  const int64_t rows = a.n_heads * a.n;
  hp.vector_path = a.k % vec == 0 && a.n % kHeadRowsPerLane == 0 && aligned16(a.w) && aligned16(a.x) &&
                   a.x_row_stride % 4 == 0 && a.x_head_stride % 4 == 0;
  if (!hp.vector_path) {
    if ((rows + kHeadWarps - 1) / kHeadWarps > INT32_MAX || (a.m + kHeadScalarTokensPerBlock - 1) / kHeadScalarTokensPerBlock > 65535)
      return unsupported("head_linear (CUDA): {} rows x {} tokens", rows, a.m);
    return hp;
  }
  hp.lanes = head_lanes_per_row(a.k / vec);
  const int64_t row_blocks = (rows + head_rows_per_block(hp.lanes) - 1) / head_rows_per_block(hp.lanes);
  const int64_t token_blocks = head_token_blocks(a.m, row_blocks, current_device_props().sm_count);
  // 2..8 tokens (not FP8; PEREGRINE_HEAD_TOKEN_LOADS=0: the large tile): the small tile, x loaded a token at a time.
  const bool small = head_token_loads() && a.m <= kHeadMTileLarge && head_has_small_tile(hp.f);
  hp.m_tile = a.m == 1 ? 1 : small ? kHeadMTileSmall : kHeadMTileLarge;
  const int64_t m_tile = hp.m_tile;
  // Whole m tiles per block, so that only the last block has a partial tile.
  p.tokens_per_block = ((a.m + token_blocks - 1) / token_blocks + m_tile - 1) / m_tile * m_tile;
  const int64_t grid_y = (a.m + p.tokens_per_block - 1) / p.tokens_per_block;
  if (row_blocks > INT32_MAX || grid_y > 65535)
    return unsupported("head_linear (CUDA): grid {} x {}", row_blocks, grid_y);
  hp.grid = dim3(unsigned(row_blocks), unsigned(grid_y));
  return hp;
}

}  // namespace

Status rope(const RopeArgs& a, const float* inv_freq_device, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (!inv_freq_device) return invalid_argument("rope (CUDA): no device inv_freq");
  if (a.n_heads < 0) return invalid_argument("rope (CUDA): {} heads", a.n_heads);
  if (a.m == 0 || a.n_heads == 0) return ok_status();
  PG_ASSIGN_OR_RETURN(const RopeParams p, rope_params(a, inv_freq_device, nullptr));
  PG_CUDA_TRY(launch_rope(p, stream));
  return ok_status();
}

Status mla_kv_write(const MlaKvWriteArgs& a, const float* inv_freq_device, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (!inv_freq_device) return invalid_argument("mla_kv_write (CUDA): no device inv_freq");
  if (a.m == 0) return ok_status();
  PG_ASSIGN_OR_RETURN(const MlaKvWriteParams p, kv_write_params(a, inv_freq_device, nullptr));
  PG_CUDA_TRY(launch_mla_kv_write(p, stream));
  return ok_status();
}

Status head_linear(const HeadLinearArgs& a, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (a.m == 0) return ok_status();
  PG_ASSIGN_OR_RETURN(const HeadPlan hp, head_plan(a));
  if (!hp.vector_path) {
    PG_CUDA_TRY(launch_head_linear_scalar(hp.f, hp.p, stream));
    return ok_status();
  }
  PG_CUDA_TRY(launch_head_linear_vec(hp.f, hp.lanes, hp.m_tile, hp.p, hp.grid, stream));
  return ok_status();
}

bool head_linear_combine_ok(const HeadLinearArgs& a) {
  if (a.m <= 0 || !validate(a).ok()) return false;
  Result<HeadPlan> hp = head_plan(a);
  if (!hp.ok() || !hp->vector_path || hp->grid.y != 1 || a.k > kMlaMaxRank || a.k % 4 != 0) return false;
  const int hpb = head_combine_heads_per_block(head_rows_per_block(hp->lanes), a.n, a.n_heads * a.n);
  return a.m * hpb * a.k <= kHeadCombineFloats;
}

Status head_linear_combine(const HeadLinearArgs& a, const MlaPartials& parts, cudaStream_t stream) {
  if (!parts.deferred) return invalid_argument("head_linear_combine (CUDA): the attention's partials were not deferred");
  if (!head_linear_combine_ok(a))
    return unsupported("head_linear_combine (CUDA): m={} heads={} n={} k={} is off its path (head_linear_combine_ok)",
                       a.m, a.n_heads, a.n, a.k);
  if (parts.n_heads != a.n_heads || parts.kv_lora_rank != a.k)
    return invalid_argument("head_linear_combine (CUDA): partials of {} heads x {}, W_UV of {} heads x k={}",
                            parts.n_heads, parts.kv_lora_rank, a.n_heads, a.k);
  PG_ASSIGN_OR_RETURN(HeadPlan hp, head_plan(a));
  HeadCombineParams p;
  p.lin = hp.p;
  p.heads_per_block = head_combine_heads_per_block(head_rows_per_block(hp.lanes), a.n, a.n_heads * a.n);
  p.lin.x = nullptr, p.lin.x_row_stride = int64_t(p.heads_per_block) * a.k, p.lin.x_head_stride = a.k;  // the staged copy
  p.parts = parts;
  PG_CUDA_TRY(launch_head_linear_combine(hp.f, hp.lanes, hp.m_tile, p, hp.grid, stream));
  return ok_status();
}

Status rope_cos_sin(const int64_t* positions, int64_t m, const RopeTable& table, const float* inv_freq_device,
                    float* cos_sin, cudaStream_t stream) {
  if (m < 0) return invalid_argument("rope_cos_sin (CUDA): {} tokens", m);
  if (m == 0) return ok_status();
  if (!positions || !inv_freq_device || !cos_sin)
    return invalid_argument("rope_cos_sin (CUDA): positions, device inv_freq and output are required");
  if (table.inv_freq.empty()) return invalid_argument("rope_cos_sin (CUDA): an empty rope table");
  RopeCosSinParams p;
  p.positions = positions, p.inv_freq = inv_freq_device, p.cos_sin = cos_sin, p.m = m;
  p.rope_dim = 2 * int64_t(table.inv_freq.size()), p.attention_factor = table.attention_factor;
  PG_CUDA_TRY(launch_rope_cos_sin(p, stream));
  return ok_status();
}

Status mla_prep(const MlaPrepArgs& a, const float* cos_sin_device, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (!cos_sin_device) return invalid_argument("mla_prep (CUDA): no device cos / sin (rope_cos_sin)");
  if (a.q_rope.n_heads < 0) return invalid_argument("mla_prep (CUDA): q_rope has {} heads", a.q_rope.n_heads);
  if (a.kv_write.m == 0) return ok_status();
  const HeadLinearArgs& uk = a.w_uk;
  Result<HeadPlan> hp = head_plan(uk);
  const bool fused = hp.ok() && hp->vector_path && a.q_rope.n_heads > 0;
  MlaPrepParams p;
  PG_ASSIGN_OR_RETURN(p.kv, kv_write_params(a.kv_write, nullptr, cos_sin_device));
  if (!fused) {  // the generic head_linear path (odd dims): the three launches
    PG_CUDA_TRY(launch_mla_kv_write(p.kv, stream));
    if (a.q_rope.n_heads > 0) {  // q_rope.m == kv_write.m > 0 (validated above)
      PG_ASSIGN_OR_RETURN(p.rope, rope_params(a.q_rope, nullptr, cos_sin_device));
      PG_CUDA_TRY(launch_rope(p.rope, stream));
    }
    return head_linear(uk, stream);
  }
  PG_ASSIGN_OR_RETURN(p.rope, rope_params(a.q_rope, nullptr, cos_sin_device));
  p.uk = hp->p;
  p.uk_row_blocks = hp->grid.x;
  p.uk_blocks = int64_t(hp->grid.x) * hp->grid.y;
  p.rope_slices = (a.q_rope.n_heads * (a.q_rope.rope_dim / 2) + kRopeThreads - 1) / kRopeThreads;
  if (p.uk_blocks + a.kv_write.m * (1 + p.rope_slices) > INT32_MAX)
    return unsupported("mla_prep (CUDA): {} tokens of {} heads", a.kv_write.m, uk.n_heads);
  p.late_trigger = mla_prep_late_trigger();
  PG_CUDA_TRY(launch_mla_prep(hp->f, hp->lanes, hp->m_tile, p, stream));
  return ok_status();
}

}  // namespace pg::ops::cuda
