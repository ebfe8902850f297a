//! The row kernels against their reference (bit for bit: every path does the same operations) and
//! the reference against f64 arithmetic.

use super::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn random(n: usize, amp: f32, rng: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-amp..amp)).collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Row widths: below, at and between vector widths, and model sizes.
const WIDTHS: [usize; 9] = [1, 3, 4, 7, 8, 33, 64, 576, 2049];

#[test]
fn rms_norm_is_the_reference_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(1);
    for n in WIDTHS {
        // Partial groups (1, 2, 3 rows), one whole group, a group and a remainder of odd size.
        for rows in [1, 2, 3, 8, 19] {
            let amp = [1e-3, 1.0, 40.0][rows % 3];
            let x = random(rows * n, amp, &mut rng);
            let w = random(n, 2.0, &mut rng);
            let (mut got, mut want) = (vec![0f32; rows * n], vec![0f32; rows * n]);
            rms_norm_rows(&x, &w, 1e-6, &mut got);
            reference::rms_norm_rows(&x, &w, 1e-6, &mut want);
            assert_eq!(bits(&got), bits(&want), "rows n={n} rows={rows}");
            let (mut got, mut want) = (x.clone(), x.clone());
            rms_norm_inplace(&mut got, &w, 1e-5);
            reference::rms_norm_inplace(&mut want, &w, 1e-5);
            assert_eq!(bits(&got), bits(&want), "in place n={n} rows={rows}");
        }
    }
}

#[test]
fn rms_norm_matches_f64() {
    let mut rng = StdRng::seed_from_u64(2);
    let (n, rows) = (96, 11);
    let x = random(rows * n, 3.0, &mut rng);
    let w = random(n, 2.0, &mut rng);
    let mut out = vec![0f32; rows * n];
    rms_norm_rows(&x, &w, 1e-6, &mut out);
    for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact(n)) {
        let ms = xr.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / n as f64;
        let inv = 1.0 / (ms + 1e-6).sqrt();
        for ((&a, &o), &wv) in xr.iter().zip(or).zip(&w) {
            let want = f64::from(a) * inv * f64::from(wv);
            assert!((f64::from(o) - want).abs() <= 1e-6 * (want.abs() + 1e-3), "{o} vs {want}");
        }
    }
    // An empty weight (no columns) leaves the output alone.
    let mut untouched = [7f32; 3];
    rms_norm_rows(&[1.0, 2.0, 3.0], &[], 1e-6, &mut untouched);
    assert_eq!(untouched, [7.0; 3]);
}

#[test]
fn rope_is_the_reference_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(3);
    // (head_dim, rotated pairs): whole, partial (rotated dims < head_dim) and odd pair counts.
    for (hd, half) in [(8, 4), (64, 32), (128, 64), (80, 40), (64, 16), (24, 6), (6, 3), (10, 1), (4, 0)] {
        for heads in [1, 3] {
            let x = random(heads * hd, 4.0, &mut rng);
            let cs: Vec<(f32, f32)> = (0..half)
                .map(|_| {
                    let t = rng.random_range(-100.0f32..100.0);
                    (t.cos() * 1.1, t.sin() * 1.1)
                })
                .collect();
            let (mut got, mut want) = (x.clone(), x.clone());
            rope_neox(&mut got, hd, &cs);
            reference::rope_neox(&mut want, hd, &cs);
            assert_eq!(bits(&got), bits(&want), "neox hd={hd} half={half}");
            let (mut got, mut want) = (x.clone(), x.clone());
            rope_interleaved(&mut got, hd, &cs);
            reference::rope_interleaved(&mut want, hd, &cs);
            assert_eq!(bits(&got), bits(&want), "interleaved hd={hd} half={half}");
            // Dimensions past the rotated ones are untouched by both styles.
            assert_eq!(bits(&got[2 * half..hd]), bits(&x[2 * half..hd]));
        }
    }
}

#[test]
fn rope_rotates_the_right_pairs() {
    // Rotation by 90°: (a, b) -> (-b, a), exactly.
    let x: Vec<f32> = (0..16).map(|i| i as f32 + 1.0).collect();
    let cs = vec![(0.0f32, 1.0f32); 5];
    let mut neox = x.clone();
    rope_neox(&mut neox, 16, &cs);
    for i in 0..5 {
        assert_eq!((neox[i], neox[i + 5]), (-x[i + 5], x[i]), "neox pair {i}");
    }
    assert_eq!(&neox[10..], &x[10..]);
    let mut inter = x.clone();
    rope_interleaved(&mut inter, 16, &cs);
    for i in 0..5 {
        assert_eq!((inter[2 * i], inter[2 * i + 1]), (-x[2 * i + 1], x[2 * i]), "interleaved pair {i}");
    }
    assert_eq!(&inter[10..], &x[10..]);
}

