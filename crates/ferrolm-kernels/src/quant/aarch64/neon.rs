//! aarch64 NEON kernels for the integer dot products of [`crate::quant::vec_dot`]: Q4_0, Q5_0 and Q8_0
//! weights with Q8_0 activations, Q4_1 with Q8_1, and Q2_K, Q3_K, Q4_K and Q6_K with Q8_K, at two
//! levels:
//!
//! - [`Isa::Neon`]: plain Advanced SIMD; 8-bit products are widened with `smull`/`smull2` and
//!   accumulated pairwise into 32 bits with `sadalp` (exact: one product is at most 2^14);
//! - [`Isa::NeonDotprod`]: the `sdot` instruction (four 4-way 8-bit dot products into 32 bits).
//!   Rust's `vdotq_s32` intrinsic is still unstable (`stdarch_neon_dotprod`), so `sdot` is
//!   emitted with `asm!` from a function compiled with the (stable) `dotprod` target feature.
//!
//! Integer sums are exact, as in the portable kernels; block scales are applied in f32 with
//! fused multiply-adds on four lanes, so results differ from the portable ones only by float
//! rounding. Each format is written once ([`Kernel`]: unpack a weight block into registers,
//! accumulate it against one activation block), generic over the 8-bit dot product ([`I8Dot`])
//! and over how many activation rows share one pass over a weight row: `gemm` unpacks every
//! weight block once for a tile of [`TILE`] activation rows.
//!
//! All kernel code is `#[inline(always)]` down to the entry points, so the `sdot` instances are
//! compiled inside the `dotprod` entry points. This module is only built when NEON is enabled
//! at compile time (the aarch64 baseline); the NEON intrinsic calls rely on that.

use std::arch::aarch64::*;
use std::arch::asm;

use crate::quant::q8_act::{Q8_0_BYTES, Q8_1_BYTES};
use crate::{GgmlType, Isa};

/// `fn(w_row, xq) -> w_row · xq` (as `kernel::DotFn`).
type DotFn = fn(&[u8], &[u8]) -> f32;
/// `fn(w, w_row_bytes, xq, x_row_bytes, out, ldo)` (as `kernel::GemmFn`).
type GemmFn = fn(&[u8], usize, &[u8], usize, &mut [f32], usize);

/// Activation rows that share one pass over a weight row in `gemm`.
const TILE: usize = 4;

/// The NEON kernels of level `isa` for weights of type `ty`; `None` for other levels and for
/// types without a NEON kernel (those use the portable ones).
///
/// Callers must only call the returned functions after `isa.is_supported()` returned true.
pub(in crate::quant) fn kernels(ty: GgmlType, isa: Isa) -> Option<(Isa, DotFn, GemmFn)> {
    use GgmlType as T;
    let (dot, gemm): (DotFn, GemmFn) = match (isa, ty) {
        (Isa::Neon, T::Q4_0) => (dot::<Mull, Q4_0>, gemm::<Mull, Q4_0>),
        (Isa::Neon, T::Q4_1) => (dot::<Mull, Q4_1>, gemm::<Mull, Q4_1>),
        (Isa::Neon, T::Q5_0) => (dot::<Mull, Q5_0>, gemm::<Mull, Q5_0>),
        (Isa::Neon, T::Q8_0) => (dot::<Mull, Q8_0>, gemm::<Mull, Q8_0>),
        (Isa::Neon, T::Q2_K) => (dot::<Mull, Q2K>, gemm::<Mull, Q2K>),
        (Isa::Neon, T::Q3_K) => (dot::<Mull, Q3K>, gemm::<Mull, Q3K>),
        (Isa::Neon, T::Q4_K) => (dot::<Mull, Q4K>, gemm::<Mull, Q4K>),
        (Isa::Neon, T::Q6_K) => (dot::<Mull, Q6K>, gemm::<Mull, Q6K>),
        (Isa::NeonDotprod, T::Q4_0) => (sdot_q4_0, sdot_q4_0_gemm),
        (Isa::NeonDotprod, T::Q4_1) => (sdot_q4_1, sdot_q4_1_gemm),
        (Isa::NeonDotprod, T::Q5_0) => (sdot_q5_0, sdot_q5_0_gemm),
        (Isa::NeonDotprod, T::Q8_0) => (sdot_q8_0, sdot_q8_0_gemm),
        (Isa::NeonDotprod, T::Q2_K) => (sdot_q2_k, sdot_q2_k_gemm),
        (Isa::NeonDotprod, T::Q3_K) => (sdot_q3_k, sdot_q3_k_gemm),
        (Isa::NeonDotprod, T::Q4_K) => (sdot_q4_k, sdot_q4_k_gemm),
        (Isa::NeonDotprod, T::Q6_K) => (sdot_q6_k, sdot_q6_k_gemm),
        _ => return None,
    };
    Some((isa, dot, gemm))
}

