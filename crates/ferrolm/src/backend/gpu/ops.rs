//! Element-wise and row operators (kernels in `kernels/ops.cl`).
//!
//! Each operator views its slices for the device, launches one kernel and syncs its output
//! back. Shapes follow [`crate::backend::CpuBackend`]: a row operator covers the whole rows that
//! both its input and its output hold, an element-wise one the shorter of its operands, so a
//! kernel never reads or writes past a slice.

use half::f16;

use super::{Arg, Device, DeviceView};
use crate::backend::{BackendError, BackendResult};
use crate::ops::{Activation, RopeStyle};

/// Work items per row of the row reductions (RMSNorm, softmax): a power of two.
const ROW_GROUP: usize = 128;

/// RMSNorm of rows of `w.len()`, times `w`, into `out`.
pub(super) fn rms_norm<D: Device>(
    dev: &mut D,
    x: &[f32],
    w: &[f32],
    eps: f32,
    out: &mut [f32],
) -> BackendResult {
    let cols = w.len();
    if cols == 0 {
        return Ok(());
    }
    let rows = x.len().min(out.len()) / cols;
    let (x, out) = (&x[..rows * cols], &mut out[..rows * cols]);
    let (xv, wv, ov) = (dev.view(x)?, dev.view(w)?, dev.view_out(out)?);
    let args = [
        Arg::Mem(xv.mem()),
        Arg::Mem(wv.mem()),
        Arg::Mem(ov.mem()),
        Arg::U32(dim::<D>(cols)?),
        Arg::F32(eps),
        Arg::I32(0),
    ];
    dev.run("op_rms_norm", &args, &[rows * ROW_GROUP], Some(&[ROW_GROUP]))?;
    dev.sync(&ov)
}

/// RMSNorm in place, rows of `w.len()`.
pub(super) fn rms_norm_inplace<D: Device>(dev: &mut D, x: &mut [f32], w: &[f32], eps: f32) -> BackendResult {
    let cols = w.len();
    if cols == 0 {
        return Ok(());
    }
    let rows = x.len() / cols;
    let (xv, wv) = (dev.view_mut(&mut x[..rows * cols])?, dev.view(w)?);
    let args = [
        Arg::Mem(xv.mem()),
        Arg::Mem(wv.mem()),
        Arg::Mem(xv.mem()),
        Arg::U32(dim::<D>(cols)?),
        Arg::F32(eps),
        Arg::I32(1),
    ];
    dev.run("op_rms_norm", &args, &[rows * ROW_GROUP], Some(&[ROW_GROUP]))?;
    dev.sync(&xv)
}

/// RoPE of every head of `n` rows: `x: [n, heads * head_dim]`, `cos_sin: [n, pairs]`; the first
/// `2 * pairs` dimensions of each head rotate.
pub(super) fn rope<D: Device>(
    dev: &mut D,
    x: &mut [f32],
    n: usize,
    head_dim: usize,
    cos_sin: &[(f32, f32)],
    style: RopeStyle,
) -> BackendResult {
    if n == 0 || head_dim == 0 {
        return Ok(());
    }
    let (width, pairs) = (x.len() / n, cos_sin.len() / n);
    if 2 * pairs > head_dim {
        return Err(BackendError::Unsupported {
            backend: D::NAME,
            what: format!("RoPE of {} dimensions in heads of {head_dim}", 2 * pairs),
        });
    }
    let heads = width / head_dim;
    if pairs == 0 || heads == 0 {
        return Ok(());
    }
    // `(f32, f32)` pairs: the kernel reads them as `[n, pairs, 2]` floats.
    let (xv, cv) = (dev.view_mut(&mut x[..n * width])?, dev.view(&cos_sin[..n * pairs])?);
    let neox = matches!(style, RopeStyle::Neox);
    let args = [
        Arg::Mem(xv.mem()),
        Arg::Mem(cv.mem()),
        Arg::U32(dim::<D>(width)?),
        Arg::U32(dim::<D>(head_dim)?),
        Arg::U32(dim::<D>(pairs)?),
        Arg::I32(neox.into()),
    ];
    dev.run("op_rope", &args, &[pairs, heads, n], None)?;
    dev.sync(&xv)
}

