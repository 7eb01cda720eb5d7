#!/usr/bin/env bash
# Nsight Compute over chosen kernels of the GPU tests, after scripts/gpu_suite.sh has built them
# (build-gpu/, the .deb prefix /tmp/pgdeps): one report per spec, as text.
#   usage: scripts/gpu_ncu.sh OUT_DIR 'BINARY|GTEST_FILTER|KERNEL_REGEX|LAUNCH_COUNT' ...
#   e.g.   scripts/gpu_ncu.sh $OUT/ncu 'ops_cuda_test|Shapes/MoeExpertsCuda.MatchesCpu/moonlight_nvfp4_verify|moe_.*nvfp4|8'
# Sections: speed of light, memory workload, occupancy, launch statistics, warp state (stall reasons).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_ncu.sh OUT_DIR SPEC...}
shift
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${PG_GPU_BUILD:-$ROOT/build-gpu}
export LD_LIBRARY_PATH="${PG_GPU_DEPS:-/tmp/pgdeps}/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "gpu_ncu: no ncu on this machine"; exit 1; }
i=0
for spec in "$@"; do
  IFS='|' read -r bin filter regex count <<<"$spec"
  exe=$(find "$BUILD" -name "$bin" -type f -perm -u+x | head -1)
  [ -n "$exe" ] || { echo "gpu_ncu: $bin not built"; continue; }
  i=$((i + 1))
  (cd "$ROOT" && timeout "${PG_NCU_TIMEOUT:-120}" "$NCU" -k "regex:$regex" --launch-count "${count:-4}" \
     --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
     --section WarpStateStats --section SchedulerStats "$exe" --gtest_filter="$filter" >"$OUT/ncu_$i.txt" 2>&1)
  echo "ncu $i ($bin $filter, kernels /$regex/ x ${count:-4}): rc=$?"
  # The figures that matter per kernel, as one line each.
  awk '/^  [A-Za-z_].*\(.*\)x\(.*\)/ {name=$0; sub(/^ +(void )?(pg::ops::cuda::)?(\(anonymous namespace\)::)?/, "", name)} /Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Grid Size|Block Size|No Eligible|Issued Warp Per Scheduler/ {gsub(/ +/," "); printf "%s |%s\n", substr(name,1,60), $0}' "$OUT/ncu_$i.txt" | head -120
done
