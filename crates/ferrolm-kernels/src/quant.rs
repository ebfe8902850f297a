//! GGML block formats: dequantization, dot products with f32 vectors, and reference quantizers.
//!
//! One module per format (under `quant/formats/`, re-exported here as `quant::q4_0`, ...), each
//! with a `#[repr(C)]` block struct laid out exactly as in GGML (little-endian), a scalar
//! dequantizer and a dot product. The engine uses only the dispatch
//! functions here, which validate lengths and never panic:
//!
//! - [`supports`] / [`dequantize_row`] / [`dot_f32`] for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
//!   Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4;
//! - [`supports_quantize`] / [`quantize_row`] for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//!   Q4_K and MXFP4, following GGML's reference (non-imatrix) quantizers (bit-exact with the `gguf`
//!   Python package for the 32-value formats);
//! - [`vec_dot_type`] / [`act_row_bytes`] / [`quantize_activations`] / [`vec_dot_q`]: GGML-style
//!   integer dot products of quantized weight rows with activations quantized once to 8 bits
//!   (Q8_0, Q8_1 or Q8_K), see [`vec_dot`];
//! - [`FloatDot`]: float weights (F32, F16, BF16) against f32 activations, widened in registers;
//! - [`kv`]: KV-cache rows in Q8_0 / Q4_0 read in place by attention (integer scores against a
//!   Q8_0 query, rows converted to f32 a few at a time).
//!
//! Source bytes come straight from a memory map, so they are only byte-aligned: blocks are parsed
//! field by field from little-endian bytes (`Block*::from_bytes`), never cast in place.
//!
//! Dot products dequantize one block into a stack buffer and accumulate it into
//! 32 independent f32 lanes, a shape LLVM vectorises; on x86_64 with AVX2
//! the whole row loop is additionally compiled for AVX2 and chosen at run time.

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod float_kernel;
mod formats;
mod kernel;
pub mod kv;
pub mod packed;
pub mod vec_dot;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use float_kernel::FloatDot;
pub use formats::{
    bf16, fp16, fp32, iq4_nl, iq4_xs, mxfp4, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0,
    q8_act,
};
pub use iq4_nl::BlockIQ4NL;
pub use iq4_xs::BlockIQ4XS;
pub use kernel::VecDot;
pub use mxfp4::{BlockMXFP4, quantize_row_mxfp4};
pub use packed::{PackedActs, PackedRows};
pub use q2_k::BlockQ2K;
pub use q3_k::BlockQ3K;
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q4_k::{BlockQ4K, quantize_row_q4_k};
pub use q5_0::BlockQ5_0;
pub use q5_1::BlockQ5_1;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;
pub use q8_0::{BlockQ8_0, quantize_row_q8_0};
pub use vec_dot::{act_row_bytes, quantize_activations, vec_dot_q, vec_dot_q_rows, vec_dot_type};

use crate::GgmlType;
use crate::simd::{ACC_LANES, lanes_fma, reduce_lanes};

/// Elements per K-quant super-block (`QK_K` in GGML).
pub const QK_K: usize = 256;

/// How far ahead of the row being multiplied the x86 decode kernels prefetch, in bytes.
///
/// The decode matvec walks each thread's rows as one contiguous run; the hardware prefetcher
/// follows it, but a row is unpacked and multiplied before the next is loaded, so the stream
/// stalls at every row start. Prefetching one row ahead (a few hundred bytes for these models)
/// is too close to hide the memory latency; measured on SmolLM2 Q4_1 and Gemma 3 270M Q4_K_M
/// (tg128, 2 threads, Zen 5), 4 KiB ahead was 10–20% faster than one row ahead and no worse
/// than 8 KiB (see docs/kernels.md).
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_AHEAD: usize = 4096;

/// How far ahead the same kernels also request the stream into L2 only, in bytes: enough that
/// the L1 prefetches [`PREFETCH_AHEAD`] bytes ahead find their lines in L2 rather than each
/// holding one of the core's few L1 miss buffers for a trip to memory (as the packed kernel
/// does, see docs/kernels.md).
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_AHEAD_L2: usize = 4 * PREFETCH_AHEAD;

