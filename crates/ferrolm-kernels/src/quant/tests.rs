//! Unit tests for the dispatch layer: error paths, geometry, and dot products against an f64
//! reference on random blocks.

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;

const SUPPORTED: [GgmlType; 16] = {
    use GgmlType::*;
    [F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4]
};

fn all_types() -> Vec<GgmlType> {
    (0..64).filter_map(GgmlType::from_id).collect()
}

#[test]
fn block_geometry_matches_type_table() {
    fn geo<B: QuantBlock>(ty: GgmlType) {
        assert_eq!(B::ELEMS, ty.block_size(), "{ty}");
        assert_eq!(B::BYTES, ty.type_size(), "{ty}");
    }
    geo::<BlockQ4_0>(GgmlType::Q4_0);
    geo::<BlockQ4_1>(GgmlType::Q4_1);
    geo::<BlockQ5_0>(GgmlType::Q5_0);
    geo::<BlockQ8_0>(GgmlType::Q8_0);
    geo::<BlockQ4K>(GgmlType::Q4_K);
    geo::<BlockQ6K>(GgmlType::Q6_K);
    geo::<BlockQ5_1>(GgmlType::Q5_1);
    geo::<BlockQ2K>(GgmlType::Q2_K);
    geo::<BlockQ3K>(GgmlType::Q3_K);
    geo::<BlockQ5K>(GgmlType::Q5_K);
    geo::<BlockIQ4NL>(GgmlType::IQ4_NL);
    geo::<BlockIQ4XS>(GgmlType::IQ4_XS);
    geo::<BlockMXFP4>(GgmlType::MXFP4);
}

#[test]
fn supported_set() {
    for ty in all_types() {
        assert_eq!(supports(ty), SUPPORTED.contains(&ty), "{ty}");
        assert_eq!(ty.is_supported(), supports(ty));
        if supports_quantize(ty) {
            assert!(supports(ty), "{ty}");
        }
    }
}

#[test]
fn unsupported_types_are_errors_not_panics() {
    for ty in all_types().into_iter().filter(|t| !supports(*t)) {
        let bs = ty.block_size();
        let src = vec![0u8; ty.type_size() * 2];
        let mut dst = vec![0f32; bs * 2];
        assert_eq!(dequantize_row(ty, &src, &mut dst), Err(QuantError::UnsupportedType(ty)));
        assert_eq!(dot_f32(ty, &src, &dst), Err(QuantError::UnsupportedType(ty)));
        let mut out = vec![0u8; ty.type_size() * 2];
        assert_eq!(quantize_row(ty, &dst, &mut out), Err(QuantError::UnsupportedType(ty)));
    }
    let mut out = vec![0u8; 210];
    let x = vec![0f32; 256];
    assert_eq!(quantize_row(GgmlType::Q6_K, &x, &mut out), Err(QuantError::UnsupportedType(GgmlType::Q6_K)));
}

#[test]
fn wrong_lengths_are_errors() {
    for ty in SUPPORTED {
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let n = bs * 3;
        let good = vec![0u8; ts * 3];
        let mut dst = vec![0f32; n];
        assert_eq!(dequantize_row(ty, &good, &mut dst), Ok(()));
        assert_eq!(dot_f32(ty, &good, &dst), Ok(0.0));
        for bytes in [0, ts * 3 - 1, ts * 3 + 1, ts * 2, ts * 4] {
            let src = vec![0u8; bytes];
            let want = Err(QuantError::BadLength { ty, elements: n, bytes, expected: ts * 3 });
            assert_eq!(dequantize_row(ty, &src, &mut dst), want, "{ty} {bytes}");
            assert_eq!(dot_f32(ty, &src, &dst).map(|_| ()), want, "{ty} {bytes}");
        }
        // Empty rows are fine.
        assert_eq!(dequantize_row(ty, &[], &mut []), Ok(()));
        assert_eq!(dot_f32(ty, &[], &[]), Ok(0.0));
        if bs > 1 {
            let mut dst = vec![0f32; bs + 1];
            let src = vec![0u8; ts * 2];
            let want = Err(QuantError::PartialBlock { ty, elements: bs + 1, block: bs });
            assert_eq!(dequantize_row(ty, &src, &mut dst), want);
            assert_eq!(dot_f32(ty, &src, &dst), want.map(|()| 0.0));
        }
        if supports_quantize(ty) {
            let x = vec![1f32; n];
            let mut out = vec![0u8; ts * 3 + 1];
            let want = Err(QuantError::BadLength { ty, elements: n, bytes: ts * 3 + 1, expected: ts * 3 });
            assert_eq!(quantize_row(ty, &x, &mut out), want);
        }
    }
    assert!(quantize_row_q8_0(&[0.0; 33]).is_err());
    assert_eq!(quantize_row_q8_0(&[0.0; 64]).map(|v| v.len()), Ok(2));
    let msg = QuantError::BadLength { ty: GgmlType::Q8_0, elements: 32, bytes: 3, expected: 34 }.to_string();
    assert_eq!(msg, "32 elements of Q8_0 need 34 bytes, got 3");
}

