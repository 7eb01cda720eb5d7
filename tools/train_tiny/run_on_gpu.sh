#!/usr/bin/env bash
# The whole GPU job for models/peregrine-tiny, as one command on a machine with one CUDA GPU,
# python3 with torch, transformers, tokenizers (about 7 minutes on an H200):
#
#   tools/train_tiny/prepare_data.sh                       # here, once (CPU): .cache/train_tiny/gpu/
#   tools/train_tiny/run_on_gpu.sh [OUT_DIR]               # there
#
# Stages: tokenizer (train_tokenizer.py) -> preflight (evaluate.py --preflight: model.py against a
# literal reading of the checkpoint and against transformers, on random weights; stops here if they
# disagree) -> training (train.py) -> export (export.py) -> evaluation (evaluate.py).
# OUT_DIR (default $OUT, else out/train_tiny) receives the weight shards as soon as they exist, and
# results.tar.gz: config.json, generation_config.json, model.safetensors.index.json, tokenizer.json,
# tokenizer_config.json, metrics.json, train_log.json, preflight.json, tokens_meta.json.
# Environment: STEPS (default 8884, the committed model's run; 0 = as many as fit TIME_BUDGET seconds,
# default 270), COMPILE (1: torch.compile, default), WORK (scratch folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${1:-${OUT:-$PWD/out/train_tiny}}
DATA=.cache/train_tiny/gpu
W=${WORK:-/tmp/peregrine_tiny}
STEPS=${STEPS:-8884}
TIME_BUDGET=${TIME_BUDGET:-270}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR" "$W"
T0=$(date +%s)
log() { echo "[run_on_gpu +$(( $(date +%s) - T0 ))s] $*"; }

pack() {
  local files=()
  for f in "$W/peregrine-tiny/config.json" "$W/peregrine-tiny/generation_config.json" \
           "$W/peregrine-tiny/model.safetensors.index.json" "$W/peregrine-tiny/tokenizer.json" \
           "$W/peregrine-tiny/tokenizer_config.json" "$W/metrics.json" "$W/run/train_log.json" \
           "$W/preflight/preflight.json" "$W/tokens/meta.json" "$W/tokenizer/tokenizer.json"; do
    [ -f "$f" ] && files+=("$f")
  done
  [ -f "$W/tokens/meta.json" ] && cp "$W/tokens/meta.json" "$W/tokens_meta.json" && files+=("$W/tokens_meta.json")
  ((${#files[@]})) && tar -czf "$OUT_DIR/results.tar.gz" --transform 's|.*/||' "${files[@]}" 2>/dev/null || true
  log "packed ${#files[@]} files into $OUT_DIR/results.tar.gz"
}
trap pack EXIT

[ -f "$DATA/train.jsonl.xz" ] || { echo "run_on_gpu: $DATA/train.jsonl.xz missing: run tools/train_tiny/prepare_data.sh" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import sys, torch, transformers, tokenizers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'cuda', torch.cuda.is_available())"

log "1/5 tokenizer"
python3 tools/train_tiny/train_tokenizer.py --data "$DATA" --out "$W/tokenizer" --tokens-out "$W/tokens"

log "2/5 preflight"
python3 tools/train_tiny/evaluate.py --preflight --data "$W/tokens" --work "$W/preflight"

log "3/5 training"
python3 tools/train_tiny/train.py --data "$W/tokens" --out "$W/run" --steps "$STEPS" --time-budget "$TIME_BUDGET" --compile "${COMPILE:-1}"

log "4/5 export"
python3 tools/train_tiny/export.py --ckpt "$W/run/final.pt" --tokenizer-dir "$W/tokenizer" --out "$W/peregrine-tiny"
cp "$W"/peregrine-tiny/model-*.safetensors "$OUT_DIR"/ 2>/dev/null || cp "$W/peregrine-tiny/model.safetensors" "$OUT_DIR"/

log "5/5 evaluation"
python3 tools/train_tiny/evaluate.py --model-dir "$W/peregrine-tiny" --data "$W/tokens" --metrics "$W/metrics.json" \
  || log "evaluation FAILED (weights are in $OUT_DIR)"
log "done"
