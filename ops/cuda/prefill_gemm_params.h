// The helper kernels of the tensor-core prefill paths (moe_experts_gemm.cu, head_linear_gemm.cu):
// params structs, layout constants and launch functions returning the launch's cudaError_t.
// fmt-free, so the kernel files include it; the Status-returning callers are
// moe_experts_gemm.cpp and head_linear_gemm.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pg::ops::cuda {

// Leading dimensions of every bf16 / f32 staging matrix are whole 16-byte chunks of bf16 (8
// elements): the alignment cuBLASLt's tensor-core kernels load with; padding columns are zero.
constexpr int64_t kPrefillLdAlign = 8;
inline int64_t prefill_ld(int64_t cols) { return (cols + kPrefillLdAlign - 1) / kPrefillLdAlign * kPrefillLdAlign; }

// ---- moe_experts_gemm ----

// Each expert's segment of rows is a multiple of this many rows (padding rows are zero). It
// bounds the distinct GEMM shapes (and so cuBLASLt heuristic calls and cached plans) to
// max_m / 32 per weight shape, and keeps every segment's first row 32 * 8 * 2 = 512-byte aligned
// in the bf16 matrices; the padding costs at most 31 rows per active expert, which cuBLASLt's
// 64- to 256-row tiles would mostly compute anyway.
constexpr int64_t kMoeGemmRowPad = 32;
// Plan kernels: pairs per histogram tile (= threads per block; 8 warps).
constexpr int kMoeGemmPlanTile = 256;
// Place kernel: per-warp expert histograms in shared memory (8 x n_experts ints, 32 KB at 1024).
constexpr int64_t kMoeGemmMaxExperts = 1024;
// Combine kernel: a token's routed pairs are sorted in registers of one thread.
constexpr int64_t kMoeGemmMaxTopK = 32;
constexpr int64_t kMoeGemmMaxShared = 64;

// Row space of the staging matrices ("pair rows"): the shared experts' segments first (shared
// s: rows [s * m_pad, s * m_pad + m_pad), token t at s * m_pad + t, rows >= m zero), then each
// active routed expert's segment in ascending expert id, its pairs in flat order (t * top_k + k),
// padded to kMoeGemmRowPad rows.
struct MoeGemmPlanParams {
  const int32_t* expert_idx = nullptr;  // [n_pairs] routed expert ids (ids outside [0, n_experts) skipped)
  int32_t* tile_hist = nullptr;         // [n_tiles, n_experts]: per-tile counts, then their exclusive prefix
  int32_t* count = nullptr;             // [n_experts] pairs per expert
  int32_t* seg_begin = nullptr;         // [n_experts] first pair row of each expert's segment
  int32_t* total_rows = nullptr;        // [1] pair rows in use (shared + padded routed segments)
  int32_t* row_token = nullptr;         // [max_routed_rows] token of routed row r (pair row routed_base + r), -1: padding
  int32_t* pair_row = nullptr;          // [n_pairs] pair row of each pair, -1 for a skipped id
  int n_pairs = 0, top_k = 0, n_experts = 0;
  int routed_base = 0;                  // n_shared * m_pad
  int64_t max_routed_rows = 0;
};
// hist, scan and place kernels (n_pairs > 0); row_token must be -1 beforehand (cudaMemsetAsync 0xff).
cudaError_t launch_moe_gemm_plan(const MoeGemmPlanParams& p, cudaStream_t stream);

// xg[r] = bf16(x[token of r]) for pair rows r < *total_rows (zeros for padding rows).
struct MoeGemmGatherParams {
  const float* x = nullptr;             // [m, hidden] f32
  const int32_t* row_token = nullptr;   // as MoeGemmPlanParams (unused when routed_base == total)
  const int32_t* total_rows = nullptr;  // [1] device; null: max_rows
  uint16_t* xg = nullptr;               // [max_rows, ld] bf16
  int64_t max_rows = 0, ld = 0;
  int m = 0, m_pad = 0, hidden = 0, routed_base = 0;
  bool vec = false;                     // x 16-byte aligned and hidden % 8 == 0
};
cudaError_t launch_moe_gemm_gather(const MoeGemmGatherParams& p, cudaStream_t stream);

// h[r][j] = bf16(silu(gu[r][j]) * gu[r][inter + j]) for r < rows, j < inter; h[r][j] = 0 for
// inter <= j < ld_h. silu(g) = g / (1 + exp(-g)), as ops::cpu::moe_experts.
struct MoeGemmSiluParams {
  const float* gu = nullptr;  // [rows, ld_gu] f32: gate columns [0, inter), up columns [inter, 2 inter)
  uint16_t* h = nullptr;      // [rows, ld_h] bf16
  int64_t rows = 0, ld_gu = 0, ld_h = 0;
  int inter = 0;
};
cudaError_t launch_moe_gemm_silu(const MoeGemmSiluParams& p, cudaStream_t stream);

// y[t] (+)= sum over t's routed pairs (expert id ascending, equal ids in slot order) of
// weight * z[pair row], then + z[shared row s] for s < n_shared, one f32 accumulator per output.
struct MoeGemmCombineParams {
  const float* z = nullptr;              // [rows, ld_z] f32 down outputs per pair row
  const int32_t* expert_idx = nullptr;   // [m, top_k]
  const float* expert_weight = nullptr;  // [m, top_k]
  const int32_t* pair_row = nullptr;     // [m * top_k]
  float* y = nullptr;                    // [m, hidden] f32, row stride y_stride
  int64_t ld_z = 0, y_stride = 0;
  int m = 0, m_pad = 0, hidden = 0, top_k = 0, n_experts = 0, n_shared = 0;
  bool accumulate = false;
};
cudaError_t launch_moe_gemm_combine(const MoeGemmCombineParams& p, cudaStream_t stream);

// ---- head_linear_gemm ----

// xs[(t * n_heads + h) * ld + j] = bf16(x[t * x_row_stride + h * x_head_stride + j]) for j < k,
// 0 for k <= j < ld: the heads' inputs as one dense bf16 matrix.
struct HeadStageParams {
  const float* x = nullptr;
  uint16_t* xs = nullptr;  // [m, n_heads, ld] bf16
  int64_t x_row_stride = 0, x_head_stride = 0, ld = 0;
  int64_t m = 0, n_heads = 0, k = 0;
  bool vec = false;  // x 16-byte aligned, both strides multiples of 4 (whole float4 loads)
};
cudaError_t launch_head_stage(const HeadStageParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
