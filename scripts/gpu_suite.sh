#!/usr/bin/env bash
# The one script the H200 runs (device README: one call): unpacks the Debian dev packages that
# scripts/fetch_gpu_debs.sh fetched into .deps/gpu-debs (the GPU machine is Ubuntu 24.04 without
# them), configures and builds Peregrine with CUDA on all cores, runs the GPU tests (ctest -L gpu:
# op parity, the CUDA golden tests, the GPU sampler), `peregrine bench --synthetic` on the standard
# models (PG_SUITE_BENCHES, "name:dtype:layers ..."), compute-sanitizer memcheck over the golden
# CUDA tests, then bench_ops_cuda if time is left; logs go to OUT_DIR, a summary table comes last.
#   usage: scripts/gpu_suite.sh OUT_DIR
# Every phase is capped so the whole run fits PG_SUITE_BUDGET_S (default 540 s, from the start).
# Iteration runs: PG_SUITE_CTEST_R (ctest -R regex), PG_SUITE_SKIP_MEMCHECK=1, PG_SUITE_SKIP_OPS_BENCH=1,
# PG_SUITE_SKIP_MEASURES=1 (no rerun of the measuring tests), PG_SUITE_SKIP_PROBES=1 (no bench_ops_cuda
# --probes), PG_SUITE_OPS_BENCH_ARGS (more bench_ops_cuda flags, e.g. --no-ring), PG_SUITE_SKIP_ALT=1 (no
# goldens on the non-default paths), PG_SUITE_SKIP_QUALITY=1 (no NVFP4 quality report of the embedded model),
# PG_SUITE_CTEST_TIMEOUT (s per test, 300), PG_SUITE_SKIP_SPEC=1 (no speculation bench of the embedded model),
# PG_SUITE_MEMCHECK_OPS (a gtest filter of ops_cuda_test to run under memcheck too), PG_SUITE_AB_BASE (a
# baseline tree, or several file baselines, to A/B against, section 5a), PG_SUITE_NCU (decode-graph kernel
# durations under ncu, section 5d; PG_SUITE_NCU_METRICS: more metrics),
# PG_SUITE_PREBUILT (an archive of scripts/gpu_pack.sh: its binaries instead of a build here; carry
# .deps/prebuilt), PG_SUITE_TARGETS (the targets to build), PG_SUITE_GATED ("VAR=VAL ..." gated paths to test, section 4c;
# PG_SUITE_GATED_OPS_TIMEOUT: seconds for each one's op tests, 60).
# If the whole tree does not configure there (e.g. work in progress elsewhere, or Boost missing for
# server/), it retries with a stand-in Boost config, then falls back to a minimal project of the
# folders the GPU run needs (core, ops, ops/cuda, tests/ops, bench_ops_cuda); the summary says so.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_suite.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
T0=$(date +%s)
NPROC=$(nproc)
DEPS=${PG_GPU_DEPS:-/tmp/pgdeps}
BUILD=${PG_GPU_BUILD:-$ROOT/build-gpu}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
log() { echo "[gpu_suite +$(($(date +%s) - T0))s] $*"; }
note() { echo "$*" | tee -a "$SUMMARY"; }

# ---- 1. the machine ------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: ${PG_COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,power.limit --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  cmake --version | head -1
  g++ --version | head -1
  echo "cores: $NPROC"
  grep PRETTY_NAME /etc/os-release
} >"$OUT/env.txt" 2>&1
log "machine: $(sed -n 4p "$OUT/env.txt")"

