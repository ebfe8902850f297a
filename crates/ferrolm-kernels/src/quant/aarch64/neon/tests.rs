//! NEON-specific checks on top of the kernel contract test (`quant/kernel/tests.rs`, which runs every
//! supported level on random data): the NEON levels really select these kernels, and sums of
//! extreme values (largest weights and activations) stay exact.

use super::*;
use crate::quant::VecDot;

/// The weight types with NEON kernels.
const NEON_TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// The NEON levels this CPU supports.
fn neon_levels() -> Vec<Isa> {
    Isa::supported().into_iter().filter(|i| matches!(i, Isa::Neon | Isa::NeonDotprod)).collect()
}

#[test]
fn neon_levels_select_the_neon_kernels() {
    assert!(Isa::Neon.is_supported(), "every aarch64 CPU with Linux has NEON");
    for isa in neon_levels() {
        for ty in NEON_TYPES {
            assert_eq!(VecDot::with_isa(ty, isa).expect("supported").isa(), isa, "{ty}");
        }
        // Types without a NEON kernel fall back to the portable ones.
        assert_eq!(VecDot::with_isa(GgmlType::Q5_1, isa).expect("supported").isa(), Isa::Scalar);
    }
}

/// Offsets of the f16 scale fields of a weight block of `ty`.
fn scale_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q4_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[0],
    }
}

/// `nb` weight blocks of `ty`, every byte `fill` except the f16 scales, which are 1.
fn weights(ty: GgmlType, nb: usize, fill: u8) -> Vec<u8> {
    let mut w = vec![fill; nb * ty.type_size()];
    for b in w.chunks_exact_mut(ty.type_size()) {
        for &o in scale_fields(ty) {
            b[o..o + 2].copy_from_slice(&half::f16::ONE.to_le_bytes());
        }
    }
    w
}

/// An activation row for `ty` of `n` values with scale 1 and the quants `q(i)`, built byte by
/// byte (Q8_0, Q8_1 with its `d · Σ q`, or Q8_K with its 16-value sums).
fn activations(ty: GgmlType, n: usize, q: impl Fn(usize) -> i8) -> Vec<u8> {
    let vt = crate::quant::vec_dot_type(ty).expect("integer kernel");
    let (block, size) = (vt.block_size(), vt.type_size());
    let mut out = vec![0u8; n / block * size];
    for (b, o) in out.chunks_exact_mut(size).enumerate() {
        let qs: Vec<i8> = (0..block).map(|i| q(b * block + i)).collect();
        let sum: i32 = qs.iter().map(|&v| i32::from(v)).sum();
        let start = match vt {
            GgmlType::Q8_K => {
                o[..4].copy_from_slice(&1f32.to_le_bytes());
                for (g, s) in qs.chunks_exact(16).zip(o[4 + QK_K..].chunks_exact_mut(2)) {
                    let gs: i32 = g.iter().map(|&v| i32::from(v)).sum();
                    s.copy_from_slice(&(gs as i16).to_le_bytes());
                }
                4
            }
            GgmlType::Q8_1 => {
                o[..2].copy_from_slice(&half::f16::ONE.to_le_bytes());
                o[2..4].copy_from_slice(&half::f16::from_f32(sum as f32).to_le_bytes());
                4
            }
            _ => {
                o[..2].copy_from_slice(&half::f16::ONE.to_le_bytes());
                2
            }
        };
        for (d, &v) in o[start..start + block].iter_mut().zip(&qs) {
            *d = v as u8;
        }
    }
    out
}

use crate::quant::QK_K;

#[test]
fn extreme_values_are_summed_exactly() {
    // With unit scales the results are integers up to 256 · 128 · 127 · 128 per block; a lost
    // carry in a 16-bit product sum or a 32-bit lane would be off by at least 2^16.
    let patterns: [fn(usize) -> i8; 4] = [
        |_| 127,
        |_| -127,
        |i| if i % 2 == 0 { 127 } else { -127 },
        |i| {
            if i % 3 == 0 { -127 } else { 126 }
        },
    ];
    for isa in neon_levels() {
        for ty in NEON_TYPES {
            let reference = VecDot::with_isa(ty, Isa::Scalar).expect("portable");
            let k = VecDot::with_isa(ty, isa).expect("supported");
            let n = 2 * QK_K;
            for fill in [0x00u8, 0xff, 0x80, 0x7f, 0x88, 0x0f, 0xf0] {
                let nb = n / ty.block_size();
                let w = weights(ty, nb, fill);
                let xs: Vec<Vec<u8>> = patterns.iter().map(|p| activations(ty, n, p)).collect();
                let x_all = xs.concat();
                let mut out = vec![0f32; xs.len()];
                k.gemm(&w, 1, &x_all, xs.len(), &mut out, 1);
                for (t, x) in xs.iter().enumerate() {
                    k.check(&w, x).expect("lengths");
                    let want = reference.dot(&w, x);
                    let (dot, gemm) = (k.dot(&w, x), out[t]);
                    let tol = 1e-6 * want.abs() + 1.0;
                    assert!(
                        (dot - want).abs() <= tol && (gemm - want).abs() <= tol,
                        "{isa} {ty} fill {fill:#x} pattern {t}: dot {dot}, gemm {gemm}, portable {want}"
                    );
                }
            }
        }
    }
}
