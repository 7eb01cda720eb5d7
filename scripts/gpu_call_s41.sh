#!/usr/bin/env bash
# Session 41's H200 call (kept as a record of what ran): the ring probe under memcheck (it hit an
# illegal instruction on the H100), PEREGRINE_ATTENTION_EARLY_CHUNK=1 against the default, then the
# suite with the prebuilt binaries: the standard table and bench_ops_cuda's GEMV table (no ring probe).
#   usage: scripts/gpu_call_s41.sh OUT   (carry .deps/gpu-debs and .deps/prebuilt)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_call_s41.sh OUT}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
D=/tmp/pgdeps
mkdir -p "$D"
for f in .deps/gpu-debs/*.deb; do dpkg -x "$f" "$D"; done
# The archive's build/ at its own path (the suite re-unpacks it there too): this tree's build/.
tar -xJf .deps/prebuilt/gpu-build.tar.xz -C .
B=$(pwd)/build
grep -q "^build $B\$" build/PREBUILT || { echo "the archive was built elsewhere: $(cat build/PREBUILT)"; exit 2; }
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 70 "$SAN" --tool memcheck "$B/bench/bench_ops_cuda" --ring-only >"$OUT/san.txt" 2>&1
echo "ring probe under memcheck: rc=$?"; grep -v '^=========     ' "$OUT/san.txt" | head -24
PG_SWEEP_TIMEOUT=30 timeout 110 scripts/bench_sweep.sh "$B/peregrine" 2 "moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4" - PEREGRINE_ATTENTION_EARLY_CHUNK=1 >"$OUT/early.txt" 2>&1
echo "early chunk sweep: rc=$?"; cat "$OUT/early.txt"
PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_CTEST_R=NoSuchTestHere PG_SUITE_SKIP_MEASURES=1 \
  PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 PG_SUITE_SKIP_PROBES=1 \
  PG_SUITE_OPS_BENCH_ARGS=--no-ring PG_SUITE_BUDGET_S=${PG_CALL_SUITE_S:-330} scripts/gpu_suite.sh "$OUT/suite" >"$OUT/suite.log" 2>&1
tail -30 "$OUT/suite.log"
