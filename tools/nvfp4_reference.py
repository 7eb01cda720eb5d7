#!/usr/bin/env python3
"""NVFP4 quantizer in PyTorch, written to reproduce formats/nvfp4.cpp bit for bit.

Layout and rules (and their sources: NVIDIA ModelOpt's NVFP4QTensor, vLLM's modelopt.py) are
documented in formats/nvfp4.h. Every step here is an f32 (or, for the MSE search, f64) tensor
operation in the same order as the C++ code, on the CPU, so each rounding is the same IEEE one.

  python3 tools/nvfp4_reference.py --self-test
  python3 tools/nvfp4_reference.py --golden tests/golden/nvfp4   # writes nvfp4_golden.safetensors

The fixture holds, per case C: C.w F32 [r, c], C.args F32 [2] = (scale_2_or_auto, mse_search),
and this quantizer's C.weight U8 [r, c/2], C.weight_scale F8_E4M3 [r, c/16], C.weight_scale_2
F32 [], C.dequant F32 [r, c]; tests/unit/formats/nvfp4_test.cpp quantizes C.w with C.args and
compares every byte.
"""

import argparse
import json
import os
import struct
import sys

import torch

BLOCK = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
E4M3_MIN = 2.0**-9  # smallest e4m3fn subnormal
E4M3_MAX_CODE = 0x7E  # 448; 0x7f is NaN
MSE_STEPS = (-1, -2, -3, -4, +1)  # candidate e4m3 codes relative to the amax-derived one, in order

E2M1_VALUES = torch.tensor(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float32)
# Midpoints between consecutive e2m1 magnitudes; a tie at index 1, 3 or 5 rounds up (to the even
# mantissa), a tie at 0, 2, 4, 6 rounds down (also even).
MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float32)
TIE_UP = MIDPOINTS[[1, 3, 5]]


def encode_e2m1(q: torch.Tensor) -> torch.Tensor:
    """e2m1 codes of f32 values: RNE, saturating at 6; sign bit only for q < 0; NaN -> 0."""
    a = q.abs().unsqueeze(-1)
    code = (a > MIDPOINTS).sum(-1) + (a == TIE_UP).any(-1).to(torch.int64)
    return (code | ((q < 0).to(torch.int64) << 3)).to(torch.uint8)


def e4m3_to_f32(codes: torch.Tensor) -> torch.Tensor:
    return codes.view(torch.float8_e4m3fn).to(torch.float32)


