#!/usr/bin/env bash
# The next session's first device call (binaries of .deps/prebuilt, scripts/gpu_pack.sh, and the timeline
# probe's peregrine of .deps/timeline, `ninja -C build-tl peregrine` then xz; carry .deps/gpu-debs,
# .deps/prebuilt and .deps/timeline), each part while time is left:
#   1. the timeline of moonlight nvfp4's verify step at k = 1 with the persistent gate_up at one unit a
#      block (PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST=660) and with a block a unit (=0): alone under ncu the
#      persistent kernel costs 0.5 us a launch more, in the graph ~2.3 us a layer (session 48), so the
#      rest is in how it overlaps the router before it and the down after it;
#   2. the same at k = 3, the default (persistent, resident grid) against =0;
#   3. on an H200, the standard table (scripts/gpu_tables.sh), the issues' figures.
#   usage: scripts/gpu_call_s49.sh OUT     PG_S49_TOTAL_S (540)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_call_s49.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
T0=$(date +%s)
left() { echo $(( ${PG_S49_TOTAL_S:-540} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_BENCHES= PG_SUITE_CTEST_R=NoSuchTestHere \
  PG_SUITE_SKIP_MEASURES=1 PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 \
  PG_SUITE_SKIP_PROBES=1 PG_SUITE_SKIP_OPS_BENCH=1 PG_SUITE_SKIP_ALT=1 PG_SUITE_GATED= PG_SUITE_BUDGET_S=60 \
  scripts/gpu_suite.sh "$OUT/unpack" >"$OUT/unpack.log" 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$(el) unpacked: $GPU; $(grep -m1 '^prebuilt' "$OUT/unpack/summary.txt" 2>/dev/null); timeline: $(head -1 .deps/timeline/BUILT)"
xz -dc .deps/timeline/peregrine.xz >/tmp/pg-tl && chmod +x /tmp/pg-tl
for run in 1:660 1:0 3:1 3:0; do
  [ "$(left)" -gt 60 ] || break
  k=${run%%:*} v=${run#*:}
  PG_TIMELINE_BIN=/tmp/pg-tl timeout 150 scripts/timeline_run.sh build "$OUT/tl_k${k}_persist$v" \
    "moonlight-16b-a3b:nvfp4:0:$k" PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST="$v" >"$OUT/tl_k${k}_persist$v.txt" 2>&1
  echo "$(el) timeline k = $k, PERSIST=$v: rc=$?"; head -40 "$OUT/tl_k${k}_persist$v.txt"
done
if [[ "$GPU" == *H200* ]] && [ "$(left)" -gt 300 ]; then
  PG_TABLES_TOTAL_S=$(( $(left) - 10 )) scripts/gpu_tables.sh "$OUT/tables" 2>&1 | tail -40
fi
