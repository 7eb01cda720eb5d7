#!/usr/bin/env python3
"""scripts/ncu_step.py, scripts/bench_sweep.sh, scripts/sass_sizes.py and scripts/timeline_report.py on the
build machine (no GPU): a generated ncu CSV, a stub `peregrine`, cuobjdump- and nvdisasm-format text, a
generated timeline. usage: scripts_test.py SOURCE_DIR"""
import csv
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)


HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]


def write_csv(path, steps, extras=True):
    """steps: lists of (kernel name, us); every launch also gets instructions, warps and a stall ratio."""
    rows, i = [], 0
    for step in steps:
        for k, (name, us) in enumerate(step):
            metrics = [("gpu__time_duration.sum", "nsecond", f"{us * 1000:,.0f}")]
            if extras:
                metrics += [("smsp__inst_executed.sum", "inst", str(1000 * (k + 1))),
                            ("smsp__warps_launched.sum", "warp", "8"),
                            ("smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio", "", f"0.{k + 1}")]
            for m, unit, v in metrics:
                rows.append([str(i), "1", "peregrine", "h", name, "1", "7", "(256, 1, 1)", "(132, 1, 1)", "0", "9.0",
                             "Command line profiler metrics", m, unit, v])
            i += 1
    with open(path, "w", newline="") as f:
        f.write("==PROF== Connected to process 1\n")  # ncu's own lines are not CSV rows
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(HEADER)
        w.writerows(rows)


def run(args, env=None):
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout + p.stderr


def test_ncu_step(tmp):
    emb, att, norm = "embedding_kernel(P)", "void pg::ops::cuda::mla_attention_kernel<8, false>(P)", "void pg::ops::cuda::rmsnorm_kernel(P)"
    decode = [(emb, 2.0), (att, 12.5), (norm, 3.1), (norm, 3.3)]
    prefill = [(emb, 20.0)] + [(att, 100.0)] * 6
    path = os.path.join(tmp, "step.csv")
    write_csv(path, [prefill, decode, decode, [(emb, 2.0), (att, 99.0), (norm, 3.0), (norm, 3.0)]])
    tool = os.path.join(ROOT, "scripts", "ncu_step.py")
    rc, out = run([sys.executable, tool, path])
    check(rc == 0, f"ncu_step.py: rc {rc}: {out}")
    # The last step of the most common length (4 kernels): step 3, the 99 us attention.
    check("step 3: 4 kernels, 107.0 us of kernel time (each alone)" in out, f"ncu_step.py default step: {out}")
    check("     2       6.0" in out, f"ncu_step.py by-kernel rmsnorm total: {out}")
    # Extra metrics: means per kernel name; instructions per warp = inst / warps (attention: 2000 / 8).
    check("inst/warp" in out and "250  mla_attention_kernel<8, false>" in out, f"ncu_step.py extras: {out}")
    check("stall no_instruction" in out, f"ncu_step.py stall label: {out}")
    rc, out = run([sys.executable, tool, path, "--step", "1", "--summary"])
    check(rc == 0 and out.strip() == "step 1: 4 kernels, 20.9 us of kernel time (each alone)", f"ncu_step.py --step 1: {out}")
    rc, out = run([sys.executable, tool, path, "--compare=1,-1"])
    check(rc == 0 and "total     20.9 | total    107.0" in out, f"ncu_step.py --compare: {out}")
    rc, out = run([sys.executable, tool, path, "--step", "9"])
    check(rc != 0 and "4 steps" in out, f"ncu_step.py --step past the end: rc {rc}: {out}")
    plain = os.path.join(tmp, "plain.csv")  # durations only, as the suite's default collects
    write_csv(plain, [decode, decode], extras=False)
    rc, out = run([sys.executable, tool, plain])
    check(rc == 0 and "extra metrics" not in out and "step 1: 4 kernels" in out, f"ncu_step.py durations only: {out}")
    noemb = os.path.join(tmp, "noemb.csv")
    write_csv(noemb, [[(att, 1.0)]])
    rc, out = run([sys.executable, tool, noemb])
    check(rc != 0 and "no embedding_kernel" in out, f"ncu_step.py without a step: rc {rc}: {out}")


