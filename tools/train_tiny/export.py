#!/usr/bin/env python3
"""Writes a trained TinyDeepseekV3 as a Hugging Face folder laid out as DeepSeek-V3's checkpoint:

  config.json                      model_type deepseek_v3, DeepseekV3ForCausalLM, num_nextn_predict_layers
  generation_config.json
  model-0000K-of-0000N.safetensors bf16 tensors (e_score_correction_bias in fp32, as DeepSeek stores it),
  model.safetensors.index.json     shards of at most --max-shard-bytes (the device tool returns files
                                   of at most 16 MiB)
  tokenizer.json, tokenizer_config.json  copied from --tokenizer-dir

Tensor names: the main model as transformers names it (model.embed_tokens, model.layers.{i}.self_attn.
{q_a_proj,q_a_layernorm,q_b_proj,kv_a_proj_with_mqa,kv_a_layernorm,kv_b_proj,o_proj}, input_layernorm,
post_attention_layernorm, mlp.{gate,up,down}_proj (dense) or mlp.gate.weight,
mlp.gate.e_score_correction_bias, mlp.experts.{j}.{gate,up,down}_proj, mlp.shared_experts.* (MoE),
model.norm, lm_head), and the MTP module as model.layers.{num_hidden_layers}.{embed_tokens, enorm,
hnorm, eh_proj, self_attn.*, mlp.*, input_layernorm, post_attention_layernorm, shared_head.norm,
shared_head.head} (DeepSeek-V3's model.safetensors.index.json lays out layer 61 this way; vLLM's
deepseek_mtp.py reads these names).

Safetensors are written by the small writer below (no dependency), read back by safetensors where
installed. Usage:
  python3 export.py --ckpt RUN/final.pt --tokenizer-dir TOK --out models/peregrine-tiny
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import TinyConfig, TinyDeepseekV3, count_parameters  # noqa: E402

_DT = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16", torch.int64: "I64", torch.int32: "I32"}
_DT_INV = {v: k for k, v in _DT.items()}


def _raw_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    header, offset, order = {}, 0, sorted(tensors, key=natural_key)
    for name in order:
        t = tensors[name]
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _DT[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = metadata or {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name in order:
            f.write(_raw_bytes(tensors[name]))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        dt = _DT_INV[h["dtype"]]
        if dt == torch.bfloat16:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=dt)
        out[name] = t.reshape(h["shape"]).clone()
    return out


def read_checkpoint_dir(d):
    """All tensors of a (possibly sharded) HF folder."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(d, f)))
    return out


def natural_key(name):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


# ---------------------------------------------------------------------------------------------
# Model <-> checkpoint names
# ---------------------------------------------------------------------------------------------

ATTN = ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")


