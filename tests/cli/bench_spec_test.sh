#!/usr/bin/env bash
# `peregrine bench MODEL_DIR --speculative-tokens ...` on the CPU with the embedded model: the report
# has every mode with its draft statistics, greedy outputs are identical across modes (lossless),
# `--speculative-draft-cost auto` fits a cost, sampling works, bad input fails. Usage:
# bench_spec_test.sh PEREGRINE SOURCE_DIR
set -u
bin=$1; src=$2
tiny=$src/models/peregrine-tiny
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME PYTHON_CONDITION_ON_j  (j: the JSON report; m: its modes by name)
  if python3 -c "import json,sys; j=json.load(open('$tmp/out.json')); m={x['mode']: x for x in j['modes']}; sys.exit(0 if ($2) else 1)"; then
    echo "ok   $1"
  else
    echo "FAIL $1: $2"; cat "$tmp/out.json"; fails=$((fails+1))
  fi
}
. "$(dirname "$0")/expect_error.sh"  # expect_error NAME PATTERN -- command...
printf 'The history of the English language\n\nShe walked into the room and\n' >"$tmp/prompts.txt"
common=(--prompts "$tmp/prompts.txt" --decode-tokens 12 --repeats 1 --threads 1 --device cpu)

# 1. Greedy, every kind of mode.
if "$bin" bench "$tiny" --speculative-tokens 0,1,2,adaptive "${common[@]}" --json-out "$tmp/out.json" \
     >"$tmp/table.txt" 2>"$tmp/err.txt"; then
  check "greedy: four modes in order" "[x['mode'] for x in j['modes']] == ['0', '1', '2', 'adaptive'] and m['adaptive']['k'] == 2"
  check "greedy: two prompts (blank line skipped), 12 tokens each" "j['prompts'] == 2 and all(x['generated_tokens'] == 24 for x in j['modes'])"
  check "greedy: identical outputs" "j['greedy_identical'] is True"
  check "greedy: no drafts without speculation" "m['0']['drafted'] == 0 and 'acceptance_rate' not in m['0']"
  check "greedy: drafts and acceptance" "all(m[n]['drafted'] > 0 and 0 <= m[n]['accepted'] <= m[n]['drafted'] and 0 <= m[n]['acceptance_rate'] <= 1 for n in ['1', '2', 'adaptive'])"
  check "greedy: mean k" "m['1']['mean_k'] == 1 and 1 <= m['adaptive']['mean_k'] <= 2 and 1 < m['2']['mean_k'] <= 2"
  check "greedy: accepted length = 1 + accepted per verify step" "all(abs(m[n]['mean_accepted_length'] - 1 - m[n]['accepted'] / m[n]['verify_steps']) < 1e-9 for n in ['1', '2', 'adaptive'])"
  check "greedy: speeds" "all(x['decode_tokens_per_s'] > 0 and x['ttft_ms_mean'] > 0 for x in j['modes']) and m['0']['speedup_vs_no_speculation'] == 1"
  check "greedy: adaptive vs best fixed k" "j['adaptive_vs_best_fixed']['best_fixed_k'] in (1, 2) and j['adaptive_vs_best_fixed']['target_pct'] == -5"
  check "greedy: the CPU backend's default draft cost" "j['speculative_draft_cost'] == 0.75 and m['adaptive']['draft_cost'] == 0.75 and j['fitted_draft_cost'] >= 0"
  grep -q "greedy outputs identical across modes: yes" "$tmp/table.txt" && grep -q "adaptive vs best fixed k" "$tmp/table.txt" \
    && echo "ok   greedy: table on stdout" || { echo "FAIL greedy: table"; cat "$tmp/table.txt"; fails=$((fails+1)); }
else
  echo "FAIL greedy: bench exited non-zero"; cat "$tmp/err.txt"; fails=$((fails+1))
fi

# 2. The adaptive depth with the cost fitted from the fixed k's step times.
if "$bin" bench "$tiny" --speculative-tokens 1,2,adaptive --speculative-draft-cost auto "${common[@]}" \
     --json-out "$tmp/out.json" >/dev/null 2>"$tmp/err.txt"; then
  check "auto cost: fitted and used" "j['speculative_draft_cost'] == 'auto' and m['adaptive']['draft_cost'] == j['fitted_draft_cost'] and 0 <= j['fitted_draft_cost'] <= 10"
  check "auto cost: still lossless" "j['greedy_identical'] is True"
else
  echo "FAIL auto cost: bench exited non-zero"; cat "$tmp/err.txt"; fails=$((fails+1))
fi

# 3. Sampled: seeded, no identity required (speculative sampling keeps the distribution, not the draws).
if "$bin" bench "$tiny" --speculative-tokens 0,1 --temperature 1 --seed 7 "${common[@]}" --json \
     >"$tmp/out.json" 2>"$tmp/err.txt"; then
  check "sampled: report" "j['temperature'] == 1 and j['seed'] == 7 and 'greedy_identical' not in j and m['1']['drafted'] > 0"
else
  echo "FAIL sampled: bench exited non-zero"; cat "$tmp/err.txt"; fails=$((fails+1))
fi

# 4. Bad input.
expect_error "unknown mode" "neither a draft depth" -- "$bin" bench "$tiny" --speculative-tokens 1,fast "${common[@]}"
expect_error "depth too large" "neither a draft depth" -- "$bin" bench "$tiny" --speculative-tokens 9 "${common[@]}"
expect_error "adaptive alone" "adaptive.*k >= 1" -- "$bin" bench "$tiny" --speculative-tokens 0,adaptive "${common[@]}"
expect_error "k twice" "twice" -- "$bin" bench "$tiny" --speculative-tokens 1,1 "${common[@]}"
expect_error "auto cost with one k" "two or more" -- "$bin" bench "$tiny" --speculative-tokens 1,adaptive --speculative-draft-cost auto "${common[@]}"
expect_error "bad cost" "draft-cost" -- "$bin" bench "$tiny" --speculative-tokens 1 --speculative-draft-cost fast "${common[@]}"
expect_error "no MTP layer" "MTP" -- "$bin" bench "$src/tests/golden/v2_lite_tiny" --speculative-tokens 0,1 "${common[@]}"
: >"$tmp/empty.txt"
expect_error "empty prompts file" "no prompt" -- "$bin" bench "$tiny" --speculative-tokens 1 --prompts "$tmp/empty.txt" --decode-tokens 4 --repeats 1
expect_error "synthetic takes 1..4" "1..4" -- "$bin" bench --synthetic deepseek-v3 --device cuda --speculative-tokens 0,1
[ $fails -eq 0 ] && echo "all bench speculation cases pass" || { echo "$fails case(s) failed"; exit 1; }
