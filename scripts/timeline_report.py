#!/usr/bin/env python3
"""The MoE half of a decode layer, read from a timeline probe's records (ops/cuda/common/timeline.h).

    usage: scripts/timeline_report.py TIMELINE.csv

A probe build (cmake -DPEREGRINE_TIMELINE=ON) run with PEREGRINE_TIMELINE_OUT=FILE writes one row
per mark: t_ns, kernel, point, block, sm, in the order the blocks reserved their records. A kernel's
launch runs until one of its blocks starts again (or 15 us pass without a mark); each router launch
opens a layer's MoE half, and the gate_up, down and rmsnorm launches after it belong to it.
Printed: per point, the median over the layers of the first / median / last block's time, in us
after the router's first block passed its PDL wait; then gate_up's routed blocks grouped by how many
of them share an SM (when each SM's last one ends, how long one streams); then how the down's blocks
found their SMs: before or after the last gate_up block on the same SM ended; then every marked
launch from one router to the next in order (the MoE half of a layer, then the next layer's
attention half): its blocks, its first block's start and PDL wait, its last mark.
"""
import csv
import statistics
import sys

NAMES = {1: "rmsnorm", 2: "router", 3: "gate_up", 4: "down", 5: "routing", 6: "attention", 7: "mla_prep",
         8: "linear_x1", 9: "w_uv_combine", 10: "linear_mma"}
POINTS = {
    "rmsnorm": ["start", "waited", "end"],
    "router": ["start", "waited", "logits", "routed (last block)", "last block knows", "logits loaded",
               "scored"],
    "gate_up": ["start", "waited (routed)", "streamed", "end", "routed itself"],
    "down": ["start", "waited", "h staged", "summed", "end", "routed itself"],
}
GAP_NS = 15_000


