#!/usr/bin/env bash
# What each op of a decode step costs inside the CUDA graph (PDL overlap, launch and drain included):
# scripts/bench_sweep.sh over PEREGRINE_KNOCKOUT settings (model/cuda/cuda_runner.cpp: the named ops'
# kernels run empty; the output is garbage, the timing is not), then per model and op the µs per step
# the op costs, 1e6 / tok/s (as run) - 1e6 / tok/s (without it). On the device, after a build:
#   usage: scripts/knockout_table.sh PEREGRINE ROUNDS "NAME:DTYPE:LAYERS ..." [OP ...]
# OPs: mark() names or parts of them, or k:KERNEL (kernels by name, e.g. k:moe_gate_up), "/" joining
# several into one setting (default: every op of a layer, the MoE's two kernels, the tail (final norm
# + lm_head), and the two halves: everything but the weight streams, and the weight streams alone).
# Extra bench flags: PG_SWEEP_ARGS (as bench_sweep.sh).
set -uo pipefail
BIN=${1:?usage: scripts/knockout_table.sh PEREGRINE ROUNDS BENCHES [OP ...]}
ROUNDS=${2:?rounds}
BENCHES=${3:?benches}
shift 3
OPS=("$@")
[ ${#OPS[@]} -gt 0 ] || OPS=(input_norm q_kv_a q_a_norm/q_b_proj mla_prep mla_attention w_uv o_proj post_norm router
  moe_experts/dense_mlp k:moe_gate_up k:moe_down tail input_norm/q_a_norm/mla_prep/mla_attention/w_uv/post_norm/router/rope_cos_sin
  q_kv_a/q_b_proj/o_proj/moe_experts/dense_mlp/tail)
variants=(-)
for op in "${OPS[@]}"; do variants+=("PEREGRINE_KNOCKOUT=$op"); done
"$(dirname "$0")/bench_sweep.sh" "$BIN" "$ROUNDS" "$BENCHES" "${variants[@]}" | tee /dev/stderr |
  awk '/^sweep /{
    key = $2 " " $3 " " $4; v = $5; sub(/^PEREGRINE_KNOCKOUT=/, "", v)
    mean = ""; for (i = 1; i <= NF; i++) if ($i == "mean") mean = $(i + 1)
    if (v == "-") { base[key] = mean; print ""; printf "%s: %s tok/s, %.0f us a step\n", key, mean, 1e6 / mean; next }
    if (mean + 0 > 0 && base[key] + 0 > 0)
      printf "  %-58s %8.1f tok/s  %7.0f us a step (%5.1f%%)\n", v, mean, 1e6 / base[key] - 1e6 / mean, 100 * (1 - base[key] / mean)
    else printf "  %-58s failed\n", v
  }'
