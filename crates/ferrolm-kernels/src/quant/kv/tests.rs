//! Every supported level of [`KvKernels`] against scalar references, on random data with odd
//! shapes, strides and offsets.

use super::*;
use crate::quant::{BlockQ4_0, BlockQ8_0, as_array, quantize_activations};
use rand::{Rng, SeedableRng, rngs::StdRng};

const TYPES: [KvBlocks; 2] = [KvBlocks::Q8_0, KvBlocks::Q4_0];

fn levels() -> Vec<KvKernels> {
    let mut v: Vec<KvKernels> = Isa::supported().into_iter().filter_map(KvKernels::for_isa).collect();
    v.dedup_by_key(|k| k.isa());
    assert!(v.iter().any(|k| k.isa() == Isa::Scalar));
    v
}

fn random(n: usize, amp: f32, rng: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-amp..amp)).collect()
}

/// `rows` quantized rows of `cols` values placed `stride` bytes apart after `offset` junk bytes,
/// with their exact values.
fn rows(
    ty: KvBlocks,
    rows: usize,
    cols: usize,
    stride: usize,
    offset: usize,
    rng: &mut StdRng,
) -> (Vec<u8>, Vec<f32>) {
    let rb = ty.row_bytes(cols);
    let mut data: Vec<u8> = (0..offset + rows * stride).map(|_| rng.random()).collect();
    let mut exact = vec![0f32; rows * cols];
    for (i, e) in exact.chunks_exact_mut(cols).enumerate() {
        let x = random(cols, rng.random_range(0.1f32..3.0), rng);
        let dst = &mut data[offset + i * stride..offset + i * stride + rb];
        ty.quantize_row(&x, dst);
        ty.dequantize_row(dst, e);
    }
    (data, exact)
}

#[test]
fn quantizers_are_llama_cpp_s() {
    let mut rng = StdRng::seed_from_u64(1);
    for n in [32, 64, 96, 320] {
        let mut x = random(n, 2.0, &mut rng);
        x[3] = 0.0;
        if n > 32 {
            x[32..64].fill(0.0); // an all-zero block
        }
        // Q8_0: the x86 activation quantizer.
        let mut got = vec![0u8; KvBlocks::Q8_0.row_bytes(n)];
        KvBlocks::Q8_0.quantize_row(&x, &mut got);
        let mut want = vec![0u8; got.len()];
        quantize_activations(GgmlType::Q8_0, &x, &mut want).expect("q8_0");
        assert_eq!(got, want);
        // Q4_0: the reference quantizer.
        let mut got = vec![0u8; KvBlocks::Q4_0.row_bytes(n)];
        KvBlocks::Q4_0.quantize_row(&x, &mut got);
        let want: Vec<u8> =
            x.chunks_exact(32).flat_map(|b| BlockQ4_0::quantize(as_array(b)).to_bytes()).collect();
        assert_eq!(got, want);
        // Round trips are within half a step (Q4_0: a whole step, as its positive side stops at
        // 7 steps where the negative one reaches 8), plus the f16 rounding of the scale
        // (relative 2^-11 of the value).
        for ty in TYPES {
            let mut q = vec![0u8; ty.row_bytes(n)];
            ty.quantize_row(&x, &mut q);
            let mut back = vec![0f32; n];
            ty.dequantize_row(&q, &mut back);
            for (b, (xb, yb)) in x.chunks_exact(32).zip(back.chunks_exact(32)).enumerate() {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let bound = if ty == KvBlocks::Q8_0 { 0.5 * amax / 127.0 } else { amax / 8.0 };
                for (a, y) in xb.iter().zip(yb) {
                    assert!((a - y).abs() <= bound + a.abs() / 1024.0 + 1e-7, "{ty:?} block {b}: {a} -> {y}");
                }
            }
        }
    }
}

/// Blocks that exercise every branch of the quantizers: random magnitudes, zeros (both signs),
/// exact halves (ties), the largest magnitude at both signs, NaNs, infinities, subnormals and
/// values near the f32 limits.
fn awkward_blocks(rng: &mut StdRng) -> Vec<f32> {
    let mut x = Vec::new();
    for amp in [1e-30f32, 1e-3, 1.0, 300.0, 1e30] {
        x.extend(random(64, amp, rng));
    }
    x.extend([0.0f32; 32]);
    x.extend([-0.0f32; 32]);
    // With max|x| = 127 the Q8_0 factor is 1: halves round to even.
    let mut ties: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
    ties[31] = 127.0;
    x.extend(&ties);
    // Largest magnitude at both signs: the first one sets Q4_0's sign.
    let mut both = random(32, 1.0, rng);
    (both[5], both[9]) = (-3.0, 3.0);
    x.extend(&both);
    (both[5], both[9]) = (3.0, -3.0);
    x.extend(&both);
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MIN_POSITIVE / 4.0] {
        let mut b = random(32, 2.0, rng);
        b[7] = special;
        x.extend(&b);
    }
    let mut nan_only = [f32::NAN; 32];
    nan_only[3] = -0.0;
    x.extend(nan_only);
    x
}

