//! Row-interleaved ("packed") copies of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K weights for
//! the AVX-512 level: the small-batch and prompt GEMM kernel that keeps one weight *row* per 32-bit lane.
//!
//! # Why
//!
//! The GGUF-layout kernels ([`super::VecDot`]) keep one *block* per lane, so every weight row ends
//! with a horizontal sum per token, and a row of 576 values (SmolLM2's width: 18 blocks) is one
//! 16-block group plus a remainder pair that costs nearly as much as the group. With several
//! tokens per pass (a server's generating slots) that overhead, not the `vpdpbusd` work, bounds
//! the speed. Here lane `r` of every vector belongs to row `r` of a 16-row *tile*, so the products
//! of one block are 8 `vpdpbusd` per token with the token's 4-byte activation groups broadcast
//! from memory, the block scales are one vector per tile, and a token's 16 results are one store.
//!
//! # Layout
//!
//! Rows are grouped in tiles of [`TILE_ROWS`]; the rows past the last whole tile are not packed
//! (callers run them through [`super::VecDot`]). A tile of `nb` blocks is `nb` value groups, then
//! `nb` scale groups:
//!
//! - value group of block `b` (4-bit formats, 256 bytes): four 64-byte vectors; lane `r` of vector
//!   `k` holds bytes `4k..4k+4` of row `r`'s block (low nibbles: values `4k..4k+4`, high nibbles:
//!   values `16+4k..16+4k+4`);
//! - value group (5-bit formats, 320 bytes): the four nibble vectors as above, then one vector
//!   whose lane `r` holds row `r`'s 32 high bits `qh` (bit `v`: value `v`), as stored;
//! - value group (Q8_0, 512 bytes): eight vectors; lane `r` of vector `j` holds values
//!   `4j..4j+4` of row `r`'s block, each XOR 0x80 (`w + 128`, unsigned for `vpdpbusd`);
//! - scale group: the 16 rows' `d` (f16), then for Q4_1 and Q5_1 their `m` (f16).
//!
//! Q4_K blocks are super-blocks of 256 values (2048 + 256 bytes a tile):
//!
//! - value group: 32 vectors; lane `r` of vector `8c + k` holds bytes `4k..4k+4` of chunk `c`
//!   of row `r`'s `qs` (low nibbles: sub-block `2c`, values `4k..4k+4`; high nibbles: sub-block
//!   `2c + 1`);
//! - scale group: the 16 rows' `d` (f16), their `dmin` (f16), then three vectors whose lane `r`
//!   holds bytes `4v..4v+4` of row `r`'s 12 packed 6-bit scales and minimums.
//!
//! Q5_K tiles are Q4_K tiles whose value group has 8 more vectors (2560 + 256 bytes a tile):
//! lane `r` of vector `32 + k` holds bytes `4k..4k+4` of row `r`'s `qh`, as stored (bit `j` of
//! `qh[l]`: the fifth bit of value `l` of sub-block `j`), so the same vector serves the value
//! vectors `8c + k` of every chunk `c`.
//!
//! IQ4_NL tiles are Q4_0 tiles. IQ4_XS tiles (2048 + 128 bytes a tile) hold per super-block 32
//! nibble vectors, four per 32-value sub-block as Q4_0's block (lane `r` of vector `4j + k`:
//! bytes `4k..4k+4` of row `r`'s 16 bytes of sub-block `j`), then a scale group: the rows' `d`
//! (f16), their `scales_h` (u16) and their `scales_l` (4 bytes a lane).
//!
//! Q6_K is not packed: its GGUF-layout kernel already keeps one 16-value sub-block per lane and
//! applies the sixteen scales with one multiply, where a row-per-lane tile must scale each
//! sub-block's sums on its own (measured 10% slower than the GGUF-layout kernel).
//!
//! The copy has exactly the size of the rows it replaces. Integer sums are exact; only the f32
//! accumulation order differs from [`super::VecDot`] (as between any two kernel levels), and it
//! does not depend on how many tokens or rows a call gets: a token's result is the same alone or
//! in any batch.

use std::ops::Range;

use crate::GgmlType;

/// Rows per tile (one per 32-bit lane of a 512-bit vector).
pub const TILE_ROWS: usize = 16;

/// A 64-byte aligned line of packed bytes.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The packed formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    /// IQ4_NL: Q4_0's layout, each nibble an index into [`KVALUES_IQ4NL`](super::formats::iq4_nl::KVALUES_IQ4NL).
    Iq4Nl,
    /// IQ4_XS: super-blocks of 256 IQ4_NL levels with a 6-bit scale per 32 values.
    Iq4Xs,
}

