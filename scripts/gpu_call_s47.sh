#!/usr/bin/env bash
# Session 47's device call, and the next session's first (binaries of .deps/prebuilt, scripts/gpu_pack.sh;
# carry .deps/gpu-debs and .deps/prebuilt), each part while time is left:
#   1. the bf16 cache's op tests, the CUDA goldens under PEREGRINE_KV_CACHE=bf16 (the CPU emulation's
#      crash fixed);
#   2. moonlight nvfp4 decode after PG_S47_KV_CTX prompt tokens (1,024 and 7,680: its context is 8,192,
#      the bench's decode tokens included), bf16 cache against f32;
#   3. the MoE layer's ops launched eagerly (the bench's verify report at k = 1), each cache;
#   4. the goldens at the default (f32 cache).
#   usage: scripts/gpu_call_s47.sh OUT     PG_S47_TOTAL_S (420)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_call_s47.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
T0=$(date +%s)
left() { echo $(( ${PG_S47_TOTAL_S:-420} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
B=$(pwd)/build
export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_BENCHES= PG_SUITE_CTEST_R=NoSuchTestHere \
  PG_SUITE_SKIP_MEASURES=1 PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 \
  PG_SUITE_SKIP_PROBES=1 PG_SUITE_SKIP_OPS_BENCH=1 PG_SUITE_SKIP_ALT=1 PG_SUITE_GATED= PG_SUITE_BUDGET_S=60 \
  scripts/gpu_suite.sh "$OUT/unpack" >"$OUT/unpack.log" 2>&1
echo "$(el) unpacked: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(grep -m1 '^prebuilt' "$OUT/unpack/summary.txt" 2>/dev/null)"

timeout 120 "$B/tests/ops/ops_cuda_test" --gtest_filter='*Bf16Pool*:*KvWrite*:*MlaPrefill*:*MlaAttention*:*Moe*:-*Timing*' >"$OUT/kv_ops.log" 2>&1
echo "$(el) bf16 KV and attention op tests: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/kv_ops.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] ' "$OUT/kv_ops.log" | head -8
GOLD=$(find "$B" -name cuda_golden_test -type f -perm -u+x | head -1)
PEREGRINE_KV_CACHE=bf16 timeout 150 "$GOLD" >"$OUT/kv_goldens.log" 2>&1
echo "$(el) goldens under PEREGRINE_KV_CACHE=bf16: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/kv_goldens.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] |prefix cache|step tolerance" "$OUT/kv_goldens.log" | head -16

for ctx in ${PG_S47_KV_CTX:-1024 7680}; do
  [ "$(left)" -gt 80 ] || break
  PG_SWEEP_TIMEOUT=60 PG_SWEEP_ARGS="--prompt-tokens $ctx" timeout $(( $(left) - 10 )) scripts/bench_sweep.sh "$B/peregrine" 2 \
    moonlight-16b-a3b:nvfp4:0 - PEREGRINE_KV_CACHE=bf16 >"$OUT/kv_sweep_$ctx.txt" 2>&1
  echo "$(el) bf16 KV against f32 after $ctx tokens: rc=$?"; cat "$OUT/kv_sweep_$ctx.txt"
done
# The MoE layer's ops launched eagerly at q = 1 and 2 (the bench's verify report), each cache: where the
# bf16 cache's 1K cost goes (attention, mla_prep).
for kv in f32 bf16; do
  [ "$(left)" -gt 90 ] || break
  timeout 60 "$B/peregrine" bench --synthetic moonlight-16b-a3b --dtype nvfp4 --batches 1 --long-prefill 0 \
    --speculative-tokens 1 --kv-cache-dtype $kv >"$OUT/ops_$kv.txt" 2>&1
  echo "$(el) $kv cache: rc=$? $(grep -m1 'moe layer' "$OUT/ops_$kv.txt")"
done
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 5 )) "$GOLD" >"$OUT/goldens.log" 2>&1
  echo "$(el) goldens (f32 cache): rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/goldens.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] |prefix cache' "$OUT/goldens.log" | head -8
fi
