// CPU reference MLA helper ops (see mla_ops.h).
#include "ops/cpu/mla_ops.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"

namespace pg::ops::cpu {

void embedding(const EmbeddingArgs& a) {
  const Matrix& t = *a.table;
  const int64_t ys = a.y_stride ? a.y_stride : t.cols;
  for (int64_t i = 0; i < a.m; ++i) {
    PG_CHECK(a.tokens[i] >= 0 && a.tokens[i] < t.rows, "embedding: token id {} outside [0, {})", a.tokens[i], t.rows);
    matrix_row_to_f32(t, a.tokens[i], a.y + i * ys);
  }
}

void mla_kv_write(const MlaKvWriteArgs& a) {
  const int64_t R = a.kv_lora_rank, P = a.rope_dim, D = R + P;
  const int64_t ks = a.kv_stride ? a.kv_stride : D;
  for (int64_t t = 0; t < a.m; ++t) {
    const int64_t p = a.positions[t];
    PG_CHECK(p >= 0 && p / a.block_size < a.max_blocks_per_seq, "mla_kv_write: position {} outside {} blocks of {}", p,
             a.max_blocks_per_seq, a.block_size);
    const int32_t blk = a.block_tables[int64_t(a.token_seq[t]) * a.max_blocks_per_seq + p / a.block_size];
    PG_CHECK(blk >= 0 && blk < a.n_blocks, "mla_kv_write: block id {} outside [0, {})", blk, a.n_blocks);
    const float* src = a.kv + t * ks;
    const int64_t row = (int64_t(blk) * a.block_size + p % a.block_size) * D;
    // A bf16 pool: the f32 row here first, then rounded into the pool.
    thread_local std::vector<float> staged;
    if (a.cache_bf16) staged.resize(size_t(D));
    float* dst = a.cache_bf16 ? staged.data() : a.cache + row;
    // The model's sequence on the cache row itself: rmsnorm(c_kv), then k_pe copied and roped.
    RmsNormArgs n;
    n.x = src, n.weight = a.norm_weight, n.y = dst, n.m = 1, n.n = R, n.eps = a.eps;
    rmsnorm(n);
    std::copy(src + R, src + D, dst + R);
    RopeArgs r;
    r.x = dst, r.positions = &a.positions[t], r.table = a.table, r.m = 1, r.n_heads = 1;
    r.head_stride = D, r.row_stride = D, r.offset = R, r.rope_dim = P;
    rope(r);
    if (a.cache_bf16)
      for (int64_t j = 0; j < D; ++j) a.cache_bf16[row + j] = f32_to_bf16(dst[j]);
  }
}

void head_linear(const HeadLinearArgs& a, ThreadPool& pool) {
  if (a.m == 0) return;
  // Parallel over the n_heads * n rows of W: each row is dequantized once and used for all m.
  pool.parallel_for(a.n_heads * a.n, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row;
    row.resize(size_t(a.k));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = r / a.n, i = r % a.n;
      const float* wr;
      if (a.w_format == HeadWeight::kF32) {
        wr = static_cast<const float*>(a.w) + r * a.k;
      } else if (a.w_format == HeadWeight::kFp8) {  // code x its scale, as a dequantized kv_b_proj
        const uint8_t* wq = static_cast<const uint8_t*>(a.w) + r * a.k;
        const float* sr = a.w_scale + r * ((a.k + a.scale_group - 1) / a.scale_group);
        for (int64_t j = 0; j < a.k; ++j) row[size_t(j)] = f8e4m3_to_f32(wq[j]) * sr[j / a.scale_group];
        wr = row.data();
      } else {
        const uint16_t* wb = static_cast<const uint16_t*>(a.w) + r * a.k;
        for (int64_t j = 0; j < a.k; ++j) row[size_t(j)] = bf16_to_f32(wb[j]);
        wr = row.data();
      }
      for (int64_t t = 0; t < a.m; ++t) {
        const float v = dot(a.x + t * a.x_row_stride + h * a.x_head_stride, wr, a.k);
        a.y[t * a.y_row_stride + h * a.y_head_stride + i] = a.y_scale == 1.0f ? v : v * a.y_scale;
      }
    }
  }, /*min_chunk=*/std::max<int64_t>(1, 16384 / std::max<int64_t>(1, a.k * a.m)));
}

}  // namespace pg::ops::cpu
