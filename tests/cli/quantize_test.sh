#!/usr/bin/env bash
# `peregrine quantize` on the CPU: the embedded model (BF16) and the FP8 golden model become NVFP4
# folders that load (`info`, `generate`, `eval`), with the ModelOpt layout tensor by tensor, the
# exclusions kept in their dtype, hf_quant_config.json and config.json as documented; --calib writes
# quality_report.json; bad inputs fail with a clear message and exit code 2 (usage) or 1.
# Usage: quantize_test.sh PEREGRINE SOURCE_DIR
set -u
bin=$1; src=$2
tiny=$src/models/peregrine-tiny
fp8=$src/tests/golden/v3_tiny_fp8
text=$src/tests/cli/data/eval_text.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $1"; fails=$((fails+1)); }

# Checks on a written folder: `check NAME DIR PYTHON_CONDITION`. The condition sees
#   t: {tensor name: {"dtype", "shape", "file", "bytes"}} read from the safetensors headers,
#   src: the same for the source folder ($srcdir), hq: hf_quant_config.json, cfg: config.json,
#   files: the folder's file names.
cat >"$tmp/check.py" <<'EOF'
import json, os, struct, sys
def tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        b = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k == "__metadata__":
                continue
            lo, hi = v["data_offsets"]
            out[k] = {"dtype": v["dtype"], "shape": v["shape"], "file": f, "bytes": b[8 + n + lo:8 + n + hi]}
    return out
def f32(b):
    return struct.unpack("<f", b)[0]
d, srcdir, cond = sys.argv[1], sys.argv[2], sys.argv[3]
t, src = tensors(d), tensors(srcdir)
files = sorted(os.listdir(d))
hq = json.load(open(os.path.join(d, "hf_quant_config.json"))) if "hf_quant_config.json" in files else None
cfg = json.load(open(os.path.join(d, "config.json"))) if "config.json" in files else None
sys.exit(0 if eval(cond) else 1)
EOF
check() {  # check NAME DIR SRC_DIR CONDITION
  if python3 "$tmp/check.py" "$2" "$3" "$4"; then echo "ok   $1"; else fail "$1: $4"; fi
}
expect_error() {  # expect_error NAME RC PATTERN -- command...
  local name=$1 want=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne "$want" ]; then fail "$name: exit code $rc (want $want)"; echo "$out" | head -5; return; fi
  if ! grep -qiE "$pattern" <<<"$out"; then fail "$name: message does not match /$pattern/:"; echo "$out" | head -5; return; fi
  echo "ok   $name: $(grep -iE "$pattern" <<<"$out" | head -1)"
}

# Routed experts: U8 [out, in/2], F8_E4M3 [out, in/16], F32 [] scale_2 > 0 and input_scale 1.0.
routed_ok="all(t[n]['dtype'] == 'U8' and t[n]['shape'] == [s['shape'][0], s['shape'][1] // 2]
  and t[n[:-7] + '.weight_scale']['dtype'] == 'F8_E4M3'
  and t[n[:-7] + '.weight_scale']['shape'] == [s['shape'][0], s['shape'][1] // 16]
  and t[n[:-7] + '.weight_scale_2']['dtype'] == 'F32' and t[n[:-7] + '.weight_scale_2']['shape'] == []
  and f32(t[n[:-7] + '.weight_scale_2']['bytes']) > 0
  and t[n[:-7] + '.input_scale']['shape'] == [] and f32(t[n[:-7] + '.input_scale']['bytes']) == 1.0
  for n, s in src.items() if '.mlp.experts.' in n and n.endswith('.weight') and not n.startswith('model.layers.' + str(cfg['num_hidden_layers']) + '.'))"
# Never quantized: embeddings, lm_head, norms, router, MTP layer: same dtype, shape and bytes.
kept_ok="all(t[n]['dtype'] == s['dtype'] and t[n]['shape'] == s['shape'] and t[n]['bytes'] == s['bytes']
  for n, s in src.items() if 'embed_tokens' in n or n.startswith('lm_head') or 'norm' in n or '.mlp.gate.' in n
  or n.startswith('model.layers.' + str(cfg['num_hidden_layers']) + '.'))"

