// bench_ops_cuda: the CUDA decode kernels at real shapes (benchmarks.md "Kernel figures"): µs,
// GB/s and % of the HBM read ceiling measured in the same run; weights rotated through > L2;
// medians of timed runs after warm-up; a table on stdout and JSON with --json PATH.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ops/cuda/common/probe.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/device_buffer.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm/convert.h"
#include "ops/cuda/linear/linear.h"
#include "ops/cuda/moe_experts/moe_experts.h"

namespace pg::bench {
namespace {

using ops::Matrix;
using ops::WeightFormat;
namespace cu = ops::cuda;
using ops::cuda::FillKind;
using ops::cuda::launch_fill;
using ops::cuda::launch_read_ceiling;
using ops::cuda::launch_read_pattern;
using ops::cuda::launch_ring_probe;
using ops::cuda::RingProbeParams;
using ops::cuda::load_kind_name;
using ops::cuda::LoadKind;

constexpr int kWarmup = 3;
constexpr int kTimed = 30;         // per-launch event pairs; the median is reported (>= 10)
// Kernels per captured graph (back-to-back): at least 40, and for the GEMVs at least one per
// rotated weight copy, so that replays too stream > 4x L2 of distinct weights.
constexpr int kGraphLaunches = 40;
constexpr int kGraphReplays = 7;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

#define BENCH_CHECK(expr)                                                          \
  do {                                                                             \
    const ::pg::Status _s = (expr);                                                \
    if (!_s.ok()) {                                                                \
      std::fprintf(stderr, "bench_ops_cuda: %s\n  at %s:%d\n", _s.to_string().c_str(), __FILE__, __LINE__); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

Status cuda_status(cudaError_t e, const char* what) {
  PG_CUDA_TRY(e);
  (void)what;
  return ok_status();
}

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  double ms() const {
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    return t;
  }
};

// Times `launch(i)` (i = rotation index): median µs of single launches bracketed by events, and
// µs per kernel when graph_launches of them replay back-to-back from a CUDA graph (graph: else
// us_graph = 0). A failure (a launch error, or one the graph capture refuses) returns its status,
// the figures not measured left at -1.
template <typename Launch>
Status time_launches(cudaStream_t s, Launch launch, double& us_single, double& us_graph, bool graph = true,
                     int graph_launches = kGraphLaunches) {
  us_single = us_graph = -1;
  int rot = 0;
  for (int i = 0; i < kWarmup; ++i) PG_TRY(launch(rot++));
  PG_CUDA_TRY(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int i = 0; i < kTimed; ++i) {
    Events e;
    cudaEventRecord(e.a, s);
    PG_TRY(launch(rot++));
    cudaEventRecord(e.b, s);
    PG_CUDA_TRY(cudaEventSynchronize(e.b));
    t.push_back(e.ms() * 1e3);
  }
  us_single = median(t);
  if (!graph) {
    us_graph = 0;
    return ok_status();
  }

  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  PG_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < graph_launches; ++i) {
    if (const Status st = launch(rot++); !st.ok()) {
      cudaStreamEndCapture(s, &g);
      if (g) cudaGraphDestroy(g);
      return st;
    }
  }
  PG_CUDA_TRY(cudaStreamEndCapture(s, &g));
  if (const cudaError_t ie = cudaGraphInstantiate(&ge, g, 0); ie != cudaSuccess) {
    cudaGraphDestroy(g);
    PG_CUDA_TRY(ie);
  }
  PG_CUDA_TRY(cudaGraphLaunch(ge, s));
  PG_CUDA_TRY(cudaStreamSynchronize(s));
  t.clear();
  for (int i = 0; i < kGraphReplays; ++i) {
    Events e;
    cudaEventRecord(e.a, s);
    PG_CUDA_TRY(cudaGraphLaunch(ge, s));
    cudaEventRecord(e.b, s);
    PG_CUDA_TRY(cudaEventSynchronize(e.b));
    t.push_back(e.ms() * 1e3 / graph_launches);
  }
  us_graph = median(t);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ok_status();
}

// time_launches, and a failure ends the benchmark.
template <typename Launch>
void time_kernel(cudaStream_t s, Launch launch, double& us_single, double& us_graph, bool graph = true,
                 int graph_launches = kGraphLaunches) {
  BENCH_CHECK(time_launches(s, launch, us_single, us_graph, graph, graph_launches));
}

struct Ceiling {
  double read_gbps = 0;   // best read-only reduction
  double copy_gbps = 0;   // cudaMemcpy device-to-device, bytes read + written
  std::string config;
  std::vector<std::pair<std::string, double>> all;
};

Ceiling measure_ceiling(cudaStream_t s, int sm_count) {
  Ceiling c;
  const size_t bytes = size_t(4) << 30;  // 4 GiB: 70x the L2
  auto buf = cu::DeviceBuffer<uint8_t>::create(bytes);
  BENCH_CHECK(buf.status());
  auto sink = cu::DeviceBuffer<uint32_t>::create(1);
  BENCH_CHECK(sink.status());
  BENCH_CHECK(cuda_status(launch_fill(buf->data(), bytes / 4, FillKind::kF32Pm1, 99, s), "fill"));
  for (LoadKind kind : {LoadKind::kStream, LoadKind::kNc, LoadKind::kNcNoAlloc, LoadKind::kNcNoAllocL2Prefetch})
    for (int unroll : {4, 8})
      for (int bps : {2, 4, 8}) {
        const int threads = 512, blocks = sm_count * bps;
        double us1 = 0, usg = 0;
        // A 4 GiB pass is ~1 ms: launch overhead is noise, so the single-launch median is the figure.
        time_kernel(s, [&](int) {
          PG_CUDA_TRY(launch_read_ceiling(buf->data(), bytes, blocks, threads, unroll, kind, sink->data(), s));
          return ok_status();
        }, us1, usg, /*graph=*/false);
        const double gbps = double(bytes) / (us1 * 1e-6) / 1e9;
        const std::string name = std::string(load_kind_name(kind)) + " u" + std::to_string(unroll) + " " +
                                 std::to_string(bps) + "x" + std::to_string(threads) + "/SM";
        c.all.emplace_back(name, gbps);
        if (gbps > c.read_gbps) c.read_gbps = gbps, c.config = name;
      }
  {
    const size_t half = bytes / 2;
    double us1 = 0, usg = 0;
    time_kernel(s, [&](int) {
      PG_CUDA_TRY(cudaMemcpyAsync(buf->data() + half, buf->data(), half, cudaMemcpyDeviceToDevice, s));
      return ok_status();
    }, us1, usg, /*graph=*/false);
    c.copy_gbps = 2.0 * double(half) / (us1 * 1e-6) / 1e9;
  }
  return c;
}

// The NVFP4 MoE gate_up's read pattern (16 rows, 128 bytes of each a step) against the same bytes read in
// 2 KB runs (a tiled layout), at moonlight's rows (hidden 2048: 1 KB of codes) and V3's (7168: 3.5 KB),
// 3 or 6 steps in flight a warp, 2 or 4 blocks of 4 warps an SM; 1 GiB a pass (20x the L2).
void measure_patterns(cudaStream_t s, int sm_count, double ceiling_gbps) {
  const size_t bytes = size_t(1) << 30;
  auto buf = cu::DeviceBuffer<uint8_t>::create(bytes);
  BENCH_CHECK(buf.status());
  auto sink = cu::DeviceBuffer<uint32_t>::create(1);
  BENCH_CHECK(sink.status());
  BENCH_CHECK(cuda_status(launch_fill(buf->data(), bytes / 4, FillKind::kF32Pm1, 7, s), "fill"));
  std::printf("\nRead patterns (1 GiB, ld.global.nc.L1::no_allocate, median of %d; %% of the ceiling):\n", kTimed);
  std::printf("  row bytes  depth  blocks/SM  16 rows x 128 B a step  2 KB runs (tiled)\n");
  for (int row_bytes : {1024, 3584})
    for (int depth : {3, 6})
      for (int bps : {2, 4}) {
        double gbps[2] = {};
        for (int tiled = 0; tiled < 2; ++tiled) {
          double us1 = 0, usg = 0;
          time_kernel(s, [&](int) {
            PG_CUDA_TRY(launch_read_pattern(buf->data(), bytes, row_bytes, tiled == 1, depth, sm_count * bps, sink->data(), s));
            return ok_status();
          }, us1, usg, /*graph=*/false);
          const size_t read = bytes / (16 * size_t(row_bytes)) * (16 * size_t(row_bytes));
          gbps[tiled] = double(read) / (us1 * 1e-6) / 1e9;
        }
        std::printf("  %9d  %5d  %6d x4w  %7.0f GB/s (%3.0f%%)     %7.0f GB/s (%3.0f%%)\n", row_bytes, depth, bps,
                    gbps[0], 100 * gbps[0] / ceiling_gbps, gbps[1], 100 * gbps[1] / ceiling_gbps);
      }
}

// The NVFP4 MoE gate_up's routed streaming alone (launch_ring_probe) at moonlight's shape: K 2048, two
// blocks of 4 warps an SM (264 on the H200, as the one-token kernel's routed blocks), each warp one
// 16-row tile, every block released at once; the kernel's 2-slot ring against 4 and 8 slots, with no
// stage work and with the kernel's. Says whether a routed block's ~8.2 us for its 73.6 KB (a
// session-29 timeline: ~half an SM's share of the read ceiling) is the ring's shape or its work.
void measure_ring(cudaStream_t s, int sm_count, double ceiling_gbps) {
  constexpr int64_t kK = 2048;
  constexpr int kLaunches = 15, kWarm = 3, kRegions = 16;  // 16 regions of ~19.5 MB: 6x the L2 between reuses
  const int blocks = 2 * sm_count;
  const int64_t tiles = int64_t(blocks) * 4, rows = tiles * 16;
  const size_t codes_region = size_t(rows * kK / 2), scales_region = size_t(rows * kK / 16);
  auto codes = cu::DeviceBuffer<uint8_t>::create(codes_region * kRegions);
  BENCH_CHECK(codes.status());
  auto scales = cu::DeviceBuffer<uint8_t>::create(scales_region * kRegions);
  BENCH_CHECK(scales.status());
  auto counter = cu::DeviceBuffer<unsigned>::create(1);
  BENCH_CHECK(counter.status());
  auto times = cu::DeviceBuffer<unsigned long long>::create(size_t(3 * tiles));
  BENCH_CHECK(times.status());
  BENCH_CHECK(cuda_status(launch_fill(codes->data(), codes_region * kRegions, FillKind::kBytes, 11, s), "fill"));
  BENCH_CHECK(cuda_status(launch_fill(scales->data(), scales_region * kRegions, FillKind::kE4m3Scale, 12, s), "fill"));
  const double bytes = double(codes_region + scales_region);
  std::printf("\nThe gate_up's ring alone (K %lld, %d blocks x 4 warps, a 16-row tile a warp, %.1f MB a launch, every\n"
              "block released at once; median of %d launches, us after the release):\n",
              static_cast<long long>(kK), blocks, bytes / 1e6, kLaunches);
  std::printf("  slots  stage work      first stage  a warp streams (median / max)  all done  GB/s (%% of ceiling)\n");
  std::vector<unsigned long long> host(size_t(3 * tiles));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  int region = 0;
  for (int slots : {2, 4, 8})
    for (bool work : {false, true}) {
      std::vector<double> first, stream_med, stream_max, span;
      for (int i = 0; i < kWarm + kLaunches; ++i, region = (region + 1) % kRegions) {
        RingProbeParams p;
        p.codes = codes->data() + size_t(region) * codes_region;
        p.scales = scales->data() + size_t(region) * scales_region;
        p.k = kK, p.blocks = blocks, p.slots = slots, p.work = work;
        p.counter = counter->data(), p.times = times->data();
        if (const cudaError_t e = launch_ring_probe(p, s); e != cudaSuccess) {  // e.g. the blocks do not fit at once
          std::printf("  %5d  ring probe not run: %s\n", slots, cudaGetErrorString(e));
          cudaGetLastError();
          return;
        }
        BENCH_CHECK(cuda_status(cudaMemcpyAsync(host.data(), times->data(), host.size() * sizeof(host[0]),
                                                cudaMemcpyDeviceToHost, s), "ring probe times"));
        BENCH_CHECK(cuda_status(cudaStreamSynchronize(s), "ring probe"));
        if (i < kWarm) continue;
        unsigned long long t0 = ~0ull, t_end = 0;
        for (int64_t w = 0; w < tiles; ++w) t0 = std::min(t0, host[3 * w]), t_end = std::max(t_end, host[3 * w + 2]);
        std::vector<double> f, d;
        for (int64_t w = 0; w < tiles; ++w) {
          f.push_back(double(host[3 * w + 1] - t0) / 1e3);
          d.push_back(double(host[3 * w + 2] - host[3 * w]) / 1e3);
        }
        first.push_back(median(f));
        stream_med.push_back(median(d));
        stream_max.push_back(*std::max_element(d.begin(), d.end()));
        span.push_back(double(t_end - t0) / 1e3);
      }
      const double us = median(span), gbps = bytes / (us * 1e-6) / 1e9;
      std::printf("  %5d  %-14s %8.2f us  %8.2f / %6.2f us           %6.2f us  %6.0f (%3.0f%%)\n", slots,
                  work ? "unpack + mma" : "none", median(first), median(stream_med), median(stream_max), us, gbps,
                  100 * gbps / ceiling_gbps);
    }
}

struct Shape {
  const char* name;
  WeightFormat format;
  int64_t m, n, k;
  bool exact = false;  // NVFP4, FP8: f16_activations = false (the f32-x kernel); else the f16 tensor-core one
};

const Shape kShapes[] = {
    // DeepSeek-V3 / R1 (DeepSeek-FP8 checkpoint; lm_head and router bf16).
    {"v3.q_a+kv_a 7168->2112 fp8", WeightFormat::kFp8Block, 1, 2112, 7168},
    {"v3.q_b 1536->24576 fp8", WeightFormat::kFp8Block, 1, 24576, 1536},
    {"v3.kv_b 512->32768 fp8", WeightFormat::kFp8Block, 1, 32768, 512},
    {"v3.o_proj 16384->7168 fp8", WeightFormat::kFp8Block, 1, 7168, 16384},
    {"v3.expert gate|up 7168->4096 fp8", WeightFormat::kFp8Block, 1, 4096, 7168},
    {"v3.expert down 2048->7168 fp8", WeightFormat::kFp8Block, 1, 7168, 2048},
    {"v3.dense gate|up 7168->36864 fp8", WeightFormat::kFp8Block, 1, 36864, 7168},
    {"v3.dense down 18432->7168 fp8", WeightFormat::kFp8Block, 1, 7168, 18432},
    {"v3.router 7168->256 bf16", WeightFormat::kBF16, 1, 256, 7168},
    {"v3.lm_head 7168->129280 bf16", WeightFormat::kBF16, 1, 129280, 7168},
    // The brief's bf16 reference shapes.
    {"bf16 7168->18432", WeightFormat::kBF16, 1, 18432, 7168},
    {"bf16 18432->7168", WeightFormat::kBF16, 1, 7168, 18432},
    {"bf16 2048->11264", WeightFormat::kBF16, 1, 11264, 2048},
    {"bf16 11264->2048", WeightFormat::kBF16, 1, 2048, 11264},
    // moonlight-16b-a3b, bf16.
    {"moon.q_proj 2048->3072 bf16", WeightFormat::kBF16, 1, 3072, 2048},
    {"moon.kv_a 2048->576 bf16", WeightFormat::kBF16, 1, 576, 2048},
    {"moon.kv_b 512->4096 bf16", WeightFormat::kBF16, 1, 4096, 512},
    {"moon.o_proj 2048->2048 bf16", WeightFormat::kBF16, 1, 2048, 2048},
    {"moon.expert gate|up 2048->2816 bf16", WeightFormat::kBF16, 1, 2816, 2048},
    {"moon.expert down 1408->2048 bf16", WeightFormat::kBF16, 1, 2048, 1408},
    {"moon.router 2048->64 bf16", WeightFormat::kBF16, 1, 64, 2048},
    {"moon.lm_head 2048->163840 bf16", WeightFormat::kBF16, 1, 163840, 2048},
    // Small M (draft verification) at one large shape per format.
    {"bf16 7168->18432 m2", WeightFormat::kBF16, 2, 18432, 7168},
    {"bf16 7168->18432 m4", WeightFormat::kBF16, 4, 18432, 7168},
    {"bf16 7168->18432 m8", WeightFormat::kBF16, 8, 18432, 7168},
    {"bf16 7168->18432 m16", WeightFormat::kBF16, 16, 18432, 7168},
    {"fp8 7168->18432 m1", WeightFormat::kFp8Block, 1, 18432, 7168},
    {"fp8 7168->18432 m4", WeightFormat::kFp8Block, 4, 18432, 7168},
    {"fp8 7168->18432 m16", WeightFormat::kFp8Block, 16, 18432, 7168},
    {"fp8 7168->18432 m2", WeightFormat::kFp8Block, 2, 18432, 7168},
    {"fp8 7168->18432 m8", WeightFormat::kFp8Block, 8, 18432, 7168},
    // FP8's exact mode (f32 x, the CUDA-core kernel; the tensor-core one above) at the same shapes.
    {"v3.q_a+kv_a 7168->2112 fp8 exact", WeightFormat::kFp8Block, 1, 2112, 7168, true},
    {"v3.o_proj 16384->7168 fp8 exact", WeightFormat::kFp8Block, 1, 7168, 16384, true},
    {"v3.expert down 2048->7168 fp8 exact", WeightFormat::kFp8Block, 1, 7168, 2048, true},
    {"fp8 7168->18432 m1 exact", WeightFormat::kFp8Block, 1, 18432, 7168, true},
    {"fp8 7168->18432 m4 exact", WeightFormat::kFp8Block, 4, 18432, 7168, true},
    // NVFP4 (ModelOpt, weight-only): every large projection of V3 and moonlight, experts, lm_head;
    // bytes include the e4m3 block scales (1 per 16 elements).
    {"v3.q_a+kv_a 7168->2112 nvfp4", WeightFormat::kNvfp4, 1, 2112, 7168},
    {"v3.q_b 1536->24576 nvfp4", WeightFormat::kNvfp4, 1, 24576, 1536},
    {"v3.kv_b 512->32768 nvfp4", WeightFormat::kNvfp4, 1, 32768, 512},
    {"v3.o_proj 16384->7168 nvfp4", WeightFormat::kNvfp4, 1, 7168, 16384},
    {"v3.expert gate|up 7168->4096 nvfp4", WeightFormat::kNvfp4, 1, 4096, 7168},
    {"v3.expert down 2048->7168 nvfp4", WeightFormat::kNvfp4, 1, 7168, 2048},
    {"v3.dense gate|up 7168->36864 nvfp4", WeightFormat::kNvfp4, 1, 36864, 7168},
    {"v3.dense down 18432->7168 nvfp4", WeightFormat::kNvfp4, 1, 7168, 18432},
    {"v3.lm_head 7168->129280 nvfp4", WeightFormat::kNvfp4, 1, 129280, 7168},
    {"moon.q_proj+kv_a 2048->3648 nvfp4", WeightFormat::kNvfp4, 1, 3648, 2048},
    {"moon.kv_b 512->4096 nvfp4", WeightFormat::kNvfp4, 1, 4096, 512},
    {"moon.o_proj 2048->2048 nvfp4", WeightFormat::kNvfp4, 1, 2048, 2048},
    {"moon.expert gate|up 2048->2816 nvfp4", WeightFormat::kNvfp4, 1, 2816, 2048},
    {"moon.expert down 1408->2048 nvfp4", WeightFormat::kNvfp4, 1, 2048, 1408},
    {"moon.dense gate|up 2048->22528 nvfp4", WeightFormat::kNvfp4, 1, 22528, 2048},
    {"moon.dense down 11264->2048 nvfp4", WeightFormat::kNvfp4, 1, 2048, 11264},
    {"moon.lm_head 2048->163840 nvfp4", WeightFormat::kNvfp4, 1, 163840, 2048},
    {"nvfp4 7168->18432 m1", WeightFormat::kNvfp4, 1, 18432, 7168},
    {"nvfp4 7168->18432 m2", WeightFormat::kNvfp4, 2, 18432, 7168},
    {"nvfp4 7168->18432 m4", WeightFormat::kNvfp4, 4, 18432, 7168},
    {"nvfp4 7168->18432 m8", WeightFormat::kNvfp4, 8, 18432, 7168},
    {"nvfp4 7168->18432 m16", WeightFormat::kNvfp4, 16, 18432, 7168},
    // NVFP4's exact mode (CudaRunnerOptions::exact: f32 x, the CUDA-core kernel) at the same shapes.
    {"v3.q_a+kv_a 7168->2112 nvfp4 exact", WeightFormat::kNvfp4, 1, 2112, 7168, true},
    {"v3.o_proj 16384->7168 nvfp4 exact", WeightFormat::kNvfp4, 1, 7168, 16384, true},
    {"v3.expert down 2048->7168 nvfp4 exact", WeightFormat::kNvfp4, 1, 7168, 2048, true},
    {"moon.expert gate|up 2048->2816 nvfp4 exact", WeightFormat::kNvfp4, 1, 2816, 2048, true},
    {"moon.expert down 1408->2048 nvfp4 exact", WeightFormat::kNvfp4, 1, 2048, 1408, true},
    {"nvfp4 7168->18432 m1 exact", WeightFormat::kNvfp4, 1, 18432, 7168, true},
    {"nvfp4 7168->18432 m8 exact", WeightFormat::kNvfp4, 8, 18432, 7168, true},
};

// Shapes whose tile / k_split variants are compared (the data for config.h).
const char* const kVariantShapes[] = {"bf16 7168->18432", "bf16 18432->7168", "bf16 2048->11264",
                                      "moon.expert gate|up 2048->2816 bf16", "fp8 7168->18432 m1",
                                      "v3.expert down 2048->7168 fp8", "v3.q_a+kv_a 7168->2112 fp8",
                                      "nvfp4 7168->18432 m1", "nvfp4 7168->18432 m2", "v3.o_proj 16384->7168 nvfp4",
                                      "moon.expert gate|up 2048->2816 nvfp4", "moon.expert down 1408->2048 nvfp4",
                                      "v3.expert down 2048->7168 nvfp4", "nvfp4 7168->18432 m8",
                                      "v3.q_a+kv_a 7168->2112 nvfp4", "nvfp4 7168->18432 m1 exact"};

int elem_bytes(WeightFormat f) { return f == WeightFormat::kF32 ? 4 : f == WeightFormat::kBF16 ? 2 : 1; }
const char* fmt_name(WeightFormat f) {
  return f == WeightFormat::kF32 ? "f32" : f == WeightFormat::kBF16 ? "bf16" : f == WeightFormat::kNvfp4 ? "nvfp4" : "fp8";
}

struct GemvResult {
  std::string name, format, tile;
  int64_t m, n, k, copies;
  double bytes, us, us_graph, gbps, gbps_graph, pct, pct_graph;
};

// Weights of one shape, `copies` times in one allocation (rotated so the working set > L2).
struct Rotated {
  cu::DeviceBuffer<uint8_t> w, scales8;  // scales8: NVFP4 e4m3 block scales
  cu::DeviceBuffer<float> scales, x, y;
  std::vector<Matrix> mats;
  int64_t w_bytes = 0, s_bytes = 0;
};

Rotated make_rotated(const Shape& sh, int64_t l2_bytes, cudaStream_t s) {
  Rotated r;
  const bool fp4 = sh.format == WeightFormat::kNvfp4;
  r.w_bytes = fp4 ? sh.n * sh.k / 2 : sh.n * sh.k * elem_bytes(sh.format);
  const int64_t sr = (sh.n + 127) / 128, sc = (sh.k + 127) / 128;
  r.s_bytes = sh.format == WeightFormat::kFp8Block ? sr * sc * 4 : fp4 ? sh.n * (sh.k / 16) : 0;
  const int64_t stride_w = (r.w_bytes + 255) / 256 * 256;  // keep every copy 256-byte aligned
  const int64_t copies = std::clamp<int64_t>((4 * l2_bytes + stride_w - 1) / stride_w, 2, 4096);
  auto w = cu::DeviceBuffer<uint8_t>::create(size_t(stride_w * copies));
  BENCH_CHECK(w.status());
  r.w = std::move(w).value();
  const FillKind kind = sh.format == WeightFormat::kF32    ? FillKind::kF32Pm1
                        : sh.format == WeightFormat::kBF16 ? FillKind::kBf16Pm1
                        : fp4                              ? FillKind::kBytes
                                                           : FillKind::kFp8Finite;
  BENCH_CHECK(cuda_status(launch_fill(r.w.data(), size_t(stride_w * copies) / elem_bytes(sh.format), kind, 7, s), "fill"));
  const int64_t s_elems = fp4 ? (r.s_bytes + 255) / 256 * 256 : sr * sc;  // NVFP4: bytes, 256-aligned copies
  if (fp4) {
    auto sb = cu::DeviceBuffer<uint8_t>::create(size_t(s_elems * copies));
    BENCH_CHECK(sb.status());
    r.scales8 = std::move(sb).value();
    BENCH_CHECK(cuda_status(launch_fill(r.scales8.data(), r.scales8.size(), FillKind::kE4m3Scale, 8, s), "fill"));
  } else if (r.s_bytes) {
    auto sb = cu::DeviceBuffer<float>::create(size_t(s_elems * copies));
    BENCH_CHECK(sb.status());
    r.scales = std::move(sb).value();
    BENCH_CHECK(cuda_status(launch_fill(r.scales.data(), r.scales.size(), FillKind::kScalePos, 8, s), "fill"));
  }
  auto x = cu::DeviceBuffer<float>::create(size_t(sh.m * sh.k));
  auto y = cu::DeviceBuffer<float>::create(size_t(sh.m * sh.n));
  BENCH_CHECK(x.status());
  BENCH_CHECK(y.status());
  r.x = std::move(x).value();
  r.y = std::move(y).value();
  BENCH_CHECK(cuda_status(launch_fill(r.x.data(), r.x.size(), FillKind::kF32Pm1, 9, s), "fill"));
  for (int64_t c = 0; c < copies; ++c) {
    Matrix m{sh.format, sh.n, sh.k, r.w.data() + c * stride_w};
    if (fp4) m.scale_fp8 = r.scales8.data() + c * s_elems, m.scale_2 = 0.01f;
    else if (r.s_bytes) m.scale_inv = r.scales.data() + c * s_elems;
    r.mats.push_back(m);
  }
  BENCH_CHECK(cuda_status(cudaStreamSynchronize(s), "fill"));
  return r;
}

GemvResult bench_gemv(const Shape& sh, const Rotated& r, const cu::LinearVariant& v, double ceiling_gbps,
                      cudaStream_t s, bool graph = true) {
  GemvResult g{};
  g.name = sh.name, g.format = fmt_name(sh.format), g.m = sh.m, g.n = sh.n, g.k = sh.k;
  g.copies = int64_t(r.mats.size());
  ops::LinearArgs a;
  a.x = r.x.data(), a.y = const_cast<float*>(r.y.data()), a.m = sh.m, a.w = &r.mats[0];
  a.f16_activations = !sh.exact;
  auto plan = cu::linear_plan(a, v);
  BENCH_CHECK(plan.status());
  g.tile = plan->nvfp4_mma || plan->fp8_mma ? "mma t" + std::to_string(plan->tile.rows_per_warp / cu::kMmaRows) + " u" +
                                     std::to_string(plan->tile.unroll) + " ks" + std::to_string(plan->k_split)
           : plan->vector_path ? "m" + std::to_string(plan->tile.m_tile) + " r" + std::to_string(plan->tile.rows_per_warp) +
                                     " u" + std::to_string(plan->tile.unroll) + " ks" + std::to_string(plan->k_split)
                               : std::string("scalar");
  g.bytes = double(r.w_bytes + r.s_bytes) + 4.0 * double(sh.m) * double(sh.k + sh.n);
  time_kernel(s, [&](int i) {
    ops::LinearArgs b = a;
    b.w = &r.mats[size_t(i) % r.mats.size()];
    return cu::linear_variant(b, v, s);
  }, g.us, g.us_graph, graph, std::max<int>(kGraphLaunches, int(r.mats.size())));
  g.gbps = g.bytes / (g.us * 1e-6) / 1e9;
  g.gbps_graph = graph ? g.bytes / (g.us_graph * 1e-6) / 1e9 : 0;
  g.pct = 100.0 * g.gbps / ceiling_gbps;
  g.pct_graph = 100.0 * g.gbps_graph / ceiling_gbps;
  return g;
}

// ---- MoE experts at decode batches and verify steps (m = 1..8 tokens): µs per call and the GB/s
// of the distinct experts' bytes (the selected routed ones plus the shared ones, fp8 scales
// included), against the HBM read ceiling. Constant weights (0x38 bytes); kMoeRoutings random
// routings (top_k distinct experts per token) rotate from launch to launch, so consecutive calls
// mostly read other experts than the last one left in L2.
struct MoeResult {
  std::string name;
  int64_t m = 0;
  double experts = 0, bytes = 0, us = 0, us_graph = 0, pct = 0, pct_graph = 0;
};

std::vector<MoeResult> bench_moe_decode(double ceiling_gbps, cudaStream_t s) {
  struct MoeShape {
    const char* name;
    WeightFormat format;
    int64_t n_experts, n_shared, top_k, hidden, inter;
  };
  constexpr int kMoeRoutings = 8;
  std::vector<MoeResult> out;
  // NVFP4 (f16 tensor cores): the default kernels (gate_up at 4 warps per block, the down
  // prefetching its weights at one token), gate_up at 8 warps, and at one token the down per lane
  // and with h staged per block (MoeNvfp4Variant::down_staged: by default where the prefetch does not apply).
  for (const MoeShape& sh : {MoeShape{"moe moonlight 64+2e top6", WeightFormat::kBF16, 64, 2, 6, 2048, 1408},
                             MoeShape{"moe moonlight 64+2e top6", WeightFormat::kFp8Block, 64, 2, 6, 2048, 1408},
                             MoeShape{"moe v3 256+1e top8", WeightFormat::kFp8Block, 256, 1, 8, 7168, 2048},
                             MoeShape{"moe moonlight 64+2e top6", WeightFormat::kNvfp4, 64, 2, 6, 2048, 1408},
                             MoeShape{"moe v3 256+1e top8", WeightFormat::kNvfp4, 256, 1, 8, 7168, 2048}}) {
    const bool fp8 = sh.format == WeightFormat::kFp8Block, fp4 = sh.format == WeightFormat::kNvfp4;
    const int64_t n_all = sh.n_experts + sh.n_shared, eb = fp8 || fp4 ? 1 : 2, blk = 128;
    Matrix gu{sh.format, n_all * 2 * sh.inter, sh.hidden, nullptr, nullptr, blk, blk};
    Matrix dn{sh.format, n_all * sh.hidden, sh.inter, nullptr, nullptr, blk, blk};
    // Bytes of codes (NVFP4: two per byte) and scales (fp8: f32 per 128 x 128; NVFP4: e4m3 per 16).
    auto code_bytes = [&](const Matrix& w) { return size_t(w.rows * w.cols * eb / (fp4 ? 2 : 1)); };
    auto scale_count = [&](const Matrix& w) {
      return fp8 ? size_t(w.rows / blk * w.scale_cols()) : fp4 ? size_t(w.rows * (w.cols / 16)) : size_t(1);
    };
    auto gw = cu::DeviceBuffer<uint8_t>::create(code_bytes(gu));
    auto dw = cu::DeviceBuffer<uint8_t>::create(code_bytes(dn));
    const size_t gsn = scale_count(gu), dsn = scale_count(dn);
    auto gs = cu::DeviceBuffer<float>::create(fp8 ? gsn : 1), ds = cu::DeviceBuffer<float>::create(fp8 ? dsn : 1);
    auto gs8 = cu::DeviceBuffer<uint8_t>::create(fp4 ? gsn : 1), ds8 = cu::DeviceBuffer<uint8_t>::create(fp4 ? dsn : 1);
    BENCH_CHECK(gw.status());
    BENCH_CHECK(dw.status());
    BENCH_CHECK(gs.status());
    BENCH_CHECK(ds.status());
    BENCH_CHECK(gs8.status());
    BENCH_CHECK(ds8.status());
    BENCH_CHECK(cuda_status(cudaMemset(gw->data(), 0x38, gw->size()), "fill"));
    BENCH_CHECK(cuda_status(cudaMemset(dw->data(), 0x38, dw->size()), "fill"));
    BENCH_CHECK(cuda_status(cudaMemset(gs->data(), 0, gs->size() * 4), "fill"));
    BENCH_CHECK(cuda_status(cudaMemset(ds->data(), 0, ds->size() * 4), "fill"));
    BENCH_CHECK(cuda_status(launch_fill(gs8->data(), gs8->size(), FillKind::kE4m3Scale, 8, s), "fill"));
    BENCH_CHECK(cuda_status(launch_fill(ds8->data(), ds8->size(), FillKind::kE4m3Scale, 8, s), "fill"));
    gu.data = gw->data(), dn.data = dw->data();
    if (fp8) gu.scale_inv = gs->data(), dn.scale_inv = ds->data();
    if (fp4) gu.scale_fp8 = gs8->data(), dn.scale_fp8 = ds8->data(), gu.scale_2 = dn.scale_2 = 0.01f;
    const double expert_bytes = fp4 ? 3.0 * double(sh.inter * sh.hidden) * (0.5 + 1.0 / 16)
                                    : double(3 * sh.inter * sh.hidden * eb) +
                                          (fp8 ? 4.0 * double(3 * (sh.inter / blk) * (sh.hidden / blk)) : 0.0);
    // m = 1..8: the direct paths (one token, decode batches and verify steps without a plan);
    // 16, 32, 64: the planned kernels of larger decode batches.
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64}) {
      std::mt19937 rng(uint32_t(1000 + m));
      std::vector<int32_t> idx(size_t(kMoeRoutings * m * sh.top_k));
      std::vector<float> wts(idx.size(), 0.1f);
      double distinct = 0;
      for (int r = 0; r < kMoeRoutings; ++r) {
        std::set<int32_t> used;
        for (int64_t t = 0; t < m; ++t) {
          std::vector<int32_t> perm(size_t(sh.n_experts));
          for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i);
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int64_t k = 0; k < sh.top_k; ++k) {
            idx[size_t((r * m + t) * sh.top_k + k)] = perm[size_t(k)];
            used.insert(perm[size_t(k)]);
          }
        }
        distinct += double(used.size()) / kMoeRoutings;
      }
      auto didx = cu::DeviceBuffer<int32_t>::create(idx.size());
      auto dwts = cu::DeviceBuffer<float>::create(wts.size());
      auto x = cu::DeviceBuffer<float>::create(size_t(m * sh.hidden));
      auto y = cu::DeviceBuffer<float>::create(size_t(m * sh.hidden));
      const size_t ws_bytes = cu::moe_experts_workspace_bytes(m, sh.top_k, sh.n_shared, sh.n_experts, sh.inter);
      auto ws = cu::DeviceBuffer<uint8_t>::create(ws_bytes);
      BENCH_CHECK(didx.status());
      BENCH_CHECK(dwts.status());
      BENCH_CHECK(x.status());
      BENCH_CHECK(y.status());
      BENCH_CHECK(ws.status());
      BENCH_CHECK(cuda_status(cudaMemcpy(didx->data(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice), "copy"));
      BENCH_CHECK(cuda_status(cudaMemcpy(dwts->data(), wts.data(), wts.size() * 4, cudaMemcpyHostToDevice), "copy"));
      BENCH_CHECK(cuda_status(launch_fill(x->data(), x->size(), FillKind::kF32Pm1, 9, s), "fill"));
      ops::MoeExpertsArgs a;
      a.x = x->data(), a.y = y->data(), a.gate_up = &gu, a.down = &dn, a.m = m, a.hidden = sh.hidden;
      a.inter = sh.inter, a.n_experts = sh.n_experts, a.top_k = sh.top_k, a.n_shared = sh.n_shared;
      a.f16_activations = true;
      // NVFP4: the defaults, gate_up at 8 warps per block; at m = 1 the down per lane, staged.
      for (int variant : {0, 1, 2, 3}) {
        if (variant && !fp4) continue;
        if ((variant == 2 || variant == 3) && m != 1) continue;
        cu::MoeNvfp4Variant v;
        v.down_prefetch = variant == 0;  // the default (where the grid fits)
        v.gate_up_warps = variant == 1 ? 8 : 0;
        v.down_staged = variant == 0 || variant == 3;  // the default where the prefetch does not apply
        const char* tag = variant == 1 ? " gate_up 8 warps" : variant == 2 ? " down per lane" : variant == 3 ? " down staged" : "";
        MoeResult res{std::string(sh.name) + " " + fmt_name(sh.format) + tag, m,
                      distinct + double(sh.n_shared), 0, 0, 0, 0, 0};
        res.bytes = res.experts * expert_bytes;
        time_kernel(s, [&](int i) {
          const int r = i % kMoeRoutings;
          a.expert_idx = didx->data() + r * m * sh.top_k, a.expert_weight = dwts->data() + r * m * sh.top_k;
          return cu::moe_experts_variant(a, v, ws->data(), ws->size(), s);
        }, res.us, res.us_graph);
        res.pct = 100.0 * res.bytes / (res.us * 1e3) / ceiling_gbps;
        res.pct_graph = 100.0 * res.bytes / (res.us_graph * 1e3) / ceiling_gbps;
        out.push_back(res);
      }
    }
  }
  return out;
}

