#!/usr/bin/env python3
"""The kernels of one step from an ncu CSV (gpu_suite.sh section 5d: `peregrine bench` under
`ncu --graph-profiling node --metrics gpu__time_duration.sum --csv`).

A step starts at an embedding_kernel launch. The bench runs prefills (thousands of kernels each)
before its decode steps, which all have the same kernel count: by default the last segment of the
most common length is taken (a steady decode step); --step N takes segment N (0-based) instead.
Durations are each kernel alone (ncu serialises them), so their sum is the step without launch
gaps or overlap.

With --compare N,M,... the kernels of several steps side by side instead (total us per kernel name;
negative N counts from the last step: e.g. --compare=-5,-3,-1 for the last decode step and the second replays
of the two verify graphs the bench profiles after its decode steps).

  ncu_step.py FILE.csv [--step N] [--summary] [--compare N,M,...]
"""
import collections
import argparse
import csv
import re
import sys


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not CSV rows
    for r in csv.DictReader(lines):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            unit = r.get("Metric Unit", "")
            v = float(r["Metric Value"].replace(",", ""))
            us = v / 1e3 if unit in ("nsecond", "ns") else v * 1e3 if unit in ("msecond", "ms") else v
            yield r["Kernel Name"], us


def short(name):
    name = re.sub(r"\(.*$", "", name)  # drop the argument list
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"pg::ops::cuda::", "", name)
    return name[:90]


def compare(ks, bounds, steps, path):
    bad = [n for n in steps if n >= len(bounds)]
    if bad:
        sys.exit(f"{path}: {len(bounds)} steps (embedding launches), asked for {bad}")
    cols = []
    for n in steps:
        lo, hi = bounds[n]
        agg = {}
        for name, t in ks[lo:hi]:
            c, s = agg.get(short(name), (0, 0.0))
            agg[short(name)] = (c + 1, s + t)
        cols.append(agg)
    names = sorted({k for c in cols for k in c}, key=lambda k: -max(c.get(k, (0, 0.0))[1] for c in cols))
    print("by kernel, steps " + " | ".join(str(n) for n in steps) + " (count x, total us):")
    for k in names:
        cells = [f"{c[k][0]:4d}x {c[k][1]:8.1f}" if k in c else f"{'-':>14}" for c in cols]
        print("  " + " | ".join(cells) + f"  {k[:70]}")
    totals = [sum(t for _, t in ks[bounds[n][0]:bounds[n][1]]) for n in steps]
    print("  " + " | ".join(f"{'total':>5} {t:8.1f}" for t in totals) + "  (kernel time, each alone)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=-1)
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--compare", default="")
    a = ap.parse_args()
    ks = list(rows(a.csv))
    if not ks:
        sys.exit(f"{a.csv}: no gpu__time_duration rows")
    starts = [i for i, (n, _) in enumerate(ks) if "embedding_kernel" in n]
    if not starts:
        sys.exit(f"{a.csv}: no embedding_kernel launch, no step to cut")
    bounds = [(lo, starts[j + 1] if j + 1 < len(starts) else len(ks)) for j, lo in enumerate(starts)]
    if a.compare:
        compare(ks, bounds, [int(x) % len(bounds) if int(x) < 0 else int(x) for x in a.compare.split(",")], a.csv)
        return
    step_no = a.step
    if step_no < 0:  # the last segment of the most common length (ties: the shorter)
        counts = collections.Counter(hi - lo for lo, hi in bounds)
        n = min(counts, key=lambda L: (-counts[L], L))
        step_no = max(j for j, (lo, hi) in enumerate(bounds) if hi - lo == n)
    if step_no >= len(bounds):
        sys.exit(f"{a.csv}: {len(bounds)} steps (embedding launches), asked for step {step_no}")
    lo, hi = bounds[step_no]
    step = ks[lo:hi]
    total = sum(t for _, t in step)
    if not a.summary:
        for i, (n, t) in enumerate(step):
            print(f"{i:4d} {t:9.2f} us  {short(n)}")
        agg = {}
        for n, t in step:
            c, s = agg.get(short(n), (0, 0.0))
            agg[short(n)] = (c + 1, s + t)
        print("\nby kernel (count, total us, share):")
        for n, (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            print(f"  {c:4d} {s:9.1f} {100 * s / total:5.1f}%  {n}")
    print(f"step {step_no}: {len(step)} kernels, {total:.1f} us of kernel time (each alone)")


if __name__ == "__main__":
    main()
