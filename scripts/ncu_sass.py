#!/usr/bin/env python3
"""Where a kernel's instructions go, from ncu's source page with SASS (scripts/ncu_kernels.sh writes it:
`ncu -i R.ncu-rep --page source --csv --print-source sass`): executed warp instructions by opcode, with
the warp-stall samples on them, and the straight-line runs of SASS (consecutive instructions executed the
same number of times: loop bodies, prologues) that hold the most. A kernel bound by instruction issue
(the NVFP4 expert kernels, session 11) is sped up by cutting what these lists show.

  ncu_sass.py FILE.csv [--top N]
"""
import argparse
import collections
import csv
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r)
    hdr, data = rows[head], rows[head + 1:]
    i_src, i_exec = hdr.index("Source"), hdr.index("Instructions Executed")
    i_stall = hdr.index("Warp Stall Sampling (All Samples)") if "Warp Stall Sampling (All Samples)" in hdr else None
    reasons = [c for c in hdr if c.startswith("stall_") and "Not Issued" not in c]
    i_reason = [hdr.index(c) for c in reasons]
    ins = []  # (line, executed, stall samples, text)
    why = {}  # line -> samples per stall reason
    for n, r in enumerate(data):
        try:
            c = int(r[i_exec].replace(",", ""))
        except (ValueError, IndexError):
            continue
        st = 0
        if i_stall is not None and r[i_stall] not in ("", "-"):
            st = int(r[i_stall].replace(",", ""))
        ins.append((n, c, st, r[i_src].strip()))
        why[n] = [int(r[i].replace(",", "")) if i < len(r) and r[i] not in ("", "-") else 0 for i in i_reason]
    total = sum(c for _, c, _, _ in ins) or 1
    samples = sum(s for _, _, s, _ in ins) or 1
    ops, op_st = collections.Counter(), collections.Counter()
    hmma = 0
    for _, c, s, t in ins:
        m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", t)
        op = m.group(2) if m else t
        ops[op] += c
        op_st[op] += s
        hmma += c if op == "HMMA" else 0
    print(f"{a.csv}: {total:,} warp instructions executed, {samples} stall samples"
          + (f", {total / hmma:.1f} per HMMA" if hmma else ""))
    print("by opcode (executed, share; stall samples, share):")
    for op, c in ops.most_common(a.top):
        print(f"  {op:10s} {c:11,d} {100 * c / total:5.1f}%   {op_st[op]:6d} {100 * op_st[op] / samples:5.1f}%")
    runs = []  # consecutive instructions with one execution count
    for n, c, s, t in ins:
        if runs and runs[-1][2] == c and runs[-1][1] == n - 1:
            runs[-1][1], runs[-1][3], runs[-1][4] = n, runs[-1][3] + 1, runs[-1][4] + s
        else:
            runs.append([n, n, c, 1, s, t[:48]])
    def reasons_of(lines):
        tot = [sum(why[n][j] for n in lines if n in why) for j in range(len(reasons))]
        n = sum(tot) or 1
        top = sorted(zip(tot, reasons), reverse=True)[:4]
        return ", ".join(f"{name[6:]} {100 * v / n:.0f}%" for v, name in top if v)

    if reasons:
        print(f"stall reasons, whole kernel: {reasons_of(why.keys())}")
    print("straight-line runs (SASS lines, instructions x times executed, share, stall samples, first; reasons):")
    for lo, hi, c, k, s, t in sorted(runs, key=lambda r: -r[2] * r[3])[: a.top]:
        print(f"  {lo:5d}-{hi:<5d} {k:4d} x {c:8,d} {100 * c * k / total:5.1f}%  {s:5d}  {t}")
        if reasons and s:
            print(f"               {reasons_of(range(lo, hi + 1))}")


if __name__ == "__main__":
    main()
