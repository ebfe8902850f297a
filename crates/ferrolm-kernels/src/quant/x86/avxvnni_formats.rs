//! The weight formats of the AVX-VNNI kernels: how each group of blocks is rearranged into the
//! lane layout, how nibbles, high bits and scales are unpacked, and how the matching activation
//! groups are rearranged. See `avxvnni.rs` for the layout.

use std::arch::x86_64::*;

use crate::quant::q3_k::unpack_scales_q3k;

use super::avxvnni::{AvxVnni, Format, WGroup, byte_sums, rows16, rows32, zero_ps, zero_si};

/// `[stride · i + off; 8]`: the offsets of one field in 8 consecutive blocks.
const fn at(stride: usize, off: usize) -> [usize; 8] {
    let mut a = [0; 8];
    let mut i = 0;
    while i < 8 {
        a[i] = stride * i + off;
        i += 1;
    }
    a
}

/// The little-endian f16 values at `src[at[i]..]` as eight f32 lanes.
#[inline(always)]
fn f16x8(_t: AvxVnni, src: &[u8], at: [usize; 8]) -> __m256 {
    let mut h = [0u16; 8];
    for (v, &o) in h.iter_mut().zip(&at) {
        *v = u16::from_le_bytes([src[o], src[o + 1]]);
    }
    // SAFETY: `h` holds 8 u16 (an SSE2 unaligned load); `_t` proves F16C.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast())) }
}

/// The little-endian f16 at `src[0..2]`, broadcast.
#[inline(always)]
fn f16x1(_t: AvxVnni, src: &[u8]) -> __m256 {
    let h = i32::from(u16::from_le_bytes([src[0], src[1]]));
    // SAFETY: `_t` proves F16C/AVX; registers only.
    unsafe { _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)))) }
}

/// Little-endian f32 at `b[0..4]`.
#[inline(always)]
fn f32_at(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Low nibbles of every byte.
#[inline(always)]
fn lo_nibbles(_t: AvxVnni, v: __m256i) -> __m256i {
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe { _mm256_and_si256(v, _mm256_set1_epi8(0x0f)) }
}

/// High nibbles of every byte.
#[inline(always)]
fn hi_nibbles(_t: AvxVnni, v: __m256i) -> __m256i {
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe { _mm256_and_si256(_mm256_srli_epi16::<4>(v), _mm256_set1_epi8(0x0f)) }
}

/// Low nibbles of `g[j]` in `q[j]`, high nibbles in `q[j + 4]`.
#[inline(always)]
fn split_nibbles(t: AvxVnni, g: [__m256i; 4]) -> [__m256i; 8] {
    let mut q = [zero_si(t); 8];
    for j in 0..4 {
        q[j] = lo_nibbles(t, g[j]);
        q[j + 4] = hi_nibbles(t, g[j]);
    }
    q
}

/// The 32 nibbles of the 16 bytes at `src[0..16]` in natural order: low nibbles (values
/// 0..16), then high nibbles (16..32).
#[inline(always)]
fn nibbles32(_t: AvxVnni, src: &[u8]) -> __m256i {
    let b = &src[..16];
    // SAFETY: `b` holds 16 bytes; `_t` proves AVX2.
    unsafe {
        let lo = _mm_loadu_si128(b.as_ptr().cast());
        lo_nibbles(_t, _mm256_set_m128i(_mm_srli_epi16::<4>(lo), lo))
    }
}

/// The 32 bytes at `src[0..32]`.
#[inline(always)]
fn load32(_t: AvxVnni, src: &[u8]) -> __m256i {
    let b = &src[..32];
    // SAFETY: `b` holds 32 bytes; `_t` proves AVX.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// `0 − (v << SHIFT)` per i32 lane.
#[inline(always)]
fn neg_shl<const SHIFT: i32>(_t: AvxVnni, v: __m256i) -> __m256i {
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe { _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<SHIFT>(v)) }
}

/// f32 bits as an integer vector.
#[inline(always)]
fn bits(_t: AvxVnni, v: __m256) -> __m256i {
    // SAFETY: `_t` proves AVX; a register reinterpretation.
    unsafe { _mm256_castps_si256(v) }
}

/// The i32 lanes of `s` times `d`, as f32 bits (the minimum factors `d · Σx`).
#[inline(always)]
fn sums_times(_t: AvxVnni, s: __m256i, d: __m256) -> __m256i {
    // SAFETY: `_t` proves AVX; registers only.
    unsafe { _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(s), d)) }
}

