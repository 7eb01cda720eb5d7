// ops::cuda::mla_prefill: per run, gather the sequence's cache as bf16, then per query chunk pack
// the queries, score them against the whole prefix (cuBLASLt), take the causal softmax and multiply
// by c_kv (cuBLASLt). Host C++ (no nvcc): the kernels are behind mla_prefill_params.h.
#include "ops/cuda/mla_prefill.h"

#include <algorithm>

#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/mla_prefill_params.h"

namespace pg::ops::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
int64_t round8(int64_t n) { return (n + 7) / 8 * 8; }

// Workspace parts for contexts of up to C (a multiple of 8) positions: the fixed part (kv, vt)
// and the bytes of one (token, head) row (q, scores, weights).
size_t fixed_bytes(int64_t C, int64_t R, int64_t P) {
  return align_up(size_t(C * (R + P)) * 2) + align_up(size_t(R * C) * 2);
}
size_t row_bytes(int64_t C, int64_t R, int64_t P) { return size_t((R + P) * 2 + C * 4 + C * 2); }

}  // namespace

bool mla_prefill_supported(int64_t kv_lora_rank, int64_t rope_dim) {
  return kv_lora_rank % 8 == 0 && (kv_lora_rank + rope_dim) % 8 == 0;
}

size_t mla_prefill_workspace_bytes(int64_t max_ctx, int64_t n_heads, int64_t kv_lora_rank, int64_t rope_dim,
                                   int64_t chunk_rows) {
  const int64_t C = round8(max_ctx), rows = std::max(chunk_rows, n_heads);
  // Three row-sized arrays, each aligned: at most 3 x kAlign more than rows x row_bytes.
  return fixed_bytes(C, kv_lora_rank, rope_dim) + size_t(rows) * row_bytes(C, kv_lora_rank, rope_dim) + 3 * kAlign;
}

