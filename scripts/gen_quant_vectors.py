#!/usr/bin/env python3
"""Generate known-answer vectors for ferrolm-kernels' block formats.

Uses the `gguf` Python package (the reference quantizers/dequantizers maintained alongside
llama.cpp) to produce, for each supported type, a small deterministic tensor of 2 rows x 512
columns:

- `input_f32`: the f32 input rows (absent for K-quants, where python can only dequantize and the
  quantized bytes are random blocks with sane f16 scales instead);
- `quant`: the quantized bytes, as produced by `gguf.quants.quantize`;
- `dequant_f32`: `gguf.quants.dequantize(quant)` as f32.

All arrays are stored as lower-case hex of their little-endian bytes, so no float ever goes
through a decimal round trip. Output: crates/ferrolm-kernels/tests/data/<TYPE>.json

Usage: python3 scripts/gen_quant_vectors.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize, dequantize

ROWS, COLS = 2, 512
OUT = Path(__file__).resolve().parent.parent / "crates" / "ferrolm-kernels" / "tests" / "data"


def hexf32(a: np.ndarray) -> str:
    return np.ascontiguousarray(a, dtype="<f4").tobytes().hex()


def float_input(rng: np.random.Generator, special: bool) -> np.ndarray:
    """Seeded normal rows with a few hand-made 32-element blocks mixed in."""
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[0, 0:32] = 0.0  # an all-zero block
    x[0, 32:64] *= np.float32(2500.0)  # large magnitude (still finite in f16 after scaling)
    x[0, 64:96] = np.float32(1e-3) * x[0, 64:96]  # small magnitude
    blk = np.zeros(32, dtype=np.float32)  # equal |max| with opposite signs: first one wins
    blk[3], blk[17], blk[20] = -3.0, 3.0, 1.25
    x[0, 96:128] = blk
    # Exact rounding ties: with max|x| = 127 (Q8_0: d = 1) or max = -8 (Q4_0: d = 1), k + 0.5
    # lands exactly halfway; GGML rounds half away from zero (Q8_0) or truncates x/d + 8.5.
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5, 7.5, -7.5, 6.5, -6.5, 0.25, -0.75], dtype=np.float32)
    x[0, 128:160] = 0.0
    x[0, 128] = 127.0
    x[0, 129:129 + len(ties)] = ties
    x[0, 160:192] = 0.0
    x[0, 160] = -8.0
    x[0, 161:161 + len(ties)] = ties
    x[1, 0:32] = np.float32(-7.0)  # constant block (max == min)
    x[1, 32:64] = np.abs(x[1, 32:64])  # all positive
    x[1, 64:96] = -np.abs(x[1, 64:96])  # all negative
    x[1, 96:128] = np.arange(32, dtype=np.float32) - np.float32(15.5)  # ramp with ties
    if special:
        # Float formats only: rounding ties, subnormals, overflow, infinities, NaN.
        vals = [
            1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 65504.0, 65519.0, 65520.0, 1e5, -1e5,
            2.0**-24, 2.0**-25, 3 * 2.0**-26, 1e-30, -0.0, np.inf, -np.inf,
            1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 3.0e38, np.finfo(np.float32).max,
            np.float32(1.17549435e-38), 1e-40, np.nan, -np.nan,
        ]
        x[1, 128:128 + len(vals)] = np.array(vals, dtype=np.float32)
    return x


def k_quant_bytes(rng: np.random.Generator, qtype: T) -> np.ndarray:
    """Random K-quant blocks with finite, moderate f16 scales."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)

    def f16(lo: float, hi: float) -> np.ndarray:
        v = rng.uniform(lo, hi, size=n_blocks).astype(np.float16)
        v[0] = 0.0 if qtype == T.Q6_K else v[0]  # a block whose scale is zero
        return v.view(np.uint8).reshape(n_blocks, 2)

    if qtype == T.Q4_K:
        # d f16 | dmin f16 | scales[12] | qs[128]
        raw[:, 0:2] = f16(1e-4, 0.05)
        raw[:, 2:4] = f16(1e-4, 0.05)
        raw[-1, 0:4] = 0  # d == dmin == 0
    elif qtype == T.Q6_K:
        # ql[128] | qh[64] | scales[16] (i8) | d f16
        raw[:, 208:210] = f16(1e-4, 0.01)
    else:
        raise ValueError(qtype)
    return raw.reshape(ROWS, -1)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    plan = [
        (T.F32, 1),
        (T.F16, 2),
        (T.BF16, 3),
        (T.Q4_0, 4),
        (T.Q4_1, 5),
        (T.Q5_0, 6),
        (T.Q8_0, 7),
        (T.Q4_K, 8),
        (T.Q6_K, 9),
    ]
    for qtype, seed in plan:
        rng = np.random.default_rng(seed)
        doc: dict[str, object] = {"type": qtype.name, "type_id": int(qtype), "rows": ROWS, "cols": COLS}
        if qtype in (T.Q4_K, T.Q6_K):
            q = k_quant_bytes(rng, qtype)
        else:
            x = float_input(rng, special=qtype in (T.F16, T.BF16, T.F32))
            q = quantize(x, qtype)
            doc["input_f32"] = hexf32(x)
        qb = np.ascontiguousarray(q).view(np.uint8).reshape(ROWS, -1)
        deq = dequantize(qb if qtype not in (T.F32, T.F16) else np.ascontiguousarray(q), qtype)
        deq = np.asarray(deq, dtype=np.float32).reshape(ROWS, COLS)
        doc["quant"] = qb.tobytes().hex()
        doc["dequant_f32"] = hexf32(deq)
        path = OUT / f"{qtype.name}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"{path.name}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
