#!/usr/bin/env bash
# A baseline for gpu_suite.sh's A/B (PG_SUITE_AB_BASE), in one of two forms:
#  - a whole source tree (the default): `git archive SHA` into DIR (default .snap-base, git-ignored)
#    without the golden models' weights (the A/B builds only `peregrine`, and the device call's
#    working tree plus what it carries must stay under 64 MiB), models/ linked to this checkout's.
#    The suite builds it from scratch in the background (~200 s of 16 cores at low priority: give
#    the run a budget of 300 s or more before section 5a);
#  - --files: only SHA's versions of the files that differ from the working tree (DIR/ab-files.txt
#    lists them, DIR/tree holds them). The suite then swaps them into its own tree after its tests,
#    rebuilds `peregrine` incrementally (only what they touch), and swaps them back: seconds to a
#    minute instead of a whole build. For changes that only modify files (no file added, removed or
#    renamed between SHA and the working tree); scripts/ and *.md are not swapped.
#    With paths after DIR (--files only), only those files: a mix of SHA's and the tree's, to split a
#    change by file (several baselines alternate in one call: PG_SUITE_AB_BASE=".snap-base .snap-mix").
# Then: run(carry [".deps/gpu-debs", ".snap-base"], "PG_SUITE_AB_BASE=.snap-base scripts/gpu_suite.sh $OUT/suite").
#   usage: scripts/ab_base.sh SHA [DIR [PATH...]] [--files]   (DIR inside this checkout: the models/ link is relative)
set -euo pipefail
FILES=0
args=()
for a in "$@"; do
  if [ "$a" = --files ]; then FILES=1; else args+=("$a"); fi
done
SHA=${args[0]:?usage: scripts/ab_base.sh SHA [DIR [PATH...]] [--files]}
DIR=${args[1]:-.snap-base}
PATHS=("${args[@]:2}")
cd "$(dirname "$0")/.."
git rev-parse --verify -q "$SHA^{commit}" >/dev/null || { echo "ab_base.sh: '$SHA' is not a commit here" >&2; exit 2; }
rm -rf "$DIR"
mkdir -p "$DIR"
if [ "$FILES" = 1 ]; then
  # Every difference must be a modification: an added or removed file changes what CMake globs.
  # scripts/ and docs are left out: they do not change `peregrine`, and the suite runs from scripts/.
  spec=(-- . ':!models' ':!scripts' ':!*.md')
  [ ${#PATHS[@]} -gt 0 ] && spec=(-- "${PATHS[@]}")
  other=$(git diff --name-status "$SHA" "${spec[@]}" | awk '$1 != "M"')
  if [ -n "$other" ]; then
    echo "ab_base.sh --files: files added, removed or renamed since $SHA (use the whole-tree form):" >&2
    echo "$other" >&2
    exit 2
  fi
  git diff --name-only "$SHA" "${spec[@]}" >"$DIR/ab-files.txt"
  [ -s "$DIR/ab-files.txt" ] || { echo "ab_base.sh --files: no file differs from $SHA" >&2; exit 2; }
  while read -r f; do
    mkdir -p "$DIR/tree/$(dirname "$f")"
    git show "$SHA:$f" >"$DIR/tree/$f"
  done <"$DIR/ab-files.txt"
  echo "$DIR: $(git rev-parse --short "$SHA")'s version of $(wc -l <"$DIR/ab-files.txt") files ($(du -sh "$DIR" | cut -f1))"
  exit 0
fi
git archive "$SHA" -- . ':!models' | tar -x -C "$DIR"
find "$DIR/tests/golden" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + 2>/dev/null || true
ln -s "$(realpath --relative-to="$DIR" models)" "$DIR/models"
echo "$DIR: $(git rev-parse --short "$SHA") ($(du -sh "$DIR" | cut -f1))"
