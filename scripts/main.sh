#!/usr/bin/env bash
# Sets up, builds, and runs the main job: the embedded model (models/peregrine-tiny) answers a
# chat prompt on the CPU, streaming its text; then `peregrine serve` is how to run it as a server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/peregrine info models/peregrine-tiny
echo
build/peregrine generate --chat -p "${1:-What does the ls command do?}" --max-tokens 96 --speculative-tokens 2
echo
echo "Serve it with the OpenAI API:  build/peregrine serve --port 8000"
