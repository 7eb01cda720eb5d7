#!/usr/bin/env bash
# An A/B of two `peregrine` builds made on the dev machine, in one device call and with no build there:
# the H200s vary 1-2% between calls, not within one, so a change is measured against its baseline by
# alternating the two binaries (scripts/bench_sweep.sh's "bin=" variants) at decode and at the verify
# step. The binaries come xz-compressed (~5 MB each; make them with `xz -6 -c build/peregrine >
# .deps/ab/peregrine-<commit>.xz`, or take one out of a scripts/gpu_pack.sh archive), carried in
# .deps/ab beside .deps/gpu-debs (their runtime libraries): the tree plus both stays well under the
# device's 64 MiB (the full prebuilt archive and two binaries do not).
#   usage: scripts/gpu_ab_bins.sh OUT_DIR BASE.xz HEAD.xz [ROUNDS]
#   PG_AB_BENCHES ("NAME:DTYPE:LAYERS ..."; default moonlight nvfp4 and V3 4 layers nvfp4), PG_AB_VERIFY
#   (the verify steps' k, default "1 3", on the first bench; "" for none), PG_AB_DRY=1 (unpack and check
#   the binaries start, run no bench: for the dev machine).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_ab_bins.sh OUT_DIR BASE.xz HEAD.xz [ROUNDS]}
BASE_XZ=${2:?base binary (.xz)}
HEAD_XZ=${3:?head binary (.xz)}
ROUNDS=${4:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DEPS=${PG_GPU_DEPS:-/tmp/pgdeps}
BENCHES=${PG_AB_BENCHES:-"moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4"}
VERIFY=${PG_AB_VERIFY-"1 3"}
SUMMARY=$OUT/ab_summary.txt
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

if ls .deps/gpu-debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$DEPS"
  for f in .deps/gpu-debs/*.deb; do dpkg -x "$f" "$DEPS"; done
else
  note "no .deps/gpu-debs: the binaries need its fmt, spdlog and pcre2 (scripts/fetch_gpu_debs.sh, then carry it)"
fi
export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

BINS=$(mktemp -d /tmp/pg-ab-XXXXXX)
unxz_to() {  # xz may be missing there: python's lzma reads the same format
  if command -v xz >/dev/null 2>&1; then xz -dc "$1" >"$2"
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi && chmod +x "$2"
}
base="$BINS/$(basename "$BASE_XZ" .xz)" head="$BINS/$(basename "$HEAD_XZ" .xz)"
[ "$base" != "$head" ] || head="$head-head"
unxz_to "$BASE_XZ" "$base" || { note "could not unpack $BASE_XZ"; exit 1; }
unxz_to "$HEAD_XZ" "$head" || { note "could not unpack $HEAD_XZ"; exit 1; }
for b in "$base" "$head"; do
  "$b" --version >"$OUT/version-$(basename "$b").txt" 2>&1 || { note "$(basename "$b") does not start: $(tail -1 "$OUT/version-$(basename "$b").txt")"; exit 1; }
done
note "A/B: base $(basename "$base"), head $(basename "$head"), $ROUNDS rounds alternating; benches: $BENCHES"
[ -n "${PG_AB_DRY:-}" ] && { note "dry run: both binaries start; no bench run"; exit 0; }

# Decode at batch 1 after 1,024 tokens, then the verify step at each k on the first bench.
"$ROOT/scripts/bench_sweep.sh" "$head" "$ROUNDS" "$BENCHES" "bin=$base" - >"$OUT/ab_decode.txt" 2>"$OUT/ab_decode.err"
while read -r line; do note "decode $line"; done <"$OUT/ab_decode.txt"
first=${BENCHES%% *}
for k in $VERIFY; do
  PG_SWEEP_METRIC=verify$k "$ROOT/scripts/bench_sweep.sh" "$head" "$ROUNDS" "$first" "bin=$base" - \
    >"$OUT/ab_verify$k.txt" 2>"$OUT/ab_verify$k.err"
  while read -r line; do note "verify k=$k $line"; done <"$OUT/ab_verify$k.txt"
done
rm -rf "$BINS"
echo "---- summary ($SUMMARY)"
cat "$SUMMARY"