def test_bench_sweep(tmp):
    # A stub peregrine: tok/s from the environment (STUB_TOKS), the round from a counter file, so the
    # means and changes the sweep prints can be checked; FAIL_STUB=1 prints nothing (a failed run).
    stub = os.path.join(tmp, "peregrine")
    counter = os.path.join(tmp, "count")
    with open(stub, "w") as f:
        f.write(f"""#!/usr/bin/env bash
n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}
[ "${{FAIL_STUB:-}}" = 1 ] && exit 3
echo "model        stub"
echo "decode b=1   ${{STUB_TOKS:-100.0}} tok/s (1.000 ms/token) after 1024 prompt tokens"
""")
    os.chmod(stub, 0o755)
    other = os.path.join(tmp, "other")
    with open(other, "w") as f:
        f.write("#!/usr/bin/env bash\necho 'decode b=1   90.0 tok/s'\n")
    os.chmod(other, 0o755)
    tool = os.path.join(ROOT, "scripts", "bench_sweep.sh")
    rc, out = run(["bash", tool, stub, "2", "moonlight-16b-a3b:bf16:0 deepseek-v3:fp8:4", "-", "STUB_TOKS=110.0",
                   "bin=" + other, "FAIL_STUB=1"])
    check(rc == 0, f"bench_sweep.sh rc {rc}: {out}")
    lines = [l for l in out.splitlines() if l.startswith("sweep ")]
    check(len(lines) == 8, f"bench_sweep.sh: 8 sweep lines (2 benches x 4 variants): {out}")
    check(any("moonlight-16b-a3b bf16 L0 -" in l and "100.0 100.0 | mean 100.0 +0.0%" in l for l in lines), f"base: {out}")
    check(any("STUB_TOKS=110.0" in l and "| mean 110.0 +10.0%" in l for l in lines), f"env variant: {out}")
    check(any("bin=" in l and "90.0 90.0 | mean 90.0 -10.0%" in l for l in lines), f"bin variant: {out}")
    check(any("FAIL_STUB=1" in l and "? ? | mean ?" in l for l in lines), f"failed runs: {out}")
    check(out.count("FAIL_STUB=1: no decode figure (rc=3)") == 2, f"a failed run says why, once a bench: {out}")
    check(any("deepseek-v3 fp8 L4 -" in l for l in lines), f"layers field: {out}")
    with open(counter) as f:  # 2 benches x 2 rounds x 3 variants run the stub (bin= runs the other)
        check(f.read().strip() == "12", "bench_sweep.sh: the stub ran 12 times")
    rc, out = run(["bash", tool, stub, "1", "x:bf16:0"])
    check(rc != 0 and "no variants" in out, f"bench_sweep.sh without variants: rc {rc}: {out}")
    # Several metrics from the same runs: one run per round and variant, timing the ks asked for.
    spec = os.path.join(tmp, "spec")
    with open(spec, "w") as f:
        f.write(f"""#!/usr/bin/env bash
n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}
case " $* " in *" --speculative-tokens 1,3 "*) ;; *) exit 4 ;; esac
echo "decode b=1   100.0 tok/s (1.000 ms/token)"
echo "spec k=1   verify 2.000 ms (plain 1.000 ms; x); draft 0.100 ms (y)"
echo "spec k=3   verify ${{STUB_V3:-3.000}} ms (plain 1.000 ms; x); draft 0.300 ms (y)"
""")
    os.chmod(spec, 0o755)
    os.remove(counter)
    env = dict(os.environ, PG_SWEEP_METRIC="verify3 verify1 decode")
    rc, out = run(["bash", tool, spec, "2", "moonlight-16b-a3b:nvfp4:0", "-", "STUB_V3=2.700"], env=env)
    check(rc == 0, f"bench_sweep.sh, several metrics: rc {rc}: {out}")
    lines = [l for l in out.splitlines() if l.startswith("sweep ")]
    check(len(lines) == 6, f"bench_sweep.sh: 6 sweep lines (3 metrics x 2 variants): {out}")
    check(any("verify1(ms) -" in l and "2.000 2.000 | mean 2.000 +0.0%" in l for l in lines), f"verify1: {out}")
    check(any("verify3(ms) STUB_V3=2.700" in l and "| mean 2.700 -10.0%" in l for l in lines), f"verify3: {out}")
    check(any(" L0 STUB_V3=2.700" in l and "| mean 100.0 +0.0%" in l for l in lines), f"decode: {out}")
    with open(counter) as f:  # 2 rounds x 2 variants: one run each for the three metrics
        check(f.read().strip() == "4", "bench_sweep.sh: several metrics ran the stub 4 times")
    rc, out = run(["bash", tool, spec, "1", "x:bf16:0", "-"], env=dict(os.environ, PG_SWEEP_METRIC="verify9"))
    check(rc != 0 and "verify1..verify4" in out, f"bench_sweep.sh with a bad metric: rc {rc}: {out}")


