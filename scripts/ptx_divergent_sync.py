#!/usr/bin/env python3
"""Flags warp-synchronous PTX instructions (match/vote/shfl .sync, bar.warp.sync) that sit in a
straight-line block which a conditional branch jumps over: the shape C++ gives to
`cond && __match_any_sync(kFullMask, v)` (the short circuit skips the intrinsic on the lanes where
cond is false, while the mask names them: undefined; it hung and faulted the MoE direct multi path
on the H200, 2026-12-01). A heuristic over the PTX text, not a proof: a flagged instruction is
fine when the branch is warp-uniform or the mask names only the lanes that reach it.

  nvcc <the target's flags> -ptx ops/cuda/moe_experts/kernel.cu -o /tmp/k.ptx
  scripts/ptx_divergent_sync.py /tmp/k.ptx [name-filter]
"""
import re
import sys

SYNC = re.compile(r'\b(match\.\w+\.sync|vote\.sync|shfl\.sync|bar\.warp\.sync)\b')
LABEL = re.compile(r'^(\$L__\w+):')
BRANCH = re.compile(r'@!?%p\d+ bra(?:\.uni)?\s+(\$L__\w+);')


def functions(lines):
    name, body = None, []
    for line in lines:
        if re.match(r'^(\.visible\s+)?(\.entry|\.func)\b', line):
            if name:
                yield name, body
            name, body = line.strip(), []
        elif name:
            body.append(line)
    if name:
        yield name, body


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    lines = open(sys.argv[1]).read().split('\n')
    name_filter = sys.argv[2] if len(sys.argv) > 2 else ''
    total = flagged = 0
    for name, body in functions(lines):
        if name_filter not in name:
            continue
        labels = {m.group(1): i for i, l in enumerate(body) if (m := LABEL.match(l))}
        for i, line in enumerate(body):
            if not SYNC.search(line):
                continue
            total += 1
            for j in range(i - 1, -1, -1):  # back to the block's first line
                if LABEL.match(body[j]):
                    break
                m = BRANCH.search(body[j])
                if m and labels.get(m.group(1), -1) > i:
                    flagged += 1
                    print(f'{name[:120]}\n    {line.strip()}  (skipped by: {body[j].strip()})')
                    break
    print(f'{total} warp-synchronous instructions, {flagged} in a block a conditional branch skips')
    return 1 if flagged else 0


if __name__ == '__main__':
    sys.exit(main())
