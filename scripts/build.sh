#!/usr/bin/env bash
# Configures and builds Peregrine into build/ (Release-with-debug-info, all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja "$@" >/dev/null
cmake --build build -j "$(nproc)"
