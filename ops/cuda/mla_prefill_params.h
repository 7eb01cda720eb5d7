// The kernels of ops::cuda::mla_prefill (mla_prefill.cu), fmt-free for nvcc; the Status-returning
// op is mla_prefill.cpp. Every launcher returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pg::ops::cuda {

// kv [C, D] bf16 (row j = the cache row of position j of the sequence, zeros for j >= ctx) and
// vt [R, ld_vt] bf16 (vt[r][j] = kv[j][r], j < C) from the paged f32 (or bf16) pool; C >= ctx.
struct MlaGatherParams {
  const float* pool = nullptr;     // [n_blocks, block_size, D] f32
  const uint16_t* pool16 = nullptr;  // or the pool in bf16 (pool null)
  const int32_t* table = nullptr;  // this sequence's block table row
  uint16_t* kv = nullptr;          // [C, D]
  uint16_t* vt = nullptr;          // [R, ld_vt]
  int64_t ctx = 0, C = 0, D = 0, R = 0, block_size = 0, ld_vt = 0;
};
cudaError_t launch_mla_gather(const MlaGatherParams& p, cudaStream_t stream);

// q [rows, D] bf16: row i = (token t0 + i / n_heads, head i % n_heads): bf16(scale * [q_lat | q_pe]).
struct MlaPackQParams {
  const float* q_lat = nullptr;
  const float* q_pe = nullptr;
  int64_t q_lat_row_stride = 0, q_lat_head_stride = 0, q_pe_row_stride = 0, q_pe_head_stride = 0;
  uint16_t* q = nullptr;
  int64_t t0 = 0, rows = 0, n_heads = 0, R = 0, P = 0;
  float scale = 1.0f;
};
cudaError_t launch_mla_pack_q(const MlaPackQParams& p, cudaStream_t stream);

// Row i of s [rows, ld] f32 (token t = i / n_heads of the chunk) attends to positions
// 0..first_pos + t: p[i][j] = bf16(softmax(s[i][0..n])_j) there, 0 for the rest of [0, cols).
struct MlaSoftmaxParams {
  const float* s = nullptr;
  uint16_t* p = nullptr;
  int64_t rows = 0, cols = 0, ld = 0, n_heads = 0, first_pos = 0;
};
cudaError_t launch_mla_softmax(const MlaSoftmaxParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
