//! `out = x · Wᵀ` for a weight `W [rows, cols]` in any supported block format and activations
//! `x [n_tok, cols]`.

use ferrolm_kernels::{quant, simd};
use rayon::prelude::*;

use crate::model::weights::Weight;

/// Output rows handed to one task.
const ROW_BLOCK: usize = 16;

/// Tokens of a prompt batch processed together against a block of weight rows.
const TOKEN_TILE: usize = 16;

/// `out [n_tok, w.rows] = x [n_tok, w.cols] · Wᵀ`.
///
/// Quantized weights meet activations quantized once per call to their 8-bit "vec-dot" format
/// (Q8_0, Q8_1 or Q8_K, as llama.cpp does) in integer dot products. Float weights (F32, F16,
/// BF16) dequantize each row once and reuse it for every token.
pub fn matmul(w: &Weight, x: &[f32], n_tok: usize, out: &mut [f32]) {
    debug_assert_eq!(x.len(), n_tok * w.cols);
    debug_assert_eq!(out.len(), n_tok * w.rows);
    match quant::act_row_bytes(w.ty, w.cols) {
        Some(rb) => matmul_q8(w, x, n_tok, rb, out),
        None => matmul_float(w, x, n_tok, out),
    }
}

fn matmul_q8(w: &Weight, x: &[f32], n_tok: usize, rb: usize, out: &mut [f32]) {
    let cols = w.cols;
    // Activations, quantized once: [n_tok, rb] bytes.
    let mut xq = vec![0u8; n_tok * rb];
    let quantize = |(q, xr): (&mut [u8], &[f32])| {
        // Lengths come from act_row_bytes, so this cannot fail.
        let res = quant::quantize_activations(w.ty, xr, q);
        debug_assert!(res.is_ok());
    };
    // A parallel region costs microseconds: not worth it for the few rows of a decode step.
    if n_tok < 8 {
        xq.chunks_mut(rb).zip(x.chunks(cols)).for_each(quantize);
    } else {
        xq.par_chunks_mut(rb).zip(x.par_chunks(cols)).for_each(quantize);
    }
    if n_tok == 1 {
        // Choose the kernel and check the lengths once for the whole matrix.
        let kernel = match quant::VecDot::new(w.ty) {
            Ok(k) if w.rows == 0 || k.check(w.row(0), &xq).is_ok() => k,
            _ => {
                out.fill(f32::NAN);
                return;
            }
        };
        out.par_chunks_mut(ROW_BLOCK).enumerate().for_each(|(b, chunk)| {
            for (j, o) in chunk.iter_mut().enumerate() {
                *o = kernel.dot(w.row(b * ROW_BLOCK + j), &xq);
            }
        });
        return;
    }
    // [rows, n_tok]: each task owns a block of weight rows and walks the tokens in tiles, so a
    // tile's activations and the block's weight rows stay in L1 while they meet; within a tile
    // each weight block is unpacked once per few tokens.
    let mut t_out = vec![0.0f32; w.rows * n_tok];
    t_out.par_chunks_mut(ROW_BLOCK * n_tok).enumerate().for_each(|(b, chunk)| {
        let rows_here = chunk.len() / n_tok;
        for t0 in (0..n_tok).step_by(TOKEN_TILE) {
            let t1 = (t0 + TOKEN_TILE).min(n_tok);
            for j in 0..rows_here {
                let dst = &mut chunk[j * n_tok + t0..j * n_tok + t1];
                if quant::vec_dot_q_rows(w.ty, w.row(b * ROW_BLOCK + j), &xq[t0 * rb..t1 * rb], dst).is_err()
                {
                    dst.fill(f32::NAN);
                }
            }
        }
    });
    transpose_into(&t_out, w.rows, n_tok, out);
}

fn matmul_float(w: &Weight, x: &[f32], n_tok: usize, out: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    if n_tok == 1 {
        out.par_chunks_mut(ROW_BLOCK).enumerate().for_each(|(b, chunk)| {
            for (j, o) in chunk.iter_mut().enumerate() {
                // Lengths were validated when the weight was loaded.
                *o = quant::dot_f32(w.ty, w.row(b * ROW_BLOCK + j), x).unwrap_or(f32::NAN);
            }
        });
        return;
    }
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
    transpose_into(&t_out, rows, n_tok, out);
}

/// `out [n_tok, rows]` from `t [rows, n_tok]`.
fn transpose_into(t: &[f32], rows: usize, n_tok: usize, out: &mut [f32]) {
    out.par_chunks_mut(rows).enumerate().for_each(|(tok, orow)| {
        for (r, o) in orow.iter_mut().enumerate() {
            *o = t[r * n_tok + tok];
        }
    });
}
