//! Every supported level of [`AttnKernels`] against f64 references.

use super::*;
use crate::simd_vec::exp_scalar;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn levels() -> Vec<AttnKernels> {
    let mut v: Vec<AttnKernels> = Isa::supported().into_iter().filter_map(AttnKernels::for_isa).collect();
    v.dedup_by_key(|k| k.isa());
    assert!(v.iter().any(|k| k.isa() == Isa::Scalar));
    v
}

fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn to_f16(x: &[f32]) -> Vec<f16> {
    x.iter().map(|&v| f16::from_f32(v)).collect()
}

#[test]
fn every_simd_level_has_its_kernels() {
    #[cfg(target_arch = "aarch64")]
    for isa in [Isa::Neon, Isa::NeonDotprod] {
        if let Some(k) = AttnKernels::for_isa(isa) {
            assert_eq!(k.isa(), Isa::Neon, "{isa}");
        }
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(k) = AttnKernels::for_isa(Isa::Avx2) {
        assert_eq!(k.isa(), Isa::Avx2);
    }
    assert_eq!(AttnKernels::for_isa(Isa::Scalar).map(|k| k.isa()), Some(Isa::Scalar));
}

#[test]
fn gemm_matches_f64_for_every_shape_stride_type_and_beta() {
    let mut rng = StdRng::seed_from_u64(7);
    for k in levels() {
        for &(m, n, kk) in &[
            (1, 1, 1),
            (6, 64, 64),
            (64, 48, 64),
            (13, 37, 5),
            (5, 16, 300),
            (7, 80, 33),
            (64, 256, 32),
            (3, 64, 300),
            (9, 20, 7),
        ] {
            for transposed in [false, true] {
                for f16_b in [false, true] {
                    for beta_kind in 0..3 {
                        // a: m × kk, stored either row-major (stride kk + 3) or column-major.
                        let (a_rs, a_cs) = if transposed { (1, m + 2) } else { (kk + 3, 1) };
                        let a = random(extent(m, kk, a_rs, a_cs), &mut rng);
                        let ldb = n + 5;
                        let b32 = random(extent(kk, n, ldb, 1), &mut rng);
                        let b16 = to_f16(&b32);
                        let bval = |r: usize, l: usize| {
                            if f16_b { b16[r * ldb + l].to_f32() as f64 } else { b32[r * ldb + l] as f64 }
                        };
                        let ldc = n + 1;
                        let c0 = random(extent(m, n, ldc, 1), &mut rng);
                        let betas = random(m, &mut rng);
                        let mut c = c0.clone();
                        let beta = match beta_kind {
                            0 => Beta::Zero,
                            1 => Beta::One,
                            _ => Beta::Rows(&betas),
                        };
                        let data = if f16_b { Elems::F16(&b16) } else { Elems::F32(&b32) };
                        k.gemm(
                            Strided { data: &a, rows: m, cols: kk, row_stride: a_rs, col_stride: a_cs },
                            Rows { data, rows: kk, cols: n, stride: ldb },
                            RowsMut { data: &mut c, rows: m, cols: n, stride: ldc },
                            beta,
                        );
                        // The streaming variant only adds prefetches: the same bits.
                        let mut c2 = c0.clone();
                        k.gemm_stream(
                            Strided { data: &a, rows: m, cols: kk, row_stride: a_rs, col_stride: a_cs },
                            Rows { data, rows: kk, cols: n, stride: ldb },
                            RowsMut { data: &mut c2, rows: m, cols: n, stride: ldc },
                            beta,
                        );
                        assert_eq!(c, c2, "{k:?} m{m} n{n} k{kk}: gemm_stream differs");
                        for i in 0..m {
                            for l in 0..n {
                                let mut s = 0f64;
                                let mut mag = 0f64;
                                for r in 0..kk {
                                    let t = a[i * a_rs + r * a_cs] as f64 * bval(r, l);
                                    s += t;
                                    mag += t.abs();
                                }
                                let prev = c0[i * ldc + l] as f64;
                                let want = match beta_kind {
                                    0 => s,
                                    1 => prev + s,
                                    _ => prev * betas[i] as f64 + s,
                                };
                                let got = c[i * ldc + l] as f64;
                                assert!(
                                    (got - want).abs() <= 1e-5 * (mag + prev.abs() + 1.0),
                                    "{k:?} m{m} n{n} k{kk} t{transposed} h{f16_b} b{beta_kind} ({i},{l}): {got} vs {want}"
                                );
                            }
                            // Padding between rows is untouched.
                            for l in n..ldc.min(c.len() - i * ldc) {
                                assert_eq!(c[i * ldc + l], c0[i * ldc + l]);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dots_match_f64_and_sum_in_dot_f32_order() {
    let mut rng = StdRng::seed_from_u64(8);
    for k in levels() {
        for &(na, nb, d) in
            &[(1, 1, 1), (3, 17, 64), (4, 9, 256), (2, 5, 80), (5, 3, 7), (1, 40, 33), (2, 2, 600)]
        {
            for f16_b in [false, true] {
                let (lda, ldb, ldc) = (d + 1, d + 7, nb + 2);
                let a = random(extent(na, d, lda, 1), &mut rng);
                let b32 = random(extent(nb, d, ldb, 1), &mut rng);
                let b16 = to_f16(&b32);
                let mut c = vec![0f32; extent(na, nb, ldc, 1)];
                let data = if f16_b { Elems::F16(&b16) } else { Elems::F32(&b32) };
                k.dots(
                    Rows { data: Elems::F32(&a), rows: na, cols: d, stride: lda },
                    Rows { data, rows: nb, cols: d, stride: ldb },
                    RowsMut { data: &mut c, rows: na, cols: nb, stride: ldc },
                    0.375,
                );
                for i in 0..na {
                    let ai = &a[i * lda..i * lda + d];
                    for j in 0..nb {
                        let bj: Vec<f32> = (0..d)
                            .map(|t| if f16_b { b16[j * ldb + t].to_f32() } else { b32[j * ldb + t] })
                            .collect();
                        let got = c[i * ldc + j];
                        // Bit for bit the dot product the level's CPUs get from `simd::dot_f32`.
                        let same_order = if k.isa() == Isa::Scalar {
                            crate::simd::dot_f32_scalar(ai, &bj)
                        } else {
                            crate::simd::dot_f32(ai, &bj)
                        };
                        assert_eq!(got, same_order * 0.375, "{k:?} {na}x{nb}x{d} h{f16_b}");
                        let s: f64 = ai.iter().zip(&bj).map(|(&x, &y)| x as f64 * y as f64).sum();
                        let mag: f64 = ai.iter().zip(&bj).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
                        assert!((got as f64 - 0.375 * s).abs() <= 1e-5 * (mag + 1.0), "{k:?}: {got} vs {s}");
                    }
                }
            }
        }
    }
}

fn rel_err(got: f32, want: f64) -> f64 {
    if want == 0.0 { got.abs() as f64 } else { ((got as f64 - want) / want).abs() }
}

#[test]
fn exp_is_accurate_and_exactly_zero_far_below() {
    let xs: Vec<f32> = (0..20000).map(|i| -87.0 + i as f32 * (87.0 + 80.0) / 20000.0).collect();
    for k in levels() {
        let mut y = xs.clone();
        let sum = k.exp_sum(&mut y, 0.0);
        let mut want_sum = 0f64;
        for (&x, &e) in xs.iter().zip(&y) {
            let want = (x as f64).exp();
            want_sum += want;
            assert!(rel_err(e, want) <= 3e-7, "{k:?}: exp({x}) = {e}, want {want}");
        }
        assert!(rel_err(sum, want_sum) <= 1e-5, "{k:?}: sum {sum} vs {want_sum}");
        let mut z = vec![f32::NEG_INFINITY, -1000.0, -88.0, 0.0, -0.0, f32::NEG_INFINITY, -100.0, 1.0, -90.0];
        k.exp_sum(&mut z, 0.0);
        assert_eq!(&z[..3], &[0.0, 0.0, 0.0], "{k:?}");
        assert_eq!((z[3], z[4], z[5], z[6], z[8]), (1.0, 1.0, 0.0, 0.0, 0.0), "{k:?}");
        assert!(rel_err(z[7], std::f64::consts::E) <= 3e-7);
        // Every element -∞ with a -∞ maximum: zeros, no NaN.
        let mut w = vec![f32::NEG_INFINITY; 19];
        assert_eq!(k.exp_sum(&mut w, f32::NEG_INFINITY), 0.0);
        assert!(w.iter().all(|&v| v == 0.0));
    }
    assert_eq!(exp_scalar(0.0), 1.0);
    assert_eq!(exp_scalar(f32::NEG_INFINITY), 0.0);
}

#[test]
fn max_softcap_and_conversions() {
    let mut rng = StdRng::seed_from_u64(9);
    for k in levels() {
        for n in [0usize, 1, 7, 8, 15, 16, 17, 100, 515] {
            let x: Vec<f32> = random(n, &mut rng).into_iter().map(|v| v * 60.0).collect();
            let want = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(k.max(&x), want, "{k:?} n={n}");

            let mut y = x.clone();
            k.softcap(&mut y, 30.0);
            for (&a, &b) in x.iter().zip(&y) {
                let want = 30.0 * (a as f64 / 30.0).tanh();
                assert!((b as f64 - want).abs() <= 1e-5, "{k:?}: softcap({a}) = {b}, want {want}");
            }

            let mut r = x.clone();
            k.round_f16(&mut r);
            for (&a, &b) in x.iter().zip(&r) {
                assert_eq!(b, f16::from_f32(a).to_f32());
            }
        }
        let (rows, cols, stride) = (5, 37, 45);
        let src = to_f16(&random(extent(rows, cols, stride, 1), &mut rng));
        let mut dst = vec![-1f32; rows * 40];
        k.f16_rows_to_f32(Rows { data: Elems::F16(&src), rows, cols, stride }, &mut dst, 40);
        for i in 0..rows {
            for t in 0..40 {
                let want = if t < cols { src[i * stride + t].to_f32() } else { -1.0 };
                assert_eq!(dst[i * 40 + t], want);
            }
        }
    }
}

#[test]
fn silu_mul_matches_f64() {
    let mut rng = StdRng::seed_from_u64(11);
    for k in levels() {
        for n in [0usize, 1, 7, 8, 15, 16, 17, 100, 515] {
            // Gates over the range where e^-x under- and overflows, and ordinary values.
            let g: Vec<f32> = random(n, &mut rng).into_iter().map(|v| v * 120.0).collect();
            let u = random(n, &mut rng);
            let mut y = g.clone();
            k.silu_mul(&mut y, &u);
            for ((&a, &b), &c) in g.iter().zip(&u).zip(&y) {
                let want = a as f64 / (1.0 + (-a as f64).exp()) * b as f64;
                let tol = 4.0 * f32::EPSILON as f64 * want.abs() + 1e-30;
                assert!((c as f64 - want).abs() <= tol, "{k:?}: silu({a}) * {b} = {c}, want {want}");
            }
        }
        let mut specials = [-0.0f32, 0.0, 1e-30, -1e-30];
        k.silu_mul(&mut specials, &[1.0; 4]);
        assert_eq!(specials.map(f32::to_bits)[..2], [(-0.0f32).to_bits(), 0], "{k:?}");
        assert!((specials[2] - 5e-31).abs() < 1e-36 && (specials[3] + 5e-31).abs() < 1e-36, "{k:?}");
    }
}

#[test]
fn softmax_lanes_blocks_compose_into_the_softmax() {
    let mut rng = StdRng::seed_from_u64(10);
    for k in levels() {
        let (n, kb, blocks) = (32, 9, 3);
        // Scores with -∞ holes; column 5 sees only -∞ in the first block, column 7 everywhere.
        let mut all: Vec<Vec<f32>> = Vec::new();
        for b in 0..blocks {
            let mut s: Vec<f32> = random(kb * n, &mut rng).into_iter().map(|v| v * 20.0).collect();
            for j in 0..kb {
                s[j * n + 7] = f32::NEG_INFINITY;
                if b == 0 {
                    s[j * n + 5] = f32::NEG_INFINITY;
                }
                if (j + b) % 4 == 0 {
                    s[j * n + (j % n)] = f32::NEG_INFINITY;
                }
            }
            all.push(s);
        }
        let (mut max, mut sum, mut alpha) = (vec![f32::NEG_INFINITY; n], vec![0f32; n], vec![0f32; n]);
        // Accumulates Σ p·(j index) per column, rescaled like an output row.
        let mut acc = vec![0f64; n];
        for (b, s0) in all.iter().enumerate() {
            let mut s = s0.clone();
            k.softmax_lanes(&mut s, n, &mut max, &mut sum, &mut alpha);
            for l in 0..n {
                acc[l] *= alpha[l] as f64;
                for j in 0..kb {
                    assert!(s[j * n + l].is_finite());
                    acc[l] += s[j * n + l] as f64 * (b * kb + j) as f64;
                }
            }
        }
        for l in 0..n {
            let col: Vec<f64> = all.iter().flat_map(|s| (0..kb).map(move |j| s[j * n + l] as f64)).collect();
            let m = col.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY {
                assert_eq!((sum[l], max[l]), (0.0, f32::NEG_INFINITY), "{k:?} column {l}");
                continue;
            }
            let z: f64 = col.iter().map(|v| (v - m).exp()).sum();
            let mean: f64 = col.iter().enumerate().map(|(j, v)| (v - m).exp() * j as f64).sum::<f64>() / z;
            assert_eq!(max[l] as f64, m);
            assert!(rel_err(sum[l], z) <= 1e-5, "{k:?} column {l}: {} vs {z}", sum[l]);
            assert!((acc[l] / sum[l] as f64 - mean).abs() <= 1e-4 * (mean.abs() + 1.0), "{k:?} column {l}");
        }
    }
}