# 1. The embedded model, sharded small so that the index is exercised.
q=$tmp/tiny-nvfp4
if "$bin" quantize "$tiny" "$q" --format nvfp4 --max-shard-size 8MB --threads 2 >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  check "tiny: routed experts NVFP4 with the right scale shapes" "$q" "$tiny" "$routed_ok"
  check "tiny: embeddings, lm_head, norms, router and MTP layer unchanged" "$q" "$tiny" "$kept_ok"
  check "tiny: attention and shared experts quantized by default" "$q" "$tiny" \
    "t['model.layers.1.self_attn.q_a_proj.weight']['dtype'] == 'U8' and t['model.layers.2.mlp.shared_experts.up_proj.weight']['dtype'] == 'U8' and t['model.layers.0.mlp.down_proj.weight']['dtype'] == 'U8'"
  check "tiny: hf_quant_config.json" "$q" "$tiny" \
    "hq['producer']['name'] == 'peregrine' and hq['quantization'] == {'quant_algo': 'NVFP4', 'kv_cache_quant_algo': None, 'group_size': 16, 'exclude_modules': ['lm_head', 'model.layers.4.*']}"
  check "tiny: config.json quantization_config in ModelOpt form" "$q" "$tiny" \
    "cfg['quantization_config']['quant_method'] == 'modelopt' and cfg['quantization_config']['quant_algo'] == 'NVFP4' and cfg['quantization_config']['exclude_modules'] == hq['quantization']['exclude_modules'] and cfg['hidden_size'] == 256"
  check "tiny: shards with an index of similar sizes" "$q" "$tiny" \
    "(lambda ix, sh: len(sh) >= 3 and set(ix['weight_map']) == set(t) and all(ix['weight_map'][n] == t[n]['file'] for n in t) and ix['metadata']['total_size'] == sum(len(v['bytes']) for v in t.values()) and max(sh) <= 8e6 and min(sh) > 0.4 * max(sh))(json.load(open('$q/model.safetensors.index.json')), [os.path.getsize(os.path.join('$q', f)) for f in files if f.endswith('.safetensors')])"
  check "tiny: tokenizer and generation config copied, no temporary files" "$q" "$tiny" \
    "{'tokenizer.json', 'tokenizer_config.json', 'generation_config.json'} <= set(files) and not any('.tmp.' in f for f in files) and open('$q/tokenizer.json','rb').read() == open('$tiny/tokenizer.json','rb').read()"
  grep -q "tensors" "$tmp/err.txt" && grep -q "269/269" "$tmp/err.txt" && echo "ok   tiny: progress bar on stderr" || fail "tiny: no progress bar"
  if "$bin" info "$q" --json >"$tmp/info.json" 2>"$tmp/err.txt" &&
     python3 -c "import json; j=json.load(open('$tmp/info.json')); b=j['by_dtype']['e2m1 (packed u8)']; assert j['quantization']['quant_algo'] == 'NVFP4' and b['tensors'] > 0 and j['warnings'] == [], j"; then
    echo "ok   tiny: info --json reports NVFP4 tensors"
  else fail "tiny: info --json"; cat "$tmp/err.txt"; fi
  if out=$("$bin" generate "$q" --device cpu -p "The peregrine falcon" --max-tokens 8 --ignore-eos -q 2>"$tmp/err.txt") && [ -n "$out" ]; then
    echo "ok   tiny: generate --device cpu runs: $(head -c 60 <<<"$out" | tr '\n' ' ')"
  else fail "tiny: generate"; cat "$tmp/err.txt"; fi
else
  fail "tiny: quantize exited non-zero"; cat "$tmp/err.txt"
fi

