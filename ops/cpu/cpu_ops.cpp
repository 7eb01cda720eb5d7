// CPU reference ops (see cpu_ops.h).
#include "ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "ops/cpu/simd.h"

namespace pg::ops::cpu {

float dot(const float* a, const float* b, int64_t n) { return simd_dot(a, b, n); }

void axpy(float alpha, const float* x, float* y, int64_t n) { simd_axpy(alpha, x, y, n); }

namespace {
constexpr int64_t kNvfp4FusedTokens = 8;  // linear: NVFP4 rows dequantized in the dots up to this many tokens

// Rows [r0, r0 + n_rows) of an NVFP4 matrix against m tokens (out[t * os + r - r0]), in runs of
// rows that share one scale_2 (an expert stack's rows change it at each expert).
void nvfp4_rows(const Matrix& w, int64_t r0, int64_t n_rows, const float* x, int64_t xs, int64_t m, float* out,
                int64_t os) {
  const auto* packed = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r0 + n_rows;) {
    int64_t end = r0 + n_rows;
    if (w.scale_2_rows) end = std::min(end, (r / w.scale_2_group_rows + 1) * w.scale_2_group_rows);
    simd_dots_nvfp4_tokens(x, xs, m, packed + r * (w.cols / 2), w.scale_fp8 + r * (w.cols / 16), w.row_scale_2(r),
                           end - r, w.cols, out + (r - r0), os);
    r = end;
  }
}
}  // namespace

void dot_rows(const Matrix& w, int64_t r0, int64_t n_rows, const float* x, float* out) {
  if (w.format == WeightFormat::kNvfp4) return nvfp4_rows(w, r0, n_rows, x, w.cols, 1, out, n_rows);
  if (w.format == WeightFormat::kBF16) {
    simd_dots_bf16(x, static_cast<const uint16_t*>(w.data) + r0 * w.cols, w.cols, n_rows, w.cols, out);
    return;
  }
  if (w.format == WeightFormat::kF32) {
    simd_dots(static_cast<const float*>(w.data) + r0 * w.cols, w.cols, n_rows, x, w.cols, out);
    return;
  }
  constexpr int64_t kGroup = 4;  // rows dequantized at a time: a buffer that stays in L1
  thread_local std::vector<float> rows;
  rows.resize(size_t(kGroup * w.cols));
  for (int64_t g = 0; g < n_rows; g += kGroup) {
    const int64_t nr = std::min(kGroup, n_rows - g);
    for (int64_t j = 0; j < nr; ++j) matrix_row_to_f32(w, r0 + g + j, rows.data() + j * w.cols);
    simd_dots(rows.data(), w.cols, nr, x, w.cols, out + g);
  }
}

void linear(const LinearArgs& a, ThreadPool& pool) {
  const Matrix& w = *a.w;
  const int64_t xs = a.x_stride ? a.x_stride : w.cols, ys = a.y_stride ? a.y_stride : w.rows;
  if (a.m == 0) return;
  auto put = [&](int64_t i, int64_t r, float v) {
    float& out = a.y[i * ys + r];
    out = a.accumulate ? out + v : v;
  };
  // Parallel over output features. One token: the thread's rows through dot_rows. More: a group of
  // rows at a time against all m tokens (several rows and tokens at once in the dots; the group's
  // rows stay in cache while the tokens stream), bf16 rows converted inside the dots (groups of
  // ~32 KB of weights: few calls), NVFP4 rows too up to kNvfp4FusedTokens tokens, other formats
  // dequantized four rows at a time into `row` first (a buffer that stays in L1). Every value is
  // dot()'s bits.
  const bool bf16 = w.format == WeightFormat::kBF16;
  // NVFP4 rows are dequantized inside the dots for each block of tokens: for a few tokens (verify
  // steps) that is cheaper than a row buffer, for more (prefill) the buffer's one pass is.
  const bool nvfp4_fused = w.format == WeightFormat::kNvfp4 && a.m <= kNvfp4FusedTokens;
  const int64_t kGroup = bf16 ? std::max<int64_t>(4, (int64_t(32) << 10) / (2 * w.cols) / 4 * 4) : 4;
  pool.parallel_for(w.rows, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row, v;
    if (a.m == 1) {
      v.resize(size_t(r1 - r0));
      dot_rows(w, r0, r1 - r0, a.x, v.data());
      for (int64_t r = r0; r < r1; ++r) put(0, r, v[size_t(r - r0)]);
      return;
    }
    v.resize(size_t(a.m * kGroup));
    if (!bf16 && !nvfp4_fused && w.format != WeightFormat::kF32) row.resize(size_t(kGroup * w.cols));
    for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
      const int64_t nr = std::min(kGroup, r1 - g0);
      if (bf16) {
        simd_dots_bf16_tokens(a.x, xs, a.m, static_cast<const uint16_t*>(w.data) + g0 * w.cols, w.cols, nr, w.cols,
                              v.data(), nr);
      } else if (nvfp4_fused) {
        nvfp4_rows(w, g0, nr, a.x, xs, a.m, v.data(), nr);
      } else {
        const float* wg = static_cast<const float*>(w.data) + g0 * w.cols;
        if (w.format != WeightFormat::kF32) {
          for (int64_t j = 0; j < nr; ++j) matrix_row_to_f32(w, g0 + j, row.data() + j * w.cols);
          wg = row.data();
        }
        simd_dots_tokens(a.x, xs, a.m, wg, w.cols, nr, w.cols, v.data(), nr);
      }
      for (int64_t i = 0; i < a.m; ++i)
        for (int64_t j = 0; j < nr; ++j) put(i, g0 + j, v[size_t(i * nr + j)]);
    }
  }, /*min_chunk=*/std::max<int64_t>(1, 16384 / std::max<int64_t>(1, w.cols * a.m)));
}