// ---- Q8_0 / Q8_1 activations -------------------------------------------------------------

/// Repacks 8 Q8_0 activation blocks with start values `−(Σx << SHIFT)` (the weights' offset).
#[inline(always)]
fn repack_q8_0<const SHIFT: i32>(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
    let q = rows32(t, src, at(34, 2));
    dst[..8].copy_from_slice(&q);
    dst[8] = bits(t, f16x8(t, src, at(34, 0)));
    dst[9] = bits(t, zero_ps(t));
    dst[10] = neg_shl::<SHIFT>(t, byte_sums(t, &q));
}

/// Repacks one Q8_0 activation block in natural order with per-lane start values
/// `−(Σ of the lane's four values << SHIFT)`.
#[inline(always)]
fn repack_q8_0_unit<const SHIFT: i32>(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
    let q = load32(t, &src[2..]);
    dst[0] = q;
    dst[1] = bits(t, f16x1(t, src));
    dst[2] = bits(t, zero_ps(t));
    dst[3] = neg_shl::<SHIFT>(t, byte_sums(t, &[q]));
}

// ---- Q4_0 ----------------------------------------------------------------------------------

/// Q4_0 weights: 8 blocks of `d: f16, qs: [u8; 16]`.
pub(super) struct Q4_0;

impl Format for Q4_0 {
    const W_GROUP: usize = 8 * 18;
    const X_GROUP: usize = 8 * 34;
    const NQ: usize = 8;
    const W_UNIT: usize = 18;
    const X_UNIT: usize = 34;
    const UNIT_NQ: usize = 1;
    const INIT: bool = true;
    const MIN: bool = false;
    const SPLIT: bool = false;
    const ID: u8 = 1;

    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let g = rows16(t, src, at(18, 2));
        let q = split_nibbles(t, g);
        let scale = f16x8(t, src, at(18, 0));
        WGroup { q, scale, scale2: scale, min: scale, min2: scale }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_0::<3>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        let scale = f16x1(t, src);
        WGroup { q: [nibbles32(t, &src[2..]); 8], scale, scale2: scale, min: scale, min2: scale }
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_0_unit::<3>(t, src, dst);
    }
}

// ---- Q4_1 ----------------------------------------------------------------------------------

/// Q4_1 weights: 8 blocks of `d: f16, m: f16, qs: [u8; 16]`.
pub(super) struct Q4_1;

impl Format for Q4_1 {
    const W_GROUP: usize = 8 * 20;
    const X_GROUP: usize = 8 * 36;
    const NQ: usize = 8;
    const W_UNIT: usize = 20;
    const X_UNIT: usize = 36;
    const UNIT_NQ: usize = 1;
    const INIT: bool = false;
    const MIN: bool = true;
    const SPLIT: bool = false;
    const ID: u8 = 2;

    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let g = rows16(t, src, at(20, 4));
        let q = split_nibbles(t, g);
        let scale = f16x8(t, src, at(20, 0));
        WGroup { q, scale, scale2: scale, min: f16x8(t, src, at(20, 2)), min2: scale }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_1(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        let scale = f16x1(t, src);
        WGroup {
            q: [nibbles32(t, &src[4..]); 8],
            scale,
            scale2: scale,
            min: f16x1(t, &src[2..]),
            min2: scale,
        }
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_1_unit(t, src, dst);
    }
}