struct SmallOp {
  std::string name;
  double us, us_graph;
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

// What handing a decode step's data from one stage to the next costs (docs/decode-status.md, the
// persistent launch): 8 dependent stages over one block per SM, each block reading the words of
// fan_in blocks of the stage before, as 8 kernels under PDL or as one cooperative launch whose
// blocks wait on flags; fan-in 1 (each block its own producer) and all blocks (a grid barrier).
// Rows of `small`, µs per 8 stages.
void bench_handoff(int sm_count, cudaStream_t s, std::vector<SmallOp>& small) {
  constexpr int kStages = 8;
  const int blocks = sm_count > 0 ? sm_count : 132;
  auto words = cu::DeviceBuffer<unsigned>::create(size_t((kStages + 1) * blocks));
  auto flags = cu::DeviceBuffer<unsigned>::create(size_t((kStages + 1) * blocks));
  auto counters = cu::DeviceBuffer<unsigned>::create(2);
  BENCH_CHECK(words.status());
  BENCH_CHECK(flags.status());
  BENCH_CHECK(counters.status());
  BENCH_CHECK(words->fill_bytes(0));
  BENCH_CHECK(flags->fill_bytes(0));
  BENCH_CHECK(counters->fill_bytes(0));
  for (int fan_in : {1, blocks}) {
    cu::HandoffParams p;
    p.words = words->data(), p.flags = flags->data(), p.exit_counter = counters->data(), p.timeouts = counters->data() + 1;
    p.blocks = blocks, p.stages = kStages, p.fan_in = fan_in;
    const std::string fan = fan_in == 1 ? "fan-in 1" : "fan-in all";
    SmallOp k{"handoff 8 stages as 8 PDL kernels, " + fan, 0, 0}, q{"handoff 8 stages in one persistent kernel, " + fan, 0, 0};
    Status st = time_launches(s, [&](int) {
      for (int stage = 1; stage <= kStages; ++stage) PG_CUDA_TRY(cu::launch_handoff_stage(p, stage, s));
      return ok_status();
    }, k.us, k.us_graph);
    if (!st.ok()) std::printf("handoff (%s, kernels): %s\n", fan.c_str(), st.to_string().c_str());
    st = time_launches(s, [&](int) {
      PG_CUDA_TRY(cu::launch_handoff_persistent(p, s));
      return ok_status();
    }, q.us, q.us_graph);
    if (!st.ok()) std::printf("handoff (%s, persistent): %s\n", fan.c_str(), st.to_string().c_str());
    unsigned timeouts = 0;
    cudaMemcpy(&timeouts, counters->data() + 1, 4, cudaMemcpyDeviceToHost);
    if (timeouts) q.name += " (" + std::to_string(timeouts) + " waits timed out: figures invalid)";
    small.push_back(k);
    small.push_back(q);
  }
}

// What a kernel's code costs it when the SMs' instruction caches do not hold it (docs/decode-status.md,
// session 17): one block per SM running n FFMAs of straight-line code, launched back to back under
// PDL in a graph, either the same kernel every launch (its code stays cached) or eight kernels of
// identical bodies at distinct addresses in turn (8 x n x 16 bytes of code: cold at n = 4096, as a
// decode layer's ~9 kernels of 1-6K instructions are). Rows of `small`, µs per launch.
void bench_icache(int sm_count, cudaStream_t s, std::vector<SmallOp>& small) {
  const int blocks = sm_count > 0 ? sm_count : 132;
  auto sink = cu::DeviceBuffer<float>::create(128);
  BENCH_CHECK(sink.status());
  for (int n : {256, 1024, 4096}) {
    for (bool turn : {false, true}) {
      SmallOp o{"code " + std::to_string(n) + " instr, " + (turn ? "8 kernels in turn" : "one kernel"), 0, 0};
      const Status st = time_launches(s, [&](int i) {
        PG_CUDA_TRY(cu::launch_icache_probe(n, turn ? i % cu::kIcacheVariants : 0, blocks, sink->data(), s));
        return ok_status();
      }, o.us, o.us_graph, /*graph=*/true, /*graph_launches=*/8 * cu::kIcacheVariants);
      if (!st.ok()) std::printf("icache probe (%s): %s\n", o.name.c_str(), st.to_string().c_str());
      small.push_back(o);
    }
  }
}

// One row of the GEMV table (the full table and --gemv print the same columns).
void print_gemv_row(const GemvResult& g) {
  std::printf("  %-38s %-5s %-3lld %-16s %8.1f %8.2f %8.0f %6.1f%% %8.2f %6.1f%%\n", g.name.c_str(), g.format.c_str(),
              (long long)g.m, g.tile.c_str(), g.bytes / 1e6, g.us, g.gbps, g.pct, g.us_graph, g.pct_graph);
}

int run(int argc, char** argv) {
  const char* json_path = nullptr;
  bool probes_only = false, ring = true, ring_only = false;
  const char* gemv_only = nullptr;  // --gemv TEXT: the read ceiling and the GEMV rows whose name holds TEXT
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--gemv") && i + 1 < argc) gemv_only = argv[++i];
    else if (!std::strcmp(argv[i], "--probes")) probes_only = true;
    else if (!std::strcmp(argv[i], "--no-ring")) ring = false;
    else if (!std::strcmp(argv[i], "--ring-only")) ring_only = true;
    else {
      std::fputs("usage: bench_ops_cuda [--json PATH] [--probes (the handoff and instruction probes, the read ceiling and the read patterns only)] [--no-ring (without the ring probe)] [--ring-only (the ring probe alone, % of the datasheet bandwidth: e.g. under compute-sanitizer)] [--gemv TEXT (the read ceiling and the GEMV table's rows whose shape name holds TEXT, e.g. nvfp4: a sweep of runtime switches)]\n", stderr);
      return 2;
    }
  }
  if (!cu::cuda_available()) {
    std::printf("bench_ops_cuda: nothing measured: %s\n", cu::cuda_unavailable_reason().c_str());
    return 0;
  }
  const cu::DeviceProps& dp = cu::current_device_props();
  int driver = 0, mem_clock_khz = 0, bus_bits = 0;
  cudaDriverGetVersion(&driver);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, dp.device);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dp.device);
  const double datasheet_gbps = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8) / 1e9;
  cudaStream_t s = nullptr;
  BENCH_CHECK(cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream"));
  std::printf("device: %s, %d SMs, L2 %.0f MB, driver %d, memory clock x bus = %.0f GB/s\n", dp.name.c_str(), dp.sm_count,
              dp.l2_bytes / 1e6, driver, datasheet_gbps);
  if (ring_only) {
    measure_ring(s, dp.sm_count, datasheet_gbps);
    cudaStreamDestroy(s);
    return 0;
  }
  if (probes_only) {
    std::vector<SmallOp> probes;
    bench_handoff(dp.sm_count, s, probes);
    bench_icache(dp.sm_count, s, probes);
    std::printf("\nProbes:\n");
    for (const SmallOp& o : probes) std::printf("  %-44s %7.2f us single, %7.2f us in a graph\n", o.name.c_str(), o.us, o.us_graph);
  }

  // The read ceiling per load kind (seconds; the probes print it too: ld_stream's kind against the others).
  const Ceiling ceil = measure_ceiling(s, dp.sm_count);
  std::printf("\nHBM read ceiling (4 GiB read-only reduction, median of %d):\n", kTimed);
  for (const auto& [n, g] : ceil.all) std::printf("  read %-32s %8.0f GB/s\n", n.c_str(), g);
  std::printf("  => ceiling %.0f GB/s (%s); device-to-device copy %.0f GB/s (read + write)\n", ceil.read_gbps,
              ceil.config.c_str(), ceil.copy_gbps);
  if (gemv_only) {
    std::printf("\nGEMV (linear, heuristic config), rows holding '%s', HBM read ceiling %.0f GB/s; 'graph' = per kernel, >= %d back-to-back in a CUDA graph:\n",
                gemv_only, ceil.read_gbps, kGraphLaunches);
    for (const Shape& sh : kShapes) {
      if (!std::strstr(sh.name, gemv_only)) continue;
      const Rotated r = make_rotated(sh, dp.l2_bytes, s);
      print_gemv_row(bench_gemv(sh, r, {}, ceil.read_gbps, s));
      std::fflush(stdout);
    }
    cudaStreamDestroy(s);
    return 0;
  }
  measure_patterns(s, dp.sm_count, ceil.read_gbps);
  if (ring) measure_ring(s, dp.sm_count, ceil.read_gbps);
  if (probes_only) {
    cudaStreamDestroy(s);
    return 0;
  }

  std::vector<GemvResult> results, variants;
  for (const Shape& sh : kShapes) {
    const Rotated r = make_rotated(sh, dp.l2_bytes, s);
    results.push_back(bench_gemv(sh, r, {}, ceil.read_gbps, s));
    if (std::find_if(std::begin(kVariantShapes), std::end(kVariantShapes),
                     [&](const char* n) { return !std::strcmp(n, sh.name); }) != std::end(kVariantShapes)) {
      ops::LinearArgs probe;
      probe.x = r.x.data(), probe.y = const_cast<float*>(r.y.data()), probe.m = sh.m, probe.w = &r.mats[0];
      probe.f16_activations = !sh.exact;
      auto plan = cu::linear_plan(probe);
      BENCH_CHECK(plan.status());
      if (plan->nvfp4_mma || plan->fp8_mma) {  // the tensor-core kernels' tiles
        for (const cu::MmaTile& t : cu::linear_mma_tiles())
          for (int ks : {0, 1, 2, 4, 8})
            variants.push_back(bench_gemv(sh, r, cu::LinearVariant{0, cu::kMmaRows * t.tiles, t.unroll, ks},
                                          ceil.read_gbps, s, /*graph=*/false));
        continue;
      }
      for (const cu::LinearTile& t : cu::linear_tiles(sh.format, ops::cuda::linear_m_tile(sh.m)))
        for (int ks : {0, 1, 2, 4, 8})
          variants.push_back(
              bench_gemv(sh, r, cu::LinearVariant{0, t.rows_per_warp, t.unroll, ks}, ceil.read_gbps, s, /*graph=*/false));
    }
  }

  // Small ops (µs; their bytes are tiny, launch latency is the figure).
  std::vector<SmallOp> small;
  {
    for (int64_t n : {2048, 7168}) {
      auto x = cu::DeviceBuffer<float>::create(size_t(n)), r = cu::DeviceBuffer<float>::create(size_t(n)),
           w = cu::DeviceBuffer<float>::create(size_t(n)), y = cu::DeviceBuffer<float>::create(size_t(n));
      BENCH_CHECK(x.status());
      BENCH_CHECK(r.status());
      BENCH_CHECK(w.status());
      BENCH_CHECK(y.status());
      for (auto* b : {&*x, &*r, &*w}) BENCH_CHECK(cuda_status(launch_fill(b->data(), b->size(), FillKind::kF32Pm1, 3, s), "fill"));
      ops::RmsNormResidualArgs a;
      a.x = x->data(), a.residual = r->data(), a.weight = w->data(), a.y = y->data(), a.m = 1, a.n = n;
      SmallOp o{"rmsnorm_residual n=" + std::to_string(n), 0, 0};
      time_kernel(s, [&](int) { return cu::rmsnorm_residual(a, s); }, o.us, o.us_graph);
      small.push_back(o);
    }
    struct R { const char* name; int64_t e, k, g, keep; };
    for (const R& rc : {R{"moe_routing v3 256e top8 8g/4", 256, 8, 8, 4}, R{"moe_routing moonlight 64e top6", 64, 6, 1, 1}}) {
      auto lg = cu::DeviceBuffer<float>::create(size_t(rc.e)), bias = cu::DeviceBuffer<float>::create(size_t(rc.e)),
           w = cu::DeviceBuffer<float>::create(size_t(rc.k));
      auto idx = cu::DeviceBuffer<int32_t>::create(size_t(rc.k));
      BENCH_CHECK(lg.status());
      BENCH_CHECK(bias.status());
      BENCH_CHECK(w.status());
      BENCH_CHECK(idx.status());
      BENCH_CHECK(cuda_status(launch_fill(lg->data(), lg->size(), FillKind::kF32Pm1, 4, s), "fill"));
      BENCH_CHECK(cuda_status(launch_fill(bias->data(), bias->size(), FillKind::kF32Pm1, 5, s), "fill"));
      ops::MoeRoutingArgs a;
      a.logits = lg->data(), a.bias = bias->data(), a.expert_idx = idx->data(), a.expert_weight = w->data();
      a.m = 1, a.n_experts = rc.e, a.top_k = rc.k, a.n_group = rc.g, a.topk_group = rc.keep, a.norm_topk_prob = true;
      SmallOp o{rc.name, 0, 0};
      time_kernel(s, [&](int) { return cu::moe_routing(a, s); }, o.us, o.us_graph);
      small.push_back(o);
    }
  }

  const std::vector<MoeResult> moe = bench_moe_decode(ceil.read_gbps, s);

  // The NVFP4 -> bf16 dequantize of the prefill paths (gemm/convert.cu): bytes read (codes +
  // scales) + bf16 written, against the device-to-device copy rate (a read + write stream).
  struct Dequant {
    std::string name;
    double us, gbps, pct_copy;
  };
  std::vector<Dequant> dequant;
  for (const Shape& sh : {Shape{"v3.expert gate|up 7168->4096", WeightFormat::kNvfp4, 1, 4096, 7168},
                          Shape{"moon.expert gate|up 2048->2816", WeightFormat::kNvfp4, 1, 2816, 2048},
                          Shape{"v3.q_b 1536->24576", WeightFormat::kNvfp4, 1, 24576, 1536}}) {
    const Rotated r = make_rotated(sh, dp.l2_bytes, s);
    auto dst = cu::DeviceBuffer<uint16_t>::create(size_t(sh.n * sh.k));
    BENCH_CHECK(dst.status());
    double us1 = 0, usg = 0;
    time_kernel(s, [&](int i) {
      const Matrix& m = r.mats[size_t(i) % r.mats.size()];
      cu::ToBf16Params p;
      p.src = m.data, p.src_type = cu::ToBf16Src::kNvfp4, p.dst = dst->data();
      p.rows = sh.n, p.cols = sh.k, p.src_stride = sh.k, p.dst_stride = sh.k;
      p.scale_fp8 = m.scale_fp8, p.scale_2 = m.scale_2, p.vec = true;
      PG_CUDA_TRY(cu::launch_to_bf16(p, s));
      return ok_status();
    }, us1, usg, /*graph=*/false);
    const double bytes = double(r.w_bytes + r.s_bytes) + 2.0 * double(sh.n * sh.k);
    dequant.push_back({sh.name, us1, bytes / (us1 * 1e-6) / 1e9, 100.0 * bytes / (us1 * 1e-6) / 1e9 / ceil.copy_gbps});
  }

  bench_handoff(dp.sm_count, s, small);  // last: a probe that went wrong costs only itself
  bench_icache(dp.sm_count, s, small);

  std::printf("\nVariants (tile m/rows/unroll, k_split; ks0 = heuristic), M=1 unless named:\n");
  std::printf("  %-38s %-16s %9s %9s %7s\n", "shape", "tile", "us", "GB/s", "%ceil");
  for (const GemvResult& g : variants)
    std::printf("  %-38s %-16s %9.2f %9.0f %6.1f%%\n", g.name.c_str(), g.tile.c_str(), g.us, g.gbps, g.pct);
  std::printf("\nNVFP4 -> bf16 dequantize (prefill staging), bytes read + written vs the d2d copy rate %.0f GB/s:\n",
              ceil.copy_gbps);
  for (const Dequant& d : dequant)
    std::printf("  %-38s %9.2f us %9.0f GB/s %6.1f%%\n", d.name.c_str(), d.us, d.gbps, d.pct_copy);
  std::printf("\nSmall ops (one token):\n");
  for (const SmallOp& o : small) std::printf("  %-38s %7.2f us single, %7.2f us in a graph\n", o.name.c_str(), o.us, o.us_graph);

  std::printf("\nMoE experts at m tokens (decode batches, verify steps), bytes of the distinct experts (mean of %d "
              "routings) vs the ceiling; 'graph' = per call, back-to-back in a CUDA graph:\n", 8);
  for (const MoeResult& r : moe)
    std::printf("  %-38s m=%lld %5.1f experts %8.1f MB %8.2f us %6.1f%% | graph %8.2f us %6.1f%%\n", r.name.c_str(),
                (long long)r.m, r.experts, r.bytes / 1e6, r.us, r.pct, r.us_graph, r.pct_graph);

  std::printf("\nGEMV (linear, heuristic config), HBM read ceiling %.0f GB/s; 'graph' = per kernel, >= %d back-to-back in a CUDA graph:\n",
              ceil.read_gbps, kGraphLaunches);
  std::printf("  %-38s %-5s %-3s %-16s %8s %8s %8s %7s %8s %7s\n", "shape", "fmt", "m", "tile", "MB", "us", "GB/s", "%ceil",
              "us graph", "%ceil");
  for (const GemvResult& g : results) print_gemv_row(g);

  if (json_path) {
    FILE* f = std::fopen(json_path, "w");
    if (!f) {
      std::fprintf(stderr, "bench_ops_cuda: cannot write %s\n", json_path);
      return 1;
    }
    std::fprintf(f, "{\n  \"device\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %d, \"driver\": %d,\n", json_escape(dp.name).c_str(),
                 dp.sm_count, dp.l2_bytes, driver);
    std::fprintf(f, "  \"hbm_read_ceiling_gbps\": %.1f, \"ceiling_config\": \"%s\", \"d2d_copy_gbps\": %.1f,\n", ceil.read_gbps,
                 ceil.config.c_str(), ceil.copy_gbps);
    std::fprintf(f, "  \"timing\": \"median of %d single launches after %d warm-ups; graph = median of %d replays of >= %d launches (one per rotated copy)\",\n",
                 kTimed, kWarmup, kGraphReplays, kGraphLaunches);
    auto dump = [&](const char* key, const std::vector<GemvResult>& v, bool last) {
      std::fprintf(f, "  \"%s\": [\n", key);
      for (size_t i = 0; i < v.size(); ++i) {
        const GemvResult& g = v[i];
        std::fprintf(f,
                     "    {\"shape\": \"%s\", \"format\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"tile\": \"%s\", "
                     "\"bytes\": %.0f, \"copies\": %lld, \"us\": %.3f, \"gbps\": %.1f, \"pct_ceiling\": %.2f, "
                     "\"us_graph\": %.3f, \"gbps_graph\": %.1f, \"pct_ceiling_graph\": %.2f}%s\n",
                     json_escape(g.name).c_str(), g.format.c_str(), (long long)g.m, (long long)g.n, (long long)g.k,
                     g.tile.c_str(), g.bytes, (long long)g.copies, g.us, g.gbps, g.pct, g.us_graph, g.gbps_graph,
                     g.pct_graph, i + 1 < v.size() ? "," : "");
      }
      std::fprintf(f, "  ]%s\n", last ? "" : ",");
    };
    dump("gemv", results, false);
    dump("variants", variants, false);
    std::fprintf(f, "  \"nvfp4_dequant\": [\n");
    for (size_t i = 0; i < dequant.size(); ++i)
      std::fprintf(f, "    {\"shape\": \"%s\", \"us\": %.3f, \"gbps\": %.1f, \"pct_copy\": %.2f}%s\n",
                   json_escape(dequant[i].name).c_str(), dequant[i].us, dequant[i].gbps, dequant[i].pct_copy,
                   i + 1 < dequant.size() ? "," : "");
    std::fprintf(f, "  ],\n");
    std::fprintf(f, "  \"moe_experts_decode\": [\n");
    for (size_t i = 0; i < moe.size(); ++i)
      std::fprintf(f, "    {\"shape\": \"%s\", \"m\": %lld, \"experts\": %.2f, \"bytes\": %.0f, \"us\": %.3f, "
                   "\"pct_ceiling\": %.2f, \"us_graph\": %.3f, \"pct_ceiling_graph\": %.2f}%s\n",
                   moe[i].name.c_str(), (long long)moe[i].m, moe[i].experts, moe[i].bytes, moe[i].us, moe[i].pct,
                   moe[i].us_graph, moe[i].pct_graph, i + 1 < moe.size() ? "," : "");
    std::fprintf(f, "  ],\n");
    std::fprintf(f, "  \"small_ops\": [\n");
    for (size_t i = 0; i < small.size(); ++i)
      std::fprintf(f, "    {\"op\": \"%s\", \"us\": %.3f, \"us_graph\": %.3f}%s\n", small[i].name.c_str(), small[i].us,
                   small[i].us_graph, i + 1 < small.size() ? "," : "");
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  cudaStreamDestroy(s);
  return 0;
}

}  // namespace
}  // namespace pg::bench

int main(int argc, char** argv) { return pg::bench::run(argc, argv); }