def _layer_tensors(layer, prefix, cfg, bias_shift):
    t = {}
    for n in ATTN:
        t[f"{prefix}.self_attn.{n}.weight"] = getattr(layer.self_attn, n).weight
    t[f"{prefix}.input_layernorm.weight"] = layer.input_layernorm.weight
    t[f"{prefix}.post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
    m = layer.mlp
    if layer.is_moe:
        E, I = cfg.n_routed_experts, cfg.moe_intermediate_size
        t[f"{prefix}.mlp.gate.weight"] = m.gate_weight
        t[f"{prefix}.mlp.gate.e_score_correction_bias"] = (m.e_score_correction_bias + bias_shift(m)).float()
        for j in range(E):
            t[f"{prefix}.mlp.experts.{j}.gate_proj.weight"] = m.w_gate_up[j * I:(j + 1) * I]
            t[f"{prefix}.mlp.experts.{j}.up_proj.weight"] = m.w_gate_up[E * I + j * I:E * I + (j + 1) * I]
            t[f"{prefix}.mlp.experts.{j}.down_proj.weight"] = m.w_down[:, j * I:(j + 1) * I]
        for n in ("gate_proj", "up_proj", "down_proj"):
            t[f"{prefix}.mlp.shared_experts.{n}.weight"] = getattr(m.shared_experts, n).weight
    else:
        for n in ("gate_proj", "up_proj", "down_proj"):
            t[f"{prefix}.mlp.{n}.weight"] = getattr(m, n).weight
    return t


def bias_shift_nonneg(moe):
    """Uniform shift making every e_score_correction_bias >= 0 (routing is invariant to it); then
    score + bias > 0 and transformers' 0-filled group mask selects what DeepSeek's -inf mask does."""
    mn = float(moe.e_score_correction_bias.min())
    return -mn if mn < 0 else 0.0


def model_to_checkpoint(model, dtype=torch.bfloat16, bias_shift=bias_shift_nonneg):
    cfg = model.cfg
    L = cfg.num_hidden_layers
    t = {"model.embed_tokens.weight": model.embed_tokens.weight}
    for i, layer in enumerate(model.layers):
        t.update(_layer_tensors(layer, f"model.layers.{i}", cfg, bias_shift))
    t["model.norm.weight"] = model.norm.weight
    t["lm_head.weight"] = model.lm_head.weight
    for k, m in enumerate(model.mtp):
        p = f"model.layers.{L + k}"
        t[f"{p}.embed_tokens.weight"] = model.embed_tokens.weight
        t[f"{p}.enorm.weight"] = m.enorm.weight
        t[f"{p}.hnorm.weight"] = m.hnorm.weight
        t[f"{p}.eh_proj.weight"] = m.eh_proj.weight
        t.update(_layer_tensors(m.block, p, cfg, bias_shift))
        t[f"{p}.shared_head.norm.weight"] = m.shared_head_norm.weight
        t[f"{p}.shared_head.head.weight"] = model.lm_head.weight
    out = {}
    for k, v in t.items():
        v = v.detach().cpu()
        out[k] = v.float().clone() if k.endswith("e_score_correction_bias") else v.to(dtype).clone()
    return out


def checkpoint_to_model(tensors, cfg, device="cpu"):
    """Builds a TinyDeepseekV3 (float32) from checkpoint tensors (e.g. the bf16 export)."""
    model = TinyDeepseekV3(cfg)
    L, E, I = cfg.num_hidden_layers, cfg.n_routed_experts, cfg.moe_intermediate_size
    used = set()

    def g(name):
        used.add(name)
        return tensors[name].float()

    def load_layer(layer, prefix):
        with torch.no_grad():
            for n in ATTN:
                getattr(layer.self_attn, n).weight.copy_(g(f"{prefix}.self_attn.{n}.weight"))
            layer.input_layernorm.weight.copy_(g(f"{prefix}.input_layernorm.weight"))
            layer.post_attention_layernorm.weight.copy_(g(f"{prefix}.post_attention_layernorm.weight"))
            m = layer.mlp
            if layer.is_moe:
                m.gate_weight.copy_(g(f"{prefix}.mlp.gate.weight"))
                m.e_score_correction_bias.copy_(g(f"{prefix}.mlp.gate.e_score_correction_bias"))
                for j in range(E):
                    m.w_gate_up[j * I:(j + 1) * I].copy_(g(f"{prefix}.mlp.experts.{j}.gate_proj.weight"))
                    m.w_gate_up[E * I + j * I:E * I + (j + 1) * I].copy_(g(f"{prefix}.mlp.experts.{j}.up_proj.weight"))
                    m.w_down[:, j * I:(j + 1) * I].copy_(g(f"{prefix}.mlp.experts.{j}.down_proj.weight"))
                for n in ("gate_proj", "up_proj", "down_proj"):
                    getattr(m.shared_experts, n).weight.copy_(g(f"{prefix}.mlp.shared_experts.{n}.weight"))
            else:
                for n in ("gate_proj", "up_proj", "down_proj"):
                    getattr(m, n).weight.copy_(g(f"{prefix}.mlp.{n}.weight"))

    with torch.no_grad():
        model.embed_tokens.weight.copy_(g("model.embed_tokens.weight"))
        for i, layer in enumerate(model.layers):
            load_layer(layer, f"model.layers.{i}")
        model.norm.weight.copy_(g("model.norm.weight"))
        model.lm_head.weight.copy_(g("lm_head.weight"))
        for k, m in enumerate(model.mtp):
            p = f"model.layers.{L + k}"
            # training shares these with the main model; a checkpoint may carry other copies
            if not torch.equal(tensors[f"{p}.embed_tokens.weight"], tensors["model.embed_tokens.weight"]):
                raise SystemExit(f"{p}.embed_tokens.weight differs from model.embed_tokens.weight")
            if not torch.equal(tensors[f"{p}.shared_head.head.weight"], tensors["lm_head.weight"]):
                raise SystemExit(f"{p}.shared_head.head.weight differs from lm_head.weight")
            used.update({f"{p}.embed_tokens.weight", f"{p}.shared_head.head.weight"})
            m.enorm.weight.copy_(g(f"{p}.enorm.weight"))
            m.hnorm.weight.copy_(g(f"{p}.hnorm.weight"))
            m.eh_proj.weight.copy_(g(f"{p}.eh_proj.weight"))
            load_layer(m.block, p)
            m.shared_head_norm.weight.copy_(g(f"{p}.shared_head.norm.weight"))
    extra = set(tensors) - used
    if extra:
        raise SystemExit(f"checkpoint tensors not used: {sorted(extra)[:10]}")
    return model.to(device)


# ---------------------------------------------------------------------------------------------
# Folder
# ---------------------------------------------------------------------------------------------

def hf_config(cfg: TinyConfig):
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.0001,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "ep_size": 1,
        "first_k_dense_replace": cfg.first_k_dense_replace,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "initializer_range": cfg.initializer_range,
        "intermediate_size": cfg.intermediate_size,
        "kv_lora_rank": cfg.kv_lora_rank,
        "max_position_embeddings": cfg.max_position_embeddings,
        "moe_intermediate_size": cfg.moe_intermediate_size,
        "moe_layer_freq": 1,
        "n_group": cfg.n_group,
        "n_routed_experts": cfg.n_routed_experts,
        "n_shared_experts": cfg.n_shared_experts,
        "norm_topk_prob": cfg.norm_topk_prob,
        "num_attention_heads": cfg.num_attention_heads,
        "num_experts_per_tok": cfg.num_experts_per_tok,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_key_value_heads": cfg.num_key_value_heads,
        "num_nextn_predict_layers": cfg.num_nextn_predict_layers,
        "q_lora_rank": cfg.q_lora_rank,
        "qk_nope_head_dim": cfg.qk_nope_head_dim,
        "qk_rope_head_dim": cfg.qk_rope_head_dim,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_interleave": True,
        "rope_scaling": dict(cfg.rope_scaling),
        "rope_theta": cfg.rope_theta,
        "routed_scaling_factor": cfg.routed_scaling_factor,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": cfg.topk_group,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": cfg.v_head_dim,
        "vocab_size": cfg.vocab_size,
    }


