//! NEON forms of the row kernels: the reference's operations, in its order, on four lanes.
//!
//! Built only when NEON is enabled at compile time (the aarch64 baseline); every entry point is
//! also compiled with the `neon` target feature, so the intrinsics inline.

use std::arch::aarch64::*;

use super::{RMS_GROUP, inv_rms, rotate};

// `rope_*` read the `(cos, sin)` pairs with `ld2`, which needs the tuple laid out as `[f32; 2]`.
// Rust does not promise a tuple's layout, so this build checks it.
const _: () = assert!(
    size_of::<(f32, f32)>() == 8
        && std::mem::offset_of!((f32, f32), 0) == 0
        && std::mem::offset_of!((f32, f32), 1) == 4,
    "(f32, f32) is not laid out as [f32; 2]"
);

/// See [`super::rms_norm_rows`].
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    if n == 0 {
        return;
    }
    for (xg, og) in x.chunks(RMS_GROUP * n).zip(out.chunks_mut(RMS_GROUP * n)) {
        let scales = inv_rms_rows(xg, n, eps);
        for ((xr, or), &scale) in xg.chunks_exact(n).zip(og.chunks_exact_mut(n)).zip(&scales) {
            // `o = x · scale · w`: the first product rounded, then the second.
            let s = vdupq_n_f32(scale);
            for ((o, xv), wv) in or.chunks_exact_mut(4).zip(xr.chunks_exact(4)).zip(w.chunks_exact(4)) {
                st4(o, vmulq_f32(vmulq_f32(ld4(xv), s), ld4(wv)));
            }
            for i in n / 4 * 4..n {
                or[i] = xr[i] * scale * w[i];
            }
        }
    }
}

/// See [`super::rms_norm_inplace`].
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let n = w.len();
    if n == 0 {
        return;
    }
    for xg in x.chunks_mut(RMS_GROUP * n) {
        let scales = inv_rms_rows(xg, n, eps);
        for (xr, &scale) in xg.chunks_exact_mut(n).zip(&scales) {
            // `x = x · (scale · w)`, as the reference's `*x *= scale * w`.
            let s = vdupq_n_f32(scale);
            for (xv, wv) in xr.chunks_exact_mut(4).zip(w.chunks_exact(4)) {
                let v = vmulq_f32(ld4(xv), vmulq_f32(s, ld4(wv)));
                st4(xv, v);
            }
            for i in n / 4 * 4..n {
                xr[i] *= scale * w[i];
            }
        }
    }
}

/// The reference's `inv_rms_rows`: the rows' sums of squares two rows to a register (a whole
/// group: four registers, four independent chains of additions), each row in element order.
#[inline]
#[target_feature(enable = "neon")]
fn inv_rms_rows(x: &[f32], n: usize, eps: f32) -> [f32; RMS_GROUP] {
    let mut ss = [0.0f64; RMS_GROUP];
    let rows = (x.len() / n).min(RMS_GROUP);
    let row = |r: usize| &x[r * n..(r + 1) * n];
    if rows == RMS_GROUP {
        let sums = sum_sq::<{ RMS_GROUP / 2 }>(std::array::from_fn(|p| [row(2 * p), row(2 * p + 1)]));
        for (pair, s) in ss.chunks_exact_mut(2).zip(sums) {
            pair.copy_from_slice(&s);
        }
    } else {
        let mut r = 0;
        while r + 2 <= rows {
            let [s] = sum_sq::<1>([[row(r), row(r + 1)]]);
            ss[r..r + 2].copy_from_slice(&s);
            r += 2;
        }
        if r < rows {
            // Starting from 0 (`sum` starts from -0): the same sum, as every square is +0 or more.
            ss[r] = row(r).iter().fold(0.0, |s, &v| s + f64::from(v * v));
        }
    }
    ss.map(|s| inv_rms(s, n, eps))
}

