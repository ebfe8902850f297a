#!/usr/bin/env python3
"""Generate known-answer vectors for ferrolm-kernels' block formats.

Uses the `gguf` Python package (the reference quantizers/dequantizers maintained alongside
llama.cpp) to produce, for each supported type, a small deterministic tensor of 2 rows x 512
columns:

- `input_f32`: the f32 input rows (absent for the K-quants and IQ4 types, where python can only
  dequantize and the quantized bytes are random blocks with sane f16 scales instead);
- `quant`: the quantized bytes, as produced by `gguf.quants.quantize`;
- `dequant_f32`: `gguf.quants.dequantize(quant)` as f32.

All arrays are stored as lower-case hex of their little-endian bytes, so no float ever goes
through a decimal round trip. Output: crates/ferrolm-kernels/tests/data/<TYPE>.json

It also writes `act_q8.json`: f32 activation rows and their Q8_0 / Q8_1 / Q8_K quantizations
as GGML's x86 CPU backend computes them before integer dot products (the AVX path of
`quantize_row_q8_0` / `quantize_row_q8_1`, and `quantize_row_q8_K_ref`), reimplemented in numpy
since the `gguf` package has no such quantizers.

For MXFP4 (which the `gguf` package quantizes too), `MXFP4.json` holds quantized f32 rows with
extra blocks for its quantizer's corner cases (ties, a maximum below 2^-125, an infinity), and
`MXFP4_e8m0.json` random blocks with every E8M0 exponent 0..=255 (16 rows: row r has the
exponents 16r..16r+15), for dequantization only.

And `Q4_K_quantize.json`: f32 rows with their Q4_K bytes from `quantize_row_q4_K_ref` (ported
below to scalar f32 Python in C's operation order, since the `gguf` package cannot quantize Q4_K;
the port was checked byte for byte against the C function compiled with -ffp-contract=off) and
gguf's dequantization of those bytes.

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


# Types python can only dequantize: random blocks with sane f16 scales.
RANDOM_BLOCK_TYPES = (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS)


def k_quant_bytes(rng: np.random.Generator, qtype: T) -> np.ndarray:
    """Random K-quant / IQ4 blocks (every quant, scale and mask bit random) with finite, moderate
    f16 super-block scales."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)

    def f16(lo: float, hi: float) -> np.ndarray:
        v = rng.uniform(lo, hi, size=n_blocks).astype(np.float16)
        v[0] = 0.0 if qtype in (T.Q6_K, T.Q3_K, T.IQ4_NL, T.IQ4_XS) else v[0]  # a zero scale
        return v.view(np.uint8).reshape(n_blocks, 2)

    if qtype in (T.Q4_K, T.Q5_K):
        # d f16 | dmin f16 | scales[12] | (Q5_K: qh[32] |) qs[128]
        raw[:, 0:2] = f16(1e-4, 0.05)
        raw[:, 2:4] = f16(1e-4, 0.05)
        raw[-1, 0:4] = 0  # d == dmin == 0
    elif qtype == T.Q6_K:
        # ql[128] | qh[64] | scales[16] (i8) | d f16
        raw[:, 208:210] = f16(1e-4, 0.01)
    elif qtype == T.Q2_K:
        # scales[16] (scale nibble | min nibble << 4) | qs[64] | d f16 | dmin f16
        raw[:, 80:82] = f16(1e-4, 0.05)
        raw[:, 82:84] = f16(1e-4, 0.05)
        raw[-1, 80:84] = 0  # d == dmin == 0
    elif qtype == T.Q3_K:
        # hmask[32] | qs[64] | scales[12] (6-bit, packed) | d f16
        raw[:, 108:110] = f16(1e-4, 0.01)
    elif qtype == T.IQ4_NL:
        # d f16 | qs[16]
        raw[:, 0:2] = f16(-0.05, 0.05)
    elif qtype == T.IQ4_XS:
        # d f16 | scales_h u16 | scales_l[4] | qs[128]
        raw[:, 0:2] = f16(-0.01, 0.01)
    else:
        raise ValueError(qtype)
    return raw.reshape(ROWS, -1)