/// Repacks 8 Q8_1 activation blocks (Q4_1, Q5_1): values, `d` and the minimum factors `d · Σq`.
#[inline(always)]
fn repack_q8_1(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
    let q = rows32(t, src, at(36, 4));
    dst[..8].copy_from_slice(&q);
    dst[8] = bits(t, f16x8(t, src, at(36, 0)));
    dst[9] = bits(t, f16x8(t, src, at(36, 2)));
    dst[10] = bits(t, zero_ps(t));
}

/// Repacks one Q8_1 activation block (Q4_1, Q5_1) in natural order.
#[inline(always)]
fn repack_q8_1_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
    dst[0] = load32(t, &src[4..]);
    dst[1] = bits(t, f16x1(t, src));
    // The minimum term once per block: the weight's minimum fills every lane.
    // SAFETY: `t` proves AVX; registers only.
    dst[2] = bits(t, unsafe { _mm256_blend_ps::<1>(zero_ps(t), f16x1(t, &src[2..])) });
    dst[3] = bits(t, zero_ps(t));
}

// ---- Q5_0 ----------------------------------------------------------------------------------

/// Q5_0 weights: 8 blocks of `d: f16, qh: u32, qs: [u8; 16]`.
pub(super) struct Q5_0;

/// Fifth bits of vector `j` (values `4j..4j + 4` of each lane's block): byte `i` of lane `b`
/// is 16 where bit `4j + i` of block `b`'s `qh` is set.
#[inline(always)]
fn q5_high(_t: AvxVnni, h: __m256i, j: usize) -> __m256i {
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe {
        // Byte `j / 2` of each lane to its four bytes, then one bit per byte.
        let k = (j / 2) as i8;
        let sel = _mm256_setr_epi8(
            k,
            k,
            k,
            k,
            4 + k,
            4 + k,
            4 + k,
            4 + k,
            8 + k,
            8 + k,
            8 + k,
            8 + k,
            12 + k,
            12 + k,
            12 + k,
            12 + k,
            k,
            k,
            k,
            k,
            4 + k,
            4 + k,
            4 + k,
            4 + k,
            8 + k,
            8 + k,
            8 + k,
            8 + k,
            12 + k,
            12 + k,
            12 + k,
            12 + k,
        );
        let bit = _mm256_set1_epi32(if j.is_multiple_of(2) { 0x0804_0201 } else { 0x8040_2010u32 as i32 });
        let b = _mm256_and_si256(_mm256_shuffle_epi8(h, sel), bit);
        _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10))
    }
}

impl Format for Q5_0 {
    const W_GROUP: usize = 8 * 22;
    const X_GROUP: usize = 8 * 34;
    const NQ: usize = 8;
    const W_UNIT: usize = 22;
    const X_UNIT: usize = 34;
    const UNIT_NQ: usize = 1;
    const INIT: bool = true;
    const MIN: bool = false;
    const SPLIT: bool = false;
    const ID: u8 = 3;

    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let q = five_bit_group(t, src, 22, 2);
        let scale = f16x8(t, src, at(22, 0));
        WGroup { q, scale, scale2: scale, min: scale, min2: scale }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_0::<4>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        let q = five_bit_unit(t, src, 2);
        let scale = f16x1(t, src);
        WGroup { q: [q; 8], scale, scale2: scale, min: scale, min2: scale }
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_0_unit::<4>(t, src, dst);
    }
}

