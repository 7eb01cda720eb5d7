#!/usr/bin/env bash
# NVFP4 quality of the embedded model by rounding method, on text the calibration never saw: a
# markdown table of `peregrine quantize ... --calib C --report-text R` reports (KL to BF16, top-1,
# perplexity). Setups (calibration -> report):
#   half:   the first half of bench/quality/eval-text.md -> its second half (same document)
#   docs:   docs/decode-status.md -> bench/quality/eval-text.md (project prose, other documents)
#   prose:  docs/decode-status.md -> tests/cli/data/eval_text.txt (plain English: another domain)
# Usage: scripts/quality_gptq.sh [PEREGRINE] [MODEL]   (defaults: build/peregrine, models/peregrine-tiny)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/peregrine}
model=${2:-$root/models/peregrine-tiny}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
doc=$root/bench/quality/eval-text.md
n=$(wc -l <"$doc")
head -n $((n / 2)) "$doc" >"$tmp/first-half.md"
tail -n +$((n / 2 + 1)) "$doc" >"$tmp/second-half.md"
declare -A calib=([half]=$tmp/first-half.md [docs]=$root/docs/decode-status.md [prose]=$root/docs/decode-status.md)
declare -A report=([half]=$tmp/second-half.md [docs]=$doc [prose]=$root/tests/cli/data/eval_text.txt)
variants=("" "--mse" "--gptq" "--gptq --mse" "--exclude *self_attn*" "--exclude *self_attn* --gptq --mse")
echo "| setup | variant | KL mean | KL p99 | top-1 | ppl delta | tokens |"
echo "|---|---|---|---|---|---|---|"
for setup in half docs prose; do
  for v in "${variants[@]}"; do
    out=$tmp/q
    rm -rf "$out"
    # shellcheck disable=SC2086  # the variant's flags are words
    "$bin" quantize "$model" "$out" --format nvfp4 --calib "${calib[$setup]}" --report-text "${report[$setup]}" \
      --calib-device cpu $v >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    python3 - "$out/quality_report.json" "$setup" "${v:-round to nearest}" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
p = j["perplexity"]
print(f"| {sys.argv[2]} | `{sys.argv[3]}` | {j['kl']['mean']:.4f} | {j['kl']['p99']:.3f} | "
      f"{j['top1_agreement_pct']:.2f}% | {100 * p['delta'] / p['reference']:+.2f}% | {j['tokens_evaluated']} |")
EOF
  done
done