/// Random but well-formed row bytes: every f16 field gets a finite value of moderate size.
fn random_row(ty: GgmlType, blocks: usize, rng: &mut StdRng) -> Vec<u8> {
    let ts = ty.type_size();
    let mut bytes: Vec<u8> = (0..ts * blocks).map(|_| rng.random()).collect();
    fn put(b: &mut [u8], lo: f32, hi: f32, rng: &mut StdRng) {
        let v = half::f16::from_f32(rng.random_range(lo..hi));
        b.copy_from_slice(&v.to_le_bytes());
    }
    for blk in bytes.chunks_exact_mut(ts) {
        match ty {
            GgmlType::F16 => put(blk, -4.0, 4.0, rng),
            GgmlType::BF16 => {
                let v = bf16::f32_to_bf16_bits(rng.random_range(-4.0..4.0));
                blk.copy_from_slice(&v.to_le_bytes());
            }
            GgmlType::F32 => blk.copy_from_slice(&rng.random_range(-4.0f32..4.0).to_le_bytes()),
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => {
                put(&mut blk[0..2], -0.1, 0.1, rng)
            }
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                put(&mut blk[0..2], -0.1, 0.1, rng);
                put(&mut blk[2..4], -1.0, 1.0, rng);
            }
            GgmlType::Q4_K | GgmlType::Q5_K => {
                put(&mut blk[0..2], 0.0, 0.01, rng);
                put(&mut blk[2..4], 0.0, 0.01, rng);
            }
            GgmlType::Q6_K => put(&mut blk[208..210], 0.0, 0.01, rng),
            GgmlType::Q2_K => {
                put(&mut blk[80..82], 0.0, 0.01, rng);
                put(&mut blk[82..84], 0.0, 0.01, rng);
            }
            GgmlType::Q3_K => put(&mut blk[108..110], 0.0, 0.01, rng),
            GgmlType::IQ4_XS => put(&mut blk[0..2], -0.01, 0.01, rng),
            // E8M0 exponent: scales 2^-10 .. 2^-4 (levels up to 12).
            GgmlType::MXFP4 => blk[0] = rng.random_range(118..=124),
            _ => unreachable!(),
        }
    }
    bytes
}

#[test]
fn dot_matches_f64_reference_on_random_rows() {
    let mut rng = StdRng::seed_from_u64(7);
    for ty in SUPPORTED {
        for blocks in [1, 2, 5, 16] {
            let n = blocks * ty.block_size();
            let n = if ty.block_size() == 1 { n * 37 + 3 } else { n };
            let src = random_row(ty, n / ty.block_size(), &mut rng);
            let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let mut deq = vec![0f32; n];
            dequantize_row(ty, &src, &mut deq).expect("valid row");
            let want: f64 = deq.iter().zip(&x).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            let mag: f64 = deq.iter().zip(&x).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
            let got = dot_f32(ty, &src, &x).expect("valid row");
            assert!((f64::from(got) - want).abs() <= 4e-6 * mag, "{ty} n={n}: {got} vs {want} (|.|={mag})");
            // The portable path agrees with whatever path the dispatcher chose.
            let portable = dot_any(ty, &src, &x).expect("supported");
            assert!((f64::from(portable - got)).abs() <= 4e-6 * mag, "{ty} n={n}: {portable} vs {got}");
        }
    }
}

#[test]
fn f32_dot_alignment_independent() {
    let mut rng = StdRng::seed_from_u64(3);
    let n = 101;
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut storage = vec![0u8; 4 * n + 4];
    let mut results = Vec::new();
    for off in 0..4 {
        let src = &mut storage[off..off + 4 * n];
        quantize_row(GgmlType::F32, &v, src).expect("lengths match");
        let mut back = vec![0f32; n];
        dequantize_row(GgmlType::F32, src, &mut back).expect("lengths match");
        assert_eq!(back, v);
        results.push(dot_f32(GgmlType::F32, src, &x).expect("lengths match"));
    }
    let want: f64 = v.iter().zip(&x).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
    for r in results {
        assert!((f64::from(r) - want).abs() < 1e-5, "{r} vs {want}");
    }
}

