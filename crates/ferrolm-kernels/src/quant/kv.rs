//! Keys and values of a KV cache stored in GGML block formats (Q8_0, Q4_0: 32 values and one f16
//! scale per block) and read in place by attention, as llama.cpp's CPU flash attention reads a
//! quantized cache:
//!
//! - scores: the query is quantized once to Q8_0 (the "vec-dot type" of both formats) with
//!   [`KvBlocks::quantize_row`], then dotted with each key row in integers ([`KvKernels::dots`],
//!   the Q8_0·Q8_0 and Q4_0·Q8_0 kernels of the quantized matmuls, each key block unpacked once
//!   for all the query heads that share it);
//! - values, and the keys of a tiled prompt: a few rows at a time are converted to f32
//!   ([`KvKernels::rows_to_f32`], llama.cpp's `v_to_float`) and accumulated in f32.
//!
//! Rows are written as llama.cpp's CPU backend writes them ([`KvBlocks::quantize_row`]): Q8_0 with
//! its x86 quantizer (the one activations go through: `id = 127 / max|x|`, rounded half to even),
//! Q4_0 with GGML's reference quantizer.
//!
//! The portable level ([`Isa::Scalar`]) is the reference. The x86 levels (AVX2, and the AVX2
//! kernels on AVX-VNNI and AVX-512 CPUs) and the aarch64 levels ([`Isa::Neon`],
//! [`Isa::NeonDotprod`]: the NEON matmul kernels, `kv/neon.rs`) compute the same integer sums
//! and differ only in the rounding of the f32 accumulation; conversions to f32 are exact on every
//! level. The quantizers write the same bytes everywhere (AVX2-compiled on x86, NEON on aarch64).

use super::fp16::f16_bits_to_f32;
use super::q8_act::{Q8_0_BYTES, QK8};
use super::vec_dot::{PORTABLE_FMA, vec_dot_rows_any};
use crate::simd_attn::RowsMut;
use crate::{GgmlType, Isa};

/// A block format for cached keys or values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvBlocks {
    /// 32 signed bytes and an f16 scale: 34 bytes per 32 values.
    Q8_0,
    /// 32 nibbles with an offset of 8 and an f16 scale: 18 bytes per 32 values.
    Q4_0,
}

impl KvBlocks {
    /// Values per block.
    pub const BLOCK: usize = QK8;

    /// The GGML type of the blocks.
    pub fn ggml_type(self) -> GgmlType {
        match self {
            KvBlocks::Q8_0 => GgmlType::Q8_0,
            KvBlocks::Q4_0 => GgmlType::Q4_0,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            KvBlocks::Q8_0 => Q8_0_BYTES,
            KvBlocks::Q4_0 => 18,
        }
    }

    /// Bytes of a row of `n` values (exact for whole blocks; a partial block counts as one).
    pub fn row_bytes(self, n: usize) -> usize {
        n.div_ceil(Self::BLOCK) * self.block_bytes()
    }

    /// Quantizes `x` into `out` as llama.cpp's CPU backend stores a cache row (see the module
    /// docs). Queries scored against a quantized key cache are quantized with
    /// `KvBlocks::Q8_0.quantize_row`.
    ///
    /// # Panics
    /// If `x.len()` is not a multiple of 32 or `out.len()` is not `self.row_bytes(x.len())`.
    pub fn quantize_row(self, x: &[f32], out: &mut [u8]) {
        assert!(
            x.len().is_multiple_of(Self::BLOCK) && out.len() == self.row_bytes(x.len()),
            "quantize_row: {} values do not fill {} bytes of {self:?} blocks",
            x.len(),
            out.len()
        );
        match self {
            KvBlocks::Q8_0 => quantize_q8_0(x, out),
            KvBlocks::Q4_0 => quantize_q4_0(x, out),
        }
    }

    /// Converts a row of blocks to f32, exactly (`q · d`, `(q - 8) · d`).
    ///
    /// # Panics
    /// If `out.len()` is not a multiple of 32 or `src.len()` is not `self.row_bytes(out.len())`.
    pub fn dequantize_row(self, src: &[u8], out: &mut [f32]) {
        assert!(
            out.len().is_multiple_of(Self::BLOCK) && src.len() == self.row_bytes(out.len()),
            "dequantize_row: {} bytes of {self:?} blocks do not hold {} values",
            src.len(),
            out.len()
        );
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        // SAFETY: NEON is enabled for the whole build (the aarch64 baseline); lengths checked
        // above.
        unsafe {
            neon::to_f32(self, src, out)
        }
        #[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
        to_f32(self, src, out);
    }
}

