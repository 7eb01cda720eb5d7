#!/usr/bin/env python3
"""Trains peregrine-tiny (model.py) on the token files written by train_tokenizer.py.

Loss = CE(main, tok_{t+1}) + mtp_lambda * CE(MTP, tok_{t+2}) + seq_aux_alpha * sequence-wise balance
loss (DeepSeek-V3 report eq. 17-20), and after every optimizer step the auxiliary-loss-free balancing
update of each MoE layer's e_score_correction_bias: b_i += gamma * sign(mean load - load_i).
AdamW (betas 0.9/0.95, weight decay on matrices only), linear warmup then cosine decay to
min_lr_ratio * lr, gradient clipping, bf16 autocast, fixed seeds. Batches are random windows of
seq_len + 2 tokens of the training stream (documents as <BOS> text <EOS>), drawn from a seeded
generator: --steps N fixes the run; --time-budget S picks N from the measured step time (the
chosen N is logged; pass it as --steps to repeat the run).

  python3 train.py --data DATA --out RUN [--steps N | --time-budget 270]
writes RUN/final.pt ({"config", "model"}), RUN/train_log.json.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import TinyConfig, TinyDeepseekV3, count_parameters  # noqa: E402


def load_tokens(path, device):
    arr = np.fromfile(path, dtype=np.uint16)
    return torch.from_numpy(arr.astype(np.int32)).to(device)


def batch_windows(tokens, starts, L):
    idx = starts.to(tokens.device)[:, None] + torch.arange(L, device=tokens.device)[None, :]
    return tokens[idx].long()


def losses(model, win, mtp_lambda, seq_aux_alpha, compute_dtype):
    """win [B, T+2]: inputs win[:, :T], main targets win[:, 1:T+1], MTP inputs win[:, 1:T+1],
    MTP targets win[:, 2:T+2]."""
    T = win.shape[1] - 2
    inp, nxt, nxt2 = win[:, :T], win[:, 1:T + 1], win[:, 2:T + 2]
    out = model(inp, mtp_ids=nxt, compute_dtype=compute_dtype)
    V = out["logits"].shape[-1]
    main = F.cross_entropy(out["logits"].float().reshape(-1, V), nxt.reshape(-1))
    mtp = F.cross_entropy(out["mtp_logits"][0].float().reshape(-1, V), nxt2.reshape(-1))
    aux = out["seq_aux"].sum()
    total = main + mtp_lambda * mtp + seq_aux_alpha * aux
    return total, main.detach(), mtp.detach(), aux.detach(), out["loads"].detach()


@torch.no_grad()
def evaluate(model, tokens, T, max_windows, compute_dtype, batch=64):
    """Mean main / MTP CE over non-overlapping windows of the held-out stream."""
    model.eval()
    n = (tokens.numel() - 2) // T
    starts = torch.arange(n) * T
    if max_windows and n > max_windows:
        starts = starts[:max_windows]
    tot_main = tot_mtp = 0.0
    cnt = 0
    for i in range(0, len(starts), batch):
        win = batch_windows(tokens, starts[i:i + batch], T + 2)
        with torch.autocast(device_type=tokens.device.type, dtype=torch.bfloat16, enabled=compute_dtype == torch.bfloat16):
            _, main, mtp, _, _ = losses(model, win, 0.0, 0.0, compute_dtype)
        tot_main += float(main) * win.shape[0]
        tot_mtp += float(mtp) * win.shape[0]
        cnt += win.shape[0]
    model.train()
    return tot_main / cnt, tot_mtp / cnt


def lr_at(step, total, peak, warmup, min_ratio):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="folder with train.bin, valid.bin, meta.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--steps", type=int, default=0, help="total optimizer steps (0: from --time-budget)")
    ap.add_argument("--time-budget", type=float, default=270.0, help="seconds of training when --steps is 0")
    ap.add_argument("--calib-steps", type=int, default=40)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--mtp-lambda", type=float, default=0.3)
    ap.add_argument("--bias-gamma", type=float, default=1e-3)
    ap.add_argument("--seq-aux-alpha", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--compile", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-windows", type=int, default=128)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--bf16", type=int, default=1)
    ap.add_argument("--config-json", default="", help="TinyConfig overrides as JSON (smoke tests)")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    meta = json.load(open(os.path.join(args.data, "meta.json")))
    train_tok = load_tokens(os.path.join(args.data, "train.bin"), dev)
    valid_tok = load_tokens(os.path.join(args.data, "valid.bin"), dev)
    overrides = json.loads(args.config_json) if args.config_json else {}
    cfg = TinyConfig(vocab_size=meta["vocab_size"], bos_token_id=meta["bos_id"], eos_token_id=meta["eos_id"],
                     **overrides)
    ro = cfg.rope_scaling.get("original_max_position_embeddings")
    if ro and ro != args.seq_len:
        print(f"train: note: seq_len {args.seq_len} != rope original_max_position_embeddings {ro}")
    model = TinyDeepseekV3(cfg).to(dev)
    n_params = count_parameters(model)
    print(f"train: {n_params:,} parameters as exported ({sum(p.numel() for p in model.parameters()):,} trained), "
          f"train {train_tok.numel():,} tokens, valid {valid_tok.numel():,} tokens", flush=True)

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "embed" not in name else no_decay).append(p)
    opt_kw = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **opt_kw)
    compute_dtype = torch.bfloat16 if args.bf16 else torch.float32
    moes = model.moe_modules()

    def step_fn(win):
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bool(args.bf16)):
            return losses(model, win, args.mtp_lambda, args.seq_aux_alpha, compute_dtype)

    run_step = step_fn
    compiled = False
    if args.compile and hasattr(torch, "compile") and dev.type == "cuda":
        run_step = torch.compile(step_fn)
        compiled = True

    gen = torch.Generator().manual_seed(args.seed)
    T, B = args.seq_len, args.batch
    n_start = train_tok.numel() - (T + 2)
    history = {"train": [], "eval": []}
    total_steps = args.steps if args.steps > 0 else 10 ** 9
    t_start = time.time()
    t_calib = None
    step = 0
    tokens_seen = 0
    log_acc = None
    while step < total_steps:
        lr = lr_at(step, total_steps if args.steps > 0 or t_calib is not None else 10 ** 9, args.lr,
                   args.warmup, args.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, n_start, (B,), generator=gen)
        win = batch_windows(train_tok, starts, T + 2)
        try:
            total, main, mtp, aux, loads = run_step(win)
            opt.zero_grad(set_to_none=True)
            total.backward()
        except Exception as e:  # a compiler failure must not cost the run
            if not compiled:
                raise
            print(f"train: torch.compile failed ({type(e).__name__}: {str(e)[:400]}); continuing in eager mode", flush=True)
            run_step, compiled = step_fn, False
            total, main, mtp, aux, loads = run_step(win)
            opt.zero_grad(set_to_none=True)
            total.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        with torch.no_grad():  # auxiliary-loss-free balancing (bias update)
            for k, m in enumerate(moes):
                ld = loads[k]
                m.e_score_correction_bias.add_(args.bias_gamma * torch.sign(ld.mean() - ld))
        step += 1
        tokens_seen += B * T
        acc = torch.stack([main, mtp, aux.float(), gnorm.float()])
        log_acc = acc if log_acc is None else log_acc + acc
        if step == 1:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            print(f"train: first step done after {time.time() - t_start:.1f}s (compiled={compiled})", flush=True)
            t_first = time.time()
        if args.steps == 0 and t_calib is None and step == 1 + args.calib_steps:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            dt = (time.time() - t_first) / args.calib_steps
            remaining = args.time_budget - (time.time() - t_start)
            # evaluations cost about 1 step each per 8 windows
            n_evals = 1 + int(remaining / dt) // args.eval_every
            eval_cost = n_evals * (args.eval_windows / 8) * dt
            total_steps = step + max(0, int((remaining - eval_cost) / dt))
            t_calib = time.time()
            print(f"train: {dt * 1000:.1f} ms/step ({B * T / dt:,.0f} tokens/s): total steps {total_steps}", flush=True)
        if step % args.log_every == 0 or step == total_steps:
            a = (log_acc / args.log_every).tolist() if step % args.log_every == 0 else acc.tolist()
            log_acc = None
            ld = loads.float()
            imb = float((ld.max(dim=1).values / ld.mean(dim=1).clamp(min=1)).max())
            bias_rng = max(float(m.e_score_correction_bias.max() - m.e_score_correction_bias.min()) for m in moes)
            el = time.time() - t_start
            rec = {"step": step, "lr": lr, "main": a[0], "mtp": a[1], "seq_aux": a[2], "grad_norm": a[3],
                   "max_load_ratio": imb, "bias_range": bias_rng, "tokens": tokens_seen, "elapsed_s": el}
            history["train"].append(rec)
            print(f"step {step:5d}/{total_steps if total_steps < 10 ** 9 else '?'} lr {lr:.2e} main {a[0]:.4f} "
                  f"mtp {a[1]:.4f} aux {a[2]:.3f} gn {a[3]:.2f} maxload {imb:.2f} bias {bias_rng:.3f} "
                  f"{tokens_seen / max(el, 1e-9):,.0f} tok/s {el:.0f}s", flush=True)
        if step % args.eval_every == 0 or step == total_steps:
            vm, vt = evaluate(model, valid_tok, T, args.eval_windows, compute_dtype)
            history["eval"].append({"step": step, "valid_main": vm, "valid_mtp": vt, "elapsed_s": time.time() - t_start})
            print(f"eval {step:5d}: valid main {vm:.4f} (ppl {math.exp(vm):.2f})  mtp {vt:.4f}", flush=True)
    train_time = time.time() - t_start
    summary = {"steps": step, "tokens_seen": tokens_seen, "train_time_s": train_time, "compiled": compiled,
               "args": vars(args), "config": cfg.to_dict(), "parameters_exported": n_params,
               "train_tokens": int(train_tok.numel()), "valid_tokens": int(valid_tok.numel()),
               "epochs": tokens_seen / train_tok.numel(), "history": history,
               "e_score_correction_bias": [m.e_score_correction_bias.tolist() for m in moes]}
    json.dump(summary, open(os.path.join(args.out, "train_log.json"), "w"), indent=1)
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"config": cfg.to_dict(), "model": sd, "steps": step}, os.path.join(args.out, "final.pt"))
    print(f"train: done, {step} steps, {tokens_seen:,} tokens ({summary['epochs']:.2f} epochs) in {train_time:.0f}s", flush=True)


if __name__ == "__main__":
    main()
