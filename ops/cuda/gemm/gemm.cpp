// gemm_linear: the linear contract (ops/linear.h) as one cuBLASLt bf16 GEMM, plus the context that
// owns its handle, scratch, workspace and per-shape algorithm cache. Host C++ (no nvcc): the
// staging kernel is behind gemm/convert.h.
#include "ops/cuda/common/weight_format.h"
#include "ops/cuda/gemm/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <climits>
#include <compare>
#include <map>
#include <utility>

#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device_buffer.h"
#include "ops/cuda/gemm/convert.h"

namespace pg::ops::cuda {
namespace {

Status lt_error(cublasStatus_t st, const char* call, const char* file, int line) {
  return internal_error("cuBLASLt {} at {}:{}: {} ({})", call, file, line, cublasLtGetStatusString(st),
                        cublasLtGetStatusName(st));
}
#define PG_LT_TRY(call)                                                                        \
  do {                                                                                         \
    const cublasStatus_t _pg_lt_st = (call);                                                   \
    if (_pg_lt_st != CUBLAS_STATUS_SUCCESS) return lt_error(_pg_lt_st, #call, __FILE__, __LINE__); \
  } while (0)

// Rows of the bf16 scratch matrices are padded to whole 16-byte chunks (8 bf16), the alignment
// cuBLASLt's tensor-core kernels load with; the padding columns are zero and never multiplied.
constexpr int64_t kRowAlignElems = 8;
int64_t padded_cols(int64_t k) { return (k + kRowAlignElems - 1) / kRowAlignElems * kRowAlignElems; }

// cuBLASLt's preference default and the largest alignment it asks about.
constexpr uint32_t kMaxAlignBytes = 256;
// The largest power of two (<= 256) dividing the address: what the heuristic may assume.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return kMaxAlignBytes;
  return uint32_t(std::min<uintptr_t>(kMaxAlignBytes, a & (~a + 1)));
}
bool aligned(const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

// Everything the algorithm choice depends on. A is W (col-major k x n, transa = T), B is the x
// scratch (col-major k x m), C = D is y (col-major n x m).
struct ShapeKey {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  bool a_is_weight = false;  // A read from the caller's bf16 weight (else from the weight scratch)
  auto operator<=>(const ShapeKey&) const = default;
};

class Layout {
 public:
  Layout() = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  Layout(Layout&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Layout& operator=(Layout&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Layout() {
    if (h_) cublasLtMatrixLayoutDestroy(h_);
  }
  Status create(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    PG_LT_TRY(cublasLtMatrixLayoutCreate(&h_, type, uint64_t(rows), uint64_t(cols), ld));
    return ok_status();
  }
  // Strided batch: `count` matrices, `stride` elements apart (count 1: a plain matrix).
  Status set_batch(int64_t count, int64_t stride) {
    if (count <= 1) return ok_status();
    const int32_t c = int32_t(count);
    PG_LT_TRY(cublasLtMatrixLayoutSetAttribute(h_, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof(c)));
    PG_LT_TRY(cublasLtMatrixLayoutSetAttribute(h_, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    return ok_status();
  }
  cublasLtMatrixLayout_t get() const { return h_; }

 private:
  cublasLtMatrixLayout_t h_ = nullptr;
};

// gemm_bf16's shapes: the caller's bf16 operands, strided-batched. Alignments of A / B / C cover
// the base pointer and, with batch > 1, the batch stride in bytes (every batch's pointer).
struct Bf16Key {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  auto operator<=>(const Bf16Key&) const = default;
};

// One cached shape: its layouts and the algorithm the heuristic ranked first.
struct Plan {
  Layout a, b, c;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
  bool copy_weight = false;  // bf16 weight no algorithm takes as it is: copied into the scratch first
};

// The launch-side view of one call: where A and B come from and how x and W are staged.
struct Call {
  int64_t m = 0, n = 0, k = 0, x_stride = 0, y_stride = 0;
  int64_t ldx = 0, ldw = 0;  // the scratch leading dims (elements)
  bool expand = false;       // W is f32 / FP8: expanded into the weight scratch
};

}  // namespace

struct GemmContext::Impl {
  int64_t max_m = 0, max_k = 0, max_n = 0;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  DeviceBuffer<uint16_t> x_bf16;  // [max_m, padded_cols(max_k)] bf16
  DeviceBuffer<uint16_t> w_bf16;  // max_expand_elems bf16: [n, padded_cols(k)] per call
  DeviceBuffer<uint8_t> workspace;  // kGemmWorkspaceBytes
  std::map<ShapeKey, Plan> plans;
  std::map<Bf16Key, Plan> bf16_plans;  // gemm_bf16
  int64_t heuristic_calls = 0;
  GemmContext::StagingStream staging;

  ~Impl() {
    for (cudaEvent_t e : {staging.begin, staging.staged[0], staging.staged[1], staging.consumed[0], staging.consumed[1]})
      if (e) cudaEventDestroy(e);
    if (staging.stream) cudaStreamDestroy(staging.stream);
    plans.clear();  // layouts before the handle
    bf16_plans.clear();
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
  }

  // Validates a against this context and fills the call's dims.
  Result<Call> make_call(const LinearArgs& a) const {
    PG_TRY(validate(a));
    const Matrix& w = *a.w;
    Call c;
    c.m = a.m, c.n = w.rows, c.k = w.cols;
    c.x_stride = a.x_stride ? a.x_stride : w.cols;
    c.y_stride = a.y_stride ? a.y_stride : w.rows;
    c.ldx = padded_cols(c.k);
    c.ldw = padded_cols(c.k);
    c.expand = w.format != WeightFormat::kBF16;
    if (c.m > max_m || c.k > max_k)
      return failed_precondition("gemm_linear: m={} k={} exceeds the context's max_m={} max_k={}", c.m, c.k, max_m,
                                 max_k);
    if (c.expand && c.n * c.ldw > int64_t(w_bf16.size()))
      return failed_precondition(
          "gemm_linear: a {} x {} {} weight needs {} bf16 of weight scratch; the context has {} (max_expand_elems)",
          c.n, c.k, w.format == WeightFormat::kF32 ? "f32" : w.format == WeightFormat::kNvfp4 ? "NVFP4" : "FP8",
          c.n * c.ldw, w_bf16.size());
    return c;
  }

  // Asks the heuristic for an algorithm for `key`; *found = false when none exists for it.
  Status try_plan(const ShapeKey& key, Plan& plan, bool* found) {
    *found = false;
    PG_TRY(plan.a.create(CUDA_R_16BF, key.k, key.n, key.lda));
    PG_TRY(plan.b.create(CUDA_R_16BF, key.k, key.m, key.ldb));
    PG_TRY(plan.c.create(CUDA_R_32F, key.n, key.m, key.ldc));
    return choose_algo(plan, key.align_a, key.align_b, key.align_c, found);
  }

  // gemm_bf16's variant of try_plan: batched layouts.
  Status try_plan_bf16(const Bf16Key& key, Plan& plan, bool* found) {
    *found = false;
    PG_TRY(plan.a.create(CUDA_R_16BF, key.k, key.n, key.lda));
    PG_TRY(plan.b.create(CUDA_R_16BF, key.k, key.m, key.ldb));
    PG_TRY(plan.c.create(CUDA_R_32F, key.n, key.m, key.ldc));
    PG_TRY(plan.a.set_batch(key.batch, key.stride_a));
    PG_TRY(plan.b.set_batch(key.batch, key.stride_b));
    PG_TRY(plan.c.set_batch(key.batch, key.stride_c));
    return choose_algo(plan, key.align_a, key.align_b, key.align_c, found);
  }

  // The heuristic's first algorithm for plan's layouts under these alignments (bytes).
  Status choose_algo(Plan& plan, uint32_t align_a, uint32_t align_b, uint32_t align_c, bool* found) {
    *found = false;
    const uint64_t ws = uint64_t(kGemmWorkspaceBytes);
    PG_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
    for (const auto& [attr, v] : aligns) PG_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    ++heuristic_calls;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, plan.a.get(), plan.b.get(), plan.c.get(),
                                                             plan.c.get(), pref, 1, &result, &count);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return ok_status();  // no algorithm for this layout
    if (st != CUBLAS_STATUS_SUCCESS) return lt_error(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    if (count < 1 || result.state != CUBLAS_STATUS_SUCCESS) return ok_status();
    plan.algo = result.algo;
    plan.workspace_bytes = result.workspaceSize;
    *found = true;
    return ok_status();
  }

  // The cached plan of this call, chosen at its first use.
  Result<const Plan*> plan_for(const LinearArgs& a, const Call& c) {
    ShapeKey key;
    key.m = c.m, key.n = c.n, key.k = c.k;
    key.ldb = c.ldx, key.ldc = c.y_stride;
    key.align_b = alignment_of(x_bf16.data());
    key.align_c = alignment_of(a.y);
    key.a_is_weight = !c.expand;
    key.lda = c.expand ? c.ldw : c.k;
    key.align_a = c.expand ? alignment_of(w_bf16.data()) : alignment_of(a.w->data);
    if (auto it = plans.find(key); it != plans.end()) return &it->second;

    Plan plan;
    bool found = false;
    PG_TRY(try_plan(key, plan, &found));
    if (!found && !c.expand && c.n * c.ldw <= int64_t(w_bf16.size())) {
      // A bf16 weight whose rows or pointer no algorithm takes: stage it in aligned rows.
      ShapeKey staged = key;
      staged.lda = c.ldw;
      staged.align_a = alignment_of(w_bf16.data());
      plan = Plan{};
      PG_TRY(try_plan(staged, plan, &found));
      plan.copy_weight = found;
    }
    if (!found)
      return unsupported(
          "gemm_linear: cuBLASLt has no bf16 algorithm for m={} n={} k={} (lda={} ldb={} ldc={}, alignment {}/{}/{} "
          "bytes){}; use ops::cuda::linear",
          c.m, c.n, c.k, key.lda, key.ldb, key.ldc, key.align_a, key.align_b, key.align_c,
          key.a_is_weight ? " and no weight scratch to stage the weight in" : "");
    return &plans.emplace(key, std::move(plan)).first->second;
  }
};

GemmContext::GemmContext() : impl_(std::make_unique<Impl>()) {}
GemmContext::GemmContext(GemmContext&&) noexcept = default;
GemmContext& GemmContext::operator=(GemmContext&&) noexcept = default;
GemmContext::~GemmContext() = default;

int64_t GemmContext::max_m() const { return impl_->max_m; }
int64_t GemmContext::max_k() const { return impl_->max_k; }
int64_t GemmContext::max_n() const { return impl_->max_n; }
int64_t GemmContext::device_bytes() const {
  return int64_t(impl_->x_bf16.bytes() + impl_->w_bf16.bytes() + impl_->workspace.bytes());
}
int64_t GemmContext::cached_shapes() const { return int64_t(impl_->plans.size() + impl_->bf16_plans.size()); }
int64_t GemmContext::heuristic_calls() const { return impl_->heuristic_calls; }
const GemmContext::StagingStream& GemmContext::staging() const { return impl_->staging; }

Result<GemmContext> GemmContext::create(int64_t max_m, int64_t max_k, int64_t max_n, int64_t max_expand_elems) {
  if (max_m <= 0 || max_k <= 0 || max_n <= 0 || max_expand_elems < -1)
    return invalid_argument("GemmContext: max_m={} max_k={} max_n={} max_expand_elems={} (dims must be positive)",
                            max_m, max_k, max_n, max_expand_elems);
  GemmContext ctx;
  Impl& s = *ctx.impl_;
  s.max_m = max_m, s.max_k = max_k, s.max_n = max_n;
  const int64_t expand = max_expand_elems < 0 ? max_n * padded_cols(max_k) : max_expand_elems;
  PG_ASSIGN_OR_RETURN(s.x_bf16, DeviceBuffer<uint16_t>::create(size_t(max_m * padded_cols(max_k))));
  PG_ASSIGN_OR_RETURN(s.w_bf16, DeviceBuffer<uint16_t>::create(size_t(expand)));
  PG_ASSIGN_OR_RETURN(s.workspace, DeviceBuffer<uint8_t>::create(size_t(kGemmWorkspaceBytes)));
  PG_LT_TRY(cublasLtCreate(&s.handle));
  PG_LT_TRY(cublasLtMatmulDescCreate(&s.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  PG_LT_TRY(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  PG_LT_TRY(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  PG_LT_TRY(cublasLtMatmulPreferenceCreate(&s.pref));
  PG_CUDA_TRY(cudaStreamCreateWithFlags(&s.staging.stream, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&s.staging.begin, &s.staging.staged[0], &s.staging.staged[1], &s.staging.consumed[0],
                         &s.staging.consumed[1]})
    PG_CUDA_TRY(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  return ctx;
}

Status gemm_prepare(GemmContext& ctx, const LinearArgs& a) {
  GemmContext::Impl& s = *ctx.impl_;
  PG_ASSIGN_OR_RETURN(const Call c, s.make_call(a));
  if (c.m == 0) return ok_status();
  PG_ASSIGN_OR_RETURN(const Plan* plan, s.plan_for(a, c));
  (void)plan;
  return ok_status();
}

Status gemm_linear(GemmContext& ctx, const LinearArgs& a, cudaStream_t stream) {
  GemmContext::Impl& s = *ctx.impl_;
  PG_ASSIGN_OR_RETURN(const Call c, s.make_call(a));
  if (c.m == 0) return ok_status();
  PG_ASSIGN_OR_RETURN(const Plan* plan, s.plan_for(a, c));
  const Matrix& w = *a.w;

  // x [m, k] f32 -> x scratch [m, ldx] bf16.
  ToBf16Params xp;
  xp.src = a.x, xp.dst = s.x_bf16.data();
  xp.rows = c.m, xp.cols = c.k, xp.src_stride = c.x_stride, xp.dst_stride = c.ldx;
  xp.src_type = ToBf16Src::kF32;
  xp.vec = aligned(a.x, 16) && c.x_stride % 4 == 0;
  PG_CUDA_TRY(launch_to_bf16(xp, stream));

  const void* w_ptr = w.data;
  if (c.expand || plan->copy_weight) {  // W [n, k] -> weight scratch [n, ldw] bf16
    ToBf16Params wp;
    wp.src = w.data, wp.dst = s.w_bf16.data();
    wp.rows = c.n, wp.cols = c.k, wp.src_stride = c.k, wp.dst_stride = c.ldw;
    switch (w.format) {
      case WeightFormat::kF32:
        wp.src_type = ToBf16Src::kF32;
        wp.vec = aligned(w.data, 16) && c.k % 4 == 0;
        break;
      case WeightFormat::kBF16:
        wp.src_type = ToBf16Src::kBF16;
        wp.vec = aligned(w.data, 16) && c.k % 8 == 0;
        break;
      case WeightFormat::kFp8Block:
        wp.src_type = ToBf16Src::kFp8Block;
        wp.scale_inv = w.scale_inv;
        wp.block_rows = w.block_rows, wp.block_cols = w.block_cols, wp.scale_cols = w.scale_cols();
        wp.vec = aligned(w.data, 8) && c.k % 8 == 0 && w.block_cols % kToBf16Chunk == 0;
        break;
      case WeightFormat::kNvfp4:
        wp.src_type = ToBf16Src::kNvfp4;
        wp.scale_fp8 = w.scale_fp8, wp.scale_2 = w.scale_2;
        wp.scale_2_rows = w.scale_2_rows, wp.scale_2_group_rows = w.scale_2_rows ? w.scale_2_group_rows : 1;
        wp.vec = aligned(w.data, 4) && c.k % 8 == 0;
        break;
    }
    PG_CUDA_TRY(launch_to_bf16(wp, stream));
    w_ptr = s.w_bf16.data();
  }

  const float alpha = 1.0f, beta = a.accumulate ? 1.0f : 0.0f;
  PG_LT_TRY(cublasLtMatmul(s.handle, s.desc, &alpha, w_ptr, plan->a.get(), s.x_bf16.data(), plan->b.get(), &beta, a.y,
                           plan->c.get(), a.y, plan->c.get(), &plan->algo, s.workspace.data(),
                           size_t(kGemmWorkspaceBytes), stream));
  return ok_status();
}

Status gemm_bf16(GemmContext& ctx, const GemmBf16Args& a, cudaStream_t stream) {
  GemmContext::Impl& s = *ctx.impl_;
  const int64_t xs = a.x_stride ? a.x_stride : a.k, ws = a.w_stride ? a.w_stride : a.k;
  const int64_t ys = a.y_stride ? a.y_stride : a.n;
  if (a.m < 0 || a.n <= 0 || a.k <= 0 || a.batch < 1 || a.batch > INT32_MAX || xs < a.k || ws < a.k || ys < a.n ||
      a.x_batch_stride < 0 || a.w_batch_stride < 0 || a.y_batch_stride < 0)
    return invalid_argument(
        "gemm_bf16: bad dims m={} n={} k={} batch={} strides x {} w {} y {} (batch strides {} {} {})", a.m, a.n, a.k,
        a.batch, xs, ws, ys, a.x_batch_stride, a.w_batch_stride, a.y_batch_stride);
  if (a.m == 0) return ok_status();
  if (!a.x || !a.w || !a.y) return invalid_argument("gemm_bf16: null operand");
  // A batch's pointer is base + b * stride: its alignment is the base's and the stride's (bytes).
  const auto align = [&](const void* p, int64_t batch_stride_bytes) {
    uint32_t al = alignment_of(p);
    if (a.batch > 1) al = std::min(al, alignment_of(reinterpret_cast<const void*>(uintptr_t(batch_stride_bytes))));
    return al;
  };
  Bf16Key key;
  key.m = a.m, key.n = a.n, key.k = a.k, key.batch = a.batch;
  key.lda = ws, key.ldb = xs, key.ldc = ys;
  if (a.batch > 1) key.stride_a = a.w_batch_stride, key.stride_b = a.x_batch_stride, key.stride_c = a.y_batch_stride;
  key.align_a = align(a.w, a.w_batch_stride * 2);
  key.align_b = align(a.x, a.x_batch_stride * 2);
  key.align_c = align(a.y, a.y_batch_stride * 4);
  auto it = s.bf16_plans.find(key);
  if (it == s.bf16_plans.end()) {
    Plan plan;
    bool found = false;
    PG_TRY(s.try_plan_bf16(key, plan, &found));
    if (!found)
      return unsupported(
          "gemm_bf16: cuBLASLt has no bf16 algorithm for m={} n={} k={} batch={} (lda={} ldb={} ldc={}, alignment "
          "{}/{}/{} bytes)",
          a.m, a.n, a.k, a.batch, key.lda, key.ldb, key.ldc, key.align_a, key.align_b, key.align_c);
    it = s.bf16_plans.emplace(key, std::move(plan)).first;
  }
  const Plan& plan = it->second;
  const float alpha = a.alpha, beta = a.accumulate ? 1.0f : 0.0f;
  PG_LT_TRY(cublasLtMatmul(s.handle, s.desc, &alpha, a.w, plan.a.get(), a.x, plan.b.get(), &beta, a.y, plan.c.get(),
                           a.y, plan.c.get(), &plan.algo, s.workspace.data(), size_t(kGemmWorkspaceBytes), stream));
  return ok_status();
}

Status round_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (!x || !y))) return invalid_argument("round_to_bf16: n={} with null x/y", n);
  if (n == 0) return ok_status();
  ToBf16Params p;
  p.src = x, p.dst = y;
  p.rows = 1, p.cols = n, p.src_stride = n, p.dst_stride = n;
  p.src_type = ToBf16Src::kF32;
  p.vec = aligned(x, 16);
  PG_CUDA_TRY(launch_to_bf16(p, stream));
  return ok_status();
}

}  // namespace pg::ops::cuda