/// Q8_0 quantization of whole blocks (lengths checked by the caller), AVX2-compiled where
/// available, in NEON on aarch64 (the same bytes).
fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx2_fma() {
        // SAFETY: AVX2 and FMA were detected on this CPU; lengths checked by the caller.
        unsafe { super::vec_dot::quantize_avx2(GgmlType::Q8_0, x, out) };
        return;
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    // SAFETY: NEON is enabled for the whole build (the aarch64 baseline).
    unsafe {
        neon::quantize_q8_0(x, out)
    }
    #[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
    super::vec_dot::quantize_any(GgmlType::Q8_0, x, out);
}

/// Q4_0 quantization of whole blocks (lengths checked by the caller) with GGML's reference
/// quantizer, in NEON on aarch64 (the same bytes).
fn quantize_q4_0(x: &[f32], out: &mut [u8]) {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    // SAFETY: NEON is enabled for the whole build (the aarch64 baseline).
    unsafe {
        neon::quantize_q4_0(x, out)
    }
    #[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
    super::quantize_blocks_into::<super::BlockQ4_0>(x, out);
}

/// Rows of values stored in a block format: row `i` holds `cols` values (whole blocks) in the
/// `ty.row_bytes(cols)` bytes from byte `i * stride` of `data`.
#[derive(Clone, Copy, Debug)]
pub struct BlockRows<'a> {
    /// The block format.
    pub ty: KvBlocks,
    /// The bytes.
    pub data: &'a [u8],
    /// Number of rows.
    pub rows: usize,
    /// Values per row (a multiple of 32).
    pub cols: usize,
    /// Distance between the starts of two consecutive rows, in bytes.
    pub stride: usize,
}

impl BlockRows<'_> {
    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols)
    }

    /// Panics unless the rows are whole blocks and lie inside `data`.
    fn check(&self, what: &str) {
        assert!(self.cols.is_multiple_of(KvBlocks::BLOCK), "{what}: rows are not whole blocks");
        let end = if self.rows == 0 { 0 } else { (self.rows - 1) * self.stride + self.row_bytes() };
        assert!(self.data.len() >= end, "{what}: rows reach past their bytes");
    }
}

/// Arguments of a score kernel: `c[i·ldc + j] = scale · (q_i · key_j)`.
struct DotsArgs<'a> {
    ty: KvBlocks,
    /// `nq` Q8_0 query rows of `qb` bytes, back to back.
    q: &'a [u8],
    nq: usize,
    qb: usize,
    /// `nk` key rows of `kb` bytes, `ks` bytes apart.
    keys: &'a [u8],
    nk: usize,
    kb: usize,
    ks: usize,
    c: &'a mut [f32],
    ldc: usize,
    scale: f32,
}

/// Arguments of a conversion kernel: `rows` rows of `cols` values from `src` (`stride` bytes
/// apart) to `dst` (`dst_stride` floats apart).
struct ToF32Args<'a> {
    ty: KvBlocks,
    src: &'a [u8],
    rows: usize,
    cols: usize,
    stride: usize,
    dst: &'a mut [f32],
    dst_stride: usize,
}

/// Query rows scored against one key row per call of a several-rows kernel.
const Q_TILE: usize = 16;

/// The score loop over a several-rows dot kernel `rows(key_row, q_rows, q_row_bytes, out)`.
#[inline(always)]
fn dots_with(a: &mut DotsArgs<'_>, rows: impl Fn(&[u8], &[u8], usize, &mut [f32])) {
    let mut tmp = [0f32; Q_TILE];
    for j in 0..a.nk {
        let key = &a.keys[j * a.ks..j * a.ks + a.kb];
        for i0 in (0..a.nq).step_by(Q_TILE) {
            let n = Q_TILE.min(a.nq - i0);
            rows(key, &a.q[i0 * a.qb..(i0 + n) * a.qb], a.qb, &mut tmp[..n]);
            for (i, &s) in tmp[..n].iter().enumerate() {
                a.c[(i0 + i) * a.ldc + j] = a.scale * s;
            }
        }
    }
}

/// The conversion loop.
#[inline(always)]
fn rows_to_f32_with(a: &mut ToF32Args<'_>) {
    let rb = a.ty.row_bytes(a.cols);
    for i in 0..a.rows {
        let src = &a.src[i * a.stride..i * a.stride + rb];
        to_f32(a.ty, src, &mut a.dst[i * a.dst_stride..i * a.dst_stride + a.cols]);
    }
}

