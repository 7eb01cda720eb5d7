#!/usr/bin/env python3
"""SASS instructions per kernel of a CUDA build: what each launch's code costs in instruction fetch
(docs/decode-status.md, session 17: a decode layer's ~9 kernels are 2-6K instructions each, likely more
than an SM's instruction caches hold, and the attention lost 2-4% of decode speed when its code grew 7-20%).

  sass_sizes.py LIB_OR_BINARY [--grep REGEX] [--cuobjdump PATH] [--top N]
  sass_sizes.py --from-text SASS.txt ...   (the output of `cuobjdump -sass`, e.g. from another machine)
  sass_sizes.py --lines REGEX CUBIN [--nvdisasm PATH] [--top N]   (or --from-text NVDISASM.txt)
  sass_sizes.py --elf CUBIN [CUBIN_AFTER] [--grep REGEX]   (no cuobjdump: read from the ELF, below)

--elf: each kernel's code size from its .text section in a cubin (`nvcc -cubin -arch=sm_90a -O3
-std=c++20 --expt-relaxed-constexpr -I. FILE.cu -o X.cubin`), 16 bytes an instruction, the padding
included; needs no CUDA tool (this machine has no cuobjdump). With a second cubin (the same file
after a change), the kernels whose size changed, before and after (anonymous namespaces' hashes
ignored): how much code a change adds to each instantiation, before any device call.

--lines: where a kernel's instructions come from, counted per source line (and the line of the
kernel that inlined it), for the functions whose mangled name matches REGEX. CUBIN built with line
info and the build's device flags, e.g. `nvcc -cubin -lineinfo -arch=sm_90a -O3 -std=c++20
--expt-relaxed-constexpr -I. ops/cuda/mla_attention.cu -o /tmp/a.cubin`; read with `nvdisasm -gi`.

Counts the instructions of each function (NOPs and the padding after the final branch excluded),
prints them largest first with the demangled name, and the total of those shown. cuobjdump: --cuobjdump,
else $CUOBJDUMP, else cuobjdump on the PATH, else /usr/local/cuda/bin/cuobjdump.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def sizes(text):
    """{mangled function name: instruction count} from `cuobjdump -sass` text."""
    out, name = {}, None
    for line in text.splitlines():
        if "Function :" in line:
            name = line.split("Function :", 1)[1].strip()
            out.setdefault(name, 0)
            continue
        m = INSTR.match(line)
        if name is None or not m:
            continue
        op = m.group(1)
        op = re.sub(r"^@!?U?P[0-9T]+\s+", "", op)  # the guard predicate
        if op.startswith("NOP"):
            continue
        out[name] += 1
    # The trailing `BRA` to itself after EXIT is padding, one per function: not counted.
    return {k: max(v - 1, 0) for k, v in out.items()}


def lines(text, rx):
    """{function: {source site: instructions}} from `nvdisasm -gi` text, for functions matching rx.
    nvdisasm annotates a run of instructions with the chain of lines it came from, innermost first
    ("line L inlined at ..."), the function's own line last; a site is "file:line" of the innermost,
    then " <- file:line" of the function's own line when they differ. NOPs are not counted."""
    out, fn, site, chain = {}, None, "?", []
    pat = re.compile(rx)
    for line in text.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            fn = m.group(1) if pat.search(m.group(1)) else None
            if fn:
                out.setdefault(fn, {})
            site, chain = "?", []
            continue
        if fn is None:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            chain.append(f"{os.path.basename(m.group(1))}:{m.group(2)}")
            site = chain[0] if len(chain) == 1 or chain[0] == chain[-1] else f"{chain[0]} <- {chain[-1]}"
            continue
        chain = []
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m and not re.sub(r"^@!?U?P[0-9T]+\s+", "", m.group(1)).startswith("NOP"):
            out[fn][site] = out[fn].get(site, 0) + 1
    return out


def read_text(a, name, explicit, flag, usage):
    """The disassembly: --from-text's file, else `name flag BINARY` (the tool from --name, $NAME, the
    PATH, or /usr/local/cuda/bin)."""
    if a.from_text:
        with open(a.from_text) as f:
            return f.read()
    if not a.binary:
        sys.exit(usage)
    tool = explicit or os.environ.get(name.upper()) or shutil.which(name) or f"/usr/local/cuda/bin/{name}"
    if not os.path.exists(tool) and not shutil.which(tool):
        sys.exit(f"sass_sizes.py: no {name} (tried {tool}); pass --{name} PATH or --from-text FILE")
    p = subprocess.run([tool, flag, a.binary], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"sass_sizes.py: {tool} {flag} {a.binary} failed: {p.stderr.strip()[:300]}")
    return p.stdout


