//! Plain f32 vector kernels with a portable path and, on x86_64, an AVX2+FMA path chosen at run
//! time; on aarch64 a NEON path that computes the portable path's exact operations.

#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;

/// Number of independent accumulators the portable kernels keep; a multiple of 8 so that LLVM can
/// map them onto whole SSE/AVX registers.
pub(crate) const ACC_LANES: usize = 32;

/// Whether this CPU supports AVX2 and FMA (detected once, then cached).
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        *DETECTED.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Dot product `Σ a[i]·b[i]` of two f32 slices, accumulated in f32.
///
/// Uses AVX2+FMA when the CPU has them, otherwise a portable kernel with independent accumulators.
/// The two paths may differ in the last bits (different summation order, fused multiply-add).
/// On aarch64 the portable kernel's operations run as NEON instructions (the same bits).
///
/// # Panics
/// If `a.len() != b.len()`.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f32: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2 and FMA were detected on this CPU just above.
        return unsafe { dot_f32_avx2(a, b) };
    }
    dot_f32_portable_order(a, b)
}

/// [`dot_f32_scalar`]'s result, computed with NEON where the build enables it.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[inline]
fn dot_f32_portable_order(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: NEON is enabled for the whole build (the aarch64 baseline), so every CPU that runs
    // this binary has it; equal lengths (asserted by the caller).
    unsafe { dot_f32_neon(a, b) }
}

/// [`dot_f32_scalar`].
#[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
#[inline]
fn dot_f32_portable_order(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_scalar(a, b)
}

/// Portable dot product: `ACC_LANES` independent accumulators (which LLVM vectorises), then a
/// pairwise reduction. Requires `a.len() == b.len()` (extra elements of the longer one are ignored).
#[inline]
pub(crate) fn dot_f32_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; ACC_LANES];
    let ca = a.chunks_exact(ACC_LANES);
    let cb = b.chunks_exact(ACC_LANES);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (xa, xb) in ca.zip(cb) {
        lanes_fma(&mut acc, xa, xb);
    }
    let mut tail = 0f32;
    for (x, y) in ta.iter().zip(tb) {
        tail += x * y;
    }
    reduce_lanes(&acc) + tail
}

/// `acc[k] += a[k]·b[k]` for every lane `k` (separate multiply and add, no fusion). `a` and `b`
/// must hold at least `ACC_LANES` elements.
#[inline(always)]
pub(crate) fn lanes_fma(acc: &mut [f32; ACC_LANES], a: &[f32], b: &[f32]) {
    let (a, b) = (&a[..ACC_LANES], &b[..ACC_LANES]);
    for k in 0..ACC_LANES {
        acc[k] += a[k] * b[k];
    }
}

/// Pairwise sum of the accumulator lanes.
#[inline(always)]
pub(crate) fn reduce_lanes(acc: &[f32; ACC_LANES]) -> f32 {
    let mut v = *acc;
    let mut width = ACC_LANES / 2;
    while width > 0 {
        for k in 0..width {
            v[k] += v[k + width];
        }
        width /= 2;
    }
    v[0]
}

/// AVX2+FMA dot product: four independent 8-wide accumulators over 32-element chunks, then 8-wide
/// chunks, then a scalar tail.
///
/// # Safety
/// The CPU must support AVX2 and FMA. `a.len()` must equal `b.len()`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;

    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    let (mut s0, mut s1, mut s2, mut s3) =
        (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
    while i + 32 <= n {
        // SAFETY: `i + 32 <= n` so all four unaligned 8-float loads from `pa + i` and `pb + i` stay
        // inside both slices; AVX2+FMA are available (caller contract).
        unsafe {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8)), _mm256_loadu_ps(pb.add(i + 8)), s1);
            s2 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 16)), _mm256_loadu_ps(pb.add(i + 16)), s2);
            s3 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 24)), _mm256_loadu_ps(pb.add(i + 24)), s3);
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` keeps both 8-float loads in bounds; AVX2+FMA available.
        unsafe {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
        }
        i += 8;
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` is 8 writable f32s, exactly one unaligned 256-bit store; AVX available.
    unsafe {
        let s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
        _mm256_storeu_ps(lanes.as_mut_ptr(), s);
    }
    let mut sum =
        ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for k in i..n {
        sum += a[k] * b[k];
    }
    sum
}