def mxfp4_input(rng: np.random.Generator) -> np.ndarray:
    """`float_input` with blocks for MXFP4's quantizer (GGML's quantize_row_mxfp4_ref; the scale is
    2^(floor(log2(max|x|)) - 2), the nearest doubled E2M1 level is taken, the first on ties)."""
    x = float_input(rng, special=False)
    # max|x| = 12 (e = 128, half scale 1, levels 0 1 2 3 4 6 8 12): exact ties between levels.
    ties = np.array([12.0, 0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0, -0.5, -1.5, -2.5, -3.5, -5.0, -7.0,
                     -10.0, -12.0, 0.25, -0.25, 11.0, -11.0, 9.0, 0.0, -0.0, 6.5], dtype=np.float32)
    x[0, 192:224] = 0.0
    x[0, 192:192 + len(ties)] = ties
    # max|x| < 2^-125: GGML's exponent floor(log2(max)) - 2 + 127 is negative and its uint8_t
    # cast wraps (254 here), so the block quantizes to zeros.
    x[0, 224:256] = np.float32(1e-38) * rng.uniform(-1, 1, 32).astype(np.float32)
    x[0, 224] = np.float32(1e-38)
    # Maxima just below and at powers of two (log2f rounding near integers).
    x[0, 256:288] = rng.uniform(-1, 1, 32).astype(np.float32)
    x[0, 256] = np.float32(256.0) * np.float32(1 - 2.0**-24)
    x[0, 288:320] = rng.uniform(-0.25, 0.25, 32).astype(np.float32)
    x[0, 288] = np.float32(-0.25)
    x[0, 320:352] = rng.uniform(-1, 1, 32).astype(np.float32) * np.float32(2.0**-120)
    x[0, 320] = np.float32(2.0**-120) * np.float32(1 - 2.0**-24)
    # An infinity: GGML's cast of the infinite exponent gives e = 0 on x86-64, as numpy's does.
    x[1, 128:160] = rng.uniform(-1, 1, 32).astype(np.float32)
    x[1, 130] = np.inf
    # Subnormal inputs (max 5 · 2^-149: e wraps to 234).
    x[1, 160:192] = 0.0
    x[1, 160:170] = np.float32(2.0**-149) * np.arange(-5, 5, dtype=np.float32)
    x[1, 192:224] = np.float32(2.0**-130) * rng.uniform(-1, 1, 32).astype(np.float32)
    # Large (max ~1e36: e = 244), yet small enough for f32 dot products to stay finite.
    x[1, 224:256] = np.float32(1.0e36) * rng.uniform(-1, 1, 32).astype(np.float32)
    return x


def mxfp4_e8m0_bytes(rng: np.random.Generator) -> np.ndarray:
    """MXFP4 blocks with every exponent 0..=255 in order as 16 rows of 512 values: the low nibbles
    of each block are the 16 codes in random order, the high nibbles random."""
    lo = np.stack([rng.permutation(16) for _ in range(256)]).astype(np.uint8)
    hi = rng.integers(0, 16, size=(256, 16), dtype=np.uint8)
    qs = lo | (hi << np.uint8(4))
    e = np.arange(256, dtype=np.uint8).reshape(256, 1)
    return np.concatenate([e, qs], axis=1).reshape(16, -1)


def act_q8_0(x: np.ndarray, with_sum: bool) -> bytes:
    """Q8_0 (or Q8_1 with `with_sum`) the way GGML's x86 AVX path quantizes activations:
    d = amax/127, id = 127/amax, q = round-half-even(x*id), s = f16(d * sum(q))."""
    out = bytearray()
    for b in x.astype(np.float32).reshape(-1, 32):
        amax = np.float32(np.max(np.abs(b)))
        d = np.float32(amax / np.float32(127))
        inv = np.float32(np.float32(127) / amax) if amax != 0 else np.float32(0)
        q = np.rint((b * inv).astype(np.float32)).astype(np.int32)
        out += np.float16(d).tobytes()
        if with_sum:
            out += np.float16(np.float32(d * np.float32(q.sum()))).tobytes()
        out += q.astype(np.int8).tobytes()
    return bytes(out)


def act_q8_k(x: np.ndarray) -> bytes:
    """Q8_K as quantize_row_q8_K_ref: iscale = -127/max (max = first value of largest |x|),
    q = min(127, nearest_int(iscale*x)) with the 1.5*2^23 magic-number rounding, d = 1/iscale,
    bsums = sums of 16-value groups; an all-zero block gives d = 0 and zeros."""
    out = bytearray()
    for b in x.astype(np.float32).reshape(-1, 256):
        mx = b[int(np.argmax(np.abs(b)))]
        if mx == 0:
            d = np.float32(0)
            q = np.zeros(256, dtype=np.int32)
        else:
            iscale = np.float32(np.float32(-127) / mx)
            v = ((iscale * b).astype(np.float32) + np.float32(12582912.0)).astype(np.float32)
            q = np.minimum(127, (v.view(np.int32) & 0x007FFFFF) - 0x00400000)
            d = np.float32(np.float32(1) / iscale)
        out += np.float32(d).tobytes()
        out += q.astype(np.int8).tobytes()
        out += q.reshape(16, 16).sum(axis=1).astype(np.int16).tobytes()
    return bytes(out)