#[test]
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
fn neon_kernels_are_the_reference_bit_for_bit() {
    // The NEON kernels called directly (the dispatching functions above may run the reference
    // when FERROLM_ISA caps the level).
    let mut rng = StdRng::seed_from_u64(4);
    for n in WIDTHS {
        for rows in [1, 2, 5, 8, 17] {
            let x = random(rows * n, 5.0, &mut rng);
            let w = random(n, 2.0, &mut rng);
            let (mut got, mut want) = (vec![0f32; rows * n], vec![0f32; rows * n]);
            // SAFETY: NEON is enabled for the whole build (the aarch64 baseline).
            unsafe { neon::rms_norm_rows(&x, &w, 1e-6, &mut got) };
            reference::rms_norm_rows(&x, &w, 1e-6, &mut want);
            assert_eq!(bits(&got), bits(&want), "n={n} rows={rows}");
            let (mut got, mut want) = (x.clone(), x.clone());
            // SAFETY: as above.
            unsafe { neon::rms_norm_inplace(&mut got, &w, 1e-6) };
            reference::rms_norm_inplace(&mut want, &w, 1e-6);
            assert_eq!(bits(&got), bits(&want), "in place n={n} rows={rows}");
        }
    }
    for (hd, half) in [(64, 32), (80, 40), (24, 6), (10, 1)] {
        let x = random(2 * hd, 4.0, &mut rng);
        let cs: Vec<(f32, f32)> = (0..half).map(|i| ((i as f32).cos(), (i as f32).sin())).collect();
        let (mut got, mut want) = (x.clone(), x.clone());
        // SAFETY: as above.
        unsafe { neon::rope_neox(&mut got, hd, &cs) };
        reference::rope_neox(&mut want, hd, &cs);
        assert_eq!(bits(&got), bits(&want), "neox hd={hd}");
        let (mut got, mut want) = (x.clone(), x.clone());
        // SAFETY: as above.
        unsafe { neon::rope_interleaved(&mut got, hd, &cs) };
        reference::rope_interleaved(&mut want, hd, &cs);
        assert_eq!(bits(&got), bits(&want), "interleaved hd={hd}");
    }
}

/// Sylvester's `n × n` Hadamard matrix, entry by entry: `(-1)^popcount(i & j)`.
fn sylvester(i: usize, j: usize) -> f64 {
    if (i & j).count_ones().is_multiple_of(2) { 1.0 } else { -1.0 }
}

#[test]
fn hadamard_is_the_orthonormal_sylvester_matrix_times_each_chunk() {
    let mut rng = StdRng::seed_from_u64(7);
    for n in [1, 2, 4, 8, 16, 64, 128, 256, 512] {
        let x = random(3 * n, 30.0, &mut rng);
        let mut got = x.clone();
        hadamard(&mut got, n);
        for (xc, gc) in x.chunks_exact(n).zip(got.chunks_exact(n)) {
            for (i, &g) in gc.iter().enumerate() {
                let want: f64 =
                    (0..n).map(|j| sylvester(i, j) * xc[j] as f64).sum::<f64>() / (n as f64).sqrt();
                assert!(
                    (g as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()) * (n as f64).log2().max(1.0),
                    "n={n} i={i}: {g} vs {want}"
                );
            }
        }
        // Orthonormal and symmetric: applying it twice gives the input back, and it keeps norms.
        let mut back = got.clone();
        hadamard(&mut back, n);
        for (a, b) in back.iter().zip(&x) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "n={n}: H·H·x = {a}, x = {b}");
        }
        let norm = |v: &[f32]| v.iter().map(|&a| (a as f64) * (a as f64)).sum::<f64>();
        assert!((norm(&got) / norm(&x) - 1.0).abs() < 1e-5, "n={n}: the norm changed");
    }
}

#[test]
fn hadamard_spreads_an_outlier_over_its_chunk() {
    // What it is for: one large value among small ones (Qwen 2's keys) becomes n values of
    // equal magnitude, so a 32-value block of the cache no longer spends its scale on it.
    let mut x = vec![0f32; 64];
    x[5] = 64.0;
    hadamard(&mut x, 64);
    assert!(x.iter().all(|&v| v.abs() == 8.0), "{x:?}");
    assert_eq!(x[0], 8.0);
}

#[test]
#[should_panic(expected = "hadamard")]
fn hadamard_refuses_a_chunk_that_is_not_a_power_of_two() {
    hadamard(&mut [0f32; 12], 6);
}

#[test]
fn hadamard_gives_the_same_bits_on_every_path() {
    // The transform (the sizes 64, 128 and 256 unrolled) against the loop over any size, chunk
    // by chunk: the same additions, so the same bits.
    let mut rng = StdRng::seed_from_u64(8);
    for n in [8, 16, 32, 64, 128, 256, 512] {
        let x = random(5 * n, 100.0, &mut rng);
        let mut got = x.clone();
        hadamard(&mut got, n);
        let mut want = x.clone();
        want.chunks_exact_mut(n).for_each(super::hadamard_chunk);
        assert_eq!(bits(&got), bits(&want), "n={n}");
    }
}