# 2. Attention excluded (a '*'-only pattern, written as given) and shared experts by a '?' pattern
#    (written as the modules it matched); the folder still loads.
q=$tmp/tiny-noattn
if "$bin" quantize "$tiny" "$q" --format nvfp4 --exclude '*self_attn*' --exclude 'model.layers.?.mlp.shared_experts.*' \
     >/dev/null 2>"$tmp/err.txt"; then
  check "exclude: attention and shared experts keep BF16" "$q" "$tiny" \
    "all(t[n]['dtype'] == 'BF16' and t[n]['bytes'] == s['bytes'] for n, s in src.items() if 'self_attn' in n or 'shared_experts' in n) and not any(n.endswith('_scale') for n in t if 'self_attn' in n or 'shared_experts' in n)"
  check "exclude: routed experts still NVFP4" "$q" "$tiny" "$routed_ok"
  check "exclude: exclude_modules" "$q" "$tiny" \
    "hq['quantization']['exclude_modules'][:3] == ['lm_head', 'model.layers.4.*', '*self_attn*'] and 'model.layers.2.mlp.shared_experts.up_proj' in hq['quantization']['exclude_modules']"
  grep -q "shared experts kept unquantized" "$tmp/err.txt" &&
    echo "ok   exclude: warns that CUDA cannot stack mixed expert formats" || fail "exclude: no mixed-stack warning"
  "$bin" generate "$q" --device cpu -p "The" --max-tokens 4 --ignore-eos -q >/dev/null 2>"$tmp/err.txt" &&
    echo "ok   exclude: generate runs" || { fail "exclude: generate"; cat "$tmp/err.txt"; }
else
  fail "exclude: quantize exited non-zero"; cat "$tmp/err.txt"
fi

# 3. A DeepSeek FP8 source: quantized modules lose weight_scale_inv, the MTP layer keeps FP8.
q=$tmp/fp8-nvfp4
if "$bin" quantize "$fp8" "$q" --format nvfp4 >/dev/null 2>"$tmp/err.txt"; then
  check "fp8: routed experts NVFP4" "$q" "$fp8" "$routed_ok"
  check "fp8: MTP layer keeps F8_E4M3 + weight_scale_inv, quantized modules drop it" "$q" "$fp8" \
    "all(t[n] == s for n, s in src.items() if n.startswith('model.layers.3.')) and t['model.layers.3.mlp.experts.0.up_proj.weight']['dtype'] == 'F8_E4M3' and not any(n.endswith('_scale_inv') for n in t if not n.startswith('model.layers.3.'))"
  check "fp8: config.json keeps the FP8 quantization_config the kept FP8 weights need" "$q" "$fp8" \
    "cfg['quantization_config']['quant_method'] == 'fp8' and hq['quantization']['quant_algo'] == 'NVFP4'"
  grep -q "stay FP8" "$tmp/err.txt" && echo "ok   fp8: says why config.json keeps FP8" || fail "fp8: no note"
  "$bin" generate "$q" --device cpu -p "hello" --max-tokens 4 --ignore-eos -q >/dev/null 2>"$tmp/err.txt" &&
    echo "ok   fp8: generate runs" || { fail "fp8: generate"; cat "$tmp/err.txt"; }
else
  fail "fp8: quantize exited non-zero"; cat "$tmp/err.txt"
fi

# 4. --calib: the evaluation of `peregrine eval` against SRC, written to quality_report.json.
q=$tmp/tiny-calib
if "$bin" quantize "$tiny" "$q" --format nvfp4 --mse --calib "$text" --calib-device cpu >"$tmp/table.txt" 2>"$tmp/err.txt"; then
  if python3 -c "
