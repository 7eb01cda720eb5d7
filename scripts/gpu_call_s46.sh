#!/usr/bin/env bash
# Session 46's single device call (device time came rarely: everything in one command), with the
# binaries of .deps/prebuilt (scripts/gpu_pack.sh) and the timeline probe's of .deps/timeline (carry
# .deps/gpu-debs, .deps/prebuilt, .deps/timeline). In order, each part while time is left:
#   1. the bf16 KV cache's op tests, and the goldens under PEREGRINE_KV_CACHE=bf16;
#   2. scripts/gpu_tables.sh: the standard table (an H200's only), the GEMV table if time allows;
#   3. decode with the bf16 KV cache against the f32 one at 1K and 8K contexts, alternating;
#   4. scripts/gpu_env_sweep.sh over the verify-step experiments (op tests under each, then against
#      the default: verify k = 1, 3 and decode);
#   5. scripts/timeline_run.sh: the verify step at k = 3 and the decode step, marks on.
#   usage: scripts/gpu_call_s46.sh OUT     PG_S46_SWEEP: part 3's variants; PG_S46_TOTAL_S (480)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_call_s46.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
T0=$(date +%s)
left() { echo $(( ${PG_S46_TOTAL_S:-480} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
B=$(pwd)/build

export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
# The .debs and the binaries unpacked (the suite runs nothing else).
PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_BENCHES= PG_SUITE_CTEST_R=NoSuchTestHere \
  PG_SUITE_SKIP_MEASURES=1 PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 \
  PG_SUITE_SKIP_PROBES=1 PG_SUITE_SKIP_OPS_BENCH=1 PG_SUITE_SKIP_ALT=1 PG_SUITE_GATED= PG_SUITE_BUDGET_S=60 \
  scripts/gpu_suite.sh "$OUT/unpack" >"$OUT/unpack.log" 2>&1
echo "$(el) unpacked: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(grep -m1 '^prebuilt' "$OUT/unpack/summary.txt" 2>/dev/null)"

timeout 90 "$B/tests/ops/ops_cuda_test" --gtest_filter='*Bf16Pool*:*KvWrite*:*MlaPrefill*' >"$OUT/kv_ops.log" 2>&1
echo "$(el) bf16 KV op tests: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/kv_ops.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] ' "$OUT/kv_ops.log" | head -8
GOLD=$(find "$B" -name cuda_golden_test -type f -perm -u+x | head -1)
PEREGRINE_KV_CACHE=bf16 timeout 100 "$GOLD" >"$OUT/kv_goldens.log" 2>&1
echo "$(el) goldens under PEREGRINE_KV_CACHE=bf16: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/kv_goldens.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] ' "$OUT/kv_goldens.log" | head -8

kv_sweep() {
  for ctx in ${PG_S46_KV_CTX:-1024 8192}; do
    [ "$(left)" -gt 60 ] || break
    PG_SWEEP_TIMEOUT=40 PG_SWEEP_ARGS="--prompt-tokens $ctx" timeout $(( $(left) - 10 )) scripts/bench_sweep.sh "$B/peregrine" 2 \
      "${PG_S46_KV_BENCHES:-moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4}" - PEREGRINE_KV_CACHE=bf16 >"$OUT/kv_sweep_$ctx.txt" 2>&1
    echo "$(el) bf16 KV against f32 at context $ctx: rc=$?"; cat "$OUT/kv_sweep_$ctx.txt"
  done
}
tables() {
  [ "$(left)" -gt 100 ] || return 0
  [ "$(left)" -gt 380 ] || export PG_SUITE_SKIP_OPS_BENCH=1
  PG_TABLES_TOTAL_S=${PG_S46_TABLES_S:-130} PG_TABLES_SUITE_S=${PG_S46_TABLES_S:-130} scripts/gpu_tables.sh "$OUT/c" >"$OUT/tables.txt" 2>&1
  echo "$(el) tables:"
  tail -n 30 "$OUT/tables.txt" | cut -c1-170
}
# The standard table (an H200's: gpu_tables.sh runs the benches there only; the GEMV table if time is
# left) and the bf16 KV cache's decode against the f32 one; PG_S46_KV_FIRST=1: the latter first.
if [ -n "${PG_S46_KV_FIRST:-}" ]; then kv_sweep; tables; else tables; kv_sweep; fi

if [ "$(left)" -gt 150 ]; then
  # shellcheck disable=SC2086  # the variants are words
  PG_ENV_TOTAL_S=$(( $(left) - 80 )) PG_ENV_TESTS='*MlaAttention*:*MoeExperts*:*MoeLayerPdl*:-*Timing*' PG_ENV_GEMV=none \
    PG_SWEEP_METRIC="verify1 verify3 decode" PG_ENV_BENCHES="moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4" \
    scripts/gpu_env_sweep.sh "$OUT/s" ${PG_S46_SWEEP:-PEREGRINE_ATTENTION_MAX_SPLITS=8 PEREGRINE_MOE_NVFP4_GATE_UP_TILES2_FROM=2 \
    PEREGRINE_ATTENTION_MAX_SPLITS=16} >"$OUT/sweep.txt" 2>&1
  echo "$(el) sweep:"
  grep -vE "^\s*$" "$OUT/sweep.txt" | grep -v "^GEMV\|^  shape" | tail -40
fi

if [ "$(left)" -gt 40 ]; then
  xz -dc .deps/timeline/peregrine.xz >/tmp/pg-tl && chmod +x /tmp/pg-tl
  PG_TIMELINE_BIN=/tmp/pg-tl timeout $(( $(left) - 5 )) scripts/timeline_run.sh build "$OUT/tl" \
    "${PG_S46_TIMELINE:-moonlight-16b-a3b:nvfp4:0:3 moonlight-16b-a3b:nvfp4:0}" >"$OUT/timeline.txt" 2>&1
  echo "$(el) timeline: rc=$?"
  cut -c1-160 "$OUT/timeline.txt" | head -90
fi
