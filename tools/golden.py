#!/usr/bin/env python3
"""Golden fixtures for Peregrine's CPU forward pass (tests/golden/), computed with Hugging Face
transformers in float32 on tiny random-weight DeepSeek-V3 / V2 models.

Runs where torch, transformers, tokenizers and safetensors are installed (the GPU machine):
    python3 tools/golden.py --tokenizer-dir DIR_WITH_DEEPSEEK_V3_TOKENIZER --out tests/golden

Each model folder gets config.json (DeepSeek's own key style), model.safetensors (checkpoint
tensor names as DeepSeek ships them, MTP layer included), a vocabulary-shrunk DeepSeek-V3
tokenizer, and expected.json: for every prompt its ids, the top-10 log-probabilities at every
position (teacher-forced) and a 32-token greedy continuation.

Weights are drawn with fixed seeds; a seed is rejected (the next one tried) when any routing
decision or greedy step is a near-tie, so that tiny fp32 summation-order differences between
implementations cannot flip a discrete choice. Where transformers departs from DeepSeek's own
definition (group masking fills 0 rather than -inf; V2 softmax scale without yarn mscale), the
fixtures stay in the region where both agree: e_score_correction_bias > 0 keeps score + bias > 0,
and the V2 model has no rope_scaling. Peregrine follows DeepSeek; unit tests cover the differences.
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. It was a sunny day in",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) +",
    "北京是中国的首都，也是一座历史悠久的城市。",
    "In 2024, the population grew by 3.14159% to 1,234,567 people; 42 + 58 = 100.",
    "<｜User｜>Hello! How are you today?<｜Assistant｜>",
]
N_GREEDY = 32
TOP_K = 10

# ---------------------------------------------------------------------------------------------
# Tokenizer: the real DeepSeek-V3 tokenizer.json restricted to its first N vocabulary entries.
# ---------------------------------------------------------------------------------------------

def bytes_to_unicode_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def shrink_tokenizer(src_dir, n_keep, out_dir):
    tok = json.load(open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(src_dir, "tokenizer_config.json"), encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    added = tok["added_tokens"]
    added_contents = {a["content"] for a in added}
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    kept = [t for t, i in by_id if i < n_keep and t not in added_contents]
    kept_set = set(kept)
    for ch in bytes_to_unicode_chars():  # every byte must stay encodable
        if ch not in kept_set:
            kept.append(ch)
            kept_set.add(ch)
    # Special tokens keep their order; placeholders are dropped.
    keep_added = [a for a in sorted(added, key=lambda a: a["id"]) if "place▁holder" not in a["content"]]
    new_vocab = {}
    new_added = []
    next_id = 0
    # Added tokens that sat at the start of the vocabulary (BOS/EOS/pad) keep ids 0..2.
    for a in keep_added:
        if a["id"] < n_keep:
            new_vocab[a["content"]] = next_id
            b = dict(a); b["id"] = next_id; new_added.append(b)
            next_id += 1
    for t in kept:
        new_vocab[t] = next_id
        next_id += 1
    for a in keep_added:
        if a["id"] >= n_keep:
            b = dict(a); b["id"] = next_id; new_added.append(b)
            next_id += 1
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in new_vocab and b in new_vocab and (a + b) in new_vocab:
            merges.append(m)
    tok["model"]["vocab"] = new_vocab
    tok["model"]["merges"] = merges
    tok["added_tokens"] = new_added
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg["added_tokens_decoder"] = {
        str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for a in new_added
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    return next_id  # vocab size


# ---------------------------------------------------------------------------------------------
# Random checkpoints, named as DeepSeek ships them.
# ---------------------------------------------------------------------------------------------

def layer_tensors(cfg, prefix, layer_idx, g, moe):
    """Random weights of one decoder layer (fp32), names relative to the model."""
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    t = {}

    def lin(name, n, k, gain=1.0):
        t[f"{prefix}.{name}"] = torch.randn(n, k, generator=g) * (gain / math.sqrt(k))

    def norm(name, n):
        t[f"{prefix}.{name}"] = 0.6 + 0.8 * torch.rand(n, generator=g)

    norm("input_layernorm.weight", H)
    norm("post_attention_layernorm.weight", H)
    if cfg.get("q_lora_rank"):
        lin("self_attn.q_a_proj.weight", cfg["q_lora_rank"], H)
        norm("self_attn.q_a_layernorm.weight", cfg["q_lora_rank"])
        lin("self_attn.q_b_proj.weight", nh * qk, cfg["q_lora_rank"], 1.5)
    else:
        lin("self_attn.q_proj.weight", nh * qk, H, 1.5)
    lin("self_attn.kv_a_proj_with_mqa.weight", cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], H, 1.5)
    norm("self_attn.kv_a_layernorm.weight", cfg["kv_lora_rank"])
    lin("self_attn.kv_b_proj.weight", nh * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"], 1.5)
    lin("self_attn.o_proj.weight", H, nh * cfg["v_head_dim"])
    if moe:
        E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        lin("mlp.gate.weight", E, H, 3.0)
        if cfg["model_type"] != "deepseek_v2":
            # > 0 so score + bias > 0: transformers (fills 0) and DeepSeek (fills -inf) agree.
            t[f"{prefix}.mlp.gate.e_score_correction_bias"] = 0.05 + 0.4 * torch.rand(E, generator=g)
        for j in range(E):
            lin(f"mlp.experts.{j}.gate_proj.weight", I, H)
            lin(f"mlp.experts.{j}.up_proj.weight", I, H)
            lin(f"mlp.experts.{j}.down_proj.weight", H, I)
        Is = I * cfg["n_shared_experts"]
        lin("mlp.shared_experts.gate_proj.weight", Is, H)
        lin("mlp.shared_experts.up_proj.weight", Is, H)
        lin("mlp.shared_experts.down_proj.weight", H, Is)
    else:
        I = cfg["intermediate_size"]
        lin("mlp.gate_proj.weight", I, H)
        lin("mlp.up_proj.weight", I, H)
        lin("mlp.down_proj.weight", H, I)
    return t


def make_checkpoint(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    t = {"model.embed_tokens.weight": torch.randn(V, H, generator=g)}
    L = cfg["num_hidden_layers"]
    for i in range(L):
        moe = cfg["n_routed_experts"] and i >= cfg["first_k_dense_replace"]
        t.update(layer_tensors(cfg, f"model.layers.{i}", i, g, moe))
    t["model.norm.weight"] = 0.6 + 0.8 * torch.rand(H, generator=g)
    t["lm_head.weight"] = torch.randn(V, H, generator=g) * (4.0 / math.sqrt(H))
    for m in range(cfg.get("num_nextn_predict_layers", 0)):  # MTP: DeepSeek-V3's layout
        p = f"model.layers.{L + m}"
        t.update(layer_tensors(cfg, p, L + m, g, True))
        t[f"{p}.embed_tokens.weight"] = t["model.embed_tokens.weight"].clone()
        t[f"{p}.enorm.weight"] = 0.6 + 0.8 * torch.rand(H, generator=g)
        t[f"{p}.hnorm.weight"] = 0.6 + 0.8 * torch.rand(H, generator=g)
        t[f"{p}.eh_proj.weight"] = torch.randn(H, 2 * H, generator=g) / math.sqrt(2 * H)
        t[f"{p}.shared_head.norm.weight"] = 0.6 + 0.8 * torch.rand(H, generator=g)
        t[f"{p}.shared_head.head.weight"] = t["lm_head.weight"].clone()
    # Stored in bf16 (norm-like fp32 vectors stay fp32 as DeepSeek stores the router bias).
    out = {}
    for k, v in t.items():
        out[k] = v.float() if k.endswith("e_score_correction_bias") else v.to(torch.bfloat16)
    return out


FP8_MAX = 448.0


def quantize_fp8_blocks(w, block):
    """DeepSeek FP8: w ~= fp8 * scale_inv per (block x block) tile; scale_inv = amax / 448."""
    n, k = w.shape
    bn, bk = block
    nb, kb = (n + bn - 1) // bn, (k + bk - 1) // bk
    w = w.float()
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    s = torch.empty(nb, kb, dtype=torch.float32)
    for i in range(nb):
        for j in range(kb):
            tile = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]
            amax = tile.abs().max().clamp(min=1e-12)
            scale_inv = (amax / FP8_MAX).float()
            q[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = (tile / scale_inv).to(torch.float8_e4m3fn)
            s[i, j] = scale_inv
    return q, s


def dequantize_fp8_blocks(q, s, block):
    n, k = q.shape
    bn, bk = block
    scale = s.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    return q.float() * scale


FP8_SUFFIXES = ("q_a_proj.weight", "q_b_proj.weight", "q_proj.weight", "kv_a_proj_with_mqa.weight",
                "kv_b_proj.weight", "o_proj.weight", "gate_proj.weight", "up_proj.weight", "down_proj.weight")


def to_fp8_checkpoint(tensors, block):
    """Returns (stored tensors, fp32 dequantized view for the reference)."""
    stored, deq = {}, {}
    for k, v in tensors.items():
        if k.endswith(FP8_SUFFIXES):
            q, s = quantize_fp8_blocks(v, block)
            stored[k] = q
            stored[k.replace(".weight", ".weight_scale_inv")] = s
            deq[k] = dequantize_fp8_blocks(q, s, block)
        else:
            stored[k] = v
            deq[k] = v.float()
    return stored, deq


# ---------------------------------------------------------------------------------------------
# Reference runs with transformers.
# ---------------------------------------------------------------------------------------------

def load_reference(model_dir, cfg, override_tensors=None):
    from transformers import AutoConfig, AutoModelForCausalLM
    hf_cfg = AutoConfig.from_pretrained(model_dir)
    if override_tensors is not None:
        # FP8 fixtures: build the model from the dequantized fp32 tensors (transformers' own FP8
        # path needs a GPU kernel and quantizes activations; ours dequantizes the weights).
        tmp = model_dir + ".deq"
        os.makedirs(tmp, exist_ok=True)
        save_file({k: v.contiguous() for k, v in override_tensors.items()}, os.path.join(tmp, "model.safetensors"))
        c = dict(cfg); c.pop("quantization_config", None)
        json.dump(c, open(os.path.join(tmp, "config.json"), "w"), indent=2)
        model_dir = tmp
    # Eager attention and eager (per-expert loop) MoE: the plain definition, any dimension.
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, output_loading_info=True,
                                                       attn_implementation="eager", experts_implementation="eager")
    if info["missing_keys"] or info.get("mismatched_keys"):
        raise SystemExit(f"{model_dir}: transformers did not take every weight: {info}")
    L = cfg["num_hidden_layers"]
    unexpected = [k for k in info["unexpected_keys"] if not k.startswith(f"model.layers.{L}.")]
    if unexpected:
        raise SystemExit(f"{model_dir}: transformers ignored checkpoint tensors: {unexpected[:10]}")
    model.eval()
    return model


def routing_margin(model, cfg, ids):
    """Smallest gap, over every MoE layer and token, at each discrete routing decision
    (the k-th vs (k+1)-th expert among allowed ones, and the topk_group-th vs next group)."""
    captured = []
    hooks = []
    for i, layer in enumerate(model.model.layers):
        if cfg["n_routed_experts"] and i >= cfg["first_k_dense_replace"]:
            hooks.append(layer.mlp.register_forward_pre_hook(lambda m, a, i=i: captured.append((i, a[0].detach()))))
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    sd = model.state_dict()
    margin = float("inf")
    E, k, ng, tg = cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["n_group"], cfg["topk_group"]
    for i, x in captured:
        w = sd[f"model.layers.{i}.mlp.gate.weight"].double()
        logits = x.reshape(-1, x.shape[-1]).double() @ w.T
        if cfg["scoring_func"] == "sigmoid":
            s = logits.sigmoid() + sd[f"model.layers.{i}.mlp.gate.e_score_correction_bias"].double()
            gs = s.view(-1, ng, E // ng).topk(min(2, E // ng), dim=-1)[0].sum(-1)
        else:
            s = logits.softmax(-1)
            gs = s.view(-1, ng, E // ng).max(-1).values
        if cfg["topk_method"] in ("noaux_tc", "group_limited_greedy") and tg < ng:
            gsort = gs.sort(-1, descending=True).values
            margin = min(margin, float((gsort[:, tg - 1] - gsort[:, tg]).min()))
            top = gs.topk(tg, dim=-1).indices
            mask = torch.zeros_like(gs).scatter_(1, top, 1).repeat_interleave(E // ng, 1).bool()
            s = s.masked_fill(~mask, -1e9)
        ssort = s.sort(-1, descending=True).values
        margin = min(margin, float((ssort[:, k - 1] - ssort[:, k]).min()))
    return margin


def top_margin(logits):
    v = logits.topk(2).values
    return float(v[0] - v[1])


def expected_outputs(model, cfg, prompts_ids):
    out = []
    worst = float("inf")
    for text, ids in prompts_ids:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        top = lp.topk(TOP_K, dim=-1)
        rows = [[[int(i), float(v)] for v, i in zip(top.values[p], top.indices[p])] for p in range(len(ids))]
        for p in range(len(ids)):
            worst = min(worst, top_margin(logits[p]))
        seq = list(ids)
        greedy = []
        for _ in range(N_GREEDY):  # full recompute per step: no cache semantics involved
            with torch.no_grad():
                last = model(torch.tensor([seq])).logits[0, -1].float()
            worst = min(worst, top_margin(last))
            nxt = int(last.argmax())
            greedy.append(nxt)
            seq.append(nxt)
        rmargin = min(routing_margin(model, cfg, seq), float("inf")) if cfg["n_routed_experts"] else float("inf")
        out.append({"text": text, "ids": ids, "top_logprobs": rows, "greedy": greedy})
        worst = min(worst, rmargin * 200)  # a routing gap of 1e-5 counts as the 2e-3 logit threshold
    return out, worst


BASE_V3 = dict(
    model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"],
    hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    num_hidden_layers=3, num_nextn_predict_layers=1,
    num_attention_heads=4, num_key_value_heads=4,
    q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
    n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=3, n_group=4, topk_group=2,
    first_k_dense_replace=1, moe_layer_freq=1, norm_topk_prob=True, routed_scaling_factor=2.5,
    scoring_func="sigmoid", topk_method="noaux_tc",
    max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                  "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    attention_bias=False, attention_dropout=0.0, hidden_act="silu", initializer_range=0.02,
    tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, torch_dtype="bfloat16",
    use_cache=True,
)

MODELS = {
    # (a) V3: q_lora, yarn (positions past the original context), grouped routing with bias.
    "v3_tiny": dict(BASE_V3),
    # (b) V2-Lite style: no q_lora, softmax routing, greedy top-k, no yarn.
    "v2_lite_tiny": dict(BASE_V3, model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"],
                         q_lora_rank=None, scoring_func="softmax", topk_method="greedy", n_group=1, topk_group=1,
                         norm_topk_prob=False, routed_scaling_factor=1.0, rope_scaling=None,
                         num_nextn_predict_layers=0, n_shared_experts=2),
    # (c) dimensions that are not multiples of 8 or 16, V3 routing, mscale != mscale_all_dim.
    "v3_odd_dims": dict(BASE_V3, hidden_size=52, intermediate_size=74, moe_intermediate_size=22,
                        num_attention_heads=3, num_key_value_heads=3, q_lora_rank=37, kv_lora_rank=27,
                        qk_nope_head_dim=11, qk_rope_head_dim=6, v_head_dim=13, n_routed_experts=9,
                        n_group=3, topk_group=2, num_experts_per_tok=2, num_hidden_layers=2,
                        rope_scaling={"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128,
                                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8}),
    # (d) DeepSeek FP8 block-quantized variant of (a) (32x32 blocks so tiny tensors span several).
    "v3_tiny_fp8": dict(BASE_V3, quantization_config={"quant_method": "fp8", "fmt": "e4m3",
                                                       "activation_scheme": "dynamic",
                                                       "weight_block_size": [32, 32]}),
    # DeepSeek-V2's group_limited_greedy routing (softmax, group max) is not a fixture: with
    # tiny random routers its group maxima sit within 1e-5 of each other for every seed tried
    # (1000..1099), so a fixture would test summation order. A unit test covers the rule.
}


TRAINED_PROMPTS = [
    "The function returns a pointer to",
    "In the beginning God created the heaven and the earth.",
    "import os\nimport sys\n\ndef main():\n",
    "Python is a programming language that",
    "SELECT name FROM users WHERE id = 42;",
    "<｜User｜>What does the ls command do?<｜Assistant｜>",
]


def reference_for_trained(model_dir, out_path, n_greedy=64):
    """Expected outputs of an existing (trained) model folder: top-10 logprobs at every position
    and greedy continuations, cut before the first step whose top-1/top-2 margin is < 1e-3 (a
    near-tie that fp32 summation order may flip)."""
    from transformers import AutoModelForCausalLM
    tk = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation="eager")
    model.eval()
    prompts = []
    for p in TRAINED_PROMPTS:
        ids = [0] + tk.encode(p, add_special_tokens=False).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        top = lp.topk(TOP_K, dim=-1)
        rows = [[[int(i), float(v)] for v, i in zip(top.values[q], top.indices[q])] for q in range(len(ids))]
        seq, greedy, margins = list(ids), [], []
        for _ in range(n_greedy):
            with torch.no_grad():
                last = model(torch.tensor([seq])).logits[0, -1].float()
            m = top_margin(last)
            if m < 1e-3:
                break
            margins.append(m)
            greedy.append(int(last.argmax()))
            seq.append(greedy[-1])
        prompts.append({"text": p, "ids": ids, "top_logprobs": rows, "greedy": greedy,
                        "greedy_text": tk.decode(greedy), "min_margin": min(margins) if margins else None})
        print(f"{p!r}: {len(greedy)} greedy tokens, min margin {prompts[-1]['min_margin']}", flush=True)
    import transformers
    json.dump({"model": os.path.basename(os.path.normpath(model_dir)), "transformers": transformers.__version__,
               "torch": torch.__version__, "dtype": "float32", "top_k": TOP_K, "prompts": prompts},
              open(out_path, "w"), ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reference", help="an existing model folder: write only its expected outputs to --out")
    ap.add_argument("--vocab-keep", type=int, default=3000)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if args.reference:
        reference_for_trained(args.reference, args.out)
        return
    if not args.tokenizer_dir:
        raise SystemExit("--tokenizer-dir is required to make the random golden models")

    tok_dir = os.path.join(args.out, "_tokenizer")
    vocab_size = shrink_tokenizer(args.tokenizer_dir, args.vocab_keep, tok_dir)
    tk = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    prompts_ids = []
    for p in PROMPTS:
        ids = [0] + tk.encode(p, add_special_tokens=False).ids  # BOS first, as add_bos_token says
        assert tk.decode(ids[1:], skip_special_tokens=False) == p, p
        prompts_ids.append((p, ids))
    summary = {}
    for name, base in MODELS.items():
        if args.only and name not in args.only:
            continue
        cfg = dict(base, vocab_size=vocab_size)
        d = os.path.join(args.out, name)
        for seed in range(1000, 1100):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            tensors = make_checkpoint(cfg, seed)
            deq = None
            if "quantization_config" in cfg:
                tensors, deq = to_fp8_checkpoint(tensors, cfg["quantization_config"]["weight_block_size"])
            save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
            json.dump({k: v for k, v in cfg.items() if v is not None or k == "q_lora_rank"},
                      open(os.path.join(d, "config.json"), "w"), indent=2)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(tok_dir, f), os.path.join(d, f))
            model = load_reference(d, cfg, deq)
            shutil.rmtree(d + ".deq", ignore_errors=True)
            expected, worst = expected_outputs(model, cfg, prompts_ids)
            print(f"{name} seed {seed}: worst margin {worst:.5f}", flush=True)
            if worst >= 2e-3:
                break
        else:
            raise SystemExit(f"{name}: no seed without near-ties")
        import transformers
        json.dump({"model": name, "seed": seed, "transformers": transformers.__version__, "torch": torch.__version__,
                   "dtype": "float32", "top_k": TOP_K, "prompts": expected},
                  open(os.path.join(d, "expected.json"), "w"), ensure_ascii=False)
        summary[name] = {"seed": seed, "worst_margin": worst, "params": sum(v.numel() for v in tensors.values())}
    shutil.rmtree(tok_dir)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
