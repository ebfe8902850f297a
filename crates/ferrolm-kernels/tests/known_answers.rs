//! Known-answer tests against the `gguf` Python package (the reference implementation shipped with
//! llama.cpp). Vectors are produced by `scripts/gen_quant_vectors.py` into `tests/data/*.json`,
//! with every array stored as hex of its little-endian bytes (no decimal round trips).
//!
//! Checked per type:
//! - `dequantize_row` equals python's dequantization bit for bit. Python computes in f32 with the
//!   same operation order as GGML's C code (`(d·sc)·q - dmin·m`, `q·d + m`, no fused
//!   multiply-add), so no tolerance is needed — NaN payloads included.
//! - `quantize_row` (and the per-type row quantizers) reproduce python's bytes exactly, where
//!   python can quantize (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4). For the K-quants and
//!   IQ4 types python only dequantizes, so their vectors are random blocks; Q4_K's quantizer is
//!   checked against `Q4_K_quantize.json`, made by the script's scalar f32 port of GGML's
//!   `quantize_row_q4_K_ref`. MXFP4 also has `MXFP4_e8m0.json`: blocks with every E8M0 exponent
//!   (dequantization only).
//! - `dot_f32` equals the f64 dot product of the dequantized row with `x` to within
//!   `4e-6 · Σ|aᵢxᵢ|` (f32 summation of ≤ 512 terms over 32 lanes).

use std::path::PathBuf;

use ferrolm_kernels::GgmlType;
use ferrolm_kernels::quant::{self, mxfp4, q4_0, q4_1, q5_0, q5_1, q8_0};

struct Vectors {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    input: Option<Vec<f32>>,
    quant: Vec<u8>,
    dequant: Vec<f32>,
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit")).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn load(name: &str) -> Vectors {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let field = |k: &str| doc.get(k).unwrap_or_else(|| panic!("{name}: missing {k}"));
    let ty = GgmlType::from_name(field("type").as_str().expect("type name")).expect("known type");
    assert_eq!(u64::from(ty.id()), field("type_id").as_u64().expect("type id"));
    let usize_of = |k: &str| field(k).as_u64().expect("integer") as usize;
    let hex = |k: &str| unhex(field(k).as_str().expect("hex string"));
    let v = Vectors {
        ty,
        rows: usize_of("rows"),
        cols: usize_of("cols"),
        input: doc.get("input_f32").map(|_| f32s(&hex("input_f32"))),
        quant: hex("quant"),
        dequant: f32s(&hex("dequant_f32")),
    };
    assert_eq!(v.dequant.len(), v.rows * v.cols);
    assert_eq!(v.quant.len() as u64, v.rows as u64 * ty.row_bytes(v.cols as u64).expect("whole blocks"));
    v
}

/// Deterministic x in [-1, 1) from a 64-bit LCG.
fn xs(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn check_type(name: &str) {
    let v = load(name);
    let ty = v.ty;
    let rb = v.quant.len() / v.rows;
    for r in 0..v.rows {
        let src = &v.quant[r * rb..(r + 1) * rb];
        let want = &v.dequant[r * v.cols..(r + 1) * v.cols];

        // Dequantization: bit-exact.
        let mut got = vec![0f32; v.cols];
        quant::dequantize_row(ty, src, &mut got).expect("valid row");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{ty} row {r} elem {i}: {g:e} vs python {w:e}");
        }

        // Quantization: byte-exact.
        if let Some(input) = &v.input {
            let x = &input[r * v.cols..(r + 1) * v.cols];
            let mut q = vec![0u8; rb];
            quant::quantize_row(ty, x, &mut q).expect("quantizable type");
            if let Some(i) = q.iter().zip(src).position(|(a, b)| a != b) {
                panic!("{ty} row {r}: quantized byte {i} is {:#04x}, python {:#04x}", q[i], src[i]);
            }
        }

        // Dot product vs f64 reference.
        let x = xs(v.cols, 0x5eed + r as u64);
        let dot = quant::dot_f32(ty, src, &x).expect("valid row");
        let reference: f64 = want.iter().zip(&x).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
        if reference.is_finite() && want.iter().all(|a| a.is_finite()) {
            let mag: f64 = want.iter().zip(&x).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
            let err = (f64::from(dot) - reference).abs();
            assert!(err <= 4e-6 * mag, "{ty} row {r}: dot {dot} vs {reference} (err {err:e}, Σ|.| {mag:e})");
        } else {
            assert!(!dot.is_finite(), "{ty} row {r}: non-finite row gave finite dot {dot}");
        }
    }
}

