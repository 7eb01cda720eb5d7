#!/usr/bin/env bash
# The timeline probe on the device (ops/cuda/common/timeline.h): rebuilds `peregrine` in BUILD with
# -DPEREGRINE_TIMELINE=ON, runs decode at batch 1 of each synthetic model with the marks on, prints
# scripts/timeline_report.py's table for each, keeps the newest 60,000 records of each as
# OUT/TAG.tail.csv.gz (with the header, for timeline_report.py), and sets BUILD back to the default
# (its next build recompiles the CUDA code).
# The marks slow a step by ~10% (moonlight nvfp4 633 -> 573 tok/s): read orders and gaps.
#   usage: scripts/timeline_run.sh BUILD OUT "NAME:DTYPE:LAYERS[:K] ..." [VAR=VAL ...]   (after gpu_suite.sh)
# A fourth field K: the verify step at K drafted tokens instead of decode (`--speculative-tokens K` with
# PEREGRINE_BENCH_VERIFY_LAST=1: the bench stops after that step's replays, so the newest records are
# verify steps only). PG_TIMELINE_BIN=PATH: a peregrine already built with the probe (e.g. here:
# `cmake -S . -B build-tl -DPEREGRINE_TIMELINE=ON && ninja -C build-tl peregrine`, carried), BUILD untouched.
set -uo pipefail
BUILD=${1:?usage: scripts/timeline_run.sh BUILD OUT BENCHES [VAR=VAL ...]}
OUT=${2:?out}
BENCHES=${3:?benches}
shift 3
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
BIN=${PG_TIMELINE_BIN:-}
if [ -z "$BIN" ]; then
  cmake -DPEREGRINE_TIMELINE=ON "$BUILD" >"$OUT/timeline_cmake.log" 2>&1 || { echo "timeline: cmake failed"; exit 1; }
  t=$(date +%s)
  if ! ninja -C "$BUILD" peregrine >"$OUT/timeline_build.log" 2>&1; then
    echo "timeline: build failed (timeline_build.log)"; tail -20 "$OUT/timeline_build.log"
    cmake -DPEREGRINE_TIMELINE=OFF "$BUILD" >/dev/null 2>&1
    exit 1
  fi
  echo "timeline build: $(( $(date +%s) - t )) s"
  BIN=$BUILD/peregrine
fi
for b in $BENCHES; do
  IFS=: read -r name dtype layers k <<<"$b"
  tag="$name-$dtype-L${layers:-0}${k:+-verify$k}"
  args=(bench --synthetic "$name" --dtype "$dtype" --batches 1 --long-prefill 0)
  [ "${layers:-0}" != 0 ] && args+=(--layers "$layers")
  envs=("$@" PEREGRINE_TIMELINE_OUT="$OUT/$tag.csv")
  [ -n "$k" ] && args+=(--speculative-tokens "$k") && envs+=(PEREGRINE_BENCH_VERIFY_LAST=1)
  env "${envs[@]}" timeout 120 "$BIN" "${args[@]}" 2>"$OUT/$tag.err" |
    grep -E "^(decode b=1|verify k=)" | sed "s/^/$tag ${*:-}: /"
  tail -1 "$OUT/$tag.err"
  python3 scripts/timeline_report.py "$OUT/$tag.csv"
  { head -n 1 "$OUT/$tag.csv"; tail -n 60000 "$OUT/$tag.csv"; } | gzip >"$OUT/$tag.tail.csv.gz" && rm -f "$OUT/$tag.csv"
done
[ -n "${PG_TIMELINE_BIN:-}" ] || cmake -DPEREGRINE_TIMELINE=OFF "$BUILD" >/dev/null 2>&1
