//! [`VecDot`]: the quantized matmul kernels for one weight type, chosen once per matrix for an
//! instruction-set level ([`Isa`]).
//!
//! The contract every level implements:
//! - `dot(w_row, xq)`: one weight row against one activation row quantized by
//!   [`super::quantize_activations`] (the decode matvec);
//! - `gemm(w, nr, xq, nt, out, ldo)`: `nr` weight rows against `nt` activation rows,
//!   `out[t * ldo + r] = dot(row r, row t)` (the prompt GEMM's inner block).
//!
//! The portable ([`Isa::Scalar`]) kernels are the reference: the SIMD levels compute the same
//! integer sums exactly and may only differ in the rounding of the float accumulation.

use super::QuantError;
use super::vec_dot::{PORTABLE_FMA, check_dot, vec_dot_any, vec_dot_rows_any};
use crate::{GgmlType, Isa};

/// `fn(w_row, xq) -> w_row · xq`.
type DotFn = fn(&[u8], &[u8]) -> f32;

/// `fn(w, w_row_bytes, xq, x_row_bytes, out, ldo)`: `out[t * ldo + r] = w_r · x_t` for every
/// weight row `r` of `w` and activation row `t` of `xq`.
type GemmFn = fn(&[u8], usize, &[u8], usize, &mut [f32], usize);

/// A row dot-product kernel chosen once for a weight type and an instruction-set level, for
/// callers that run many rows of one matrix: [`super::vec_dot_q`] re-validates lengths and
/// re-dispatches on every call, which costs as much as a short row's arithmetic.
///
/// [`VecDot::dot`] and [`VecDot::gemm`] do not check row lengths: a weight row or activation
/// row of the wrong length gives a meaningless number (never undefined behaviour). Check them
/// once with [`VecDot::check`].
#[derive(Clone, Copy)]
pub struct VecDot {
    ty: GgmlType,
    isa: Isa,
    dot: DotFn,
    gemm: GemmFn,
}

impl std::fmt::Debug for VecDot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VecDot({}, {})", self.ty, self.isa)
    }
}

/// Activation rows one portable GEMM call handles per weight row.
const GEMM_TILE: usize = 16;

/// Generic GEMM on top of a several-activation-rows kernel `rows(w_row, xq_tile, x_rb, out)`.
#[inline(always)]
fn gemm_by_rows(
    w: &[u8],
    w_rb: usize,
    xq: &[u8],
    x_rb: usize,
    out: &mut [f32],
    ldo: usize,
    rows: impl Fn(&[u8], &[u8], usize, &mut [f32]),
) {
    if w_rb == 0 || x_rb == 0 {
        return;
    }
    let nt = xq.len() / x_rb;
    let mut tmp = [0f32; GEMM_TILE];
    for t0 in (0..nt).step_by(GEMM_TILE) {
        let tn = GEMM_TILE.min(nt - t0);
        let x_tile = &xq[t0 * x_rb..(t0 + tn) * x_rb];
        for (r, w_row) in w.chunks_exact(w_rb).enumerate() {
            rows(w_row, x_tile, x_rb, &mut tmp[..tn]);
            for (j, v) in tmp[..tn].iter().enumerate() {
                out[(t0 + j) * ldo + r] = *v;
            }
        }
    }
}

macro_rules! kernels {
    ($($ty:ident => $portable:ident, $portable_gemm:ident, $avx2:ident, $avx2_gemm:ident;)*) => {
        $(
            fn $portable(w: &[u8], xq: &[u8]) -> f32 {
                vec_dot_any::<PORTABLE_FMA, false>(GgmlType::$ty, w, xq)
            }
            fn $portable_gemm(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
                gemm_by_rows(w, w_rb, xq, x_rb, out, ldo, |wr, x, rb, o| {
                    vec_dot_rows_any::<PORTABLE_FMA, false>(GgmlType::$ty, wr, x, rb, o)
                });
            }
            #[cfg(target_arch = "x86_64")]
            fn $avx2(w: &[u8], xq: &[u8]) -> f32 {
                // SAFETY: only reachable through `VecDot::with_isa`, which selects this kernel
                // after checking that the CPU supports AVX2, FMA and F16C. Lengths only steer
                // safe slicing.
                unsafe { super::vec_dot::vec_dot_avx2(GgmlType::$ty, w, xq) }
            }
            #[cfg(target_arch = "x86_64")]
            fn $avx2_gemm(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
                gemm_by_rows(w, w_rb, xq, x_rb, out, ldo, |wr, x, rb, o| {
                    // SAFETY: as for the dot kernel above: selected only where AVX2, FMA and
                    // F16C are supported.
                    unsafe { super::vec_dot::vec_dot_rows_avx2(GgmlType::$ty, wr, x, rb, o) }
                });
            }
        )*

        /// The portable or AVX2 kernels for `ty`; `None` for a type without a vec-dot kernel.
        fn base_kernels(ty: GgmlType, avx2: bool) -> Option<(DotFn, GemmFn)> {
            let _ = avx2;
            Some(match ty {
                $(
                    #[cfg(target_arch = "x86_64")]
                    GgmlType::$ty if avx2 => ($avx2 as DotFn, $avx2_gemm as GemmFn),
                    GgmlType::$ty => ($portable as DotFn, $portable_gemm as GemmFn),
                )*
                _ => return None,
            })
        }
    };
}