# ---- 2. dependencies: the Debian 12 dev packages, unpacked into a prefix ---------------------
# .deps/gpu-debs-build (Boost's headers), where carried: only a build here needs it.
if ls .deps/gpu-debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$DEPS"
  for f in .deps/gpu-debs/*.deb .deps/gpu-debs-build/*.deb; do [ -f "$f" ] && dpkg -x "$f" "$DEPS"; done
  # .pc files say prefix=/usr: point them at the prefix.
  sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=$DEPS/usr#" "$DEPS"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  if ! command -v pkg-config >/dev/null 2>&1 || [ -n "${PG_SUITE_ISOLATE:-}" ]; then
    mkdir -p "$DEPS/bin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$DEPS/usr/lib/x86_64-linux-gnu" "$DEPS/usr/bin/pkgconf" >"$DEPS/bin/pkg-config"
    chmod +x "$DEPS/bin/pkg-config"
    export PATH="$DEPS/bin:$PATH"
  fi
  log "unpacked $(ls .deps/gpu-debs/*.deb | wc -l) .deb files into $DEPS"
else
  # A fresh checkout has none (git-ignored): without fmt, spdlog and the rest the whole tree does not
  # configure, and the minimal fallback below builds the op tests only.
  note "no .deps/gpu-debs: using the system's packages (run scripts/fetch_gpu_debs.sh on the dev machine and carry .deps/gpu-debs)"
fi
# Runtime libraries of those packages (fmt, spdlog, pcre2) for the binaries we run.
RUN_LD="$DEPS/usr/lib/x86_64-linux-gnu"
CMAKE_ARGS=(-G Ninja -DPEREGRINE_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DCMAKE_PREFIX_PATH="$DEPS/usr;$DEPS/fakeboost" -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
# PG_SUITE_ISOLATE=1 (a dry run on a machine that has the packages): ignore the system's copies.
[ -n "${PG_SUITE_ISOLATE:-}" ] && CMAKE_ARGS+=(-DCMAKE_IGNORE_PREFIX_PATH=/usr -DPKG_CONFIG_EXECUTABLE="$DEPS/bin/pkg-config") \
  && export PKG_CONFIG_LIBDIR="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig"

# ---- 2b. PG_SUITE_PREBUILT=ARCHIVE: the binaries built on the dev machine (scripts/gpu_pack.sh) -------
# Unpacked at the build path they were made in (ctest's files name it), which must be this tree's
# build/ folder, instead of sections 3 and 4's configure and build. Refused (and built here as usual)
# when PG_COMMIT names another commit than the archive's, or the archive was made from a tree with changes.
MODE=full
: >"$OUT/configure.log"
if [ -n "${PG_SUITE_PREBUILT:-}" ]; then
  PB_TMP=$(mktemp -d "$ROOT/.prebuilt-XXXXXX")
  if command -v xz >/dev/null 2>&1; then tar -xJf "$PG_SUITE_PREBUILT" -C "$PB_TMP"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$PG_SUITE_PREBUILT" "$PB_TMP"
  fi >>"$OUT/configure.log" 2>&1
  PB_INFO=$(cat "$PB_TMP"/*/PREBUILT 2>/dev/null)
  pb() { awk -v k="$1" '$1 == k { print $2 }' <<<"$PB_INFO"; }
  PB_BUILD=$(pb build)
  if [ -z "$PB_INFO" ]; then
    note "prebuilt $PG_SUITE_PREBUILT: unreadable (no PREBUILT inside): building here"
  elif [ -n "${PG_COMMIT:-}" ] && [[ "$(pb commit)" != "$PG_COMMIT"* ]]; then  # PG_COMMIT may be abbreviated
    note "prebuilt: made at $(pb commit), PG_COMMIT is $PG_COMMIT: building here"
  elif [ "$(pb dirty)" != no ]; then
    note "prebuilt: made from a tree with uncommitted changes ($(pb commit)): building here"
  elif [ "$(dirname "$PB_BUILD")" != "$ROOT" ]; then
    note "prebuilt: made in $PB_BUILD, not under this tree ($ROOT): building here"
  else
    rm -rf "$PB_BUILD"
    mv "$PB_TMP/$(basename "$PB_BUILD")" "$PB_BUILD"
    BUILD=$PB_BUILD MODE=prebuilt
    note "prebuilt: $(tr '\n' ' ' <<<"$PB_INFO")"
  fi
  rm -rf "$PB_TMP"
fi

# ---- 3. configure: the whole tree; else with a stand-in Boost; else the minimal project -----
configure() { rm -rf "$BUILD"; cmake -S "$1" -B "$BUILD" "${CMAKE_ARGS[@]}" >>"$OUT/configure.log" 2>&1; }
# PG_SUITE_MINIMAL=1 goes straight to the minimal project (a dry run, or an escape hatch).
if [ "$MODE" = prebuilt ]; then
  :
elif [ -n "${PG_SUITE_MINIMAL:-}" ] || ! configure "$ROOT"; then
  [ -n "${PG_SUITE_MINIMAL:-}" ] && echo "PG_SUITE_MINIMAL set" >>"$OUT/configure.log"
  if [ -z "${PG_SUITE_MINIMAL:-}" ] && grep -q "Boost" "$OUT/configure.log"; then
    # No Boost on this machine (.deps/gpu-debs-build, where fetch_gpu_debs.sh puts it, not carried). A config that defines an
    # empty Boost::headers lets everything else configure; server/ targets then fail to compile.
    log "configure failed on Boost: retrying with a stand-in Boost config (server/ will not build)"
    mkdir -p "$DEPS/fakeboost/lib/cmake/Boost-1.81.0"
    cat >"$DEPS/fakeboost/lib/cmake/Boost-1.81.0/BoostConfig.cmake" <<'EOB'
# Stand-in written by scripts/gpu_suite.sh: no Boost headers on this machine.
if(NOT TARGET Boost::headers)
  add_library(Boost::headers INTERFACE IMPORTED)
endif()
set(Boost_FOUND TRUE)
set(Boost_headers_FOUND TRUE)
EOB
    printf 'set(PACKAGE_VERSION 1.81.0)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' \
      >"$DEPS/fakeboost/lib/cmake/Boost-1.81.0/BoostConfigVersion.cmake"
    MODE=full-without-boost
    echo "---- retry with stand-in Boost ----" >>"$OUT/configure.log"
    configure "$ROOT" || MODE=failed
  else
    MODE=failed
  fi
  if [ "$MODE" = failed ]; then
    log "the whole tree does not configure: falling back to the minimal GPU project"
    MIN=/tmp/pg-gpu-min
    mkdir -p "$MIN"
    cat >"$MIN/CMakeLists.txt" <<EOM
