//! The weight formats of the AVX-512 kernels: where each lane's bytes come from (permute plans
//! computed at compile time), how nibbles, high bits and scales are unpacked, and how the
//! matching activation groups are rearranged. See `avx512.rs` for the lane layout.

use std::arch::x86_64::*;

use crate::quant::q3_k::unpack_scales_q3k;

use super::avx512::{
    Avx512, BytePlan, Format, WGroup, WordPlan, byte_sums, f16_hi, f16_lo, gather, gather_words, hi_nibbles,
    lo_nibbles, load, zero_ps,
};

/// Plans for the `V` value vectors of 16 blocks of `stride` bytes whose values start at `off`:
/// lane `b` of vector `v` takes bytes `stride · b + off + 4v ..+ 4`.
const fn block_plans<const V: usize>(stride: u16, off: u16) -> [BytePlan; V] {
    let mut plans = [BytePlan::new([0; 64]); V];
    let mut v = 0;
    while v < V {
        let mut base = [0u16; 16];
        let mut b = 0;
        while b < 16 {
            base[b] = stride * b as u16 + off + 4 * v as u16;
            b += 1;
        }
        plans[v] = BytePlan::lanes(base);
        v += 1;
    }
    plans
}

/// The f16 at `stride · l + off` in word `l < 16`, and (when `off2` is `Some`) the one at
/// `stride · (l − 16) + off2` in word `l ≥ 16`.
const fn word_plan(stride: u16, off: u16, off2: Option<u16>) -> WordPlan {
    let mut pos = [0u16; 32];
    let mut l = 0;
    while l < 16 {
        pos[l] = stride * l as u16 + off;
        if let Some(o) = off2 {
            pos[l + 16] = stride * l as u16 + o;
        }
        l += 1;
    }
    WordPlan::new(pos)
}

/// Remainder pairs of 4-bit blocks: bytes `0..32` of the gathered vector are block A's 16
/// packed bytes twice (low nibbles, then high nibbles), bytes `32..64` block B's, with A's packed
/// bytes at `a` and B's at `b`.
const fn nibble_pair_plan(a: u16, b: u16) -> BytePlan {
    let mut pos = [0u16; 64];
    let mut l = 0;
    while l < 64 {
        pos[l] = if l < 32 { a } else { b } + (l % 16) as u16;
        l += 1;
    }
    BytePlan::new(pos)
}

/// Remainder pairs of 8-bit blocks: block A's 32 bytes at `a`, then block B's at `b`.
const fn byte_pair_plan(a: u16, b: u16) -> BytePlan {
    let mut pos = [0u16; 64];
    let mut l = 0;
    while l < 64 {
        pos[l] = if l < 32 { a + l as u16 } else { b + l as u16 - 32 };
        l += 1;
    }
    BytePlan::new(pos)
}

/// Words `8i..8i + 8` all taken from byte offset `at[i]`: per-half scales of a remainder pair.
const fn pair_words(at: [u16; 4]) -> WordPlan {
    let mut pos = [0u16; 32];
    let mut l = 0;
    while l < 32 {
        pos[l] = at[l / 8];
        l += 1;
    }
    WordPlan::new(pos)
}

/// The values of a remainder pair of 4-bit blocks from [`nibble_pair_plan`] bytes.
#[inline(always)]
fn nibble_pair(t: Avx512, g: __m512i) -> __m512i {
    // SAFETY: `t` proves AVX-512 BW; registers only.
    lo_nibbles(t, unsafe { _mm512_mask_srli_epi16::<4>(g, 0xff00_ff00, g) })
}

/// `a | (b & c)` bitwise, in one instruction.
#[inline(always)]
fn or_and(_t: Avx512, a: __m512i, b: __m512i, c: __m512i) -> __m512i {
    // SAFETY: `_t` proves AVX-512 F; registers only.
    unsafe { _mm512_ternarylogic_epi32::<0xf8>(a, b, c) }
}

/// Little-endian f16 at `b[0..2]` as f32.
#[inline(always)]
fn f16_at(_t: Avx512, b: &[u8]) -> f32 {
    let h = i32::from(u16::from_le_bytes([b[0], b[1]]));
    // SAFETY: `_t` proves F16C (part of the AVX-512 feature set the kernels enable).
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))) }
}

/// Little-endian f32 at `b[0..4]`.
#[inline(always)]
fn f32_at(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

// ---- Q8_0 / Q8_1 activations -------------------------------------------------------------

/// Q8_0 activation values (16 blocks of 34 bytes): lane `b` of vector `j` = bytes `4j..4j+4`.
const Q8_0_X: [BytePlan; 8] = block_plans(34, 2);
/// Q8_0 scales.
const Q8_0_XD: WordPlan = word_plan(34, 0, None);
/// Q8_1 activation values (16 blocks of 36 bytes).
const Q8_1_X: [BytePlan; 8] = block_plans(36, 4);
/// Q8_1 scales (words 0..16) and `d · Σq` (words 16..32).
const Q8_1_XDS: WordPlan = word_plan(36, 0, Some(2));

/// Repacks 16 Q8_0 activation blocks with start values `−(Σx << SHIFT)` (the weights' offset).
#[inline(always)]
fn repack_q8_0<const SHIFT: u32>(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
    let z = load::<9>(t, src);
    for (j, plan) in Q8_0_X.iter().enumerate() {
        dst[j] = gather(t, &z, plan);
    }
    let d = f16_lo(t, gather_words(t, &z, &Q8_0_XD));
    let s = byte_sums(t, &dst[..8]);
    // SAFETY: `t` proves AVX-512 F; registers only.
    unsafe {
        dst[8] = _mm512_castps_si512(d);
        dst[9] = _mm512_setzero_si512();
        dst[10] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<SHIFT>(s));
    }
}

