#!/usr/bin/env bash
# Packs the GPU suite's binaries, built here, for the H200 (binaries built on this Debian 12 machine run
# there): the device's time is counted from its start, and building there takes 50-80 s of each call.
#   usage: scripts/gpu_pack.sh [BUILD_DIR]      (default build/, configured with CUDA on)
# Builds the suite's targets in BUILD_DIR, strips them, and writes .deps/prebuilt/gpu-build.tar.xz
# (git-ignored): the binaries and every ctest file of the build tree at their paths under BUILD_DIR,
# plus PREBUILT (the commit, whether the tree had changes, the build's absolute path). Carry
# .deps/prebuilt with .deps/gpu-debs (not .deps/gpu-debs-build: the three with the tracked tree pass the
# device's 64 MiB carry, and nothing is built there) and run `PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz
# PG_COMMIT=<the commit> scripts/gpu_suite.sh OUT` there: the suite unpacks it at the same absolute path
# (ctest's files name it) instead of configuring and building. ~1.5 MB a binary compressed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
TARGETS=(ops_cuda_test ops_fused_cpu_test cuda_golden_test sampling_cuda_test peregrine bench_ops_cuda)
grep -q '^PEREGRINE_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt" ||
  { echo "gpu_pack: $BUILD is not configured with PEREGRINE_CUDA=ON (cmake -S . -B $BUILD -G Ninja)" >&2; exit 2; }
echo "gpu_pack: building ${TARGETS[*]} in $BUILD"
ninja -C "$BUILD" "${TARGETS[@]}"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
DEST="$STAGE/$(basename "$BUILD")"
mkdir -p "$DEST"
for t in "${TARGETS[@]}"; do
  bin=$(find "$BUILD" -name "$t" -type f -perm -u+x -not -path '*/CMakeFiles/*' | head -1)
  [ -n "$bin" ] || { echo "gpu_pack: $t was not built" >&2; exit 1; }
  rel=${bin#"$BUILD"/}
  mkdir -p "$DEST/$(dirname "$rel")"
  strip -o "$DEST/$rel" "$bin"
done
# ctest's files (the test lists gtest_discover_tests wrote at build time name the binaries by
# absolute path): ctest -L gpu runs from them as it would in BUILD.
(cd "$BUILD" && find . \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) \
   -not -path '*/CMakeFiles/*' -print0 | xargs -0 cp --parents -t "$DEST")
dirty=$( [ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ] && echo no || echo yes)
printf 'commit %s\ndirty %s\nbuild %s\ndate %s\n' "$(git -C "$ROOT" rev-parse HEAD)" "$dirty" "$BUILD" \
  "$(date -u +%FT%TZ)" >"$DEST/PREBUILT"
mkdir -p "$ROOT/.deps/prebuilt"
OUTF="$ROOT/.deps/prebuilt/gpu-build.tar.xz"
# xz -9: its 64 MiB dictionary (and a block larger than the tar, so one stream even with -T0) spans the
# binaries, which share most of their code: 8.4 MB for session 43's six (116 MB), against 23 MB at -6
# (8 MiB dictionary, -T0's blocks); about a minute on 2 cores. The carry's 64 MiB holds the tracked tree too.
echo "gpu_pack: compressing (xz -9)"
tar -C "$STAGE" -cf - "$(basename "$BUILD")" | xz -9 -T0 >"$OUTF.tmp"
mv "$OUTF.tmp" "$OUTF"
echo "gpu_pack: $OUTF, $(du -h "$OUTF" | cut -f1); $(tr '\n' ' ' <"$DEST/PREBUILT")"
[ "$dirty" = no ] || echo "gpu_pack: the tree has uncommitted changes: commit them so that PG_COMMIT names what was built" >&2