#[test]
fn f32() {
    check_type("F32");
}

#[test]
fn f16() {
    check_type("F16");
}

#[test]
fn bf16() {
    check_type("BF16");
}

#[test]
fn q4_0() {
    check_type("Q4_0");
}

#[test]
fn q4_1() {
    check_type("Q4_1");
}

#[test]
fn q5_0() {
    check_type("Q5_0");
}

#[test]
fn q8_0() {
    check_type("Q8_0");
}

#[test]
fn q4_k() {
    check_type("Q4_K");
}

#[test]
fn q6_k() {
    check_type("Q6_K");
}

#[test]
fn q4_k_quantize() {
    check_type("Q4_K_quantize");
}

#[test]
fn q5_1() {
    check_type("Q5_1");
}

#[test]
fn q2_k() {
    check_type("Q2_K");
}

#[test]
fn q3_k() {
    check_type("Q3_K");
}

#[test]
fn q5_k() {
    check_type("Q5_K");
}

#[test]
fn iq4_nl() {
    check_type("IQ4_NL");
}

#[test]
fn iq4_xs() {
    check_type("IQ4_XS");
}

#[test]
fn mxfp4() {
    check_type("MXFP4");
}

/// Every E8M0 exponent (0 and 1 subnormal scales, 255 the finite 2^127 as in GGML, not NaN):
/// bit-exact dequantization, a non-finite dot product where a row holds infinities.
#[test]
fn mxfp4_every_exponent() {
    let v = load("MXFP4_e8m0");
    assert_eq!(v.quant.len(), 256 * 17);
    for (e, b) in v.quant.chunks_exact(17).enumerate() {
        assert_eq!(usize::from(b[0]), e);
    }
    // The python values themselves: 2^(e - 128) times the doubled E2M1 levels.
    let levels = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
    for (e, (b, want)) in v.quant.chunks_exact(17).zip(v.dequant.chunks_exact(32)).enumerate() {
        let code = |j: usize| if j < 16 { b[1 + j] & 0x0f } else { b[1 + j - 16] >> 4 };
        for (j, &w) in want.iter().enumerate() {
            let exact = f64::from(levels[usize::from(code(j))]) * 2f64.powi(e as i32 - 128);
            assert_eq!(f64::from(w), exact as f32 as f64, "e = {e}, element {j}");
        }
    }
    assert!(v.dequant[255 * 32..].iter().any(|x| x.is_infinite()));
    check_type("MXFP4_e8m0");
}