void rmsnorm(const RmsNormArgs& a) {
  const int64_t xs = a.x_stride ? a.x_stride : a.n, ys = a.y_stride ? a.y_stride : a.n;
  for (int64_t i = 0; i < a.m; ++i) {
    const float* x = a.x + i * xs;
    float* y = a.y + i * ys;
    const float ms = dot(x, x, a.n) / float(a.n);
    const float inv = 1.0f / std::sqrt(ms + a.eps);
    for (int64_t j = 0; j < a.n; ++j) y[j] = a.weight[j] * (x[j] * inv);
  }
}

void rmsnorm_residual(const RmsNormResidualArgs& a) {
  const int64_t xs = a.x_stride ? a.x_stride : a.n, rs = a.residual_stride ? a.residual_stride : a.n;
  const int64_t ys = a.y_stride ? a.y_stride : a.n;
  for (int64_t i = 0; i < a.m; ++i) {
    float* r = a.residual + i * rs;
    const float* x = a.x + i * xs;  // read fully before y (which may alias x) is written
    for (int64_t j = 0; j < a.n; ++j) r[j] += x[j];
    rmsnorm(RmsNormArgs{r, a.weight, a.y + i * ys, 1, a.n, 0, 0, a.eps});
  }
}

void rope(const RopeArgs& a) {
  const int64_t half = a.rope_dim / 2;
  const RopeTable& t = *a.table;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t i = 0; i < a.m; ++i) {
    const float pos = float(a.positions[i]);
    for (int64_t k = 0; k < half; ++k) {
      const float angle = t.inv_freq[k] * pos;  // fp32 product, as the reference computes it
      cs[k] = float(std::cos(double(angle))) * t.attention_factor;
      sn[k] = float(std::sin(double(angle))) * t.attention_factor;
    }
    for (int64_t h = 0; h < a.n_heads; ++h) {
      float* x = a.x + i * a.row_stride + h * a.head_stride + a.offset;
      for (int64_t k = 0; k < half; ++k) {
        float& x0 = t.interleave ? x[2 * k] : x[k];
        float& x1 = t.interleave ? x[2 * k + 1] : x[k + half];
        const float a0 = x0, a1 = x1;
        x0 = a0 * cs[k] - a1 * sn[k];
        x1 = a1 * cs[k] + a0 * sn[k];
      }
    }
  }
}