F32 = np.float32


def nearest_int(v: np.float32) -> int:
    """GGML's nearest_int: round half to even through the 1.5 * 2^23 magic number (f32)."""
    bits = int(np.array([F32(v) + F32(12582912.0)], dtype=np.float32).view(np.int32)[0])
    return (bits & 0x007FFFFF) - 0x00400000


def make_qkx2_quants(nmax: int, x: list, w: list, rmin: float, rdelta: float, nstep: int) -> tuple:
    """GGML's make_qkx2_quants (use_mad = false), scalar f32 arithmetic in C's operation order.
    Returns (scale, -min, levels)."""
    n = len(x)
    mn, mx = x[0], x[0]
    sum_w = w[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        mn = x[i] if x[i] < mn else mn
        mx = x[i] if x[i] > mx else mx
        sum_w = F32(sum_w + w[i])
        sum_x = F32(sum_x + F32(w[i] * x[i]))
    if mn > 0:
        mn = F32(0)
    if mx == mn:
        return F32(0), F32(-mn), [0] * n
    iscale = F32(F32(nmax) / F32(mx - mn))
    scale = F32(F32(1) / iscale)
    levels = [max(0, min(nmax, nearest_int(F32(iscale * F32(v - mn))))) for v in x]
    best = F32(0)
    for i in range(n):
        diff = F32(F32(F32(scale * F32(levels[i])) + mn) - x[i])
        best = F32(best + F32(w[i] * F32(diff * diff)))
    for step in range(nstep + 1):
        iscale = F32(F32(F32(F32(rmin) + F32(F32(rdelta) * F32(step))) + F32(nmax)) / F32(mx - mn))
        aux = [max(0, min(nmax, nearest_int(F32(iscale * F32(v - mn))))) for v in x]
        sum_l, sum_l2, sum_xl = F32(0), F32(0), F32(0)
        for i in range(n):
            wl = F32(w[i] * F32(aux[i]))
            sum_l = F32(sum_l + wl)
            sum_l2 = F32(sum_l2 + F32(wl * F32(aux[i])))
            sum_xl = F32(sum_xl + F32(wl * x[i]))
        det = F32(F32(sum_w * sum_l2) - F32(sum_l * sum_l))
        if det > 0:
            this_scale = F32(F32(F32(sum_w * sum_xl) - F32(sum_x * sum_l)) / det)
            this_min = F32(F32(F32(sum_l2 * sum_x) - F32(sum_l * sum_xl)) / det)
            if this_min > 0:
                this_min = F32(0)
                this_scale = F32(sum_xl / sum_l2)
            cur = F32(0)
            for i in range(n):
                diff = F32(F32(F32(this_scale * F32(aux[i])) + this_min) - x[i])
                cur = F32(cur + F32(w[i] * F32(diff * diff)))
            if cur < best:
                levels, best, scale, mn = aux, cur, this_scale, this_min
    return scale, F32(-mn), levels


def quantize_q4_k_ref(row: np.ndarray) -> bytes:
    """quantize_row_q4_K_ref (no importance matrix), scalar f32 in C's operation order."""
    out = bytearray()
    for blk in row.astype(np.float32).reshape(-1, 256):
        x = [F32(v) for v in blk]
        scales, mins, L = [], [], []
        for j in range(8):
            xs = x[32 * j:32 * j + 32]
            sum_x2 = F32(0)
            for v in xs:
                sum_x2 = F32(sum_x2 + F32(v * v))
            av_x = np.sqrt(F32(sum_x2 / F32(32)))
            w = [F32(av_x + abs(v)) for v in xs]
            sc, m, lv = make_qkx2_quants(15, xs, w, -1.0, 0.1, 20)
            scales.append(sc)
            mins.append(m)
            L.extend(lv)
        max_scale = max([F32(0)] + [s for s in scales if s > 0])
        max_min = max([F32(0)] + [m for m in mins if m > 0])
        inv_scale = F32(F32(63) / max_scale) if max_scale > 0 else F32(0)
        inv_min = F32(F32(63) / max_min) if max_min > 0 else F32(0)
        packed = [0] * 12
        for j in range(8):
            ls = min(63, nearest_int(F32(inv_scale * scales[j])) & 0xFF)
            lm = min(63, nearest_int(F32(inv_min * mins[j])) & 0xFF)
            if j < 4:
                packed[j], packed[j + 4] = ls, lm
            else:
                packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
                packed[j - 4] |= (ls >> 4) << 6
                packed[j] |= (lm >> 4) << 6
        d = np.float16(F32(max_scale / F32(63)))
        dmin = np.float16(F32(max_min / F32(63)))
        for j in range(8):
            if j < 4:
                sc, m = packed[j] & 63, packed[j + 4] & 63
            else:
                sc = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4)
                m = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4)
            dl = F32(F32(d) * F32(sc))
            if dl == 0:
                continue
            dm = F32(F32(dmin) * F32(m))
            for i in range(32):
                L[32 * j + i] = max(0, min(15, nearest_int(F32(F32(x[32 * j + i] + dm) / dl))))
        qs = bytearray()
        for c in range(4):
            qs += bytes(L[64 * c + i] | (L[64 * c + i + 32] << 4) for i in range(32))
        out += d.tobytes() + dmin.tobytes() + bytes(packed) + bytes(qs)
    return bytes(out)