import json; j = json.load(open('$q/quality_report.json'))
assert j['kl']['mean'] > 0 and j['kl']['max'] >= j['kl']['p99'] >= j['kl']['median'] >= 0, j['kl']
assert 0 < j['top1_agreement_pct'] <= 100 and j['perplexity']['model'] > 1 and j['perplexity']['reference'] > 1
assert j['model'] == '$q' and j['reference'] == '$tiny' and j['tokens_evaluated'] > 100
assert j['quantization']['mse'] is True and j['quantization']['format'] == 'nvfp4'
assert 'first_divergence' in j['generation']['runs'][0]"; then
    echo "ok   calib: quality_report.json with KL, top-1, perplexities"
  else fail "calib: quality_report.json"; fi
  grep -q "top-1 agreement" "$tmp/table.txt" && echo "ok   calib: table on stdout" || fail "calib: no table"
else
  fail "calib: quantize exited non-zero"; cat "$tmp/err.txt"
fi

# 4b. --gptq on the embedded model: the report names the method and the calibration text, and the
# held-out --report-text is what it measured; the folder loads.
q=$tmp/tiny-gptq
calib=$src/bench/quality/eval-text.md
if "$bin" quantize "$tiny" "$q" --format nvfp4 --gptq --calib "$calib" --report-text "$text" --calib-device cpu \
    >"$tmp/table.txt" 2>"$tmp/err.txt"; then
  if python3 -c "
import json; j = json.load(open('$q/quality_report.json'))
assert j['quantization']['method'] == 'gptq' and j['quantization']['calibration_text'] == '$calib', j['quantization']
assert j['text'] == '$text' and j['kl']['mean'] > 0"; then
    echo "ok   gptq: quality_report.json names the method, the calibration text and the held-out text"
  else fail "gptq: quality_report.json"; fi
  grep -q "gptq: 1 calibration pass over" "$tmp/err.txt" && echo "ok   gptq: calibration summary" || fail "gptq: no summary"
  "$bin" info "$q" >/dev/null 2>&1 && echo "ok   gptq: the folder loads" || fail "gptq: info fails"
else
  fail "gptq: quantize exited non-zero"; cat "$tmp/err.txt"
fi