/// Prefetches as many bytes as `row` holds, [`PREFETCH_AHEAD`] bytes past its start (and into
/// L2, [`PREFETCH_AHEAD_L2`] bytes past it): the rows the x86 decode matvecs will reach a few
/// rows later, as they walk a matrix stored row after row.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_next(row: &[u8]) {
    use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T2, _mm_prefetch};
    let next = row.as_ptr().wrapping_add(PREFETCH_AHEAD);
    let far = row.as_ptr().wrapping_add(PREFETCH_AHEAD_L2);
    for off in (0..row.len()).step_by(64) {
        // SAFETY: a prefetch is only a hint: it never faults, whatever the address, and the
        // pointer is not dereferenced (`wrapping_add` keeps its computation defined).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(off).cast());
            _mm_prefetch::<_MM_HINT_T2>(far.wrapping_add(off).cast());
        }
    }
}

/// Errors from the quant kernels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The kernels have no implementation for this type (or no quantizer, for [`quantize_row`]).
    #[error("ggml type {0} is not supported by the quant kernels")]
    UnsupportedType(GgmlType),
    /// The element count is not a whole number of blocks.
    #[error("{elements} elements is not a whole number of {ty} blocks of {block}")]
    PartialBlock {
        /// The block type.
        ty: GgmlType,
        /// Requested element count.
        elements: usize,
        /// Elements per block of `ty`.
        block: usize,
    },
    /// This CPU does not support the requested instruction-set level.
    #[error("this CPU does not support the {0} kernels")]
    UnsupportedIsa(crate::Isa),
    /// The byte buffer does not have the size `elements` of `ty` occupy.
    #[error("{elements} elements of {ty} need {expected} bytes, got {bytes}")]
    BadLength {
        /// The block type.
        ty: GgmlType,
        /// Requested element count.
        elements: usize,
        /// Bytes supplied.
        bytes: usize,
        /// Bytes `elements` of `ty` occupy (`usize::MAX` if that overflows).
        expected: usize,
    },
}

/// Whether `ty` has a dequantizer and dot product here.
pub fn supports(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_NL
            | IQ4_XS
            | MXFP4
    )
}

/// Whether `ty` has a reference quantizer ([`quantize_row`]) here.
pub fn supports_quantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | MXFP4)
}

/// Dequantizes one row: `dst.len()` elements of type `ty` stored in `src`.
///
/// `src.len()` must equal `ty.row_bytes(dst.len())`; `dst.len()` must be a multiple of the block
/// size.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check(ty, supports(ty), dst.len(), src.len())?;
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx2_fma() {
        // SAFETY: AVX2 and FMA were detected on this CPU; `check` validated the lengths.
        return unsafe { dequantize_avx2(ty, src, dst) };
    }
    dequantize_any(ty, src, dst)
}

/// Row dequantization for any supported type; lengths already validated.
#[inline(always)]
fn dequantize_any(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    use GgmlType::*;
    match ty {
        F32 => fp32::dequantize_row(src, dst),
        F16 => fp16::dequantize_row(src, dst),
        BF16 => bf16::dequantize_row(src, dst),
        Q4_0 => dequantize_blocks::<BlockQ4_0>(src, dst),
        Q4_1 => dequantize_blocks::<BlockQ4_1>(src, dst),
        Q5_0 => dequantize_blocks::<BlockQ5_0>(src, dst),
        Q5_1 => dequantize_blocks::<BlockQ5_1>(src, dst),
        Q8_0 => dequantize_blocks::<BlockQ8_0>(src, dst),
        Q2_K => dequantize_blocks::<BlockQ2K>(src, dst),
        Q3_K => dequantize_blocks::<BlockQ3K>(src, dst),
        Q4_K => dequantize_blocks::<BlockQ4K>(src, dst),
        Q5_K => dequantize_blocks::<BlockQ5K>(src, dst),
        Q6_K => dequantize_blocks::<BlockQ6K>(src, dst),
        IQ4_NL => dequantize_blocks::<BlockIQ4NL>(src, dst),
        IQ4_XS => dequantize_blocks::<BlockIQ4XS>(src, dst),
        MXFP4 => dequantize_blocks::<BlockMXFP4>(src, dst),
        _ => return Err(QuantError::UnsupportedType(ty)),
    }
    Ok(())
}

