#!/usr/bin/env bash
# One device call for the figures, with the binaries packed on the dev machine (scripts/gpu_pack.sh;
# carry .deps/gpu-debs and .deps/prebuilt, nothing is built there): the standard table (on an H200:
# an H100's is not the issues' figure; PG_TABLES_BENCHES=1 runs it anywhere) and bench_ops_cuda's GEMV
# table without the ring probe; then, while PG_TABLES_TOTAL_S lasts, an A/B sweep of runtime switches
# (PG_TABLES_SWEEP="VAR=VAL ...", each against the default) and the ring probe alone under
# compute-sanitizer memcheck (it raised an illegal instruction on an H100 before a66bec3 / b7aeddb).
#   usage: scripts/gpu_tables.sh OUT     PG_TABLES_SUITE_S: the suite's budget (s, 330)
# Session 41 ran it as scripts/gpu_call_s41.sh with PEREGRINE_ATTENTION_EARLY_CHUNK=1 as the sweep.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_tables.sh OUT}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
T0=$(date +%s)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"
benches=()
case "$gpu" in *H200*) ;; *) [ -n "${PG_TABLES_BENCHES:-}" ] || benches=(PG_SUITE_BENCHES=) ;; esac
env "${benches[@]}" PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_CTEST_R=NoSuchTestHere PG_SUITE_SKIP_MEASURES=1 \
  PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 PG_SUITE_SKIP_PROBES=1 \
  PG_SUITE_OPS_BENCH_ARGS=--no-ring PG_SUITE_BUDGET_S=${PG_TABLES_SUITE_S:-330} scripts/gpu_suite.sh "$OUT/suite" >"$OUT/suite.log" 2>&1
B=$(pwd)/build
export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
left() { echo $(( ${PG_TABLES_TOTAL_S:-420} - ($(date +%s) - T0) )); }
if [ -n "${PG_TABLES_SWEEP:-}" ] && [ "$(left)" -gt 60 ]; then
  # shellcheck disable=SC2086  # the variants are words
  PG_SWEEP_TIMEOUT=25 timeout $(( $(left) - 30 )) scripts/bench_sweep.sh "$B/peregrine" 2 \
    "moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4" - $PG_TABLES_SWEEP >"$OUT/sweep.txt" 2>&1
  echo "sweep: rc=$?"; cat "$OUT/sweep.txt"
fi
if [ "$(left)" -gt 25 ]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout $(( $(left) - 10 )) "$SAN" --tool memcheck "$B/bench/bench_ops_cuda" --ring-only >"$OUT/san.txt" 2>&1
  echo "ring probe under memcheck: rc=$?"; grep -v '^=========     ' "$OUT/san.txt" | head -24
fi
# The suite packs its logs into logs.tgz at its end (bench.txt with them).
{ cat "$OUT/suite/bench.txt" 2>/dev/null || tar -xzOf "$OUT/suite/logs.tgz" ./bench.txt 2>/dev/null; } | grep -A40 "^GEMV" | head -60
tail -20 "$OUT/suite.log"