#[test]
fn quantizers_write_the_portable_bytes_on_any_input() {
    let mut rng = StdRng::seed_from_u64(7);
    let x = awkward_blocks(&mut rng);
    let n = x.len();
    let mut got = vec![0u8; KvBlocks::Q8_0.row_bytes(n)];
    KvBlocks::Q8_0.quantize_row(&x, &mut got);
    let mut want = vec![0u8; got.len()];
    crate::quant::vec_dot::quantize_any(GgmlType::Q8_0, &x, &mut want);
    for (b, (g, w)) in got.chunks_exact(34).zip(want.chunks_exact(34)).enumerate() {
        assert_eq!(g, w, "Q8_0 block {b}: {:?}", &x[b * 32..(b + 1) * 32]);
    }
    let mut got = vec![0u8; KvBlocks::Q4_0.row_bytes(n)];
    KvBlocks::Q4_0.quantize_row(&x, &mut got);
    for (b, (g, xb)) in got.chunks_exact(18).zip(x.chunks_exact(32)).enumerate() {
        assert_eq!(g, BlockQ4_0::quantize(as_array(xb)).to_bytes(), "Q4_0 block {b}: {xb:?}");
    }
}

#[test]
fn dequantize_is_the_block_dequantizer() {
    let mut rng = StdRng::seed_from_u64(2);
    let src: Vec<u8> = (0..34 * 5).map(|_| rng.random()).collect();
    let mut got = vec![0f32; 160];
    // Random bytes: the scales include subnormals, infinities and NaNs, which must convert alike.
    KvBlocks::Q8_0.dequantize_row(&src, &mut got);
    for (b, g) in src.chunks_exact(34).zip(got.chunks_exact(32)) {
        let mut want = [0f32; 32];
        BlockQ8_0::from_bytes(as_array(b)).dequantize(&mut want);
        assert_eq!(g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.map(f32::to_bits));
    }
    let src = &src[..18 * 5];
    KvBlocks::Q4_0.dequantize_row(src, &mut got);
    for (b, g) in src.chunks_exact(18).zip(got.chunks_exact(32)) {
        let mut want = [0f32; 32];
        BlockQ4_0::from_bytes(as_array(b)).dequantize(&mut want);
        assert_eq!(g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.map(f32::to_bits));
    }
}

