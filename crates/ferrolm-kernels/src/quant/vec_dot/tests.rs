//! Tests of the integer dot products: AVX2 against the portable path, and both against an f64 dot
//! product of the dequantized weights with the dequantized activations.

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;
use crate::quant::VecDot;
use crate::quant::{dequantize_row, quantize_row};

const WEIGHT_TYPES: [GgmlType; 13] = {
    use GgmlType::*;
    [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4]
};

/// Byte offsets of the f16 scale fields of the formats tested with random blocks (the types
/// without a quantizer here, and Q4_K).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_K | Q5_K => &[0, 2],
        Q6_K => &[208],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        IQ4_NL | IQ4_XS => &[0],
        _ => &[],
    }
}

/// Random weight bytes of `ty` for `n` values: random bytes with moderate f16 scales patched in
/// for the formats with [`f16_fields`], otherwise quantized from uniform data.
fn weights(ty: GgmlType, n: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut out = vec![0u8; ty.row_bytes(n as u64).expect("whole blocks") as usize];
    if f16_fields(ty).is_empty() {
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        quantize_row(ty, &x, &mut out).expect("quantizable");
        return out;
    }
    rng.fill(&mut out[..]);
    for b in out.chunks_exact_mut(ty.type_size()) {
        for &o in f16_fields(ty) {
            let d = half::f16::from_f32(rng.random_range(1e-4f32..0.02));
            b[o..o + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    out
}

fn acts(n: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-2.0f32..2.0) * if rng.random_bool(0.05) { 20.0 } else { 1.0 }).collect()
}

/// Dequantizes activations of the vec_dot type of `ty`.
fn dequant_acts(ty: GgmlType, xq: &[u8], n: usize) -> Vec<f32> {
    let vt = vec_dot_type(ty).expect("quantized");
    let mut out = vec![0f32; n];
    match vt {
        GgmlType::Q8_0 => dequantize_row(GgmlType::Q8_0, xq, &mut out).expect("valid"),
        GgmlType::Q8_1 => {
            for (b, o) in xq.chunks_exact(Q8_1_BYTES).zip(out.chunks_exact_mut(32)) {
                let d = f16_at::<false>(b);
                for (v, &q) in o.iter_mut().zip(&b[4..]) {
                    *v = d * f32::from(q as i8);
                }
            }
        }
        _ => {
            for (b, o) in xq.chunks_exact(Q8_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
                let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                for (v, &q) in o.iter_mut().zip(&b[4..]) {
                    *v = d * f32::from(q as i8);
                }
            }
        }
    }
    out
}

/// `(Σ a·b, Σ |a·b|)` in f64.
fn reference(a: &[f32], b: &[f32]) -> (f64, f64) {
    let dot = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
    let mag = a.iter().zip(b).map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs()).sum();
    (dot, mag)
}

/// Q4_1 / Q5_1 reference: `Σ_blocks Σ (d_w q_w)(d_x q_x) + m_w s_x` in f64, with
/// `(dot, Σ|terms|)`.
fn reference_min(ty: GgmlType, w: &[u8], xq: &[u8]) -> (f64, f64) {
    let (mut dot, mut mag) = (0f64, 0f64);
    for (bw, bx) in w.chunks_exact(ty.type_size()).zip(xq.chunks_exact(Q8_1_BYTES)) {
        let (dw, m, dx, sx) =
            (f16_at::<false>(bw), f16_at::<false>(&bw[2..]), f16_at::<false>(bx), f16_at::<false>(&bx[2..]));
        let qw = if ty == GgmlType::Q5_1 { unpack_q5_1(bw) } else { nibbles(&bw[4..], 0) };
        for j in 0..32 {
            let t = f64::from(dw * f32::from(qw[j])) * f64::from(dx * f32::from(bx[4 + j] as i8));
            dot += t;
            mag += t.abs();
        }
        let t = f64::from(m) * f64::from(sx);
        dot += t;
        mag += t.abs();
    }
    (dot, mag)
}

const BLOCKS: [usize; 5] = [1, 2, 3, 7, 18];