/// Entry points of the `sdot` kernels: each compiles the generic kernel inside a function with
/// the `dotprod` target feature.
macro_rules! sdot_entry_points {
    ($($k:ident => $dot:ident, $gemm:ident;)*) => {
        $(
            fn $dot(w: &[u8], xq: &[u8]) -> f32 {
                #[target_feature(enable = "dotprod")]
                fn inner(w: &[u8], xq: &[u8]) -> f32 {
                    dot::<Sdot, $k>(w, xq)
                }
                // SAFETY: `kernels` hands this function out only for `Isa::NeonDotprod`, and
                // `VecDot` selects that level only after `Isa::is_supported` detected dotprod.
                unsafe { inner(w, xq) }
            }
            fn $gemm(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
                #[target_feature(enable = "dotprod")]
                fn inner(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
                    gemm::<Sdot, $k>(w, w_rb, xq, x_rb, out, ldo)
                }
                // SAFETY: as for the dot entry point: dotprod was detected before selection.
                unsafe { inner(w, w_rb, xq, x_rb, out, ldo) }
            }
        )*
    };
}

sdot_entry_points! {
    Q4_0 => sdot_q4_0, sdot_q4_0_gemm;
    Q4_1 => sdot_q4_1, sdot_q4_1_gemm;
    Q5_0 => sdot_q5_0, sdot_q5_0_gemm;
    Q8_0 => sdot_q8_0, sdot_q8_0_gemm;
    Q2K => sdot_q2_k, sdot_q2_k_gemm;
    Q3K => sdot_q3_k, sdot_q3_k_gemm;
    Q4K => sdot_q4_k, sdot_q4_k_gemm;
    Q6K => sdot_q6_k, sdot_q6_k_gemm;
}