impl Kind {
    fn of(ty: GgmlType) -> Option<Kind> {
        match ty {
            GgmlType::Q4_0 => Some(Kind::Q4_0),
            GgmlType::Q4_1 => Some(Kind::Q4_1),
            GgmlType::Q5_0 => Some(Kind::Q5_0),
            GgmlType::Q5_1 => Some(Kind::Q5_1),
            GgmlType::Q8_0 => Some(Kind::Q8_0),
            GgmlType::Q4_K => Some(Kind::Q4K),
            GgmlType::Q5_K => Some(Kind::Q5K),
            GgmlType::IQ4_NL => Some(Kind::Iq4Nl),
            GgmlType::IQ4_XS => Some(Kind::Iq4Xs),
            _ => None,
        }
    }

    /// Whether the format has a minimum `m` per block (its activations are Q8_1, whose `s = d·Σx`
    /// the kernel multiplies by `m`).
    pub(super) const fn has_min(self) -> bool {
        matches!(self, Kind::Q4_1 | Kind::Q5_1)
    }

    /// Whether the format stores a fifth bit per value (`qh`, after the nibbles).
    pub(super) const fn has_qh(self) -> bool {
        matches!(self, Kind::Q5_0 | Kind::Q5_1 | Kind::Q5K)
    }

    /// The integer offset of the stored values (`w = stored + offset`), for formats without a
    /// minimum: the packed kernel starts each block's sum at `offset·Σx`.
    const fn offset(self) -> i32 {
        match self {
            Kind::Q4_0 => -8,
            Kind::Q5_0 => -16,
            // Q8_0's stored bytes are `w + 128`; IQ4_NL's kernel looks each nibble up as level + 128.
            Kind::Q8_0 | Kind::Iq4Nl => -128,
            Kind::Q4_1 | Kind::Q5_1 | Kind::Q4K | Kind::Q5K | Kind::Iq4Xs => 0,
        }
    }

    /// Values per block (a K-quant's super-block).
    pub(super) const fn block_values(self) -> usize {
        if self.is_k() { 256 } else { 32 }
    }

    /// Whether the format is a K-quant (super-blocks of 256 values, Q8_K activations).
    pub(super) const fn is_k(self) -> bool {
        matches!(self, Kind::Q4K | Kind::Q5K | Kind::Iq4Xs)
    }

    /// Integers per token and block in [`PackedActs::sums`]: the K-quants' four pairs of sub-block
    /// sums.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read by the x86 kernel only
    pub(super) const fn act_sums(self) -> usize {
        if self.is_k() { 4 } else { 0 }
    }

    /// Bytes of one weight block in GGUF layout.
    pub(super) const fn block_bytes(self) -> usize {
        match self {
            Kind::Q4_0 | Kind::Iq4Nl => 18,
            Kind::Q4_1 => 20,
            Kind::Q5_0 => 22,
            Kind::Q5_1 => 24,
            Kind::Q8_0 => 34,
            Kind::Q4K => 144,
            Kind::Q5K => 176,
            Kind::Iq4Xs => 136,
        }
    }

    /// Bytes of one block of the activations' format (Q8_1 for Q4_1 and Q5_1, Q8_K for the
    /// K-quants, Q8_0 otherwise).
    pub(super) const fn act_bytes(self) -> usize {
        match self {
            _ if self.is_k() => 292,
            _ if self.has_min() => 36,
            _ => 34,
        }
    }

    /// Bytes of a tile's value group per block.
    pub(super) const fn q_bytes(self) -> usize {
        match self {
            Kind::Q4_0 | Kind::Q4_1 | Kind::Iq4Nl => 256,
            Kind::Q5_0 | Kind::Q5_1 => 320,
            Kind::Q8_0 => 512,
            Kind::Q4K | Kind::Iq4Xs => 2048,
            Kind::Q5K => 2560,
        }
    }

    /// Bytes of a tile's scale group per block.
    pub(super) const fn s_bytes(self) -> usize {
        match self {
            Kind::Iq4Xs => 128,
            _ if self.is_k() => 256,
            _ if self.has_min() => 64,
            _ => 32,
        }
    }

