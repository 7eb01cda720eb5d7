"""DeepSeek-V3 in plain PyTorch, for training peregrine-tiny: MLA attention (q_lora, decoupled RoPE
with YaRN), DeepSeekMoE (sigmoid scores, e_score_correction_bias, grouped top-k, shared expert),
and the multi-token-prediction (MTP) module.

The forward pass computes what transformers' DeepseekV3ForCausalLM computes for the same weights
(rope_interleave = true, as DeepSeek's checkpoints), except two things that change nothing:
  * routed experts run dense: every expert on every token, weighted by a [tokens, experts] matrix
    that is zero outside the chosen top-k (same result, one matmul per projection, no dispatch);
  * the group mask fills -inf (DeepSeek's definition); transformers fills 0. They pick the same
    experts whenever score + bias > 0, which export.py guarantees by shifting the bias (a uniform
    shift of e_score_correction_bias never changes a routing decision).

MTP (DeepSeek-V3 report, sec. 2.2; checkpoint layer index num_hidden_layers): for position t,
  h'_t = eh_proj([enorm(embed(tok_{t+1})) ; hnorm(h_t)])       (embedding first, as vLLM reads it)
where h_t is the main model's hidden state after its final RMSNorm (model.norm); then one decoder
block (causal attention over the MTP stream), shared_head.norm, shared_head.head -> logits for
tok_{t+2}. During training the MTP shares embed_tokens and lm_head with the main model (as in the
report); export.py writes them as the MTP layer's own copies, as DeepSeek's checkpoint does.
"""
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


