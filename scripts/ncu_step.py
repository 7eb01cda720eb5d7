#!/usr/bin/env python3
"""The kernels of one step from an ncu CSV (gpu_suite.sh section 5d: `peregrine bench` under
`ncu --graph-profiling node --metrics gpu__time_duration.sum[,more] --csv`). Metrics other than the
duration (PG_SUITE_NCU_METRICS) are shown per kernel name as means over the step's launches.

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


def launches(path):
    """(kernel name, us, {other metric: value}) per profiled launch, in launch order."""
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not CSV rows
    order, by_id = [], {}
    for r in csv.DictReader(lines):
        key = r.get("ID")
        if key not in by_id:
            by_id[key] = [r["Kernel Name"], None, {}]
            order.append(key)
        name, v = r.get("Metric Name"), r["Metric Value"].replace(",", "")
        try:
            x = float(v)
        except ValueError:
            continue
        if name == "gpu__time_duration.sum":
            unit = r.get("Metric Unit", "")
            by_id[key][1] = x / 1e3 if unit in ("nsecond", "ns") else x * 1e3 if unit in ("msecond", "ms") else x
        else:
            by_id[key][2][name] = x
    return [tuple(by_id[k]) for k in order if by_id[k][1] is not None]


# Short column names of the extra metrics gpu_suite.sh's PG_SUITE_NCU_METRICS may add.
def metric_label(m):
    m = re.sub(r"^smsp__average_warps_issue_stalled_(.*)_per_issue_active\.ratio$", r"stall \1", m)
    return {"smsp__inst_executed.sum": "inst", "smsp__warps_launched.sum": "warps",
            "smsp__issue_active.avg.per_cycle_active": "issue/cyc"}.get(m, m)


def extras_table(step):
    """Per kernel name, the mean of each extra metric over its launches in the step (and instructions per
    warp where both counts were collected)."""
    names = sorted({m for _, _, e in step for m in e})
    if not names:
        return
    agg = collections.OrderedDict()
    for n, t, e in step:
        a = agg.setdefault(short(n), [0, 0.0, collections.defaultdict(float)])
        a[0] += 1
        a[1] += t
        for m, v in e.items():
            a[2][m] += v
    per_warp = "smsp__inst_executed.sum" in names and "smsp__warps_launched.sum" in names
    print("\nby kernel, extra metrics (mean per launch" + ("; inst/warp = executed instructions per warp" if per_warp else "") + "):")
    print("  " + " ".join(f"{metric_label(m)[:20]:>20}" for m in names) + (f" {'inst/warp':>10}" if per_warp else "") + "  kernel")
    for k, (c, t, sums) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        cells = " ".join(f"{sums[m] / c:20.3f}" for m in names)
        if per_warp:
            w = sums["smsp__warps_launched.sum"]
            cells += f" {sums['smsp__inst_executed.sum'] / w if w else 0:10.0f}"
        print(f"  {cells}  {k[:60]}")


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
    full = launches(a.csv)
    ks = [(n, t) for n, t, _ in full]
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
        extras_table(full[lo:hi])
    print(f"step {step_no}: {len(step)} kernels, {total:.1f} us of kernel time (each alone)")


if __name__ == "__main__":
    main()