/// Q8_0 activations of a remainder pair.
const Q8_0_PX: BytePlan = byte_pair_plan(2, 36);
const Q8_0_PXD: WordPlan = pair_words([0, 34, 0, 34]);

/// Repacks a remainder pair of Q8_0 activation blocks (natural order) with per-lane start
/// values `−(Σ of the lane's four values << SHIFT)`.
#[inline(always)]
fn repack_q8_0_pair<const SHIFT: u32>(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
    let z = load::<2>(t, src);
    let q = gather(t, &z, &Q8_0_PX);
    let s = byte_sums(t, &[q]);
    // SAFETY: `t` proves AVX-512 F; registers only.
    unsafe {
        dst[0] = q;
        dst[1] = _mm512_castps_si512(f16_lo(t, gather_words(t, &z, &Q8_0_PXD)));
        dst[2] = _mm512_setzero_si512();
        dst[3] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<SHIFT>(s));
    }
}

// ---- Q4_0 ----------------------------------------------------------------------------------

/// Q4_0 weights: 16 blocks of `d: f16, qs: [u8; 16]`.
pub(super) struct Q4_0;
const Q4_0_Q: [BytePlan; 4] = block_plans(18, 2);
const Q4_0_D: WordPlan = word_plan(18, 0, None);
const Q4_0_P: BytePlan = nibble_pair_plan(2, 20);
const Q4_0_PD: WordPlan = pair_words([0, 18, 0, 18]);

impl Format for Q4_0 {
    const ID: u8 = 1;
    const W_GROUP: usize = 16 * 18;
    const X_GROUP: usize = 16 * 34;
    const NQ: usize = 8;
    const W_UNIT: usize = 2 * 18;
    const X_UNIT: usize = 2 * 34;
    const UNIT_NQ: usize = 1;
    const INIT: bool = true;
    const MIN: bool = false;

    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<5>(t, src);
        let mut q = [lo_nibbles(t, z[0]); 8];
        for (v, plan) in Q4_0_Q.iter().enumerate() {
            let g = gather(t, &z, plan);
            q[v] = lo_nibbles(t, g);
            q[v + 4] = hi_nibbles(t, g);
        }
        WGroup { q, scale: f16_lo(t, gather_words(t, &z, &Q4_0_D)), min: zero_ps(t) }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_0::<3>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<2>(t, src);
        let mut q = [z[0]; 8];
        q[0] = nibble_pair(t, gather(t, &z, &Q4_0_P));
        WGroup { q, scale: f16_lo(t, gather_words(t, &z, &Q4_0_PD)), min: zero_ps(t) }
    }

    #[inline(always)]
    fn repack_unit(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_0_pair::<3>(t, src, dst);
    }
}

// ---- Q4_1 ----------------------------------------------------------------------------------

/// Q4_1 weights: 16 blocks of `d: f16, m: f16, qs: [u8; 16]`.
pub(super) struct Q4_1;
const Q4_1_Q: [BytePlan; 4] = block_plans(20, 4);
const Q4_1_DM: WordPlan = word_plan(20, 0, Some(2));
const Q4_1_P: BytePlan = nibble_pair_plan(4, 24);
const Q4_1_PDM: WordPlan = pair_words([0, 20, 2, 22]);
const Q8_1_PX: BytePlan = byte_pair_plan(4, 40);
const Q8_1_PXDS: WordPlan = pair_words([0, 36, 2, 38]);

impl Format for Q4_1 {
    const ID: u8 = 2;
    const W_GROUP: usize = 16 * 20;
    const X_GROUP: usize = 16 * 36;
    const NQ: usize = 8;
    const W_UNIT: usize = 2 * 20;
    const X_UNIT: usize = 2 * 36;
    const UNIT_NQ: usize = 1;
    const INIT: bool = false;
    const MIN: bool = true;

    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<5>(t, src);
        let mut q = [z[0]; 8];
        for (v, plan) in Q4_1_Q.iter().enumerate() {
            let g = gather(t, &z, plan);
            q[v] = lo_nibbles(t, g);
            q[v + 4] = hi_nibbles(t, g);
        }
        let dm = gather_words(t, &z, &Q4_1_DM);
        WGroup { q, scale: f16_lo(t, dm), min: f16_hi(t, dm) }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_1(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<2>(t, src);
        let mut q = [z[0]; 8];
        q[0] = nibble_pair(t, gather(t, &z, &Q4_1_P));
        let dm = gather_words(t, &z, &Q4_1_PDM);
        WGroup { q, scale: f16_lo(t, dm), min: f16_hi(t, dm) }
    }

