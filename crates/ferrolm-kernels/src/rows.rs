//! Row kernels of the forward pass: RMSNorm and the RoPE rotation, with run-time dispatch, and
//! the Walsh–Hadamard rotation of quantized KV caches ([`hadamard`], portable only).
//!
//! The portable code (`reference`) is the engine's original: RMSNorm sums squares (rounded in
//! f32) in f64, element by element in order, as GGML does, so that activations quantized after
//! the norm round as llama.cpp's do; RoPE multiplies and adds unfused. The NEON path (aarch64,
//! chosen when [`crate::Isa::best`] is a NEON level) does exactly the same operations in the
//! same order on each value, so its results are the reference's bit for bit: RMSNorm runs two
//! rows' f64 sums in one register (the sums of the rows of a group side by side, each still in
//! element order) and scales four elements at a time; RoPE rotates four pairs at a time
//! (`ld2`/`st2` for the interleaved style). Every other target runs the reference.

/// Rows normalised together. Each row is still summed element by element in order (GGML's order,
/// so the result is the same), but the rows' additions overlap instead of each waiting for the
/// previous one: a lone row is bound by the latency of an f64 addition.
pub const RMS_GROUP: usize = 8;

/// Whether the NEON kernels run (a NEON level chosen, see [`crate::Isa::best`]).
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
fn neon() -> bool {
    use crate::Isa;
    matches!(Isa::best(), Isa::Neon | Isa::NeonDotprod)
}

/// RMSNorm of each `w.len()`-wide row of `x` into `out`: `out = x · inv_rms(x) · w` (the first
/// product rounded before the second).
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if neon() {
        // SAFETY: a NEON level was detected on this CPU.
        return unsafe { neon::rms_norm_rows(x, w, eps, out) };
    }
    reference::rms_norm_rows(x, w, eps, out)
}

/// RMSNorm of each `w.len()`-wide row of `x`, in place: `x = x · (inv_rms(x) · w)`.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if neon() {
        // SAFETY: a NEON level was detected on this CPU.
        return unsafe { neon::rms_norm_inplace(x, w, eps) };
    }
    reference::rms_norm_inplace(x, w, eps)
}

/// RoPE, NEOX style: in each `head_dim`-wide head of `x`, element `i < cs.len()` and element
/// `i + cs.len()` are rotated by `cs[i] = (cos, sin)`: `(a, b) -> (a·c - b·s, a·s + b·c)`.
pub fn rope_neox(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if neon() {
        // SAFETY: a NEON level was detected on this CPU.
        return unsafe { neon::rope_neox(x, head_dim, cs) };
    }
    reference::rope_neox(x, head_dim, cs)
}

/// RoPE, interleaved (GPT-J) style: in each `head_dim`-wide head of `x`, elements `2i` and
/// `2i + 1` are rotated by `cs[i]`, as in [`rope_neox`].
pub fn rope_interleaved(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if neon() {
        // SAFETY: a NEON level was detected on this CPU.
        return unsafe { neon::rope_interleaved(x, head_dim, cs) };
    }
    reference::rope_interleaved(x, head_dim, cs)
}

/// The orthonormal Walsh–Hadamard transform of each `n`-wide chunk of `x` (`n` a power of
/// two): `x ← H·x / √n`, `H` Sylvester's ±1 matrix (`H₁ = [1]`, `H₂ₖ = [[Hₖ, Hₖ], [Hₖ, −Hₖ]]`),
/// its own inverse. llama.cpp's `fwht` bit for bit: every value is first multiplied by
/// `1/√n` (rounded to f32), then butterflies `(u, v) → (u + v, u − v)` run over pairs `len`
/// apart, `len` = 1, 2, 4, …, `n/2`. Each output is a single addition or subtraction of two
/// values, so the bits do not depend on how the loops are vectorized.
///
/// # Panics
/// If `n` is not a power of two or does not divide `x.len()`.
pub fn hadamard(x: &mut [f32], n: usize) {
    assert!(
        n.is_power_of_two() && x.len().is_multiple_of(n),
        "hadamard: {} values in chunks of {n}",
        x.len()
    );
    // The sizes caches use, with the chunk's length known to the compiler (it keeps the chunk
    // in registers and unrolls the butterflies).
    match n {
        64 => x.chunks_exact_mut(64).for_each(|c| hadamard_fixed::<64>(c.try_into().expect("64"))),
        128 => x.chunks_exact_mut(128).for_each(|c| hadamard_fixed::<128>(c.try_into().expect("128"))),
        256 => x.chunks_exact_mut(256).for_each(|c| hadamard_fixed::<256>(c.try_into().expect("256"))),
        _ => x.chunks_exact_mut(n).for_each(hadamard_chunk),
    }
}

/// [`hadamard`] of one chunk of `N` values.
#[inline(always)]
fn hadamard_fixed<const N: usize>(c: &mut [f32; N]) {
    hadamard_chunk(c);
}