#[test]
fn every_level_has_its_kernels() {
    assert_eq!(KvKernels::for_isa(Isa::Scalar).map(|k| k.isa()), Some(Isa::Scalar));
    #[cfg(target_arch = "aarch64")]
    for isa in [Isa::Neon, Isa::NeonDotprod] {
        if let Some(k) = KvKernels::for_isa(isa) {
            assert_eq!(k.isa(), isa);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(k) = KvKernels::for_isa(Isa::Avx2) {
        assert_eq!(k.isa(), Isa::Avx2);
    }
}

#[test]
fn dots_match_f64_on_every_level() {
    let mut rng = StdRng::seed_from_u64(3);
    for k in levels() {
        for ty in TYPES {
            for &(nq, nk, cols) in
                &[(1, 1, 32), (3, 7, 64), (4, 33, 96), (5, 2, 256), (17, 9, 64), (2, 40, 128), (1, 300, 32)]
            {
                let stride = ty.row_bytes(cols) + rng.random_range(0..40);
                let (keys, kx) = rows(ty, nk, cols, stride, 1, &mut rng);
                let (q, qx) = rows(KvBlocks::Q8_0, nq, cols, KvBlocks::Q8_0.row_bytes(cols), 0, &mut rng);
                let ldc = nk + 3;
                let mut c = vec![f32::NAN; (nq - 1) * ldc + nk + 2];
                let scale = 0.37;
                k.dots(
                    &q,
                    BlockRows { ty, data: &keys[1..], rows: nk, cols, stride },
                    RowsMut { data: &mut c, rows: nq, cols: nk, stride: ldc },
                    scale,
                );
                for i in 0..nq {
                    for j in 0..nk {
                        let terms = qx[i * cols..(i + 1) * cols].iter().zip(&kx[j * cols..(j + 1) * cols]);
                        let (mut s, mut mag) = (0f64, 0f64);
                        for (&a, &b) in terms {
                            s += a as f64 * b as f64;
                            mag += (a as f64 * b as f64).abs();
                        }
                        let (got, want) = (c[i * ldc + j] as f64, scale as f64 * s);
                        assert!(
                            (got - want).abs() <= 1e-6 * scale as f64 * mag + 1e-30,
                            "{k:?} {ty:?} {nq}x{nk}x{cols} ({i}, {j}): {got} vs {want}"
                        );
                    }
                }
                // Padding between output rows is untouched.
                for i in 0..nq - 1 {
                    assert!(c[i * ldc + nk..(i + 1) * ldc].iter().all(|v| v.is_nan()));
                }
            }
        }
    }
}

#[test]
fn simd_dots_are_the_portable_ones_up_to_rounding() {
    let mut rng = StdRng::seed_from_u64(4);
    let portable = KvKernels::portable();
    for k in levels() {
        for ty in TYPES {
            let (nq, nk, cols) = (6, 21, 160);
            let stride = ty.row_bytes(cols) * 3 + 5; // every third row of a wider, odd-strided matrix
            let (keys, _) = rows(ty, nk, cols, stride, 3, &mut rng);
            let (q, _) = rows(KvBlocks::Q8_0, nq, cols, KvBlocks::Q8_0.row_bytes(cols), 0, &mut rng);
            let keys = BlockRows { ty, data: &keys[3..], rows: nk, cols, stride };
            let (mut a, mut b) = (vec![0f32; nq * nk], vec![0f32; nq * nk]);
            k.dots(&q, keys, RowsMut { data: &mut a, rows: nq, cols: nk, stride: nk }, 1.0);
            portable.dots(&q, keys, RowsMut { data: &mut b, rows: nq, cols: nk, stride: nk }, 1.0);
            for (x, y) in a.iter().zip(&b) {
                // The integer sums are exact; only the f32 accumulation (fused or not) differs.
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{k:?} {ty:?}: {x} vs {y}");
            }
        }
    }
}

#[test]
fn rows_to_f32_is_exact_on_every_level() {
    let mut rng = StdRng::seed_from_u64(5);
    for k in levels() {
        for ty in TYPES {
            for &(n, cols) in &[(1, 32), (7, 64), (33, 256), (5, 96)] {
                let stride = ty.row_bytes(cols) + 7;
                let (data, exact) = rows(ty, n, cols, stride, 5, &mut rng);
                let ds = cols + 3;
                let mut dst = vec![f32::NAN; (n - 1) * ds + cols];
                k.rows_to_f32(BlockRows { ty, data: &data[5..], rows: n, cols, stride }, &mut dst, ds);
                for i in 0..n {
                    assert_eq!(&dst[i * ds..i * ds + cols], &exact[i * cols..(i + 1) * cols], "{k:?} {ty:?}");
                }
            }
        }
    }
}

#[test]
fn rows_to_f32_of_any_bytes_agree_across_levels() {
    // Random bytes: scales include subnormals, infinities and NaNs.
    let mut rng = StdRng::seed_from_u64(6);
    let data: Vec<u8> = (0..34 * 8 * 9).map(|_| rng.random()).collect();
    let portable = KvKernels::portable();
    for k in levels() {
        for ty in TYPES {
            let src = BlockRows { ty, data: &data[1..], rows: 9, cols: 96, stride: 34 * 8 - 1 };
            let (mut a, mut b) = (vec![0f32; 9 * 96], vec![0f32; 9 * 96]);
            k.rows_to_f32(src, &mut a, 96);
            portable.rows_to_f32(src, &mut b, 96);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{k:?} {ty:?}");
        }
    }
}

#[test]
#[should_panic(expected = "whole blocks")]
fn partial_blocks_are_refused() {
    let data = [0u8; 34];
    let mut dst = [0f32; 16];
    KvKernels::best().rows_to_f32(
        BlockRows { ty: KvBlocks::Q8_0, data: &data, rows: 1, cols: 16, stride: 34 },
        &mut dst,
        16,
    );
}

#[test]
#[should_panic(expected = "reach past")]
fn rows_past_the_data_are_refused() {
    let data = [0u8; 60];
    let mut dst = [0f32; 64];
    KvKernels::best().rows_to_f32(
        BlockRows { ty: KvBlocks::Q8_0, data: &data, rows: 2, cols: 32, stride: 30 },
        &mut dst,
        32,
    );
}
