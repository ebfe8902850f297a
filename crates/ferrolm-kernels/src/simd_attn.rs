//! f32 kernels for attention, chosen once per instruction-set level ([`AttnKernels`]):
//!
//! - [`AttnKernels::gemm`]: a small GEMM `C = β∘C + A·B` where `A` is read one element at a time
//!   (any strides, so a transposed operand costs nothing) and `B` row by row (f32 or f16,
//!   converted on load) — the score and the value products of a tiled attention;
//! - [`AttnKernels::dots`]: dot products of rows against rows (one query's scores), summed in
//!   exactly [`crate::simd::dot_f32`]'s order;
//! - [`AttnKernels::softmax_lanes`]: one block of a column-wise online softmax;
//! - [`AttnKernels::max`], [`AttnKernels::exp_sum`], [`AttnKernels::softcap`]: row helpers, and
//!   [`AttnKernels::silu_mul`], the feed-forward's SwiGLU (it needs the same vector `exp`);
//! - [`AttnKernels::f16_rows_to_f32`], [`AttnKernels::round_f16`]: f16 conversions (F16C on
//!   x86, `fcvtl`/`fcvtn` on aarch64).
//!
//! Levels: portable, AVX2 (+FMA, F16C), AVX-512 and NEON (8 lanes in two registers, fused
//! multiply-adds; its dot products sum in the portable order, bit for bit).
//!
//! The portable level ([`Isa::Scalar`]) is the reference; the SIMD levels may differ from it in
//! the last bits (summation order, fused multiply-add). `exp` is a polynomial within a few ulp
//! of the exact value on every level, and exactly 0 for arguments below about -87.3.

use half::f16;

use crate::Isa;
use generic::{BetaRaw, DotsArgs, GemmArgs, SoftmaxArgs};

/// Elements of a matrix, stored as f32 or f16.
#[derive(Clone, Copy, Debug)]
pub enum Elems<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// 16-bit floats, converted exactly to f32 when read.
    F16(&'a [f16]),
}

impl Elems<'_> {
    fn len(&self) -> usize {
        match self {
            Elems::F32(x) => x.len(),
            Elems::F16(x) => x.len(),
        }
    }
}

/// A matrix of `rows` rows of `cols` contiguous elements; row `i` starts at element
/// `i * stride` of `data`.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    /// The elements.
    pub data: Elems<'a>,
    /// Number of rows.
    pub rows: usize,
    /// Elements per row.
    pub cols: usize,
    /// Distance between the starts of two consecutive rows, in elements.
    pub stride: usize,
}

/// An f32 matrix with arbitrary strides: element `(i, j)` is `data[i * row_stride + j * col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Distance between two rows, in elements.
    pub row_stride: usize,
    /// Distance between two columns, in elements.
    pub col_stride: usize,
}

/// An output matrix of `rows` rows of `cols` contiguous f32s; row `i` starts at `i * stride`.
#[derive(Debug)]
pub struct RowsMut<'a> {
    /// The elements.
    pub data: &'a mut [f32],
    /// Number of rows.
    pub rows: usize,
    /// Elements per row.
    pub cols: usize,
    /// Distance between the starts of two consecutive rows, in elements.
    pub stride: usize,
}

/// What [`AttnKernels::gemm`] does with the output's previous content.
#[derive(Clone, Copy, Debug)]
pub enum Beta<'a> {
    /// Overwrite it (`C = A·B`).
    Zero,
    /// Add to it (`C += A·B`).
    One,
    /// Scale row `i` by `beta[i]`, then add (`C[i] = beta[i]·C[i] + (A·B)[i]`).
    Rows(&'a [f32]),
}

/// Index one past the last element of a matrix of `rows × cols` with these strides (0 if empty).
fn extent(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1) * row_stride + (cols - 1) * col_stride + 1 }
}

type GemmFn<B> = unsafe fn(&GemmArgs<B>);
type DotsFn<B> = unsafe fn(&DotsArgs<B>);
type F16RowsFn = unsafe fn(*const f16, usize, usize, usize, *mut f32, usize);

/// The attention kernels of one instruction-set level (a table of function pointers, chosen
/// once). Every method checks its arguments' shapes and bounds and panics on a mismatch (a bug
/// in the caller, never a property of user input).
#[derive(Clone, Copy)]
pub struct AttnKernels {
    isa: Isa,
    gemm_f32: GemmFn<f32>,
    gemm_f16: GemmFn<f16>,
    dots_f32: DotsFn<f32>,
    dots_f16: DotsFn<f16>,
    softmax_lanes: unsafe fn(&SoftmaxArgs),
    max: unsafe fn(&[f32]) -> f32,
    exp_sum: unsafe fn(&mut [f32], f32) -> f32,
    softcap: unsafe fn(&mut [f32], f32),
    silu_mul: unsafe fn(&mut [f32], &[f32]),
    f16_rows: F16RowsFn,
    round_f16: unsafe fn(&mut [f32]),
}

impl std::fmt::Debug for AttnKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AttnKernels({})", self.isa)
    }
}

