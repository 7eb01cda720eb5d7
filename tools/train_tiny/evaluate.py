#!/usr/bin/env python3
"""Checks and measures an exported peregrine-tiny folder.

  --preflight: before training, a random-weight model of the training shape is exported and read
    back three ways: model.py (float32), a literal re-implementation of transformers'
    DeepseekV3ForCausalLM written here from the checkpoint names alone (per-expert loop, 0-filled
    group mask, eager attention; plus the MTP layer as vLLM's deepseek_mtp.py runs it), and
    transformers itself. Exit 3 when model.py disagrees with either (training would be wasted).
  default: the trained folder. transformers (float32, eager) against model.py on held-out text
    (logits, greedy continuations); held-out perplexity; MTP held-out loss, top-1 accuracy against the
    true token t+2 and agreement with the main model's greedy token at t+1; greedy samples and the
    MTP acceptance rate along them; which tokenizer_config "tokenizer_class" loads correctly with
    AutoTokenizer (written into the folder). Results go to --metrics (JSON).
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import checkpoint_to_model, config_from_hf, read_checkpoint_dir, write_folder  # noqa: E402
from model import TinyConfig, TinyDeepseekV3, count_parameters  # noqa: E402

PROMPTS = [
    "The history of the city begins",
    "In the beginning God created",
    "The function returns a pointer to",
    "To install the package, run",
    "She looked out of the window and",
    "The jury said that the election",
    "A database index is",
    "Python is a programming language that",
]


# ---------------------------------------------------------------------------------------------
# A literal float32 reading of the checkpoint, independent of model.py (transformers' semantics).
# ---------------------------------------------------------------------------------------------

def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _yarn(c):
    d, base = c["qk_rope_head_dim"], c["rope_theta"]
    pos_freqs = base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)
    rs = c.get("rope_scaling")
    scale = (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]) ** -0.5
    if not rs:
        return 1.0 / pos_freqs, 1.0, scale
    f = rs["factor"]

    def msc(s, m):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    def cdim(r):
        return d * math.log(rs["original_max_position_embeddings"] / (r * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(cdim(rs["beta_fast"])), 0), min(math.ceil(cdim(rs["beta_slow"])), d - 1)
    hi = hi + 0.001 if lo == hi else hi
    ramp = ((torch.arange(d // 2).float() - lo) / (hi - lo)).clamp(0, 1)
    inv = (1.0 / (f * pos_freqs)) * ramp + (1.0 / pos_freqs) * (1 - ramp)
    af = msc(f, rs["mscale"]) / msc(f, rs["mscale_all_dim"]) if rs.get("mscale") and rs.get("mscale_all_dim") else msc(f, 1)
    if rs.get("mscale_all_dim"):
        scale *= msc(f, rs["mscale_all_dim"]) ** 2
    return inv, af, scale


def _attn(t, p, c, x, cos, sin, scale):
    T = x.shape[0]
    nh, nope, rope, vd = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    R = c["kv_lora_rank"]
    W = lambda n: t[f"{p}.self_attn.{n}.weight"].float()  # noqa: E731
    q = _rms(x @ W("q_a_proj").T, W("q_a_layernorm"), 1e-6) @ W("q_b_proj").T
    q = q.view(T, nh, nope + rope)
    ckv = x @ W("kv_a_proj_with_mqa").T
    c_kv, k_pe = ckv[:, :R], ckv[:, R:]
    kv = (_rms(c_kv, W("kv_a_layernorm"), 1e-6) @ W("kv_b_proj").T).view(T, nh, nope + vd)
    k_nope, v = kv[..., :nope], kv[..., nope:]

    def rot(z):  # z [..., T, rope] interleaved pairs -> rotated (output in half-split order)
        z = z.reshape(*z.shape[:-1], rope // 2, 2).transpose(-1, -2).reshape(z.shape)
        z1, z2 = z[..., : rope // 2], z[..., rope // 2:]
        return z * cos + torch.cat((-z2, z1), -1) * sin

    q_pe = rot(q[..., nope:].transpose(0, 1))  # [nh, T, rope]
    k_pe = rot(k_pe.unsqueeze(0))  # [1, T, rope]
    qh = torch.cat((q[..., :nope].transpose(0, 1), q_pe), -1)
    kh = torch.cat((k_nope.transpose(0, 1), k_pe.expand(nh, T, rope)), -1)
    s = qh @ kh.transpose(-1, -2) * scale
    s = s + torch.full((T, T), float("-inf")).triu(1)
    o = torch.softmax(s, -1) @ v.transpose(0, 1)  # [nh, T, vd]
    return o.transpose(0, 1).reshape(T, nh * vd) @ W("o_proj").T


def _mlp(t, p, x):
    W = lambda n: t[f"{p}.{n}.weight"].float()  # noqa: E731
    return (F.silu(x @ W("gate_proj").T) * (x @ W("up_proj").T)) @ W("down_proj").T


def _moe(t, p, c, x):
    E, K, G, TG = c["n_routed_experts"], c["num_experts_per_tok"], c["n_group"], c["topk_group"]
    s = torch.sigmoid(x @ t[f"{p}.mlp.gate.weight"].float().T)
    sc = s + t[f"{p}.mlp.gate.e_score_correction_bias"].float()
    gs = sc.view(-1, G, E // G).topk(2, -1)[0].sum(-1)
    gi = gs.topk(TG, -1)[1]
    gm = torch.zeros_like(gs).scatter_(1, gi, 1).unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
    sc = sc.masked_fill(gm == 0, 0.0)  # transformers fills 0 (DeepSeek -inf): same while score+bias > 0
    idx = sc.topk(K, -1)[1]
    w = s.gather(1, idx)
    if c["norm_topk_prob"]:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * c["routed_scaling_factor"]
    out = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for j in range(K):
            out[n] += w[n, j] * _mlp(t, f"{p}.mlp.experts.{int(idx[n, j])}", x[n:n + 1])[0]
    return out + _mlp(t, f"{p}.mlp.shared_experts", x)


def _block(t, p, c, x, cos, sin, scale, moe):
    eps = c["rms_norm_eps"]
    x = x + _attn(t, p, c, _rms(x, t[f"{p}.input_layernorm.weight"].float(), eps), cos, sin, scale)
    h = _rms(x, t[f"{p}.post_attention_layernorm.weight"].float(), eps)
    return x + (_moe(t, p, c, h) if moe else _mlp(t, f"{p}.mlp", h))


@torch.no_grad()
def reference_forward(t, c, ids, next_ids=None):
    """ids [T] -> (main logits [T, V], MTP logits [T, V] or None). float32, CPU."""
    inv, af, scale = _yarn(c)
    T = len(ids)
    fr = torch.arange(T).float()[:, None] * inv[None, :]
    emb = torch.cat((fr, fr), -1)
    cos, sin = emb.cos() * af, emb.sin() * af
    L, eps = c["num_hidden_layers"], c["rms_norm_eps"]
    x = t["model.embed_tokens.weight"].float()[torch.as_tensor(ids)]
    for i in range(L):
        x = _block(t, f"model.layers.{i}", c, x, cos, sin, scale, i >= c["first_k_dense_replace"])
    h = _rms(x, t["model.norm.weight"].float(), eps)
    logits = h @ t["lm_head.weight"].float().T
    mtp = None
    if next_ids is not None and c.get("num_nextn_predict_layers", 0):
        p = f"model.layers.{L}"
        e = t[f"{p}.embed_tokens.weight"].float()[torch.as_tensor(next_ids)]
        y = torch.cat((_rms(e, t[f"{p}.enorm.weight"].float(), eps), _rms(h, t[f"{p}.hnorm.weight"].float(), eps)), -1)
        y = y @ t[f"{p}.eh_proj.weight"].float().T
        y = _block(t, p, c, y, cos, sin, scale, True)
        mtp = _rms(y, t[f"{p}.shared_head.norm.weight"].float(), eps) @ t[f"{p}.shared_head.head.weight"].float().T
    return logits, mtp


# ---------------------------------------------------------------------------------------------

def load_hf(model_dir, device):
    from transformers import AutoModelForCausalLM
    kw = dict(dtype=torch.float32, output_loading_info=True, attn_implementation="eager")
    try:
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, experts_implementation="eager", **kw)
    except TypeError:
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, **kw)
    L = json.load(open(os.path.join(model_dir, "config.json")))["num_hidden_layers"]
    unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith(f"model.layers.{L}.")]
    problems = {"missing_keys": list(info.get("missing_keys", [])), "mismatched_keys": [str(m) for m in info.get("mismatched_keys", [])],
                "unexpected_non_mtp_keys": unexpected,
                "unexpected_mtp_keys": len(info.get("unexpected_keys", [])) - len(unexpected)}
    return model.to(device).eval(), problems


def compare(a, b):
    a, b = a.float().cpu(), b.float().cpu()
    d = (a - b).abs()
    return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()), "logit_absmax": float(a.abs().max()),
            "top1_agree": float((a.argmax(-1) == b.argmax(-1)).float().mean())}


def preflight(args):
    torch.manual_seed(7)
    meta = json.load(open(os.path.join(args.data, "meta.json"))) if args.data else {"vocab_size": args.vocab, "bos_id": 0, "eos_id": 1}
    cfg = TinyConfig(vocab_size=meta["vocab_size"], bos_token_id=meta["bos_id"], eos_token_id=meta["eos_id"],
                     **(json.loads(args.config_json) if args.config_json else {}))
    model = TinyDeepseekV3(cfg)
    with torch.no_grad():  # a random model with some character: larger weights, uneven norms and biases
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08 if "gate_weight" not in name else 0.3)
            else:
                p.uniform_(0.6, 1.4)
        for m in model.moe_modules():
            m.e_score_correction_bias.uniform_(-0.3, 0.3)
    d = os.path.join(args.work, "preflight_model")
    write_folder(model, d, None)
    t = read_checkpoint_dir(d)
    c = json.load(open(os.path.join(d, "config.json")))
    mine = checkpoint_to_model(t, config_from_hf(d)).eval()
    g = torch.Generator().manual_seed(3)
    T = 48
    ids = torch.randint(3, cfg.vocab_size, (T + 1,), generator=g)
    inp, nxt = ids[:T], ids[1:T + 1]
    res = {"config": c}
    ok = True
    with torch.no_grad():
        out = mine(inp[None], mtp_ids=nxt[None])
    ref_main, ref_mtp = reference_forward(t, c, inp.tolist(), nxt.tolist())
    res["mine_vs_reference_main"] = compare(out["logits"][0], ref_main)
    res["mine_vs_reference_mtp"] = compare(out["mtp_logits"][0][0], ref_mtp)
    for k in ("mine_vs_reference_main", "mine_vs_reference_mtp"):
        r = res[k]
        if r["top1_agree"] < 0.97 or r["mean_abs_diff"] > 1e-3 * max(1.0, r["logit_absmax"]):
            ok = False
    try:
        hf, problems = load_hf(d, "cpu")
        res["hf_loading"] = problems
        with torch.no_grad():
            hl = hf(inp[None]).logits[0]
        res["mine_vs_hf_main"] = compare(out["logits"][0], hl)
        res["reference_vs_hf_main"] = compare(ref_main, hl)
        r = res["mine_vs_hf_main"]
        if problems["missing_keys"] or problems["unexpected_non_mtp_keys"] or r["top1_agree"] < 0.97 or \
                r["mean_abs_diff"] > 1e-3 * max(1.0, r["logit_absmax"]):
            ok = False
        res["hf_rotary_inv_freq"] = [float(v) for v in getattr(hf.model.rotary_emb, "inv_freq", torch.zeros(0))]
        res["hf_attention_scaling"] = float(getattr(hf.model.layers[0].self_attn, "scaling", float("nan")))
    except Exception as e:  # transformers API trouble is reported, it does not stop training
        res["hf_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    res["mine_inv_freq"] = [float(v) for v in mine.inv_freq]
    res["mine_scaling"] = mine.scaling
    res["ok"] = ok
    print(json.dumps({k: v for k, v in res.items() if k != "config"}, indent=1))
    json.dump(res, open(os.path.join(args.work, "preflight.json"), "w"), indent=1)
    if not ok:
        print("preflight: FAILED: model.py disagrees with the checkpoint's reading", flush=True)
        sys.exit(3)
    print("preflight: ok", flush=True)


# ---------------------------------------------------------------------------------------------

@torch.no_grad()
def greedy(model, ids, n, eos, device):
    seq = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([seq], device=device))["logits"][0, -1]
        nxt = int(logits.argmax())
        seq.append(nxt)
        if nxt == eos:
            break
    return seq[len(ids):]


def pick_tokenizer_class(model_dir, tok, report):
    """Finds a tokenizer_class with which AutoTokenizer reproduces tokenizer.json (+ BOS)."""
    from transformers import AutoTokenizer
    path = os.path.join(model_dir, "tokenizer_config.json")
    cfg = json.load(open(path, encoding="utf-8"))
    text = "Hello world.  The quick brown fox, 3.14159 (pi) -- done!\n\tNew line: café"
    raw = tok.encode(text, add_special_tokens=False).ids
    results = {}
    chosen = None
    for cls in ("LlamaTokenizerFast", "PreTrainedTokenizerFast"):
        cfg["tokenizer_class"] = cls
        json.dump(cfg, open(path, "w", encoding="utf-8"), ensure_ascii=False, indent=2)
        try:
            at = AutoTokenizer.from_pretrained(model_dir)
            ids = at(text)["input_ids"]
            dec = at.decode(ids, skip_special_tokens=True)
            chat = at.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
            r = {"class_loaded": type(at).__name__, "ids_ok": ids == [0] + raw, "ids_ok_without_bos": ids == raw,
                 "roundtrip_ok": dec == text, "chat_template_render": chat}
        except Exception as e:
            r = {"error": f"{type(e).__name__}: {e}"}
        results[cls] = r
        if chosen is None and r.get("ids_ok") and r.get("roundtrip_ok"):
            chosen = cls
    if chosen is None:
        chosen = next((c for c, r in results.items() if r.get("ids_ok_without_bos") and r.get("roundtrip_ok")),
                      "PreTrainedTokenizerFast")
    cfg["tokenizer_class"] = chosen
    json.dump(cfg, open(path, "w", encoding="utf-8"), ensure_ascii=False, indent=2)
    report["tokenizer_class_checks"] = results
    report["tokenizer_class"] = chosen


class _ByteTokenizer:
    """Stand-in for CPU smoke tests where `tokenizers` is not installed: ids = UTF-8 bytes + 3."""

    class _Enc:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text, add_special_tokens=False):
        return self._Enc([b + 3 for b in text.encode("utf-8")])

    def decode(self, ids, skip_special_tokens=True):
        return bytes(i - 3 for i in ids if 3 <= i < 259).decode("utf-8", errors="replace")


def final_eval(args):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        Tokenizer = None
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.time()
    report = {}
    tensors = read_checkpoint_dir(args.model_dir)
    c = json.load(open(os.path.join(args.model_dir, "config.json")))
    cfg = config_from_hf(c)
    mine = checkpoint_to_model(tensors, cfg, dev).eval()
    report["parameters"] = int(sum(v.numel() for v in tensors.values()))
    report["parameters_mtp_layer"] = int(sum(v.numel() for k, v in tensors.items() if k.startswith(f"model.layers.{cfg.num_hidden_layers}.")))
    report["safetensors_bytes"] = int(sum(os.path.getsize(os.path.join(args.model_dir, f)) for f in os.listdir(args.model_dir)
                                          if f.endswith(".safetensors")))
    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json")) if Tokenizer else _ByteTokenizer()
    eos = cfg.eos_token_id
    valid = torch.from_numpy(np.fromfile(os.path.join(args.data, "valid.bin"), dtype=np.uint16).astype(np.int64)).to(dev)
    T = args.seq_len

    # 1. held-out metrics (model.py, float32, the exported bf16 weights)
    n = (valid.numel() - 2) // T
    if args.max_windows:
        n = min(n, args.max_windows)
    tot = {"main_nll": 0.0, "mtp_nll": 0.0, "mtp_acc": 0.0, "mtp_agree": 0.0, "main_acc": 0.0}
    cnt_main = cnt_agree = 0
    with torch.no_grad():
        for i in range(0, n, 32):
            starts = torch.arange(i, min(n, i + 32), device=dev) * T
            win = valid[starts[:, None] + torch.arange(T + 2, device=dev)[None, :]]
            inp, nxt, nxt2 = win[:, :T], win[:, 1:T + 1], win[:, 2:T + 2]
            out = mine(inp, mtp_ids=nxt)
            lg, mg = out["logits"].float(), out["mtp_logits"][0].float()
            V = lg.shape[-1]
            tot["main_nll"] += float(F.cross_entropy(lg.reshape(-1, V), nxt.reshape(-1), reduction="sum"))
            tot["mtp_nll"] += float(F.cross_entropy(mg.reshape(-1, V), nxt2.reshape(-1), reduction="sum"))
            la, ma = lg.argmax(-1), mg.argmax(-1)
            tot["main_acc"] += float((la == nxt).sum())
            tot["mtp_acc"] += float((ma == nxt2).sum())
            tot["mtp_agree"] += float((ma[:, :-1] == la[:, 1:]).sum())
            cnt_main += nxt.numel()
            cnt_agree += ma[:, :-1].numel()
    report["heldout_tokens"] = cnt_main
    report["heldout_main_loss"] = tot["main_nll"] / cnt_main
    report["heldout_perplexity"] = math.exp(report["heldout_main_loss"])
    report["heldout_main_top1_acc"] = tot["main_acc"] / cnt_main
    report["heldout_mtp_loss"] = tot["mtp_nll"] / cnt_main
    report["heldout_mtp_top1_acc_vs_true_t2"] = tot["mtp_acc"] / cnt_main
    report["heldout_mtp_agreement_with_main_greedy_t1"] = tot["mtp_agree"] / cnt_agree
    print(f"eval: held-out main loss {report['heldout_main_loss']:.4f} ppl {report['heldout_perplexity']:.2f}, "
          f"MTP loss {report['heldout_mtp_loss']:.4f}, MTP acc {report['heldout_mtp_top1_acc_vs_true_t2']:.4f}, "
          f"MTP agreement {report['heldout_mtp_agreement_with_main_greedy_t1']:.4f} ({time.time() - t0:.0f}s)", flush=True)

    # 2. greedy samples and the MTP acceptance along them
    samples = []
    acc_hit = acc_n = 0
    for p in PROMPTS:
        ids = [cfg.bos_token_id] + tok.encode(p, add_special_tokens=False).ids
        gen = greedy(mine, ids, args.gen_tokens, eos, dev)
        seq = ids + gen
        with torch.no_grad():
            s = torch.tensor([seq], device=dev)
            out = mine(s[:, :-1], mtp_ids=s[:, 1:])
            draft = out["mtp_logits"][0][0].argmax(-1)  # draft for position t+2 given tok_{t+1}
        for tpos in range(len(ids) - 1, len(seq) - 2):  # drafts of generated tokens only
            acc_hit += int(int(draft[tpos]) == seq[tpos + 2])
            acc_n += 1
        samples.append({"prompt": p, "prompt_ids": ids, "greedy_ids": gen,
                        "continuation": tok.decode(gen, skip_special_tokens=True)})
        print(f"sample: {p!r} -> {samples[-1]['continuation']!r}", flush=True)
    report["greedy_mtp_acceptance"] = acc_hit / max(1, acc_n)
    report["greedy_mtp_acceptance_positions"] = acc_n
    report["samples"] = samples

    # 3. transformers against model.py
    try:
        hf, problems = load_hf(args.model_dir, dev)
        report["hf_loading"] = problems
        cmp = []
        with torch.no_grad():
            for i in range(min(4, n)):
                inp = valid[i * T:(i + 1) * T][None]
                cmp.append(compare(hf(inp).logits[0], mine(inp)["logits"][0]))
        report["hf_vs_mine_heldout"] = {"windows": len(cmp), "max_abs_diff": max(r["max_abs_diff"] for r in cmp),
                                        "mean_abs_diff": sum(r["mean_abs_diff"] for r in cmp) / len(cmp),
                                        "top1_agree": sum(r["top1_agree"] for r in cmp) / len(cmp),
                                        "logit_absmax": max(r["logit_absmax"] for r in cmp)}
        same = 0
        hf_samples = []
        for smp in samples:
            ids = torch.tensor([smp["prompt_ids"]], device=dev)
            g = hf.generate(ids, max_new_tokens=args.gen_tokens, do_sample=False, temperature=None, top_p=None,
                            eos_token_id=eos, pad_token_id=eos)
            hg = g[0, ids.shape[1]:].tolist()
            same += int(hg == smp["greedy_ids"])
            hf_samples.append(hg)
        report["hf_greedy_identical"] = f"{same}/{len(samples)}"
        report["hf_greedy_ids"] = hf_samples
        print(f"eval: transformers vs model.py: {json.dumps(report['hf_vs_mine_heldout'])}, greedy identical "
              f"{report['hf_greedy_identical']}, loading {json.dumps(problems)}", flush=True)
    except Exception as e:
        report["hf_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()

    # 4. the literal reference on one short window (CPU), main and MTP
    try:
        tcpu = {k: v for k, v in tensors.items()}
        w = valid[: 65].cpu()
        rl, rm = reference_forward(tcpu, c, w[:64].tolist(), w[1:65].tolist())
        with torch.no_grad():
            o = mine(w[None, :64].to(dev), mtp_ids=w[None, 1:65].to(dev))
        report["reference_vs_mine_main"] = compare(rl, o["logits"][0])
        report["reference_vs_mine_mtp"] = compare(rm, o["mtp_logits"][0][0])
    except Exception as e:
        report["reference_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()

    # 5. tokenizer_config's tokenizer_class for transformers' AutoTokenizer
    try:
        pick_tokenizer_class(args.model_dir, tok, report)
    except Exception as e:
        report["tokenizer_class_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    report["eval_seconds"] = time.time() - t0
    json.dump(report, open(args.metrics, "w"), indent=1, ensure_ascii=False)
    print(json.dumps({k: v for k, v in report.items() if k not in ("samples", "hf_greedy_ids", "tokenizer_class_checks")}, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preflight", action="store_true")
    ap.add_argument("--work", default="/tmp/peregrine_tiny_preflight")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--config-json", default="")
    ap.add_argument("--model-dir")
    ap.add_argument("--data", help="token folder (valid.bin, meta.json)")
    ap.add_argument("--metrics", default="metrics.json")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--max-windows", type=int, default=0, help="held-out windows to score (0: all)")
    args = ap.parse_args()
    if args.preflight:
        os.makedirs(args.work, exist_ok=True)
        preflight(args)
    else:
        final_eval(args)


if __name__ == "__main__":
    main()
