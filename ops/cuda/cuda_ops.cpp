// The Status-returning launchers of the small ops (validate the Args, fill the kernel Params,
// launch through kernels.h); linear's is linear/launch.cpp. Host C++, no nvcc.
#include "ops/cuda/cuda_ops.h"

#include <climits>
#include <cstdint>

#include "ops/cuda/common/align.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/config.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/moe_router.h"

namespace pg::ops::cuda {

Status rmsnorm(const RmsNormArgs& a, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (a.m > INT32_MAX) return unsupported("rmsnorm (CUDA): {} rows", a.m);
  RmsNormParams p;
  p.x = a.x, p.weight = a.weight, p.y = a.y, p.n = a.n, p.eps = a.eps;
  p.x_stride = a.x_stride ? a.x_stride : a.n;
  p.y_stride = a.y_stride ? a.y_stride : a.n;
  p.vec4 = a.n % 4 == 0 && p.x_stride % 4 == 0 && p.y_stride % 4 == 0 && aligned16(a.x) && aligned16(a.y) &&
           aligned16(a.weight);
  PG_CUDA_TRY(launch_rmsnorm(p, a.m, /*residual=*/false, stream));
  return ok_status();
}

Status rmsnorm_residual(const RmsNormResidualArgs& a, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (a.m > INT32_MAX) return unsupported("rmsnorm_residual (CUDA): {} rows", a.m);
  RmsNormParams p;
  p.x = a.x, p.residual = a.residual, p.weight = a.weight, p.y = a.y, p.n = a.n, p.eps = a.eps;
  p.x_stride = a.x_stride ? a.x_stride : a.n;
  p.r_stride = a.residual_stride ? a.residual_stride : a.n;
  p.y_stride = a.y_stride ? a.y_stride : a.n;
  p.vec4 = a.n % 4 == 0 && p.x_stride % 4 == 0 && p.r_stride % 4 == 0 && p.y_stride % 4 == 0 && aligned16(a.x) &&
           aligned16(a.residual) && aligned16(a.y) && aligned16(a.weight);
  PG_CUDA_TRY(launch_rmsnorm(p, a.m, /*residual=*/true, stream));
  return ok_status();
}

Status moe_routing(const MoeRoutingArgs& a, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (a.n_experts > kRoutingMaxExperts || a.n_group > kRoutingMaxGroups || a.top_k > kRoutingMaxTopK)
    return unsupported("moe_routing (CUDA): top {} of {} experts in {} groups; this kernel takes <= {} experts, <= {} groups, top <= {}",
                       a.top_k, a.n_experts, a.n_group, kRoutingMaxExperts, kRoutingMaxGroups, kRoutingMaxTopK);
  if (a.m > INT32_MAX - kRoutingWarpsPerBlock) return unsupported("moe_routing (CUDA): {} tokens", a.m);
  PG_CUDA_TRY(launch_moe_routing(moe_routing_params(a), stream));
  return ok_status();
}

MoeRoutingParams moe_routing_params(const MoeRoutingArgs& a) {
  MoeRoutingParams p;
  p.logits = a.logits, p.bias = a.bias, p.expert_idx = a.expert_idx, p.expert_weight = a.expert_weight;
  p.m = int(a.m), p.n_experts = int(a.n_experts), p.top_k = int(a.top_k);
  p.n_group = int(a.n_group), p.topk_group = int(a.topk_group);
  p.sigmoid = a.scoring == MoeScoring::kSigmoid;
  p.noaux_tc = a.method == MoeTopk::kNoAuxTc;
  p.group_limited = a.method != MoeTopk::kGreedy && a.topk_group < a.n_group;
  p.group_top2_sum = a.method == MoeTopk::kNoAuxTc;
  p.normalize = a.norm_topk_prob && (a.scoring == MoeScoring::kSigmoid || a.top_k > 1);
  p.routed_scaling_factor = a.routed_scaling_factor;
  return p;
}

}  // namespace pg::ops::cuda