    /// Packs block `b` of the tile's 16 rows (`rows[r]`: row `r`'s GGUF bytes).
    fn pack_block(self, rows: &[&[u8]; TILE_ROWS], b: usize, q: &mut [u8], s: &mut [u8]) {
        let bb = self.block_bytes();
        for (r, row) in rows.iter().enumerate() {
            let src = &row[b * bb..(b + 1) * bb];
            s[2 * r..2 * r + 2].copy_from_slice(&src[0..2]);
            match self {
                Kind::Q4_0 | Kind::Q4_1 | Kind::Q5_0 | Kind::Q5_1 | Kind::Iq4Nl => {
                    let mut at = 2;
                    if self.has_min() {
                        s[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&src[2..4]);
                        at = 4;
                    }
                    if self.has_qh() {
                        q[256 + 4 * r..256 + 4 * r + 4].copy_from_slice(&src[at..at + 4]);
                        at += 4;
                    }
                    let qs = &src[at..at + 16];
                    for k in 0..4 {
                        q[64 * k + 4 * r..64 * k + 4 * r + 4].copy_from_slice(&qs[4 * k..4 * k + 4]);
                    }
                }
                Kind::Q4K | Kind::Q5K => {
                    s[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&src[2..4]);
                    for v in 0..3 {
                        s[64 + 64 * v + 4 * r..64 + 64 * v + 4 * r + 4]
                            .copy_from_slice(&src[4 + 4 * v..8 + 4 * v]);
                    }
                    // Q5_K: `qh` (32 bytes) between the scales and `qs`, packed after the nibbles.
                    let qs_at = if self.has_qh() { 48 } else { 16 };
                    let words = src[qs_at..bb].chunks_exact(4).chain(src[16..qs_at].chunks_exact(4));
                    for (i, word) in words.enumerate() {
                        q[64 * i + 4 * r..64 * i + 4 * r + 4].copy_from_slice(word);
                    }
                }
                Kind::Iq4Xs => {
                    s[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&src[2..4]);
                    s[64 + 4 * r..64 + 4 * r + 4].copy_from_slice(&src[4..8]);
                    // Sub-block `j`'s 16 bytes of nibbles as four vectors, as Q4_0's block.
                    for (i, word) in src[8..bb].chunks_exact(4).enumerate() {
                        q[64 * i + 4 * r..64 * i + 4 * r + 4].copy_from_slice(word);
                    }
                }
                Kind::Q8_0 => {
                    for j in 0..8 {
                        for (i, &v) in src[2 + 4 * j..2 + 4 * j + 4].iter().enumerate() {
                            q[64 * j + 4 * r + i] = v ^ 0x80;
                        }
                    }
                }
            }
        }
    }
}

/// The kernel of one packed format: `(tiles, blocks per row, acts, tokens, out, ldo)`, see
/// [`PackedRows::gemm_ptr`].
pub(super) type PackedFn = unsafe fn(&[u8], usize, &PackedActs<'_>, Range<usize>, *mut f32, usize);

/// One token's block of activations as the packed kernel reads it: the f32 scale, and the Q4_1 and
/// Q5_1 term `s = d·Σx` (f32 bits) or the integer start value (`−8·Σx` for Q4_0, `−16·Σx` for
/// Q5_0, `−128·Σx` for Q8_0, whose packed weights are `w + 128`).
///
/// For the K-quants (Q8_K activations) `d` is the super-block's f32 scale and `extra` is unused:
/// their integer terms are in [`PackedActs::sums`].
#[derive(Clone, Copy, Default)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read by the x86 kernel only
pub(super) struct ActBlock {
    pub(super) d: f32,
    pub(super) extra: u32,
}

/// Activation rows prepared for a packed weight: the quantized rows
/// ([`super::quantize_activations`]) and, per token and block, the scalars the kernel needs
/// ([`PackedRows::prepare`]). Reuse one across calls: preparing only grows its buffer.
#[derive(Default)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read by the x86 kernel only
pub struct PackedActs<'a> {
    kind: Option<Kind>,
    pub(super) xq: &'a [u8],
    pub(super) x_rb: usize,
    pub(super) nb: usize,
    nt: usize,
    pub(super) blocks: Vec<ActBlock>,
    /// K-quants only, [`Kind::act_sums`] integers per token and super-block: the sums of the eight
    /// 32-value sub-blocks as four pairs of i16 (sub-block `2p` in the low half of word `p`).
    pub(super) sums: Vec<i32>,
}

impl<'a> PackedActs<'a> {
    /// Tokens prepared.
    pub fn tokens(&self) -> usize {
        self.nt
    }

