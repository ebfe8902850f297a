//! Short convolution layers (LFM2's token mixer besides attention).
//!
//! For each token, one projection gives `B`, `C` and `x` (`[n_embd]` each); the layer outputs
//! `out(C ⊙ conv(B ⊙ x))`, `conv` a causal depthwise convolution over the last `l_cache` values
//! of `B ⊙ x` without bias or activation. A sequence's state is its last `l_cache - 1` such
//! values (`[l_cache - 1, n_embd]`, oldest first, in [`super::recurrent`]'s buffers).

use super::config::ShortConvConfig;
use super::forward::buf;
use super::recurrent::{causal_conv, layer_state};
use super::weights::{Loader, Weight};
use crate::Result;
use crate::backend::Backend;
use crate::batch::BatchEntry;
use crate::kv::KvCache;

/// The weights of one short convolution layer.
#[derive(Debug)]
pub struct ShortConvWeights {
    /// `B`, `C` and `x`, one after the other. `[3 n_embd, n_embd]`
    pub in_proj: Weight,
    /// Convolution taps, oldest input first. `[n_embd, l_cache]`
    pub conv: Vec<f32>,
    /// Output projection. `[n_embd, n_embd]`
    pub out: Weight,
}

impl ShortConvWeights {
    /// Block `i`'s convolution from llama.cpp's tensor names (`shortconv.*`).
    pub(super) fn load(l: &Loader<'_>, i: usize, d: usize, cfg: &ShortConvConfig) -> Result<Self> {
        let n = |s: &str| format!("blk.{i}.shortconv.{s}.weight");
        Ok(Self {
            in_proj: l.matrix(&n("in_proj"), 3 * d, d)?,
            conv: l.vectors(&n("conv"), d, cfg.l_cache)?,
            out: l.matrix(&n("out_proj"), d, d)?,
        })
    }

    /// Every matrix with its name's stem.
    pub(super) fn matrices(&self) -> Vec<(String, &Weight)> {
        vec![("shortconv.in_proj".to_string(), &self.in_proj), ("shortconv.out_proj".to_string(), &self.out)]
    }
}

/// The buffers of the short convolution layers, grown to the largest batch seen and reused.
#[derive(Debug, Default)]
pub(crate) struct ShortConvBuffers {
    /// `B`, `C` and `x` of each token. `[n, 3 n_embd]`
    bcx: Vec<f32>,
    /// `C ⊙ conv(B ⊙ x)` of each token. `[n, n_embd]`
    gated: Vec<f32>,
    /// One token's `B ⊙ x`. `[n_embd]`
    bx: Vec<f32>,
}

/// Short convolution layer number `ordinal` (among the model's recurrent layers) over the
/// normalised rows `xn` (`[n, n_embd]`) of the batch, its output into `y` (`[n, n_embd]`), each
/// token advancing its sequence's state in batch order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn short_conv(
    be: &dyn Backend,
    w: &ShortConvWeights,
    cfg: &ShortConvConfig,
    ordinal: usize,
    entries: &[BatchEntry],
    kv: &mut KvCache,
    xn: &[f32],
    y: &mut [f32],
    b: &mut ShortConvBuffers,
) -> Result<()> {
    let (n, d) = (entries.len(), cfg.width);
    let bcx = buf(&mut b.bcx, n * 3 * d); // [n, 3 n_embd]
    be.matmul(&w.in_proj, xn, n, bcx)?;
    be.to_host(bcx)?;
    let gated = buf(&mut b.gated, n * d); // [n, n_embd]
    let bx = buf(&mut b.bx, d); // [n_embd]
    for (t, e) in entries.iter().enumerate() {
        let (bt, rest) = bcx[t * 3 * d..(t + 1) * 3 * d].split_at(d);
        let (ct, xt) = rest.split_at(d);
        for ((o, &bi), &xi) in bx.iter_mut().zip(bt).zip(xt) {
            *o = bi * xi;
        }
        let hist = &mut layer_state(kv, e.seq, ordinal)?[..cfg.state_len()];
        let out = &mut gated[t * d..(t + 1) * d];
        causal_conv(&w.conv, cfg.l_cache, hist, bx, out);
        out.iter_mut().zip(ct).for_each(|(o, &c)| *o *= c);
    }
    be.host_wrote(gated)?;
    be.matmul(&w.out, gated, n, y)?;
    Ok(())
}