    #[inline(always)]
    fn repack_unit(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_1_pair(t, src, dst);
    }
}

/// Repacks 16 Q8_1 activation blocks (Q4_1, Q5_1): values, `d` and the minimum factors `d · Σq`.
#[inline(always)]
fn repack_q8_1(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
    let z = load::<9>(t, src);
    for (j, plan) in Q8_1_X.iter().enumerate() {
        dst[j] = gather(t, &z, plan);
    }
    let ds = gather_words(t, &z, &Q8_1_XDS);
    // SAFETY: `t` proves AVX-512 F; registers only.
    unsafe {
        dst[8] = _mm512_castps_si512(f16_lo(t, ds));
        dst[9] = _mm512_castps_si512(f16_hi(t, ds));
        dst[10] = _mm512_setzero_si512();
    }
}

/// Repacks a remainder pair of Q8_1 activation blocks (natural order).
#[inline(always)]
fn repack_q8_1_pair(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
    let z = load::<2>(t, src);
    let ds = gather_words(t, &z, &Q8_1_PXDS);
    // SAFETY: `t` proves AVX-512 F; registers only.
    unsafe {
        dst[0] = gather(t, &z, &Q8_1_PX);
        dst[1] = _mm512_castps_si512(f16_lo(t, ds));
        // The minimum term once per block: the weights' minimums fill their half.
        dst[2] = _mm512_castps_si512(_mm512_maskz_mov_ps(0x0101, f16_hi(t, ds)));
        dst[3] = _mm512_setzero_si512();
    }
}

// ---- Q5_0 ----------------------------------------------------------------------------------

/// Q5_0 weights: 16 blocks of `d: f16, qh: u32, qs: [u8; 16]`.
pub(super) struct Q5_0;
const Q5_0_Q: [BytePlan; 4] = block_plans(22, 6);
const Q5_0_H: [BytePlan; 1] = block_plans(22, 2);
const Q5_0_D: WordPlan = word_plan(22, 0, None);
const Q5_0_P: BytePlan = nibble_pair_plan(6, 28);
const Q5_0_PD: WordPlan = pair_words([0, 22, 0, 22]);
/// Remainder pairs: every dword of the low half holds block A's `qh`, of the high half B's.
const Q5_0_PH: BytePlan = {
    let mut pos = [0u16; 64];
    let mut l = 0;
    while l < 64 {
        pos[l] = if l < 32 { 2 } else { 24 } + (l % 4) as u16;
        l += 1;
    }
    BytePlan::new(pos)
};
/// Remainder pairs: bit `e` of the block's `qh` to bit 4 of byte `e` of its half.
const Q5_0_PSHIFT: [u8; 64] = {
    let mut c = [0u8; 64];
    let mut l = 0;
    while l < 64 {
        c[l] = ((l % 32 + 60) % 64) as u8;
        l += 1;
    }
    c
};

/// `vpmultishiftqb` controls putting bit `4j + i` of lane `b`'s `qh` (the fifth bit of value
/// `4j + i`) at bit 4 of byte `i` of lane `b`.
const Q5_0_SHIFT: [[u8; 64]; 8] = {
    let mut c = [[0u8; 64]; 8];
    let mut j = 0;
    while j < 8 {
        let mut l = 0;
        while l < 64 {
            let (b, i) = (l / 4, l % 4);
            c[j][l] = ((32 * (b % 2) + 4 * j + i + 60) % 64) as u8;
            l += 1;
        }
        j += 1;
    }
    c
};

/// The 5-bit values of 16 Q5_0 or Q5_1 blocks (`nibble + 16 · high bit`, in 0..32), eight
/// vectors of 64 bytes in the order of Q5_0's plans: `hplan` gathers each block's `qh`, `qplans`
/// its nibbles.
#[inline(always)]
fn five_bit_values(t: Avx512, z: &[__m512i; 6], hplan: &BytePlan, qplans: &[BytePlan; 4]) -> [__m512i; 8] {
    let h = gather(t, z, hplan);
    let mut q = [h; 8];
    // SAFETY: `t` proves AVX-512 F/VBMI; the control tables hold 64 bytes each.
    unsafe {
        let bit4 = _mm512_set1_epi8(0x10);
        for (v, plan) in qplans.iter().enumerate() {
            let g = gather(t, z, plan);
            let lo = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(Q5_0_SHIFT[v].as_ptr().cast()), h);
            let hi = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(Q5_0_SHIFT[v + 4].as_ptr().cast()), h);
            q[v] = or_and(t, lo_nibbles(t, g), lo, bit4);
            q[v + 4] = or_and(t, hi_nibbles(t, g), hi, bit4);
        }
    }
    q
}

