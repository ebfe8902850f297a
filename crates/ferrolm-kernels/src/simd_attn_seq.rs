//! Key-by-key online softmax with an f16 output accumulator: the arithmetic of llama.cpp's CPU
//! flash attention for f16 values, vectorised across keys and blocked for reuse.
//!
//! For one query row, key by key (in slot order, masked keys skipped): with `M` the running
//! maximum, a score `s > M` rescales the accumulator by `ms = exp(M - s)` (rounded to f16) and
//! adds the value with weight 1; otherwise the value is added with weight `vs = exp(s - M)`;
//! every addition `acc = f16(v·vs + acc)` is rounded to f16. [`scan_row`] computes the
//! `(ms, vs)` pairs of a run of keys at once (a masked key, score -∞, gets `ms = 1, vs = 0`);
//! [`accumulate_f16`] then applies them in key order.

use crate::simd_attn_generic::Elem;
use crate::simd_vec::{FVec, exp_scalar, prefetch_rows};

/// Value rows ahead of the one accumulated whose lines are requested (see [`prefetch_rows`]).
const PREFETCH_ROWS: usize = 16;

/// One query's scores over consecutive keys: replaces `s[j]` by `vs_j`, writes `ms[j]`, and
/// advances `max` and `sum`.
///
/// # Safety
/// `V`'s features; `ms.len() >= s.len()`.
#[inline(always)]
pub(crate) unsafe fn scan_row<V: FVec>(s: &mut [f32], ms: &mut [f32], max: &mut f32, sum: &mut f32) {
    let n = s.len();
    let (w, min) = (V::W, f32::MIN);
    let mref_in = max.max(min);
    // Running maxima (finite references) first. A vector of scores none of which exceeds the
    // maximum so far (the common case once it has settled) gets it in every lane without the
    // serial chain of `max`es; NaN scores, which `f32::max` skips, leave it unchanged either way.
    let mut cur = *max;
    for j in (0..n).step_by(w) {
        let e = (j + w).min(n);
        // SAFETY: a whole vector `j..j + w ≤ n ≤ ms.len()`; V's features.
        if e - j == w && unsafe { V::load(s.as_ptr().add(j)).hmax() } <= cur {
            // SAFETY: as above.
            unsafe { V::splat(cur.max(min)).store(ms.as_mut_ptr().add(j)) };
            continue;
        }
        for (c, &x) in ms[j..e].iter_mut().zip(&s[j..e]) {
            cur = cur.max(x);
            *c = cur.max(min);
        }
    }
    let mref_out = cur.max(min);
    // Then, from the top down (so that each `ms[j - 1]` is still a maximum when read):
    // vs_j = exp(s_j - M_j), ms_j = exp(M_{j-1} - M_j), and Σ vs_j·exp(M_j - M_out).
    let (sp, mp) = (s.as_mut_ptr(), ms.as_mut_ptr());
    let mut hi = n;
    // SAFETY: every chunk `[a, a + w)` has `1 ≤ a` and `a + w ≤ n ≤ ms.len()`; V's features.
    let mut total = unsafe {
        let (mo, mut acc) = (V::splat(mref_out), V::zero());
        while hi > w {
            let a = hi - w;
            let c = V::load(mp.add(a));
            let prev = V::load(mp.add(a - 1));
            let vs = V::load(sp.add(a)).sub(c).exp();
            vs.store(sp.add(a));
            prev.sub(c).exp().store(mp.add(a));
            acc = vs.fma(c.sub(mo).exp(), acc);
            hi = a;
        }
        acc.hsum()
    };
    for j in (0..hi).rev() {
        let c = ms[j];
        let prev = if j == 0 { mref_in } else { ms[j - 1] };
        s[j] = exp_scalar(s[j] - c);
        ms[j] = exp_scalar(prev - c);
        total += s[j] * exp_scalar(c - mref_out);
    }
    *sum = *sum * exp_scalar(mref_in - mref_out) + total;
    *max = cur;
}

/// [`accumulate_f16`]: factors `(i, j)` at `ms[i·rs + j·cs]` and `vs[i·rs + j·cs]`; values
/// `b[j·ldb + l]`; accumulator `c[i·ldc + l]` (f32 holding f16 values).
pub(crate) struct AccArgs<B> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ms: *const f32,
    pub vs: *const f32,
    pub rs: usize,
    pub cs: usize,
    pub b: *const B,
    pub ldb: usize,
    pub c: *mut f32,
    pub ldc: usize,
}

