#!/usr/bin/env python3
# Reference ids from Python Hugging Face `tokenizers` (the Rust implementation, Oniguruma regexes):
# the arbiter where the two JavaScript tokenizers disagree. Encodes a JSON list of strings.
#   python3 hf_reference.py TOKENIZER_JSON INPUTS.json OUT.json
# INPUTS.json: ["text", ...] (e.g. build-tok/tests/unit/tokenizer/tokenizer_parity_js_disagreements.json)
#   or {"group": ["text", ...], ...} like arbiter_cases.json / cases.json (keys starting with _ skipped)
# OUT.json: {"tokenizers_version": ..., "results": [{"text", "ids", "ids_plain", "decoded"}, ...]}
#   ids: added tokens parsed, no BOS (encode(add_special_tokens=False));
#   ids_plain: special tokens not parsed (encode_special_tokens=True; non-special added tokens
#   such as <｜User｜> are still matched, as HF does).
import json
import sys

import tokenizers
from tokenizers import Tokenizer


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__ or "usage: hf_reference.py TOKENIZER_JSON INPUTS.json OUT.json", file=sys.stderr)
        return 2
    tokenizer_path, inputs_path, out_path = sys.argv[1:]
    with open(inputs_path, encoding="utf-8") as f:
        texts = json.load(f)
    if isinstance(texts, dict):
        texts = [t for key, group in texts.items() if not key.startswith("_") for t in group]
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        print(f"{inputs_path}: expected a JSON list of strings or an object of such lists", file=sys.stderr)
        return 2
    tok = Tokenizer.from_file(tokenizer_path)
    plain = Tokenizer.from_file(tokenizer_path)
    plain.encode_special_tokens = True
    results = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        results.append({
            "text": text,
            "ids": ids,
            "ids_plain": plain.encode(text, add_special_tokens=False).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
        })
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "results": results}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(results)} results to {out_path} (tokenizers {tokenizers.__version__})")
    for r in results:
        print(json.dumps(r["text"]), r["ids"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