def _yarn_default():
    return {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512, "beta_fast": 32,
            "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}


@dataclass
class TinyConfig:
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 512          # dense MLP (first_k_dense_replace layers)
    moe_intermediate_size: int = 96       # each routed expert and (x n_shared_experts) the shared one
    num_hidden_layers: int = 4
    num_nextn_predict_layers: int = 1
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    q_lora_rank: int = 128
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    n_routed_experts: int = 16
    n_shared_experts: int = 1
    num_experts_per_tok: int = 4
    n_group: int = 4
    topk_group: int = 2
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    first_k_dense_replace: int = 1
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048   # = factor * original_max_position_embeddings
    rope_scaling: dict = field(default_factory=_yarn_default)
    bos_token_id: int = 0
    eos_token_id: int = 1
    initializer_range: float = 0.02

    @property
    def qk_head_dim(self):
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def to_dict(self):
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# RoPE with YaRN, as transformers' _compute_yarn_parameters (float32, step by step).
# ---------------------------------------------------------------------------------------------

def yarn_get_mscale(scale=1.0, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def rope_parameters(cfg):
    """Returns (inv_freq [rope_dim/2] float32, cos/sin attention factor, softmax scale)."""
    dim, base = cfg.qk_rope_head_dim, cfg.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim)
    scale = cfg.qk_head_dim ** -0.5
    rs = cfg.rope_scaling
    if not rs or rs.get("type", rs.get("rope_type")) in (None, "default"):
        return 1.0 / pos_freqs, 1.0, scale
    assert rs.get("type", rs.get("rope_type")) == "yarn"
    factor = float(rs["factor"])
    orig = rs["original_max_position_embeddings"]
    beta_fast, beta_slow = rs.get("beta_fast", 32), rs.get("beta_slow", 1)
    mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        attention_factor = float(yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim))
    else:
        attention_factor = yarn_get_mscale(factor)

    def correction_dim(num_rot):
        return (dim * math.log(orig / (num_rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq_extra = 1.0 / pos_freqs
    inv_freq_inter = 1.0 / (factor * pos_freqs)
    inv_freq = inv_freq_inter * (1 - extrapolation_factor) + inv_freq_extra * extrapolation_factor
    if mscale_all_dim:
        m = yarn_get_mscale(factor, mscale_all_dim)
        scale = scale * m * m
    return inv_freq, attention_factor, scale


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope_interleave(x, cos, sin):
    """x [..., T, d] stored interleaved (pairs (2i, 2i+1)); cos/sin [T, d] (freqs repeated twice)."""
    shp = x.shape
    x = x.reshape(*shp[:-1], shp[-1] // 2, 2).transpose(-1, -2).reshape(shp)
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dt)


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class MLAttention(nn.Module):
    def __init__(self, cfg, scaling):
        super().__init__()
        H, nh = cfg.hidden_size, cfg.num_attention_heads
        self.nh, self.nope, self.rope, self.vdim = nh, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.qk = cfg.qk_head_dim
        self.kv_lora = cfg.kv_lora_rank
        self.scaling = scaling
        self.q_a_proj = nn.Linear(H, cfg.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(cfg.q_lora_rank)
        self.q_b_proj = nn.Linear(cfg.q_lora_rank, nh * self.qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(H, cfg.kv_lora_rank + cfg.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(cfg.kv_lora_rank)
        self.kv_b_proj = nn.Linear(cfg.kv_lora_rank, nh * (cfg.qk_nope_head_dim + cfg.v_head_dim), bias=False)
        self.o_proj = nn.Linear(nh * cfg.v_head_dim, H, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, self.nh, self.qk).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [self.nope, self.rope], dim=-1)
        ckv = self.kv_a_proj_with_mqa(x)
        k_pass, k_rot = torch.split(ckv, [self.kv_lora, self.rope], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(B, T, self.nh, self.nope + self.vdim).transpose(1, 2)
        k_pass, v = torch.split(kv, [self.nope, self.vdim], dim=-1)
        k_rot = k_rot.view(B, 1, T, self.rope)
        q_rot = apply_rope_interleave(q_rot, cos, sin)
        k_rot = apply_rope_interleave(k_rot, cos, sin).expand(B, self.nh, T, self.rope)
        q = torch.cat((q_pass, q_rot.to(q_pass.dtype)), dim=-1)
        k = torch.cat((k_pass, k_rot.to(k_pass.dtype)), dim=-1).to(q.dtype)
        v = v.to(q.dtype)
        if _HAS_SDPA:
            vp = F.pad(v, (0, self.qk - self.vdim)) if self.qk != self.vdim else v  # flash wants equal dims
            o = F.scaled_dot_product_attention(q, k, vp, is_causal=True, scale=self.scaling)[..., : self.vdim]
        else:  # torch < 2.0 (CPU smoke tests)
            s = torch.matmul(q, k.transpose(-1, -2)) * self.scaling
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
            o = torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), v)
        o = o.transpose(1, 2).reshape(B, T, self.nh * self.vdim)
        return self.o_proj(o)


class MoE(nn.Module):
    """Routed experts stored stacked: w_gate_up [2*E*I, H] (gate rows of expert e at e*I, up rows at
    E*I + e*I), w_down [H, E*I] (columns e*I..). Dense evaluation, exact DeepSeek-V3 routing."""

    def __init__(self, cfg):
        super().__init__()
        H, E, I = cfg.hidden_size, cfg.n_routed_experts, cfg.moe_intermediate_size
        self.H, self.E, self.I = H, E, I
        self.k, self.ng, self.tg = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
        self.norm_topk_prob, self.rsf = cfg.norm_topk_prob, cfg.routed_scaling_factor
        self.gate_weight = nn.Parameter(torch.empty(E, H))
        self.register_buffer("e_score_correction_bias", torch.zeros(E, dtype=torch.float32))
        self.w_gate_up = nn.Parameter(torch.empty(2 * E * I, H))
        self.w_down = nn.Parameter(torch.empty(H, E * I))
        self.shared_experts = MLP(H, I * cfg.n_shared_experts)

    def route(self, xf):
        """xf [N, H] -> (scores [N, E] fp32 sigmoid, topk idx [N, k], combine weights [N, E] fp32)."""
        with torch.autocast(device_type=xf.device.type, enabled=False):  # the router runs in fp32
            logits = F.linear(xf.float(), self.gate_weight.float())
        scores = logits.sigmoid()
        with torch.no_grad():
            sfc = scores.detach() + self.e_score_correction_bias.unsqueeze(0)
            N = sfc.shape[0]
            gs = sfc.view(N, self.ng, self.E // self.ng).topk(2, dim=-1)[0].sum(dim=-1)
            gidx = gs.topk(self.tg, dim=-1)[1]
            gmask = torch.zeros_like(gs).scatter_(1, gidx, 1.0)
            emask = gmask.unsqueeze(-1).expand(N, self.ng, self.E // self.ng).reshape(N, self.E)
            sfc = sfc.masked_fill(emask == 0, float("-inf"))
            idx = sfc.topk(self.k, dim=-1)[1]
        w = scores.gather(1, idx)
        if self.norm_topk_prob:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        w = w * self.rsf
        comb = torch.zeros_like(scores).scatter(1, idx, w)
        return scores, idx, comb

    def forward(self, x):
        B, T, H = x.shape
        xf = x.reshape(-1, H)
        scores, idx, comb = self.route(xf)
        gu = F.linear(xf, self.w_gate_up)
        g, u = gu.split(self.E * self.I, dim=-1)
        a = F.silu(g) * u  # [N, E*I]
        a = (a.view(-1, self.E, self.I) * comb.to(a.dtype).unsqueeze(-1)).view(-1, self.E * self.I)
        routed = F.linear(a, self.w_down)
        out = routed.to(x.dtype).view(B, T, H) + self.shared_experts(x)
        # statistics: tokens per expert (bias update) and the sequence-wise balance loss terms
        sel = (comb > 0).float()  # [N, E]
        load = sel.sum(0)
        f = sel.view(B, T, self.E).mean(1) * (self.E / self.k)  # [B, E]
        p = (scores / scores.sum(-1, keepdim=True)).view(B, T, self.E).mean(1)  # [B, E]
        seq_aux = (f * p).sum(-1).mean()
        return out, load, seq_aux


class DecoderLayer(nn.Module):
    def __init__(self, cfg, moe, scaling):
        super().__init__()
        self.self_attn = MLAttention(cfg, scaling)
        self.is_moe = moe
        self.mlp = MoE(cfg) if moe else MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        if self.is_moe:
            m, load, aux = self.mlp(h)
        else:
            m, load, aux = self.mlp(h), None, None
        return x + m, load, aux


class MTPLayer(nn.Module):
    def __init__(self, cfg, scaling):
        super().__init__()
        H = cfg.hidden_size
        self.enorm = RMSNorm(H, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(H, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.block = DecoderLayer(cfg, moe=True, scaling=scaling)
        self.shared_head_norm = RMSNorm(H, cfg.rms_norm_eps)

    def forward(self, h_prev, emb_next, cos, sin):
        x = self.eh_proj(torch.cat([self.enorm(emb_next), self.hnorm(h_prev)], dim=-1))
        x, load, aux = self.block(x, cos, sin)
        return x, load, aux


class TinyDeepseekV3(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        inv_freq, attention_factor, scaling = rope_parameters(cfg)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_factor = attention_factor
        self.scaling = scaling
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(
            [DecoderLayer(cfg, moe=i >= cfg.first_k_dense_replace, scaling=scaling) for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = nn.ModuleList([MTPLayer(cfg, scaling) for _ in range(cfg.num_nextn_predict_layers)])
        self.reset_parameters()

    def reset_parameters(self):
        std = self.cfg.initializer_range
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, mean=0.0, std=std)
            elif isinstance(mod, RMSNorm):
                nn.init.ones_(mod.weight)
            elif isinstance(mod, MoE):
                nn.init.normal_(mod.gate_weight, mean=0.0, std=std)
                nn.init.normal_(mod.w_gate_up, mean=0.0, std=std)
                nn.init.normal_(mod.w_down, mean=0.0, std=std)
                mod.e_score_correction_bias.zero_()

    def moe_modules(self):
        """MoE blocks in checkpoint order: main layers, then MTP layers."""
        mods = [l.mlp for l in self.layers if l.is_moe]
        mods += [m.block.mlp for m in self.mtp]
        return mods

    def rope_cos_sin(self, T, device, dtype):
        pos = torch.arange(T, device=device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq.to(device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_factor).to(dtype), (emb.sin() * self.attention_factor).to(dtype)

    def forward(self, input_ids, mtp_ids=None, compute_dtype=None):
        """input_ids [B, T]. mtp_ids [B, T]: the token after each input position (tok_{t+1}); when
        given, the MTP module runs too. Returns dict(logits, mtp_logits [list], hidden, loads [n_moe, E],
        seq_aux [n_moe])."""
        B, T = input_ids.shape
        x = self.embed_tokens(input_ids)
        dt = compute_dtype or x.dtype
        cos, sin = self.rope_cos_sin(T, input_ids.device, dt if dt != torch.float32 else torch.float32)
        loads, auxes = [], []
        for layer in self.layers:
            x, load, aux = layer(x, cos, sin)
            if load is not None:
                loads.append(load)
                auxes.append(aux)
        h = self.norm(x)
        logits = self.lm_head(h)
        out = {"logits": logits, "hidden": h, "mtp_logits": []}
        if mtp_ids is not None:
            prev = h
            for m in self.mtp:
                y, load, aux = m(prev, self.embed_tokens(mtp_ids), cos, sin)
                loads.append(load)
                auxes.append(aux)
                out["mtp_logits"].append(self.lm_head(m.shared_head_norm(y)))
                prev = y
        out["loads"] = torch.stack(loads) if loads else None
        out["seq_aux"] = torch.stack(auxes) if auxes else None
        return out


def count_parameters(model, with_mtp_copies=True):
    """Parameters as exported: the MTP layer's embed_tokens and shared_head.head counted as copies."""
    n = sum(p.numel() for p in model.parameters())
    n += sum(b.numel() for name, b in model.named_buffers() if name.endswith("e_score_correction_bias"))
    if with_mtp_copies:
        n += len(model.mtp) * (model.embed_tokens.weight.numel() + model.lm_head.weight.numel())
    return n
