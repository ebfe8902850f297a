//! [`FloatDot`]: the matmul kernels for float weights (F32, F16, BF16) against f32 activations,
//! chosen once per matrix for an instruction-set level ([`Isa`]).
//!
//! The contract every level implements, for weight rows `w_r` of `cols` elements and activation
//! rows `x_t` (f32, `cols` each):
//! - `gemm(w, nr, x, nt, out, ldo)`: `out[t * ldo + r] = w_r · x_t` for `nr` weight rows and `nt`
//!   activation rows;
//! - each product is computed in an order that depends only on `cols`, never on `nr`, `nt` or
//!   where the row or token sits in the call: a token's result is bit-identical whatever batch it
//!   comes in (the engine relies on this: see `backend/cpu/matmul.rs`).
//!
//! Elements are widened to f32 exactly (F16 and BF16 are subsets of f32), so the levels differ
//! only in the rounding of the f32 accumulation. The portable ([`Isa::Scalar`]) kernel is the
//! reference: 32 independent lanes of separate multiply and add ([`super::dot_f32`]'s order). The
//! x86 levels keep one fused multiply-add accumulator of 8 (AVX2) or 16 (AVX-512) lanes per
//! (row, token) pair and reduce it with a fixed tree; their GEMM widens a block of weight rows
//! once for a block of tokens, so a prompt reads each weight element once per token block instead
//! of once per token.

use super::{QuantError, check_len};
use crate::{GgmlType, Isa};

/// `fn(w, w_row_bytes, x, cols, out, ldo)`: `out[t * ldo + r] = w_r · x_t` for every weight row
/// `r` of `w` and activation row `t` of `x`.
pub(crate) type FloatGemmFn = fn(&[u8], usize, &[f32], usize, &mut [f32], usize);

/// A matmul kernel for float weights chosen once for a weight type and an instruction-set level.
///
/// [`FloatDot::gemm`] does not check row lengths beyond whole rows: a weight row whose length does
/// not match the activations' gives a meaningless number (never undefined behaviour). Check
/// them once with [`FloatDot::check`].
#[derive(Clone, Copy)]
pub struct FloatDot {
    ty: GgmlType,
    isa: Isa,
    gemm: FloatGemmFn,
}

impl std::fmt::Debug for FloatDot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FloatDot({}, {})", self.ty, self.isa)
    }
}

/// The portable reference: every product is [`super::dot_f32`]'s portable dot product.
fn portable_gemm<const E: u8>(w: &[u8], w_rb: usize, x: &[f32], cols: usize, out: &mut [f32], ldo: usize) {
    if w_rb == 0 || cols == 0 {
        return;
    }
    for (t, xt) in x.chunks_exact(cols).enumerate() {
        for (r, wr) in w.chunks_exact(w_rb).enumerate() {
            out[t * ldo + r] = match E {
                ELEM_F16 => super::fp16::dot_row(wr, xt),
                ELEM_BF16 => super::bf16::dot_row(wr, xt),
                _ => super::fp32::dot_row(wr, xt),
            };
        }
    }
}

/// Element kinds, as const generic parameters of the kernels.
pub(crate) const ELEM_F32: u8 = 0;
/// IEEE half precision.
pub(crate) const ELEM_F16: u8 = 1;
/// bfloat16.
pub(crate) const ELEM_BF16: u8 = 2;

/// The kernel of level `isa` for `ty` (falling back to the best lower level that has one), or
/// `None` for a type that is not a float type.
fn kernel_for(ty: GgmlType, isa: Isa) -> Option<(Isa, FloatGemmFn)> {
    let portable: FloatGemmFn = match ty {
        GgmlType::F32 => portable_gemm::<ELEM_F32>,
        GgmlType::F16 => portable_gemm::<ELEM_F16>,
        GgmlType::BF16 => portable_gemm::<ELEM_BF16>,
        _ => return None,
    };
    #[cfg(target_arch = "x86_64")]
    match isa {
        Isa::Avx2 | Isa::AvxVnni => return Some((Isa::Avx2, super::x86::float::avx2(ty)?)),
        Isa::Avx512 => return Some((Isa::Avx512, super::x86::float::avx512(ty)?)),
        _ => {}
    }
    let _ = isa;
    Some((Isa::Scalar, portable))
}

impl FloatDot {
    /// The best kernel for float weights of type `ty` on this CPU ([`Isa::best`]); an error for
    /// types other than F32, F16 and BF16.
    pub fn new(ty: GgmlType) -> Result<Self, QuantError> {
        Self::with_isa(ty, Isa::best())
    }

    /// The kernel of level `isa` for `ty` (or of the best lower level that has one:
    /// [`FloatDot::isa`] tells which). An error if this CPU does not support `isa` or `ty` is not
    /// a float type.
    pub fn with_isa(ty: GgmlType, isa: Isa) -> Result<Self, QuantError> {
        if !isa.is_supported() {
            return Err(QuantError::UnsupportedIsa(isa));
        }
        let (isa, gemm) = kernel_for(ty, isa).ok_or(QuantError::UnsupportedType(ty))?;
        Ok(Self { ty, isa, gemm })
    }

    /// The weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The instruction-set level of the chosen kernel.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Checks that a weight row holds as many elements as the activation row `x`.
    pub fn check(&self, w_row: &[u8], x: &[f32]) -> Result<(), QuantError> {
        check_len(self.ty, x.len(), w_row.len())
    }

    /// `w_row · x` (lengths unchecked, see the type's docs).
    pub fn dot(&self, w_row: &[u8], x: &[f32]) -> f32 {
        let mut out = [0f32];
        self.gemm(w_row, 1, x, 1, &mut out, 1);
        out[0]
    }

    /// `out[t * ldo + r] = w_r · x_t` for the `nr` weight rows held back to back in `w` and the
    /// `nt` activation rows held back to back in `x` (lengths unchecked, see the type's docs).
    ///
    /// # Panics
    /// If `w` or `x` is not a whole number of rows, or `out` is shorter than
    /// `(nt - 1) * ldo + nr`.
    #[inline]
    pub fn gemm(&self, w: &[u8], nr: usize, x: &[f32], nt: usize, out: &mut [f32], ldo: usize) {
        if nr == 0 || nt == 0 {
            return;
        }
        assert!(w.len().is_multiple_of(nr) && x.len().is_multiple_of(nt), "gemm: partial rows");
        assert!(out.len() >= (nt - 1) * ldo + nr && ldo >= nr, "gemm: output too short");
        (self.gemm)(w, w.len() / nr, x, x.len() / nt, out, ldo);
    }
}

#[cfg(test)]
mod tests;