def config_from_hf(d):
    c = json.load(open(os.path.join(d, "config.json"))) if isinstance(d, str) else d
    fields = TinyConfig.__dataclass_fields__
    return TinyConfig(**{k: c[k] for k in fields if k in c})


GENERATION_CONFIG = {"bos_token_id": 0, "eos_token_id": 1, "do_sample": True, "temperature": 0.6, "top_p": 0.95}


def write_folder(model, out_dir, tokenizer_dir=None, max_shard_bytes=15_000_000, extra_files=()):
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".index.json")):
            os.remove(os.path.join(out_dir, f))
    tensors = model_to_checkpoint(model)
    names = sorted(tensors, key=natural_key)
    shards, cur, cur_bytes = [], [], 0
    for n in names:
        b = tensors[n].numel() * tensors[n].element_size()
        if cur and cur_bytes + b > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(n)
        cur_bytes += b
    shards.append(cur)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if len(shards) == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    else:
        wm = {}
        for k, sh in enumerate(shards):
            fn = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(os.path.join(out_dir, fn), {n: tensors[n] for n in sh})
            wm.update({n: fn for n in sh})
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items(), key=lambda kv: natural_key(kv[0])))},
                  open(os.path.join(out_dir, "model.safetensors.index.json"), "w"), indent=2)
    cfg = hf_config(model.cfg)
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    gen = dict(GENERATION_CONFIG, bos_token_id=model.cfg.bos_token_id, eos_token_id=model.cfg.eos_token_id)
    json.dump(gen, open(os.path.join(out_dir, "generation_config.json"), "w"), indent=2)
    if tokenizer_dir:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokenizer_dir, f), os.path.join(out_dir, f))
    for f in extra_files:
        shutil.copy(f, out_dir)
    n_params = sum(t.numel() for t in tensors.values())
    return {"tensors": len(tensors), "parameters": n_params, "bytes": total, "shards": len(shards)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True, help="final.pt written by train.py")
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-shard-bytes", type=int, default=15_000_000)
    args = ap.parse_args()
    ck = torch.load(args.ckpt, map_location="cpu")
    cfg = TinyConfig(**ck["config"])
    model = TinyDeepseekV3(cfg)
    model.load_state_dict(ck["model"])
    info = write_folder(model, args.out, args.tokenizer_dir, args.max_shard_bytes)
    info["parameters_model"] = count_parameters(model)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
