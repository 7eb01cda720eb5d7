#!/usr/bin/env python3
"""Trains peregrine-tiny's byte-level BPE with Hugging Face `tokenizers` and tokenizes the corpus.

The tokenizer has DeepSeek-V3's structure exactly: its normalizer, pre_tokenizer (digit / CJK /
word-punctuation Split regexes, then ByteLevel), post_processor and decoder are copied from the
real DeepSeek-V3 tokenizer.json (dsv3_tokenizer_template.json, made by prepare_data.sh); its
<｜begin▁of▁sentence｜> / <｜end▁of▁sentence｜> / <｜▁pad▁｜> are ids 0 / 1 / 2 as in DeepSeek-V3; the
other added tokens DeepSeek-V3's chat template and tool calls use (<｜User｜>, <｜Assistant｜>,
<｜tool▁calls▁begin｜>, ... with DeepSeek-R1's <think> and </think>) are the last ids, with
DeepSeek's flags. merges are written in DeepSeek's "a b" string form. tokenizer_config.json is
DeepSeek-V3's (chat_template, bos/eos/pad, add_bos_token true) with model_max_length set to the
model's context.

  python3 train_tokenizer.py --data DIR_WITH_JSONL_XZ --out TOKDIR --tokens-out DATADIR [--vocab 8192]

writes TOKDIR/{tokenizer.json, tokenizer_config.json} and DATADIR/{train.bin, valid.bin, meta.json}
(uint16 token streams, each document as <BOS> text <EOS>).
"""
import argparse
import json
import lzma
import os
import time

import numpy as np
from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
THINK = ["<think>", "</think>"]  # DeepSeek-R1's reasoning delimiters (ordinary added tokens there)


def read_docs(path):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def build_untrained(template):
    spec = {k: template[k] for k in ("version", "truncation", "padding", "normalizer", "pre_tokenizer",
                                      "post_processor", "decoder")}
    spec["added_tokens"] = []
    spec["model"] = dict(template["model"], vocab={}, merges=[])
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))