/// Converts whole blocks to f32 (lengths checked by the caller).
#[inline(always)]
fn to_f32(ty: KvBlocks, src: &[u8], dst: &mut [f32]) {
    let scale = |b: &[u8]| f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
    match ty {
        KvBlocks::Q8_0 => {
            for (b, out) in src.chunks_exact(Q8_0_BYTES).zip(dst.chunks_exact_mut(QK8)) {
                let d = scale(b);
                for (o, &q) in out.iter_mut().zip(&b[2..Q8_0_BYTES]) {
                    *o = f32::from(q as i8) * d;
                }
            }
        }
        KvBlocks::Q4_0 => {
            for (b, out) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK8)) {
                let d = scale(b);
                let (lo, hi) = out.split_at_mut(QK8 / 2);
                for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b[2..18]) {
                    *l = f32::from((q & 0x0f) as i8 - 8) * d;
                    *h = f32::from((q >> 4) as i8 - 8) * d;
                }
            }
        }
    }
}

mod portable {
    use super::*;

    /// # Safety
    /// Every index the arguments describe in bounds (checked by [`KvKernels::dots`]).
    pub(super) unsafe fn dots(a: &mut DotsArgs<'_>) {
        let ty = a.ty.ggml_type();
        dots_with(a, |w, x, rb, o| vec_dot_rows_any::<PORTABLE_FMA, false>(ty, w, x, rb, o));
    }

    /// # Safety
    /// As for [`dots`].
    pub(super) unsafe fn rows_to_f32(a: &mut ToF32Args<'_>) {
        rows_to_f32_with(a);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; arguments checked by [`KvKernels::dots`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dots(a: &mut DotsArgs<'_>) {
        let ty = a.ty.ggml_type();
        dots_with(a, |w, x, rb, o| {
            // SAFETY: this function runs only where AVX2, FMA and F16C were detected (the
            // caller's contract); lengths are whole blocks (checked by `KvKernels::dots`).
            unsafe { super::super::vec_dot::vec_dot_rows_avx2(ty, w, x, rb, o) }
        });
    }

    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; arguments checked by [`KvKernels::rows_to_f32`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn rows_to_f32(a: &mut ToF32Args<'_>) {
        let rb = a.ty.row_bytes(a.cols);
        for i in 0..a.rows {
            let src = &a.src[i * a.stride..i * a.stride + rb];
            let dst = &mut a.dst[i * a.dst_stride..i * a.dst_stride + a.cols];
            match a.ty {
                KvBlocks::Q8_0 => {
                    for (b, out) in src.chunks_exact(Q8_0_BYTES).zip(dst.chunks_exact_mut(QK8)) {
                        q8_0_block(b, out);
                    }
                }
                KvBlocks::Q4_0 => {
                    for (b, out) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK8)) {
                        q4_0_block(b, out);
                    }
                }
            }
        }
    }

    /// The block's scale, splatted (one F16C conversion).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn scale(b: &[u8]) -> __m256 {
        let h = i32::from(u16::from_le_bytes([b[0], b[1]]));
        _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))))
    }

    /// Stores `q · d` for the 32 signed bytes of `q` into `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn store32(q: __m256i, d: __m256, out: &mut [f32]) {
        let out = &mut out[..QK8];
        let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
        let parts = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)];
        for (k, p) in parts.into_iter().enumerate() {
            let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(p)), d);
            // SAFETY: `out` has 32 floats (sliced above); this stores floats 8k..8k+8, unaligned.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * k), v) };
        }
    }

    /// One Q8_0 block (34 bytes) to 32 floats, exactly as the portable conversion.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn q8_0_block(b: &[u8], out: &mut [f32]) {
        let q = &b[2..Q8_0_BYTES];
        // SAFETY: `q` has 32 bytes (sliced above); the load is unaligned.
        let q = unsafe { _mm256_loadu_si256(q.as_ptr().cast()) };
        store32(q, scale(b), out);
    }

    /// One Q4_0 block (18 bytes) to 32 floats: low nibbles are values 0..16, high nibbles
    /// 16..32, each minus 8.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn q4_0_block(b: &[u8], out: &mut [f32]) {
        let q = &b[2..18];
        // SAFETY: `q` has 16 bytes (sliced above); the load is unaligned.
        let lo = unsafe { _mm_loadu_si128(q.as_ptr().cast()) };
        let hi = _mm_srli_epi16::<4>(lo);
        let nib = _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0f));
        store32(_mm256_sub_epi8(nib, _mm256_set1_epi8(8)), scale(b), out);
    }
}