def write_q4_k_quantize() -> None:
    """Q4_K_quantize.json: f32 rows, their quantize_row_q4_K_ref bytes (the numpy port above; the
    gguf package cannot quantize Q4_K) and gguf's dequantization of those bytes."""
    rng = np.random.default_rng(16)
    x = float_input(rng, special=False)
    x[1, 256:512] = rng.laplace(size=256).astype(np.float32) * np.float32(0.05)  # heavy tails
    q = b"".join(quantize_q4_k_ref(r) for r in x)
    qb = np.frombuffer(q, dtype=np.uint8).reshape(ROWS, -1)
    deq = np.asarray(dequantize(qb, T.Q4_K), dtype=np.float32).reshape(ROWS, COLS)
    doc = {
        "type": T.Q4_K.name,
        "type_id": int(T.Q4_K),
        "rows": ROWS,
        "cols": COLS,
        "input_f32": hexf32(x),
        "quant": q.hex(),
        "dequant_f32": hexf32(deq),
    }
    path = OUT / "Q4_K_quantize.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{path.name}: {path.stat().st_size} bytes")


def write_mxfp4_e8m0() -> None:
    """MXFP4_e8m0.json: blocks with every E8M0 exponent and gguf's dequantization of them
    (GGML's ggml_e8m0_to_fp32_half: e = 0, 1 subnormal, e = 255 the finite 2^127, no NaN)."""
    q = mxfp4_e8m0_bytes(np.random.default_rng(18))
    rows = q.shape[0]
    with np.errstate(over="ignore"):
        deq = np.asarray(dequantize(q, T.MXFP4), dtype=np.float32).reshape(rows, COLS)
    doc = {
        "type": T.MXFP4.name,
        "type_id": int(T.MXFP4),
        "rows": rows,
        "cols": COLS,
        "quant": q.tobytes().hex(),
        "dequant_f32": hexf32(deq),
    }
    path = OUT / "MXFP4_e8m0.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{path.name}: {path.stat().st_size} bytes")


def write_activations() -> None:
    """Activation quantizations (Q8_0, Q8_1, Q8_K) of 2 x 512 values -> act_q8.json."""
    rng = np.random.default_rng(42)
    x = float_input(rng, special=False)
    # A Q8_K block whose extreme is exactly -127 (iscale = 1): exact rounding ties.
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5, 126.5, -126.5, 0.25], dtype=np.float32)
    x[1, 256:512] = 0.0
    x[1, 256] = -127.0
    x[1, 257:257 + len(ties)] = ties
    x[1, 288:320] = np.float32(1e-30)  # tiny but nonzero
    doc = {
        "rows": ROWS,
        "cols": COLS,
        "input_f32": hexf32(x),
        "Q8_0": b"".join(act_q8_0(r, False) for r in x).hex(),
        "Q8_1": b"".join(act_q8_0(r, True) for r in x).hex(),
        "Q8_K": b"".join(act_q8_k(r) for r in x).hex(),
    }
    path = OUT / "act_q8.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{path.name}: {path.stat().st_size} bytes")


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
        (T.Q5_1, 10),
        (T.Q2_K, 11),
        (T.Q3_K, 12),
        (T.Q5_K, 13),
        (T.IQ4_NL, 14),
        (T.IQ4_XS, 15),
        (T.MXFP4, 17),
    ]
    for qtype, seed in plan:
        rng = np.random.default_rng(seed)
        doc: dict[str, object] = {"type": qtype.name, "type_id": int(qtype), "rows": ROWS, "cols": COLS}
        if qtype in RANDOM_BLOCK_TYPES:
            q = k_quant_bytes(rng, qtype)
        else:
            if qtype == T.MXFP4:
                x = mxfp4_input(rng)
            else:
                x = float_input(rng, special=qtype in (T.F16, T.BF16, T.F32))
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
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
    write_activations()
    write_q4_k_quantize()
    write_mxfp4_e8m0()


if __name__ == "__main__":
    main()