/// The 5-bit values (`nibble + 16 · high bit`, in 0..32) of 8 Q5_0 or Q5_1 blocks of `stride`
/// bytes, each with its `qh: u32` at `qh_off` and its 16 `qs` bytes right after: vector `j`
/// holds values `4j..4j + 4` of block `b` in lane `b`.
#[inline(always)]
fn five_bit_group(t: AvxVnni, src: &[u8], stride: usize, qh_off: usize) -> [__m256i; 8] {
    let g = rows16(t, src, at(stride, qh_off + 4));
    let mut qh = [0i32; 8];
    for (b, h) in qh.iter_mut().enumerate() {
        let o = stride * b + qh_off;
        *h = i32::from_le_bytes([src[o], src[o + 1], src[o + 2], src[o + 3]]);
    }
    // SAFETY: `qh` holds 8 i32; AVX load, unaligned.
    let h = unsafe { _mm256_loadu_si256(qh.as_ptr().cast()) };
    let mut q = split_nibbles(t, g);
    for (j, v) in q.iter_mut().enumerate() {
        // SAFETY: `t` proves AVX2; registers only.
        *v = unsafe { _mm256_or_si256(*v, q5_high(t, h, j)) };
    }
    q
}

/// The 32 5-bit values of one Q5_0 or Q5_1 block in natural order, its `qh: u32` at
/// `src[qh_off..]` and its 16 `qs` bytes right after.
#[inline(always)]
fn five_bit_unit(t: AvxVnni, src: &[u8], qh_off: usize) -> __m256i {
    let o = qh_off;
    let qh = i32::from_le_bytes([src[o], src[o + 1], src[o + 2], src[o + 3]]);
    // SAFETY: `t` proves AVX2; registers only. Byte `e` of the vector takes byte `e / 8` of
    // `qh`; OR-ing every bit but bit `e % 8` leaves all ones exactly where bit `e` is set.
    unsafe {
        let spread =
            _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0);
        let b = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread);
        let b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
        let high = _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi8(-1)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles32(t, &src[o + 4..]), high)
    }
}

// ---- Q5_1 ----------------------------------------------------------------------------------

/// Q5_1 weights: 8 blocks of `d: f16, m: f16, qh: u32, qs: [u8; 16]` (Q5_0's values with
/// Q4_1's minimum).
pub(super) struct Q5_1;

impl Format for Q5_1 {
    const W_GROUP: usize = 8 * 24;
    const X_GROUP: usize = 8 * 36;
    const NQ: usize = 8;
    const W_UNIT: usize = 24;
    const X_UNIT: usize = 36;
    const UNIT_NQ: usize = 1;
    const INIT: bool = false;
    const MIN: bool = true;
    const SPLIT: bool = false;
    const ID: u8 = 10;

    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let q = five_bit_group(t, src, 24, 4);
        let scale = f16x8(t, src, at(24, 0));
        WGroup { q, scale, scale2: scale, min: f16x8(t, src, at(24, 2)), min2: scale }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_1(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        let scale = f16x1(t, src);
        let q = [five_bit_unit(t, src, 4); 8];
        WGroup { q, scale, scale2: scale, min: f16x1(t, &src[2..]), min2: scale }
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_1_unit(t, src, dst);
    }
}

// ---- Q8_0 ----------------------------------------------------------------------------------

/// Q8_0 weights: 8 blocks of `d: f16, qs: [i8; 32]`, flipped to `q + 128`.
pub(super) struct Q8_0;

/// `v + 128` per byte, as unsigned.
#[inline(always)]
fn flip(_t: AvxVnni, v: __m256i) -> __m256i {
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe { _mm256_xor_si256(v, _mm256_set1_epi8(-128)) }
}

impl Format for Q8_0 {
    const W_GROUP: usize = 8 * 34;
    const X_GROUP: usize = 8 * 34;
    const NQ: usize = 8;
    const W_UNIT: usize = 34;
    const X_UNIT: usize = 34;
    const UNIT_NQ: usize = 1;
    const INIT: bool = true;
    const MIN: bool = false;
    const SPLIT: bool = false;
    const ID: u8 = 4;

    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let g = rows32(t, src, at(34, 2));
        let scale = f16x8(t, src, at(34, 0));
        let mut q = g;
        for v in q.iter_mut() {
            *v = flip(t, *v);
        }
        WGroup { q, scale, scale2: scale, min: scale, min2: scale }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_0::<7>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        let scale = f16x1(t, src);
        WGroup { q: [flip(t, load32(t, &src[2..])); 8], scale, scale2: scale, min: scale, min2: scale }
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_0_unit::<7>(t, src, dst);
    }
}

