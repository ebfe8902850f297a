//! Matrix products and row gathers on quantized weights (kernels in `kernels/quant.cl`).
//!
//! A product with a quantized weight runs two kernels: the activations are quantized on the
//! device into the weight type's 8-bit "vec_dot type" (Q8_0, Q8_1 or Q8_K, bit for bit as
//! [`quant::quantize_activations`] does on the CPU) into scratch slot 0, then one work group of
//! [`MM_WG`] work items per (output row, token) takes the integer dot products of the row's
//! blocks with the token's quantized blocks and sums them. Float weights (F32, F16, BF16) are
//! multiplied by the f32 activations directly. A gather dequantizes one value per work item.

use ferrolm_kernels::quant;

use super::{Arg, Device, DeviceView};
use crate::GgmlType;
use crate::backend::{BackendError, BackendResult};
use crate::ops::Weight;

/// Work items per matmul work group (`MM_WG` in `quant.cl`).
const MM_WG: usize = 64;

/// Tokens per work group of the tiled kernels (`MM_TT` in `quant.cl`).
const MM_TT: usize = 8;

/// Scratch slot of the quantized activations.
const XQ_SLOT: usize = 0;

/// The kernels of one weight type.
#[derive(Clone, Copy, Debug)]
struct Kernels {
    /// The matmul kernel (`mm_*`).
    matmul: &'static str,
    /// Its tiled form (`mmt_*`), for batches of at least [`MM_TT`] tokens.
    tiled: &'static str,
    /// The activation quantizer (`q_act_*`) and the values per activation block; `None` for float
    /// weights, which take the f32 activations.
    act: Option<(&'static str, usize)>,
    /// The gather kernel (`q_get_*`).
    gather: &'static str,
}

/// The kernels for weights of type `ty`, `None` when there are none.
fn kernels(ty: GgmlType) -> Option<Kernels> {
    use GgmlType::*;
    const ACT_Q8_0: Option<(&str, usize)> = Some(("q_act_q8_0", 32));
    const ACT_Q8_1: Option<(&str, usize)> = Some(("q_act_q8_1", 32));
    const ACT_Q8_K: Option<(&str, usize)> = Some(("q_act_q8_k", quant::QK_K));
    let k = |matmul, tiled, act, gather| Some(Kernels { matmul, tiled, act, gather });
    match ty {
        F32 => k("mm_f32", "mmt_f32", None, "q_get_f32"),
        F16 => k("mm_f16", "mmt_f16", None, "q_get_f16"),
        BF16 => k("mm_bf16", "mmt_bf16", None, "q_get_bf16"),
        Q4_0 => k("mm_q4_0", "mmt_q4_0", ACT_Q8_0, "q_get_q4_0"),
        Q4_1 => k("mm_q4_1", "mmt_q4_1", ACT_Q8_1, "q_get_q4_1"),
        Q5_0 => k("mm_q5_0", "mmt_q5_0", ACT_Q8_0, "q_get_q5_0"),
        Q5_1 => k("mm_q5_1", "mmt_q5_1", ACT_Q8_1, "q_get_q5_1"),
        Q8_0 => k("mm_q8_0", "mmt_q8_0", ACT_Q8_0, "q_get_q8_0"),
        Q2_K => k("mm_q2_k", "mmt_q2_k", ACT_Q8_K, "q_get_q2_k"),
        Q3_K => k("mm_q3_k", "mmt_q3_k", ACT_Q8_K, "q_get_q3_k"),
        Q4_K => k("mm_q4_k", "mmt_q4_k", ACT_Q8_K, "q_get_q4_k"),
        Q5_K => k("mm_q5_k", "mmt_q5_k", ACT_Q8_K, "q_get_q5_k"),
        Q6_K => k("mm_q6_k", "mmt_q6_k", ACT_Q8_K, "q_get_q6_k"),
        _ => None,
    }
}

/// Whether [`matmul`] and [`gather`] handle this weight type.
pub(super) fn supports(ty: GgmlType) -> bool {
    kernels(ty).is_some()
}

/// The error for a weight type without kernels.
fn unsupported_type<D: Device>(ty: GgmlType) -> BackendError {
    BackendError::Unsupported { backend: D::NAME, what: format!("{ty} weights") }
}

/// The error for arguments that do not fit together (a caller's bug, reported instead of a
/// panic or an out-of-bounds kernel).
fn bad_shape<D: Device>(what: String) -> BackendError {
    BackendError::Unsupported { backend: D::NAME, what }
}

/// `v` as a kernel's `uint` argument.
fn to_u32<D: Device>(v: usize, what: &str) -> BackendResult<u32> {
    u32::try_from(v).map_err(|_| bad_shape::<D>(format!("{what} of {v} (over u32::MAX)")))
}

/// The kernels for `w`, after checking that its rows are whole blocks.
fn kernels_for<D: Device>(w: &Weight) -> BackendResult<Kernels> {
    let k = kernels(w.ty).ok_or_else(|| unsupported_type::<D>(w.ty))?;
    if !w.cols.is_multiple_of(w.ty.block_size()) {
        return Err(bad_shape::<D>(format!("{} rows of {} values (not whole blocks)", w.ty, w.cols)));
    }
    Ok(k)
}

/// `out [n, w.rows] = x [n, w.cols] · Wᵀ`.
pub(super) fn matmul<D: Device>(
    dev: &mut D,
    w: &Weight,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) -> BackendResult {
    let k = kernels_for::<D>(w)?;
    let (rows, cols) = (w.rows, w.cols);
    if x.len() != n * cols || out.len() != n * rows {
        return Err(bad_shape::<D>(format!(
            "a matmul of {} activations and {} outputs for {n} tokens and a {w:?}",
            x.len(),
            out.len()
        )));
    }
    if n == 0 || rows == 0 {
        return Ok(());
    }
    if cols == 0 {
        out.fill(0.0);
        return Ok(());
    }
    let (rows_u, cols_u) = (to_u32::<D>(rows, "rows")?, to_u32::<D>(cols, "columns")?);
    let wmem = dev.weight(w)?; // [rows, row_bytes]
    let xv = dev.view(x)?; // [n, cols]
    let ov = dev.view_out(out)?; // [n, rows]
    // Batches of MM_TT tokens or more take the tiled kernel (same sums, weights read once per
    // tile of tokens).
    let tiled = n >= MM_TT;
    let (name, global) =
        if tiled { (k.tiled, [rows * MM_WG, n.div_ceil(MM_TT)]) } else { (k.matmul, [rows * MM_WG, n]) };
    let local = [MM_WG, 1];
    let n_u = to_u32::<D>(n, "tokens")?;
    // The kernel's activations: the f32 rows, or their blocks quantized to the vec_dot type.
    let xmem = match k.act {
        Some((quantizer, block)) => {
            let rb = quant::act_row_bytes(w.ty, cols)
                .ok_or_else(|| bad_shape::<D>(format!("{} activations of {cols} values", w.ty)))?;
            let blocks = n * cols / block;
            let xq = dev.scratch(XQ_SLOT, n * rb)?; // [n, rb] quantized activation blocks
            dev.run(
                quantizer,
                &[Arg::Mem(xv.mem()), Arg::Mem(xq), Arg::U32(to_u32::<D>(blocks, "blocks")?)],
                &[blocks],
                None,
            )?;
            xq
        }
        None => xv.mem(),
    };
    // The tiled kernels take the number of tokens as a sixth argument.
    let args = [
        Arg::Mem(wmem),
        Arg::Mem(xmem),
        Arg::Mem(ov.mem()),
        Arg::U32(rows_u),
        Arg::U32(cols_u),
        Arg::U32(n_u),
    ];
    dev.run(name, &args[..if tiled { 6 } else { 5 }], &global, Some(&local))?;
    dev.sync(&ov)
}

/// Rows `ids` of `table`, dequantized, times `scale`. `out: [ids.len(), table.cols]`
pub(super) fn gather<D: Device>(
    dev: &mut D,
    table: &Weight,
    ids: &[u32],
    scale: f32,
    out: &mut [f32],
) -> BackendResult {
    let k = kernels_for::<D>(table)?;
    let cols = table.cols;
    if out.len() != ids.len() * cols {
        return Err(bad_shape::<D>(format!(
            "a gather of {} rows into {} values from a {table:?}",
            ids.len(),
            out.len()
        )));
    }
    if let Some(&id) = ids.iter().find(|&&id| id as usize >= table.rows) {
        return Err(bad_shape::<D>(format!("row {id} of a {table:?} (out of range)")));
    }
    if ids.is_empty() || cols == 0 {
        return Ok(());
    }
    let (cols_u, row_bytes) = (to_u32::<D>(cols, "columns")?, to_u32::<D>(table.row_bytes(), "row bytes")?);
    let wmem = dev.weight(table)?; // [rows, row_bytes]
    let iv = dev.view(ids)?; // [ids]
    let ov = dev.view_out(out)?; // [ids, cols]
    let args = [
        Arg::Mem(wmem),
        Arg::Mem(iv.mem()),
        Arg::Mem(ov.mem()),
        Arg::U32(cols_u),
        Arg::U32(row_bytes),
        Arg::F32(scale),
    ];
    dev.run(k.gather, &args, &[cols, ids.len()], None)?;
    dev.sync(&ov)
}