/// For every row `i` and key `j` in order: `c_i = f16(c_i·ms_ij)` when `ms_ij ≠ 1`, then
/// `c_i = f16(b_j·vs_ij + c_i)`.
///
/// # Safety
/// `V`'s features; every index the arguments describe in bounds.
#[inline(always)]
pub(crate) unsafe fn accumulate_f16<V: FVec, B: Elem, const MR: usize, const NV: usize>(a: &AccArgs<B>) {
    let nvec = a.n / V::W;
    let mut v0 = 0;
    while v0 < nvec {
        let nv = (nvec - v0).min(NV);
        // SAFETY: lanes `v0·W .. (v0 + nv)·W ≤ n`; caller contract.
        unsafe {
            match nv {
                1 => acc_rows::<V, B, MR, 1>(a, v0 * V::W),
                2 => acc_rows::<V, B, MR, 2>(a, v0 * V::W),
                3 => acc_rows::<V, B, MR, 3>(a, v0 * V::W),
                _ => acc_rows::<V, B, MR, 4>(a, v0 * V::W),
            }
        }
        v0 += nv;
    }
    let round = |x: f32| half::f16::from_f32(x).to_f32();
    for l in nvec * V::W..a.n {
        for i in 0..a.m {
            // SAFETY: indices within the described bounds (caller contract).
            unsafe {
                let c = a.c.add(i * a.ldc + l);
                for j in 0..a.k {
                    let (ms, vs) = (*a.ms.add(i * a.rs + j * a.cs), *a.vs.add(i * a.rs + j * a.cs));
                    if ms != 1.0 {
                        *c = round(*c * ms);
                    }
                    *c = round((*a.b.add(j * a.ldb + l)).to_f32().mul_add(vs, *c));
                }
            }
        }
    }
}

#[inline(always)]
unsafe fn acc_rows<V: FVec, B: Elem, const MR: usize, const NV: usize>(a: &AccArgs<B>, l0: usize) {
    let mut i = 0;
    // SAFETY: rows `i..i + R ≤ m`; caller contract.
    unsafe {
        while i + MR <= a.m {
            acc_block::<V, B, MR, NV>(a, i, l0);
            i += MR;
        }
        // The rest in one block (a decode group of 3 heads converts each value row once).
        match a.m - i {
            0 => {}
            1 => acc_block::<V, B, 1, NV>(a, i, l0),
            2 => acc_block::<V, B, 2, NV>(a, i, l0),
            3 if MR > 3 => acc_block::<V, B, 3, NV>(a, i, l0),
            _ => {
                while i < a.m {
                    acc_block::<V, B, 1, NV>(a, i, l0);
                    i += 1;
                }
            }
        }
    }
}

#[inline(always)]
unsafe fn acc_block<V: FVec, B: Elem, const MR: usize, const NV: usize>(
    a: &AccArgs<B>,
    i0: usize,
    l0: usize,
) {
    // SAFETY: the block lies inside the described matrices (caller contract); V's features.
    unsafe {
        let mut acc = [[V::zero(); NV]; MR];
        for (i, row) in acc.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                *x = V::load(a.c.add((i0 + i) * a.ldc + l0 + v * V::W));
            }
        }
        let seg = NV * V::W * std::mem::size_of::<B>();
        for kk in 0..a.k {
            let bp = a.b.add(kk * a.ldb + l0);
            if kk + PREFETCH_ROWS < a.k {
                prefetch_rows(bp.wrapping_add(PREFETCH_ROWS * a.ldb), seg);
            }
            let mut bv = [V::zero(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = B::load::<V>(bp.add(v * V::W));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let idx = (i0 + i) * a.rs + kk * a.cs;
                let ms = *a.ms.add(idx);
                if ms != 1.0 {
                    let m = V::splat(ms);
                    for x in row.iter_mut() {
                        *x = x.mul(m).round_f16();
                    }
                }
                let w = V::splat(*a.vs.add(idx));
                for (x, b) in row.iter_mut().zip(bv) {
                    *x = b.fma(w, *x).round_f16();
                }
            }
        }
        for (i, row) in acc.into_iter().enumerate() {
            for (v, x) in row.into_iter().enumerate() {
                x.store(a.c.add((i0 + i) * a.ldc + l0 + v * V::W));
            }
        }
    }
}
