#!/usr/bin/env python3
"""The loops of a CUDA file's kernels, read from their SASS on this machine (no GPU needed): for each
kernel its registers and spills (ptxas -v), each innermost mma loop's instructions (from a branch
target to the backward branch that returns to it), and a steady-state pass's instructions per KB of
weights (8 HMMA.16816 take one 16-row x 128-element NVFP4 tile-step, 1 KB of codes; FP8 4 a KB, BF16 2:
--weights). The NVFP4 streams are issue-bound where their grids fill the GPU (docs/decode-status.md,
sessions 7 and 25: 80% of the read ceiling needs ~49% of issue slots busy at ~160 instructions a KB),
so a change to them is first weighed here, before any device time.

  scripts/sass_loops.py FILE.cu [--grep REGEX] [--weights nvfp4|fp8|bf16] [--ops N] [--show-path] [--keep SASS.txt]
  scripts/sass_loops.py --from-text SASS.txt [--grep REGEX]
  scripts/sass_loops.py FILE.cu --check-ldgsts   (cp.async copies with a uniform-register shared address; exit 1 if any)

FILE.cu is compiled with the build's device flags (build/compile_commands.json's entry for it, else the
project's defaults) to a cubin; CUDA 13 writes an ELF header that CUDA 11.8's nvdisasm (the one Debian
packages: scripts/fetch_sass_tools.sh) rejects, so a copy gets the older header (ABI version 7, e_flags
of sm_90) before it is disassembled. The instruction encodings are the same; sm_90a-only instructions
(wgmma, setmaxnreg) may print as unknown. Counts are static: an instruction under a false predicate
still takes its issue slot, and ptxas's `@!PT` no-ops are counted for that reason (NOPs are not).
"""
import argparse
import collections
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_sizes import demangle  # noqa: E402

# HMMA.16816 (16 rows x 16 k, f16 or bf16) per KB of weights: NVFP4's 2048 codes, FP8's 1024, BF16's 512.
MMA_PER_KB = {"nvfp4": 8, "fp8": 4, "bf16": 2}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, ".deps", "sass-tools", "bin")
INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\b")


def nvdisasm():
    tool = os.path.join(TOOLS, "nvdisasm")
    if not os.path.exists(tool):
        subprocess.run([os.path.join(ROOT, "scripts", "fetch_sass_tools.sh")], check=True, stdout=subprocess.DEVNULL)
    return tool


def device_flags(src):
    """The build's nvcc command for src, as a list, without its -c/-o/-M* arguments."""
    db = os.path.join(ROOT, "build", "compile_commands.json")
    if os.path.exists(db):
        with open(db) as f:
            for e in json.load(f):
                if os.path.realpath(e["file"]) == os.path.realpath(src):
                    args = shlex.split(e["command"])
                    out, skip = [], False
                    for a in args[1:]:
                        if skip:
                            skip = False
                            continue
                        if a in ("-o", "-MF", "-MT", "-x"):
                            skip = True
                            continue
                        if a in ("-c", "-MD") or a == e["file"] or a == src:
                            continue
                        out.append(a)
                    return args[0], out
    return "/usr/local/cuda/bin/nvcc", ["-I" + ROOT, "-O2", "-DNDEBUG", "--generate-code=arch=compute_90a,code=[sm_90a]",
                                        "-lineinfo", "--expt-relaxed-constexpr", "-std=c++20"]


def ptxas_usage(stderr):
    """{mangled kernel: (registers, spill stores, spill loads)} from ptxas -v's report."""
    out, cur, spill = {}, None, (0, 0)
    for line in stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur, spill = m.group(1), (0, 0)
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            spill = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur] = (int(m.group(1)), *spill)
            cur = None
    return out


def disassemble(src):
    """(nvdisasm text, ptxas_usage) of src's kernels."""
    nvcc, flags = device_flags(src)
    with tempfile.TemporaryDirectory() as d:
        cubin = os.path.join(d, "k.cubin")
        p = subprocess.run([nvcc, *flags, "-Xptxas=-v", "-cubin", "-x", "cu", src, "-o", cubin], capture_output=True,
                           text=True)
        if p.returncode != 0:
            sys.exit(f"sass_loops.py: nvcc failed on {src}:\n{p.stderr[-3000:]}")
        usage = ptxas_usage(p.stderr)
        with open(cubin, "rb") as f:
            elf = bytearray(f.read())
        elf[8] = 7  # EI_ABIVERSION: the pre-12.x layout of e_flags
        struct.pack_into("<I", elf, 0x30, 0x5A055A)  # sm_90, 64-bit addresses, unified textures, virtual sm_90
        old = os.path.join(d, "k_old.cubin")
        with open(old, "wb") as f:
            f.write(elf)
        p = subprocess.run([nvdisasm(), "-c", "-hex", old], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"sass_loops.py: nvdisasm failed: {p.stderr.strip()[:500]}")
        return p.stdout, usage