    /// Gives the buffer back for another preparation, with activations of another lifetime.
    pub fn recycle<'b>(self) -> PackedActs<'b> {
        PackedActs { kind: None, xq: &[], x_rb: 0, nb: 0, nt: 0, blocks: self.blocks, sums: self.sums }
    }
}

/// The whole 16-row tiles of a Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K or Q5_K weight matrix in the
/// row-interleaved layout, with the AVX-512 kernel that multiplies them (see the module
/// documentation).
pub struct PackedRows {
    kind: Kind,
    ty: GgmlType,
    nb: usize,
    tiles: usize,
    data: Vec<Line>,
    kernel: PackedFn,
}

impl std::fmt::Debug for PackedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedRows({}, {} rows x {} blocks)", self.ty, self.rows(), self.nb)
    }
}

impl PackedRows {
    /// Whether [`PackedRows::new`] packs weights of type `ty` on this CPU (at the level
    /// [`crate::Isa::best`] chose, so `FERROLM_ISA` below `avx512` turns packing off).
    pub fn available(ty: GgmlType) -> bool {
        Self::kernel(ty).is_some()
    }

    fn kernel(ty: GgmlType) -> Option<PackedFn> {
        let kind = Kind::of(ty)?;
        #[cfg(target_arch = "x86_64")]
        if crate::Isa::best() == crate::Isa::Avx512 {
            return Some(super::x86::avx512_packed::kernel(kind));
        }
        let _ = kind;
        None
    }

    /// Packs the whole tiles of `rows` rows of `cols` values of type `ty` stored in `w` (GGUF
    /// layout, rows contiguous). `None` when this CPU or type has no packed kernel, when no
    /// whole tile exists, or when `w` does not hold `rows` such rows.
    pub fn new(ty: GgmlType, w: &[u8], rows: usize, cols: usize) -> Option<PackedRows> {
        let kernel = Self::kernel(ty)?;
        let kind = Kind::of(ty)?;
        let rb = ty.row_bytes(cols as u64).map(|b| b as usize)?;
        let bv = kind.block_values();
        if !cols.is_multiple_of(bv) || cols == 0 || w.len() != rows.checked_mul(rb)? {
            return None;
        }
        let nb = cols / bv;
        let tiles = rows / TILE_ROWS;
        if tiles == 0 {
            return None;
        }
        let tile_bytes = nb * (kind.q_bytes() + kind.s_bytes());
        let mut data = vec![Line([0; 64]); (tiles * tile_bytes).div_ceil(64)];
        // SAFETY: `Line` is 64 plain bytes with no padding; the slice covers exactly the vector.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), data.len() * 64) };
        for (i, tile) in bytes.chunks_exact_mut(tile_bytes).take(tiles).enumerate() {
            let rows: [&[u8]; TILE_ROWS] =
                std::array::from_fn(|r| &w[(i * TILE_ROWS + r) * rb..(i * TILE_ROWS + r + 1) * rb]);
            let (q, s) = tile.split_at_mut(nb * kind.q_bytes());
            for b in 0..nb {
                let qb = &mut q[b * kind.q_bytes()..(b + 1) * kind.q_bytes()];
                let sb = &mut s[b * kind.s_bytes()..(b + 1) * kind.s_bytes()];
                kind.pack_block(&rows, b, qb, sb);
            }
        }
        Some(PackedRows { kind, ty, nb, tiles, data, kernel })
    }

    /// The weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Rows packed: the whole tiles, `rows / TILE_ROWS * TILE_ROWS` of the matrix.
    pub fn rows(&self) -> usize {
        self.tiles * TILE_ROWS
    }

    /// Bytes of the packed copy.
    pub fn bytes(&self) -> usize {
        self.tiles * self.tile_bytes()
    }

    fn tile_bytes(&self) -> usize {
        self.nb * (self.kind.q_bytes() + self.kind.s_bytes())
    }