/// A 16-lane signed 8-bit dot product accumulated into four i32 lanes: the lanes of the result
/// sum to the lanes of `acc` plus `Σ a[i] · b[i]`, exactly (how the sum is spread over the four
/// lanes depends on the implementation; callers only use lane-wise linear operations and the
/// total).
trait I8Dot {
    /// `acc + a · b` spread over four lanes.
    fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Plain NEON: `smull`/`smull2` into 16-bit products, `sadalp` into 32-bit pair sums.
struct Mull;

impl I8Dot for Mull {
    #[inline(always)]
    fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: register-only NEON intrinsics; this module is compiled only with NEON enabled.
        // Each 16-bit product is at most 128 · 128 = 2^14 in magnitude, so none overflows.
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

/// The `dotprod` extension's `sdot`. Only instantiated inside the `#[target_feature(enable =
/// "dotprod")]` entry points of [`sdot_entry_points!`], which are only reached on CPUs with
/// dotprod.
struct Sdot;

impl I8Dot for Sdot {
    #[inline(always)]
    fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: `Sdot` is only used by the dotprod entry points, which run only after dotprod
        // was detected on this CPU (see `sdot_entry_points!`).
        unsafe { sdot(acc, a, b) }
    }
}

/// `sdot acc.4s, a.16b, b.16b`: lane `l` of `acc` += `Σ_{k<4} a[4l+k] · b[4l+k]`.
#[target_feature(enable = "dotprod")]
#[inline]
fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: `sdot` reads and writes only the three vector registers named; this function is
    // compiled with (and only callable where there is) the dotprod feature.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Little-endian f16 at `b[0..2]`, as f32, with one `fcvt` (half to single precision
/// conversion is part of the aarch64 base floating point, unlike half-precision arithmetic).
#[inline(always)]
fn f16_at(b: &[u8]) -> f32 {
    let h = u16::from_le_bytes([b[0], b[1]]);
    let f: f32;
    // SAFETY: `fcvt` only converts between two FP/SIMD registers; `h` sits in the low 16 bits
    // of its register, which is what the `h` view reads.
    unsafe {
        asm!(
            "fcvt {f:s}, {h:h}",
            f = lateout(vreg) f,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    f
}

/// Little-endian f32 at `b[0..4]`.
#[inline(always)]
fn f32_at(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// The first 16 bytes of `b` as unsigned lanes.
///
/// # Panics
/// If `b` is shorter than 16 bytes.
#[inline(always)]
fn ld_u8(b: &[u8]) -> uint8x16_t {
    let b = &b[..16];
    // SAFETY: `b` has exactly 16 readable bytes (sliced above); `ld1` has no alignment
    // requirement for byte lanes. NEON is enabled for this module.
    unsafe { vld1q_u8(b.as_ptr()) }
}

/// The first 16 bytes of `b` as signed lanes.
#[inline(always)]
fn ld_s8(b: &[u8]) -> int8x16_t {
    // SAFETY: register-only NEON reinterpretation; NEON is enabled for this module.
    unsafe { vreinterpretq_s8_u8(ld_u8(b)) }
}

/// The first 16 bytes of `b` as eight little-endian i16 lanes.
#[inline(always)]
fn ld_s16(b: &[u8]) -> int16x8_t {
    // SAFETY: register-only NEON reinterpretation (aarch64 Linux is little-endian, so lane `i`
    // is the i16 at bytes `2i..2i+2`); NEON is enabled for this module.
    unsafe { vreinterpretq_s16_u8(ld_u8(b)) }
}

/// The 32 nibbles of 16 bytes as signed lanes minus `off`: low nibbles (elements 0..16), high
/// nibbles (elements 16..32).
#[inline(always)]
fn nibbles(q: uint8x16_t, off: i8) -> (int8x16_t, int8x16_t) {
    // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
    unsafe {
        let lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
        let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q));
        (vsubq_s8(lo, vdupq_n_s8(off)), vsubq_s8(hi, vdupq_n_s8(off)))
    }
}

/// Per-activation-row accumulator: four f32 lanes plus one scalar (for the Q4_1 minimum term).
#[derive(Clone, Copy)]
struct Acc {
    v: float32x4_t,
    s: f32,
}

impl Acc {
    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: register-only NEON intrinsic; NEON is enabled for this module.
        Acc { v: unsafe { vdupq_n_f32(0.0) }, s: 0.0 }
    }

    /// `self.v += d · p` (lane-wise, fused).
    #[inline(always)]
    fn add(&mut self, d: f32, p: int32x4_t) {
        // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
        self.v = unsafe { vfmaq_n_f32(self.v, vcvtq_f32_s32(p), d) };
    }

    #[inline(always)]
    fn sum(self) -> f32 {
        // SAFETY: register-only NEON intrinsic; NEON is enabled for this module.
        unsafe { vaddvq_f32(self.v) + self.s }
    }
}

/// One weight format: how a weight block is unpacked into registers and accumulated against
/// one block of its activation format.
trait Kernel {
    /// Bytes per weight block.
    const WB: usize;
    /// Bytes per activation block.
    const XB: usize;
    /// An unpacked weight block.
    type W: Copy;
    /// Unpacks the weight block `bw` (`WB` bytes).
    fn unpack(bw: &[u8]) -> Self::W;
    /// Adds `w · bx` (an `XB`-byte activation block) to `acc`.
    fn acc<D: I8Dot>(w: &Self::W, bx: &[u8], acc: &mut Acc);
}

/// `Σ_blocks` of one weight row against `N` activation rows, each weight block unpacked once.
/// Lengths are not validated: only the blocks that every row has are used.
#[inline(always)]
fn rows<D: I8Dot, K: Kernel, const N: usize>(w_row: &[u8], xs: [&[u8]; N]) -> [f32; N] {
    let nb = xs.iter().fold(w_row.len() / K::WB, |n, x| n.min(x.len() / K::XB));
    let mut acc = [Acc::zero(); N];
    for b in 0..nb {
        let w = K::unpack(&w_row[b * K::WB..(b + 1) * K::WB]);
        for (a, x) in acc.iter_mut().zip(&xs) {
            K::acc::<D>(&w, &x[b * K::XB..(b + 1) * K::XB], a);
        }
    }
    acc.map(Acc::sum)
}

/// The dot-product entry point of a format.
#[inline(always)]
fn dot<D: I8Dot, K: Kernel>(w: &[u8], xq: &[u8]) -> f32 {
    let [r] = rows::<D, K, 1>(w, [xq]);
    r
}

/// The GEMM entry point of a format: `out[t * ldo + r] = w_r · x_t`, activation rows taken
/// [`TILE`] at a time.
#[inline(always)]
fn gemm<D: I8Dot, K: Kernel>(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
    if w_rb == 0 || x_rb == 0 {
        return;
    }
    for (i, x) in xq.chunks(TILE * x_rb).enumerate() {
        let out = &mut out[i * TILE * ldo..];
        match x.len() / x_rb {
            4 => tile::<D, K, 4>(w, w_rb, x, x_rb, out, ldo),
            3 => tile::<D, K, 3>(w, w_rb, x, x_rb, out, ldo),
            2 => tile::<D, K, 2>(w, w_rb, x, x_rb, out, ldo),
            1 => tile::<D, K, 1>(w, w_rb, x, x_rb, out, ldo),
            _ => {}
        }
    }
}

/// Every weight row of `w` against the `N` activation rows of `x`.
#[inline(always)]
fn tile<D: I8Dot, K: Kernel, const N: usize>(
    w: &[u8],
    w_rb: usize,
    x: &[u8],
    x_rb: usize,
    out: &mut [f32],
    ldo: usize,
) {
    let xs: [&[u8]; N] = std::array::from_fn(|j| &x[j * x_rb..(j + 1) * x_rb]);
    for (r, w_row) in w.chunks_exact(w_rb).enumerate() {
        for (j, v) in rows::<D, K, N>(w_row, xs).into_iter().enumerate() {
            out[j * ldo + r] = v;
        }
    }
}

/// Adds `d · Σ w·x` over one 32-value block (`w` the two halves, `x` 32 bytes of i8) to `acc`.
#[inline(always)]
fn acc32<D: I8Dot>(acc: &mut Acc, d: f32, w: (int8x16_t, int8x16_t), x: &[u8]) {
    // SAFETY: register-only NEON intrinsic; NEON is enabled for this module.
    let zero = unsafe { vdupq_n_s32(0) };
    acc.add(d, D::dot(D::dot(zero, w.0, ld_s8(x)), w.1, ld_s8(&x[16..])));
}

/// Q4_0 (18 bytes: f16 `d`, 16 nibble bytes) · Q8_0: `Σ d_w d_x Σ (q_w - 8) q_x`.
struct Q4_0;

impl Kernel for Q4_0 {
    const WB: usize = 18;
    const XB: usize = Q8_0_BYTES;
    type W = (f32, (int8x16_t, int8x16_t));