def functions(text):
    """[(mangled name, {address: instruction text})] in file order, from `nvdisasm -c -hex` text. An
    address nvdisasm 11.8 skips inside a function holds an instruction it does not know (CUDA 12's VIADD,
    for one): it is kept as "?", so that counts stay whole. NOPs are dropped. Each backward branch's
    target is decoded from its encoding (nvdisasm also drops the label of an instruction it skips)."""
    out, cur, lines = [], None, text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\.text\.(\S+):\s*$", line)
        if m:
            cur = (m.group(1), {}, [])
            out.append(cur)
            continue
        m = INSTR.match(line)
        if cur is None or not m:
            continue
        addr, op = int(m.group(1), 16), m.group(2)
        lo = re.search(r"/\* (0x[0-9a-f]{16}) \*/\s*$", line)
        hi = re.search(r"/\* (0x[0-9a-f]{16}) \*/\s*$", lines[i + 1]) if i + 1 < len(lines) else None
        if BRANCH.search(op) and lo and hi:
            cur[2].append((addr, branch_target(addr, int(lo.group(1), 16), int(hi.group(1), 16))))
        cur[1][addr] = None if re.sub(r"^@!?U?P[0-9T]+\s+", "", op).startswith("NOP") else op
    res = []
    for name, code, branches in out:
        if code:
            last = max(code)
            for a in range(min(code), last, 16):
                code.setdefault(a, "?")
        res.append((name, {a: op for a, op in code.items() if op is not None}, branches))
    return res


def branch_target(addr, lo, hi):
    """A BRA's target on sm_90: a signed offset in instruction words, its low 8 bits at bits 16..23 of
    the encoding and the rest from bit 34 (checked against every labelled branch of the MoE kernels'
    file: 7,578 of 7,578), relative to the next instruction."""
    v = (hi << 64) | lo
    f = (((v >> 34) & ((1 << 48) - 1)) << 8) | ((lo >> 16) & 0xFF)
    if f >> 55:
        f -= 1 << 56
    return addr + 16 + 4 * f


def opcode(op):
    return re.sub(r"^@!?U?P[0-9T]+\s+", "", op).split()[0].split(".")[0]


def loops(code, branches, innermost):
    """[(start address, [instructions])] for each backward branch: from its target to the branch.
    innermost: only the loops that hold an HMMA and no other such loop (an outer loop's count repeats
    its inner loops')."""
    spans = sorted({(t, a) for a, t in branches if t <= a})
    has_mma = {s: any(opcode(code[x]) == "HMMA" for x in code if s[0] <= x <= s[1]) for s in spans}
    out = []
    for t, a in spans:
        if innermost and any(has_mma[o] and o != (t, a) and t <= o[0] and o[1] <= a for o in spans):
            continue
        out.append((t, [code[x] for x in sorted(code) if t <= x <= a]))
    return out


def hot_path(code, branches, start, end):
    """The instructions of the loop's steady-state pass: of the paths from its head to its backward
    branch (forward branches taken or not; a branch out of the loop ends nothing), the one with the
    most HMMA, then the most LDGSTS and LDG (a pass issues a stage's copies or loads), then the fewest
    instructions: the mmas and copies all run, the blocks a pass usually skips (a unit's first-stage
    setup, a tail stage's checks) do not. (HMMA count, instruction count, addresses)."""
    addrs = [a for a in sorted(code) if start <= a <= end]
    target = {a: t for a, t in branches}
    best = {start: (0, 0, 0, ())}
    for a in addrs:
        if a not in best:
            continue
        mma, cp, n, path = best[a]
        op = code[a]
        here = (mma + (opcode(op) == "HMMA"), cp + (opcode(op) in ("LDGSTS", "LDG")), n + 1, path + (a,))
        if a == end:
            return here[0], here[2], here[3]
        bare = re.sub(r"^@!?U?P[0-9T]+\s+", "", op)
        succ = []
        uncond = bare.startswith("BRA") and not op.startswith("@") and not re.match(r"BRA\s+!?U?P\d", bare)
        if a in target and start <= target[a] <= end and target[a] > a:
            succ.append(target[a])
        if not uncond and not bare.startswith("EXIT"):
            nxt = next((b for b in addrs if b > a), None)
            if nxt is not None:
                succ.append(nxt)
        for b in succ:
            if b not in best or (here[0], here[1], -here[2]) > (best[b][0], best[b][1], -best[b][2]):
                best[b] = here
    return None