// ---- Q4_K ----------------------------------------------------------------------------------

/// Q4_K weights, one super-block of `d, dmin: f16, scales: [u8; 12], qs: [u8; 128]` per group;
/// lane `j` is sub-block `j` (chunk `j / 2` of `qs`, low nibbles for even `j`).
pub(super) struct Q4K;

/// The eight 6-bit scales and eight 6-bit minimums of a Q4_K super-block's packed `scales`, one
/// per byte (GGML's `utmp` unpacking).
#[inline(always)]
fn q4_k_scales(s: &[u8]) -> (u64, u64) {
    let u = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let sc_hi = (u2 & 0x0f0f_0f0f) | (((u0 >> 6) & 0x0303_0303) << 4);
    let m_hi = ((u2 >> 4) & 0x0f0f_0f0f) | (((u1 >> 6) & 0x0303_0303) << 4);
    let sc = u64::from(u0 & 0x3f3f_3f3f) | (u64::from(sc_hi) << 32);
    let m = u64::from(u1 & 0x3f3f_3f3f) | (u64::from(m_hi) << 32);
    (sc, m)
}

/// Eight unsigned bytes (little-endian in `v`) as f32 lanes times `d`.
#[inline(always)]
fn bytes_times(_t: AvxVnni, v: u64, d: f32) -> __m256 {
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe {
        let b = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64));
        _mm256_mul_ps(_mm256_cvtepi32_ps(b), _mm256_set1_ps(d))
    }
}

impl Format for Q4K {
    const W_GROUP: usize = 144;
    const X_GROUP: usize = 292;
    const NQ: usize = 8;
    const W_UNIT: usize = 144;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 8;
    const INIT: bool = false;
    const MIN: bool = true;
    const SPLIT: bool = false;
    const ID: u8 = 5;

    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        k32_group(t, src, k32_nibbles(t, src, 16))
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_k32(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        Self::unpack(t, src)
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        Self::repack(t, src, dst);
    }
}

/// The nibbles of a 32-value sub-block format's super-block whose `qs` bytes start at `off`
/// (Q4_K, Q5_K): lane `j` of vector `v` holds values `4v..4v + 4` of sub-block `j`, the low
/// nibbles of bytes `off + 32 (j / 2) + 4v ..+ 4` for even `j`, the high ones for odd `j`.
#[inline(always)]
fn k32_nibbles(t: AvxVnni, src: &[u8], off: usize) -> [__m256i; 8] {
    // Lanes 2c and 2c + 1 both read chunk c.
    let (a, b, c, d) = (off, off + 32, off + 64, off + 96);
    let mut q = rows32(t, src, [a, a, b, b, c, c, d, d]);
    // SAFETY: `t` proves AVX2; registers only.
    let odd = unsafe { _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4) };
    for v in q.iter_mut() {
        // SAFETY: as above.
        *v = lo_nibbles(t, unsafe { _mm256_srlv_epi32(*v, odd) });
    }
    q
}

/// The values `q` of a super-block that starts with `d, dmin: f16, scales: [u8; 12]` (Q4_K,
/// Q5_K) with its per-lane scales `d · sc` and minimums `−dmin · m`.
#[inline(always)]
fn k32_group(t: AvxVnni, src: &[u8], q: [__m256i; 8]) -> WGroup {
    let (sc, m) = q4_k_scales(&src[4..16]);
    let (d, dmin) = (f16_at(t, src), f16_at(t, &src[2..]));
    let scale = bytes_times(t, sc, d);
    WGroup { q, scale, scale2: scale, min: bytes_times(t, m, -dmin), min2: scale }
}