void mla_attention(const MlaAttentionArgs& a, ThreadPool& pool) {
  const int64_t R = a.kv_lora_rank, P = a.rope_dim, D = R + P, H = a.n_heads, bs = a.block_size;
  // Every head of a token attends over the same cache rows (the latent KV), so a work item takes
  // G heads of one token and scores a cache block's rows against all of them at once
  // (simd_dots_tokens: each row loaded once for the G queries); G = every head once the tokens
  // alone keep the threads busy (prefill), else 1 (decode: the heads spread over the threads).
  // Each (token, head) still gets the bits of one row at a time (simd_dot per score, simd_axpy
  // per P·V term, in row order).
  const int64_t G = a.m >= 2 * int64_t(pool.size()) ? H : 1, groups = (H + G - 1) / G;
  pool.parallel_for(a.m * groups, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> scores, pe, weights, mx, widened;
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / groups, h0 = (item % groups) * G, g = std::min(G, H - h0);
      const int64_t n = a.ctx_len[t];
      const int32_t* table = a.block_tables + int64_t(a.token_seq[t]) * a.max_blocks_per_seq;
      const float* ql = a.q_lat + t * q_lat_row_stride(a) + h0 * q_lat_head_stride(a);
      const float* qp = a.q_pe + t * q_pe_row_stride(a) + h0 * q_pe_head_stride(a);
      scores.resize(static_cast<size_t>(g * n));  // [g][n]
      pe.resize(static_cast<size_t>(g * bs));     // [g][bs]
      weights.resize(static_cast<size_t>(bs));
      mx.assign(static_cast<size_t>(g), -std::numeric_limits<float>::infinity());
      // A bf16 pool: a block's rows widened to f32 first (exact), then the f32 pool's arithmetic.
      if (a.kv_bf16) widened.resize(size_t(bs * D));
      auto block_rows = [&](int64_t j0) -> const float* {
        const int64_t first = int64_t(table[j0 / bs]) * bs * D;
        if (!a.kv_bf16) return a.kv + first;
        const int64_t n_rows = std::min(bs, n - j0);
        for (int64_t i = 0; i < n_rows * D; ++i) widened[size_t(i)] = bf16_to_f32(a.kv_bf16[first + i]);
        return widened.data();
      };
      for (int64_t j0 = 0; j0 < n; j0 += bs) {
        const int64_t rows = std::min(bs, n - j0);
        const float* blk = block_rows(j0);
        simd_dots_tokens(ql, q_lat_head_stride(a), g, blk, D, rows, R, &scores[size_t(j0)], n);
        simd_dots_tokens(qp, q_pe_head_stride(a), g, blk + R, D, rows, P, pe.data(), bs);
        for (int64_t hh = 0; hh < g; ++hh)
          for (int64_t r = 0; r < rows; ++r) {
            float& sc = scores[size_t(hh * n + j0 + r)];
            sc = (sc + pe[size_t(hh * bs + r)]) * a.softmax_scale;
            mx[size_t(hh)] = std::max(mx[size_t(hh)], sc);
          }
      }
      for (int64_t hh = 0; hh < g; ++hh) {  // the exponentials; mx becomes 1 / their sum
        float* sh = &scores[size_t(hh * n)];
        float sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += (sh[j] = std::exp(sh[j] - mx[size_t(hh)]));
        mx[size_t(hh)] = 1.0f / sum;
        float* o = a.o_lat + (t * H + h0 + hh) * R;
        std::fill(o, o + R, 0.0f);
      }
      // P·V a block at a time for the g heads (a bf16 block widened once), each head's sum in row order.
      for (int64_t j0 = 0; j0 < n; j0 += bs) {
        const int64_t rows = std::min(bs, n - j0);
        const float* blk = block_rows(j0);
        for (int64_t hh = 0; hh < g; ++hh) {
          const float* sh = &scores[size_t(hh * n)];
          for (int64_t r = 0; r < rows; ++r) weights[size_t(r)] = sh[j0 + r] * mx[size_t(hh)];
          simd_axpys(weights.data(), blk, D, rows, a.o_lat + (t * H + h0 + hh) * R, R);
        }
      }
    }
  });
}

namespace {
// Indices of the k largest values (value descending, index ascending on ties).
void top_k_indices(const float* v, int64_t n, int64_t k, std::vector<int32_t>& out) {
  out.resize(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  std::partial_sort(out.begin(), out.begin() + k, out.end(), [&](int32_t x, int32_t y) {
    return v[x] > v[y] || (v[x] == v[y] && x < y);
  });
  out.resize(static_cast<size_t>(k));
}
}  // namespace

void moe_routing(const MoeRoutingArgs& a) {
  const int64_t E = a.n_experts, G = a.n_group, per_group = E / G;
  std::vector<float> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E)), gscore(static_cast<size_t>(G));
  std::vector<int32_t> top, gtop;
  for (int64_t t = 0; t < a.m; ++t) {
    const float* lg = a.logits + t * E;
    if (a.scoring == MoeScoring::kSigmoid) {
      for (int64_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-lg[e]));
    } else {
      const float mx = *std::max_element(lg, lg + E);
      float sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (s[e] = std::exp(lg[e] - mx));
      for (int64_t e = 0; e < E; ++e) s[e] /= sum;
    }
    for (int64_t e = 0; e < E; ++e) choice[e] = s[e] + (a.method == MoeTopk::kNoAuxTc ? a.bias[e] : 0.0f);
    if (a.method != MoeTopk::kGreedy && a.topk_group < G) {
      for (int64_t g = 0; g < G; ++g) {
        const float* c = choice.data() + g * per_group;
        if (a.method == MoeTopk::kNoAuxTc) {  // sum of the group's top-2 (top-1 if the group has one)
          top_k_indices(c, per_group, std::min<int64_t>(2, per_group), top);
          float sum = 0;
          for (int32_t i : top) sum += c[i];
          gscore[g] = sum;
        } else {
          gscore[g] = *std::max_element(c, c + per_group);
        }
      }
      top_k_indices(gscore.data(), G, a.topk_group, gtop);
      std::vector<bool> keep(size_t(G), false);
      for (int32_t g : gtop) keep[g] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!keep[e / per_group]) choice[e] = -std::numeric_limits<float>::infinity();
    }
    top_k_indices(choice.data(), E, a.top_k, top);
    float sum = 0;
    for (int64_t k = 0; k < a.top_k; ++k) sum += s[top[k]];
    const bool norm = a.norm_topk_prob && (a.scoring == MoeScoring::kSigmoid || a.top_k > 1);
    for (int64_t k = 0; k < a.top_k; ++k) {
      float w = s[top[k]];
      if (norm) w /= (sum + 1e-20f);
      a.expert_idx[t * a.top_k + k] = top[k];
      a.expert_weight[t * a.top_k + k] = w * a.routed_scaling_factor;
    }
  }
}

}  // namespace pg::ops::cpu
