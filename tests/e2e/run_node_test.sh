#!/usr/bin/env bash
# Runs one end-to-end test file with node; exit 77 (ctest: skipped) when node or the openai
# client (scripts/setup.sh installs it into .deps/npm) is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
if ! command -v node >/dev/null; then echo "skip: node is not installed"; exit 77; fi
if [ ! -d "$root/.deps/npm/node_modules/openai" ]; then echo "skip: run scripts/setup.sh (openai client)"; exit 77; fi
exec node --test-reporter=spec "$1"