def main_lines(a):
    text = read_text(a, "nvdisasm", a.nvdisasm, "-gi",
                     "usage: sass_sizes.py --lines REGEX CUBIN | --lines REGEX --from-text NVDISASM.txt")
    found = lines(text, a.lines)
    if not found:
        sys.exit(f"sass_sizes.py: no function matches '{a.lines}'")
    names = demangle(sorted(found))
    for fn in sorted(found):
        sites = sorted(found[fn].items(), key=lambda kv: (-kv[1], kv[0]))
        print(f"{sum(found[fn].values()):7d}  {short(names[fn])[:150]}")
        for site, n in sites[: a.top or len(sites)]:
            print(f"    {n:6d}  {site}")


def elf_sizes(path):
    """{function: instructions} from the .text.NAME sections of an ELF64 cubin (size / 16)."""
    import struct
    with open(path, "rb") as f:
        d = f.read()
    if d[:4] != b"\x7fELF" or d[4] != 2:
        sys.exit(f"sass_sizes.py: {path} is not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    stroff = secs[shstrndx][4]
    out = {}
    for sec in secs:
        name = d[stroff + sec[0]: d.index(b"\0", stroff + sec[0])].decode()
        if name.startswith(".text."):
            out[name[len(".text."):]] = sec[5] // 16
    return out


def main_elf(a):
    # Kernels match across the two cubins by demangled name: an anonymous namespace's hash differs
    # between builds but demangles to "(anonymous namespace)".
    sides = [elf_sizes(a.elf)] + ([elf_sizes(a.binary)] if a.binary else [])
    named = []
    for side in sides:
        dm = demangle(sorted(side))
        named.append({short(dm[k]): v for k, v in side.items()})
    rx = re.compile(a.grep) if a.grep else None
    rows = []
    for n in sorted(set().union(*named)):
        if rx and not rx.search(n):
            continue
        b = named[0].get(n)
        if len(named) == 1:
            rows.append((b, f"{b:7d}  {n[:150]}"))
            continue
        c = named[1].get(n)
        if b == c:
            continue
        delta = f"{c - b:+6d}" if b is not None and c is not None else "   new" if b is None else "  gone"
        rows.append((abs(c - b) if b is not None and c is not None else c or b,
                     f"{b if b is not None else '-':>7} {c if c is not None else '-':>7} {delta}  {n[:140]}"))
    rows.sort(key=lambda r: -r[0])
    for _, line in rows[: a.top or len(rows)]:
        print(line)
    if len(named) == 2 and not rows:
        print("sass_sizes.py: no kernel's code size changed")


def demangle(names, tool=None):
    """{mangled: demangled} through c++filt (or `tool`, e.g. CUDA's cu++filt); names as they are without one."""
    tool = tool if tool and os.path.exists(tool) else shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    p = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    lines = p.stdout.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def short(name):
    name = re.sub(r"pg::ops::cuda::|\(anonymous namespace\)::|pg::engine::cuda::", "", name)
    name = re.sub(r"\(pg::ops::cuda::LinearWeight\)|\(LinearWeight\)", "W", name)
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?")
    ap.add_argument("--from-text")
    ap.add_argument("--grep", default="")
    ap.add_argument("--cuobjdump", default="")
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--lines", default="", help="per source line, for the functions matching this regex")
    ap.add_argument("--nvdisasm", default="")
    ap.add_argument("--elf", default="", help="a cubin: code sizes from its ELF sections (CUBIN_AFTER: compare)")
    a = ap.parse_args()
    if a.elf:
        return main_elf(a)
    if a.lines:
        return main_lines(a)
    text = read_text(a, "cuobjdump", a.cuobjdump, "-sass",
                     "usage: sass_sizes.py LIB_OR_BINARY [--grep REGEX] [--top N] | --from-text SASS.txt")
    s = sizes(text)
    if not s:
        sys.exit("sass_sizes.py: no SASS functions found")
    names = demangle(sorted(s))
    rows = [(v, short(names[k])) for k, v in s.items()]
    if a.grep:
        rx = re.compile(a.grep)
        rows = [r for r in rows if rx.search(r[1])]
    rows.sort(key=lambda r: (-r[0], r[1]))
    if a.top:
        rows = rows[: a.top]
    for v, n in rows:
        print(f"{v:7d}  {n[:150]}")
    print(f"{sum(v for v, _ in rows):7d}  total of {len(rows)} functions ({sum(v for v, _ in rows) * 16 / 1024:.0f} KB of code)")


if __name__ == "__main__":
    main()