def decode(codes: torch.Tensor, s: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    """(e2m1 * fp8) * scale_2 in f32: the exact product rounded once. s broadcasts over the block."""
    return (E2M1_VALUES[codes.long()] * s.unsqueeze(-1)) * scale_2


def block_sq_error(x: torch.Tensor, codes: torch.Tensor, s_code: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    d = x.double() - decode(codes, e4m3_to_f32(s_code), scale_2).double()
    err = torch.zeros(x.shape[:-1], dtype=torch.float64)
    for j in range(BLOCK):  # sequential, as the C++ loop
        err = err + d[..., j] * d[..., j]
    return err


def encode_blocks(x: torch.Tensor, s_code: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    denom = e4m3_to_f32(s_code) * scale_2  # f32, rounded before the division (as ModelOpt)
    return encode_e2m1(x / denom.unsqueeze(-1))


def quantize(w: torch.Tensor, scale_2_or_auto: float = 0.0, mse_search: bool = False):
    """Returns (packed u8 [r, c/2], scale e4m3 codes u8 [r, c/16], scale_2 f32 0-dim)."""
    w = w.detach().to(device="cpu", dtype=torch.float32).contiguous()
    rows, cols = w.shape
    assert cols % BLOCK == 0, f"cols {cols} is not a multiple of {BLOCK}"
    assert bool(torch.isfinite(w).all()), "non-finite weight"
    assert scale_2_or_auto >= 0 and scale_2_or_auto != float("inf")
    if scale_2_or_auto > 0:
        scale_2 = torch.tensor(scale_2_or_auto, dtype=torch.float32)
    else:
        amax = w.abs().max()
        scale_2 = amax / (E4M3_MAX * E2M1_MAX) if float(amax) > 0 else torch.tensor(1.0, dtype=torch.float32)
    x = w.view(rows, cols // BLOCK, BLOCK)
    bamax = x.abs().amax(-1)
    q = bamax / (E2M1_MAX * scale_2)
    q = torch.where(q == 0, torch.ones_like(q), q).clamp(E4M3_MIN, E4M3_MAX)
    s_code = q.to(torch.float8_e4m3fn).view(torch.uint8)
    codes = encode_blocks(x, s_code, scale_2)
    if mse_search:
        best = block_sq_error(x, codes, s_code, scale_2)
        base = s_code.to(torch.int64)
        for step in MSE_STEPS:
            c = base + step
            valid = (c >= 1) & (c <= E4M3_MAX_CODE) & (bamax > 0)
            c_u8 = c.clamp(1, E4M3_MAX_CODE).to(torch.uint8)
            trial = encode_blocks(x, c_u8, scale_2)
            err = block_sq_error(x, trial, c_u8, scale_2)
            better = valid & (err < best)
            best = torch.where(better, err, best)
            s_code = torch.where(better, c_u8, s_code)
            codes = torch.where(better.unsqueeze(-1), trial, codes)
    codes = codes.view(rows, cols)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)  # element 2j low nibble, 2j+1 high nibble
    return packed.contiguous(), s_code.contiguous(), scale_2


def dequantize(packed: torch.Tensor, s_code: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    rows, half = packed.shape
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).view(rows, half * 2)
    x = codes.view(rows, -1, BLOCK)
    return decode(x, e4m3_to_f32(s_code), scale_2.to(torch.float32)).view(rows, half * 2)


# ---- self-test ------------------------------------------------------------------------------

def scalar_encode(v: float) -> int:
    """Independent scalar RNE onto the e2m1 grid (Python floats are f64; exact for f32 inputs)."""
    if not (v < 0 or v > 0):
        return 0
    a, sign = abs(v), 8 if v < 0 else 0
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    best = min(range(8), key=lambda i: (abs(grid[i] - a), i % 2))  # nearest, then even mantissa
    return sign | best


def self_test() -> None:
    for code in range(16):
        v = E2M1_VALUES[code:code + 1]
        assert int(encode_e2m1(v)[0]) == (0 if code == 8 else code), code
    ties = {0.25: 0, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5.0: 6, -0.25: 8, -2.5: 12, -5.0: 14, -0.1: 8,
            6.0: 7, 7.0: 7, float("inf"): 7, float("-inf"): 15, 0.0: 0, -0.0: 0, float("nan"): 0}
    for v, code in ties.items():
        assert int(encode_e2m1(torch.tensor([v]))[0]) == code, (v, code)
    g = torch.Generator().manual_seed(0)
    r = torch.randn(4096, generator=g) * 4
    assert all(int(c) == scalar_encode(float(v)) for v, c in zip(r, encode_e2m1(r))), "vector vs scalar encode"

    # Hand-worked block (the same as nvfp4_test.cpp's HandWorkedBlockWithUnitScales).
    w = torch.tensor([[6, -6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -5, 4, -0.5, 0, 1, 1.5, -3]])
    p, s, s2 = quantize(w, 1.0)
    assert p.tolist() == [[0xF7, 0x20, 0x42, 0x64, 0xE6, 0x96, 0x20, 0xD3]] and s.tolist() == [[0x38]], (p, s)
    p, s, s2 = quantize(torch.ones(1, 16), 0.5)
    assert s.tolist() == [[0x2B]] and float(dequantize(p, s, s2)[0, 0]) == 1.03125
    p, s, s2 = quantize(torch.zeros(3, 32))
    assert float(s2) == 1.0 and bool((s == 0x38).all()) and bool((dequantize(p, s, s2) == 0).all())

    for rows, cols, sigma in [(1, 16, 1.0), (7, 48, 0.02), (33, 256, 3e3)]:
        w = torch.randn(rows, cols, generator=g) * sigma
        errs = []
        for mse in (False, True):
            p, s, s2 = quantize(w, 0.0, mse)
            d = dequantize(p, s, s2)
            unit = (e4m3_to_f32(s) * s2).repeat_interleave(BLOCK, dim=1)
            assert bool(((w - d).abs() <= (3.0 if mse else 1.0) * unit * 1.0001).all()), (rows, cols, mse)
            errs.append(((w.double() - d.double()) ** 2).view(rows, -1, BLOCK).sum(-1))
        assert bool((errs[1] <= errs[0] * (1 + 1e-12)).all()), "mse search made a block worse"
        # Row-split invariance (the C++ splits rows over threads): quantizing halves gives the same bytes.
        if rows > 1:
            p, s, s2 = quantize(w, float(quantize(w)[2]), True)
            h = rows // 2
            p0, s0, _ = quantize(w[:h], float(s2), True)
            p1, s1, _ = quantize(w[h:], float(s2), True)
            assert torch.equal(torch.cat([p0, p1]), p) and torch.equal(torch.cat([s0, s1]), s)

    try:  # ModelOpt's own quantizer, when installed: the non-MSE path must agree byte for byte.
        from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
    except ImportError:
        print("modelopt not installed: skipped the comparison with NVFP4QTensor.quantize")
    else:
        w = torch.randn(64, 128, generator=g) * 0.05
        qt, ms, ms2 = NVFP4QTensor.quantize(w.clone(), BLOCK)
        p, s, s2 = quantize(w)
        assert torch.equal(qt._quantized_data.cpu(), p), "packed codes differ from ModelOpt"
        assert torch.equal(ms.cpu().view(torch.uint8), s), "block scales differ from ModelOpt"
        assert float(ms2) == float(s2), (float(ms2), float(s2))
        print("matches modelopt NVFP4QTensor.quantize")
    print("nvfp4_reference self-test: ok")


# ---- golden fixture -------------------------------------------------------------------------

ST_DTYPES = {torch.float32: "F32", torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3"}


def write_safetensors(path: str, tensors: dict, metadata: dict) -> None:
    """Minimal safetensors writer (format: the safetensors README): u64 LE header length, JSON header
    padded with spaces to a multiple of 8, then the tensors' little-endian bytes back to back."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = bytes(t.reshape(-1).view(torch.uint8).tolist())
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(path + ".tmp", path)


def golden_cases():
    g = torch.Generator().manual_seed(1234)
    gauss = torch.randn(8, 64, generator=g) * 0.02
    ties = torch.tensor([[6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -6, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5],
                         # e4m3 ties with scale_2 = 1: q = 6.375 / 6 = 1.0625 (-> 1.0), q = 7.125 / 6 = 1.1875 (-> 1.25)
                         [6.375, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                         [7.125, -1, 2.5, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
    zero_blocks = torch.randn(4, 64, generator=g)
    zero_blocks[:, 16:32] = 0
    zero_blocks[2] = 0
    tiny_huge = torch.zeros(2, 32)
    tiny_huge[0, :16] = torch.tensor([(1e-30 if j % 2 == 0 else -1e-30) * (j + 1) for j in range(16)])
    tiny_huge[0, 16:] = torch.tensor([3e37 * ((j + 1) / 16) for j in range(16)])
    tiny_huge[1, :16] = torch.tensor([1e-3 * (j + 1) / 16 for j in range(16)])
    tiny_huge[1, 16:] = 3000.0
    wide = torch.randn(3, 256, generator=g) * torch.logspace(-6, 2, 256)  # per-column magnitudes 1e-6..1e2
    return {
        "gauss_auto": (gauss, 0.0, False),
        "gauss_mse": (gauss, 0.0, True),
        "gauss_given_scale_2": (gauss, 0.37 / 2688, False),
        "ties_unit_scale_2": (ties, 1.0, False),
        "ties_auto_mse": (ties, 0.0, True),
        "zeros": (torch.zeros(2, 32), 0.0, False),
        "zeros_mse": (torch.zeros(2, 32), 0.0, True),
        "zero_blocks_mse": (zero_blocks, 0.0, True),
        "tiny_huge": (tiny_huge, 0.0, False),
        "tiny_huge_mse": (tiny_huge, 0.0, True),
        "saturate_given_scale_2": (torch.full((1, 16), 1000.0), 1e-3, False),
        "wide_range_mse": (wide, 0.0, True),
        "odd_rows": (torch.randn(7, 48, generator=g), 0.0, False),
    }


def write_golden(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    for name, (w, s2_arg, mse) in golden_cases().items():
        w = w.to(torch.float32).contiguous()
        p, s, s2 = quantize(w, s2_arg, mse)
        tensors[f"{name}.w"] = w
        tensors[f"{name}.args"] = torch.tensor([s2_arg, 1.0 if mse else 0.0], dtype=torch.float32)
        tensors[f"{name}.weight"] = p
        tensors[f"{name}.weight_scale"] = s.view(torch.float8_e4m3fn)
        tensors[f"{name}.weight_scale_2"] = s2.to(torch.float32).reshape(())
        tensors[f"{name}.dequant"] = dequantize(p, s, s2)
    path = os.path.join(out_dir, "nvfp4_golden.safetensors")
    write_safetensors(path, tensors, {"producer": "tools/nvfp4_reference.py", "torch": torch.__version__})
    print(f"wrote {path}: {len(tensors) // 6} cases")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check the quantizer's rules on random tensors")
    ap.add_argument("--golden", metavar="DIR", help="write DIR/nvfp4_golden.safetensors")
    args = ap.parse_args()
    if not args.self_test and not args.golden:
        ap.error("give --self-test and/or --golden DIR")
    if args.self_test:
        self_test()
    if args.golden:
        write_golden(args.golden)
    return 0


if __name__ == "__main__":
    sys.exit(main())