/// The 5-bit values of a remainder pair of Q5_0 or Q5_1 blocks in `q[0]` (the other vectors
/// unused): `hplan` gathers each block's `qh`, `pplan` its nibble pairs.
#[inline(always)]
fn five_bit_pair(t: Avx512, z: &[__m512i; 2], hplan: &BytePlan, pplan: &BytePlan) -> [__m512i; 8] {
    let mut q = [z[0]; 8];
    // SAFETY: `t` proves AVX-512 F/VBMI; the control table holds 64 bytes.
    unsafe {
        let h = gather(t, z, hplan);
        let high = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(Q5_0_PSHIFT.as_ptr().cast()), h);
        q[0] = or_and(t, nibble_pair(t, gather(t, z, pplan)), high, _mm512_set1_epi8(0x10));
    }
    q
}

impl Format for Q5_0 {
    const ID: u8 = 3;
    const W_GROUP: usize = 16 * 22;
    const X_GROUP: usize = 16 * 34;
    const NQ: usize = 8;
    const W_UNIT: usize = 2 * 22;
    const X_UNIT: usize = 2 * 34;
    const UNIT_NQ: usize = 1;
    const INIT: bool = true;
    const MIN: bool = false;

    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<6>(t, src);
        let q = five_bit_values(t, &z, &Q5_0_H[0], &Q5_0_Q);
        WGroup { q, scale: f16_lo(t, gather_words(t, &z, &Q5_0_D)), min: zero_ps(t) }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_0::<4>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<2>(t, src);
        let q = five_bit_pair(t, &z, &Q5_0_PH, &Q5_0_P);
        WGroup { q, scale: f16_lo(t, gather_words(t, &z, &Q5_0_PD)), min: zero_ps(t) }
    }

    #[inline(always)]
    fn repack_unit(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_0_pair::<4>(t, src, dst);
    }
}

// ---- Q5_1 ----------------------------------------------------------------------------------

/// Q5_1 weights: 16 blocks of `d: f16, m: f16, qh: u32, qs: [u8; 16]` (Q5_0's values with
/// Q4_1's minimum).
pub(super) struct Q5_1;
const Q5_1_Q: [BytePlan; 4] = block_plans(24, 8);
const Q5_1_H: [BytePlan; 1] = block_plans(24, 4);
const Q5_1_DM: WordPlan = word_plan(24, 0, Some(2));
const Q5_1_P: BytePlan = nibble_pair_plan(8, 32);
const Q5_1_PDM: WordPlan = pair_words([0, 24, 2, 26]);
/// Remainder pairs: every dword of the low half holds block A's `qh`, of the high half B's.
const Q5_1_PH: BytePlan = {
    let mut pos = [0u16; 64];
    let mut l = 0;
    while l < 64 {
        pos[l] = if l < 32 { 4 } else { 28 } + (l % 4) as u16;
        l += 1;
    }
    BytePlan::new(pos)
};

impl Format for Q5_1 {
    const ID: u8 = 10;
    const W_GROUP: usize = 16 * 24;
    const X_GROUP: usize = 16 * 36;
    const NQ: usize = 8;
    const W_UNIT: usize = 2 * 24;
    const X_UNIT: usize = 2 * 36;
    const UNIT_NQ: usize = 1;
    const INIT: bool = false;
    const MIN: bool = true;

    /// Values `nibble + 16 · high bit` in 0..32 (high bits placed as Q5_0's), scale `d`,
    /// minimum `m`.
    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<6>(t, src);
        let q = five_bit_values(t, &z, &Q5_1_H[0], &Q5_1_Q);
        let dm = gather_words(t, &z, &Q5_1_DM);
        WGroup { q, scale: f16_lo(t, dm), min: f16_hi(t, dm) }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_1(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<2>(t, src);
        let q = five_bit_pair(t, &z, &Q5_1_PH, &Q5_1_P);
        let dm = gather_words(t, &z, &Q5_1_PDM);
        WGroup { q, scale: f16_lo(t, dm), min: f16_hi(t, dm) }
    }

    #[inline(always)]
    fn repack_unit(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_1_pair(t, src, dst);
    }
}

// ---- Q8_0 ----------------------------------------------------------------------------------

/// Q8_0 weights: 16 blocks of `d: f16, qs: [i8; 32]`, flipped to `q + 128`.
pub(super) struct Q8_0;

impl Format for Q8_0 {
    const ID: u8 = 4;
    const W_GROUP: usize = 16 * 34;
    const X_GROUP: usize = 16 * 34;
    const NQ: usize = 8;
    const W_UNIT: usize = 2 * 34;
    const X_UNIT: usize = 2 * 34;
    const UNIT_NQ: usize = 1;
    const INIT: bool = true;
    const MIN: bool = false;

    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<9>(t, src);
        let mut q = [z[0]; 8];
        // SAFETY: `t` proves AVX-512 F; registers only.
        let flip = unsafe { _mm512_set1_epi8(-128) };
        for (j, plan) in Q8_0_X.iter().enumerate() {
            // SAFETY: as above.
            q[j] = unsafe { _mm512_xor_si512(gather(t, &z, plan), flip) };
        }
        WGroup { q, scale: f16_lo(t, gather_words(t, &z, &Q8_0_XD)), min: zero_ps(t) }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_0::<7>(t, src, dst);
    }

    #[inline(always)]
    fn unpack_unit(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<2>(t, src);
        let mut q = [z[0]; 8];
        // SAFETY: `t` proves AVX-512 F; registers only.
        q[0] = unsafe { _mm512_xor_si512(gather(t, &z, &Q8_0_PX), _mm512_set1_epi8(-128)) };
        WGroup { q, scale: f16_lo(t, gather_words(t, &z, &Q8_0_PXD)), min: zero_ps(t) }
    }

    #[inline(always)]
    fn repack_unit(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_0_pair::<7>(t, src, dst);
    }
}

