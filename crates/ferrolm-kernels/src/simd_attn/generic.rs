//! The kernels of [`crate::simd_attn`], written once over [`FVec`] and instantiated per level by
//! `#[target_feature]` wrappers (see the bottom of this file).
//!
//! Every function here takes raw pointers whose bounds the safe API in `simd_attn` has checked.

use half::f16;

use crate::simd_vec::{FVec, exp_scalar, prefetch_rows};

/// An element type the kernels read matrices in (converted to f32 on load).
pub(crate) trait Elem: Copy {
    /// Whether the type is f32 (rows can be used in place).
    const IS_F32: bool;
    /// `V::W` elements from `p`, as f32.
    ///
    /// # Safety
    /// `V`'s features must be present; `V::W` elements readable at `p`.
    unsafe fn load<V: FVec>(p: *const Self) -> V;
    /// The element as f32.
    fn to_f32(self) -> f32;
}

impl Elem for f32 {
    const IS_F32: bool = true;
    #[inline(always)]
    unsafe fn load<V: FVec>(p: *const f32) -> V {
        // SAFETY: forwarded caller contract.
        unsafe { V::load(p) }
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl Elem for f16 {
    const IS_F32: bool = false;
    #[inline(always)]
    unsafe fn load<V: FVec>(p: *const f16) -> V {
        // SAFETY: forwarded caller contract.
        unsafe { V::load_h(p) }
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// Scaling of the previous output of a GEMM.
#[derive(Clone, Copy)]
pub(crate) enum BetaRaw {
    /// Overwrite.
    Zero,
    /// Add to it.
    One,
    /// Multiply row `i` by `beta[i]`, then add.
    Rows(*const f32),
}

/// `c[i·ldc + l] = β·c[i·ldc + l] + Σ_k a[i·a_rs + k·a_cs] · b[k·ldb + l]` for `i < m`, `l < n`.
pub(crate) struct GemmArgs<B> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: *const f32,
    pub a_rs: usize,
    pub a_cs: usize,
    pub b: *const B,
    pub ldb: usize,
    pub c: *mut f32,
    pub ldc: usize,
    pub beta: BetaRaw,
    /// Request the rows of `b` ahead of their use ([`PREFETCH_B_ROWS`]).
    pub stream: bool,
}

/// `c[i·ldc + j] = scale · Σ_t a[i·lda + t] · b[j·ldb + t]` for `i < na`, `j < nb`, `t < k`.
pub(crate) struct DotsArgs<B> {
    pub na: usize,
    pub nb: usize,
    pub k: usize,
    pub a: *const f32,
    pub lda: usize,
    pub b: *const B,
    pub ldb: usize,
    pub c: *mut f32,
    pub ldc: usize,
    pub scale: f32,
}

/// Lane-wise online softmax step over `s: [kb][n]` (see `AttnKernels::softmax_lanes`).
pub(crate) struct SoftmaxArgs {
    pub s: *mut f32,
    pub kb: usize,
    pub n: usize,
    pub max: *mut f32,
    pub sum: *mut f32,
    pub alpha: *mut f32,
}

/// The GEMM: lanes in blocks of up to `NV` vectors, rows in blocks of `MR` (then 4, 2, 1), and a
/// scalar loop for the lanes past the last whole vector.
///
/// # Safety
/// `V`'s features; every index the arguments describe in bounds.
#[inline(always)]
pub(crate) unsafe fn gemm<V: FVec, B: Elem, const MR: usize, const NV: usize>(g: &GemmArgs<B>) {
    let nvec = g.n / V::W;
    let mut v0 = 0;
    while v0 < nvec {
        let nv = (nvec - v0).min(NV);
        // SAFETY: forwarded contract; `v0 + nv ≤ nvec` keeps the vector loads inside `n`.
        unsafe {
            // The prefetches are a type parameter, so that a `b` in cache pays nothing for them.
            match (nv, g.stream) {
                (1, false) => gemm_rows::<V, B, MR, 1, false>(g, v0 * V::W),
                (2, false) => gemm_rows::<V, B, MR, 2, false>(g, v0 * V::W),
                (3, false) => gemm_rows::<V, B, MR, 3, false>(g, v0 * V::W),
                (_, false) => gemm_rows::<V, B, MR, 4, false>(g, v0 * V::W),
                (1, true) => gemm_rows::<V, B, MR, 1, true>(g, v0 * V::W),
                (2, true) => gemm_rows::<V, B, MR, 2, true>(g, v0 * V::W),
                (3, true) => gemm_rows::<V, B, MR, 3, true>(g, v0 * V::W),
                (_, true) => gemm_rows::<V, B, MR, 4, true>(g, v0 * V::W),
            }
        }
        v0 += nv;
    }
    for l in nvec * V::W..g.n {
        for i in 0..g.m {
            // SAFETY: indices within the described bounds (caller contract).
            unsafe {
                let mut s = 0.0f32;
                for kk in 0..g.k {
                    s += *g.a.add(i * g.a_rs + kk * g.a_cs) * (*g.b.add(kk * g.ldb + l)).to_f32();
                }
                let c = g.c.add(i * g.ldc + l);
                *c = match g.beta {
                    BetaRaw::Zero => s,
                    BetaRaw::One => *c + s,
                    BetaRaw::Rows(b) => *c * *b.add(i) + s,
                };
            }
        }
    }
}

/// All rows of one block of `NV` vectors of lanes starting at lane `l0`.
#[inline(always)]
unsafe fn gemm_rows<V: FVec, B: Elem, const MR: usize, const NV: usize, const S: bool>(
    g: &GemmArgs<B>,
    l0: usize,
) {
    let mut i = 0;
    // SAFETY: every block has rows `i..i + R ≤ m` and lanes `l0..l0 + NV·W ≤ n`; caller contract.
    unsafe {
        while i + MR <= g.m {
            gemm_block::<V, B, MR, NV, S>(g, i, l0);
            i += MR;
        }
        if MR > 4 {
            while i + 4 <= g.m {
                gemm_block::<V, B, 4, NV, S>(g, i, l0);
                i += 4;
            }
        }
        // Three rows left (a decode group of three query heads) in one block, so that each row
        // of `b` is loaded and converted once.
        if MR > 3 && g.m - i == 3 {
            gemm_block::<V, B, 3, NV, S>(g, i, l0);
            i += 3;
        }
        if MR > 2 {
            while i + 2 <= g.m {
                gemm_block::<V, B, 2, NV, S>(g, i, l0);
                i += 2;
            }
        }
        while i < g.m {
            gemm_block::<V, B, 1, NV, S>(g, i, l0);
            i += 1;
        }
    }
}

/// Rows of `b` ahead of the one multiplied whose lines are requested (see [`prefetch_rows`]) when
/// `b` streams from memory (`GemmArgs::stream`: a decode step's stretch of the value cache).
const PREFETCH_B_ROWS: usize = 16;

/// One `MR × NV` register block of the output: rows `i0..i0 + MR`, lanes `l0..l0 + NV·W`;
/// `S`: `g.stream`.
#[inline(always)]
unsafe fn gemm_block<V: FVec, B: Elem, const MR: usize, const NV: usize, const S: bool>(
    g: &GemmArgs<B>,
    i0: usize,
    l0: usize,
) {
    // SAFETY: the block lies inside the described matrices (caller contract); V's features.
    unsafe {
        let mut acc = [[V::zero(); NV]; MR];
        let a0 = g.a.add(i0 * g.a_rs);
        let b0 = g.b.add(l0);
        let seg = NV * V::W * std::mem::size_of::<B>();
        for kk in 0..g.k {
            let bp = b0.add(kk * g.ldb);
            if S && kk + PREFETCH_B_ROWS < g.k {
                prefetch_rows(bp.wrapping_add(PREFETCH_B_ROWS * g.ldb), seg);
            }
            let mut bv = [V::zero(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = B::load::<V>(bp.add(v * V::W));
            }
            let ap = a0.add(kk * g.a_cs);
            for (i, row) in acc.iter_mut().enumerate() {
                let av = V::splat(*ap.add(i * g.a_rs));
                for (x, b) in row.iter_mut().zip(bv) {
                    *x = av.fma(b, *x);
                }
            }
        }
        for (i, row) in acc.into_iter().enumerate() {
            let cp = g.c.add((i0 + i) * g.ldc + l0);
            for (v, x) in row.into_iter().enumerate() {
                let p = cp.add(v * V::W);
                let r = match g.beta {
                    BetaRaw::Zero => x,
                    BetaRaw::One => V::load(p).add(x),
                    BetaRaw::Rows(b) => V::load(p).fma(V::splat(*b.add(i0 + i)), x),
                };
                r.store(p);
            }
        }
    }
}

/// Key rows ahead of the ones dotted whose lines are requested (see [`prefetch_rows`]).
const PREFETCH_KEYS: usize = 16;

/// Row-against-row dot products, each in [`FVec::dot`]'s order (f16 rows converted first), times
/// `d.scale`.
///
/// # Safety
/// `V`'s features; every index the arguments describe in bounds.
#[inline(always)]
pub(crate) unsafe fn dots<V: FVec, B: Elem>(d: &DotsArgs<B>) {
    // Rows are dotted eight at a time; f16 rows are converted into a buffer first, on the stack
    // when they are short enough (always, for the usual head sizes), else one at a time on the
    // heap.
    // The stack buffer is left uninitialised (zeroing 16 KiB would cost more than a short call
    // does): every row is written by `convert_row` before `dot8` reads it, through raw pointers.
    const STACK: usize = 512;
    let mut stack = [const { std::mem::MaybeUninit::<f32>::uninit() }; 8 * STACK];
    let mut heap = Vec::new();
    let batch = if B::IS_F32 || d.k <= STACK { 8 } else { 1 };
    if batch == 1 && !B::IS_F32 {
        heap.resize(d.k, 0.0);
    }
    let buf: *mut f32 = if d.k <= STACK { stack.as_mut_ptr().cast() } else { heap.as_mut_ptr() };
    // SAFETY: indices within the described bounds (caller contract); V's features.
    unsafe {
        let mut j = 0;
        while j < d.nb {
            let n = if j + 8 <= d.nb { batch } else { 1 };
            let mut rows = [std::ptr::null::<f32>(); 8];
            for (r, row) in rows.iter_mut().enumerate().take(n) {
                let bp = d.b.add((j + r) * d.ldb);
                if j + r + PREFETCH_KEYS < d.nb {
                    prefetch_rows(bp.wrapping_add(PREFETCH_KEYS * d.ldb), d.k * std::mem::size_of::<B>());
                }
                *row = if B::IS_F32 {
                    bp.cast::<f32>()
                } else {
                    // Row `r` of the buffer: inside it (`batch` rows of `d.k` floats).
                    let dst = buf.add(r * d.k);
                    convert_row::<V, B>(bp, dst, d.k);
                    dst.cast_const()
                };
            }
            for i in 0..d.na {
                let a = std::slice::from_raw_parts(d.a.add(i * d.lda), d.k);
                let c = d.c.add(i * d.ldc + j);
                if n == 8 {
                    for (r, v) in V::dot8(a, rows).into_iter().enumerate() {
                        *c.add(r) = v * d.scale;
                    }
                } else {
                    *c = V::dot(a, std::slice::from_raw_parts(rows[0], d.k)) * d.scale;
                }
            }
            j += n;
        }
    }
}

/// `len` elements of `src` as f32, written to `dst`.
///
/// # Safety
/// `V`'s features; `len` elements readable at `src` and writable at `dst`.
#[inline(always)]
unsafe fn convert_row<V: FVec, B: Elem>(src: *const B, dst: *mut f32, len: usize) {
    let n = len / V::W * V::W;
    // SAFETY: vector accesses at `t + W ≤ n ≤ len`; V's features.
    unsafe {
        for t in (0..n).step_by(V::W) {
            B::load::<V>(src.add(t)).store(dst.add(t));
        }
        for t in n..len {
            dst.add(t).write((*src.add(t)).to_f32());
        }
    }
}

/// Lane-wise online softmax over the rows of `s` (`n` a multiple of `V::W`).
///
/// # Safety
/// `V`'s features; `s` holds `kb·n` elements, `max`, `sum` and `alpha` `n` each.
#[inline(always)]
pub(crate) unsafe fn softmax_lanes<V: FVec>(a: &SoftmaxArgs) {
    // SAFETY: in bounds by the caller contract; V's features.
    unsafe {
        for l in (0..a.n).step_by(V::W) {
            let m_old = V::load(a.max.add(l));
            let mut bm = V::splat(f32::NEG_INFINITY);
            for j in 0..a.kb {
                bm = bm.max(V::load(a.s.add(j * a.n + l)));
            }
            let m_new = m_old.max(bm);
            // A lane that has seen nothing but -∞ takes a finite reference: its exponentials
            // are then exactly 0 instead of NaN.
            let m_ref = m_new.max(V::splat(f32::MIN));
            let alpha = m_old.sub(m_ref).exp();
            let mut acc = V::zero();
            for j in 0..a.kb {
                let p = a.s.add(j * a.n + l);
                let e = V::load(p).sub(m_ref).exp();
                e.store(p);
                acc = acc.add(e);
            }
            V::load(a.sum.add(l)).fma(alpha, acc).store(a.sum.add(l));
            m_new.store(a.max.add(l));
            alpha.store(a.alpha.add(l));
        }
    }
}

/// `max(x)`, -∞ for an empty slice.
///
/// # Safety
/// `V`'s features.
#[inline(always)]
pub(crate) unsafe fn max<V: FVec>(x: &[f32]) -> f32 {
    let w = V::W;
    let n = x.len() / w * w;
    // SAFETY: vector loads at `i + w ≤ n ≤ x.len()`; V's features.
    let mut m = unsafe {
        let mut acc = V::splat(f32::NEG_INFINITY);
        for i in (0..n).step_by(w) {
            acc = acc.max(V::load(x.as_ptr().add(i)));
        }
        acc.hmax()
    };
    for &v in &x[n..] {
        m = m.max(v);
    }
    m
}

/// `x[i] = exp(x[i] - m)`, returning the sum; `m = -∞` is treated as a finite value below
/// every element (all results 0 when every element is -∞).
///
/// # Safety
/// `V`'s features.
#[inline(always)]
pub(crate) unsafe fn exp_sum<V: FVec>(x: &mut [f32], m: f32) -> f32 {
    let w = V::W;
    let n = x.len() / w * w;
    let m = m.max(f32::MIN);
    // SAFETY: vector accesses at `i + w ≤ n ≤ x.len()`; V's features.
    let mut sum = unsafe {
        let (mv, mut acc) = (V::splat(m), V::zero());
        for i in (0..n).step_by(w) {
            let p = x.as_mut_ptr().add(i);
            let e = V::load(p).sub(mv).exp();
            e.store(p);
            acc = acc.add(e);
        }
        acc.hsum()
    };
    for v in &mut x[n..] {
        *v = exp_scalar(*v - m);
        sum += *v;
    }
    sum
}

/// `x[i] = cap · tanh(x[i] / cap)`, with `tanh(y) = 1 - 2 / (e^{2y} + 1)`.
///
/// # Safety
/// `V`'s features.
#[inline(always)]
pub(crate) unsafe fn softcap<V: FVec>(x: &mut [f32], cap: f32) {
    let w = V::W;
    let n = x.len() / w * w;
    // SAFETY: vector accesses at `i + w ≤ n ≤ x.len()`; V's features.
    unsafe {
        let (two_inv, c, one, two) = (V::splat(2.0 / cap), V::splat(cap), V::splat(1.0), V::splat(2.0));
        for i in (0..n).step_by(w) {
            let p = x.as_mut_ptr().add(i);
            let e = V::load(p).mul(two_inv).exp();
            let t = one.sub(two.div(e.add(one)));
            c.mul(t).store(p);
        }
    }
    for v in &mut x[n..] {
        let e = exp_scalar(2.0 * *v / cap);
        *v = cap * (1.0 - 2.0 / (e + 1.0));
    }
}

/// `g[i] = silu(g[i]) · u[i]` with `silu(x) = x / (1 + e^-x)` (SwiGLU; equal lengths).
///
/// # Safety
/// `V`'s features; `u.len() >= g.len()`.
#[inline(always)]
pub(crate) unsafe fn silu_mul<V: FVec>(g: &mut [f32], u: &[f32]) {
    let w = V::W;
    let n = g.len() / w * w;
    // SAFETY: vector accesses at `i + w ≤ n ≤ g.len() ≤ u.len()`; V's features.
    unsafe {
        let one = V::splat(1.0);
        for i in (0..n).step_by(w) {
            let p = g.as_mut_ptr().add(i);
            let x = V::load(p);
            let e = V::zero().sub(x).exp();
            x.div(one.add(e)).mul(V::load(u.as_ptr().add(i))).store(p);
        }
    }
    for (x, &y) in g[n..].iter_mut().zip(&u[n..]) {
        *x = *x / (1.0 + exp_scalar(-*x)) * y;
    }
}

/// `dst[i·ldd + t] = src[i·lds + t]` as f32, for `i < rows`, `t < cols`.
///
/// # Safety
/// `V`'s features; the described rows in bounds of both.
#[inline(always)]
pub(crate) unsafe fn f16_rows<V: FVec>(
    src: *const f16,
    lds: usize,
    rows: usize,
    cols: usize,
    dst: *mut f32,
    ldd: usize,
) {
    let w = V::W;
    let n = cols / w * w;
    // SAFETY: rows and columns within the described bounds (caller contract); V's features.
    unsafe {
        for i in 0..rows {
            let (s, d) = (src.add(i * lds), dst.add(i * ldd));
            for t in (0..n).step_by(w) {
                V::load_h(s.add(t)).store(d.add(t));
            }
            for t in n..cols {
                *d.add(t) = (*s.add(t)).to_f32();
            }
        }
    }
}

/// `x[i] = f16(x[i])` as f32 (round to nearest even).
///
/// # Safety
/// `V`'s features.
#[inline(always)]
pub(crate) unsafe fn round_f16<V: FVec>(x: &mut [f32]) {
    let w = V::W;
    let n = x.len() / w * w;
    // SAFETY: vector accesses at `i + w ≤ n ≤ x.len()`; V's features.
    unsafe {
        for i in (0..n).step_by(w) {
            let p = x.as_mut_ptr().add(i);
            V::load(p).round_f16().store(p);
        }
    }
    for v in &mut x[n..] {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// One instruction-set level's entry points: every generic kernel instantiated for a vector type
/// under the level's `#[target_feature]` attribute (none for the portable level). `$mr`, `$nv`:
/// the GEMM's register block (rows × vectors of lanes).
macro_rules! level {
    ($name:ident, $v:ty, $mr:literal, $nv:literal $(, $feat:literal)?) => {
        /// Entry points of one instruction-set level.
        pub(crate) mod $name {
            use super::*;

            /// # Safety
            /// The level's features; `g` describes in-bounds matrices.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn gemm_f32(g: &GemmArgs<f32>) {
                // SAFETY: forwarded contract.
                unsafe { gemm::<$v, f32, $mr, $nv>(g) }
            }

            /// # Safety
            /// The level's features; `g` describes in-bounds matrices.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn gemm_f16(g: &GemmArgs<f16>) {
                // SAFETY: forwarded contract.
                unsafe { gemm::<$v, f16, $mr, $nv>(g) }
            }

            /// # Safety
            /// The level's features; `d` describes in-bounds matrices.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn dots_f32(d: &DotsArgs<f32>) {
                // SAFETY: forwarded contract.
                unsafe { dots::<$v, f32>(d) }
            }

            /// # Safety
            /// The level's features; `d` describes in-bounds matrices.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn dots_f16(d: &DotsArgs<f16>) {
                // SAFETY: forwarded contract.
                unsafe { dots::<$v, f16>(d) }
            }

            /// # Safety
            /// The level's features; `a` describes in-bounds buffers.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn softmax_lanes(a: &SoftmaxArgs) {
                // SAFETY: forwarded contract.
                unsafe { super::softmax_lanes::<$v>(a) }
            }

            /// # Safety
            /// The level's features.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn max(x: &[f32]) -> f32 {
                // SAFETY: forwarded contract.
                unsafe { super::max::<$v>(x) }
            }

            /// # Safety
            /// The level's features.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn exp_sum(x: &mut [f32], m: f32) -> f32 {
                // SAFETY: forwarded contract.
                unsafe { super::exp_sum::<$v>(x, m) }
            }

            /// # Safety
            /// The level's features.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn softcap(x: &mut [f32], cap: f32) {
                // SAFETY: forwarded contract.
                unsafe { super::softcap::<$v>(x, cap) }
            }

