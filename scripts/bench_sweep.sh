#!/usr/bin/env bash
# Decode at batch 1 of synthetic models under several environment settings, alternating within one
# device call (the H200s vary 2-3% between calls, not within one): for an A/B of a runtime knob.
#   usage: scripts/bench_sweep.sh PEREGRINE ROUNDS "NAME:DTYPE:LAYERS ..." VARIANT...
# A VARIANT is "-" (no setting) or "VAR=VAL[,VAR=VAL...]", where "bin=PATH" runs that peregrine
# instead (an A/B of two builds: gpu_suite.sh's section 5a). Prints per bench and variant the tok/s of
# each round, their mean and the change against the first variant. Extra bench flags: PG_SWEEP_ARGS;
# seconds a run may take: PG_SWEEP_TIMEOUT (60). PG_SWEEP_METRIC=verifyK (K = 1..4): the verify step's
# time in ms at K drafted tokens (`--speculative-tokens K`; lower is better) instead of decode tok/s;
# PG_SWEEP_METRIC=draftK: the draft step's ms at K; several, space-separated ("verify1 verify3 decode"),
# are read from the same runs.
set -uo pipefail
BIN=${1:?usage: scripts/bench_sweep.sh PEREGRINE ROUNDS BENCHES VARIANT...}
ROUNDS=${2:?rounds}
BENCHES=${3:?benches}
shift 3
[ $# -ge 1 ] || { echo "bench_sweep: no variants" >&2; exit 2; }
# Several metrics at once: PG_SWEEP_METRIC="verify1 verify3" reads each from the same runs (the bench
# times each k of its --speculative-tokens list, here the Ks asked for).
read -r -a metrics <<<"${PG_SWEEP_METRIC:-decode}"
ks=()
for metric in "${metrics[@]}"; do
  if [[ $metric =~ ^(verify|draft)([1-4])$ ]]; then
    [[ " ${ks[*]} " == *" ${BASH_REMATCH[2]} "* ]] || ks+=("${BASH_REMATCH[2]}")
  elif [ "$metric" != decode ]; then
    echo "bench_sweep: PG_SWEEP_METRIC='$metric': decode, verify1..verify4 or draft1..draft4" >&2; exit 2
  fi
done
# The sed expression that reads one metric's value from a run's output, its printf format and label.
metric_pattern() {
  case "$1" in
    decode) echo 's/^decode b=1 *\([0-9.]*\) tok\/s.*/\1/p' ;;
    verify*) echo "s/^spec k=${1#verify} *verify *\\([0-9.]*\\) ms.*/\\1/p" ;;
    draft*) echo "s/^spec k=${1#draft} .*; draft *\\([0-9.]*\\) ms.*/\\1/p" ;;
  esac
}
for b in $BENCHES; do
  IFS=: read -r name dtype layers <<<"$b"
  args=(bench --synthetic "$name" --dtype "$dtype" --batches 1 --long-prefill 0 ${PG_SWEEP_ARGS:-})
  [ ${#ks[@]} -gt 0 ] && args+=(--speculative-tokens "$(printf '%s\n' "${ks[@]}" | sort -n | paste -sd,)")
  [ "${layers:-0}" != 0 ] && args+=(--layers "$layers")
  declare -A got=() told=()
  for _r in $(seq "$ROUNDS"); do
    for v in "$@"; do
      envs=() bin=$BIN
      if [ "$v" != - ]; then
        IFS=, read -r -a items <<<"$v"
        for e in "${items[@]}"; do
          if [ "${e%%=*}" = bin ]; then bin=${e#bin=}; else envs+=("$e"); fi
        done
      fi
      err=$(mktemp)
      run_out=$(env "${envs[@]}" timeout "${PG_SWEEP_TIMEOUT:-60}" "$bin" "${args[@]}" 2>"$err")
      rc=$?
      for metric in "${metrics[@]}"; do
        t=$(sed -n "$(metric_pattern "$metric")" <<<"$run_out" | head -1)
        got[$metric/$v]="${got[$metric/$v]:-} ${t:-?}"
        # A run that gave no figure says why once (its exit status, its stderr's last line).
        [ -z "$t" ] && [ -z "${told[$v]:-}" ] &&
          told[$v]=1 && echo "bench_sweep: $name $dtype L${layers:-0} $v: no $metric figure (rc=$rc): $(tail -n 1 "$err")" >&2
      done
      rm -f "$err"
    done
  done
  for metric in "${metrics[@]}"; do
    fmt=%.1f label=
    [ "$metric" != decode ] && fmt=%.3f label=" $metric(ms)"
    base=""
    for v in "$@"; do
      mean=$(echo "${got[$metric/$v]}" | awk -v f="$fmt" '{s=0;c=0; for(i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) {s+=$i;c++}; if (c) printf f, s/c}')
      [ -z "$base" ] && base=$mean
      d=$(awk -v a="$mean" -v b="$base" 'BEGIN{if (a != "" && b > 0) printf "%+.1f%%", 100*(a/b-1)}')
      # Decode lines keep their five leading fields (knockout_table.sh reads the variant as the fifth).
      printf 'sweep %s %s L%s%s %-60s %s | mean %s %s\n' "$name" "$dtype" "${layers:-0}" "${label:-}" "$v" "${got[$metric/$v]}" "${mean:-?}" "$d"
    done
  done
  unset got told
done