/// Dot product of one quantized row (`x.len()` elements of type `ty` in `src`) with `x`.
///
/// Equal to dequantizing the row and taking the f32 dot product, up to float rounding (the
/// summation order differs). `src.len()` must equal `ty.row_bytes(x.len())`.
pub fn dot_f32(ty: GgmlType, src: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    check(ty, supports(ty), x.len(), src.len())?;
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx2_fma() {
        // SAFETY: AVX2 and FMA were detected on this CPU; `check` validated the lengths.
        return unsafe { dot_avx2(ty, src, x) };
    }
    dot_any(ty, src, x)
}

/// Quantizes one row of f32 values into `dst` with GGML's reference quantizer for `ty`.
///
/// `dst.len()` must equal `ty.row_bytes(src.len())`. Only types with
/// [`supports_quantize`] are accepted.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    check(ty, supports_quantize(ty), src.len(), dst.len())?;
    use GgmlType::*;
    match ty {
        F32 => fp32::quantize_row(src, dst),
        F16 => fp16::quantize_row(src, dst),
        BF16 => bf16::quantize_row(src, dst),
        Q4_0 => quantize_blocks_into::<BlockQ4_0>(src, dst),
        Q4_1 => quantize_blocks_into::<BlockQ4_1>(src, dst),
        Q5_0 => quantize_blocks_into::<BlockQ5_0>(src, dst),
        Q5_1 => quantize_blocks_into::<BlockQ5_1>(src, dst),
        Q8_0 => quantize_blocks_into::<BlockQ8_0>(src, dst),
        Q4_K => quantize_blocks_into::<BlockQ4K>(src, dst),
        MXFP4 => quantize_blocks_into::<BlockMXFP4>(src, dst),
        _ => return Err(QuantError::UnsupportedType(ty)),
    }
    Ok(())
}

/// Validates that `bytes` bytes hold exactly `elements` elements of `ty`.
fn check(ty: GgmlType, supported: bool, elements: usize, bytes: usize) -> Result<(), QuantError> {
    if !supported {
        return Err(QuantError::UnsupportedType(ty));
    }
    check_len(ty, elements, bytes)
}

/// Validates `elements` values against `bytes` bytes of type `ty`: whole blocks, exact size.
pub(crate) fn check_len(ty: GgmlType, elements: usize, bytes: usize) -> Result<(), QuantError> {
    let block = ty.block_size();
    if !elements.is_multiple_of(block) {
        return Err(QuantError::PartialBlock { ty, elements, block });
    }
    let expected = (elements / block).saturating_mul(ty.type_size());
    if expected != bytes {
        return Err(QuantError::BadLength { ty, elements, bytes, expected });
    }
    Ok(())
}

/// [`dequantize_any`] compiled with AVX2+FMA enabled.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dequantize_avx2(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    dequantize_any(ty, src, dst)
}

/// Row dot product for any supported type; lengths already validated.
#[inline(always)]
fn dot_any(ty: GgmlType, src: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    use GgmlType::*;
    Ok(match ty {
        F32 => fp32::dot_row(src, x),
        F16 => fp16::dot_row(src, x),
        BF16 => bf16::dot_row(src, x),
        Q4_0 => dot_blocks::<BlockQ4_0>(src, x),
        Q4_1 => dot_blocks::<BlockQ4_1>(src, x),
        Q5_0 => dot_blocks::<BlockQ5_0>(src, x),
        Q5_1 => dot_blocks::<BlockQ5_1>(src, x),
        Q8_0 => dot_blocks::<BlockQ8_0>(src, x),
        Q2_K => dot_blocks::<BlockQ2K>(src, x),
        Q3_K => dot_blocks::<BlockQ3K>(src, x),
        Q4_K => dot_blocks::<BlockQ4K>(src, x),
        Q5_K => dot_blocks::<BlockQ5K>(src, x),
        Q6_K => dot_blocks::<BlockQ6K>(src, x),
        IQ4_NL => dot_blocks::<BlockIQ4NL>(src, x),
        IQ4_XS => dot_blocks::<BlockIQ4XS>(src, x),
        MXFP4 => dot_blocks::<BlockMXFP4>(src, x),
        _ => return Err(QuantError::UnsupportedType(ty)),
    })
}

