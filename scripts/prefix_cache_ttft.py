#!/usr/bin/env python3
"""Time to first token with and without the prefix cache, against a running `peregrine serve`.

Sends a long prompt (the first CHARS characters of a file), then the same prompt again twice, then
the prompt with a short follow-up (a conversation's next turn), each with max_tokens 1, and prints
the wall time of each request and the server's prefix-cache counters. Start the server with and
without --no-prefix-caching to compare.

Usage: scripts/prefix_cache_ttft.py [--url http://127.0.0.1:8000] [--file docs/architecture.md] [--chars 5000]
"""
import argparse
import json
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        j = json.loads(r.read())
    return time.perf_counter() - t, j


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--file", default="docs/architecture.md")
    ap.add_argument("--chars", type=int, default=5000)
    a = ap.parse_args()
    with urllib.request.urlopen(a.url + "/v1/models") as r:
        model = json.loads(r.read())["data"][0]["id"]
    text = open(a.file, encoding="utf-8").read()[: a.chars]
    cases = [("first", text), ("again", text), ("again", text), ("next turn", text + " And what comes after that?")]
    for name, prompt in cases:
        dt, j = post(a.url + "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0})
        print(f"{name:10s} {j['usage']['prompt_tokens']:6d} prompt tokens  {dt * 1000:8.1f} ms")
    with urllib.request.urlopen(a.url + "/metrics") as r:
        lines = [l for l in r.read().decode().splitlines() if "prefix_cache" in l and not l.startswith("#")]
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
