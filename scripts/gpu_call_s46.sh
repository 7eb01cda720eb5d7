#!/usr/bin/env bash
# Session 46's single device call (device time came rarely: everything in one command of < 600 s),
# binaries of the commit in .deps/prebuilt/BUILT-less gpu-build.tar.xz (scripts/gpu_pack.sh) and the
# timeline probe's in .deps/timeline (carry .deps/gpu-debs, .deps/prebuilt, .deps/timeline):
#   1. scripts/gpu_tables.sh: the standard table (an H200's only) and the GEMV table, ~100-170 s;
#   2. scripts/gpu_env_sweep.sh over the verify-step experiments: op tests under each, then the
#      variants against the default alternating (verify k = 1, 3 and decode);
#   3. scripts/timeline_run.sh: the verify step at k = 3 and the decode step, marks on.
#   usage: scripts/gpu_call_s46.sh OUT     PG_S46_SWEEP: the variants (the defaults below)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_call_s46.sh OUT}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
PG_TABLES_TOTAL_S=${PG_S46_TABLES_S:-170} PG_TABLES_SUITE_S=${PG_S46_TABLES_S:-170} scripts/gpu_tables.sh "$OUT/c" >"$OUT/tables.txt" 2>&1
echo "$(el) tables:"
head -1 "$OUT/tables.txt"; tail -n 42 "$OUT/tables.txt" | cut -c1-170
# shellcheck disable=SC2086  # the variants are words
PG_ENV_TOTAL_S=${PG_S46_SWEEP_S:-300} PG_ENV_TESTS='*MlaAttention*:*MoeExperts*:*MoeLayerPdl*:-*Timing*' PG_ENV_GEMV=none \
  PG_SWEEP_METRIC="verify1 verify3 decode" PG_ENV_BENCHES="moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4" \
  scripts/gpu_env_sweep.sh "$OUT/s" ${PG_S46_SWEEP:-PEREGRINE_ATTENTION_MAX_SPLITS=8 PEREGRINE_MOE_NVFP4_GATE_UP_TILES2_FROM=2 \
  PEREGRINE_ATTENTION_MAX_SPLITS=16 PEREGRINE_ATTENTION_DEFER_MAX_TOKENS=4,PEREGRINE_ATTENTION_MAX_SPLITS=8 \
  PEREGRINE_DECODE_ATTENTION=cuda} >"$OUT/sweep.txt" 2>&1
echo "$(el) sweep:"
grep -vE "^\s*$" "$OUT/sweep.txt" | grep -v "^GEMV\|^  shape" | tail -40
export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
xz -dc .deps/timeline/peregrine.xz >/tmp/pg-tl && chmod +x /tmp/pg-tl
left=$(( ${PG_S46_TOTAL_S:-580} - ($(date +%s) - T0) ))
if [ "$left" -gt 40 ]; then
  PG_TIMELINE_BIN=/tmp/pg-tl timeout $((left - 5)) scripts/timeline_run.sh build "$OUT/tl" \
    "${PG_S46_TIMELINE:-moonlight-16b-a3b:nvfp4:0:3 moonlight-16b-a3b:nvfp4:0}" >"$OUT/timeline.txt" 2>&1
  echo "$(el) timeline: rc=$?"
  cut -c1-160 "$OUT/timeline.txt" | head -90
fi