/// [`dot_any`] compiled with AVX2+FMA enabled, so the lane loops use 256-bit registers.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(ty: GgmlType, src: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    dot_any(ty, src, x)
}

/// A fixed-size GGML block: `ELEMS` values stored in `BYTES` little-endian bytes.
pub(crate) trait QuantBlock: Sized {
    /// Elements per block.
    const ELEMS: usize;
    /// Bytes per block.
    const BYTES: usize;
    /// Parses a block; `bytes.len()` must be `BYTES`.
    fn read(bytes: &[u8]) -> Self;
    /// Writes the block's bytes; `out.len()` must be `BYTES`.
    fn write(&self, out: &mut [u8]);
    /// Dequantizes the block; `out.len()` must be `ELEMS`.
    fn dequantize_into(&self, out: &mut [f32]);
}

/// A block type with a reference quantizer.
pub(crate) trait QuantizeBlock: QuantBlock {
    /// Quantizes `ELEMS` values (`x.len()` must be `ELEMS`).
    fn quantize_from(x: &[f32]) -> Self;
}

/// Implements [`QuantBlock`] (and, with `quantize`, [`QuantizeBlock`]) by delegating to the
/// block's fixed-size inherent methods `from_bytes`, `to_bytes`, `dequantize` (and `quantize`).
macro_rules! impl_quant_block {
    ($blk:ty, $elems:expr, $bytes:expr) => {
        impl $crate::quant::QuantBlock for $blk {
            const ELEMS: usize = $elems;
            const BYTES: usize = $bytes;
            #[inline(always)]
            fn read(bytes: &[u8]) -> Self {
                Self::from_bytes($crate::quant::as_array(bytes))
            }
            #[inline(always)]
            fn write(&self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_bytes());
            }
            #[inline(always)]
            fn dequantize_into(&self, out: &mut [f32]) {
                self.dequantize($crate::quant::as_array_mut(out));
            }
        }
    };
    ($blk:ty, $elems:expr, $bytes:expr, quantize) => {
        impl_quant_block!($blk, $elems, $bytes);
        impl $crate::quant::QuantizeBlock for $blk {
            #[inline(always)]
            fn quantize_from(x: &[f32]) -> Self {
                Self::quantize($crate::quant::as_array(x))
            }
        }
    };
}
pub(crate) use impl_quant_block;

/// Views a slice as a fixed-size array reference.
///
/// # Panics
/// If `s.len() != N` (callers slice with `chunks_exact`, so this never fires).
#[inline(always)]
pub(crate) fn as_array<T, const N: usize>(s: &[T]) -> &[T; N] {
    s.try_into().expect("slice length equals the block size")
}

/// Mutable counterpart of [`as_array`].
#[inline(always)]
pub(crate) fn as_array_mut<T, const N: usize>(s: &mut [T]) -> &mut [T; N] {
    s.try_into().expect("slice length equals the block size")
}

/// Dequantizes whole blocks of `B` from `src` into `dst` (lengths already validated).
#[inline(always)]
pub(crate) fn dequantize_blocks<B: QuantBlock>(src: &[u8], dst: &mut [f32]) {
    for (b, out) in src.chunks_exact(B::BYTES).zip(dst.chunks_exact_mut(B::ELEMS)) {
        B::read(b).dequantize_into(out);
    }
}

