#!/usr/bin/env bash
# One device call for runtime switches of the CUDA kernels, with the binaries packed on the dev machine
# (scripts/gpu_pack.sh; carry .deps/gpu-debs and .deps/prebuilt): for the default and each variant,
# the op tests of PG_ENV_TESTS under it (a switch that breaks a result is not timed further), then
# `bench_ops_cuda --gemv PG_ENV_GEMV` (the GEMV rows whose name holds it); then the variants that passed
# against the default in whole-model decode, alternating (scripts/bench_sweep.sh, PG_ENV_ROUNDS rounds
# of PG_ENV_BENCHES) while PG_ENV_TOTAL_S lasts. A table per part, the GEMV rows side by side last.
#   usage: scripts/gpu_env_sweep.sh OUT "VAR=VAL[,VAR=VAL...]" ...
#   PG_ENV_TESTS (ops_cuda_test's gtest filter, '*Linear*'), PG_ENV_GEMV (nvfp4; none: no GEMV rows),
#   PG_ENV_BENCHES ("deepseek-v3:nvfp4:4 moonlight-16b-a3b:nvfp4:0"), PG_ENV_ROUNDS (2), PG_ENV_TOTAL_S (540),
#   PG_ENV_SWEEP_MAX (the first N variants that passed go to the whole-model sweep; all unless set)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_env_sweep.sh OUT VARIANT...}
shift
[ $# -ge 1 ] || { echo "gpu_env_sweep: no variants" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
T0=$(date +%s)
left() { echo $(( ${PG_ENV_TOTAL_S:-540} - ($(date +%s) - T0) )); }
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
# The suite unpacks the .debs and the binaries, and runs nothing else.
PG_SUITE_PREBUILT=.deps/prebuilt/gpu-build.tar.xz PG_SUITE_BENCHES= PG_SUITE_CTEST_R=NoSuchTestHere \
  PG_SUITE_SKIP_MEASURES=1 PG_SUITE_SKIP_QUALITY=1 PG_SUITE_SKIP_SPEC=1 PG_SUITE_SKIP_MEMCHECK=1 \
  PG_SUITE_SKIP_PROBES=1 PG_SUITE_SKIP_OPS_BENCH=1 PG_SUITE_SKIP_ALT=1 PG_SUITE_BUDGET_S=60 \
  scripts/gpu_suite.sh "$OUT/suite" >"$OUT/suite.log" 2>&1
grep -m1 "^prebuilt" "$OUT/suite/summary.txt" 2>/dev/null
B=$(pwd)/build
export LD_LIBRARY_PATH=/tmp/pgdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
passed=()
i=0
for v in - "$@"; do
  i=$((i + 1))
  envs=()
  [ "$v" != - ] && IFS=, read -r -a envs <<<"$v"
  if [ "$v" != - ]; then
    env "${envs[@]}" timeout 180 "$B/tests/ops/ops_cuda_test" --gtest_filter="${PG_ENV_TESTS:-*Linear*}" >"$OUT/tests_$i.log" 2>&1
    rc=$?
    echo "tests under $v: rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests_$i.log" | tr '\n' ' ')"
    [ $rc -eq 0 ] || continue
    passed+=("$v")
  fi
  # PG_ENV_GEMV=none: no GEMV rows (bench_ops_cuda still measured the read ceiling first: ~70 s a variant).
  if [ "${PG_ENV_GEMV:-nvfp4}" != none ]; then
    env "${envs[@]}" timeout 120 "$B/bench/bench_ops_cuda" --gemv "${PG_ENV_GEMV:-nvfp4}" >"$OUT/gemv_$i.txt" 2>&1
    echo "gemv under $v: rc=$? ($(($(date +%s) - T0)) s)"
  fi
done
[ -n "${PG_ENV_SWEEP_MAX:-}" ] && passed=("${passed[@]:0:$PG_ENV_SWEEP_MAX}")
if [ ${#passed[@]} -gt 0 ] && [ "$(left)" -gt 90 ]; then
  PG_SWEEP_TIMEOUT=40 timeout $(( $(left) - 20 )) scripts/bench_sweep.sh "$B/peregrine" "${PG_ENV_ROUNDS:-2}" \
    "${PG_ENV_BENCHES:-deepseek-v3:nvfp4:4 moonlight-16b-a3b:nvfp4:0}" - "${passed[@]}" >"$OUT/sweep.txt" 2>&1
  echo "sweep: rc=$?"
  cat "$OUT/sweep.txt"
fi
# The GEMV rows side by side: '%ceil graph' per variant.
python3 - "$OUT" - "$@" <<'EOF'
import os, re, sys
out, variants = sys.argv[1], sys.argv[2:]
cols, rows = [], {}
for i, v in enumerate(variants, 1):
    path = os.path.join(out, f"gemv_{i}.txt")
    if not os.path.exists(path):
        continue
    cols.append(v)
    for line in open(path):
        m = re.match(r"  (.+?)\s+(nvfp4|fp8|bf16|f32)\s+\d+\s+.*?([\d.]+)%\s+([\d.]+)\s+([\d.]+)%\s*$", line)
        if m:
            rows.setdefault(m.group(1), {})[v] = f"{float(m.group(4)):7.2f} us {float(m.group(5)):5.1f}%"
print("GEMV graph replays (us, % of the read ceiling) per variant:")
print("  " + " | ".join([f"{'shape':40s}"] + [f"{c[:22]:22s}" for c in cols]))
for name, d in rows.items():
    print("  " + " | ".join([f"{name[:40]:40s}"] + [f"{d.get(c, '-'):22s}" for c in cols]))
EOF