def launches(rows, kernel):
    """A kernel's marks in the file's order (the ring's: a block's points follow its start) cut into
    launches where a block starts again or nothing was marked for GAP_NS, each sorted by time."""
    out, cur, seen, latest = [], [], set(), 0
    for r in rows:
        if r[1] != kernel:
            continue
        if cur and ((r[2] == 0 and r[3] in seen) or r[0] - latest > GAP_NS):
            out.append(sorted(cur))
            cur, seen, latest = [], set(), 0
        cur.append(r)
        seen.add(r[3])
        latest = max(latest, r[0])
    if cur:
        out.append(sorted(cur))
    return sorted(out)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        rows = [tuple(int(x) for x in (r["t_ns"], r["kernel"], r["point"], r["block"], r["sm"])) for r in csv.DictReader(f)]
    if not rows:
        sys.exit("timeline_report: no records")
    by = {k: launches(rows, k) for k in NAMES}
    routers = by[2]
    if len(routers) < 3:
        sys.exit(f"timeline_report: {len(routers)} router launches; need a decode run with MoE layers")
    # Per layer: the router launch, then the first launch of each other kernel starting after it.
    table = {}  # (kernel name, point) -> list over layers of (first, median, last) offsets in us
    coresident = []
    gaps = []
    per_sm = {}  # routed gate_up blocks on an SM -> per layer: (SMs, [SM's last end], [block's stream]) in us
    for li, rl in enumerate(routers[1:-1], start=1):
        waited = [r[0] for r in rl if r[2] == 1]
        if not waited:
            continue
        t0 = min(waited)
        nxt_router = routers[li + 1][0][0] if li + 1 < len(routers) else float("inf")
        layer = {"router": rl}
        for k in (3, 4, 1):
            cands = [L for L in by[k] if rl[0][0] <= L[0][0] < nxt_router]
            if cands:
                layer[NAMES[k]] = cands[0]
        for name, L in layer.items():
            for pt in range(len(POINTS.get(name, []))):
                ts = sorted(r[0] for r in L if r[2] == pt)
                if ts:
                    table.setdefault((name, pt), []).append(
                        ((ts[0] - t0) / 1e3, (statistics.median(ts) - t0) / 1e3, (ts[-1] - t0) / 1e3))
        if "gate_up" in layer:  # the routed blocks (those that mark their wait) by SM
            blocks = {}
            for r in layer["gate_up"]:
                blocks.setdefault(r[3], {})[r[2]] = r
            routed = [b for b in blocks.values() if 1 in b]
            if routed:
                w0 = min(b[1][0] for b in routed)
                sms = {}
                for b in routed:
                    sms.setdefault(b[1][4], []).append(b)
                counts = {}
                for bs in sms.values():
                    c = counts.setdefault(len(bs), ([], []))
                    ends = [b[3][0] for b in bs if 3 in b]
                    if ends:
                        c[0].append((max(ends) - w0) / 1e3)
                    c[1].extend((b[2][0] - b[1][0]) / 1e3 for b in bs if 2 in b)
                for n, (ends, streams) in counts.items():
                    v = per_sm.setdefault(n, ([], [], []))
                    v[0].append(sum(len(bs) == n for bs in sms.values()))
                    v[1].extend(ends)
                    v[2].extend(streams)
        if "gate_up" in layer and "down" in layer:
            gate_end = {}
            for r in layer["gate_up"]:
                if r[2] == 3:
                    gate_end[r[4]] = max(gate_end.get(r[4], 0), r[0])
            last_gate = max(gate_end.values()) if gate_end else None
            for r in layer["down"]:
                if r[2] == 0 and r[4] in gate_end:
                    coresident.append(r[0] < gate_end[r[4]])
            if last_gate is not None:
                starts = sorted(r[0] for r in layer["down"] if r[2] == 0)
                gaps.append(((starts[0] - last_gate) / 1e3, (statistics.median(starts) - last_gate) / 1e3))
    n_layers = len(next(iter(table.values()))) if table else 0
    print(f"{len(rows)} marks, {len(routers)} router launches; medians over {n_layers} layers, "
          "us after the router's first block passed its wait (first / median / last block):")
    for name in ("router", "gate_up", "down", "rmsnorm"):
        lines = []
        for pt, label in enumerate(POINTS[name]):
            v = table.get((name, pt))
            if v:
                lines.append(([statistics.median(x[i] for x in v) for i in range(3)], label))
        for med, label in sorted(lines, key=lambda x: x[0][0]):  # in time order
            print(f"  {name:8s} {label:20s} {med[0]:8.2f} {med[1]:8.2f} {med[2]:8.2f}")
    if per_sm:
        print("gate_up's routed blocks by how many share an SM (us after the first routed wait; medians):")
        for n, (sms, ends, streams) in sorted(per_sm.items()):
            end = f"{statistics.median(ends):6.2f}" if ends else "     -"
            stream = f"{statistics.median(streams):6.2f}" if streams else "     -"
            print(f"  {n} a SM on {statistics.median(sms):5.1f} SMs: the SM's last block ends {end}, "
                  f"a block streams (wait to streamed) {stream}")
    if coresident:
        share = sum(coresident) / len(coresident)
        print(f"down blocks that started on an SM before its last gate_up block ended: {100 * share:.1f}% "
              f"of {len(coresident)} on SMs that ran gate_up blocks")
    if gaps:
        print(f"down's first / median block start after gate_up's last block ended (median over layers): "
              f"{statistics.median(g[0] for g in gaps):.2f} / {statistics.median(g[1] for g in gaps):.2f} us")
    # Every marked launch between consecutive routers, keyed by its place in that order.
    every = sorted((L for k in NAMES for L in by[k]), key=lambda L: L[0][0])
    seq = {}
    for li in range(1, len(routers) - 1):
        waited = [r[0] for r in routers[li] if r[2] == 1]
        if not waited:
            continue
        t0, lo, hi = min(waited), routers[li][0][0], routers[li + 1][0][0]
        for i, L in enumerate([L for L in every if lo <= L[0][0] < hi]):
            starts = [r[0] for r in L if r[2] == 0]
            waits = [r[0] for r in L if r[2] == 1]
            row = (len({r[3] for r in L}), (min(starts) - t0) / 1e3 if starts else None,
                   (min(waits) - t0) / 1e3 if waits else None, (max(r[0] for r in L) - t0) / 1e3)
            seq.setdefault((i, NAMES[L[0][1]]), []).append(row)
    if seq:
        print("from one router's wait to the next (median over layers, us): launch, blocks, first start, "
              "first wait returned, last mark")
        def med(v, j):
            xs = [x[j] for x in v if x[j] is not None]
            return f"{statistics.median(xs):8.2f}" if xs else "       -"
        for (i, name), v in sorted(seq.items()):
            if len(v) * 2 >= n_layers:  # launches that most layers have at this place
                print(f"  {i:2d} {name:10s} {int(statistics.median(x[0] for x in v)):5d} {med(v, 1)} {med(v, 2)} {med(v, 3)}")


if __name__ == "__main__":
    main()