def assemble(template, trained, tail):
    """The trained tokenizer in DeepSeek-V3's layout: template model fields, "a b" merges, DeepSeek's
    added-token flags; BOS/EOS/PAD at 0/1/2 (in the vocabulary, as DeepSeek's), `tail` after the BPE."""
    ds_added = {a["content"]: a for a in template["added_tokens"]}
    vocab = trained["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in trained["model"]["merges"]]
    assert all(len(m.split(" ")) == 2 for m in merges), "a merge contains a space"
    for i, t in enumerate((BOS, EOS, PAD)):
        assert vocab.get(t) == i, f"{t} is not id {i}"
    n_vocab = len(vocab)
    added = []
    for i, t in enumerate((BOS, EOS, PAD)):
        a = dict(ds_added[t])
        a["id"] = i
        added.append(a)
    for k, t in enumerate(tail):
        base = ds_added.get(t, {"content": t, "single_word": False, "lstrip": False, "rstrip": False,
                                "normalized": True, "special": False})
        a = dict(base)
        a["id"] = n_vocab + k
        added.append(a)
    final = {k: template[k] for k in ("version", "truncation", "padding")}
    final["added_tokens"] = added
    final.update({k: template[k] for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")})
    final["model"] = dict(template["model"], vocab=vocab, merges=merges)
    return json.dumps(final, ensure_ascii=False, indent=1), added, n_vocab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="folder with train.jsonl.xz, valid.jsonl.xz, dsv3_*.json")
    ap.add_argument("--out", required=True, help="tokenizer folder")
    ap.add_argument("--tokens-out", required=True, help="folder for train.bin / valid.bin / meta.json")
    ap.add_argument("--vocab", type=int, default=8192, help="total vocabulary, added tokens included")
    ap.add_argument("--min-frequency", type=int, default=2)
    ap.add_argument("--model-max-length", type=int, default=2048)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.tokens_out, exist_ok=True)
    t0 = time.time()

    template = json.load(open(os.path.join(args.data, "dsv3_tokenizer_template.json"), encoding="utf-8"))
    assert [a["content"] for a in template["added_tokens"][:3]] == [BOS, EOS, PAD], "unexpected DeepSeek-V3 added tokens"
    # The rest of DeepSeek-V3's added tokens (fim, User/Assistant, EOT, tool calls), in their id order.
    tail = THINK + [a["content"] for a in sorted(template["added_tokens"], key=lambda a: a["id"])
                    if a["content"] not in (BOS, EOS, PAD)]
    n_bpe = args.vocab - len(tail)

    train_docs = list(read_docs(os.path.join(args.data, "train.jsonl.xz")))
    valid_docs = list(read_docs(os.path.join(args.data, "valid.jsonl.xz")))
    print(f"tokenizer: {len(train_docs)} train / {len(valid_docs)} valid documents "
          f"({sum(len(d['text']) for d in train_docs):,} train chars), read in {time.time() - t0:.1f}s", flush=True)

    tok = build_untrained(template)
    trainer = trainers.BpeTrainer(
        vocab_size=n_bpe, min_frequency=args.min_frequency, show_progress=False,
        special_tokens=[AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
                        for t in (BOS, EOS, PAD)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((d["text"] for d in train_docs), trainer=trainer, length=len(train_docs))
    print(f"tokenizer: BPE trained ({tok.get_vocab_size(with_added_tokens=True)} tokens) at {time.time() - t0:.1f}s", flush=True)

    out_json, added, n_vocab = assemble(template, json.loads(tok.to_str()), tail)
    tok = Tokenizer.from_str(out_json)
    total_vocab = tok.get_vocab_size(with_added_tokens=True)
    print(f"tokenizer: {n_vocab} BPE tokens + {len(tail)} added = {total_vocab}", flush=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(out_json)

    # Sanity: lossless round trip, special tokens atomic.
    bad = []
    for d in valid_docs:
        ids = tok.encode(d["text"], add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False) != d["text"]:
            bad.append(d["id"])
    chat = f"{BOS}<｜User｜>Hello<｜Assistant｜>Hi there.{EOS}"
    chat_ids = tok.encode(chat, add_special_tokens=False).ids
    want = [tok.token_to_id(BOS), tok.token_to_id("<｜User｜>")]
    print(f"tokenizer: round trip mismatches on valid docs: {len(bad)}/{len(valid_docs)} {bad[:5]}; "
          f"chat ids {chat_ids}", flush=True)
    if chat_ids[:2] != want or tok.token_to_id("<｜Assistant｜>") not in chat_ids or chat_ids[-1] != 1:
        print("tokenizer: WARNING: special tokens do not encode atomically", flush=True)
    assert tok.token_to_id(BOS) == 0 and tok.token_to_id(EOS) == 1 and tok.token_to_id(PAD) == 2

    # tokenizer_config.json: DeepSeek-V3's, with our context length and the added tokens listed.
    cfg = json.load(open(os.path.join(args.data, "dsv3_tokenizer_config.json"), encoding="utf-8"))
    cfg["model_max_length"] = args.model_max_length
    cfg["added_tokens_decoder"] = {
        str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for a in added}
    json.dump(cfg, open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8"),
              ensure_ascii=False, indent=2)

    # Token streams.
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    meta = {"vocab_size": total_vocab, "bos_id": bos, "eos_id": eos, "pad_id": tok.token_to_id(PAD),
            "n_bpe": n_vocab, "added": [a["content"] for a in added]}
    for split, docs in (("train", train_docs), ("valid", valid_docs)):
        enc = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
        per_src = {}
        parts = []
        for d, e in zip(docs, enc):
            parts.append(np.asarray([bos] + e.ids + [eos], dtype=np.uint16))
            per_src[d["src"]] = per_src.get(d["src"], 0) + len(e.ids) + 2
        arr = np.concatenate(parts)
        assert int(arr.max()) < total_vocab
        arr.tofile(os.path.join(args.tokens_out, f"{split}.bin"))
        chars = sum(len(d["text"]) for d in docs)
        meta[split] = {"documents": len(docs), "tokens": int(arr.size), "chars": chars,
                       "chars_per_token": chars / max(1, arr.size - 2 * len(docs)), "tokens_per_source": per_src}
        print(f"tokenizer: {split}: {arr.size:,} tokens ({meta[split]['chars_per_token']:.2f} chars/token)", flush=True)
    json.dump(meta, open(os.path.join(args.tokens_out, "meta.json"), "w"), indent=1, ensure_ascii=False)
    print(f"tokenizer: done in {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