    /// Prepares `nt` activation rows `xq`, quantized by [`super::quantize_activations`] for this
    /// weight type, into `acts` (whose buffer is reused).
    ///
    /// # Panics
    /// If `xq` does not hold `nt` activation rows of the matrix's width.
    pub fn prepare<'x>(&self, xq: &'x [u8], nt: usize, acts: PackedActs<'_>) -> PackedActs<'x> {
        let ab = self.kind.act_bytes();
        let x_rb = self.nb * ab;
        assert_eq!(xq.len(), nt * x_rb, "packed gemm: activation bytes");
        let (mut blocks, mut sums) = (acts.blocks, acts.sums);
        blocks.clear();
        sums.clear();
        if self.kind.is_k() {
            for blk in xq.chunks_exact(ab) {
                let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
                blocks.push(ActBlock { d, extra: 0 });
                // Q8_K's sums of 16-value groups, added up per 32-value sub-block (|Σ| <= 32·127:
                // an i16), paired.
                let bs = |i: usize| i16::from_le_bytes([blk[260 + 2 * i], blk[261 + 2 * i]]);
                let sum = |s: usize| (bs(2 * s) + bs(2 * s + 1)) as u16 as u32;
                sums.extend((0..4).map(|p| (sum(2 * p) | (sum(2 * p + 1) << 16)) as i32));
            }
            return PackedActs { kind: Some(self.kind), xq, x_rb, nb: self.nb, nt, blocks, sums };
        }
        for blk in xq.chunks_exact(ab) {
            let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            let extra = if self.kind.has_min() {
                half::f16::from_le_bytes([blk[2], blk[3]]).to_f32().to_bits()
            } else {
                let sum: i32 = blk[2..34].iter().map(|&v| i32::from(v as i8)).sum();
                (self.kind.offset() * sum) as u32
            };
            blocks.push(ActBlock { d, extra });
        }
        PackedActs { kind: Some(self.kind), xq, x_rb, nb: self.nb, nt, blocks, sums }
    }

    /// `out[t * ldo + (r - rows.start)] = w_r · x_t` for rows `rows` (whole tiles: both ends
    /// multiples of [`TILE_ROWS`], at most [`PackedRows::rows`]) and every token of `acts`.
    ///
    /// # Panics
    /// If `rows` is not a range of whole packed tiles, `acts` was prepared for another format or
    /// width, or `out` is too short: a caller's bug, never a property of input.
    pub fn gemm(&self, rows: Range<usize>, acts: &PackedActs<'_>, out: &mut [f32], ldo: usize) {
        let (nt, n) = (acts.nt, rows.end.saturating_sub(rows.start));
        assert!(
            nt == 0 || n == 0 || (ldo >= n && out.len() >= (nt - 1) * ldo + n),
            "packed gemm: output too short"
        );
        // SAFETY: the output covers every index written (checked above) and is exclusively ours.
        unsafe { self.gemm_ptr(rows, acts, 0..nt, out.as_mut_ptr(), ldo) }
    }