/// Row softmax in place, rows of `cols`.
pub(super) fn softmax<D: Device>(dev: &mut D, x: &mut [f32], cols: usize) -> BackendResult {
    let cols = cols.max(1);
    let rows = x.len() / cols;
    let xv = dev.view_mut(&mut x[..rows * cols])?;
    let args = [Arg::Mem(xv.mem()), Arg::U32(dim::<D>(cols)?)];
    dev.run("op_softmax", &args, &[rows * ROW_GROUP], Some(&[ROW_GROUP]))?;
    dev.sync(&xv)
}

/// `gate = act(gate) * up`; `exact`: GELU in f32 instead of through llama.cpp's f16 table.
pub(super) fn gated_activation<D: Device>(
    dev: &mut D,
    gate: &mut [f32],
    up: &[f32],
    act: Activation,
    exact: bool,
) -> BackendResult {
    let n = gate.len().min(up.len());
    let mode = match (act, exact) {
        (Activation::Silu, _) => 0,
        (Activation::GeluTanh, true) => 1,
        (Activation::GeluTanh, false) => 2,
        (Activation::SwigluOai, _) => 3,
    };
    let (gv, uv) = (dev.view_mut(&mut gate[..n])?, dev.view(&up[..n])?);
    dev.run("op_gated", &[Arg::Mem(gv.mem()), Arg::Mem(uv.mem()), Arg::I32(mode)], &[n], None)?;
    dev.sync(&gv)
}

/// `x += y`.
pub(super) fn add<D: Device>(dev: &mut D, x: &mut [f32], y: &[f32]) -> BackendResult {
    let n = x.len().min(y.len());
    let (xv, yv) = (dev.view_mut(&mut x[..n])?, dev.view(&y[..n])?);
    dev.run("op_add", &[Arg::Mem(xv.mem()), Arg::Mem(yv.mem())], &[n], None)?;
    dev.sync(&xv)
}

/// `x *= s`.
pub(super) fn scale<D: Device>(dev: &mut D, x: &mut [f32], s: f32) -> BackendResult {
    let n = x.len();
    let xv = dev.view_mut(x)?;
    dev.run("op_scale", &[Arg::Mem(xv.mem()), Arg::F32(s)], &[n], None)?;
    dev.sync(&xv)
}

/// f32 → f16, rounded to nearest even (as `half::f16::from_f32`).
pub(super) fn copy_to_f16<D: Device>(dev: &mut D, src: &[f32], dst: &mut [f16]) -> BackendResult {
    let n = src.len().min(dst.len());
    let (sv, dv) = (dev.view(&src[..n])?, dev.view_out(&mut dst[..n])?);
    dev.run("op_to_f16", &[Arg::Mem(sv.mem()), Arg::Mem(dv.mem())], &[n], None)?;
    dev.sync(&dv)
}

/// Adds `bias` to each `bias.len()`-wide row of `x` (whole rows only, as the CPU).
pub(super) fn add_bias<D: Device>(dev: &mut D, x: &mut [f32], bias: &[f32]) -> BackendResult {
    let width = bias.len();
    if width == 0 {
        return Ok(());
    }
    let n = x.len() / width * width;
    let (xv, bv) = (dev.view_mut(&mut x[..n])?, dev.view(bias)?);
    dev.run(
        "op_add_bias",
        &[Arg::Mem(xv.mem()), Arg::Mem(bv.mem()), Arg::U32(dim::<D>(width)?)],
        &[n],
        None,
    )?;
    dev.sync(&xv)
}

/// A size as a kernel's `uint`, or an error when it does not fit.
pub(super) fn dim<D: Device>(n: usize) -> BackendResult<u32> {
    u32::try_from(n)
        .map_err(|_| BackendError::Unsupported { backend: D::NAME, what: format!("a dimension of {n}") })
}