// ---- Q4_K ----------------------------------------------------------------------------------

/// Q4_K weights, two super-blocks of `d, dmin: f16, scales: [u8; 12], qs: [u8; 128]` per group;
/// lane `8s + j` is sub-block `j` of super-block `s`.
pub(super) struct Q4K;

/// Lane `8s + j`, vector `v`: bytes `32 (j / 2) + 4v ..+ 4` of super-block `s`'s `qs` (low
/// nibbles for even `j`, high nibbles for odd `j`).
const Q4_K_Q: [BytePlan; 8] = {
    let mut plans = [BytePlan::new([0; 64]); 8];
    let mut v = 0;
    while v < 8 {
        let mut base = [0u16; 16];
        let mut l = 0;
        while l < 16 {
            let (s, j) = (l / 8, l % 8);
            base[l] = (144 * s + 16 + 32 * (j / 2) + 4 * v) as u16;
            l += 1;
        }
        plans[v] = BytePlan::lanes(base);
        v += 1;
    }
    plans
};

/// Q8_K activations for Q4_K: lane `8s + j`, vector `v` = values `32j + 4v ..+ 4` of
/// super-block `s`.
const Q8_K_X32: [BytePlan; 8] = {
    let mut plans = [BytePlan::new([0; 64]); 8];
    let mut v = 0;
    while v < 8 {
        let mut base = [0u16; 16];
        let mut l = 0;
        while l < 16 {
            let (s, j) = (l / 8, l % 8);
            base[l] = (292 * s + 4 + 32 * j + 4 * v) as u16;
            l += 1;
        }
        plans[v] = BytePlan::lanes(base);
        v += 1;
    }
    plans
};

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

/// `a` in lanes 0..8, `b` in lanes 8..16.
#[inline(always)]
fn halves(_t: Avx512, a: f32, b: f32) -> __m512 {
    // SAFETY: `_t` proves AVX-512 F/DQ; registers only.
    unsafe { _mm512_insertf32x8::<1>(_mm512_set1_ps(a), _mm256_set1_ps(b)) }
}

/// The 16 unsigned bytes of `a` (lanes 0..8) and `b` (lanes 8..16) as f32.
#[inline(always)]
fn bytes_f32(_t: Avx512, a: u64, b: u64) -> __m512 {
    // SAFETY: `_t` proves AVX-512 F; registers only.
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_set_epi64x(b as i64, a as i64))) }
}

impl Format for Q4K {
    const ID: u8 = 5;
    const W_GROUP: usize = 2 * 144;
    const X_GROUP: usize = 2 * 292;
    const NQ: usize = 8;
    const W_UNIT: usize = 144;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 8;
    const INIT: bool = false;
    const MIN: bool = true;

    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<5>(t, src);
        let mut q = [z[0]; 8];
        // SAFETY: `t` proves AVX-512 F/BW/DQ; registers only.
        unsafe {
            for (v, plan) in Q4_K_Q.iter().enumerate() {
                let g = gather(t, &z, plan);
                // Odd lanes (odd sub-blocks) take the high nibbles.
                q[v] = lo_nibbles(t, _mm512_mask_srli_epi16::<4>(g, 0xcccc_cccc, g));
            }
        }
        let (scale, min) = k32_scales::<144>(t, src);
        WGroup { q, scale, min }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_k32(t, src, dst);
    }
}

/// The per-lane scales `d · sc` and minimums `−dmin · m` of the (one or two) super-blocks of
/// `SB` bytes in `src` that start with `d, dmin: f16, scales: [u8; 12]` (Q4_K, Q5_K); lanes of a
/// missing second super-block get zeros.
#[inline(always)]
fn k32_scales<const SB: usize>(t: Avx512, src: &[u8]) -> (__m512, __m512) {
    let (sc0, m0) = q4_k_scales(&src[4..16]);
    let (d0, dmin0) = (f16_at(t, src), f16_at(t, &src[2..]));
    let ((sc1, m1), d1, dmin1) = if src.len() >= 2 * SB {
        (q4_k_scales(&src[SB + 4..SB + 16]), f16_at(t, &src[SB..]), f16_at(t, &src[SB + 2..]))
    } else {
        ((0, 0), 0.0, 0.0)
    };
    // SAFETY: `t` proves AVX-512 F; registers only.
    unsafe {
        let scale = _mm512_mul_ps(bytes_f32(t, sc0, sc1), halves(t, d0, d1));
        let min = _mm512_mul_ps(bytes_f32(t, m0, m1), halves(t, -dmin0, -dmin1));
        (scale, min)
    }
}

