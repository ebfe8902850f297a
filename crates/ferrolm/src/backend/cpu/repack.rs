//! The CPU's repacked weights: row-interleaved copies of a weight's whole 16-row tiles that the
//! AVX-512 kernels multiply faster ([`PackedRows`]; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
//! IQ4_NL and IQ4_XS).
//!
//! A copy is made once per weight and kept in the weight's backend slot
//! ([`Weight::backend_data`]): for every matrix at once when a model's placement includes the
//! CPU ([`pack_weights`], through [`crate::backend::Backend::prepare_weights`]), else on the
//! first CPU matmul by the weight. A model placed on another backend alone never makes one.

use std::sync::OnceLock;

use ferrolm_kernels::quant::PackedRows;

use crate::ops::Weight;

/// What the CPU backend keeps with a weight: its packed copy, if it has one.
struct CpuWeight(Option<PackedRows>);

/// The row-interleaved copy of `w` that the CPU's packed kernels read, made on the first call
/// and kept with the weight. `None` where the CPU or the type has no packed kernel, or when
/// `FERROLM_REPACK=0`. The copy has the size of the rows it packs and replaces them in resident
/// memory (their mapped pages are released); the memory map stays for everything else
/// (embedding lookups, other backends).
#[inline]
pub fn packed(w: &Weight) -> Option<&PackedRows> {
    w.backend_data(|w| CpuWeight(repack(w))).and_then(|c| c.0.as_ref())
}

/// Makes the packed copies ([`packed`]) of `weights`, in parallel, so that the first pass does
/// not pay for them. Returns the bytes packed (also those packed before).
pub fn pack_weights(weights: &[&Weight]) -> usize {
    use rayon::prelude::*;
    weights.par_iter().map(|w| packed(w).map_or(0, PackedRows::bytes)).sum()
}

fn repack(w: &Weight) -> Option<PackedRows> {
    if !repack_enabled() || !PackedRows::available(w.ty) {
        return None;
    }
    let p = PackedRows::new(w.ty, w.data(), w.rows, w.cols)?;
    tracing::debug!(ty = %w.ty, rows = w.rows, cols = w.cols, bytes = p.bytes(), "weight repacked for the CPU");
    // The copy replaces the mapped rows in memory: let the system drop their pages (rows still
    // read from the map, such as tied embeddings, come back on demand).
    w.release_rows(p.rows());
    Some(p)
}

/// Whether CPU matmuls may repack weights ([`packed`]): yes unless `FERROLM_REPACK` is `0`,
/// `false` or `off`.
fn repack_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("FERROLM_REPACK")
            .map(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "off"))
            .unwrap_or(true)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ferrolm_kernels::GgmlType;

    /// A 32 x 64 Q8_0 weight (all blocks: scale 1, values 1).
    fn weight() -> Weight {
        let row = [[0x00, 0x3c].as_slice(), &[1u8; 32]].concat().repeat(2);
        Weight::owned(GgmlType::Q8_0, 32, 64, row.repeat(32))
    }

    #[test]
    fn a_weight_kept_as_stored_is_never_repacked() {
        let w = weight();
        w.keep_as_stored();
        assert!(packed(&w).is_none());
        assert!(!w.has_backend_copy());
        assert_eq!(pack_weights(&[&w]), 0);

        // The same weight without the marker is packed wherever the CPU has packed kernels.
        let w = weight();
        let expected = PackedRows::available(w.ty) && repack_enabled();
        assert_eq!(packed(&w).is_some(), expected);
        assert_eq!(w.has_backend_copy(), expected);
        // Once packed, the marker comes too late and changes nothing.
        w.keep_as_stored();
        assert_eq!(packed(&w).is_some(), expected);
    }

    /// Q5_K, IQ4_NL and IQ4_XS matrices whose rows do not fill their last tile: the packed tiles and the
    /// GGUF-layout kernel for the rest give every row the reference dot product, and a token its
    /// result alone in any batch.
    #[test]
    fn matrices_with_a_partial_tile_match_the_reference() {
        partial_tile_matches_the_reference(GgmlType::Q5_K, &[0, 2]);
        partial_tile_matches_the_reference(GgmlType::IQ4_NL, &[0]);
        partial_tile_matches_the_reference(GgmlType::IQ4_XS, &[0]);
    }

    /// See [`matrices_with_a_partial_tile_match_the_reference`]; `scales_at`: the byte offsets of
    /// the f16 scales in a block.
    fn partial_tile_matches_the_reference(ty: GgmlType, scales_at: &[usize]) {
        use ferrolm_kernels::quant::{act_row_bytes, quantize_activations, vec_dot_q};
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let (rows, cols, nt) = (40, 512, 7);
        let rb = ty.row_bytes(cols as u64).unwrap() as usize;
        let mut rng = StdRng::seed_from_u64(5);
        // Random bytes (neither type has a quantizer here) with moderate scales.
        let mut bytes: Vec<u8> = (0..rows * rb).map(|_| rng.random()).collect();
        for blk in bytes.chunks_exact_mut(ty.type_size()) {
            for &at in scales_at {
                let v = half::f16::from_f32(rng.random_range(0.0f32..0.01));
                blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        let w = Weight::owned(ty, rows, cols, bytes.clone());
        let x: Vec<f32> = (0..nt * cols).map(|_| rng.random_range(-2.0..2.0)).collect();
        let (pool, mut xq) = (crate::threads::pool(), Vec::new());
        let mut out = vec![f32::NAN; nt * rows];
        super::super::matmul(&pool, &w, &x, nt, &mut out, &mut xq);
        let packs = PackedRows::available(ty) && repack_enabled();
        assert_eq!(packed(&w).map(PackedRows::rows), packs.then_some(32));
        let mut xt = vec![0u8; act_row_bytes(ty, cols).unwrap()];
        let mut alone = vec![f32::NAN; rows];
        for t in 0..nt {
            let x_t = &x[t * cols..(t + 1) * cols];
            quantize_activations(ty, x_t, &mut xt).unwrap();
            let got = &out[t * rows..(t + 1) * rows];
            for (r, &v) in got.iter().enumerate() {
                let want = vec_dot_q(ty, &bytes[r * rb..(r + 1) * rb], &xt).unwrap();
                assert!((v - want).abs() <= 1e-4 * want.abs().max(1.0), "token {t} row {r}: {v} vs {want}");
            }
            super::super::matmul(&pool, &w, x_t, 1, &mut alone, &mut xq);
            assert!(got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()), "token {t}");
        }
    }
}
