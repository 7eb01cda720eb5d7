// ops::cuda::moe_router: validates, asks linear_plan for the k_split linear() would use (the
// logits' summation order), and launches the fused kernel (moe_routing.cu) or the two ops.
#include <algorithm>
#include <climits>
#include <cstdlib>

#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/weight_format.h"
#include "ops/cuda/config.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear/linear.h"
#include "ops/cuda/moe_router.h"

namespace pg::ops::cuda {

namespace {
// The one-launch path's token limit by default: kRouterFusedTokens, or PEREGRINE_ROUTER_FUSED_MAX_TOKENS
// (an A/B switch; the bits do not change).
int64_t default_fused_max_tokens() {
  static const int64_t v = [] {
    const char* e = std::getenv("PEREGRINE_ROUTER_FUSED_MAX_TOKENS");
    return e ? std::clamp<int64_t>(std::atoll(e), 0, kRouterMaxFusedTokens) : kRouterFusedTokens;
  }();
  return v;
}
}  // namespace

Status moe_router(const MoeRouterArgs& a, unsigned* counter, cudaStream_t stream, int64_t fused_max_tokens,
                  MoeRouterMode mode) {
  const bool route = mode == MoeRouterMode::kRoute;
  PG_TRY(validate(a));
  const MoeRoutingArgs& r = a.routing;
  if (r.m == 0) return ok_status();
  LinearArgs la;
  la.x = a.x, la.w = a.router, la.y = a.logits, la.m = r.m, la.x_stride = a.x_stride;
  const WeightFormat wf = a.router->format;
  const int64_t max_tokens = std::min(fused_max_tokens < 0 ? default_fused_max_tokens() : fused_max_tokens, kRouterMaxFusedTokens);
  bool fused = counter && r.m <= max_tokens && r.n_experts <= kRoutingMaxExperts && r.n_group <= kRoutingMaxGroups &&
               r.top_k <= kRoutingMaxTopK &&
               (wf == WeightFormat::kF32 || wf == WeightFormat::kBF16);
  LinearPlan plan;
  if (fused) {
    PG_ASSIGN_OR_RETURN(plan, linear_plan(la));
    fused = plan.vector_path && (kRouterThreads / 32) % plan.k_split == 0;
  }
  if (!fused) {
    PG_TRY(linear(la, stream));
    return moe_routing(r, stream);  // kLogitsOnly too: it waits for x before it lets gate_up launch
  }
  MoeRouterParams p;
  p.x = a.x, p.w = a.router->data, p.logits = a.logits, p.counter = counter;
  p.m = int(r.m), p.n = a.router->rows, p.k = a.router->cols, p.x_stride = a.x_stride ? a.x_stride : a.router->cols;
  p.k_split = plan.k_split;
  p.routing = moe_routing_params(r);
  p.route = route;
  PG_CUDA_TRY(launch_moe_router(wf == WeightFormat::kF32 ? LinearWeight::kF32 : LinearWeight::kBF16, p, stream));
  return ok_status();
}

}  // namespace pg::ops::cuda