/// Dot product of whole blocks of `B` in `src` with `x` (lengths already validated).
///
/// Blocks are dequantized into a 256-value stack buffer (one K-quant super-block, or eight
/// 32-value blocks) which is then accumulated into `ACC_LANES` independent lanes. Filling the whole
/// buffer before reading it back keeps the loads away from the just-issued narrow stores (a
/// store-forwarding stall otherwise halves throughput).
#[inline(always)]
pub(crate) fn dot_blocks<B: QuantBlock>(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; ACC_LANES];
    let mut buf = [0f32; QK_K];
    let per = QK_K / B::ELEMS; // blocks per buffer
    let groups = src.chunks_exact(B::BYTES * per);
    let xgroups = x.chunks_exact(QK_K);
    let (rest, xrest) = (groups.remainder(), xgroups.remainder());
    for (g, xg) in groups.zip(xgroups) {
        dequantize_blocks::<B>(g, &mut buf);
        for (cb, cx) in buf.chunks_exact(ACC_LANES).zip(xg.chunks_exact(ACC_LANES)) {
            lanes_fma(&mut acc, cb, cx);
        }
    }
    // Fewer than `per` blocks left (only for 32-value blocks).
    let buf = &mut buf[..xrest.len()];
    dequantize_blocks::<B>(rest, buf);
    for (cb, cx) in buf.chunks_exact(ACC_LANES).zip(xrest.chunks_exact(ACC_LANES)) {
        lanes_fma(&mut acc, cb, cx);
    }
    reduce_lanes(&acc)
}

/// Quantizes whole blocks of `B` from `src` into the bytes `dst` (lengths already validated).
fn quantize_blocks_into<B: QuantizeBlock>(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(B::ELEMS).zip(dst.chunks_exact_mut(B::BYTES)) {
        B::quantize_from(x).write(out);
    }
}

/// Quantizes a row into a vector of blocks; `x.len()` must be a multiple of `B::ELEMS`.
pub(crate) fn quantize_row_blocks<B: QuantizeBlock>(ty: GgmlType, x: &[f32]) -> Result<Vec<B>, QuantError> {
    if !x.len().is_multiple_of(B::ELEMS) {
        return Err(QuantError::PartialBlock { ty, elements: x.len(), block: B::ELEMS });
    }
    Ok(x.chunks_exact(B::ELEMS).map(B::quantize_from).collect())
}

/// A scalar element format (F32, F16, BF16): one value in `BYTES` little-endian bytes.
pub(crate) trait FloatElem {
    /// Bytes per element.
    const BYTES: usize;
    /// Decodes one element; `b.len()` must be `BYTES`.
    fn read(b: &[u8]) -> f32;
}

/// Decodes `dst.len()` elements of `E` from `src` (lengths already validated).
#[inline(always)]
pub(crate) fn dequantize_elems<E: FloatElem>(src: &[u8], dst: &mut [f32]) {
    for (b, out) in src.chunks_exact(E::BYTES).zip(dst.iter_mut()) {
        *out = E::read(b);
    }
}

/// Dot product of `x.len()` elements of `E` in `src` with `x`: chunks of `ACC_LANES` are decoded
/// into a stack buffer and accumulated lane-wise, the tail is summed separately.
#[inline(always)]
pub(crate) fn dot_elems<E: FloatElem>(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; ACC_LANES];
    let mut buf = [0f32; ACC_LANES];
    let cs = src.chunks_exact(E::BYTES * ACC_LANES);
    let cx = x.chunks_exact(ACC_LANES);
    let (ts, tx) = (cs.remainder(), cx.remainder());
    for (s, xs) in cs.zip(cx) {
        dequantize_elems::<E>(s, &mut buf);
        lanes_fma(&mut acc, &buf, xs);
    }
    let mut tail = 0f32;
    for (b, &xv) in ts.chunks_exact(E::BYTES).zip(tx) {
        tail += E::read(b) * xv;
    }
    reduce_lanes(&acc) + tail
}

#[cfg(test)]
mod tests;

/// `(max |v|, the v that has it)`: the first value of largest magnitude, with its sign, as GGML's
/// reference quantizers find it (0, 0 for an all-zero block).
#[inline(always)]
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}
