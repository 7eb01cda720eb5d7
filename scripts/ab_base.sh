#!/usr/bin/env bash
# A baseline source tree for gpu_suite.sh's A/B (PG_SUITE_AB_BASE): `git archive SHA` into DIR (default
# .snap-base, git-ignored) without the golden models' weights (the A/B builds only `peregrine`, and the
# device call's working tree plus what it carries must stay under 64 MiB), models/ linked to this
# checkout's. Then: run(carry [".deps/gpu-debs", ".snap-base"], "PG_SUITE_AB_BASE=.snap-base scripts/gpu_suite.sh $OUT/suite").
#   usage: scripts/ab_base.sh SHA [DIR]   (DIR inside this checkout: the models/ link is relative)
set -euo pipefail
SHA=${1:?usage: scripts/ab_base.sh SHA [DIR]}
DIR=${2:-.snap-base}
cd "$(dirname "$0")/.."
git rev-parse --verify -q "$SHA^{commit}" >/dev/null || { echo "ab_base.sh: '$SHA' is not a commit here" >&2; exit 2; }
rm -rf "$DIR"
mkdir -p "$DIR"
git archive "$SHA" -- . ':!models' | tar -x -C "$DIR"
find "$DIR/tests/golden" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + 2>/dev/null || true
ln -s "$(realpath --relative-to="$DIR" models)" "$DIR/models"
echo "$DIR: $(git rev-parse --short "$SHA") ($(du -sh "$DIR" | cut -f1))"