Status mla_prefill(GemmContext& ctx, const MlaAttentionArgs& a, std::span<const MlaPrefillRun> runs, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream) {
  // ops::validate reads ctx_len on the host; here it is device memory (and not used): validate
  // the shape with m = 0 and check the pointers.
  MlaAttentionArgs shape = a;
  shape.m = 0;
  PG_TRY(validate(shape));
  if (!a.q_lat || !a.q_pe || (!a.kv && !a.kv_bf16) || !a.block_tables || !a.o_lat)
    return invalid_argument("mla_prefill: null input");
  const int64_t R = a.kv_lora_rank, P = a.rope_dim, D = R + P, nh = a.n_heads;
  if (!mla_prefill_supported(R, P))
    return unsupported("mla_prefill: kv_lora_rank {} and rope_dim {}: the GEMM path needs R and R + P multiples of 8", R, P);
  int64_t max_ctx = 0;
  for (const MlaPrefillRun& r : runs) {
    if (r.t0 < 0 || r.t1 <= r.t0 || r.t1 > a.m || r.start_pos < 0 || r.seq < 0)
      return invalid_argument("mla_prefill: run [{}, {}) at position {} of sequence {} is outside the step's {} tokens",
                              r.t0, r.t1, r.start_pos, r.seq, a.m);
    if ((r.start_pos + (r.t1 - r.t0) + a.block_size - 1) / a.block_size > a.max_blocks_per_seq)
      return invalid_argument("mla_prefill: run reaches position {}, past {} blocks of {}", r.start_pos + r.t1 - r.t0 - 1,
                              a.max_blocks_per_seq, a.block_size);
    max_ctx = std::max(max_ctx, r.start_pos + (r.t1 - r.t0));
  }
  if (runs.empty()) return ok_status();
  const int64_t C = round8(max_ctx);
  const size_t fixed = fixed_bytes(C, R, P), per_row = row_bytes(C, R, P);
  if (!workspace || reinterpret_cast<uintptr_t>(workspace) % kAlign ||
      workspace_bytes < fixed + size_t(nh) * per_row + 3 * kAlign)
    return invalid_argument("mla_prefill: workspace of {} bytes; {} positions of {} heads need >= {} (256-byte aligned)",
                            workspace_bytes, max_ctx, nh, mla_prefill_workspace_bytes(max_ctx, nh, R, P, nh));
  const int64_t chunk_tokens = int64_t((workspace_bytes - fixed - 3 * kAlign) / per_row) / nh;
  const int64_t rows_cap = chunk_tokens * nh;
  uint8_t* base = static_cast<uint8_t*>(workspace);
  uint16_t* kv = reinterpret_cast<uint16_t*>(base);
  uint16_t* vt = reinterpret_cast<uint16_t*>(base + align_up(size_t(C * D) * 2));
  uint8_t* o = base + fixed;
  uint16_t* q = reinterpret_cast<uint16_t*>(o);
  o += align_up(size_t(rows_cap * D) * 2);
  float* s = reinterpret_cast<float*>(o);
  o += align_up(size_t(rows_cap * C) * 4);
  uint16_t* pw = reinterpret_cast<uint16_t*>(o);

  for (const MlaPrefillRun& r : runs) {
    const int64_t n_tok = r.t1 - r.t0, ctx_all = r.start_pos + n_tok;
    MlaGatherParams g;
    g.pool = a.kv, g.pool16 = a.kv_bf16, g.table = a.block_tables + r.seq * a.max_blocks_per_seq, g.kv = kv, g.vt = vt;
    g.ctx = ctx_all, g.C = round8(ctx_all), g.D = D, g.R = R, g.block_size = a.block_size, g.ld_vt = C;
    PG_CUDA_TRY(launch_mla_gather(g, stream));
    for (int64_t c0 = 0; c0 < n_tok; c0 += chunk_tokens) {
      const int64_t c1 = std::min(n_tok, c0 + chunk_tokens), rows = (c1 - c0) * nh;
      const int64_t cols = round8(r.start_pos + c1);  // positions the chunk's last token attends to, padded
      MlaPackQParams pq;
      pq.q_lat = a.q_lat, pq.q_pe = a.q_pe, pq.q = q, pq.t0 = r.t0 + c0, pq.rows = rows, pq.n_heads = nh;
      pq.q_lat_row_stride = q_lat_row_stride(a), pq.q_lat_head_stride = q_lat_head_stride(a);
      pq.q_pe_row_stride = q_pe_row_stride(a), pq.q_pe_head_stride = q_pe_head_stride(a);
      pq.R = R, pq.P = P, pq.scale = a.softmax_scale;
      PG_CUDA_TRY(launch_mla_pack_q(pq, stream));
      GemmBf16Args sg;  // S [rows, cols] = q [rows, D] · kv [cols, D]ᵀ
      sg.x = q, sg.w = kv, sg.y = s, sg.m = rows, sg.n = cols, sg.k = D, sg.x_stride = D, sg.w_stride = D;
      sg.y_stride = cols;
      PG_TRY(gemm_bf16(ctx, sg, stream));
      MlaSoftmaxParams sp;
      sp.s = s, sp.p = pw, sp.rows = rows, sp.cols = cols, sp.ld = cols, sp.n_heads = nh;
      sp.first_pos = r.start_pos + c0;
      PG_CUDA_TRY(launch_mla_softmax(sp, stream));
      GemmBf16Args og;  // o_lat [rows, R] = P [rows, cols] · vt [R, cols]ᵀ
      og.x = pw, og.w = vt, og.y = a.o_lat + (r.t0 + c0) * nh * R, og.m = rows, og.n = R, og.k = cols;
      og.x_stride = cols, og.w_stride = C, og.y_stride = R;
      PG_TRY(gemm_bf16(ctx, og, stream));
    }
  }
  return ok_status();
}

}  // namespace pg::ops::cuda