#[test]
fn matches_f64_of_dequantized() {
    let mut rng = StdRng::seed_from_u64(11);
    for ty in WEIGHT_TYPES {
        for nb in BLOCKS {
            let n = nb * ty.block_size();
            let w = weights(ty, n, &mut rng);
            let x = acts(n, &mut rng);
            let mut xq = vec![0u8; act_row_bytes(ty, n).expect("whole blocks")];
            quantize_activations(ty, &x, &mut xq).expect("valid");
            let mut wd = vec![0f32; n];
            dequantize_row(ty, &w, &mut wd).expect("valid");
            let xd = dequant_acts(ty, &xq, n);
            let (mut want, mut mag) = reference(&wd, &xd);
            if vec_dot_type(ty) == Some(GgmlType::Q8_1) {
                // GGML uses the stored f16 `s = d·Σq` for the minimum term, not Σ x: replace
                // Σ m·(d·q) by Σ m·s.
                (want, mag) = reference_min(ty, &w, &xq);
            }
            let got = f64::from(vec_dot_q(ty, &w, &xq).expect("valid"));
            let portable = f64::from(vec_dot_any::<PORTABLE_FMA, false>(ty, &w, &xq));
            // The dequantized values are rounded to f32 (Q4_K: d·sc·q - dmin·m) and the kernel
            // sums per-block f32 terms: a few f32 ulps of Σ|w·x|.
            for v in [got, portable] {
                assert!((v - want).abs() <= 2e-6 * mag + 1e-30, "{ty} x{nb}: {v} vs {want} (Σ|.| {mag})");
            }
        }
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn avx2_matches_portable() {
    if !crate::simd::has_avx2_fma_f16c() {
        eprintln!("no AVX2+FMA on this CPU; skipping");
        return;
    }
    let mut rng = StdRng::seed_from_u64(12);
    for ty in WEIGHT_TYPES {
        for nb in BLOCKS {
            let n = nb * ty.block_size();
            let w = weights(ty, n, &mut rng);
            let x = acts(n, &mut rng);
            let mut xq = vec![0u8; act_row_bytes(ty, n).expect("whole blocks")];
            let mut xq_portable = xq.clone();
            quantize_activations(ty, &x, &mut xq).expect("valid");
            quantize_any(vec_dot_type(ty).expect("quantized"), &x, &mut xq_portable);
            assert_eq!(xq, xq_portable, "{ty} x{nb}: activation bytes differ");
            // SAFETY: AVX2, FMA and F16C detected above; lengths are consistent.
            let simd = unsafe { vec_dot_avx2(ty, &w, &xq) };
            // The fused portable kernel is the same arithmetic: bit-exact.
            assert_eq!(simd.to_bits(), vec_dot_any::<true, false>(ty, &w, &xq).to_bits(), "{ty} x{nb}");
            // The unfused one rounds each d·lane product once more: relative 1e-6 of Σ|terms|.
            let unfused = vec_dot_any::<false, false>(ty, &w, &xq);
            let mut wd = vec![0f32; n];
            dequantize_row(ty, &w, &mut wd).expect("valid");
            let (_, mag) = reference(&wd, &dequant_acts(ty, &xq, n));
            assert!(
                f64::from((simd - unfused).abs()) <= 1e-6 * mag + 1e-30,
                "{ty} x{nb}: {simd} vs {unfused}"
            );
        }
    }
}

#[test]
fn api_validates_lengths() {
    use GgmlType::*;
    for ty in [F32, F16, BF16, Q8_K, IQ2_XXS, TQ1_0] {
        assert_eq!(vec_dot_type(ty), None);
        assert_eq!(act_row_bytes(ty, 256), None);
        assert_eq!(
            quantize_activations(ty, &[0.0; 256], &mut [0; 1024]),
            Err(QuantError::UnsupportedType(ty))
        );
        assert_eq!(vec_dot_q(ty, &[0; 1024], &[0; 292]), Err(QuantError::UnsupportedType(ty)));
    }
    assert_eq!(vec_dot_type(Q4_1), Some(Q8_1));
    assert_eq!(act_row_bytes(Q4_0, 64), Some(68));
    assert_eq!(act_row_bytes(Q4_1, 64), Some(72));
    assert_eq!(act_row_bytes(Q6_K, 512), Some(584));
    assert_eq!(act_row_bytes(Q4_K, 64), None);
    assert!(matches!(quantize_activations(Q4_K, &[0.0; 64], &mut []), Err(QuantError::PartialBlock { .. })));
    assert!(matches!(
        quantize_activations(Q4_0, &[0.0; 64], &mut [0; 67]),
        Err(QuantError::BadLength { .. })
    ));
    assert!(matches!(vec_dot_q(Q4_0, &[0; 36], &[0; 67]), Err(QuantError::BadLength { .. })));
    assert!(matches!(vec_dot_q(Q4_0, &[0; 35], &[0; 68]), Err(QuantError::BadLength { .. })));
    assert!(matches!(vec_dot_q(Q6_K, &[0; 210], &[0; 584]), Err(QuantError::BadLength { .. })));
    assert_eq!(vec_dot_q(Q6_K, &[0; 210], &[0; 292]), Ok(0.0));
    assert_eq!(vec_dot_q(Q4_0, &[], &[]), Ok(0.0));
}

#[test]
fn integer_exact_on_unit_scales() {
    // Q8_0 weights and activations with d = 1: the dot is an exact integer.
    let mut rng = StdRng::seed_from_u64(13);
    let n = 7 * 32;
    let mut w = vec![0u8; 7 * 34];
    let mut xq = vec![0u8; 7 * 34];
    let one = half::f16::from_f32(1.0).to_le_bytes();
    let mut want = 0i64;
    for (bw, bx) in w.chunks_exact_mut(34).zip(xq.chunks_exact_mut(34)) {
        bw[..2].copy_from_slice(&one);
        bx[..2].copy_from_slice(&one);
        for j in 2..34 {
            let (a, b) = (rng.random_range(-127i8..=127), rng.random_range(-127i8..=127));
            bw[j] = a as u8;
            bx[j] = b as u8;
            want += i64::from(a) * i64::from(b);
        }
    }
    let _ = n;
    assert_eq!(vec_dot_q(GgmlType::Q8_0, &w, &xq), Ok(want as f32));
}

/// Activations of `vec_dot_type(ty)` for `n` values with unit scales and small random quants
/// (|q| <= 7), and those quants.
fn unit_activations(ty: GgmlType, n: usize, rng: &mut StdRng) -> (Vec<u8>, Vec<i32>) {
    let q: Vec<i8> = (0..n).map(|_| rng.random_range(-7i8..=7)).collect();
    let mut xq = Vec::new();
    let one = half::f16::from_f32(1.0).to_le_bytes();
    match vec_dot_type(ty).expect("quantized") {
        GgmlType::Q8_K => {
            for b in q.chunks_exact(QK_K) {
                xq.extend(1f32.to_le_bytes());
                xq.extend(b.iter().map(|&v| v as u8));
                for g in b.chunks_exact(16) {
                    xq.extend((g.iter().map(|&v| i16::from(v)).sum::<i16>()).to_le_bytes());
                }
            }
        }
        vt => {
            for b in q.chunks_exact(32) {
                xq.extend(one);
                if vt == GgmlType::Q8_1 {
                    let s: i32 = b.iter().map(|&v| i32::from(v)).sum();
                    xq.extend(half::f16::from_f32(s as f32).to_le_bytes());
                }
                xq.extend(b.iter().map(|&v| v as u8));
            }
        }
    }
    (xq, q.iter().map(|&v| i32::from(v)).collect())
}

/// With every f16 scale 1 (minimums `m = -3` for Q5_1; for MXFP4 `e = 128`, a half scale of 1)
/// the weights dequantize to integers and all activation scales are 1, so GGML's formula is exact
/// in integers: every kernel (single row, several rows, portable and AVX2) must return the exact
/// integer dot product.
#[test]
fn new_formats_exact_on_unit_scales() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(14);
    let one = half::f16::from_f32(1.0).to_le_bytes();
    for ty in [Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS, MXFP4] {
        for n in [256, 512, 480] {
            if n % ty.block_size() != 0 {
                continue;
            }
            let mut w = vec![0u8; ty.row_bytes(n as u64).expect("whole blocks") as usize];
            rng.fill(&mut w[..]);
            for b in w.chunks_exact_mut(ty.type_size()) {
                let fields: &[usize] = if ty == Q5_1 { &[0] } else { f16_fields(ty) };
                for &o in fields {
                    b[o..o + 2].copy_from_slice(&one);
                }
                if ty == Q5_1 {
                    b[2..4].copy_from_slice(&half::f16::from_f32(-3.0).to_le_bytes());
                }
                if ty == MXFP4 {
                    b[0] = 128; // E8M0 scale 2^(128 - 128) = 1 for the doubled levels
                }
            }
            let mut wd = vec![0f32; n];
            dequantize_row(ty, &w, &mut wd).expect("valid");
            let (xq, xi) = unit_activations(ty, n, &mut rng);
            let (mut want, mut mag) = (0i64, 0i64);
            for (&a, &b) in wd.iter().zip(&xi) {
                assert_eq!(a, a.round(), "{ty}: weight {a} is not an integer");
                want += a as i64 * i64::from(b);
                mag += (a as i64 * i64::from(b)).abs();
            }
            assert!(mag < 1 << 24, "{ty}: Σ|w·x| = {mag} is not exact in f32");
            let want = want as f32;
            assert_eq!(vec_dot_q(ty, &w, &xq), Ok(want), "{ty} n={n}");
            assert_eq!(vec_dot_any::<false, false>(ty, &w, &xq), want, "{ty} n={n}");
            assert_eq!(vec_dot_any::<true, false>(ty, &w, &xq), want, "{ty} n={n}");
            let mut out = [0f32; 2];
            let two = [xq.clone(), xq.clone()].concat();
            vec_dot_q_rows(ty, &w, &two, &mut out).expect("rows");
            assert_eq!(out, [want, want], "{ty} n={n}");
        }
    }
}

#[test]
fn rows_equal_single_dots_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(99);
    for ty in WEIGHT_TYPES {
        // Odd block counts too, for the kernels that pair blocks (IQ4_NL, MXFP4).
        let sizes: &[usize] = if ty.block_size() == 32 { &[512, 544, 32] } else { &[512] };
        for &n in sizes {
            let w = weights(ty, n, &mut rng);
            let rb = act_row_bytes(ty, n).expect("row bytes");
            for rows in [1usize, 3, 4, 5, 9] {
                let mut xq = vec![0u8; rows * rb];
                for r in 0..rows {
                    quantize_activations(ty, &acts(n, &mut rng), &mut xq[r * rb..(r + 1) * rb])
                        .expect("quantize");
                }
                let mut out = vec![0f32; rows];
                vec_dot_q_rows(ty, &w, &xq, &mut out).expect("rows");
                for (r, &o) in out.iter().enumerate() {
                    let single = vec_dot_q(ty, &w, &xq[r * rb..(r + 1) * rb]).expect("single");
                    assert_eq!(o.to_bits(), single.to_bits(), "{ty} n={n} rows {rows} row {r}");
                }
            }
            let mut out = vec![0f32; 2];
            assert!(vec_dot_q_rows(ty, &w, &[0u8; 7], &mut out).is_err());
            assert!(vec_dot_q_rows(ty, &w[..w.len() - 1], &vec![0u8; 2 * rb], &mut out).is_err());
        }
    }
}

#[test]
fn prepared_kernel_equals_vec_dot_q() {
    let mut rng = StdRng::seed_from_u64(5);
    for ty in WEIGHT_TYPES {
        let n = 768;
        let w = weights(ty, n, &mut rng);
        let mut xq = vec![0u8; act_row_bytes(ty, n).expect("row bytes")];
        quantize_activations(ty, &acts(n, &mut rng), &mut xq).expect("quantize");
        // `vec_dot_q` runs the AVX2 kernels where supported, else the portable ones; the other
        // levels are checked against the portable kernels (up to rounding) in `quant/kernel/tests.rs`.
        let level = if crate::Isa::Avx2.is_supported() { crate::Isa::Avx2 } else { crate::Isa::Scalar };
        let k = VecDot::with_isa(ty, level).expect("kernel");
        k.check(&w, &xq).expect("lengths");
        assert!(k.check(&w[1..], &xq).is_err());
        assert_eq!(k.dot(&w, &xq).to_bits(), vec_dot_q(ty, &w, &xq).expect("dot").to_bits(), "{ty}");
    }
    assert!(VecDot::new(GgmlType::F32).is_err());
}