kernels! {
    Q4_0 => q4_0_portable, q4_0_portable_gemm, q4_0_avx2, q4_0_avx2_gemm;
    Q4_1 => q4_1_portable, q4_1_portable_gemm, q4_1_avx2, q4_1_avx2_gemm;
    Q5_0 => q5_0_portable, q5_0_portable_gemm, q5_0_avx2, q5_0_avx2_gemm;
    Q5_1 => q5_1_portable, q5_1_portable_gemm, q5_1_avx2, q5_1_avx2_gemm;
    Q8_0 => q8_0_portable, q8_0_portable_gemm, q8_0_avx2, q8_0_avx2_gemm;
    Q2_K => q2_k_portable, q2_k_portable_gemm, q2_k_avx2, q2_k_avx2_gemm;
    Q3_K => q3_k_portable, q3_k_portable_gemm, q3_k_avx2, q3_k_avx2_gemm;
    Q4_K => q4_k_portable, q4_k_portable_gemm, q4_k_avx2, q4_k_avx2_gemm;
    Q5_K => q5_k_portable, q5_k_portable_gemm, q5_k_avx2, q5_k_avx2_gemm;
    Q6_K => q6_k_portable, q6_k_portable_gemm, q6_k_avx2, q6_k_avx2_gemm;
    IQ4_NL => iq4_nl_portable, iq4_nl_portable_gemm, iq4_nl_avx2, iq4_nl_avx2_gemm;
    IQ4_XS => iq4_xs_portable, iq4_xs_portable_gemm, iq4_xs_avx2, iq4_xs_avx2_gemm;
    MXFP4 => mxfp4_portable, mxfp4_portable_gemm, mxfp4_avx2, mxfp4_avx2_gemm;
}

/// The kernels of level `isa` for `ty`, falling back level by level (a level without a kernel
/// for this type uses the best lower one). `None` for a type without a vec-dot kernel.
fn kernels_for(ty: GgmlType, isa: Isa) -> Option<(Isa, DotFn, GemmFn)> {
    match isa {
        Isa::Scalar | Isa::Neon | Isa::NeonDotprod => {
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            if let Some(k) = super::aarch64::neon::kernels(ty, isa) {
                return Some(k);
            }
            base_kernels(ty, false).map(|(d, g)| (Isa::Scalar, d, g))
        }
        Isa::Avx2 => base_kernels(ty, true).map(|(d, g)| (Isa::Avx2, d, g)),
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => super::x86::avxvnni::kernels(ty)
            .map(|(d, g)| (Isa::AvxVnni, d, g))
            .or_else(|| kernels_for(ty, Isa::Avx2)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => super::x86::avx512::kernels(ty)
            .map(|(d, g)| (Isa::Avx512, d, g))
            .or_else(|| kernels_for(ty, Isa::Avx2)),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::AvxVnni | Isa::Avx512 => None,
    }
}

impl VecDot {
    /// The best kernel for weights of type `ty` on this CPU ([`Isa::best`]); an error for types
    /// without a vec-dot type.
    pub fn new(ty: GgmlType) -> Result<Self, QuantError> {
        Self::with_isa(ty, Isa::best())
    }

    /// The kernel of level `isa` for `ty` (or of the best lower level that has one for this
    /// type: [`VecDot::isa`] tells which). An error if this CPU does not support `isa` or `ty`
    /// has no vec-dot type.
    pub fn with_isa(ty: GgmlType, isa: Isa) -> Result<Self, QuantError> {
        if !isa.is_supported() {
            return Err(QuantError::UnsupportedIsa(isa));
        }
        let (isa, dot, gemm) = kernels_for(ty, isa).ok_or(QuantError::UnsupportedType(ty))?;
        Ok(Self { ty, isa, dot, gemm })
    }

    /// The weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The instruction-set level of the chosen kernels.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Checks that a weight row and an activation row have matching lengths.
    pub fn check(&self, w_row: &[u8], xq: &[u8]) -> Result<(), QuantError> {
        check_dot(self.ty, w_row, xq)
    }

    /// `w_row · xq`, as [`super::vec_dot_q`] computes it (lengths unchecked, see the type's
    /// docs).
    #[inline]
    pub fn dot(&self, w_row: &[u8], xq: &[u8]) -> f32 {
        (self.dot)(w_row, xq)
    }

    /// `out[t * ldo + r] = w_r · x_t` for the `nr` weight rows held back to back in `w` and the
    /// `nt` activation rows held back to back in `xq` (lengths unchecked, see the type's docs).
    ///
    /// # Panics
    /// If `w` or `xq` is not a whole number of rows, or `out` is shorter than
    /// `(nt - 1) * ldo + nr`.
    #[inline]
    pub fn gemm(&self, w: &[u8], nr: usize, xq: &[u8], nt: usize, out: &mut [f32], ldo: usize) {
        if nr == 0 || nt == 0 {
            return;
        }
        assert!(w.len().is_multiple_of(nr) && xq.len().is_multiple_of(nt), "gemm: partial rows");
        assert!(out.len() >= (nt - 1) * ldo + nr && ldo >= nr, "gemm: output too short");
        (self.gemm)(w, w.len() / nr, xq, xq.len() / nt, out, ldo);
    }
}

#[cfg(test)]
mod tests;
