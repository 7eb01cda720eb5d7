#!/usr/bin/env bash
# `peregrine eval` on the CPU: a model against itself agrees exactly (KL 0, top-1 100 %, equal
# perplexities, no greedy divergence); the fp8 golden model against its bf16 twin does not (KL > 0);
# the W4A8 probe (--activations e4m3) moves an NVFP4 model; bad arguments exit non-zero with a message. Usage: eval_test.sh PEREGRINE SOURCE_DIR
set -u
bin=$1; src=$2
tiny=$src/models/peregrine-tiny
text=$src/tests/cli/data/eval_text.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME PYTHON_CONDITION_ON_j  (j: the JSON report)
  if python3 -c "import json,sys; j=json.load(open('$tmp/out.json')); sys.exit(0 if ($2) else 1)"; then
    echo "ok   $1"
  else
    echo "FAIL $1: $2"; cat "$tmp/out.json"; fails=$((fails+1))
  fi
}
. "$(dirname "$0")/expect_error.sh"  # expect_error NAME PATTERN -- command...

# 1. The tiny model against itself: two windows (the last one shorter), two generations.
if "$bin" eval "$tiny" --reference "$tiny" --text "$text" --context 128 --max-tokens 200 --generations 2 \
     --device cpu --json-out "$tmp/out.json" >"$tmp/table.txt" 2>"$tmp/err.txt"; then
  check "self: KL 0" "j['kl']['max'] < 1e-9 and j['kl']['mean'] < 1e-9"
  check "self: top-1 100%" "j['top1_agreement_pct'] == 100.0"
  check "self: equal perplexities" "j['perplexity']['model'] == j['perplexity']['reference'] and j['perplexity']['delta'] == 0"
  check "self: no divergence" "len(j['generation']['runs']) == 2 and all(r['first_divergence'] is None for r in j['generation']['runs'])"
  check "self: windows and tokens" "j['windows'] == 2 and j['tokens_evaluated'] > 100"
  grep -q "window 2/2 done" "$tmp/err.txt" && echo "ok   self: progress on stderr" || { echo "FAIL self: no progress"; fails=$((fails+1)); }
  grep -q "top-1 agreement" "$tmp/table.txt" && echo "ok   self: table on stdout" || { echo "FAIL self: no table"; fails=$((fails+1)); }
else
  echo "FAIL self: eval exited non-zero"; cat "$tmp/err.txt"; fails=$((fails+1))
fi

# 2. fp8 weights against the bf16 golden model (same shapes and tokenizer): the distributions differ.
# --context 512 exceeds their 256 positions and is cut to 256.
if "$bin" eval "$src/tests/golden/v3_tiny_fp8" --reference "$src/tests/golden/v3_tiny" --text "$text" \
     --context 512 --generations 1 --device cpu --json-out "$tmp/out.json" >/dev/null 2>"$tmp/err.txt"; then
  check "fp8 vs bf16: KL > 0" "j['kl']['mean'] > 0 and j['kl']['max'] >= j['kl']['p99'] >= j['kl']['median'] >= 0"
  check "fp8 vs bf16: context cut to 256" "j['context'] == 256"
  check "fp8 vs bf16: perplexities" "j['perplexity']['model'] > 1 and j['perplexity']['reference'] > 1"
else
  echo "FAIL fp8 vs bf16: eval exited non-zero"; cat "$tmp/err.txt"; fails=$((fails+1))
fi

# 3. The W4A8 probe (--activations e4m3, CPU only): the tiny model quantized to NVFP4 with its
# projections' inputs rounded to e4m3 moves away from f32 inputs, and the report says so; a model
# without NVFP4 weights is unchanged by it (against itself: KL 0).
small=(--text "$text" --context 128 --max-tokens 200 --generations 0 --device cpu)
if "$bin" quantize "$tiny" "$tmp/q" --format nvfp4 >/dev/null 2>"$tmp/err.txt" &&
   "$bin" eval "$tmp/q" --reference "$tiny" "${small[@]}" --json-out "$tmp/f32.json" >/dev/null 2>>"$tmp/err.txt" &&
   "$bin" eval "$tmp/q" --reference "$tiny" "${small[@]}" --activations e4m3 --json-out "$tmp/out.json" \
     >"$tmp/table.txt" 2>>"$tmp/err.txt"; then
  check "e4m3: named in the report" "j['activations'] == 'e4m3' and json.load(open('$tmp/f32.json'))['activations'] == 'f32'"
  check "e4m3: the KL moves" "j['kl']['mean'] > 0 and j['kl']['mean'] != json.load(open('$tmp/f32.json'))['kl']['mean']"
  grep -q "^activations *e4m3" "$tmp/table.txt" && echo "ok   e4m3: in the table" || { echo "FAIL e4m3: not in the table"; fails=$((fails+1)); }
else
  echo "FAIL e4m3: quantize or eval exited non-zero"; cat "$tmp/err.txt"; fails=$((fails+1))
fi
if "$bin" eval "$tiny" --reference "$tiny" "${small[@]}" --activations e4m3 --json-out "$tmp/out.json" >/dev/null 2>"$tmp/err.txt"; then
  check "e4m3 without NVFP4 weights: KL 0" "j['kl']['max'] < 1e-9"
else
  echo "FAIL e4m3 without NVFP4 weights: eval exited non-zero"; cat "$tmp/err.txt"; fails=$((fails+1))
fi

# 4. Bad arguments.
: >"$tmp/empty.txt"
printf '\xff\xfe bad' >"$tmp/bad_utf8.txt"
expect_error "missing model dir" "does not exist|not found|Directory" -- "$bin" eval "$tmp/nope" --reference "$tiny" --text "$text"
expect_error "missing reference" "reference" -- "$bin" eval "$tiny" --text "$text"
expect_error "missing reference dir" "does not exist|not found|Directory" -- "$bin" eval "$tiny" --reference "$tmp/nope" --text "$text"
expect_error "unreadable text" "text|no such|not found|open" -- "$bin" eval "$tiny" --reference "$tiny" --text "$tmp/nope.txt"
expect_error "empty text" "empty" -- "$bin" eval "$tiny" --reference "$tiny" --text "$tmp/empty.txt"
expect_error "invalid UTF-8 text" "UTF-8|utf" -- "$bin" eval "$tiny" --reference "$tiny" --text "$tmp/bad_utf8.txt"
expect_error "vocabulary mismatch" "vocabulary" -- "$bin" eval "$tiny" --reference "$src/tests/golden/v3_tiny" --text "$text"
expect_error "context too small" "context" -- "$bin" eval "$tiny" --reference "$tiny" --text "$text" --context 1
expect_error "e4m3 activations off the CPU" "CPU only" -- "$bin" eval "$tiny" --reference "$tiny" --text "$text" --activations e4m3 --device cuda
expect_error "unknown activations" "activations" -- "$bin" eval "$tiny" --reference "$tiny" --text "$text" --activations fp4
[ $fails -eq 0 ] && echo "all eval cases pass" || { echo "$fails case(s) failed"; exit 1; }
