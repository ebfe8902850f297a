//! `out = x · Wᵀ` for a quantized weight `W [rows, cols]` and activations `x [n_tok, cols]`.

use ferrolm_kernels::{quant, simd};
use rayon::prelude::*;

use crate::model::weights::Weight;

/// Output rows handed to one task.
const ROW_BLOCK: usize = 16;

/// `out [n_tok, w.rows] = x [n_tok, w.cols] · Wᵀ`.
///
/// A single token (decode) takes the fused quantized-row · f32 dot product per row. Several
/// tokens (prefill) dequantize each weight row once and reuse it for every token, so the cost
/// of decoding the weights is paid once per batch, not once per token.
pub fn matmul(w: &Weight, x: &[f32], n_tok: usize, out: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    debug_assert_eq!(x.len(), n_tok * cols);
    debug_assert_eq!(out.len(), n_tok * rows);
    if n_tok == 1 {
        out.par_chunks_mut(ROW_BLOCK).enumerate().for_each(|(b, chunk)| {
            for (j, o) in chunk.iter_mut().enumerate() {
                // Lengths were validated when the weight was loaded.
                *o = quant::dot_f32(w.ty, w.row(b * ROW_BLOCK + j), x).unwrap_or(f32::NAN);
            }
        });
        return;
    }
    // [rows, n_tok]: each task owns a contiguous block of weight rows.
    let mut t_out = vec![0.0f32; rows * n_tok];
    t_out.par_chunks_mut(ROW_BLOCK * n_tok).enumerate().for_each_init(
        || vec![0.0f32; cols],
        |row_buf, (b, chunk)| {
            for (j, dst) in chunk.chunks_exact_mut(n_tok).enumerate() {
                w.dequantize_row(b * ROW_BLOCK + j, row_buf);
                for (t, d) in dst.iter_mut().enumerate() {
                    *d = simd::dot_f32(row_buf, &x[t * cols..(t + 1) * cols]);
                }
            }
        },
    );
    // Transpose to [n_tok, rows].
    out.par_chunks_mut(rows).enumerate().for_each(|(t, orow)| {
        for (r, o) in orow.iter_mut().enumerate() {
            *o = t_out[r * n_tok + t];
        }
    });
}