/// Repacks one Q8_K activation block for the 32-value sub-block formats (Q4_K, Q5_K): lane `j`
/// of vector `v` holds values `32j + 4v ..+ 4`; then `d` and the minimum factors `d · Σx`.
#[inline(always)]
fn repack_q8_k32(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
    let q = rows32(t, src, at(32, 4));
    dst[..8].copy_from_slice(&q);
    // SAFETY: `t` proves AVX; registers only.
    let d = unsafe { _mm256_set1_ps(f32_at(src)) };
    dst[8] = bits(t, d);
    dst[9] = sums_times(t, byte_sums(t, &q), d);
    dst[10] = bits(t, zero_ps(t));
}

// ---- Q5_K ----------------------------------------------------------------------------------

/// Q5_K weights, one super-block of `d, dmin: f16, scales: [u8; 12], qh: [u8; 32],
/// qs: [u8; 128]` per group; lane `j` is sub-block `j`, as for Q4_K.
pub(super) struct Q5K;

impl Format for Q5K {
    const W_GROUP: usize = 176;
    const X_GROUP: usize = 292;
    const NQ: usize = 8;
    const W_UNIT: usize = 176;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 8;
    const INIT: bool = false;
    const MIN: bool = true;
    const SPLIT: bool = false;
    const ID: u8 = 9;

    /// Values `nibble + 16 · high bit` in 0..32, the high bit of sub-block `j` being bit `j` of
    /// the `qh` bytes; scales and minimums as Q4_K's.
    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let mut q = k32_nibbles(t, src, 48);
        let qh = load32(t, &src[16..]);
        // SAFETY: `t` proves AVX2; registers only.
        unsafe {
            // Bit `j` of every byte to bit 4 in lane `j`.
            let up = _mm256_setr_epi32(4, 3, 2, 1, 0, 0, 0, 0);
            let down = _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3);
            for (v, x) in q.iter_mut().enumerate() {
                // `qh` bytes `4v..4v + 4` in every lane.
                let h = _mm256_permutevar8x32_epi32(qh, _mm256_set1_epi32(v as i32));
                let high = _mm256_srlv_epi32(_mm256_sllv_epi32(h, up), down);
                *x = _mm256_or_si256(*x, _mm256_and_si256(high, _mm256_set1_epi8(0x10)));
            }
        }
        k32_group(t, src, q)
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_k32(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        Self::unpack(t, src)
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        Self::repack(t, src, dst);
    }
}

// ---- Q6_K ----------------------------------------------------------------------------------

/// Q6_K weights, one super-block of `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16` per
/// group, in two halves (`q[0..4]`, `q[4..8]`) of 8 sub-blocks of 16 values; lane `L` of half
/// `h` is sub-block `8h + L` (quarter `k = L / 2` of the half, 16-value part `m = L % 2`).
pub(super) struct Q6K;

impl Format for Q6K {
    const W_GROUP: usize = 210;
    const X_GROUP: usize = 292;
    const NQ: usize = 8;
    const W_UNIT: usize = 210;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 8;
    const INIT: bool = true;
    const MIN: bool = false;
    const SPLIT: bool = true;
    const ID: u8 = 6;

    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let mut q = [zero_si(t); 8];
        // SAFETY: `t` proves AVX2; registers only.
        unsafe {
            let nibble = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
            let up = _mm256_setr_epi32(4, 4, 2, 2, 0, 0, 0, 0);
            let down = _mm256_setr_epi32(0, 0, 0, 0, 0, 0, 2, 2);
            for h in 0..2 {
                // Lane L: `ql` row 16 (L % 4) of the half (quarters 2, 3 reuse 0, 1's bytes,
                // high nibbles), `qh` row 16 (L % 2).
                let o = 64 * h;
                let ql = rows16(t, src, [o, o + 16, o + 32, o + 48, o, o + 16, o + 32, o + 48]);
                let o = 128 + 32 * h;
                let qh = rows16(t, src, [o, o + 16, o, o + 16, o, o + 16, o, o + 16]);
                for v in 0..4 {
                    let nib = lo_nibbles(t, _mm256_srlv_epi32(ql[v], nibble));
                    let hb = _mm256_srlv_epi32(_mm256_sllv_epi32(qh[v], up), down);
                    q[4 * h + v] = _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
                }
            }
            let d = _mm256_cvtss_f32(f16x1(t, &src[208..]));
            let scale = q6_k_scales(t, &src[192..200], d);
            WGroup { q, scale, scale2: q6_k_scales(t, &src[200..208], d), min: scale, min2: scale }
        }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_k16::<5, false>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        Self::unpack(t, src)
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        Self::repack(t, src, dst);
    }
}

