#!/usr/bin/env bash
# Full ncu profiles (`--set full`) of chosen kernels inside a decode step of `peregrine bench
# --synthetic`: the kernels as the CUDA graph runs them (node by node), the decode steps only
# (PEREGRINE_PROFILE_DECODE=1), one launch of each, with its SASS and per-instruction counts
# summarised by scripts/ncu_sass.py. For the H200 run, after scripts/gpu_suite.sh
# has built build-gpu/ (same LD_LIBRARY_PATH); one details page and report per kernel, packed into
# OUT_DIR/ncu_kernels.tgz at the end (the device tool returns at most 8 files).
#   usage: scripts/ncu_kernels.sh OUT_DIR NAME DTYPE LAYERS KERNEL_REGEX [KERNEL_REGEX ...]
#   e.g.   scripts/ncu_kernels.sh $OUT/ncu moonlight-16b-a3b nvfp4 0 moe_router_kernel mla_prep_kernel
# LAUNCH_SKIP (default 40): launches of the kernel skipped first (past the first layers and step);
# LAUNCH_COUNT (default 1): launches profiled from there (e.g. a whole step's, told apart by grid and
# duration in the details page; the SASS summary then covers them all, a per-opcode sum).
# SPEC=K: also --speculative-tokens K, so the verify graph's kernels are profiled too (the bench
# replays it twice under the profiler after the decode steps: 8 steps of 27 MoE layers at moonlight);
# SPEC_ONLY=1 with it: the verify replays alone (PEREGRINE_PROFILE_DECODE=verify), so a kernel the
# plain steps also launch is profiled at K + 1 tokens (set LAUNCH_SKIP below 2 x its launches a step).
set -uo pipefail
OUT=${1:?usage: scripts/ncu_kernels.sh OUT_DIR NAME DTYPE LAYERS KERNEL_REGEX ...}
NAME=${2:?} DTYPE=${3:?} LAYERS=${4:?}
shift 4
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEREGRINE=${PEREGRINE:-$ROOT/build-gpu/peregrine}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -x "$PEREGRINE" ] && [ -n "$NCU" ] || { echo "ncu_kernels: need $PEREGRINE and ncu"; exit 1; }
args=(bench --synthetic "$NAME" --dtype "$DTYPE" --decode-tokens 4 --repeats 1 --batches 1 --long-prefill 0)
[ "$LAYERS" != 0 ] && args+=(--layers "$LAYERS")
[ -n "${SPEC:-}" ] && args+=(--speculative-tokens "$SPEC")
profile=1
[ -n "${SPEC_ONLY:-}" ] && profile=verify
for k in "$@"; do
  rep="$OUT/${k//[^A-Za-z0-9_]/_}"
  PEREGRINE_PROFILE_DECODE=$profile timeout 240 "$NCU" --profile-from-start off --graph-profiling node \
    -k "regex:$k" --launch-skip "${LAUNCH_SKIP:-40}" --launch-count "${LAUNCH_COUNT:-1}" --set full -f -o "$rep" \
    "$PEREGRINE" "${args[@]}" >"$rep.log" 2>&1
  echo "ncu $k: rc=$?"
  "$NCU" --import "$rep.ncu-rep" --page details >"$rep.txt" 2>&1
  # The SASS with per-instruction execution counts and stall samples, and where they go (ncu_sass.py).
  "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.sass.csv" 2>"$rep.sass.log" &&
    python3 "$ROOT/scripts/ncu_sass.py" "$rep.sass.csv" --top 8 >"$rep.sass.txt" 2>&1 && head -20 "$rep.sass.txt"
  # The lines that say where the time goes, for the run's output.
  grep -E "^  [a-z_].*\(|Duration|Elapsed Cycles|Registers Per|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Block Size|Grid Size|Dynamic Shared|DRAM Throughput" "$rep.txt" | head -$(( 26 * ${LAUNCH_COUNT:-1} ))
done
(cd "$OUT" && tar czf ncu_kernels.tgz --remove-files ./*.txt ./*.log ./*.csv ./*.ncu-rep 2>/dev/null)
echo "ncu_kernels: $OUT/ncu_kernels.tgz"