/// `Σ f64(v · v)` of each row of `P` pairs of equally long rows, each in element order from 0:
/// lane 0 of a register sums the pair's first row, lane 1 its second.
#[inline]
#[target_feature(enable = "neon")]
fn sum_sq<const P: usize>(pairs: [[&[f32]; 2]; P]) -> [[f64; 2]; P] {
    let n = pairs.iter().flatten().map(|r| r.len()).min().unwrap_or(0);
    let whole = n / 4 * 4;
    let mut acc = [vdupq_n_f64(0.0); P];
    for i in (0..whole).step_by(4) {
        for (a, [r0, r1]) in acc.iter_mut().zip(&pairs) {
            let (q0, q1) = (ld4(&r0[i..]), ld4(&r1[i..]));
            let (q0, q1) = (vmulq_f32(q0, q0), vmulq_f32(q1, q1));
            // [r0[i], r1[i], r0[i+1], r1[i+1]] and the same for i + 2, i + 3.
            let (lo, hi) = (vzip1q_f32(q0, q1), vzip2q_f32(q0, q1));
            *a = vaddq_f64(*a, vcvt_f64_f32(vget_low_f32(lo)));
            *a = vaddq_f64(*a, vcvt_high_f64_f32(lo));
            *a = vaddq_f64(*a, vcvt_f64_f32(vget_low_f32(hi)));
            *a = vaddq_f64(*a, vcvt_high_f64_f32(hi));
        }
    }
    let mut out = acc.map(|a| [vgetq_lane_f64::<0>(a), vgetq_lane_f64::<1>(a)]);
    for (o, [r0, r1]) in out.iter_mut().zip(&pairs) {
        for i in whole..n {
            o[0] += f64::from(r0[i] * r0[i]);
            o[1] += f64::from(r1[i] * r1[i]);
        }
    }
    out
}

/// See [`super::rope_neox`].
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn rope_neox(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
    let half = cs.len();
    let whole = half / 4 * 4;
    for head in x.chunks_exact_mut(head_dim) {
        let (lo, hi) = head.split_at_mut(half);
        let hi = &mut hi[..half];
        for i in (0..whole).step_by(4) {
            let (c, s) = cos_sin4(&cs[i..]);
            let (x0, x1) = rotate4(ld4(&lo[i..]), ld4(&hi[i..]), c, s);
            st4(&mut lo[i..], x0);
            st4(&mut hi[i..], x1);
        }
        for i in whole..half {
            rotate(&mut lo[i], &mut hi[i], &cs[i]);
        }
    }
}

/// See [`super::rope_interleaved`].
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn rope_interleaved(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
    let half = cs.len();
    let whole = half / 4 * 4;
    for head in x.chunks_exact_mut(head_dim) {
        let pairs = &mut head[..2 * half];
        for i in (0..whole).step_by(4) {
            let (c, s) = cos_sin4(&cs[i..]);
            let p = &mut pairs[2 * i..2 * i + 8];
            // SAFETY: `p` holds 8 floats: `ld2` reads them (even ones to lane set 0, odd ones to
            // lane set 1) and `st2` writes them back interleaved.
            unsafe {
                let v = vld2q_f32(p.as_ptr());
                let (x0, x1) = rotate4(v.0, v.1, c, s);
                vst2q_f32(p.as_mut_ptr(), float32x4x2_t(x0, x1));
            }
        }
        for i in whole..half {
            if let [x0, x1] = &mut pairs[2 * i..2 * i + 2] {
                rotate(x0, x1, &cs[i]);
            }
        }
    }
}

/// `(a·c - b·s, a·s + b·c)` on four lanes, unfused (as [`rotate`]).
#[inline]
#[target_feature(enable = "neon")]
fn rotate4(a: float32x4_t, b: float32x4_t, c: float32x4_t, s: float32x4_t) -> (float32x4_t, float32x4_t) {
    (vsubq_f32(vmulq_f32(a, c), vmulq_f32(b, s)), vaddq_f32(vmulq_f32(a, s), vmulq_f32(b, c)))
}

/// The cosines and the sines of the first four pairs of `cs`.
///
/// # Panics
/// If `cs` holds fewer than four pairs.
#[inline]
#[target_feature(enable = "neon")]
fn cos_sin4(cs: &[(f32, f32)]) -> (float32x4_t, float32x4_t) {
    let cs = &cs[..4];
    // SAFETY: four pairs are eight f32s laid out as `[cos, sin]` each (checked at the top of this
    // file); `ld2` splits them into cosines and sines.
    let v = unsafe { vld2q_f32(cs.as_ptr().cast::<f32>()) };
    (v.0, v.1)
}

/// The first four floats of `x`.
///
/// # Panics
/// If `x` holds fewer than four.
#[inline]
#[target_feature(enable = "neon")]
fn ld4(x: &[f32]) -> float32x4_t {
    let x = &x[..4];
    // SAFETY: `x` holds four floats (sliced above).
    unsafe { vld1q_f32(x.as_ptr()) }
}

/// Stores `v` into the first four floats of `x`.
///
/// # Panics
/// If `x` holds fewer than four.
#[inline]
#[target_feature(enable = "neon")]
fn st4(x: &mut [f32], v: float32x4_t) {
    let x = &mut x[..4];
    // SAFETY: `x` holds four writable floats (sliced above).
    unsafe { vst1q_f32(x.as_mut_ptr(), v) }
}
