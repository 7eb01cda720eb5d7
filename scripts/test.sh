#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest; GPU tests skip, saying so, where no GPU exists).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