def short(name):
    name = re.sub(r"pg::ops::cuda::|<unnamed>::|\(anonymous namespace\)::|pg::engine::cuda::", "", name)
    name = re.sub(r"\(int\)|\(bool\)", "", name)
    return re.sub(r"\((pg::ops::cuda::)?\w+Params\)$", "", name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", nargs="?")
    ap.add_argument("--from-text")
    ap.add_argument("--grep", default="")
    ap.add_argument("--ops", type=int, default=8, help="the loop's most frequent opcodes shown (0: none)")
    ap.add_argument("--keep", default="", help="also write the disassembly here")
    ap.add_argument("--weights", choices=sorted(MMA_PER_KB), default="nvfp4",
                    help="what the loops stream, for instructions a KB (default nvfp4)")
    ap.add_argument("--show-path", action="store_true", help="print each loop's pass, instruction by instruction")
    ap.add_argument("--all-loops", action="store_true", help="outer loops and loops without mmas too")
    ap.add_argument("--check-ldgsts", action="store_true",
                    help="only list cp.async copies whose shared address takes a uniform register (LDGSTS [R + UR]); "
                         "exit 1 if any. Under an L2 cache hint that form raised 'illegal instruction' on an H100 "
                         "(cp_async.cuh); CUDA 11.8's nvdisasm does not print the hint")
    a = ap.parse_args()
    usage = {}
    if a.from_text:
        with open(a.from_text) as f:
            text = f.read()
    elif a.source:
        text, usage = disassemble(a.source)
    else:
        sys.exit("usage: sass_loops.py FILE.cu [--grep REGEX] | --from-text SASS.txt")
    if a.keep:
        with open(a.keep, "w") as f:
            f.write(text)
    fns = functions(text)
    names = demangle([n for n, _, _ in fns], os.path.join(TOOLS, "cu++filt"))
    rx = re.compile(a.grep) if a.grep else None
    if a.check_ldgsts:
        found = 0
        for name, code, _ in fns:
            nice = short(names[name])
            if rx and not rx.search(nice):
                continue
            hits = [(addr, ins) for addr, ins in sorted(code.items()) if ins and re.search(r"LDGSTS[^;]*\[R\d+\+UR", ins)]
            found += len(hits)
            for addr, ins in hits:
                print(f"{nice[:120]}  {addr:#06x}  {ins.strip()}")
        print(f"check-ldgsts: {found} copies with a uniform-register shared address")
        sys.exit(1 if found else 0)
    for name, code, branches in fns:
        nice = short(names[name])
        if rx and not rx.search(nice):
            continue
        regs = ""
        if name in usage:
            r, st, ld = usage[name]
            regs = f", {r} registers" + (f", SPILLS {st} B stored / {ld} B loaded" if st or ld else ", no spill")
        print(f"{nice[:160]}\n  {len(code)} instructions{regs}")
        for start, ops in loops(code, branches, not a.all_loops):
            counts = collections.Counter(opcode(op) for op in ops)
            mma = counts.get("HMMA", 0)
            if not mma and not a.all_loops:
                continue
            end = max(a for a, t in branches if t == start)
            hp = hot_path(code, branches, start, end)
            per_kb = ""
            if mma and hp and hp[0]:
                per = MMA_PER_KB[a.weights]
                per_kb = (f"; a pass: {hp[1]} with {hp[0]} HMMA, {hp[1] * per / hp[0]:.1f} a KB of {a.weights} weights "
                          f"({per} HMMA.16816 a KB)")
                if a.show_path:
                    print("\n".join(f"    {x:#06x}  {code[x]}" for x in hp[2]))
            print(f"  loop at {start:#06x}: {len(ops)} instructions, {mma} HMMA{per_kb}")
            if a.ops:
                print("    " + " ".join(f"{k} {v}" for k, v in counts.most_common(a.ops)))


if __name__ == "__main__":
    main()