# Written by scripts/gpu_suite.sh: the folders the GPU run needs, with the root's settings.
cmake_minimum_required(VERSION 3.25)
project(peregrine_gpu_min LANGUAGES C CXX)
set(PG_ROOT "$ROOT")
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(PEREGRINE_CUDA ON)
set(CMAKE_CUDA_ARCHITECTURES 90a)
set(CMAKE_CUDA_STANDARD 20)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
set(PG_WARNINGS -Wall -Wextra -Wno-unused-parameter)
function(pg_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" \${ARGN})
  add_library(\${name} STATIC \${A_SOURCES})
  target_include_directories(\${name} PUBLIC \${PG_ROOT})
  target_compile_options(\${name} PRIVATE \$<\$<COMPILE_LANGUAGE:CXX>:\${PG_WARNINGS}>)
  target_link_libraries(\${name} PUBLIC \${A_DEPS})
endfunction()
enable_testing()
find_package(GTest REQUIRED)
include(GoogleTest)
function(pg_test name)
  cmake_parse_arguments(A "" "" "LABELS;SOURCES;DEPS" \${ARGN})
  add_executable(\${name} \${A_SOURCES})
  target_link_libraries(\${name} PRIVATE \${A_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(\${name} PRIVATE \${PG_WARNINGS})
  target_compile_definitions(\${name} PRIVATE PG_SOURCE_DIR="\${PG_ROOT}")
  gtest_discover_tests(\${name} PROPERTIES LABELS "\${A_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
add_subdirectory(\${PG_ROOT}/core core)
add_subdirectory(\${PG_ROOT}/ops ops)
add_subdirectory(\${PG_ROOT}/tests/unit/core tests/unit/core)
add_subdirectory(\${PG_ROOT}/tests/unit/ops tests/unit/ops)
add_subdirectory(\${PG_ROOT}/tests/ops tests/ops)
include(\${PG_ROOT}/bench/ops_cuda.cmake)
EOM
    MODE=minimal
    echo "---- fallback: minimal GPU project $MIN ----" >>"$OUT/configure.log"
    configure "$MIN" || MODE=failed
  fi
fi
note "configure: $MODE"
if [ "$MODE" = failed ]; then
  note "nothing built: see configure.log"
  tail -30 "$OUT/configure.log"
  exit 1
fi

# ---- 4. GPU targets first (the figures this run exists for), then tests and benchmarks --------
BUDGET=${PG_SUITE_BUDGET_S:-540}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
log "building the GPU targets with $NPROC cores"
tb=$(date +%s)
# PG_SUITE_TARGETS="a b": build only these (a quick check of a few tests; ctest runs what was built).
read -r -a WANTED <<<"${PG_SUITE_TARGETS:-ops_cuda_test ops_fused_cpu_test cuda_golden_test sampling_cuda_test peregrine bench_ops_cuda}"
if [ "$MODE" = prebuilt ]; then
  gpu_build_rc=0
  : >"$OUT/build.log"
  note "build (GPU targets): prebuilt, $(($(date +%s) - tb)) s"
else
  # Only the targets this build has (the minimal project has no goldens, server or CLI): ninja stops at
  # the first unknown one before building anything.
  KNOWN=$(ninja -C "$BUILD" -t targets all 2>/dev/null | sed -n 's/^\([^:]*\): .*/\1/p')
  GPU_TARGETS=()
  for t in "${WANTED[@]}"; do
    if grep -qx -- "$t" <<<"$KNOWN"; then GPU_TARGETS+=("$t"); else note "target $t: not in this build, skipped"; fi
  done
  ninja -C "$BUILD" -k 0 -j "$NPROC" "${GPU_TARGETS[@]}" >"$OUT/build.log" 2>&1
  gpu_build_rc=$?
  note "build (GPU targets): rc=$gpu_build_rc, $(($(date +%s) - tb)) s"
fi
[ "$gpu_build_rc" -ne 0 ] && grep -A12 -m5 'error' "$OUT/build.log" | tail -60

# The A/B baseline (section 5a) builds in the background from here, at low priority, while the GPU
# tests run (they leave most cores idle): in session 18 a baseline built after them ran out of budget.
AB_PID=""
# A baseline of files only (scripts/ab_base.sh --files: ab-files.txt) is built in section 5a instead.
if [ -n "${PG_SUITE_AB_BASE:-}" ] && [ ! -f "${PG_SUITE_AB_BASE%% *}/ab-files.txt" ]; then
  AB_BUILD="$(cd "$PG_SUITE_AB_BASE" && pwd)/build-ab"
  rm -rf "$AB_BUILD"
  ( cmake -S "$PG_SUITE_AB_BASE" -B "$AB_BUILD" "${CMAKE_ARGS[@]}" >"$OUT/ab_configure.log" 2>&1 &&
    nice -n 19 ninja -C "$AB_BUILD" -j "$NPROC" peregrine >"$OUT/ab_build.log" 2>&1 ) &
  AB_PID=$!
  log "building the A/B baseline $PG_SUITE_AB_BASE in the background"
fi

# Prebuilt binaries carry the dev machine's CUDA runpath (/usr/local/cuda/lib): add this machine's
# cuBLASLt folder in case its toolkit keeps it elsewhere (lib64, targets/.../lib).
if [ "$MODE" = prebuilt ]; then
  CUBLAS_SO=$(ls /usr/local/cuda/lib64/libcublasLt.so.* /usr/local/cuda/targets/*/lib/libcublasLt.so.* 2>/dev/null | head -1)
  [ -n "$CUBLAS_SO" ] && RUN_LD="$RUN_LD:$(dirname "$CUBLAS_SO")"
fi
export LD_LIBRARY_PATH="$RUN_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
count() { grep -E "tests passed|No tests were found" "$1" | tail -1; }
log "ctest -L gpu"
# PG_SUITE_CTEST_R=REGEX: only the GPU tests matching it (an iteration run; the full suite otherwise).
ctest --test-dir "$BUILD" -L gpu ${PG_SUITE_CTEST_R:+-R "$PG_SUITE_CTEST_R"} --output-on-failure -j 4 --timeout "${PG_SUITE_CTEST_TIMEOUT:-300}" \
  >"$OUT/ctest_gpu.log" 2>&1
gpu_rc=$?
note "ctest -L gpu : rc=$gpu_rc  $(count "$OUT/ctest_gpu.log")  (skipped: $(grep -c '(Skipped)' "$OUT/ctest_gpu.log"))"
# The figures passing tests print (ctest shows output only on failure): rerun the measuring ones.
: >"$OUT/measures.log"
[ -n "${PG_SUITE_SKIP_MEASURES:-}" ] || for t in "cuda_golden_test:CudaGoldenGreedy.*:CudaGoldenDefault.*:All/CudaGolden.TeacherForced/*" \
         "cuda_golden_test:CudaSpecGraphs.*:CudaEngine.Speculative*" \
         "ops_cuda_test:*Timing*:*Bandwidth*:*timing*" "sampling_cuda_test:*Timing*"; do
  bin=$(find "$BUILD" -name "${t%%:*}" -type f -perm -u+x | head -1)
  [ -n "$bin" ] && (cd "$ROOT" && timeout 120 "$bin" --gtest_filter="${t#*:}" >>"$OUT/measures.log" 2>&1)
done
grep -hE "\[ measure  \]" "$OUT/measures.log" "$OUT/ctest_gpu.log" | sort -u | head -40 >"$OUT/measures.txt"

# ---- 4b. the non-default paths (CudaRunnerOptions): the CUDA-core prefill attention ------------
GOLDBIN=$(find "$BUILD" -name cuda_golden_test -type f -perm -u+x | head -1)
if [ -n "$GOLDBIN" ] && [ -z "${PG_SUITE_SKIP_ALT:-}" ]; then
  (cd "$ROOT" && PEREGRINE_PREFILL_ATTENTION=0 timeout 120 "$GOLDBIN" --gtest_filter='CudaGoldenDefault.*:CudaGoldenGreedy.*' \
     >"$OUT/cuda_core_attention.log" 2>&1)
  note "goldens with PEREGRINE_PREFILL_ATTENTION=0: rc=$?  $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/cuda_core_attention.log" | head -2 | tr '\n' ' ')"
  grep -h "\[ measure  \]" "$OUT/cuda_core_attention.log" | sed 's/^/(CUDA-core attention) /' >>"$OUT/measures.txt"
fi

# ---- 4c. the gated paths (off by default, or a default turned off): op tests and goldens with each --
# PG_SUITE_GATED="VAR=VAL ..." ("" = none). Each flag gets the op tests of its path and the goldens.
GATED=${PG_SUITE_GATED-"PEREGRINE_FUSED_NORMS=1 PEREGRINE_DECODE_ATTENTION=tensor PEREGRINE_DECODE_ATTENTION=cuda PEREGRINE_DECODE_ATTENTION=twopass PEREGRINE_COMPACT_HEADS=0 PEREGRINE_ATTENTION_VEC=0 PEREGRINE_ATTENTION_LEAN=0 PEREGRINE_ROUTER_LEAN=0 PEREGRINE_RELEASE_ARRIVE=0 PEREGRINE_ATTENTION_DEFER=0 PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT=1 PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT=2 PEREGRINE_ATTENTION_DEFER_TC=0 PEREGRINE_MOE_NVFP4_DOWN_STAGED=0 PEREGRINE_ROUTER_BIAS_STAGED=0 PEREGRINE_MOE_SELF_ROUTING=0 PEREGRINE_MOE_NVFP4_H_FRAGS=0 PEREGRINE_MOE_FP8_SELF_ROUTING=0 PEREGRINE_ATTENTION_PDL=0 PEREGRINE_MLA_PREP_LATE_TRIGGER=0 PEREGRINE_ATTENTION_EARLY_CHUNK=1 PEREGRINE_HEAD_TOKEN_LOADS=0 PEREGRINE_KV_CACHE=bf16 PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST=0"}
OPSBIN=$(find "$BUILD" -name ops_cuda_test -type f -perm -u+x | head -1)
# The standard benches (section 5) and the golden memcheck (6) come first in a full run's budget: the
# 21 switches take ~40 s each (~840 s, more than a call), the benches 10-25 s each and the memcheck
# subset ~10. So a switch starts only if ~150 s are left for it beyond that reserve; the ones skipped
# say so, for the next call's PG_SUITE_GATED.
BENCHES=${PG_SUITE_BENCHES-"moonlight-16b-a3b:bf16:0:spec moonlight-16b-a3b:fp8:0 moonlight-16b-a3b:nvfp4:0:spec deepseek-v3:bf16:4 deepseek-v3:fp8:4 deepseek-v3:nvfp4:4"}
RESERVE=$(( $(wc -w <<<"$BENCHES") * 30 ))
[ -z "${PG_SUITE_SKIP_MEMCHECK:-}" ] && RESERVE=$((RESERVE + 30))
for g in $GATED; do
  [ "$(left)" -lt $((150 + RESERVE)) ] && { note "gated $g: skipped (time budget: ${RESERVE} s kept for the benches and memcheck)"; continue; }
  tag=${g%%=*} name=${g//=/_}
  case "$tag" in
    PEREGRINE_MOE_DIRECT_MULTI) ops_filter='*MoeExperts*:*MoeDirect*' ;;
    PEREGRINE_FUSED_NORMS) ops_filter='*LinearNorm*' ;;
    PEREGRINE_ROUTER_LEAN|PEREGRINE_ROUTER_BIAS_STAGED) ops_filter='*MoeRout*' ;;
    PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT|PEREGRINE_MOE_NVFP4_DOWN_STAGED|PEREGRINE_MOE_SELF_ROUTING|PEREGRINE_MOE_NVFP4_H_FRAGS|PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST) ops_filter='*MoeExpertsCuda.MatchesCpu/*nvfp4*:*MoeLayerPdl*' ;;
    PEREGRINE_MOE_FP8_SELF_ROUTING) ops_filter='*MoeLayerPdl*' ;;
    PEREGRINE_RELEASE_ARRIVE) ops_filter='*MlaAttention*:*MoeRout*' ;;
    PEREGRINE_LINEAR_MMA_WARPS_PER_SM) ops_filter='*LinearCuda*:*LinearNorm*' ;;
    PEREGRINE_ATTENTION_DEFER) ops_filter='*MlaAttentionDeferred*' ;;  # (the op tests run the deferred form anyway)
    PEREGRINE_ATTENTION_DEFER_TC) ops_filter='*MlaAttentionDeferred*' ;;  # =0: its tensor-core runs not deferred
    PEREGRINE_ATTENTION_PDL|PEREGRINE_ATTENTION_VEC|PEREGRINE_ATTENTION_LEAN|PEREGRINE_MLA_PREP_LATE_TRIGGER|PEREGRINE_ATTENTION_EARLY_CHUNK) ops_filter='*MlaAttention*' ;;
    PEREGRINE_HEAD_TOKEN_LOADS) ops_filter='*HeadLinear*:*MlaPrep*:*MlaAttentionDeferred*' ;;
    PEREGRINE_COMPACT_HEADS) ops_filter='-*' ;;  # =0: the goldens on f32 heads (the op tests run every head format anyway)
    *) ops_filter='-*' ;;  # e.g. PEREGRINE_DECODE_ATTENTION: the op tests run both kernels anyway
  esac
  if [ -n "$OPSBIN" ]; then
    (cd "$ROOT" && env "$g" timeout "${PG_SUITE_GATED_OPS_TIMEOUT:-60}" "$OPSBIN" --gtest_filter="$ops_filter" >"$OUT/gated_${name}_ops.log" 2>&1)
    note "gated $g ops ($ops_filter): rc=$?  $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gated_${name}_ops.log" | head -2 | tr '\n' ' ')"
  fi
  if [ -n "$GOLDBIN" ]; then
    (cd "$ROOT" && env "$g" timeout 90 "$GOLDBIN" >"$OUT/gated_${name}_goldens.log" 2>&1)
    note "gated $g goldens: rc=$?  $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gated_${name}_goldens.log" | head -2 | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$OUT/gated_${name}_goldens.log" | head -8 | tee -a "$SUMMARY"
  fi
done

# ---- 5. `peregrine bench --synthetic` (issue #5's figures), each capped ------------------------
PEREGRINE=$BUILD/peregrine
# BENCHES (PG_SUITE_BENCHES, read in 4c for its reserve): NAME:DTYPE:LAYERS[:spec|:attn[:VAR=VAL,...]] (spec: also the verify / draft step costs at k = 1, 2, 3,
# issue 7; attn: with PEREGRINE_PREFILL_ATTENTION=0, the CUDA-core prefill attention; a fifth field
# sets environment variables, e.g. a gated path: "moonlight-16b-a3b:bf16:0:spec:PEREGRINE_FUSED_NORMS=1").
: >"$OUT/bench_model.txt"
if [ -x "$PEREGRINE" ]; then
  for b in $BENCHES; do
    IFS=: read -r name dtype layers spec extra <<<"$b"
    # The environment is the fifth field: a VAR=VAL in the fourth would be read as the spec flag and
    # set nothing (session 10's first call measured such an "A/B" of identical runs).
    case "$spec" in ""|spec|attn) ;; *) note "bench $b: skipped (fourth field '$spec' is not spec|attn|empty; environment goes in the fifth: NAME:DTYPE:LAYERS::VAR=VAL)"; continue ;; esac
    [ "$(left)" -lt 60 ] && { note "bench $b: skipped (time budget)"; continue; }
    args=(bench --synthetic "$name" --dtype "$dtype")
    [ "$layers" != 0 ] && args+=(--layers "$layers")
    [ "$spec" = spec ] && args+=(--speculative-tokens 1,2,3)
    envs=(); [ "$spec" = attn ] && envs=(PEREGRINE_PREFILL_ATTENTION=0)
    [ -n "$extra" ] && IFS=, read -r -a more <<<"$extra" && envs+=("${more[@]}")
    log "peregrine ${args[*]}"
    echo "==== ${envs[*]} peregrine ${args[*]}" >>"$OUT/bench_model.txt"
    env "${envs[@]}" timeout $(( $(left) - 30 < 150 ? $(left) - 30 : 150 )) "$PEREGRINE" "${args[@]}" \
      --json-out "$OUT/bench_${name}_${dtype}_${layers}${spec:+_$spec}${extra:+_${extra//[=,]/_}}.json" >>"$OUT/bench_model.txt" \
      2>"$OUT/bench_${name}_${dtype}${spec:+_$spec}${extra:+_${extra//[=,]/_}}.err"
    note "bench $name $dtype layers=$layers: rc=$?"
  done
else
  note "peregrine not built: no model benchmarks"
fi

# ---- 5a. A/B against a baseline tree (PG_SUITE_AB_BASE=DIR, made by scripts/ab_base.sh SHA and carried):
# its `peregrine` built here (in the background since section 4; a baseline of files only, ab_base.sh
# --files, incrementally here), then run alternately with this build's at batch 1 over PG_SUITE_AB_BENCHES
# ("NAME:DTYPE:LAYERS ...") for PG_SUITE_AB_ROUNDS rounds: machines vary 2-3% between calls, not within one.
AB_BENCHES=${PG_SUITE_AB_BENCHES-"moonlight-16b-a3b:nvfp4:0 deepseek-v3:nvfp4:4 deepseek-v3:fp8:4"}
ab_rc=1
# A baseline of files only: this tree's versions of them kept aside, the baseline's swapped in, `peregrine`
# rebuilt incrementally into a copy, then this tree's versions back and this build's `peregrine` restored
# (the objects the swap rebuilt are older than the restored sources: a later build redoes them).
# PG_SUITE_AB_BASE may name several such baselines ("DIR1 DIR2"): each is built in turn and the sweep
# alternates them all (e.g. the old tree and a mix, to see which file a difference comes from).
AB_BINS=()
if [ -n "${PG_SUITE_AB_BASE:-}" ] && [ -f "${PG_SUITE_AB_BASE%% *}/ab-files.txt" ] && [ "$MODE" = prebuilt ]; then
  note "A/B baseline of files: needs a build here to rebuild in (not with PG_SUITE_PREBUILT): skipped"
elif [ -n "${PG_SUITE_AB_BASE:-}" ] && [ -f "${PG_SUITE_AB_BASE%% *}/ab-files.txt" ] && [ -x "$PEREGRINE" ]; then
  AB_BUILD="$BUILD/ab-bin"  # not under OUT: the device call would send the binaries back
  mkdir -p "$AB_BUILD"
  cp -p "$PEREGRINE" "$AB_BUILD/peregrine-head"
  ab_n=0
  for base in $PG_SUITE_AB_BASE; do
    [ "$(left)" -gt 90 ] || break
    ab_n=$((ab_n + 1))
    ABF="$(cd "$base" && pwd)"
    rm -rf "$AB_BUILD/head"
    mkdir -p "$AB_BUILD/head"
    tb=$(date +%s)
    while read -r f; do
      mkdir -p "$AB_BUILD/head/$(dirname "$f")" && cp -p "$ROOT/$f" "$AB_BUILD/head/$f" && cp "$ABF/tree/$f" "$ROOT/$f"
    done <"$ABF/ab-files.txt"
    timeout $(( $(left) - 60 )) ninja -C "$BUILD" -j "$NPROC" peregrine >"$OUT/ab_build$ab_n.log" 2>&1
    ab_rc=$?
    [ "$ab_rc" -eq 0 ] && cp -p "$PEREGRINE" "$AB_BUILD/peregrine$ab_n" && AB_BINS+=("bin=$AB_BUILD/peregrine$ab_n")
    while read -r f; do cp "$AB_BUILD/head/$f" "$ROOT/$f" && touch "$ROOT/$f"; done <"$ABF/ab-files.txt"
    cp -p "$AB_BUILD/peregrine-head" "$PEREGRINE"
    note "A/B baseline $ab_n $base ($(wc -l <"$ABF/ab-files.txt") files swapped in): rc=$ab_rc, $(($(date +%s) - tb)) s"
  done
  [ ${#AB_BINS[@]} -gt 0 ] && ab_rc=0
fi
if [ -n "$AB_PID" ]; then
  # The background build: waited for while time is left (its own cap: the time the sweep needs).
  while kill -0 "$AB_PID" 2>/dev/null && [ "$(left)" -gt 90 ]; do sleep 2; done
  kill -0 "$AB_PID" 2>/dev/null && { pkill -P "$AB_PID" 2>/dev/null; kill "$AB_PID" 2>/dev/null; }
  wait "$AB_PID" 2>/dev/null
  ab_rc=$?
fi
if [ -n "${PG_SUITE_AB_BASE:-}" ] && [ -x "$PEREGRINE" ] && [ "$(left)" -gt 60 ]; then
  [ -n "$AB_PID" ] && [ "$ab_rc" -eq 0 ] && [ -x "$AB_BUILD/peregrine" ] && AB_BINS=("bin=$AB_BUILD/peregrine")
  if [ "$ab_rc" -eq 0 ] && [ ${#AB_BINS[@]} -gt 0 ]; then
    # scripts/bench_sweep.sh's alternation, the baseline build first: the change is HEAD's against it.
    PG_SWEEP_TIMEOUT=40 timeout $(( $(left) - 20 )) "$ROOT/scripts/bench_sweep.sh" "$PEREGRINE" "${PG_SUITE_AB_ROUNDS:-2}" \
      "$AB_BENCHES" "${AB_BINS[@]}" - >"$OUT/ab.txt" 2>>"$OUT/ab.err"
    while read -r line; do note "A/B $line"; done <"$OUT/ab.txt"
  else
    # The last build log: the whole tree's ab_build.log, or the file baselines' ab_build1.log, ab_build2.log ...
    ab_log=$(ls -t "$OUT"/ab_build*.log 2>/dev/null | head -1)
    note "A/B: the baseline did not build in time (ab_configure.log, ${ab_log##*/}: $(tail -1 "$ab_log" 2>/dev/null | cut -c1-80))"
  fi
fi

# ---- 5b. NVFP4 quality of the embedded model, CUDA and CPU on the same text (issue #6) ----------
# bench/quality/eval-text.md is the text of the committed CPU report (docs/architecture.md at 792b3db).
if [ -x "$PEREGRINE" ] && [ -z "${PG_SUITE_SKIP_QUALITY:-}" ] && [ "$(left)" -gt 120 ]; then
  Q=/tmp/pg-tiny-nvfp4
  rm -rf "$Q"
  timeout 60 "$PEREGRINE" quantize models/peregrine-tiny "$Q" --format nvfp4 >"$OUT/quality.log" 2>&1
  # A GPTQ checkpoint as the committed report's (bench/quality/peregrine-tiny-nvfp4-gptq-mse.cpu.json,
  # calibrated on docs/decode-status.md as of b553ac8; here the file as it is at the suite's commit),
  # calibrated on the CPU, evaluated on both devices: the CUDA kernels read it as any NVFP4 checkpoint.
  QG=/tmp/pg-tiny-nvfp4-gptq
  rm -rf "$QG"
  timeout 120 "$PEREGRINE" quantize models/peregrine-tiny "$QG" --format nvfp4 --gptq --mse \
    --calib docs/decode-status.md >>"$OUT/quality.log" 2>&1
  for q in nvfp4:$Q nvfp4_gptq_mse:$QG; do
    for dev in cuda cpu; do
      timeout 60 "$PEREGRINE" eval "${q#*:}" --reference models/peregrine-tiny --text bench/quality/eval-text.md \
        --device "$dev" --json-out "$OUT/quality_${q%%:*}_$dev.json" >>"$OUT/quality.log" 2>&1
      note "quality ${q%%:*} vs bf16 ($dev): rc=$?  $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('KL mean %.4f p99 %.4f top-1 %.2f%% ppl %.2f vs %.2f' % (j['kl']['mean'], j['kl']['p99'], j['top1_agreement_pct'], j['perplexity']['model'], j['perplexity']['reference']))" "$OUT/quality_${q%%:*}_$dev.json" 2>/dev/null)"
    done
  done
fi

# ---- 5c. speculation on the embedded model: each fixed k and the adaptive mode (issue #7) ---------
# PG_SUITE_SKIP_SPEC=1 skips it. Tokens/s, acceptance and mean accepted length per mode; adaptive
# against the best fixed k (the default draft cost, then the cost fitted from the fixed-k runs).
if [ -x "$PEREGRINE" ] && [ -z "${PG_SUITE_SKIP_SPEC:-}" ] && [ "$(left)" -gt 120 ]; then
  : >"$OUT/spec_tiny.txt"
  for cost in "" auto; do
    timeout 60 "$PEREGRINE" bench models/peregrine-tiny --device cuda --speculative-tokens 0,1,2,3,adaptive --repeats 3 \
      ${cost:+--speculative-draft-cost $cost} --json-out "$OUT/spec_tiny${cost:+_$cost}.json" >>"$OUT/spec_tiny.txt" 2>"$OUT/spec_tiny${cost:+_$cost}.err"
    note "spec bench, embedded model, cuda${cost:+, draft cost $cost}: rc=$?  $(grep -iE 'adaptive' "$OUT/spec_tiny.txt" | tail -1)"
  done
  cat "$OUT/spec_tiny.txt" >>"$OUT/bench_model.txt"
fi

# ---- 5d. kernel durations of the decode graphs (ncu, one metric, every graph node) ---------------
# PG_SUITE_NCU="NAME:DTYPE:LAYERS[:spec] ..." (default none): `peregrine bench` under ncu with the graphs
# profiled node by node (serialised, caches and clocks left alone), its decode steps only
# (PEREGRINE_PROFILE_DECODE=1 with --profile-from-start off: a 27-layer NVFP4 prefill under ncu
# took > 200 s); the CSV goes to logs.tgz, scripts/ncu_step.py turns it into the kernels of one
# decode step with their durations.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
# PG_SUITE_NCU_METRICS: more metrics per kernel after the duration (e.g. the warps' stall reasons,
# smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio, and smsp__inst_executed.sum with
# smsp__warps_launched.sum for instructions per warp); ncu_step.py shows their means per kernel.
NCU_METRICS="gpu__time_duration.sum${PG_SUITE_NCU_METRICS:+,$PG_SUITE_NCU_METRICS}"
if [ -x "$PEREGRINE" ] && [ -n "$NCU" ] && [ -n "${PG_SUITE_NCU:-}" ]; then
  for b in $PG_SUITE_NCU; do
    IFS=: read -r name dtype layers spec <<<"$b"
    [ "$(left)" -lt 90 ] && { note "ncu $b: skipped (time budget)"; continue; }
    args=(bench --synthetic "$name" --dtype "$dtype" --decode-tokens 4 --repeats 1 --batches 1 --long-prefill 0)
    [ "$layers" != 0 ] && args+=(--layers "$layers")
    # NAME:DTYPE:LAYERS:spec: also two replays of the k = 1 and k = 3 verify graphs (the last 4 steps).
    [ "${spec:-}" = spec ] && args+=(--speculative-tokens 1,3)
    PEREGRINE_PROFILE_DECODE=1 timeout $(( $(left) - 60 < 200 ? $(left) - 60 : 200 )) "$NCU" --profile-from-start off \
      --graph-profiling node --metrics "$NCU_METRICS" --cache-control none --clock-control none --csv \
      --log-file "$OUT/ncu_${name}_${dtype}_${layers}.csv" "$PEREGRINE" "${args[@]}" \
      >"$OUT/ncu_${name}_${dtype}_${layers}.log" 2>&1
    note "ncu $b: rc=$?  $(python3 scripts/ncu_step.py "$OUT/ncu_${name}_${dtype}_${layers}.csv" --summary 2>&1 | tail -1)"
    # The step by kernel (count, total us, share) into the summary: the table the run exists for.
    if [ "${spec:-}" = spec ]; then  # the last decode step next to the second replay of each verify graph
      python3 scripts/ncu_step.py "$OUT/ncu_${name}_${dtype}_${layers}.csv" --compare=-5,-3,-1 2>&1 | head -24 >>"$SUMMARY"
    else
      python3 scripts/ncu_step.py "$OUT/ncu_${name}_${dtype}_${layers}.csv" 2>&1 | sed -n '/by kernel/,$p' | head -40 >>"$SUMMARY"
    fi
  done
fi

# ---- 6. compute-sanitizer memcheck over the golden CUDA tests ----------------------------------
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
GOLD=$(find "$BUILD" -name cuda_golden_test -type f -perm -u+x | head -1)
if [ -n "$SAN" ] && [ -n "$GOLD" ] && [ "$(left)" -gt 90 ] && [ -z "${PG_SUITE_SKIP_MEMCHECK:-}" ]; then
  log "compute-sanitizer memcheck: cuda_golden_test"
  (cd "$ROOT" && timeout $(( $(left) - 40 )) "$SAN" --tool memcheck --error-exitcode 9 "$GOLD" \
     --gtest_filter='All/CudaGolden.*v3_tiny_*:All/CudaGolden.*odd*:CudaGoldenMtp.*' >"$OUT/memcheck.log" 2>&1)
  note "memcheck (cuda_golden_test subset): rc=$?  $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
else
  note "memcheck: skipped (sanitizer '${SAN:-none}', time left $(left) s)"
fi
# PG_SUITE_MEMCHECK_OPS="gtest filter": also ops_cuda_test's matching cases under memcheck (new kernels,
# a fault seen once), e.g. 'MlaAttentionCudaTiming.*:Cases/MlaAttentionCuda.*v3*'.
if [ -n "${PG_SUITE_MEMCHECK_OPS:-}" ] && [ -n "$SAN" ] && [ -n "$OPSBIN" ] && [ "$(left)" -gt 60 ]; then
  (cd "$ROOT" && timeout $(( $(left) - 30 )) "$SAN" --tool memcheck --error-exitcode 9 "$OPSBIN" \
     --gtest_filter="$PG_SUITE_MEMCHECK_OPS" >"$OUT/memcheck_ops.log" 2>&1)
  rc=$?
  # A filter that matches nothing (gtest takes * and ?, not [a-b]) runs no test and checks nothing.
  if grep -q 'Running 0 tests' "$OUT/memcheck_ops.log"; then
    note "memcheck (ops_cuda_test '$PG_SUITE_MEMCHECK_OPS'): the filter matched no test (gtest filters take * and ?), nothing checked"
  else
    note "memcheck (ops_cuda_test '$PG_SUITE_MEMCHECK_OPS'): rc=$rc  $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_ops.log" | tail -1)"
  fi
fi

# ---- 7. the rest, if time is left -------------------------------------------------------------
# The ring probe's table (bench_ops_cuda: "The gate_up's ring alone"), its header and rows.
ring_rows() { awk '/^The gate_up.s ring alone/ {on = 1} on && /^ *$/ {exit} on' "$1"; }
BENCH=$(find "$BUILD" -name bench_ops_cuda -type f -perm -u+x | head -1)
# The probes alone (a few seconds: kernel handoffs, cold code; bench_ops_cuda --probes) unless
# PG_SUITE_SKIP_PROBES=1 or the whole bench runs below (it has them too).
if [ -n "$BENCH" ] && [ "$(left)" -gt 40 ] && [ -z "${PG_SUITE_SKIP_PROBES:-}" ] &&
   { [ -n "${PG_SUITE_SKIP_OPS_BENCH:-}" ] || [ "$(left)" -le 120 ]; }; then
  timeout 60 "$BENCH" --probes ${PG_SUITE_OPS_BENCH_ARGS:-} >"$OUT/probes.txt" 2>&1
  note "bench_ops_cuda --probes: rc=$?"
  grep -E "^  (handoff|code|=>)" "$OUT/probes.txt" | tee -a "$SUMMARY"
  ring_rows "$OUT/probes.txt" | tee -a "$SUMMARY"
fi
if [ -n "$BENCH" ] && [ "$(left)" -gt 120 ] && [ -z "${PG_SUITE_SKIP_OPS_BENCH:-}" ]; then
  log "bench_ops_cuda"
  timeout $(( $(left) - 30 )) "$BENCH" --json "$OUT/bench_ops_cuda.json" ${PG_SUITE_OPS_BENCH_ARGS:-} >"$OUT/bench.txt" 2>&1
  note "bench_ops_cuda: rc=$?"
  ring_rows "$OUT/bench.txt" | tee -a "$SUMMARY"
fi
grep -E "\((Failed|Not Run|Timeout|SEGFAULT|Subprocess aborted)\)" "$OUT/ctest_gpu.log" | head -20 | tee -a "$SUMMARY"

# ---- 8. summary (last, so the tail of the output carries it) -----------------------------------
log "done"
# What comes back from the machine is limited in number of files: everything but the summary and
# the model-benchmark table goes into one archive.
tar czf /tmp/pg_suite_logs.tgz -C "$OUT" --exclude=summary.txt --exclude=bench_model.txt . 2>/dev/null
find "$OUT" -type f ! -name summary.txt ! -name bench_model.txt -delete
mv /tmp/pg_suite_logs.tgz "$OUT/logs.tgz"
grep -vE "^\s*$" "$OUT/bench_model.txt" 2>/dev/null | grep -vE "^\s*ops of layer"
echo
echo "================ gpu_suite summary ($(($(date +%s) - T0)) s) ================"
cat "$SUMMARY"
tar xzf "$OUT/logs.tgz" -O ./measures.txt 2>/dev/null
[ "$gpu_build_rc" -eq 0 ] && [ "$gpu_rc" -eq 0 ]