/// Eight signed 8-bit Q6_K scales times `d`.
#[inline(always)]
fn q6_k_scales(_t: AvxVnni, s: &[u8], d: f32) -> __m256 {
    let b = i64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]);
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe {
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(b))), _mm256_set1_ps(d))
    }
}

/// Repacks one Q8_K activation block for a 16-value sub-block format (Q2_K, Q3_K, Q6_K): the
/// values of each half (lane `L` of half `h` holds sub-block `8h + L`) and `d`, then per half
/// (the first in the start slot, the second in the minimum slot) either, for a format with
/// minimums (`MIN`), the f32 factors `d · Σx`, or the start values `−(Σx << SHIFT)` of unsigned
/// weights stored plus `2^SHIFT`.
#[inline(always)]
fn repack_q8_k16<const SHIFT: i32, const MIN: bool>(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
    // SAFETY: `t` proves AVX; registers only.
    let d = unsafe { _mm256_set1_ps(f32_at(src)) };
    for h in 0..2 {
        let q = rows16(t, src, at(16, 4 + 128 * h));
        dst[4 * h..4 * h + 4].copy_from_slice(&q);
        let s = byte_sums(t, &q);
        dst[10 - h] = if MIN { sums_times(t, s, d) } else { neg_shl::<SHIFT>(t, s) };
    }
    dst[8] = bits(t, d);
}

/// The little-endian f16 at `src[0..2]` as f32.
#[inline(always)]
fn f16_at(t: AvxVnni, src: &[u8]) -> f32 {
    // SAFETY: `t` proves AVX; registers only.
    unsafe { _mm256_cvtss_f32(f16x1(t, src)) }
}

/// The bytes `off + 16m + 4v ..+ 4` of a 16-value sub-block format's 32-byte field (Q2_K's and
/// Q3_K's `qs` of one half, Q3_K's `hmask`) for lane `L = 2k + m` of vector `v`.
#[inline(always)]
fn k16_rows(t: AvxVnni, src: &[u8], off: usize) -> [__m256i; 4] {
    let o = off + 16;
    rows16(t, src, [off, o, off, o, off, o, off, o])
}

/// The 2-bit values of one half of a Q2_K or Q3_K super-block whose `qs` bytes start at
/// `off`: lane `L = 2k + m` of vector `v` holds bits `2k, 2k + 1` of the [`k16_rows`] bytes, in
/// 0..4.
#[inline(always)]
fn k16_low_bits(t: AvxVnni, src: &[u8], off: usize) -> [__m256i; 4] {
    let mut q = k16_rows(t, src, off);
    // SAFETY: `t` proves AVX2; registers only.
    unsafe {
        let shift = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6);
        for v in q.iter_mut() {
            *v = _mm256_and_si256(_mm256_srlv_epi32(*v, shift), _mm256_set1_epi8(0x03));
        }
    }
    q
}

// ---- Q3_K ----------------------------------------------------------------------------------

