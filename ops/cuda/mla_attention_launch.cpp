// ops::cuda::mla_attention: validates the Args, plans the split-KV grid (mla_attention_params.h)
// and launches through launch_mla_attention. Host C++ (no nvcc).
#include "ops/cuda/mla_attention.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "ops/cuda/common/align.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/env.h"
#include "ops/cuda/mla_attention_params.h"

namespace pg::ops::cuda {
namespace {

// The largest dynamic shared memory of one block on sm_90 (227 KB).
constexpr size_t kMaxSmemBytes = 227 * 1024;

MlaPlan plan_for(int64_t m, int64_t n_heads, int64_t max_ctx, MlaCores cores) {
  return mla_plan(m, n_heads, max_ctx, current_device_props().sm_count, cores == MlaCores::kTensor);
}

}  // namespace

MlaCores mla_cores_for(int64_t m, int64_t n_heads) {
  return m * n_heads > kMlaSmallHeadWork ? MlaCores::kTensor : MlaCores::kCuda;
}

size_t mla_attention_workspace_floats(int64_t m, int64_t n_heads, int64_t kv_lora_rank, int64_t max_ctx) {
  if (m <= 0 || n_heads <= 0 || kv_lora_rank <= 0) return 0;
  size_t n = mla_workspace_floats(plan_for(m, n_heads, max_ctx, MlaCores::kCuda), m, kv_lora_rank);
  n = std::max(n, mla_workspace_floats(plan_for(m, n_heads, max_ctx, MlaCores::kTensor), m, kv_lora_rank));
  if (mla_two_pass_fits(m, n_heads) && max_ctx > 0) n = std::max(n, mla_tp_workspace_floats(m, max_ctx));
  return n;
}

Status mla_attention_workspace_init(float* workspace, size_t workspace_floats, cudaStream_t stream) {
  if (!workspace || workspace_floats == 0) return ok_status();
  const size_t n = workspace_floats < size_t(kMlaCounterSlots) ? workspace_floats : size_t(kMlaCounterSlots);
  PG_CUDA_TRY(cudaMemsetAsync(workspace, 0, n * sizeof(float), stream));
  return ok_status();
}

Status mla_attention(const MlaAttentionArgs& a, int64_t max_ctx, float* workspace, size_t workspace_floats,
                     cudaStream_t stream, MlaCores cores, MlaPartials* defer_to) {
  if (defer_to) *defer_to = MlaPartials{};
  if (cores == MlaCores::kAuto) cores = mla_cores_for(a.m, a.n_heads);
  if (cores == MlaCores::kCudaTwoPass && !mla_two_pass_fits(a.m, a.n_heads)) cores = mla_cores_for(a.m, a.n_heads);
  // ops::validate reads ctx_len[t] on the host; here ctx_len is device memory, so validate the
  // shape with m = 0 and check the pointers and the bound here.
  MlaAttentionArgs shape = a;
  shape.m = 0;
  PG_TRY(validate(shape));
  if (a.m < 0) return invalid_argument("mla_attention: m={}", a.m);
  if (a.m == 0) return ok_status();
  if (!a.q_lat || !a.q_pe || (!a.kv && !a.kv_bf16) || !a.block_tables || !a.token_seq || !a.ctx_len || !a.o_lat)
    return invalid_argument("mla_attention: null input");
  if (a.n_blocks <= 0) return invalid_argument("mla_attention: n_blocks {}", a.n_blocks);
  const int64_t max_rows = a.block_size * a.max_blocks_per_seq;
  if (max_ctx <= 0 || max_ctx > max_rows)
    return invalid_argument("mla_attention: max_ctx {} outside [1, block_size x max_blocks_per_seq = {}]", max_ctx,
                            max_rows);
  if (max_rows > INT_MAX - int64_t(kMlaMaxSplits) * kMlaChunkRows)  // int positions on the device
    return unsupported("mla_attention (CUDA): block_size x max_blocks_per_seq = {} rows", max_rows);
  if (a.kv_lora_rank > kMlaMaxRank)
    return unsupported("mla_attention (CUDA): kv_lora_rank {} > {}", a.kv_lora_rank, kMlaMaxRank);
  if (!std::isfinite(a.softmax_scale)) return invalid_argument("mla_attention: softmax_scale {}", a.softmax_scale);

  const bool tc = cores == MlaCores::kTensor, two_pass = cores == MlaCores::kCudaTwoPass;
  const MlaPlan plan = plan_for(a.m, a.n_heads, max_ctx, cores);
  MlaAttentionParams p;
  p.q_lat = a.q_lat, p.q_pe = a.q_pe, p.kv = a.kv, p.kv16 = a.kv_bf16, p.block_tables = a.block_tables;
  p.token_seq = a.token_seq, p.ctx_len = a.ctx_len, p.o_lat = a.o_lat;
  p.q_lat_row_stride = q_lat_row_stride(a), p.q_lat_head_stride = q_lat_head_stride(a);
  p.q_pe_row_stride = q_pe_row_stride(a), p.q_pe_head_stride = q_pe_head_stride(a);
  p.m = a.m, p.n_heads = a.n_heads;
  p.block_size = int(a.block_size), p.max_blocks_per_seq = int(a.max_blocks_per_seq), p.max_rows = int(max_rows);
  if ((a.block_size & (a.block_size - 1)) == 0) {  // block_size >= 1 (validated)
    p.block_shift = 0;
    while ((int64_t(1) << p.block_shift) < a.block_size) ++p.block_shift;
  }
  p.kv_lora_rank = int(a.kv_lora_rank), p.rope_dim = int(a.rope_dim);
  const int64_t d = a.kv_lora_rank + a.rope_dim, d4 = (d + 3) / 4;
  p.d = int(d), p.d4 = int(d4), p.dp = int(4 * (d4 | 1));  // odd float4 stride: conflict-free row reads
  if (tc) {
    p.dk = mla_tc_dk(p.d), p.dp = mla_tc_row_stride(p.dk);
    if (p.dk > kMlaTcMaxDk)
      return unsupported("mla_attention (tensor cores): kv_lora_rank + rope_dim = {} > {}", d, kMlaTcMaxDk);
  }
  if (a.kv_bf16) {  // KvBf16Stage's registers hold a row of at most kMlaBf16MaxWidth values
    if (two_pass) return unsupported("mla_attention (two passes): a bf16 cache pool");
    if ((tc ? p.dk : 4 * p.d4) > kMlaBf16MaxWidth)
      return unsupported("mla_attention (CUDA): a bf16 cache pool with kv_lora_rank + rope_dim = {} (at most {})", d,
                         kMlaBf16MaxWidth);
  }
  p.head_groups = int(plan.head_groups), p.n_splits = int(plan.n_splits), p.n_combiners = plan.n_combiners;
  p.chunk_rows = plan.chunk_rows;
  const size_t smem = (two_pass ? std::max(mla_tp_scores_smem_floats(p.dp), kMlaTpPvSmemFloats)
                       : tc     ? mla_tc_smem_floats(p.dk, p.dp, p.n_splits)
                                : mla_smem_floats(plan.heads, p.dp, p.n_splits, plan.chunk_rows)) *
                      sizeof(float);
  if (smem > kMaxSmemBytes)
    return unsupported("mla_attention (CUDA): kv_lora_rank + rope_dim = {} needs {} bytes of shared memory", d, smem);
  if (a.m * plan.head_groups * plan.n_splits > INT_MAX || a.m * a.n_heads > INT_MAX)
    return unsupported("mla_attention (CUDA): {} tokens x {} heads is too large a grid", a.m, a.n_heads);
  p.scale_log2 = float(double(a.softmax_scale) * 1.4426950408889634);  // log2(e)
  p.early_chunk = attention_early_chunk() && !a.kv_bf16;

  // Workspace: the two passes' scores, or the split plan's partials (none for one split).
  const size_t need = two_pass            ? mla_tp_workspace_floats(a.m, max_ctx)
                      : plan.n_splits > 1 ? mla_workspace_floats(plan, a.m, a.kv_lora_rank)
                                          : 0;
  if (need && (!workspace || workspace_floats < need))
    return invalid_argument("mla_attention: workspace of {} floats, {} needed (m={}, max_ctx={})", workspace_floats,
                            need, a.m, max_ctx);
  if (two_pass) {
    p.ws_s = workspace + kMlaCounterSlots;
    p.s_rows = int(max_ctx);
    p.tp_blocks = mla_tp_blocks(a.m, current_device_props().sm_count);
    p.tp_slices = int(mla_ceil_div(a.kv_lora_rank, kMlaTpCols));
  } else if (need) {
    p.counters = reinterpret_cast<unsigned*>(workspace);
    p.ws_o = workspace + kMlaCounterSlots;
    p.ws_ml = p.ws_o + a.m * plan.head_groups * plan.n_splits * plan.heads * a.kv_lora_rank;
  }
  p.vec_kv = d % 4 == 0 && (a.kv ? aligned16(a.kv) : reinterpret_cast<uintptr_t>(a.kv_bf16) % 8 == 0);
  p.vec_q = a.kv_lora_rank % 4 == 0 && a.rope_dim % 4 == 0 && aligned16(a.q_lat) && aligned16(a.q_pe) &&
            p.q_lat_row_stride % 4 == 0 && p.q_lat_head_stride % 4 == 0 && p.q_pe_row_stride % 4 == 0 &&
            p.q_pe_head_stride % 4 == 0;
  p.vec_out = a.kv_lora_rank % 4 == 0 && aligned16(a.o_lat) && (!p.ws_o || aligned16(p.ws_o));
  if (defer_to && !two_pass) {
    p.defer = tc ? attention_defer_tc() && mla_attention_tc_defer_ok(p) : mla_attention_defer_ok(p);
    if (p.defer) {
      MlaPartials& d = *defer_to;
      d.deferred = true, d.ws_o = p.ws_o, d.ws_ml = p.ws_ml, d.ctx_len = p.ctx_len;
      d.n_splits = p.n_splits, d.heads = plan.heads, d.head_groups = p.head_groups, d.chunk_rows = p.chunk_rows;
      d.max_rows = p.max_rows, d.n_heads = p.n_heads, d.kv_lora_rank = p.kv_lora_rank;
    }
  }
  PG_CUDA_TRY(two_pass ? launch_mla_attention_two_pass(p, stream)
              : tc     ? launch_mla_attention_tc(p, stream)
                       : launch_mla_attention(p, plan.heads, stream));
  return ok_status();
}

}  // namespace pg::ops::cuda