#[test]
fn quantize_row_round_trips_within_half_a_step() {
    let mut rng = StdRng::seed_from_u64(11);
    let x: Vec<f32> = (0..256).map(|_| rng.random_range(-2.0..2.0)).collect();
    for ty in all_types().into_iter().filter(|t| supports_quantize(*t)) {
        let mut q = vec![0u8; ty.type_size() * 256 / ty.block_size()];
        quantize_row(ty, &x, &mut q).expect("lengths match");
        let mut back = vec![0f32; 256];
        dequantize_row(ty, &q, &mut back).expect("lengths match");
        // Worst-case step relative to the block's range, plus f16 rounding of the scale.
        let tol = match ty {
            GgmlType::F32 => 0.0,
            GgmlType::F16 => 2e-3,
            GgmlType::BF16 => 1e-2,
            GgmlType::Q8_0 => 2.0 / 127.0 * 0.51 + 2e-3,
            GgmlType::Q5_0 => 2.0 / 16.0 + 2e-3,
            GgmlType::Q4_0 => 2.0 / 8.0 + 2e-3,
            GgmlType::Q4_1 => 4.0 / 15.0 * 0.51 + 4e-3,
            GgmlType::Q5_1 => 4.0 / 31.0 * 0.51 + 4e-3,
            // The least-squares scale search may trade the extremes' error for the bulk's.
            GgmlType::Q4_K => 4.0 / 15.0 * 0.75,
            // GGML's scale puts the largest level at 1.5 · 2^floor(log2 max|x|): with
            // 1 <= max|x| < 2 the levels are 0, 1/8, ..., 1, 1.5, so values up to 2 clip to 1.5.
            GgmlType::MXFP4 => 0.5,
            _ => unreachable!(),
        };
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= tol, "{ty}: {a} -> {b}");
        }
    }
}

#[test]
fn block_bytes_round_trip() {
    let mut rng = StdRng::seed_from_u64(5);
    fn rt<B: QuantBlock>(bytes: &[u8]) {
        let mut out = vec![0u8; B::BYTES];
        B::read(bytes).write(&mut out);
        assert_eq!(out, bytes);
    }
    let mut random = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.random()).collect() };
    rt::<BlockQ4_0>(&random(18));
    rt::<BlockQ4_1>(&random(20));
    rt::<BlockQ5_0>(&random(22));
    rt::<BlockQ8_0>(&random(34));
    rt::<BlockQ4K>(&random(144));
    rt::<BlockQ6K>(&random(210));
    rt::<BlockQ5_1>(&random(24));
    rt::<BlockQ2K>(&random(84));
    rt::<BlockQ3K>(&random(110));
    rt::<BlockQ5K>(&random(176));
    rt::<BlockIQ4NL>(&random(18));
    rt::<BlockIQ4XS>(&random(136));
    rt::<BlockMXFP4>(&random(17));
}

#[test]
fn e8m0_half_scale_matches_ggml() {
    use mxfp4::e8m0_to_f32_half;
    // 2^(e - 128) for every e, including the two subnormals and e = 255 (finite in GGML).
    for e in 0..=255u8 {
        assert_eq!(e8m0_to_f32_half(e), 2f64.powi(i32::from(e) - 128) as f32, "e = {e}");
    }
    assert_eq!(e8m0_to_f32_half(0).to_bits(), 0x0020_0000);
    assert_eq!(e8m0_to_f32_half(1).to_bits(), 0x0040_0000);
    assert_eq!(e8m0_to_f32_half(2).to_bits(), 0x0080_0000);
    assert_eq!(e8m0_to_f32_half(127), 0.5);
    assert_eq!(e8m0_to_f32_half(128), 1.0);
    assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
}

#[test]
fn mxfp4_reference_quantizer_edge_cases() {
    let q = |x: [f32; 32]| BlockMXFP4::quantize(&x);
    // All zeros: e = 0 and zero codes.
    assert_eq!(q([0.0; 32]), BlockMXFP4 { e: 0, qs: [0; 16] });
    // max|x| = 12: e = floor(log2 12) - 2 + 127 = 128 (scale 1), the levels themselves. Ties go
    // to the first code: 0.5 → 0, 5 → 4, -5 → -4, 10 → 8, -0.5 → 0 (code 0, not -1).
    let mut x = [0f32; 32];
    let vals = [12.0, -12.0, 0.5, 5.0, -5.0, 10.0, -0.5, 1.5, -7.0, 3.0, 100.0 / 8.0];
    x[..vals.len()].copy_from_slice(&vals);
    let b = q(x);
    assert_eq!(b.e, 128);
    let mut out = [0f32; 32];
    b.dequantize(&mut out);
    assert_eq!(&out[..vals.len()], &[12.0, -12.0, 0.0, 4.0, -4.0, 8.0, 0.0, 1.0, -6.0, 3.0, 12.0]);
    assert_eq!(b.qs[6] & 0x0f, 0, "-0.5 rounds to code 0");
    // max|x| below 2^-125 makes GGML's exponent negative; its uint8_t cast wraps (x86-64).
    let mut x = [0f32; 32];
    x[0] = 1e-38; // floor(log2) = -127 → e = -2 → 254
    assert_eq!(q(x).e, 254);
    assert_eq!(q(x).qs, [0; 16]);
    // NaNs are ignored by the maximum and quantize to code 0.
    let mut x = [1f32; 32];
    x[3] = f32::NAN;
    let b = q(x);
    assert_eq!(b.e, 125);
    assert_eq!(b.qs[3] & 0x0f, 0);
    // An infinity: GGML's cast gives e = 0 on x86-64.
    x[3] = f32::INFINITY;
    assert_eq!(q(x).e, 0);
}