macro_rules! table {
    ($isa:expr, $m:ident) => {
        AttnKernels {
            isa: $isa,
            gemm_f32: generic::$m::gemm_f32,
            gemm_f16: generic::$m::gemm_f16,
            dots_f32: generic::$m::dots_f32,
            dots_f16: generic::$m::dots_f16,
            softmax_lanes: generic::$m::softmax_lanes,
            max: generic::$m::max,
            exp_sum: generic::$m::exp_sum,
            softcap: generic::$m::softcap,
            silu_mul: generic::$m::silu_mul,
            f16_rows: generic::$m::f16_rows,
            round_f16: generic::$m::round_f16,
        }
    };
}

impl AttnKernels {
    /// The kernels of the best level this CPU supports (capped by `FERROLM_ISA`, see [`Isa::best`]).
    pub fn best() -> Self {
        static BEST: std::sync::OnceLock<AttnKernels> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Self::for_isa(Isa::best()).unwrap_or_else(Self::portable))
    }

    /// The portable kernels (the reference).
    pub fn portable() -> Self {
        table!(Isa::Scalar, portable)
    }

    /// The kernels written for `isa`, if this CPU supports it. Levels without kernels of their
    /// own use the best one below them (AVX-VNNI: the AVX2 kernels; NEON with dotprod: the NEON
    /// ones, as these kernels have no 8-bit products).
    pub fn for_isa(isa: Isa) -> Option<Self> {
        if !isa.is_supported() {
            return None;
        }
        Some(match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => table!(Isa::Avx512, avx512),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni => table!(Isa::Avx2, avx2),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::NeonDotprod => table!(Isa::Neon, neon),
            _ => Self::portable(),
        })
    }

    /// The level whose kernels these are.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `c = β∘c + a·b`: `c[i][l] = β_i·c[i][l] + Σ_k a(i, k)·b[k][l]`.
    ///
    /// # Panics
    /// If the shapes disagree (`a` is `c.rows × b.rows`, `b` is `b.rows × c.cols`), a matrix
    /// reaches past its slice, or `Beta::Rows` holds fewer than `c.rows` factors.
    pub fn gemm(&self, a: Strided<'_>, b: Rows<'_>, c: RowsMut<'_>, beta: Beta<'_>) {
        self.gemm_impl(a, b, c, beta, false)
    }

    /// [`AttnKernels::gemm`] for a `b` read once from memory (a stretch of the KV cache in a
    /// decode step): its rows are requested 16 rows ahead of their use. Same results; on a `b`
    /// already in cache the requests only cost time.
    ///
    /// # Panics
    /// As [`AttnKernels::gemm`].
    pub fn gemm_stream(&self, a: Strided<'_>, b: Rows<'_>, c: RowsMut<'_>, beta: Beta<'_>) {
        self.gemm_impl(a, b, c, beta, true)
    }

    fn gemm_impl(&self, a: Strided<'_>, b: Rows<'_>, c: RowsMut<'_>, beta: Beta<'_>, stream: bool) {
        assert!(a.rows == c.rows && a.cols == b.rows && b.cols == c.cols, "gemm: shapes disagree");
        assert!(a.data.len() >= extent(a.rows, a.cols, a.row_stride, a.col_stride), "gemm: a too short");
        assert!(b.data.len() >= extent(b.rows, b.cols, b.stride, 1), "gemm: b too short");
        assert!(c.data.len() >= extent(c.rows, c.cols, c.stride, 1), "gemm: c too short");
        let beta = match beta {
            Beta::Zero => BetaRaw::Zero,
            Beta::One => BetaRaw::One,
            Beta::Rows(r) => {
                assert!(r.len() >= c.rows, "gemm: too few row factors");
                BetaRaw::Rows(r.as_ptr())
            }
        };
        if c.rows == 0 || c.cols == 0 {
            return;
        }
        macro_rules! args {
            ($b:expr) => {
                GemmArgs {
                    m: c.rows,
                    n: c.cols,
                    k: a.cols,
                    a: a.data.as_ptr(),
                    a_rs: a.row_stride,
                    a_cs: a.col_stride,
                    b: $b.as_ptr(),
                    ldb: b.stride,
                    c: c.data.as_mut_ptr(),
                    ldc: c.stride,
                    beta,
                    stream,
                }
            };
        }
        // SAFETY: the level is supported (checked when the table was built); the extents above
        // keep every index the arguments describe inside the slices.
        unsafe {
            match b.data {
                Elems::F32(x) => (self.gemm_f32)(&args!(x)),
                Elems::F16(x) => (self.gemm_f16)(&args!(x)),
            }
        }
    }

    /// `c[i][j] = scale · (a_i · b_j)` (rows of `a` against rows of `b`), each dot product summed
    /// in exactly the order of [`crate::simd::dot_f32`] on CPUs of this level (its AVX2 kernel on
    /// the x86 levels, its portable one otherwise), so that scores match a per-key loop calling
    /// it bit for bit.
    ///
    /// # Panics
    /// If `a.cols != b.cols`, `c` is not `a.rows × b.rows`, or a matrix reaches past its slice.
    pub fn dots(&self, a: Rows<'_>, b: Rows<'_>, c: RowsMut<'_>, scale: f32) {
        let Elems::F32(ad) = a.data else { panic!("dots: a must be f32") };
        assert!(a.cols == b.cols && c.rows == a.rows && c.cols == b.rows, "dots: shapes disagree");
        assert!(ad.len() >= extent(a.rows, a.cols, a.stride, 1), "dots: a too short");
        assert!(b.data.len() >= extent(b.rows, b.cols, b.stride, 1), "dots: b too short");
        assert!(c.data.len() >= extent(c.rows, c.cols, c.stride, 1), "dots: c too short");
        macro_rules! args {
            ($b:expr) => {
                DotsArgs {
                    na: a.rows,
                    nb: b.rows,
                    k: a.cols,
                    a: ad.as_ptr(),
                    lda: a.stride,
                    b: $b.as_ptr(),
                    ldb: b.stride,
                    c: c.data.as_mut_ptr(),
                    ldc: c.stride,
                    scale,
                }
            };
        }
        // SAFETY: supported level; extents checked above.
        unsafe {
            match b.data {
                Elems::F32(x) => (self.dots_f32)(&args!(x)),
                Elems::F16(x) => (self.dots_f16)(&args!(x)),
            }
        }
    }

    /// One key block of a column-wise online softmax. `s` holds `[kb][n]` scores (column `l` is
    /// one query); `max` and `sum` the running maximum and denominator of each column. Updates
    /// `max`, replaces `s` by `exp(s - max)` (with the new maximum), sets
    /// `alpha[l] = exp(old max - new max)` and `sum = sum·alpha + Σ_j s[j][l]`. A column that has
    /// seen only -∞ keeps a -∞ maximum and gets zeros (never NaN).
    ///
    /// # Panics
    /// If `n` is not a multiple of 16, `s.len()` is not a multiple of `n`, or `max`, `sum`,
    /// `alpha` hold fewer than `n` values.
    pub fn softmax_lanes(
        &self,
        s: &mut [f32],
        n: usize,
        max: &mut [f32],
        sum: &mut [f32],
        alpha: &mut [f32],
    ) {
        assert!(n.is_multiple_of(16) && n > 0 && s.len().is_multiple_of(n), "softmax_lanes: bad width");
        assert!(max.len() >= n && sum.len() >= n && alpha.len() >= n, "softmax_lanes: short state");
        let a = SoftmaxArgs {
            s: s.as_mut_ptr(),
            kb: s.len() / n,
            n,
            max: max.as_mut_ptr(),
            sum: sum.as_mut_ptr(),
            alpha: alpha.as_mut_ptr(),
        };
        // SAFETY: supported level; `n` is a multiple of every level's width and every buffer
        // holds what the arguments describe (checked above).
        unsafe { (self.softmax_lanes)(&a) }
    }

    /// The largest element (-∞ for an empty slice).
    pub fn max(&self, x: &[f32]) -> f32 {
        // SAFETY: supported level.
        unsafe { (self.max)(x) }
    }

    /// `x[i] = exp(x[i] - m)`, returning `Σ x[i]`. `m` should be `max(x)`; with `m = -∞`
    /// (every element -∞) every result is 0.
    pub fn exp_sum(&self, x: &mut [f32], m: f32) -> f32 {
        // SAFETY: supported level.
        unsafe { (self.exp_sum)(x, m) }
    }

    /// `x[i] = cap · tanh(x[i] / cap)`.
    pub fn softcap(&self, x: &mut [f32], cap: f32) {
        // SAFETY: supported level.
        unsafe { (self.softcap)(x, cap) }
    }

    /// `gate[i] = silu(gate[i]) · up[i]`, `silu(x) = x / (1 + e^-x)`: the SwiGLU of a
    /// feed-forward block, with this module's `exp`.
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn silu_mul(&self, gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "silu_mul: gate and up lengths differ");
        // SAFETY: supported level; equal lengths.
        unsafe { (self.silu_mul)(gate, up) }
    }

    /// Converts `src` (f16) to `dst` (f32): `dst` gets `src.rows` rows of `src.cols` elements,
    /// row `i` at `i * dst_stride`.
    ///
    /// # Panics
    /// If `src` is not f16, or either matrix reaches past its slice.
    pub fn f16_rows_to_f32(&self, src: Rows<'_>, dst: &mut [f32], dst_stride: usize) {
        let Elems::F16(s) = src.data else { panic!("f16_rows_to_f32: source must be f16") };
        assert!(s.len() >= extent(src.rows, src.cols, src.stride, 1), "f16_rows_to_f32: src too short");
        assert!(dst.len() >= extent(src.rows, src.cols, dst_stride, 1), "f16_rows_to_f32: dst too short");
        // SAFETY: supported level; extents checked above.
        unsafe { (self.f16_rows)(s.as_ptr(), src.stride, src.rows, src.cols, dst.as_mut_ptr(), dst_stride) }
    }

    /// Rounds every element to the nearest f16 (ties to even), keeping it as f32.
    pub fn round_f16(&self, x: &mut [f32]) {
        // SAFETY: supported level.
        unsafe { (self.round_f16)(x) }
    }
}

mod generic;

#[cfg(test)]
mod tests;