    #[inline(always)]
    fn unpack(bw: &[u8]) -> Self::W {
        (f16_at(bw), nibbles(ld_u8(&bw[2..]), 8))
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &Self::W, bx: &[u8], acc: &mut Acc) {
        acc32::<D>(acc, w.0 * f16_at(bx), w.1, &bx[2..]);
    }
}

/// Q5_0 (22 bytes: f16 `d`, u32 `qh` fifth bits, 16 nibble bytes) · Q8_0:
/// `Σ d_w d_x Σ (q_w - 16) q_x`.
struct Q5_0;

impl Kernel for Q5_0 {
    const WB: usize = 22;
    const XB: usize = Q8_0_BYTES;
    type W = (f32, (int8x16_t, int8x16_t));

    #[inline(always)]
    fn unpack(bw: &[u8]) -> Self::W {
        let (lo, hi) = nibbles(ld_u8(&bw[6..]), 0);
        // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
        let w = unsafe {
            // Byte `j` of each half tests bit `j % 8` of its `qh` byte: 16 where set.
            let bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
            let sixteen = vdupq_n_u8(16);
            let high = |b0: u8, b1: u8| {
                let t = vtstq_u8(vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1)), bit);
                vreinterpretq_s8_u8(vandq_u8(t, sixteen))
            };
            let off = vdupq_n_s8(16);
            (vsubq_s8(vorrq_s8(lo, high(bw[2], bw[3])), off), vsubq_s8(vorrq_s8(hi, high(bw[4], bw[5])), off))
        };
        (f16_at(bw), w)
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &Self::W, bx: &[u8], acc: &mut Acc) {
        acc32::<D>(acc, w.0 * f16_at(bx), w.1, &bx[2..]);
    }
}

/// Q8_0 (34 bytes: f16 `d`, 32 i8) · Q8_0: `Σ d_w d_x Σ q_w q_x`.
struct Q8_0;

impl Kernel for Q8_0 {
    const WB: usize = Q8_0_BYTES;
    const XB: usize = Q8_0_BYTES;
    type W = (f32, (int8x16_t, int8x16_t));

    #[inline(always)]
    fn unpack(bw: &[u8]) -> Self::W {
        (f16_at(bw), (ld_s8(&bw[2..]), ld_s8(&bw[18..])))
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &Self::W, bx: &[u8], acc: &mut Acc) {
        acc32::<D>(acc, w.0 * f16_at(bx), w.1, &bx[2..]);
    }
}

/// Q4_1 (20 bytes: f16 `d`, f16 `m`, 16 nibble bytes) · Q8_1 (f16 `d`, f16 `s = d Σ q`, 32 i8):
/// `Σ d_w d_x Σ q_w q_x + Σ m_w s_x`.
struct Q4_1;

impl Kernel for Q4_1 {
    const WB: usize = 20;
    const XB: usize = Q8_1_BYTES;
    /// `(d, m, values)`.
    type W = (f32, f32, (int8x16_t, int8x16_t));

    #[inline(always)]
    fn unpack(bw: &[u8]) -> Self::W {
        (f16_at(bw), f16_at(&bw[2..]), nibbles(ld_u8(&bw[4..]), 0))
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &Self::W, bx: &[u8], acc: &mut Acc) {
        acc.s = w.1.mul_add(f16_at(&bx[2..]), acc.s);
        acc32::<D>(acc, w.0 * f16_at(bx), w.2, &bx[4..]);
    }
}

mod kquants;
use kquants::{Q2K, Q3K, Q4K, Q6K};

#[cfg(test)]
mod tests;
