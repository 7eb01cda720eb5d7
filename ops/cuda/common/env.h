// The PEREGRINE_* switches of the CUDA kernels' launchers (host code, fmt-free: .cu files include it).
#pragma once

#include <cstdlib>
#include <cstring>

namespace pg::ops::cuda {

// A switch read from the environment: "1" turns it on, "0" off; unset or anything else leaves the
// default. Callers read it once (a function-local static): launchers run inside captured graphs.
inline bool env_switch(const char* name, bool default_on) {
  const char* v = std::getenv(name);
  if (v && std::strcmp(v, "1") == 0) return true;
  if (v && std::strcmp(v, "0") == 0) return false;
  return default_on;
}

// PEREGRINE_RELEASE_ARRIVE (default on; =0 off): the lean 32-row attention's split combine and the
// lean moe_router's last block arrive with one acq_rel atomic after the barrier instead of a
// fence.sc in every thread (common/sync.cuh grid_arrive). Session 20 on the H200: moonlight bf16
// +0.6%, fp8 +0.6%, nvfp4 +0.7%, V3 4L nvfp4 0.0%.
inline bool release_arrive() {
  static const bool on = env_switch("PEREGRINE_RELEASE_ARRIVE", true);
  return on;
}

// Where every vector path applies (vec_kv, vec_q, vec_out: DeepSeek's shapes and aligned buffers),
// the split-KV kernels' instantiation without the scalar fallbacks (kVec): the same executed path in
// 16% less code (8-head kernel 6,113 -> 5,159 SASS instructions), and decode faster for it on the
// H200 (2026-12-02, af7918a, b = 1 after 1,024 tokens: moonlight bf16 436.1 -> 445.6 tok/s, +2.2%;
// nvfp4 557.4 -> 572.2, +2.7%; V3 4L nvfp4 +0.4%): a launch runs its code cold, so code it skips
// still costs it (docs/decode-status.md, session 18). PEREGRINE_ATTENTION_VEC=0 launches the
// instantiation with the fallbacks everywhere (the gated test of that path on DeepSeek's shapes).
inline bool attention_vec_kernel() {
  static const bool on = env_switch("PEREGRINE_ATTENTION_VEC", true);
  return on;
}

// Where the cache's block size is a power of two (and the vector paths apply), the CUDA-core
// split-KV kernel's instantiation (32-row chunks) with
// its rarely-taken and generic code out of line or cheaper (kLean): the empty-context zero fill in
// a rolled, non-inlined function; the block's place, its split's rows and the combine's slice in
// 32-bit arithmetic (kVec's two 64-bit division calls run in every block's prologue); block indices
// by shift only; Q staged without a division per item; and a __syncwarp before the score reduction,
// without which ptxas wraps each of its shuffles in a divergent fallback (65 WARPSYNC.COLLECTIVE
// blocks, ~330 instructions inside the chunk loop at 8 heads). 8-head kernel 5,159 -> 3,521 SASS
// instructions, 16-head 4,906 -> 3,708. On the H200 (2026-12-02, ca4fa8d, b = 1 after 1,024
// tokens): moonlight bf16 456.6 -> 462.9 tok/s (+1.4%), fp8 +1.4%, nvfp4 587.1 -> 595.0 (+1.3%), V3
// 4L nvfp4 0.0%. PEREGRINE_ATTENTION_LEAN=0 launches kVec's instantiation instead (the gated test
// of that path).
inline bool attention_lean_kernel() {
  static const bool on = env_switch("PEREGRINE_ATTENTION_LEAN", true);
  return on;
}

// PEREGRINE_ATTENTION_DEFER (default on; =0 off): at decode steps of up to
// attention_defer_max_tokens() tokens the split-KV attention leaves its partials uncombined and
// W_UV's kernel combines them after its wait (ops/cuda/mla_ops.h head_linear_combine): the split
// combine's fence, ticket and waiting combiners, the o_lat stores and W_UV's o_lat loads leave the
// layer's critical path. Session 20 on the H200 (one call, alternating): moonlight bf16 +1.9%, fp8
// +4.1%, nvfp4 +2.2%.
inline bool attention_defer() {
  static const bool on = env_switch("PEREGRINE_ATTENTION_DEFER", true);
  return on;
}

// PEREGRINE_ATTENTION_DEFER_TC (default on since session 22; =0 off): the deferred form for the
// tensor-core attention too (V3's decode, the 16-head blocks): its splits leave their partials and
// W_UV's kernel combines them, as the lean CUDA-core kernel's. Session 22 on the H200 (one call,
// alternating, two rounds): V3 4L nvfp4 827.2 -> 832.3 tok/s (+0.6%).
inline bool attention_defer_tc() {
  static const bool on = env_switch("PEREGRINE_ATTENTION_DEFER_TC", true);
  return on;
}

// mla_prep lets the kernel after it (the attention, launched with PDL: mla_attention_common.cuh's
// attention_pdl, where the measurements are) launch as each of its blocks ends instead of as each
// starts, so that the attention's ~190 KB blocks do not take SMs while mla_prep's blocks are still
// being placed. PEREGRINE_MLA_PREP_LATE_TRIGGER=0 puts the trigger back at the top.
inline bool mla_prep_late_trigger() {
  static const bool on = env_switch("PEREGRINE_MLA_PREP_LATE_TRIGGER", true);
  return on;
}

// PEREGRINE_ATTENTION_EARLY_CHUNK=1 (off): the CUDA-core attention kernel loads a block's first chunk
// of cache rows before its PDL wait where the chunk holds none of the rows the step's tokens write
// (mla_attention.cu), so that load overlaps mla_prep's tail. Measured no gain (H100, 2026-12-05, 00973c9,
// b = 1 after 1,024 tokens, 2 rounds alternating): moonlight nvfp4 595.4 -> 594.3 tok/s, V3 4L nvfp4
// 710.5 -> 710.5. Its op tests and goldens under the switch have not run.
inline bool attention_early_chunk() {
  static const bool on = env_switch("PEREGRINE_ATTENTION_EARLY_CHUNK", false);
  return on;
}

// A non-negative integer from the environment, else the default (unset, empty or not a number).
inline int env_int(const char* name, int default_value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return default_value;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end == '\0' && x >= 0 && x <= (1 << 20) ? int(x) : default_value;
}

// PEREGRINE_ATTENTION_DEFER_MAX_TOKENS (default 1): the steps the deferral serves, by tokens. At two
// tokens (moonlight nvfp4's verify step at k = 1) it cost time: 2.344 ms deferred vs 2.303 not (H200,
// session 21, one call), where plain decode gained 1.666 -> 1.631 ms: W_UV's blocks combine every
// token's heads, twice the partials per block.
inline int attention_defer_max_tokens() {
  static const int v = env_int("PEREGRINE_ATTENTION_DEFER_MAX_TOKENS", 1);
  return v;
}

// head_linear, its combine and mla_prep's W_UK at 2..8 tokens (not FP8) take kHeadMTileSmall, whose x
// loads go out a token at a time (mla_ops_params.h); PEREGRINE_HEAD_TOKEN_LOADS=0 keeps kHeadMTileLarge
// there (its gated test). H100, 2026-12-05, a18f957, 2 rounds alternating in one call: moonlight nvfp4
// verify k = 1 2.245 -> 2.194 ms (-2.3%), k = 3 3.317 -> 3.176 (-4.3%); V3 4L nvfp4 -0.5% / -1.1%;
// decode unchanged (one token takes the 1-token tile).
inline bool head_token_loads() {
  static const bool on = env_switch("PEREGRINE_HEAD_TOKEN_LOADS", true);
  return on;
}

}  // namespace pg::ops::cuda