/// The typed row quantizers produce the same bytes as python (and as `quantize_row`).
#[test]
fn typed_quantizers_match_python() {
    fn flat<const N: usize>(blocks: impl Iterator<Item = [u8; N]>) -> Vec<u8> {
        blocks.flatten().collect()
    }
    let v = load("Q8_0");
    let input = v.input.as_deref().expect("Q8_0 has inputs");
    let q = q8_0::quantize_row_q8_0(input).expect("whole blocks");
    assert_eq!(flat(q.iter().map(|b| b.to_bytes())), v.quant);

    let v = load("Q4_0");
    let q = q4_0::quantize_row_q4_0(v.input.as_deref().expect("inputs")).expect("whole blocks");
    assert_eq!(flat(q.iter().map(|b| b.to_bytes())), v.quant);

    let v = load("Q4_1");
    let q = q4_1::quantize_row_q4_1(v.input.as_deref().expect("inputs")).expect("whole blocks");
    assert_eq!(flat(q.iter().map(|b| b.to_bytes())), v.quant);

    let v = load("Q5_0");
    let q = q5_0::quantize_row_q5_0(v.input.as_deref().expect("inputs")).expect("whole blocks");
    assert_eq!(flat(q.iter().map(|b| b.to_bytes())), v.quant);

    let v = load("Q5_1");
    let q = q5_1::quantize_row_q5_1(v.input.as_deref().expect("inputs")).expect("whole blocks");
    assert_eq!(flat(q.iter().map(|b| b.to_bytes())), v.quant);

    let v = load("MXFP4");
    let q = mxfp4::quantize_row_mxfp4(v.input.as_deref().expect("inputs")).expect("whole blocks");
    assert_eq!(flat(q.iter().map(|b| b.to_bytes())), v.quant);

    let v = load("Q4_K_quantize");
    let q = quant::quantize_row_q4_k(v.input.as_deref().expect("inputs")).expect("whole blocks");
    assert_eq!(flat(q.iter().map(|b| b.to_bytes())), v.quant);
}

/// Parsing blocks from the python bytes and dequantizing them one by one gives the same values.
#[test]
fn block_structs_match_python() {
    let v = load("Q4_K");
    for (b, want) in v.quant.chunks_exact(144).zip(v.dequant.chunks_exact(256)) {
        let blk = quant::BlockQ4K::from_bytes(b.try_into().expect("144 bytes"));
        assert_eq!(&blk.to_bytes()[..], b);
        let mut out = [0f32; 256];
        blk.dequantize(&mut out);
        assert_eq!(&out[..], want);
    }
    let v = load("Q6_K");
    for (b, want) in v.quant.chunks_exact(210).zip(v.dequant.chunks_exact(256)) {
        let blk = quant::BlockQ6K::from_bytes(b.try_into().expect("210 bytes"));
        let mut out = [0f32; 256];
        blk.dequantize(&mut out);
        assert_eq!(&out[..], want);
    }
    // The new formats: parse, re-serialize, dequantize block by block (bit-exact).
    macro_rules! blocks {
        ($name:literal, $blk:ty, $bytes:literal, $elems:literal) => {{
            let v = load($name);
            for (b, want) in v.quant.chunks_exact($bytes).zip(v.dequant.chunks_exact($elems)) {
                let blk = <$blk>::from_bytes(b.try_into().expect("whole block"));
                assert_eq!(&blk.to_bytes()[..], b, "{}", $name);
                let mut out = [0f32; $elems];
                blk.dequantize(&mut out);
                for (g, w) in out.iter().zip(want) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{}", $name);
                }
            }
        }};
    }
    blocks!("Q5_1", quant::BlockQ5_1, 24, 32);
    blocks!("Q2_K", quant::BlockQ2K, 84, 256);
    blocks!("Q3_K", quant::BlockQ3K, 110, 256);
    blocks!("Q5_K", quant::BlockQ5K, 176, 256);
    blocks!("IQ4_NL", quant::BlockIQ4NL, 18, 32);
    blocks!("IQ4_XS", quant::BlockIQ4XS, 136, 256);
    blocks!("MXFP4", quant::BlockMXFP4, 17, 32);
    blocks!("MXFP4_e8m0", quant::BlockMXFP4, 17, 32);
}

/// Activation quantization (the vec_dot types) reproduces `act_q8.json` byte for byte: the
/// x86 AVX-path Q8_0 / Q8_1 and `quantize_row_q8_K_ref`, reimplemented in numpy by
/// `scripts/gen_quant_vectors.py`.
fn act_vectors() -> (usize, Vec<f32>, serde_json::Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/act_q8.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let cols = doc["cols"].as_u64().expect("cols") as usize;
    let x = f32s(&unhex(doc["input_f32"].as_str().expect("hex")));
    (cols, x, doc)
}