/// [`dot_f32_scalar`] in NEON, bit for bit: its 32 accumulator lanes are eight registers, each
/// product rounded before its addition (no fused multiply-add), the lanes reduced in the same
/// pairwise order, then the scalar tail added.
///
/// # Safety
/// The CPU must support NEON. `a.len()` must equal `b.len()`.
#[cfg(target_arch = "aarch64")]
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_f32_neon(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::aarch64::*;
    const _: () = assert!(ACC_LANES == 32, "eight NEON registers hold the accumulator lanes");

    let n = a.len().min(b.len());
    let whole = n / ACC_LANES * ACC_LANES;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 8];
    for i in (0..whole).step_by(ACC_LANES) {
        for (k, s) in acc.iter_mut().enumerate() {
            // SAFETY: `i + 4k + 4 <= whole <= n`: both 4-float loads stay inside the slices.
            let (x, y) = unsafe { (vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k))) };
            *s = vaddq_f32(*s, vmulq_f32(x, y));
        }
    }
    // `reduce_lanes`: lanes 16, 8 and 4 apart are whole registers, then lanes 2 and 1 apart.
    let s16: [float32x4_t; 4] = std::array::from_fn(|k| vaddq_f32(acc[k], acc[k + 4]));
    let s8 = [vaddq_f32(s16[0], s16[2]), vaddq_f32(s16[1], s16[3])];
    let s4 = vaddq_f32(s8[0], s8[1]);
    let s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    let mut tail = 0f32;
    for k in whole..n {
        tail += a[k] * b[k];
    }
    vpadds_f32(s2) + tail
}

/// Whether this CPU supports AVX2, FMA and F16C (detected once, then cached).
pub fn has_avx2_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        *DETECTED.get_or_init(|| has_avx2_fma() && is_x86_feature_detected!("f16c"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    fn reference(a: &[f32], b: &[f32]) -> (f64, f64) {
        let dot = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
        let mag = a.iter().zip(b).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
        (dot, mag)
    }

    const LENGTHS: [usize; 12] = [0, 1, 7, 8, 31, 32, 33, 63, 64, 100, 577, 4099];

    #[test]
    fn scalar_matches_f64() {
        let mut rng = StdRng::seed_from_u64(1);
        for n in LENGTHS {
            let (a, b) = (random(n, &mut rng), random(n, &mut rng));
            let (want, mag) = reference(&a, &b);
            let got = dot_f32_scalar(&a, &b) as f64;
            assert!((got - want).abs() <= 1e-6 * mag + 1e-30, "n={n}: {got} vs {want}");
            assert!(dot_f32(&a, &b).is_finite());
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_matches_scalar() {
        if !has_avx2_fma() {
            eprintln!("no AVX2+FMA on this CPU; skipping");
            return;
        }
        let mut rng = StdRng::seed_from_u64(2);
        for n in LENGTHS {
            let (a, b) = (random(n, &mut rng), random(n, &mut rng));
            let (_, mag) = reference(&a, &b);
            let scalar = dot_f32_scalar(&a, &b);
            // SAFETY: AVX2+FMA detected above; equal lengths.
            let simd = unsafe { dot_f32_avx2(&a, &b) };
            assert!(((simd - scalar) as f64).abs() <= 2e-6 * mag + 1e-30, "n={n}: {simd} vs {scalar}");
            assert_eq!(dot_f32(&a, &b), simd);
        }
    }

    #[test]
    #[cfg(target_arch = "aarch64")]
    fn neon_is_the_portable_kernel_bit_for_bit() {
        let mut rng = StdRng::seed_from_u64(3);
        for n in LENGTHS {
            let (a, b) = (random(n, &mut rng), random(n, &mut rng));
            // SAFETY: every aarch64 CPU this crate runs on has NEON; equal lengths.
            let neon = unsafe { dot_f32_neon(&a, &b) };
            assert_eq!(neon.to_bits(), dot_f32_scalar(&a, &b).to_bits(), "n={n}");
            assert_eq!(dot_f32(&a, &b).to_bits(), neon.to_bits());
        }
    }

    #[test]
    fn exact_on_small_integers() {
        let a: Vec<f32> = (0..577).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..577).map(|i| (i % 5) as f32).collect();
        let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot_f32_scalar(&a, &b), want);
        assert_eq!(dot_f32(&a, &b), want);
    }
}