/// Repacks one or two Q8_K activation blocks for the 32-value sub-block formats (Q4_K, Q5_K):
/// the values in [`Q8_K_X32`] lanes, `d`, and the minimum factors `d · Σx`.
#[inline(always)]
fn repack_q8_k32(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
    let z = load::<10>(t, src);
    for (j, plan) in Q8_K_X32.iter().enumerate() {
        dst[j] = gather(t, &z, plan);
    }
    let s = byte_sums(t, &dst[..8]);
    let d1 = if src.len() >= 584 { f32_at(&src[292..]) } else { 0.0 };
    // SAFETY: `t` proves AVX-512 F/DQ; registers only.
    unsafe {
        let d = _mm512_insertf32x8::<1>(_mm512_set1_ps(f32_at(src)), _mm256_set1_ps(d1));
        dst[8] = _mm512_castps_si512(d);
        dst[9] = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(s), d));
        dst[10] = _mm512_setzero_si512();
    }
}

// ---- Q5_K ----------------------------------------------------------------------------------

/// Q5_K weights, two super-blocks of `d, dmin: f16, scales: [u8; 12], qh: [u8; 32],
/// qs: [u8; 128]` per group; lane `8s + j` is sub-block `j` of super-block `s`, as for Q4_K.
pub(super) struct Q5K;

/// Lane `8s + j`, vector `v`: `qs` bytes `32 (j / 2) + 4v ..+ 4` of super-block `s` (in
/// `Q5_K_Q[v]`, low nibbles for even `j`, high nibbles for odd `j`) and `qh` bytes `4v ..+ 4`
/// (in `Q5_K_Q[8 + v]`, bit `j` of each).
const Q5_K_Q: [BytePlan; 16] = {
    let mut plans = [BytePlan::new([0; 64]); 16];
    let mut v = 0;
    while v < 8 {
        let mut qs = [0u16; 16];
        let mut qh = [0u16; 16];
        let mut l = 0;
        while l < 16 {
            let (s, j) = (l / 8, l % 8);
            qs[l] = (176 * s + 48 + 32 * (j / 2) + 4 * v) as u16;
            qh[l] = (176 * s + 16 + 4 * v) as u16;
            l += 1;
        }
        plans[v] = BytePlan::lanes(qs);
        plans[8 + v] = BytePlan::lanes(qh);
        v += 1;
    }
    plans
};

/// Per-lane left rotations bringing bit `j` of every `qh` byte to bit 4 (lane `8s + j`).
const Q5_K_ROT: [u32; 16] = {
    let mut r = [0u32; 16];
    let mut l = 0;
    while l < 16 {
        r[l] = (36 - (l as u32 % 8)) % 32;
        l += 1;
    }
    r
};

impl Format for Q5K {
    const ID: u8 = 9;
    const W_GROUP: usize = 2 * 176;
    const X_GROUP: usize = 2 * 292;
    const NQ: usize = 8;
    const W_UNIT: usize = 176;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 8;
    const INIT: bool = false;
    const MIN: bool = true;

    /// Values `nibble + 16 · high bit` in 0..32, scales and minimums as Q4_K's.
    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<6>(t, src);
        let mut q = [z[0]; 8];
        // SAFETY: `t` proves AVX-512 F/BW; the rotation table holds 16 u32; registers otherwise.
        unsafe {
            let rot = _mm512_loadu_si512(Q5_K_ROT.as_ptr().cast());
            let bit4 = _mm512_set1_epi8(0x10);
            for v in 0..8 {
                let g = gather(t, &z, &Q5_K_Q[v]);
                // Odd lanes (odd sub-blocks) take the high nibbles.
                let nib = lo_nibbles(t, _mm512_mask_srli_epi16::<4>(g, 0xcccc_cccc, g));
                let high = _mm512_rolv_epi32(gather(t, &z, &Q5_K_Q[8 + v]), rot);
                q[v] = or_and(t, nib, high, bit4);
            }
        }
        let (scale, min) = k32_scales::<176>(t, src);
        WGroup { q, scale, min }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_k32(t, src, dst);
    }
}

// ---- Q6_K ----------------------------------------------------------------------------------

/// Q6_K weights, one super-block of `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16` per
/// group; lane `S` is the 16-value sub-block `S = 8h + 2k + m` (half `h`, quarter `k` of the half,
/// which 16 of its 32 positions `m`).
pub(super) struct Q6K;