#[test]
fn activation_quantization_matches_python() {
    let (cols, x, doc) = act_vectors();
    for (weight_ty, key) in [(GgmlType::Q4_0, "Q8_0"), (GgmlType::Q4_1, "Q8_1"), (GgmlType::Q6_K, "Q8_K")] {
        let want = unhex(doc[key].as_str().expect("hex"));
        let rb = quant::act_row_bytes(weight_ty, cols).expect("whole blocks");
        assert_eq!(want.len(), rb * x.len() / cols);
        for (r, (row, want)) in x.chunks_exact(cols).zip(want.chunks_exact(rb)).enumerate() {
            let mut got = vec![0u8; rb];
            quant::quantize_activations(weight_ty, row, &mut got).expect("valid row");
            if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
                panic!("{key} row {r}: byte {i} is {:#04x}, python {:#04x}", got[i], want[i]);
            }
        }
    }
}

/// `vec_dot_q` of the python weight rows with the python-quantized activations equals the f64 dot
/// product of the dequantized weights with the dequantized activations (for Q4_1 and Q5_1, GGML's
/// minimum term uses the stored f16 `s = d·Σq`, so the reference does too), within
/// `2e-6 · Σ|terms|`.
#[test]
fn vec_dot_matches_dequantized_reference() {
    fn f16(b: &[u8]) -> f64 {
        f64::from(half::f16::from_le_bytes([b[0], b[1]]).to_f32())
    }
    let (cols, _, doc) = act_vectors();
    for name in [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
        "MXFP4",
    ] {
        let v = load(name);
        assert_eq!(v.cols, cols);
        let ty = v.ty;
        let key = quant::vec_dot_type(ty).expect("quantized type").name();
        let acts = unhex(doc[key].as_str().expect("hex"));
        let (wb, ab) = (v.quant.len() / v.rows, acts.len() / v.rows);
        for r in 0..v.rows {
            let (w, xq) = (&v.quant[r * wb..(r + 1) * wb], &acts[r * ab..(r + 1) * ab]);
            let wd = &v.dequant[r * cols..(r + 1) * cols];
            // Dequantized activations (and, for Q8_1, the stored sums).
            let mut xd = Vec::with_capacity(cols);
            let mut min_term = (0f64, 0f64);
            match key {
                "Q8_K" => {
                    for b in xq.chunks_exact(292) {
                        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        xd.extend(b[4..260].iter().map(|&q| f64::from(d * f32::from(q as i8))));
                    }
                }
                _ => {
                    let (size, off) = if key == "Q8_1" { (36, 4) } else { (34, 2) };
                    for (i, b) in xq.chunks_exact(size).enumerate() {
                        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                        xd.extend(b[off..].iter().map(|&q| f64::from(d * f32::from(q as i8))));
                        if key == "Q8_1" {
                            // Q4_1/Q5_1 weights: x = d·q + m; GGML adds m·s, not m·Σ(d_x·q_x).
                            let wblk = &w[i * ty.type_size()..(i + 1) * ty.type_size()];
                            let t = f16(&wblk[2..]) * f16(&b[2..]);
                            min_term = (min_term.0 + t, min_term.1 + t.abs());
                        }
                    }
                }
            }
            let (mut want, mut mag) = (0f64, 0f64);
            for (j, (&a, &b)) in wd.iter().zip(&xd).enumerate() {
                let a = if key == "Q8_1" {
                    // Drop the minimum from the dequantized weight (it is in `min_term`).
                    f64::from(a) - f16(&w[(j / 32) * ty.type_size() + 2..])
                } else {
                    f64::from(a)
                };
                want += a * b;
                mag += (a * b).abs();
            }
            want += min_term.0;
            mag += min_term.1;
            let got = f64::from(quant::vec_dot_q(ty, w, xq).expect("valid row"));
            assert!((got - want).abs() <= 2e-6 * mag, "{ty} row {r}: {got} vs {want} (Σ|.| {mag:e})");
        }
    }
}
