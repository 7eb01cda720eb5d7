#!/usr/bin/env bash
# Sets up, builds, and runs the main job: `peregrine info` and a greedy generation on the
# embedded model (or, until it exists, the tiny golden model).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=models/peregrine-tiny
[ -f "$model/config.json" ] || model=tests/golden/v3_tiny
build/peregrine info "$model"
echo "The quick brown fox" | build/peregrine tokenize "$model"