/// Byte plans for lane `S`, vector `v`: `ql` bytes `64h + 32 (k % 2) + 16m + 4v ..+ 4` (in
/// `Q6_K_Q[v]`) and `qh` bytes `128 + 32h + 16m + 4v ..+ 4` (in `Q6_K_Q[4 + v]`).
const Q6_K_Q: [BytePlan; 8] = {
    let mut plans = [BytePlan::new([0; 64]); 8];
    let mut v = 0;
    while v < 4 {
        let mut ql = [0u16; 16];
        let mut qh = [0u16; 16];
        let mut s = 0;
        while s < 16 {
            let (h, k, m) = (s / 8, (s % 8) / 2, s % 2);
            ql[s] = (64 * h + 32 * (k % 2) + 16 * m + 4 * v) as u16;
            qh[s] = (128 + 32 * h + 16 * m + 4 * v) as u16;
            s += 1;
        }
        plans[v] = BytePlan::lanes(ql);
        plans[4 + v] = BytePlan::lanes(qh);
        v += 1;
    }
    plans
};

/// Per-lane left rotations bringing bits `2k, 2k + 1` of every byte to bits 4, 5.
const Q6_K_ROT: [u32; 16] = {
    let mut r = [0u32; 16];
    let mut s = 0;
    while s < 16 {
        let k = (s % 8) / 2;
        r[s] = (36 - 2 * k as u32) % 32;
        s += 1;
    }
    r
};

/// Q8_K activations for the 16-value sub-block formats (Q3_K, Q6_K): lane `S`, vector `v` =
/// values `16S + 4v ..+ 4`.
const Q8_K_X16: [BytePlan; 4] = block_plans(16, 4);

/// Repacks one Q8_K activation block for a 16-value sub-block format: the values and `d`, then
/// for a format with minimums (`MIN`) the factors `d · Σx` and no start values, otherwise no
/// minimum factors and the start values `−(Σx << SHIFT)` of unsigned weights stored plus
/// `2^SHIFT`.
#[inline(always)]
fn repack_q8_k16<const SHIFT: u32, const MIN: bool>(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
    let z = load::<5>(t, src);
    for (j, plan) in Q8_K_X16.iter().enumerate() {
        dst[j] = gather(t, &z, plan);
    }
    let s = byte_sums(t, &dst[..4]);
    // SAFETY: `t` proves AVX-512 F; registers only.
    unsafe {
        let d = _mm512_set1_ps(f32_at(src));
        dst[4] = _mm512_castps_si512(d);
        if MIN {
            dst[5] = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(s), d));
            dst[6] = _mm512_setzero_si512();
        } else {
            dst[5] = _mm512_setzero_si512();
            dst[6] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<SHIFT>(s));
        }
    }
}

impl Format for Q6K {
    const ID: u8 = 6;
    const W_GROUP: usize = 210;
    const X_GROUP: usize = 292;
    const NQ: usize = 4;
    const W_UNIT: usize = 210;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 4;
    const INIT: bool = true;
    const MIN: bool = false;

    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<4>(t, src);
        let mut q = [z[0]; 8];
        // SAFETY: `t` proves AVX-512 F/BW; the rotation table holds 16 u32; `src` is a whole
        // 210-byte super-block (Q6_K groups have no tail), so bytes 192..208 are in bounds.
        unsafe {
            let rot = _mm512_loadu_si512(Q6_K_ROT.as_ptr().cast());
            let bits45 = _mm512_set1_epi8(0x30);
            for v in 0..4 {
                let ql = gather(t, &z, &Q6_K_Q[v]);
                // Lanes of quarters 2 and 3 take the high nibbles.
                let nib = lo_nibbles(t, _mm512_mask_srli_epi16::<4>(ql, 0xff00_ff00, ql));
                let qh = _mm512_rolv_epi32(gather(t, &z, &Q6_K_Q[4 + v]), rot);
                q[v] = or_and(t, nib, qh, bits45);
            }
            let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(src[192..208].as_ptr().cast())));
            let scale = _mm512_mul_ps(sc, _mm512_set1_ps(f16_at(t, &src[208..])));
            WGroup { q, scale, min: zero_ps(t) }
        }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_k16::<5, false>(t, src, dst);
    }
}

// ---- Q3_K ----------------------------------------------------------------------------------

/// Q3_K weights, one super-block of `hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16`
/// per group; lane `S` is the 16-value sub-block `S = 8h + 2k + m` (half `h`, bit pair `k` of
/// the half's `qs` bytes, which 16 of the 32 bytes `m`), as for Q6_K.
pub(super) struct Q3K;

/// Byte plans for the 2-bit fields of a 16-value sub-block format (Q2_K's and Q3_K's lane
/// `S = 8h + 2k + m`): lane `S` of vector `v` takes bytes `off + half · h + 16m + 4v ..+ 4`.
const fn k16_plans(off: u16, half: u16) -> [BytePlan; 4] {
    let mut plans = [BytePlan::new([0; 64]); 4];
    let mut v = 0;
    while v < 4 {
        let mut base = [0u16; 16];
        let mut s = 0;
        while s < 16 {
            base[s] = off + half * (s as u16 / 8) + 16 * (s as u16 % 2) + 4 * v as u16;
            s += 1;
        }
        plans[v] = BytePlan::lanes(base);
        v += 1;
    }
    plans
}

/// Q3_K's `qs` bytes `32 + 32h + 16m + 4v ..+ 4` for lane `S`, vector `v`.
const Q3_K_QS: [BytePlan; 4] = k16_plans(32, 32);
/// Q3_K's `hmask` bytes `16m + 4v ..+ 4` (the same for both halves).
const Q3_K_HM: [BytePlan; 4] = k16_plans(0, 0);

