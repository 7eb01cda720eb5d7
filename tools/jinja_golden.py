#!/usr/bin/env python3
# Renders Peregrine's Jinja test cases with Python Jinja2 exactly as transformers'
# apply_chat_template does, writing the expected outputs the C++ tests compare against.
"""Golden outputs for tokenizer/jinja (pg_jinja).

The environment mirrors transformers' _compile_jinja_template (src/transformers/utils/
chat_template_utils.py): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, jinja2.ext.loopcontrols]) with its own tojson filter and the
raise_exception / strftime_now globals. strftime_now reads a fixed clock (FIXED_NOW) so outputs
are reproducible; the C++ tests inject the same time.

Inputs (tests/unit/jinja/):
  snippets.json, whitespace_cases.json  [{"name", "template", "context"?}, ...]
  templates/*.jinja + templates/special_tokens.json   chat templates and their special tokens
  conversations/*.json  {"messages", "add_generation_prompt"?, "tools"?, "extra"?}
Outputs (--out, default tests/unit/jinja/golden/):
  snippets.json  {name: {"output": str} | {"error": "Type: message"}}
  chat/<template>__<conversation>.txt  (or .error holding "Type: message")

Usage: python3 tools/jinja_golden.py [--out DIR]
"""
import argparse
import json
import os
import sys
import warnings
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(ROOT, "tests", "unit", "jinja")
FIXED_NOW = datetime(2025, 3, 14, 15, 9, 26)


class GenerationTag(Extension):
    """transformers' AssistantTracker without the index tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    try:
        return {"output": env.from_string(source).render(**context)}
    except Exception as e:  # every failure is an expected error for the C++ side
        return {"error": f"{type(e).__name__}: {e}"}


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main():
    # Templates that subscript literals make CPython warn while compiling them; not our concern.
    warnings.simplefilter("ignore", SyntaxWarning)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(CASES, "golden"))
    args = ap.parse_args()
    env = make_env()

    snippets = {}
    for name in ("snippets.json", "whitespace_cases.json"):
        for case in load(os.path.join(CASES, name)):
            if case["name"] in snippets:
                sys.exit(f"duplicate snippet name {case['name']!r}")
            snippets[case["name"]] = render(env, case["template"], case.get("context", {}))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump(snippets, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")

    tokens = load(os.path.join(CASES, "templates", "special_tokens.json"))
    chat_dir = os.path.join(args.out, "chat")
    os.makedirs(chat_dir, exist_ok=True)
    for old in os.listdir(chat_dir):
        os.remove(os.path.join(chat_dir, old))
    n_chat = 0
    for tname in sorted(os.listdir(os.path.join(CASES, "templates"))):
        if not tname.endswith(".jinja"):
            continue
        stem = tname[: -len(".jinja")]
        with open(os.path.join(CASES, "templates", tname), encoding="utf-8", newline="") as f:
            source = f.read()
        for cname in sorted(os.listdir(os.path.join(CASES, "conversations"))):
            conv = load(os.path.join(CASES, "conversations", cname))
            # apply_chat_template: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
            # **special_tokens_map, **kwargs)
            context = {
                "messages": conv["messages"],
                "tools": conv.get("tools"),
                "documents": None,
                "add_generation_prompt": conv.get("add_generation_prompt", False),
            }
            context.update(tokens.get(stem, {}))
            context.update(conv.get("extra", {}))
            result = render(env, source, context)
            base = os.path.join(chat_dir, f"{stem}__{cname[: -len('.json')]}")
            if "output" in result:
                with open(base + ".txt", "w", encoding="utf-8", newline="") as f:
                    f.write(result["output"])
            else:
                with open(base + ".error", "w", encoding="utf-8", newline="") as f:
                    f.write(result["error"])
            n_chat += 1
    print(f"jinja_golden: jinja2 {jinja2.__version__}: {len(snippets)} snippets, {n_chat} chat renders -> {args.out}")


if __name__ == "__main__":
    main()
