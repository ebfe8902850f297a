//! The kernel contract, checked for every instruction-set level this CPU supports: `dot` and
//! `gemm` of each level against the portable reference on random data, odd sizes included.

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;
use crate::quant::{VecDot, act_row_bytes, quantize_activations, quantize_row};

const WEIGHT_TYPES: [GgmlType; 13] = {
    use GgmlType::*;
    [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4]
};

/// Random weight rows: quantized from uniform data where a quantizer exists (unless `raw`),
/// otherwise random bytes (every value of the format, extremes included) with every block's f16
/// scales (MXFP4: E8M0 exponent) set to moderate values.
fn weights(ty: GgmlType, n: usize, rows: usize, raw: bool, rng: &mut StdRng) -> Vec<u8> {
    let rb = ty.row_bytes(n as u64).expect("whole blocks") as usize;
    let mut out = vec![0u8; rb * rows];
    for row in out.chunks_exact_mut(rb) {
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        if !raw && quantize_row(ty, &x, row).is_ok() {
            continue;
        }
        rng.fill(&mut row[..]);
        if ty == GgmlType::MXFP4 {
            // An E8M0 exponent instead of an f16 scale: 2^-10 .. 2^-4, like the f16 scales below.
            for b in row.chunks_exact_mut(ty.type_size()) {
                b[0] = rng.random_range(118..=124);
            }
            continue;
        }
        let fields: &[usize] = match ty {
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
            GgmlType::Q6_K => &[208],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q3_K => &[108],
            _ => &[0],
        };
        for b in row.chunks_exact_mut(ty.type_size()) {
            for &o in fields {
                let d = half::f16::from_f32(rng.random_range(1e-4f32..0.02));
                b[o..o + 2].copy_from_slice(&d.to_le_bytes());
            }
        }
    }
    out
}

/// `nt` activation rows of `n` values quantized for `ty`, with a few large outliers.
fn activations(ty: GgmlType, n: usize, nt: usize, rng: &mut StdRng) -> Vec<u8> {
    let rb = act_row_bytes(ty, n).expect("whole blocks");
    let mut out = vec![0u8; rb * nt];
    for row in out.chunks_exact_mut(rb) {
        let x: Vec<f32> = (0..n)
            .map(|_| rng.random_range(-2.0f32..2.0) * if rng.random_bool(0.05) { 20.0 } else { 1.0 })
            .collect();
        quantize_activations(ty, &x, row).expect("valid");
    }
    out
}

/// Tolerance for a SIMD result against the portable one: the integer sums are exact, only the
/// f32 accumulation of the per-block terms (order, fused or separate multiply-adds) may differ.
/// The terms of random data cancel, so the bound is relative to the largest result of the
/// matrix, which tracks their magnitude.
fn close(got: f32, want: f32, scale: f32) -> bool {
    (got - want).abs() <= 3e-4 * scale.max(want.abs()).max(1.0)
}

#[test]
fn every_level_matches_the_portable_kernels() {
    let mut rng = StdRng::seed_from_u64(42);
    for isa in Isa::supported() {
        for ty in WEIGHT_TYPES {
            let reference = VecDot::with_isa(ty, Isa::Scalar).expect("portable kernel");
            let k = VecDot::with_isa(ty, isa).expect("supported level");
            // Block counts below, at and above the AVX-512 kernels' 16-block groups, with odd
            // remainders; tile counts below, at and above their 8-token tiles.
            for nb in [1usize, 2, 3, 5, 7, 12, 16, 18, 35] {
                let n = nb * ty.block_size();
                for (i, (nr, nt)) in [(1, 1), (1, 5), (2, 3), (3, 4), (5, 1), (8, 8), (7, 17), (16, 33)]
                    .into_iter()
                    .enumerate()
                {
                    let w = weights(ty, n, nr, i % 2 == 1, &mut rng);
                    let xq = activations(ty, n, nt, &mut rng);
                    let (w_rb, x_rb) = (w.len() / nr, xq.len() / nt);
                    k.check(&w[..w_rb], &xq[..x_rb]).expect("lengths");
                    // A padded output checks that gemm honours `ldo` and writes nothing else.
                    let ldo = nr + 3;
                    let mut out = vec![f32::NAN; (nt - 1) * ldo + nr + 2];
                    k.gemm(&w, nr, &xq, nt, &mut out, ldo);
                    let mut scale = 0f32;
                    for r in 0..nr {
                        for t in 0..nt {
                            let (wr, xr) = (&w[r * w_rb..(r + 1) * w_rb], &xq[t * x_rb..(t + 1) * x_rb]);
                            let want = reference.dot(wr, xr);
                            scale = scale.max(want.abs());
                            let dot = k.dot(wr, xr);
                            let got = out[t * ldo + r];
                            assert!(
                                close(dot, want, scale) && close(got, want, scale),
                                "{isa} {ty} n={n} r={r} t={t}: dot {dot}, gemm {got}, portable {want}"
                            );
                        }
                        for t in 0..nt.saturating_sub(1) {
                            for pad in nr..ldo {
                                assert!(out[t * ldo + pad].is_nan(), "{isa} {ty}: gemm wrote past its rows");
                            }
                        }
                    }
                    assert!(
                        out[(nt - 1) * ldo + nr..].iter().all(|v| v.is_nan()),
                        "{isa} {ty}: wrote past the end"
                    );
                }
            }
        }
    }
}

#[test]
fn unsupported_levels_and_types_are_errors() {
    for isa in Isa::ALL {
        let r = VecDot::with_isa(GgmlType::Q4_0, isa);
        assert_eq!(r.is_ok(), isa.is_supported(), "{isa}");
        if let Ok(k) = r {
            assert!(k.isa() <= isa || k.isa() == Isa::Scalar, "{isa} gave {}", k.isa());
        }
    }
    assert!(matches!(VecDot::with_isa(GgmlType::F32, Isa::Scalar), Err(QuantError::UnsupportedType(_))));
}

/// Prints the levels this CPU supports; with `FERROLM_EXPECT_ISA=<level>` (as [`Isa::name`]
/// prints it) fails unless that is exactly the best detected level, so that a test run meant
/// for a level (e.g. under an emulated CPU model) cannot silently test a lower one only.
#[test]
fn detected_levels_match_the_expected_best() {
    let names: Vec<&str> = Isa::supported().into_iter().map(Isa::name).collect();
    println!("supported instruction-set levels: {}", names.join(" "));
    if let Ok(want) = std::env::var("FERROLM_EXPECT_ISA") {
        let want =
            Isa::from_name(&want).unwrap_or_else(|| panic!("FERROLM_EXPECT_ISA={want}: unknown level"));
        assert_eq!(Isa::best_up_to(None), want, "best detected level (supported: {names:?})");
        println!("best level {want} detected, as FERROLM_EXPECT_ISA expects");
    }
}