    /// [`PackedRows::gemm`] for tokens `tokens` of `acts` only, into a raw output: token `t`'s
    /// results go to `out + (t - tokens.start)·ldo`, so that threads computing other rows of the
    /// same output rows can write at the same time.
    ///
    /// # Safety
    /// For every token `t` of `tokens`, `out + (t - tokens.start)·ldo .. + rows.len()` must be
    /// valid for writes and not accessed by anyone else during the call.
    ///
    /// # Panics
    /// As [`PackedRows::gemm`], or if `tokens` is not within `acts`.
    pub unsafe fn gemm_ptr(
        &self,
        rows: Range<usize>,
        acts: &PackedActs<'_>,
        tokens: Range<usize>,
        out: *mut f32,
        ldo: usize,
    ) {
        assert!(
            rows.start.is_multiple_of(TILE_ROWS)
                && rows.end.is_multiple_of(TILE_ROWS)
                && rows.end <= self.rows(),
            "packed gemm: rows {rows:?} are not whole tiles of {}",
            self.rows()
        );
        assert!(
            acts.kind == Some(self.kind) && acts.nb == self.nb,
            "packed gemm: activations of another weight type"
        );
        assert!(tokens.end <= acts.nt, "packed gemm: tokens {tokens:?} of {}", acts.nt);
        if rows.is_empty() || tokens.is_empty() {
            return;
        }
        let tb = self.tile_bytes();
        // SAFETY: `Line` is 64 plain bytes; the slice covers the initialised vector.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.data.as_ptr().cast::<u8>(), self.data.len() * 64) };
        let tiles = &bytes[rows.start / TILE_ROWS * tb..rows.end / TILE_ROWS * tb];
        // SAFETY: the kernel was chosen for this CPU (`PackedRows::kernel`); shapes checked
        // above; the output contract is the caller's.
        unsafe { (self.kernel)(tiles, self.nb, acts, tokens, out, ldo) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{act_row_bytes, quantize_activations, quantize_row, vec_dot_q};
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// `rows` rows of `cols` values of `ty`: quantized from uniform data where a quantizer
    /// exists, else random bytes with `d` (and Q5_K's `dmin`) in `0..0.01` (Q5_K: every value's
    /// fifth bit random; IQ4_NL, IQ4_XS: every level and sub-block scale).
    fn random_rows(ty: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> Vec<u8> {
        let rb = ty.row_bytes(cols as u64).expect("whole blocks") as usize;
        let mut w = vec![0u8; rows * rb];
        for row in w.chunks_exact_mut(rb) {
            let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            if quantize_row(ty, &x, row).is_ok() {
                continue;
            }
            assert!(
                matches!(ty, GgmlType::Q5_K | GgmlType::IQ4_NL | GgmlType::IQ4_XS),
                "{ty}: a packed format without a quantizer"
            );
            rng.fill(&mut row[..]);
            let scales: &[usize] = if ty == GgmlType::Q5_K { &[0, 2] } else { &[0] };
            for blk in row.chunks_exact_mut(ty.type_size()) {
                for &at in scales {
                    let v = half::f16::from_f32(rng.random_range(0.0f32..0.01));
                    blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        w
    }

    /// Every packed format against the reference dot product, for row counts with and without a
    /// partial tile, widths with one and several blocks, and token counts across the kernel's
    /// token tiles; a token's result is bit-identical however many tokens the call has.
    #[test]
    fn packed_gemm_matches_the_reference_dot_and_is_batch_independent() {
        let mut rng = StdRng::seed_from_u64(11);
        use GgmlType::*;
        for ty in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, IQ4_NL, IQ4_XS] {
            if !PackedRows::available(ty) {
                eprintln!("no packed kernel for {ty} on this CPU");
                continue;
            }
            let shapes: &[(usize, usize)] = if matches!(ty, Q4_K | Q5_K | IQ4_XS) {
                &[(16, 256), (48, 512), (37, 1536)]
            } else {
                &[(16, 32), (48, 576), (37, 1536), (32, 64)]
            };
            for &(rows, cols) in shapes {
                let rb = ty.row_bytes(cols as u64).expect("whole blocks") as usize;
                let w = random_rows(ty, rows, cols, &mut rng);
                let p = PackedRows::new(ty, &w, rows, cols).expect("packable");
                assert_eq!(p.rows(), rows / 16 * 16);
                assert_eq!(p.bytes(), p.rows() * rb, "the copy has the size of the rows it packs");
                let xrb = act_row_bytes(ty, cols).expect("act format");
                let nt_max = 19;
                let mut xq = vec![0u8; nt_max * xrb];
                for row in xq.chunks_exact_mut(xrb) {
                    let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-2.0f32..2.0)).collect();
                    quantize_activations(ty, &x, row).expect("quantize activations");
                }
                let n = p.rows();
                let mut alone = vec![0f32; nt_max * n];
                let mut acts = PackedActs::default();
                for t in 0..nt_max {
                    acts = p.prepare(&xq[t * xrb..(t + 1) * xrb], 1, acts.recycle());
                    p.gemm(0..n, &acts, &mut alone[t * n..(t + 1) * n], n);
                    for r in 0..n {
                        let want = vec_dot_q(ty, &w[r * rb..(r + 1) * rb], &xq[t * xrb..(t + 1) * xrb])
                            .expect("dot");
                        let got = alone[t * n + r];
                        assert!(
                            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                            "{ty} {rows}x{cols} t{t} r{r}"
                        );
                    }
                }
                for nt in [2, 3, 5, 8, 9, 16, 19] {
                    // A sub-range of tiles, written with a wider output stride.
                    let (r0, r1) = if n > 16 { (16, n) } else { (0, n) };
                    let ldo = r1 - r0 + 3;
                    let mut out = vec![f32::NAN; nt * ldo];
                    acts = p.prepare(&xq[..nt * xrb], nt, acts.recycle());
                    p.gemm(r0..r1, &acts, &mut out, ldo);
                    for t in 0..nt {
                        for r in r0..r1 {
                            assert_eq!(
                                out[t * ldo + r - r0].to_bits(),
                                alone[t * n + r].to_bits(),
                                "{ty} nt{nt}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// No packing for other types, partial-only matrices or wrong byte counts.
    #[test]
    fn packing_refuses_what_it_cannot_pack() {
        assert!(PackedRows::new(GgmlType::Q6_K, &[0; 210 * 16], 16, 256).is_none());
        assert!(PackedRows::new(GgmlType::Q4_1, &[0; 20 * 15], 15, 32).is_none());
        assert!(PackedRows::new(GgmlType::Q4_1, &[0; 20 * 16 - 1], 16, 32).is_none());
    }
}