            /// # Safety
            /// The level's features; `u.len() >= g.len()`.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn silu_mul(g: &mut [f32], u: &[f32]) {
                // SAFETY: forwarded contract.
                unsafe { super::silu_mul::<$v>(g, u) }
            }

            /// # Safety
            /// The level's features; the described rows in bounds.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn f16_rows(
                src: *const f16,
                lds: usize,
                rows: usize,
                cols: usize,
                dst: *mut f32,
                ldd: usize,
            ) {
                // SAFETY: forwarded contract.
                unsafe { super::f16_rows::<$v>(src, lds, rows, cols, dst, ldd) }
            }

            /// # Safety
            /// The level's features.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn round_f16(x: &mut [f32]) {
                // SAFETY: forwarded contract.
                unsafe { super::round_f16::<$v>(x) }
            }
        }
    };
}

level!(portable, crate::simd_vec::Portable, 4, 2);
#[cfg(target_arch = "x86_64")]
level!(avx2, crate::simd_vec::Avx2, 6, 2, "avx2,fma,f16c");
#[cfg(target_arch = "x86_64")]
level!(avx512, crate::simd_vec::Avx512, 6, 4, "avx512f");
// 6 rows × 2 vectors of 8 lanes: 24 of the 32 NEON registers hold the accumulators.
#[cfg(target_arch = "aarch64")]
level!(neon, crate::simd_vec::Neon, 6, 2, "neon");
