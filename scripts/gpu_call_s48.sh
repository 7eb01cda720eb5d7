#!/usr/bin/env bash
# Session 48's device call (binaries of .deps/prebuilt, scripts/gpu_pack.sh; carry .deps/gpu-debs and
# .deps/prebuilt), each part while time is left:
#   1. the MoE op tests (the persistent gate_up's variants among them: 3 blocks, 2 blocks at K in
#      halves, a block a unit, each against the default's bits);
#   2. the goldens (the persistent gate_up in speculative decoding's 2..8-token steps);
#   3. the default against PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST=0 (a block a unit), alternating:
#      moonlight nvfp4's verify steps at k = 1, 2, 3 and decode (PG_S48_BENCHES).
#   usage: scripts/gpu_call_s48.sh OUT     PG_S48_TOTAL_S (420), PG_S48_ROUNDS (3), PG_S48_BENCHES
set -uo pipefail
OUT=${1:?usage: scripts/gpu_call_s48.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
T0=$(date +%s)
left() { echo $(( ${PG_S48_TOTAL_S:-420} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
B=$(pwd)/build
export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_BENCHES= PG_SUITE_CTEST_R=NoSuchTestHere \
  PG_SUITE_SKIP_MEASURES=1 PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 \
  PG_SUITE_SKIP_PROBES=1 PG_SUITE_SKIP_OPS_BENCH=1 PG_SUITE_SKIP_ALT=1 PG_SUITE_GATED= PG_SUITE_BUDGET_S=60 \
  scripts/gpu_suite.sh "$OUT/unpack" >"$OUT/unpack.log" 2>&1
echo "$(el) unpacked: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(grep -m1 '^prebuilt' "$OUT/unpack/summary.txt" 2>/dev/null)"

timeout 150 "$B/tests/ops/ops_cuda_test" --gtest_filter='*Moe*:-*Timing*' >"$OUT/moe_ops.log" 2>&1
rc=$?
echo "$(el) MoE op tests: rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/moe_ops.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] |persistent' "$OUT/moe_ops.log" | head -12
[ $rc -eq 0 ] || { echo "the op tests failed: no timing"; exit 1; }
GOLD=$(find "$B" -name cuda_golden_test -type f -perm -u+x | head -1)
timeout 120 "$GOLD" >"$OUT/persist_goldens.log" 2>&1
rc=$?
echo "$(el) goldens: rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/persist_goldens.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] ' "$OUT/persist_goldens.log" | head -8
[ $rc -eq 0 ] || { echo "the goldens failed: no timing"; exit 1; }

# The persistent gate_up is the default (the resident grid where a block a unit would not fit: moonlight
# from 3 tokens); PERSIST=0 is the one-unit grid.
for bench in ${PG_S48_BENCHES:-moonlight-16b-a3b:nvfp4:0}; do
  [ "$(left)" -gt 60 ] || break
  PG_SWEEP_TIMEOUT=60 PG_SWEEP_METRIC="verify1 verify2 verify3 decode" timeout $(( $(left) - 10 )) \
    scripts/bench_sweep.sh "$B/peregrine" "${PG_S48_ROUNDS:-3}" "$bench" - PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST=0 \
    >"$OUT/sweep_${bench%%:*}.txt" 2>&1
  echo "$(el) $bench: rc=$?"; cat "$OUT/sweep_${bench%%:*}.txt"
done