/// Per-lane right shifts bringing bits `2k, 2k + 1` of every `qs` byte to bits 0, 1 (Q2_K's
/// and Q3_K's lane `S = 8h + 2k + m`).
const K16_SHIFT: [u32; 16] = {
    let mut r = [0u32; 16];
    let mut s = 0;
    while s < 16 {
        r[s] = 2 * ((s as u32 % 8) / 2);
        s += 1;
    }
    r
};

/// Per-lane left rotations bringing bit `4h + k` of every `hmask` byte to bit 2.
const Q3_K_ROT: [u32; 16] = {
    let mut r = [0u32; 16];
    let mut s = 0;
    while s < 16 {
        let bit = 4 * (s as u32 / 8) + (s as u32 % 8) / 2;
        r[s] = (34 - bit) % 32;
        s += 1;
    }
    r
};

impl Format for Q3K {
    const ID: u8 = 7;
    const W_GROUP: usize = 110;
    const X_GROUP: usize = 292;
    const NQ: usize = 4;
    const W_UNIT: usize = 110;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 4;
    const INIT: bool = true;
    const MIN: bool = false;

    /// Values `low + 4 · high` in 0..8 (the stored value plus 4), scales `d · (s − 32)`.
    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<2>(t, src);
        let mut q = [z[0]; 8];
        let mut packed = [0u8; 12];
        packed.copy_from_slice(&src[96..108]);
        let sc = unpack_scales_q3k(&packed);
        // SAFETY: `t` proves AVX-512 F/BW; the shift and rotation tables hold 16 u32 and `sc`
        // 16 bytes; registers otherwise.
        unsafe {
            let shift = _mm512_loadu_si512(K16_SHIFT.as_ptr().cast());
            let rot = _mm512_loadu_si512(Q3_K_ROT.as_ptr().cast());
            let (bits01, bit2) = (_mm512_set1_epi8(0x03), _mm512_set1_epi8(0x04));
            for v in 0..4 {
                let low = _mm512_and_si512(_mm512_srlv_epi32(gather(t, &z, &Q3_K_QS[v]), shift), bits01);
                let high = _mm512_rolv_epi32(gather(t, &z, &Q3_K_HM[v]), rot);
                q[v] = or_and(t, low, high, bit2);
            }
            let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(sc.as_ptr().cast())));
            let scale = _mm512_mul_ps(sc, _mm512_set1_ps(f16_at(t, &src[108..])));
            WGroup { q, scale, min: zero_ps(t) }
        }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_k16::<2, false>(t, src, dst);
    }
}

// ---- Q2_K ----------------------------------------------------------------------------------

/// Q2_K weights, one super-block of `scales: [u8; 16], qs: [u8; 64], d, dmin: f16` per group;
/// lane `S = 8h + 2k + m` is a 16-value sub-block, as for Q3_K.
pub(super) struct Q2K;

/// Lane `S`, vector `v`: `qs` bytes `16 + 32h + 16m + 4v ..+ 4`.
const Q2_K_Q: [BytePlan; 4] = k16_plans(16, 32);

impl Format for Q2K {
    const ID: u8 = 8;
    const W_GROUP: usize = 84;
    const X_GROUP: usize = 292;
    const NQ: usize = 4;
    const W_UNIT: usize = 84;
    const X_UNIT: usize = 292;
    const UNIT_NQ: usize = 4;
    const INIT: bool = false;
    const MIN: bool = true;

    /// Values in 0..4, scales `d · sc`, minimums `−dmin · m`.
    #[inline(always)]
    fn unpack(t: Avx512, src: &[u8]) -> WGroup {
        let z = load::<2>(t, src);
        let mut q = [z[0]; 8];
        // SAFETY: `t` proves AVX-512 F/BW; the shift table holds 16 u32 and `src` a whole
        // 84-byte super-block (bytes 0..16 are its scales); registers otherwise.
        unsafe {
            let shift = _mm512_loadu_si512(K16_SHIFT.as_ptr().cast());
            let bits01 = _mm512_set1_epi8(0x03);
            for (v, plan) in Q2_K_Q.iter().enumerate() {
                q[v] = _mm512_and_si512(_mm512_srlv_epi32(gather(t, &z, plan), shift), bits01);
            }
            let packed = _mm512_cvtepu8_epi32(_mm_loadu_si128(src.as_ptr().cast()));
            let sc = _mm512_cvtepi32_ps(_mm512_and_si512(packed, _mm512_set1_epi32(0x0f)));
            let m = _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(packed));
            let scale = _mm512_mul_ps(sc, _mm512_set1_ps(f16_at(t, &src[80..])));
            let min = _mm512_mul_ps(m, _mm512_set1_ps(-f16_at(t, &src[82..])));
            WGroup { q, scale, min }
        }
    }

    #[inline(always)]
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        repack_q8_k16::<0, true>(t, src, dst);
    }
}