SASS = """
\tcode for sm_90a
\t.target\tsm_90a

\t\tFunction : _ZN2pg3ops4cuda3fooEv
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
                                                                                   /* 0x000ff00000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                              /* 0x0000000000007919 */
        /*0020*/              @!P0 BRA 0x40 ;                                      /* 0x0000000000000947 */
        /*0030*/                   NOP ;                                           /* 0x0000000000007918 */
        /*0040*/                   EXIT ;                                          /* 0x000000000000794d */
        /*0050*/                   BRA 0x50;                                       /* 0xfffffffc00fc7947 */
        /*0060*/                   NOP;                                            /* 0x0000000000007918 */
\t\t..........

\t\tFunction : _ZN2pg3ops4cuda3barEi
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
        /*0010*/                   EXIT ;                                          /* 0x000000000000794d */
        /*0020*/                   BRA 0x20;                                       /* 0xfffffffc00fc7947 */
"""


def test_sass_sizes(tmp):
    path = os.path.join(tmp, "k.sass")
    with open(path, "w") as f:
        f.write(SASS)
    tool = os.path.join(ROOT, "scripts", "sass_sizes.py")
    rc, out = run([sys.executable, tool, "--from-text", path])
    # foo: LDC, S2R, the guarded BRA, EXIT (NOPs and the final self-branch are not counted); bar: LDC, EXIT.
    check(rc == 0 and "      4  foo()" in out and "      2  bar(int)" in out
          and "      6  total of 2 functions" in out, f"sass_sizes.py: rc {rc}: {out}")
    rc, out = run([sys.executable, tool, "--from-text", path, "--grep", "bar"])
    check(rc == 0 and "foo" not in out and "total of 1 functions" in out, f"sass_sizes.py --grep: {out}")
    rc, out = run([sys.executable, tool, "no-such-binary", "--cuobjdump", "/no/such/cuobjdump"])
    check(rc != 0 and "no cuobjdump" in out, f"sass_sizes.py without cuobjdump: rc {rc}: {out}")


NVDISASM = """
	.section	.text._Z3foov,"ax",@progbits
	.text._Z3foov:
	//## File "/src/k.cu", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
	//## File "/src/h.cuh", line 3 inlined at "/src/k.cu", line 12
	//## File "/src/k.cu", line 12
        /*0020*/              @!P0 FADD R2, R0, R0 ;
        /*0030*/                   NOP ;
        /*0040*/                   EXIT ;
	.text._Z3barv:
	//## File "/src/k.cu", line 20
        /*0000*/                   EXIT ;
"""


def test_sass_lines(tmp):
    path = os.path.join(tmp, "k.nvdisasm")
    with open(path, "w") as f:
        f.write(NVDISASM)
    tool = os.path.join(ROOT, "scripts", "sass_sizes.py")
    rc, out = run([sys.executable, tool, "--lines", "foo", "--from-text", path])
    # foo: 2 at k.cu:10, then FADD and EXIT inlined from h.cuh:3 at k.cu:12 (the NOP not counted); bar not matched.
    check(rc == 0 and "      4  foo()" in out and "     2  k.cu:10" in out and "     2  h.cuh:3 <- k.cu:12" in out
          and "bar" not in out, f"sass_sizes.py --lines: rc {rc}: {out}")
    rc, out = run([sys.executable, tool, "--lines", "nothing", "--from-text", path])
    check(rc != 0 and "no function matches" in out, f"sass_sizes.py --lines with no match: rc {rc}: {out}")