/// The block-format kernels of one instruction-set level (chosen once, like
/// [`crate::simd_attn::AttnKernels`]). Every method checks its arguments' shapes and bounds and
/// panics on a mismatch (a bug in the caller, never a property of user input).
#[derive(Clone, Copy)]
pub struct KvKernels {
    isa: Isa,
    dots: unsafe fn(&mut DotsArgs<'_>),
    rows_to_f32: unsafe fn(&mut ToF32Args<'_>),
}

impl std::fmt::Debug for KvKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KvKernels({})", self.isa)
    }
}

impl KvKernels {
    /// The kernels of the best level this CPU supports (capped by `FERROLM_ISA`, see
    /// [`Isa::best`]).
    pub fn best() -> Self {
        static BEST: std::sync::OnceLock<KvKernels> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Self::for_isa(Isa::best()).unwrap_or_else(Self::portable))
    }

    /// The portable kernels (the reference).
    pub fn portable() -> Self {
        Self { isa: Isa::Scalar, dots: portable::dots, rows_to_f32: portable::rows_to_f32 }
    }

    /// The kernels for `isa`, if this CPU supports it: the AVX2 kernels on every x86 level, the
    /// NEON ones (with `sdot` scores on [`Isa::NeonDotprod`]) on aarch64.
    pub fn for_isa(isa: Isa) -> Option<Self> {
        if !isa.is_supported() {
            return None;
        }
        Some(match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 => {
                Self { isa: Isa::Avx2, dots: avx2::dots, rows_to_f32: avx2::rows_to_f32 }
            }
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            Isa::Neon => Self { isa, dots: neon::dots, rows_to_f32: neon::rows_to_f32 },
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            Isa::NeonDotprod => Self { isa, dots: neon::dots_dotprod, rows_to_f32: neon::rows_to_f32 },
            _ => Self::portable(),
        })
    }

    /// The level whose kernels these are.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Scores of Q8_0 queries against block-format keys: `c[i][j] = scale · (q_i · key_j)`, where
    /// `q` holds `c.rows` query rows of `keys.cols` values quantized by
    /// `KvBlocks::Q8_0.quantize_row`, back to back. Each dot product is exactly what the
    /// quantized matmul's kernel of this level computes for a weight row of the key's type.
    ///
    /// # Panics
    /// If `keys.cols` is not a multiple of 32, `q` is not `c.rows` such rows, `c` is not
    /// `c.rows × keys.rows`, or a matrix reaches past its slice.
    pub fn dots(&self, q: &[u8], keys: BlockRows<'_>, c: RowsMut<'_>, scale: f32) {
        keys.check("dots");
        let qb = KvBlocks::Q8_0.row_bytes(keys.cols);
        assert!(q.len() == c.rows * qb, "dots: queries are not {} Q8_0 rows", c.rows);
        assert!(c.cols == keys.rows, "dots: shapes disagree");
        let c_end = if c.rows == 0 || c.cols == 0 { 0 } else { (c.rows - 1) * c.stride + c.cols };
        assert!(c.data.len() >= c_end, "dots: c too short");
        if c.rows == 0 || c.cols == 0 {
            return;
        }
        let mut a = DotsArgs {
            ty: keys.ty,
            q,
            nq: c.rows,
            qb,
            keys: keys.data,
            nk: keys.rows,
            kb: keys.row_bytes(),
            ks: keys.stride,
            c: c.data,
            ldc: c.stride,
            scale,
        };
        // SAFETY: the level is supported (checked when the table was built); the kernels only
        // index slices, inside the bounds checked above.
        unsafe { (self.dots)(&mut a) }
    }

    /// Converts `src` to f32: `dst` gets `src.rows` rows of `src.cols` values, row `i` from
    /// `i * dst_stride`.
    ///
    /// # Panics
    /// If `src.cols` is not a multiple of 32 or either matrix reaches past its slice.
    pub fn rows_to_f32(&self, src: BlockRows<'_>, dst: &mut [f32], dst_stride: usize) {
        src.check("rows_to_f32");
        let end = if src.rows == 0 { 0 } else { (src.rows - 1) * dst_stride + src.cols };
        assert!(dst.len() >= end, "rows_to_f32: dst too short");
        let mut a = ToF32Args {
            ty: src.ty,
            src: src.data,
            rows: src.rows,
            cols: src.cols,
            stride: src.stride,
            dst,
            dst_stride,
        };
        // SAFETY: supported level; the kernels only index slices, inside the bounds checked
        // above.
        unsafe { (self.rows_to_f32)(&mut a) }
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon;

#[cfg(test)]
mod tests;