/// [`hadamard`] of one chunk, its length a power of two. The butterflies less than 8 apart stay
/// within groups of 8 values and run group by group (the same additions, in an order the
/// compiler vectorizes); the wider ones run stage by stage over contiguous runs.
#[inline(always)]
fn hadamard_chunk(c: &mut [f32]) {
    let n = c.len();
    let scale = 1.0 / (n as f32).sqrt();
    c.iter_mut().for_each(|v| *v *= scale);
    let mut len = 1;
    if n >= 8 {
        for g in c.chunks_exact_mut(8) {
            let g: &mut [f32; 8] = g.try_into().expect("8");
            for (i, j) in [(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7)] {
                (g[i], g[j]) = (g[i] + g[j], g[i] - g[j]);
            }
            for i in 0..4 {
                (g[i], g[i + 4]) = (g[i] + g[i + 4], g[i] - g[i + 4]);
            }
        }
        len = 8;
    }
    while len < n {
        for pair in c.chunks_exact_mut(2 * len) {
            let (a, b) = pair.split_at_mut(len);
            for (u, v) in a.iter_mut().zip(b.iter_mut()) {
                (*u, *v) = (*u + *v, *u - *v);
            }
        }
        len *= 2;
    }
}

/// `1 / sqrt(mean + eps)` from a row's f64 sum of squares, as GGML does (the mean rounded to
/// f32, the rest in f32).
#[inline(always)]
fn inv_rms(sum_sq: f64, n: usize, eps: f32) -> f32 {
    let mean = (sum_sq / n as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `(a, b) -> (a·c - b·s, a·s + b·c)`, unfused.
#[inline(always)]
fn rotate(x0: &mut f32, x1: &mut f32, &(c, s): &(f32, f32)) {
    let (a, b) = (*x0, *x1);
    *x0 = a * c - b * s;
    *x1 = a * s + b * c;
}

/// The portable kernels: the reference every other path is tested against.
mod reference {
    use super::{RMS_GROUP, inv_rms, rotate};

    /// See [`super::rms_norm_rows`].
    pub(crate) fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
        let n = w.len();
        if n == 0 {
            return;
        }
        for (xg, og) in x.chunks(RMS_GROUP * n).zip(out.chunks_mut(RMS_GROUP * n)) {
            let scales = inv_rms_rows(xg, n, eps);
            for ((xr, or), &scale) in xg.chunks_exact(n).zip(og.chunks_exact_mut(n)).zip(&scales) {
                for ((o, &xv), &wv) in or.iter_mut().zip(xr).zip(w) {
                    *o = xv * scale * wv;
                }
            }
        }
    }

    /// See [`super::rms_norm_inplace`].
    pub(crate) fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
        let n = w.len();
        if n == 0 {
            return;
        }
        for xg in x.chunks_mut(RMS_GROUP * n) {
            let scales = inv_rms_rows(xg, n, eps);
            for (xr, &scale) in xg.chunks_exact_mut(n).zip(&scales) {
                for (xv, &wv) in xr.iter_mut().zip(w) {
                    *xv *= scale * wv;
                }
            }
        }
    }

    /// `1 / sqrt(mean(x²) + eps)` of each of the (at most [`RMS_GROUP`]) `n`-wide rows of `x`
    /// (squares in f32, summed in f64 in element order, the rest in f32).
    fn inv_rms_rows(x: &[f32], n: usize, eps: f32) -> [f32; RMS_GROUP] {
        let mut ss = [0.0f64; RMS_GROUP];
        if x.len() / n >= RMS_GROUP {
            // A whole group: a fixed number of rows, so that the inner loop unrolls.
            let rows: [&[f32]; RMS_GROUP] = std::array::from_fn(|r| &x[r * n..(r + 1) * n]);
            for i in 0..n {
                for (s, row) in ss.iter_mut().zip(&rows) {
                    *s += f64::from(row[i] * row[i]);
                }
            }
        } else {
            for (s, row) in ss.iter_mut().zip(x.chunks_exact(n)) {
                *s = row.iter().map(|&v| f64::from(v * v)).sum();
            }
        }
        ss.map(|s| inv_rms(s, n, eps))
    }

    /// See [`super::rope_neox`]. The loops have no branch inside, so that the compiler
    /// vectorises them (the arithmetic is the same either way).
    pub(crate) fn rope_neox(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
        let half = cs.len();
        for head in x.chunks_exact_mut(head_dim) {
            let (lo, hi) = head.split_at_mut(half);
            for ((x0, x1), cs) in lo.iter_mut().zip(&mut hi[..half]).zip(cs) {
                rotate(x0, x1, cs);
            }
        }
    }

    /// See [`super::rope_interleaved`].
    pub(crate) fn rope_interleaved(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
        let half = cs.len();
        for head in x.chunks_exact_mut(head_dim) {
            for (pair, cs) in head[..2 * half].chunks_exact_mut(2).zip(cs) {
                if let [x0, x1] = pair {
                    rotate(x0, x1, cs);
                }
            }
        }
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon;

#[cfg(test)]
mod tests;