def test_timeline_report(tmp):
    """Four layers of router (8 blocks), gate_up (3 blocks on SMs 0-2), down (2 blocks: SM 0 while its
    gate_up block still runs, SM 2 after its gate_up block ended) and rmsnorm, 60 us apart, times in ns after the router's wait."""
    rows = ["t_ns,kernel,point,block,sm"]
    for layer in range(4):
        t0 = 1_000_000 + 60_000 * layer
        for b in range(8):
            rows += [f"{t0 - 2000},2,0,{b},{b}", f"{t0 + 10 * b},2,1,{b},{b}", f"{t0 + 1500},2,2,{b},{b}"]
        rows += [f"{t0 + 2500},2,4,7,7", f"{t0 + 5000},2,3,7,7"]
        for b in range(3):
            rows += [f"{t0 + 1000},3,0,{b},{b}", f"{t0 + 6000},3,1,{b},{b}", f"{t0 + 12000 + 1000 * b},3,3,{b},{b}"]
        for b, (sm, start) in enumerate([(0, 9000), (2, 15000)]):
            rows += [f"{t0 + start},4,0,{b},{sm}", f"{t0 + 15000},4,1,{b},{sm}", f"{t0 + 20000},4,4,{b},{sm}"]
        rows += [f"{t0 + 21000},1,0,0,9", f"{t0 + 22000},1,1,0,9", f"{t0 + 23000},1,2,0,9"]
        for start in (24000, 30000):  # two launches of one kernel 5 us apart: two launches, not one
            for b in range(2):
                rows += [f"{t0 + start},10,0,{b},{b}", f"{t0 + start + 1000},10,2,{b},{b}"]
    path = os.path.join(tmp, "timeline.csv")
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    tool = os.path.join(ROOT, "scripts", "timeline_report.py")
    rc, out = run([sys.executable, tool, path])
    # Layers 1 and 2 (the first and last router launches are left out): routed at 5 us, gate_up's
    # last block ends at 14, the down's blocks start at 9 and 15 (SM 0 before its gate_up block's end).
    check(rc == 0 and "medians over 2 layers" in out, f"timeline_report.py: rc {rc}: {out}")
    check("routed (last block)      5.00     5.00     5.00" in out, f"timeline_report.py routed: {out}")
    check("gate_up  end                     12.00    13.00    14.00" in out, f"timeline_report.py gate_up: {out}")
    check("down     start                    9.00    12.00    15.00" in out, f"timeline_report.py down: {out}")
    check("before its last gate_up block ended: 50.0% of 4 on SMs" in out, f"timeline_report.py co-residency: {out}")
    check("-5.00 / -2.00 us" in out, f"timeline_report.py down after gate_up: {out}")
    # Each routed gate_up block alone on its SM (3 SMs): the SMs' last blocks end 6, 7, 8 us after the wait.
    check("  1 a SM on   3.0 SMs: the SM's last block ends   7.00" in out, f"timeline_report.py per SM: {out}")
    check("   4 linear_mma     2    24.00        -    25.00" in out and "   5 linear_mma     2    30.00        -    31.00" in out,
          f"timeline_report.py launches of one kernel: {out}")
    check("   2 down           2     9.00    15.00    20.00" in out and "   3 rmsnorm        1    21.00    22.00    23.00" in out,
          f"timeline_report.py launch order: {out}")
    with open(path, "w") as f:
        f.write("t_ns,kernel,point,block,sm\n")
    rc, out = run([sys.executable, tool, path])
    check(rc != 0 and "no records" in out, f"timeline_report.py on an empty timeline: rc {rc}: {out}")


with tempfile.TemporaryDirectory() as tmp:
    test_timeline_report(tmp)
    test_ncu_step(tmp)
    test_bench_sweep(tmp)
    test_sass_sizes(tmp)
    test_sass_lines(tmp)
for f in FAILS:
    print("FAIL:", f)
print(f"scripts_test: {'FAILED' if FAILS else 'passed'}")
sys.exit(1 if FAILS else 0)
