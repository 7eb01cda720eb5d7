// The weights of a DeepSeek-V3-family model in GPU memory, laid out for the CUDA decode step:
// matrices keep their stored format (ops::Matrix with device pointers); the routed experts of a
// layer are stacked into one gate_up and one down matrix with the shared experts appended (a
// shared MLP of n_shared * inter splits exactly into n_shared experts of width inter), and a
// dense MLP is the same structure with no routed expert; W_UK is stored transposed per head so
// both absorbed products are row-major head_linear calls.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/model_config.h"
#include "model/cuda/draft_head.h"
#include "model/deepseek_weights.h"
#include "ops/cuda/common/device_arena.h"
#include "ops/head_linear.h"
#include "ops/matrix.h"

namespace pg {

struct DevAttention {
  bool has_q_lora = false;
  ops::Matrix q_a, q_b, q, kv_a, o;       // as AttentionWeights (q_proj when no q_lora)
  // [q_a ; kv_a] (or [q ; kv_a]) in one matrix when they could be joined (q_a / q and kv_a are
  // then views into it): one GEMV reads both. data == nullptr: separate.
  ops::Matrix q_kv_a;
  const float* q_a_norm = nullptr;        // [q_lora_rank] f32
  const float* kv_a_norm = nullptr;       // [kv_lora_rank] f32
  const void* w_uk_t = nullptr;           // [n_heads, kv_lora_rank, qk_nope_head_dim] head_format
  const void* w_uv = nullptr;             // [n_heads, v_head_dim, kv_lora_rank] head_format
  ops::HeadWeight head_format = ops::HeadWeight::kBF16;
  // kFp8 (ops/head_linear.h): the rows' scales, one per row and uk_group / uv_group columns.
  const float* w_uk_scale = nullptr;      // [n_heads * kv_lora_rank, ceil(qk_nope_head_dim / uk_group)]
  const float* w_uv_scale = nullptr;      // [n_heads * v_head_dim, ceil(kv_lora_rank / uv_group)]
  int64_t uk_group = 128, uv_group = 128;
  float head_y_scale = 1.0f;              // both heads' outputs times this (an NVFP4 kv_b_proj's scale_2)
  double bytes = 0;                       // what one decode step reads of all the above
};

struct DevMlp {
  ops::Matrix gate_up;  // [(n_experts + n_shared) * 2 * inter, H]: per expert its gate rows, then its up rows
  ops::Matrix down;     // [(n_experts + n_shared) * H, inter]
  int64_t inter = 0, n_experts = 0, n_shared = 0;
};

struct DevLayer {
  const float* input_norm = nullptr;  // [H] f32
  const float* post_norm = nullptr;   // [H] f32
  DevAttention attn;
  bool is_moe = false;
  ops::Matrix router;                 // [n_routed_experts, H] (MoE layers)
  const float* router_bias = nullptr; // [n_routed_experts] f32 (noaux_tc) or null
  DevMlp mlp;                         // experts (MoE) or the dense MLP (n_experts 0, n_shared 1)
};

struct DevMtp {
  ops::Matrix embed, eh_proj, head;
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  const float* head_norm = nullptr;
  DevLayer block;
};

struct DeviceWeights {
  ops::cuda::DeviceArena arena;
  ops::Matrix embed, lm_head;
  const float* norm = nullptr;  // [H] f32
  std::vector<DevLayer> layers;
  std::vector<DevMtp> mtp;
};

using LoadProgress = std::function<void(const std::string& what, double fraction)>;

// Uploads the host weights (views into the memory-mapped checkpoint).
Result<DeviceWeights> upload_weights(const ModelConfig& cfg, const ModelWeights& host, bool exact,
                                     const LoadProgress& progress);
// Random weights at cfg's shapes, made on the device: `format` (kBF16, kFp8Block: DeepSeek FP8
// 128x128 blocks, or kNvfp4: random e2m1 codes, e4m3 block scales and a scale_2 per ModelOpt
// tensor) for the attention projections and experts, with router, embeddings, lm_head and the
// absorbed W_UK / W_UV in bf16 (as DeepSeek's FP8 checkpoints keep them).
Result<DeviceWeights> synthetic_weights(const ModelConfig& cfg, ops::WeightFormat format, uint64_t seed,
                                        const LoadProgress& progress);

// The MTP layers' heads quantized for drafting (DraftHead::kModel: nothing to do): a bf16 or f32 head
// (the model's lm_head, shared, or the MTP layer's own) is quantized once on the device and each
// DevMtp::head points at its copy; the main lm_head is untouched. As DeepSeek FP8 (e4m3 codes, one
// scale per 128 x 128 block; ops/cuda/common/fp8_quantize.h) or as NVFP4 (e2m1 codes, an e4m3 scale
// per 16 values and a per-tensor scale, quantize_nvfp4's rules without the MSE search;
// nvfp4_quantize.h). Drafts stay lossless whatever head makes them (verification decides what is
// emitted); the copy cuts the bytes a draft step's head reads (moonlight: 671 MB of the draft step's
// bytes are the bf16 head; FP8 336, NVFP4 189), for some acceptance. Heads already FP8 / NVFP4, or
// whose K the kernels do not take (FP8: K % 64; NVFP4: K % 64), stay.
Status quantize_draft_heads(DeviceWeights& w, DraftHead head);

size_t matrix_elem_bytes(const ops::Matrix& m);
// Bytes of a matrix including its block scales.
size_t matrix_bytes(const ops::Matrix& m);

}  // namespace pg