/// Q3_K weights, one super-block of `hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16`
/// per group, in two halves of 8 sub-blocks of 16 values as for Q6_K: lane `L = 2k + m` of half
/// `h` is sub-block `8h + L` (bit pair `k` of the half's `qs` bytes, bit `4h + k` of `hmask`).
pub(super) struct Q3K;

impl Format for Q3K {
    const W_GROUP: usize = 110;
    const X_GROUP: usize = 292;
    const NQ: usize = 8;
    const W_UNIT: usize = 110;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 8;
    const INIT: bool = true;
    const MIN: bool = false;
    const SPLIT: bool = true;
    const ID: u8 = 7;

    /// Values `low + 4 · high` in 0..8 (the stored value plus 4), scales `d · (s − 32)`.
    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let mut q = [zero_si(t); 8];
        let hm = k16_rows(t, src, 0);
        for h in 0..2 {
            let low = k16_low_bits(t, src, 32 + 32 * h);
            // SAFETY: `t` proves AVX2; registers only.
            unsafe {
                let shift = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
                let shift = _mm256_add_epi32(shift, _mm256_set1_epi32(4 * h as i32));
                for v in 0..4 {
                    // Bit `4h + k` of every `hmask` byte to bit 0, then to bit 2.
                    let high = _mm256_and_si256(_mm256_srlv_epi32(hm[v], shift), _mm256_set1_epi8(0x01));
                    q[4 * h + v] = _mm256_or_si256(low[v], _mm256_slli_epi32::<2>(high));
                }
            }
        }
        let mut packed = [0u8; 12];
        packed.copy_from_slice(&src[96..108]);
        let sc = unpack_scales_q3k(&packed).map(|s| s as u8);
        let d = f16_at(t, &src[108..]);
        let scale = q6_k_scales(t, &sc[..8], d);
        WGroup { q, scale, scale2: q6_k_scales(t, &sc[8..], d), min: scale, min2: scale }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_k16::<2, false>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        Self::unpack(t, src)
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        Self::repack(t, src, dst);
    }
}

// ---- Q2_K ----------------------------------------------------------------------------------

/// Q2_K weights, one super-block of `scales: [u8; 16], qs: [u8; 64], d, dmin: f16` per group,
/// in two halves of 8 sub-blocks of 16 values as for Q3_K (lane `L = 2k + m` of half `h`: bit
/// pair `k` of the half's `qs` bytes), each half with its own scales and minimums.
pub(super) struct Q2K;

/// Little-endian u64 at `b[0..8]`.
#[inline(always)]
fn u64_at(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

impl Format for Q2K {
    const W_GROUP: usize = 84;
    const X_GROUP: usize = 292;
    const NQ: usize = 8;
    const W_UNIT: usize = 84;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 8;
    const INIT: bool = false;
    const MIN: bool = true;
    const SPLIT: bool = true;
    const ID: u8 = 8;

    /// Values in 0..4, scales `d · sc`, minimums `−dmin · m` (the low and high nibbles of the
    /// sub-blocks' `scales` bytes).
    #[inline(always)]
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup {
        let mut q = [zero_si(t); 8];
        for h in 0..2 {
            q[4 * h..4 * h + 4].copy_from_slice(&k16_low_bits(t, src, 16 + 32 * h));
        }
        let (d, dmin) = (f16_at(t, &src[80..]), f16_at(t, &src[82..]));
        let (lo, hi) = (u64_at(src), u64_at(&src[8..]));
        let nib = 0x0f0f_0f0f_0f0f_0f0f;
        WGroup {
            q,
            scale: bytes_times(t, lo & nib, d),
            scale2: bytes_times(t, hi & nib, d),
            min: bytes_times(t, (lo >> 4) & nib, -dmin),
            min2: bytes_times(t, (hi >> 4) & nib, -dmin),
        }
    }

    #[inline(always)]
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        repack_q8_k16::<0, true>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup {
        Self::unpack(t, src)
    }

    #[inline(always)]
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]) {
        Self::repack(t, src, dst);
    }
}
