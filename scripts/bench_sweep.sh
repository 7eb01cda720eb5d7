#!/usr/bin/env bash
# Decode at batch 1 of synthetic models under several environment settings, alternating within one
# device call (the H200s vary 2-3% between calls, not within one): for an A/B of a runtime knob.
#   usage: scripts/bench_sweep.sh PEREGRINE ROUNDS "NAME:DTYPE:LAYERS ..." VARIANT...
# A VARIANT is "-" (no setting) or "VAR=VAL[,VAR=VAL...]", where "bin=PATH" runs that peregrine
# instead (an A/B of two builds: gpu_suite.sh's section 5a). Prints per bench and variant the tok/s of
# each round, their mean and the change against the first variant. Extra bench flags: PG_SWEEP_ARGS;
# seconds a run may take: PG_SWEEP_TIMEOUT (60). PG_SWEEP_METRIC=verifyK (K = 1..4): the verify step's
# time in ms at K drafted tokens (`--speculative-tokens K`; lower is better) instead of decode tok/s;
# PG_SWEEP_METRIC=draftK: the draft step's ms at K.
set -uo pipefail
BIN=${1:?usage: scripts/bench_sweep.sh PEREGRINE ROUNDS BENCHES VARIANT...}
ROUNDS=${2:?rounds}
BENCHES=${3:?benches}
shift 3
[ $# -ge 1 ] || { echo "bench_sweep: no variants" >&2; exit 2; }
for b in $BENCHES; do
  IFS=: read -r name dtype layers <<<"$b"
  args=(bench --synthetic "$name" --dtype "$dtype" --batches 1 --long-prefill 0 ${PG_SWEEP_ARGS:-})
  metric=${PG_SWEEP_METRIC:-decode}
  pattern='s/^decode b=1 *\([0-9.]*\) tok\/s.*/\1/p' fmt=%.1f label=
  if [[ $metric =~ ^verify([1-4])$ ]]; then
    args+=(--speculative-tokens "${BASH_REMATCH[1]}")
    pattern="s/^spec k=${BASH_REMATCH[1]} *verify *\\([0-9.]*\\) ms.*/\\1/p" fmt=%.3f label=" $metric(ms)"
  elif [[ $metric =~ ^draft([1-4])$ ]]; then
    args+=(--speculative-tokens "${BASH_REMATCH[1]}")
    pattern="s/^spec k=${BASH_REMATCH[1]} .*; draft *\\([0-9.]*\\) ms.*/\\1/p" fmt=%.3f label=" $metric(ms)"
  elif [ "$metric" != decode ]; then
    echo "bench_sweep: PG_SWEEP_METRIC='$metric': decode, verify1..verify4 or draft1..draft4" >&2; exit 2
  fi
  [ "${layers:-0}" != 0 ] && args+=(--layers "$layers")
  declare -A got=()
  for _r in $(seq "$ROUNDS"); do
    for v in "$@"; do
      envs=() bin=$BIN
      if [ "$v" != - ]; then
        IFS=, read -r -a items <<<"$v"
        for e in "${items[@]}"; do
          if [ "${e%%=*}" = bin ]; then bin=${e#bin=}; else envs+=("$e"); fi
        done
      fi
      t=$(env "${envs[@]}" timeout "${PG_SWEEP_TIMEOUT:-60}" "$bin" "${args[@]}" 2>/dev/null |
        sed -n "$pattern" | head -1)
      got[$v]="${got[$v]:-} ${t:-?}"
    done
  done
  base=""
  for v in "$@"; do
    mean=$(echo "${got[$v]}" | awk -v f="$fmt" '{s=0;c=0; for(i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) {s+=$i;c++}; if (c) printf f, s/c}')
    [ -z "$base" ] && base=$mean
    d=$(awk -v a="$mean" -v b="$base" 'BEGIN{if (a != "" && b > 0) printf "%+.1f%%", 100*(a/b-1)}')
    # Decode lines keep their five leading fields (knockout_table.sh reads the variant as the fifth).
    printf 'sweep %s %s L%s%s %-60s %s | mean %s %s\n' "$name" "$dtype" "${layers:-0}" "${label:-}" "$v" "${got[$v]}" "${mean:-?}" "$d"
  done
  unset got
done
