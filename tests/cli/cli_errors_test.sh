#!/usr/bin/env bash
# Each case runs `peregrine` on a bad input and checks: exit code != 0, no crash (no signal),
# and a message on stderr naming the problem. Usage: cli_errors_test.sh PEREGRINE SOURCE_DIR
set -u
bin=$1; src=$2
golden=$src/tests/golden/v3_tiny
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
. "$(dirname "$0")/expect_error.sh"  # expect_error NAME PATTERN -- command...

expect_error "missing model dir" "does not exist|not found|Directory" -- "$bin" generate "$tmp/nope" -p hi
mkdir "$tmp/llama"; cp "$golden"/* "$tmp/llama/"
sed -i 's/"deepseek_v3"/"llama"/' "$tmp/llama/config.json"
expect_error "unsupported model_type" "llama.*deepseek_v3|deepseek_v3.*llama" -- "$bin" generate "$tmp/llama" -p hi
expect_error "info: unsupported model_type" "llama" -- "$bin" info "$tmp/llama"
mkdir "$tmp/trunc"; cp "$golden"/* "$tmp/trunc/"
truncate -s 100000 "$tmp/trunc/model.safetensors"
expect_error "truncated safetensors" "model.safetensors" -- "$bin" generate "$tmp/trunc" -p hi
mkdir "$tmp/noweights"; cp "$golden"/config.json "$golden"/tokenizer*.json "$tmp/noweights/"
expect_error "no weights" "safetensors" -- "$bin" generate "$tmp/noweights" -p hi
long=$(python3 -c "print(' '.join(['word%d' % i for i in range(400)]))")
expect_error "prompt longer than the context" "context" -- "$bin" generate "$golden" -p "$long"
expect_error "negative temperature" "temperature" -- "$bin" generate "$golden" -p hi --temperature -1
expect_error "top_p out of range" "top_p" -- "$bin" generate "$golden" -p hi --top-p 1.5
expect_error "bad token id to decode" "vocab|range" -- bash -c "echo 999999 | '$bin' tokenize '$golden' --decode"
[ $fails -eq 0 ] && echo "all CLI error cases pass" || { echo "$fails case(s) failed"; exit 1; }
