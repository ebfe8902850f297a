//! The float kernel contract, checked for every instruction-set level this CPU supports: each
//! level against an f64 sum, against the portable reference, and against itself in every batch
//! shape (bit-identical).

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;
use crate::quant::quantize_row;

const TYPES: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];

/// Column counts: vector multiples, odd tails, and a model's hidden sizes.
const COLS: [usize; 9] = [1, 7, 8, 16, 31, 33, 64, 200, 576];

/// `rows` random weight rows of `cols` values stored as `ty`, and the same values as f32 (after
/// rounding to `ty`).
fn weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> (Vec<u8>, Vec<f32>) {
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let rb = ty.row_bytes(cols as u64).expect("float row") as usize;
    let mut bytes = vec![0u8; rows * rb];
    for (src, dst) in x.chunks_exact(cols).zip(bytes.chunks_exact_mut(rb)) {
        quantize_row(ty, src, dst).expect("float types round");
    }
    let mut dense = vec![0f32; rows * cols];
    for (src, dst) in bytes.chunks_exact(rb).zip(dense.chunks_exact_mut(cols)) {
        crate::quant::dequantize_row(ty, src, dst).expect("valid row");
    }
    (bytes, dense)
}

/// Every level's products are within f32 rounding of the f64 sum of the widened values.
#[test]
fn every_level_matches_the_exact_sum() {
    let mut rng = StdRng::seed_from_u64(11);
    for isa in Isa::supported() {
        for ty in TYPES {
            for cols in COLS {
                let (nr, nt) = (9, 6);
                let (w, dense) = weights(ty, nr, cols, &mut rng);
                let x: Vec<f32> = (0..nt * cols).map(|_| rng.random_range(-2.0f32..2.0)).collect();
                let k = FloatDot::with_isa(ty, isa).expect("supported level");
                let mut out = vec![f32::NAN; nt * nr];
                k.gemm(&w, nr, &x, nt, &mut out, nr);
                for t in 0..nt {
                    for r in 0..nr {
                        let (wr, xt) = (&dense[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols]);
                        let exact: f64 = wr.iter().zip(xt).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let mag: f64 = wr.iter().zip(xt).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                        let got = out[t * nr + r] as f64;
                        assert!(
                            (got - exact).abs() <= 1e-5 * mag + 1e-30,
                            "{ty} {isa} (kernel {}) cols={cols} r={r} t={t}: {got} vs {exact}",
                            k.isa()
                        );
                    }
                }
            }
        }
    }
}

/// A product is bit-identical whatever the batch: every (rows, tokens) shape of a call, any
/// offset of the row or the token inside it, and `dot` all agree.
#[test]
fn a_product_does_not_depend_on_its_batch() {
    let mut rng = StdRng::seed_from_u64(12);
    for isa in Isa::supported() {
        for ty in TYPES {
            for cols in [33, 64, 576] {
                let (nr, nt) = (11, 9);
                let (w, _) = weights(ty, nr, cols, &mut rng);
                let x: Vec<f32> = (0..nt * cols).map(|_| rng.random_range(-2.0f32..2.0)).collect();
                let k = FloatDot::with_isa(ty, isa).expect("supported level");
                let rb = w.len() / nr;
                let mut all = vec![f32::NAN; nt * nr];
                k.gemm(&w, nr, &x, nt, &mut all, nr);
                for (r0, rn, t0, tn) in
                    [(0, 1, 0, 1), (3, 5, 2, 7), (10, 1, 8, 1), (1, 10, 1, 3), (2, 4, 0, 9)]
                {
                    let mut part = vec![f32::NAN; tn * rn];
                    k.gemm(
                        &w[r0 * rb..(r0 + rn) * rb],
                        rn,
                        &x[t0 * cols..(t0 + tn) * cols],
                        tn,
                        &mut part,
                        rn,
                    );
                    for t in 0..tn {
                        for r in 0..rn {
                            let (a, b) = (part[t * rn + r], all[(t0 + t) * nr + r0 + r]);
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "{ty} {isa} cols={cols} row {} token {}",
                                r0 + r,
                                t0 + t
                            );
                        }
                    }
                }
                let d = k.dot(&w[2 * rb..3 * rb], &x[4 * cols..5 * cols]);
                assert_eq!(d.to_bits(), all[4 * nr + 2].to_bits(), "{ty} {isa} dot");
            }
        }
    }
}

/// The portable level is the reference the engine had before: [`crate::quant::dot_f32`]'s
/// portable sum, bit for bit.
#[test]
fn the_portable_level_is_dot_f32() {
    let mut rng = StdRng::seed_from_u64(13);
    for ty in TYPES {
        let (w, _) = weights(ty, 3, 200, &mut rng);
        let x: Vec<f32> = (0..200).map(|_| rng.random_range(-2.0f32..2.0)).collect();
        let k = FloatDot::with_isa(ty, Isa::Scalar).expect("portable");
        assert_eq!(k.isa(), Isa::Scalar);
        let rb = w.len() / 3;
        for r in 0..3 {
            let row = &w[r * rb..(r + 1) * rb];
            let want = crate::quant::dot_any(ty, row, &x).expect("float type");
            assert_eq!(k.dot(row, &x).to_bits(), want.to_bits(), "{ty} row {r}");
        }
    }
}

/// Rows of the wrong length, and non-float types, are refused or give NaN, never a crash.
#[test]
fn bad_input_is_an_error_or_nan() {
    assert!(matches!(FloatDot::new(GgmlType::Q8_0), Err(QuantError::UnsupportedType(GgmlType::Q8_0))));
    for isa in Isa::supported() {
        let k = FloatDot::with_isa(GgmlType::F16, isa).expect("supported level");
        let x = [1.0f32; 8];
        assert!(k.check(&[0u8; 14], &x).is_err());
        assert!(k.check(&[0u8; 16], &x).is_ok());
        // A 7-element row against 8 activations: a meaningless number, not a crash.
        let mut out = [0f32; 2];
        k.gemm(&[0u8; 28], 2, &x, 1, &mut out, 2);
    }
}
