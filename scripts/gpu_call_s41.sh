#!/usr/bin/env bash
# Session 41's device call (kept as a record of what ran), with the binaries packed on the dev machine
# (carry .deps/gpu-debs and .deps/prebuilt): the suite's standard table (on an H200 only: call 1 ran it
# on the H100) and bench_ops_cuda's GEMV table without the ring probe; then, while time is left,
# PEREGRINE_ATTENTION_EARLY_CHUNK=1 against the default and the ring probe under memcheck (it hit an
# illegal instruction on the H100).
#   usage: scripts/gpu_call_s41.sh OUT      PG_CALL_SUITE_S: the suite's budget (s)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_call_s41.sh OUT}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
T0=$(date +%s)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"
benches=()
case "$gpu" in *H100*) benches=(PG_SUITE_BENCHES=) ;; esac
env "${benches[@]}" PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_CTEST_R=NoSuchTestHere PG_SUITE_SKIP_MEASURES=1 \
  PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 PG_SUITE_SKIP_PROBES=1 \
  PG_SUITE_OPS_BENCH_ARGS=--no-ring PG_SUITE_BUDGET_S=${PG_CALL_SUITE_S:-330} scripts/gpu_suite.sh "$OUT/suite" >"$OUT/suite.log" 2>&1
B=$(pwd)/build
export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
left() { echo $(( ${PG_CALL_TOTAL_S:-400} - ($(date +%s) - T0) )); }
if [ "$(left)" -gt 60 ]; then
  PG_SWEEP_TIMEOUT=25 timeout $(( $(left) - 30 )) scripts/bench_sweep.sh "$B/peregrine" 2 \
    "moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4" - PEREGRINE_ATTENTION_EARLY_CHUNK=1 >"$OUT/early.txt" 2>&1
  echo "early chunk sweep: rc=$?"; cat "$OUT/early.txt"
fi
if [ "$(left)" -gt 25 ]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout $(( $(left) - 10 )) "$SAN" --tool memcheck "$B/bench/bench_ops_cuda" --ring-only >"$OUT/san.txt" 2>&1
  echo "ring probe under memcheck: rc=$?"; grep -v '^=========     ' "$OUT/san.txt" | head -24
fi
grep -A40 "^NVFP4\|% of the read ceiling\|GEMV" "$OUT/suite/bench.txt" 2>/dev/null | head -60
tail -20 "$OUT/suite.log"