# 5. Bad input.
mkdir "$tmp/llama"; cp "$src/tests/golden/v3_tiny"/* "$tmp/llama/"
sed -i 's/"deepseek_v3"/"llama"/' "$tmp/llama/config.json"
mkdir "$tmp/f16"; cp "$src/tests/golden/v3_tiny"/* "$tmp/f16/"
python3 - "$tmp/f16/model.safetensors" <<'EOF'
import sys, struct, json
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h["model.layers.1.mlp.experts.0.up_proj.weight"]["dtype"] = "F16"  # same byte size
s = json.dumps(h, separators=(",", ":")).encode(); s += b" " * (n - len(s)); assert len(s) == n
open(p, "wb").write(bytes(b[:8]) + s + bytes(b[8 + n:]))
EOF
mkdir "$tmp/nan"; cp "$src/tests/golden/v3_tiny"/* "$tmp/nan/"
python3 - "$tmp/nan/model.safetensors" <<'EOF'
import sys, struct, json
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); lo = h["model.layers.2.mlp.experts.5.up_proj.weight"]["data_offsets"][0]
b[8 + n + lo + 2 * 7:8 + n + lo + 2 * 8] = struct.pack("<H", 0x7fc0)  # bf16 NaN at [0][7]
open(p, "wb").write(b)
EOF
mkdir "$tmp/noconfig"; cp "$tiny"/*.safetensors "$tiny"/model.safetensors.index.json "$tmp/noconfig/"
mkdir "$tmp/busy"; echo x >"$tmp/busy/file"
expect_error "missing SRC" 2 "does not exist" -- "$bin" quantize "$tmp/nope" "$tmp/o1" --format nvfp4
expect_error "no config.json" 1 "no config.json" -- "$bin" quantize "$tmp/noconfig" "$tmp/o2" --format nvfp4
expect_error "unsupported model_type" 1 "llama.*deepseek_v3" -- "$bin" quantize "$tmp/llama" "$tmp/o3" --format nvfp4
expect_error "unsupported source dtype" 1 "experts.0.up_proj.weight.*F16.*BF16, F32 or DeepSeek FP8" -- \
  "$bin" quantize "$tmp/f16" "$tmp/o4" --format nvfp4
expect_error "DST not empty" 2 "not empty.*--force" -- "$bin" quantize "$tiny" "$tmp/busy" --format nvfp4
expect_error "bad --format" 2 "int4.*nvfp4" -- "$bin" quantize "$tiny" "$tmp/o5" --format int4
expect_error "missing --format" 2 "format" -- "$bin" quantize "$tiny" "$tmp/o6"
expect_error "already NVFP4" 1 "already.*NVFP4|already.*ModelOpt" -- "$bin" quantize "$tmp/tiny-nvfp4" "$tmp/o7" --format nvfp4
expect_error "excluding routed experts" 2 "routed expert" -- "$bin" quantize "$tiny" "$tmp/o8" --format nvfp4 --exclude '*mlp*'
expect_error "missing --calib text" 2 "calib" -- "$bin" quantize "$tiny" "$tmp/o9" --format nvfp4 --calib "$tmp/nope.txt"
expect_error "--gptq without --calib" 2 "gptq.*add --calib" -- "$bin" quantize "$tiny" "$tmp/o10" --format nvfp4 --gptq
expect_error "--report-text without --calib" 2 "report-text.*add --calib" -- \
  "$bin" quantize "$tiny" "$tmp/o14" --format nvfp4 --report-text "$text"
expect_error "missing --report-text file" 2 "report-text" -- \
  "$bin" quantize "$tiny" "$tmp/o12" --format nvfp4 --calib "$text" --report-text "$tmp/nope.txt"
expect_error "--gptq-damp out of range" 2 "gptq-damp" -- "$bin" quantize "$tiny" "$tmp/o13" --format nvfp4 --gptq \
  --calib "$text" --gptq-damp 3
# A failure in the middle: shards finished before it are complete files, the one in progress is
# gone (no temporary left), and there is no config.json or index, so the folder does not load.
expect_error "NaN weight" 1 "experts.5.up_proj.weight.*\\[0\\]\\[7\\].*not finite" -- \
  "$bin" quantize "$tmp/nan" "$tmp/o11" --format nvfp4 --max-shard-size 300KB
if [ -d "$tmp/o11" ] && python3 -c "
import os, struct, json, sys
d = '$tmp/o11'; files = os.listdir(d)
assert not any('.tmp.' in f for f in files) and 'config.json' not in files and 'model.safetensors.index.json' not in files, files
for f in files:
    b = open(os.path.join(d, f), 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    assert len(b) == 8 + n + max(v['data_offsets'][1] for k, v in h.items() if k != '__metadata__'), f
assert 0 < len(files) < 8, files"; then
  echo "ok   NaN weight: finished shards complete, no partial shard, no config.json"
else fail "NaN weight: leftovers"; ls -la "$tmp/o11"; fi
for d in o1 o2 o3 o4 o5 o6 o7 o8 o9; do [ -e "$tmp/$d" ] && fail "a failed run created $d"; done
[ "$(ls "$tmp/busy")" = "file" ] && echo "ok   failed runs leave nothing behind" || fail "busy DST was touched"
if "$bin" quantize "$tiny" "$tmp/o10" --format nvfp4 --exclude 'lm_hed' >/dev/null 2>"$tmp/err.txt"; then
  grep -q "warning: --exclude 'lm_hed' matches no module" "$tmp/err.txt" && echo "ok   pattern matching nothing: warning" ||
    { fail "pattern matching nothing: no warning"; cat "$tmp/err.txt"; }
else fail "pattern matching nothing is an error"; cat "$tmp/err.txt"; fi
"$bin" quantize "$tiny" "$tmp/busy" --format nvfp4 --force >/dev/null 2>&1 && [ -f "$tmp/busy/model.safetensors" ] &&
  echo "ok   --force writes into a non-empty DST" || fail "--force"
[ $fails -eq 0 ] && echo "all quantize cases pass" || { echo "$fails case(s) failed"; exit 1; }
