//! Encoders for retrieval: BERT, Nomic BERT and Jina BERT v2.
//!
//! An encoder reads a whole text at once: every token attends to every other token of its text
//! (no causal mask, no KV cache), and the last block's hidden states are the output, pooled into
//! an embedding by [`super::Model::embed`]. The blocks are post-norm, as llama.cpp's `bert` graph
//! computes them:
//!
//! ```text
//! x = LN(tok_embd[id] + type_embd[0] (+ pos_embd[pos]))
//! per block:  h = LN(x + attn(x));  (jina: h = LN(h + x) when the block has attn_norm_2)
//!             x = LN(h + ffn(h))
//! ```
//!
//! - `bert`: absolute position embeddings, biases on every projection, a GELU feed-forward.
//! - `nomic-bert`: NeoX RoPE on queries and keys, fused QKV, SwiGLU, no biases.
//! - `jina-bert-v2`: ALiBi (symmetric `-|i - j|` distances, maximum bias 8), optional
//!   LayerNorms of the query and key rows, GEGLU (gate and up in one `ffn_up`, gate rows first) or
//!   a GELU feed-forward.
//! - `nomic-bert-moe`: Nomic's RoPE and fused QKV (with biases), BERT's GELU feed-forward, and in
//!   every block `il` with `il % moe_every_n_layers == 1` a mixture of GELU experts instead:
//!   softmax router, the top k weighted by their probabilities (not renormalised), as llama.cpp.
//!
//! The matrix products and the row operators the [`Backend`] trait has run on the CPU backend;
//! LayerNorm, the plain GELU and the bidirectional attention run here (encoders are small and
//! their texts short, so they are not worth a GPU kernel of their own: a model placed on a GPU is
//! refused by [`super::Model::set_placement`]).

use super::config::{Arch, ModelConfig, MoeConfig};
use super::moe::{group, route};
use super::weights::Loader;
use crate::backend::{Backend, CpuBackend};
use crate::ops::{Activation, RopeStyle, Weight, gelu_tanh, gelu_tanh_f16};
use crate::threads;
use crate::{Error, Result};
use ferrolm_kernels::simd_attn::{AttnKernels, Beta, Elems, Rows, RowsMut, Strided};

/// A LayerNorm's scale and shift. `[n]` each.
#[derive(Debug)]
pub struct LayerNorm {
    /// Scale.
    pub w: Vec<f32>,
    /// Shift.
    pub b: Vec<f32>,
}

/// A projection and its bias, if any. `[rows, cols]`, `[rows]`
#[derive(Debug)]
pub struct Linear {
    /// The matrix.
    pub w: Weight,
    /// The bias.
    pub b: Option<Vec<f32>>,
}

/// An encoder block's mixture of experts (Nomic BERT MoE): each expert `down(GELU(up · x))`.
#[derive(Debug)]
pub struct EncoderExperts {
    /// Router: one logit per expert. `[n_expert, n_embd]`
    pub router: Weight,
    /// Each expert's up projection. `[n_ff, n_embd]` each
    pub up: Vec<Weight>,
    /// Each expert's down projection. `[n_embd, n_ff]` each
    pub down: Vec<Weight>,
}

/// An encoder block's feed-forward part.
#[derive(Debug)]
pub enum EncoderFeedForward {
    /// One feed-forward network.
    Dense(EncoderFfn),
    /// A mixture of experts.
    Experts(EncoderExperts),
}

/// An encoder block's feed-forward network.
#[derive(Debug)]
pub struct EncoderFfn {
    /// Gate projection (gated variants only). `[n_ff, n_embd]`
    pub gate: Option<Linear>,
    /// Up projection. `[n_ff, n_embd]`
    pub up: Linear,
    /// Down projection. `[n_embd, n_ff]`
    pub down: Linear,
    /// `act(gate) * up` with a gate, else `act(up)`.
    pub act: Activation,
}

/// The weights of one encoder block.
#[derive(Debug)]
pub struct EncoderLayer {
    /// Query projection. `[q_dim, n_embd]`
    pub q: Linear,
    /// Key projection. `[kv_dim, n_embd]`
    pub k: Linear,
    /// Value projection. `[kv_dim, n_embd]`
    pub v: Linear,
    /// LayerNorm of each query row (Jina v2). `[q_dim]`
    pub q_norm: Option<LayerNorm>,
    /// LayerNorm of each key row (Jina v2). `[kv_dim]`
    pub k_norm: Option<LayerNorm>,
    /// Attention output projection. `[n_embd, q_dim]`
    pub o: Linear,
    /// LayerNorm after the attention's residual add. `[n_embd]`
    pub attn_out_norm: LayerNorm,
    /// A second residual add of the block's input and LayerNorm (some Jina v2 models). `[n_embd]`
    pub attn_norm_2: Option<LayerNorm>,
    /// The feed-forward network or mixture of experts.
    pub ffn: EncoderFeedForward,
    /// LayerNorm after the feed-forward's residual add. `[n_embd]`
    pub out_norm: LayerNorm,
}

/// All weights of an encoder except the token embeddings (those are the model's
/// [`super::weights::ModelWeights::token_embd`]).
#[derive(Debug)]
pub struct EncoderWeights {
    /// Token-type embeddings; every token is of type 0 ("sentence A"). `[n_types, n_embd]`
    pub type_embd: Option<Weight>,
    /// Absolute position embeddings (BERT). `[n_ctx_train, n_embd]`
    pub pos_embd: Option<Weight>,
    /// LayerNorm of the summed embeddings. `[n_embd]`
    pub embd_norm: LayerNorm,
    /// The blocks.
    pub layers: Vec<EncoderLayer>,
}

impl EncoderWeights {
    /// Every matrix the encoder multiplies by.
    pub fn matrices(&self) -> Vec<(String, &Weight)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let named = [("attn_q", &l.q), ("attn_k", &l.k), ("attn_v", &l.v), ("attn_output", &l.o)];
            out.extend(named.into_iter().map(|(n, p)| (format!("blk.{i}.{n}.weight"), &p.w)));
            match &l.ffn {
                EncoderFeedForward::Dense(f) => {
                    let ffn =
                        [("ffn_gate", f.gate.as_ref()), ("ffn_up", Some(&f.up)), ("ffn_down", Some(&f.down))];
                    out.extend(
                        ffn.into_iter().filter_map(|(n, p)| Some((format!("blk.{i}.{n}.weight"), &p?.w))),
                    );
                }
                EncoderFeedForward::Experts(m) => {
                    out.push((format!("blk.{i}.ffn_gate_inp.weight"), &m.router));
                    for (e, (up, down)) in m.up.iter().zip(&m.down).enumerate() {
                        out.push((format!("blk.{i}.ffn_up_exps.{e}.weight"), up));
                        out.push((format!("blk.{i}.ffn_down_exps.{e}.weight"), down));
                    }
                }
            }
        }
        out
    }

    /// Binds an encoder's tensors (llama.cpp's names for `bert`, `nomic-bert`, `jina-bert-v2`).
    pub(super) fn load(l: &Loader<'_>, cfg: &ModelConfig) -> Result<Self> {
        let d = cfg.n_embd;
        let type_embd = match l.tensors.get("token_types.weight") {
            Some(t) if t.dims.len() == 2 => Some(l.matrix("token_types.weight", t.dims[1] as usize, d)?),
            Some(t) => {
                return Err(Error::TensorShape {
                    name: "token_types.weight".into(),
                    actual: t.dims.clone(),
                    expected: vec![d as u64, 2],
                });
            }
            None if cfg.arch == Arch::JinaBertV2 => {
                return Err(Error::MissingTensor("token_types.weight".into()));
            }
            None => None,
        };
        let pos_embd = match cfg.arch {
            Arch::Bert => Some(l.matrix("position_embd.weight", cfg.n_ctx_train, d)?),
            _ => None,
        };
        let embd_norm = layer_norm(l, "token_embd_norm", d)?;
        let layers = (0..cfg.n_layer).map(|i| load_layer(l, cfg, i)).collect::<Result<_>>()?;
        Ok(Self { type_embd, pos_embd, embd_norm, layers })
    }
}

/// A LayerNorm `{name}.weight`/`{name}.bias` of `n`.
fn layer_norm(l: &Loader<'_>, name: &str, n: usize) -> Result<LayerNorm> {
    Ok(LayerNorm { w: l.vector(&format!("{name}.weight"), n)?, b: l.vector(&format!("{name}.bias"), n)? })
}

/// An optional LayerNorm: present when its weight is.
fn opt_layer_norm(l: &Loader<'_>, name: &str, n: usize) -> Result<Option<LayerNorm>> {
    if l.tensors.contains(&format!("{name}.weight")) { layer_norm(l, name, n).map(Some) } else { Ok(None) }
}

fn load_layer(l: &Loader<'_>, cfg: &ModelConfig, i: usize) -> Result<EncoderLayer> {
    let (d, qd, kvd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
    let n = |s: &str| format!("blk.{i}.{s}");
    let bias = |s: &str, len: usize| l.opt_vector(&format!("blk.{i}.{s}.bias"), len);
    let linear = |s: &str, rows: usize, cols: usize| -> Result<Linear> {
        Ok(Linear { w: l.matrix(&format!("blk.{i}.{s}.weight"), rows, cols)?, b: bias(s, rows)? })
    };
    let (q, k, v) = if l.tensors.contains(&n("attn_qkv.weight")) {
        let [wq, wk, wv] = l.split_rows(&n("attn_qkv.weight"), [qd, kvd, kvd], d)?;
        let [bq, bk, bv] = match bias("attn_qkv", qd + 2 * kvd)? {
            Some(b) => [Some(b[..qd].to_vec()), Some(b[qd..qd + kvd].to_vec()), Some(b[qd + kvd..].to_vec())],
            None => [None, None, None],
        };
        (Linear { w: wq, b: bq }, Linear { w: wk, b: bk }, Linear { w: wv, b: bv })
    } else {
        (linear("attn_q", qd, d)?, linear("attn_k", kvd, d)?, linear("attn_v", kvd, d)?)
    };
    Ok(EncoderLayer {
        q,
        k,
        v,
        q_norm: opt_layer_norm(l, &n("attn_q_norm"), qd)?,
        k_norm: opt_layer_norm(l, &n("attn_k_norm"), kvd)?,
        o: linear("attn_output", d, qd)?,
        attn_out_norm: layer_norm(l, &n("attn_output_norm"), d)?,
        attn_norm_2: opt_layer_norm(l, &n("attn_norm_2"), d)?,
        ffn: match (&cfg.moe, cfg.moe_every_n_layers) {
            (Some(m), Some(every)) if i % every == 1 => EncoderFeedForward::Experts(EncoderExperts {
                router: l.matrix(&n("ffn_gate_inp.weight"), m.n_expert, d)?,
                up: l.matrices3(&n("ffn_up_exps.weight"), m.n_expert, m.n_ff_expert, d)?,
                down: l.matrices3(&n("ffn_down_exps.weight"), m.n_expert, d, m.n_ff_expert)?,
            }),
            _ => EncoderFeedForward::Dense(load_ffn(l, cfg, i, ff)?),
        },
        out_norm: layer_norm(l, &n("layer_output_norm"), d)?,
    })
}

/// The feed-forward network of block `i`: BERT's `up → GELU → down`, Nomic's SwiGLU, or Jina's
/// GEGLU (a gate matrix, or gate and up fused in `ffn_up`, gate rows first) or plain GELU.
fn load_ffn(l: &Loader<'_>, cfg: &ModelConfig, i: usize, ff: usize) -> Result<EncoderFfn> {
    let d = cfg.n_embd;
    let name = |s: &str, what: &str| format!("blk.{i}.{s}.{what}");
    let bias = |s: &str, len: usize| l.opt_vector(&name(s, "bias"), len);
    let down = Linear { w: l.matrix(&name("ffn_down", "weight"), d, ff)?, b: bias("ffn_down", d)? };
    let fused =
        l.tensors.get(&name("ffn_up", "weight")).is_some_and(|t| t.dims.get(1) == Some(&(2 * ff as u64)));
    let (gate, up) = if l.tensors.contains(&name("ffn_gate", "weight")) {
        let gate = Linear { w: l.matrix(&name("ffn_gate", "weight"), ff, d)?, b: bias("ffn_gate", ff)? };
        (Some(gate), Linear { w: l.matrix(&name("ffn_up", "weight"), ff, d)?, b: bias("ffn_up", ff)? })
    } else if fused && cfg.arch == Arch::JinaBertV2 {
        let [wg, wu] = l.split_rows(&name("ffn_up", "weight"), [ff, ff], d)?;
        let (bg, bu) = match bias("ffn_up", 2 * ff)? {
            Some(b) => (Some(b[..ff].to_vec()), Some(b[ff..].to_vec())),
            None => (None, None),
        };
        (Some(Linear { w: wg, b: bg }), Linear { w: wu, b: bu })
    } else {
        (None, Linear { w: l.matrix(&name("ffn_up", "weight"), ff, d)?, b: bias("ffn_up", ff)? })
    };
    if cfg.arch == Arch::NomicBert && gate.is_none() {
        return Err(Error::MissingTensor(name("ffn_gate", "weight")));
    }
    let act = if cfg.arch == Arch::NomicBert { Activation::Silu } else { Activation::GeluTanh };
    Ok(EncoderFfn { gate, up, down, act })
}

/// The buffers of one encoder pass over `n` tokens.
#[derive(Default)]
struct Buffers {
    /// Hidden states. `[n, n_embd]`
    x: Vec<f32>,
    /// Attention-branch residual sum, then the block's middle state. `[n, n_embd]`
    h: Vec<f32>,
    /// Queries, keys, values. `[n, q_dim]`, `[n, kv_dim]`, `[n, kv_dim]`
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Attention output. `[n, q_dim]`
    att: Vec<f32>,
    /// Gate and up projections. `[n, n_ff]`
    gate: Vec<f32>,
    up: Vec<f32>,
    /// RoPE angles (Nomic). `[n, rope_dims / 2]`
    cs: Vec<(f32, f32)>,
}

/// One text's rows in a pass: `start..start + len`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Segment {
    pub start: usize,
    pub len: usize,
}

/// Runs the encoder over several texts at once (`ids` holds them one after another, as
/// `segments` say) and returns the last block's hidden states. `[ids.len(), n_embd]`
pub(super) fn encode(
    cfg: &ModelConfig,
    token_embd: &Weight,
    w: &EncoderWeights,
    ids: &[u32],
    segments: &[Segment],
    exact: bool,
) -> Result<Vec<f32>> {
    let be: &dyn Backend = &CpuBackend;
    let n = ids.len();
    let d = cfg.n_embd;
    if let Some(s) = segments.iter().find(|s| cfg.arch == Arch::Bert && s.len > cfg.n_ctx_train) {
        return Err(Error::InvalidInput(format!(
            "a text of {} tokens is longer than this encoder's {} positions",
            s.len, cfg.n_ctx_train
        )));
    }
    let mut b = Buffers::default();
    // Positions within each text. `[n]`
    let pos: Vec<u32> = segments.iter().flat_map(|s| 0..s.len as u32).collect();
    b.x = vec![0.0; n * d];
    be.gather(token_embd, ids, 1.0, &mut b.x)?;
    if let Some(t) = &w.type_embd {
        let mut row = vec![0.0; d];
        be.gather(t, &[0], 1.0, &mut row)?;
        be.add_bias(&mut b.x, &row)?;
    }
    if let Some(p) = &w.pos_embd {
        let mut rows = vec![0.0; n * d];
        be.gather(p, &pos, 1.0, &mut rows)?;
        be.add(&mut b.x, &rows)?;
    }
    layer_norm_rows(&mut b.x, &w.embd_norm, cfg.norm_eps);
    if matches!(cfg.arch, Arch::NomicBert | Arch::NomicBertMoe) {
        b.cs = vec![(0.0, 0.0); n * (cfg.rope_dims / 2).max(1)];
        be.rope_cos_sin(&pos, cfg.rope_dims, &cfg.rope_global, None, &mut b.cs)?;
    }
    for l in &w.layers {
        block(be, cfg, l, segments, exact, &mut b)?;
    }
    Ok(b.x)
}

/// `out = x · W^T (+ b)`. `x: [n, cols]`, `out: [n, rows]`
fn linear(be: &dyn Backend, p: &Linear, x: &[f32], n: usize, out: &mut Vec<f32>) -> Result<()> {
    out.resize(n * p.w.rows, 0.0);
    be.matmul(&p.w, x, n, out)?;
    if let Some(bias) = &p.b {
        be.add_bias(out, bias)?;
    }
    Ok(())
}

/// One encoder block over the hidden states in `b.x`.
fn block(
    be: &dyn Backend,
    cfg: &ModelConfig,
    l: &EncoderLayer,
    segments: &[Segment],
    exact: bool,
    b: &mut Buffers,
) -> Result<()> {
    let n = b.x.len() / cfg.n_embd;
    linear(be, &l.q, &b.x, n, &mut b.q)?;
    linear(be, &l.k, &b.x, n, &mut b.k)?;
    linear(be, &l.v, &b.x, n, &mut b.v)?;
    if let Some(norm) = &l.q_norm {
        layer_norm_rows(&mut b.q, norm, cfg.norm_eps);
    }
    if let Some(norm) = &l.k_norm {
        layer_norm_rows(&mut b.k, norm, cfg.norm_eps);
    }
    if matches!(cfg.arch, Arch::NomicBert | Arch::NomicBertMoe) {
        be.rope(&mut b.q, n, cfg.head_dim, &b.cs, RopeStyle::Neox)?;
        be.rope(&mut b.k, n, cfg.head_dim, &b.cs, RopeStyle::Neox)?;
    }
    b.att.resize(n * cfg.q_dim(), 0.0);
    attention(cfg, segments, &b.q, &b.k, &b.v, &mut b.att);
    linear(be, &l.o, &b.att, n, &mut b.h)?;
    be.add(&mut b.h, &b.x)?;
    layer_norm_rows(&mut b.h, &l.attn_out_norm, cfg.norm_eps);
    if let Some(norm) = &l.attn_norm_2 {
        be.add(&mut b.h, &b.x)?;
        layer_norm_rows(&mut b.h, norm, cfg.norm_eps);
    }
    // The feed-forward reads h; its output lands in x, then x = LN(x + h).
    match &l.ffn {
        EncoderFeedForward::Dense(f) => {
            linear(be, &f.up, &b.h, n, &mut b.up)?;
            match &f.gate {
                Some(g) => {
                    linear(be, g, &b.h, n, &mut b.gate)?;
                    be.gated_activation(&mut b.gate, &b.up, f.act, exact)?;
                    std::mem::swap(&mut b.gate, &mut b.up);
                }
                None => gelu_rows(&mut b.up, exact),
            }
            linear(be, &f.down, &b.up, n, &mut b.x)?;
        }
        EncoderFeedForward::Experts(m) => {
            let mc = cfg
                .moe
                .as_ref()
                .ok_or_else(|| Error::Config("experts without a mixture configuration".into()))?;
            experts(be, m, mc, exact, n, b)?;
        }
    }
    be.add(&mut b.x, &b.h)?;
    layer_norm_rows(&mut b.x, &l.out_norm, cfg.norm_eps);
    Ok(())
}

/// The mixture of experts over the middle states `b.h` (`[n, n_embd]`), its output into `b.x`:
/// each token through its `k` experts chosen by the router's softmax, weighted by their
/// probabilities. Experts run one at a time over the rows routed to them (encoder texts are
/// short; the decoders' [`super::moe`] groups the same way).
fn experts(
    be: &dyn Backend,
    m: &EncoderExperts,
    mc: &MoeConfig,
    exact: bool,
    n: usize,
    b: &mut Buffers,
) -> Result<()> {
    let d = b.h.len() / n.max(1);
    let mut logits = vec![0.0; n * mc.n_expert]; // [n, n_expert]
    be.matmul(&m.router, &b.h, n, &mut logits)?;
    let (mut chosen, mut weights) = (Vec::new(), Vec::new());
    route(&mut logits, mc, &mut chosen, &mut weights);
    let mut grouped = (Vec::new(), Vec::new());
    group(&chosen, &weights, mc.n_used, mc.n_expert, &mut grouped);
    let (all_routes, starts) = grouped;
    b.x.clear();
    b.x.resize(n * d, 0.0);
    for (e, (up, down)) in m.up.iter().zip(&m.down).enumerate() {
        // (token, weight) of the routes to expert e.
        let routes = &all_routes[starts[e]..starts[e + 1]];
        if routes.is_empty() {
            continue;
        }
        let rows: Vec<f32> = routes
            .iter()
            .flat_map(|&(t, _)| b.h[t as usize * d..(t as usize + 1) * d].iter().copied())
            .collect();
        let mut hidden = vec![0.0; routes.len() * up.rows]; // [m, n_ff]
        be.matmul(up, &rows, routes.len(), &mut hidden)?;
        gelu_rows(&mut hidden, exact);
        let mut out = vec![0.0; routes.len() * d]; // [m, n_embd]
        be.matmul(down, &hidden, routes.len(), &mut out)?;
        for (row, &(t, w)) in out.chunks_exact(d).zip(routes) {
            let t = t as usize;
            b.x[t * d..(t + 1) * d].iter_mut().zip(row).for_each(|(a, &o)| *a += w * o);
        }
    }
    Ok(())
}

/// GELU (tanh approximation) of every element: through llama.cpp's f16 table, or in f32 with
/// `exact`.
fn gelu_rows(x: &mut [f32], exact: bool) {
    let f = if exact { gelu_tanh } else { gelu_tanh_f16 };
    threads::par_chunks_mut(&threads::pool(), x, 1 << 14, |_, piece| {
        piece.iter_mut().for_each(|v| *v = f(*v))
    });
}

/// LayerNorm of each `norm.w.len()`-wide row in place: `(x - mean) / sqrt(var + eps) * w + b`,
/// the mean and the variance summed in f64.
pub(super) fn layer_norm_rows(x: &mut [f32], norm: &LayerNorm, eps: f32) {
    let d = norm.w.len();
    threads::par_chunks_mut(&threads::pool(), x, 32 * d, |_, rows| layer_norm_serial(rows, norm, eps));
}

/// [`layer_norm_rows`] on the calling thread.
fn layer_norm_serial(x: &mut [f32], norm: &LayerNorm, eps: f32) {
    let d = norm.w.len();
    for row in x.chunks_exact_mut(d) {
        let mean = (row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64) as f32;
        let var = row.iter().map(|&v| f64::from(v - mean) * f64::from(v - mean)).sum::<f64>() / d as f64;
        let scale = 1.0 / (var as f32 + eps).sqrt();
        for ((v, &w), &b) in row.iter_mut().zip(&norm.w).zip(&norm.b) {
            *v = (*v - mean) * scale * w + b;
        }
    }
}

/// The ALiBi slope of each head (ggml's, with a maximum bias of 8: heads beyond the largest
/// power of two interleave the slopes of twice as many heads).
pub(super) fn alibi_slopes(n_head: usize) -> Vec<f32> {
    const MAX_BIAS: f32 = 8.0;
    let n_log2 = 1usize << (usize::BITS - 1 - n_head.leading_zeros());
    let m0 = 2f32.powf(-MAX_BIAS / n_log2 as f32);
    let m1 = 2f32.powf(-(MAX_BIAS / 2.0) / n_log2 as f32);
    (0..n_head)
        .map(|h| if h < n_log2 { m0.powi(h as i32 + 1) } else { m1.powi(2 * (h - n_log2) as i32 + 1) })
        .collect()
}

/// Query rows per task of the attention.
const ATT_ROWS: usize = 32;

/// Bidirectional attention of each text over itself. `q`, `att`: `[n, n_head * head_dim]`;
/// `k`, `v`: `[n, n_head_kv * head_dim]`. Jina v2 adds `-slope_h · |i - j|` to the scores.
///
/// Both products are [`AttnKernels::gemm`]s: the scores `Q_h · K_hᵀ` read the text's keys
/// transposed (`[n_head_kv, head_dim, len]`, made once per text), the output `P · V_h` its values.
fn attention(cfg: &ModelConfig, segments: &[Segment], q: &[f32], k: &[f32], v: &[f32], att: &mut [f32]) {
    let (hd, qd, kvd) = (cfg.head_dim, cfg.q_dim(), cfg.kv_dim());
    let group = cfg.n_head / cfg.n_head_kv;
    let slopes = (cfg.arch == Arch::JinaBertV2).then(|| alibi_slopes(cfg.n_head));
    let kern = AttnKernels::best();
    let pool = threads::pool();
    let mut kt = Vec::new();
    for s in segments {
        // The text's keys, transposed per head. `[n_head_kv, hd, len]`
        kt.clear();
        kt.resize(cfg.n_head_kv * hd * s.len, 0.0);
        for (j, row) in k[s.start * kvd..(s.start + s.len) * kvd].chunks_exact(kvd).enumerate() {
            for (c, &x) in row.iter().enumerate() {
                kt[c * s.len + j] = x;
            }
        }
        let out = &mut att[s.start * qd..(s.start + s.len) * qd];
        threads::par_chunks_mut(&pool, out, ATT_ROWS * qd, |c, piece| {
            let r0 = c * ATT_ROWS;
            let m = piece.len() / qd;
            // Scores of this task's queries against every key of the text. `[m, len]`
            let mut p = vec![0.0f32; m * s.len];
            for h in 0..cfg.n_head {
                let kh = h / group;
                let qa = Strided {
                    data: &q[(s.start + r0) * qd + h * hd..],
                    rows: m,
                    cols: hd,
                    row_stride: qd,
                    col_stride: 1,
                };
                let kb =
                    Rows { data: Elems::F32(&kt[kh * hd * s.len..]), rows: hd, cols: s.len, stride: s.len };
                kern.gemm(qa, kb, RowsMut { data: &mut p, rows: m, cols: s.len, stride: s.len }, Beta::Zero);
                for (i, row) in p.chunks_exact_mut(s.len).enumerate() {
                    row.iter_mut().for_each(|x| *x *= cfg.attn_scale);
                    if let Some(sl) = &slopes {
                        let qi = (r0 + i) as f32;
                        row.iter_mut().enumerate().for_each(|(j, x)| *x -= sl[h] * (qi - j as f32).abs());
                    }
                    let mx = kern.max(row);
                    let sum = kern.exp_sum(row, mx);
                    row.iter_mut().for_each(|x| *x /= sum);
                }
                let pa = Strided { data: &p, rows: m, cols: s.len, row_stride: s.len, col_stride: 1 };
                let vb = Rows {
                    data: Elems::F32(&v[s.start * kvd + kh * hd..]),
                    rows: s.len,
                    cols: hd,
                    stride: kvd,
                };
                let oc = RowsMut { data: &mut piece[h * hd..], rows: m, cols: hd, stride: qd };
                kern.gemm(pa, vb, oc, Beta::Zero);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn alibi_slopes_are_ggml_s() {
        // 8 heads: 2^(-8/8 · (h+1)) = 1/2, 1/4, …, 1/256.
        let s = alibi_slopes(8);
        for (h, v) in s.iter().enumerate() {
            assert!((v - 0.5f32.powi(h as i32 + 1)).abs() < 1e-7, "head {h}: {v}");
        }
        // 12 heads: the first 8 as above, then m1 = 2^(-0.5) to the odd powers 1, 3, 5, 7.
        let s = alibi_slopes(12);
        let m1 = 2f32.powf(-0.5);
        for (i, h) in (8..12).enumerate() {
            assert!((s[h] - m1.powi(2 * i as i32 + 1)).abs() < 1e-7);
        }
    }

    #[test]
    fn layer_norm_centres_and_scales_each_row() {
        let norm = LayerNorm { w: vec![2.0; 4], b: vec![1.0; 4] };
        let mut x = vec![1.0, 2.0, 3.0, 4.0, -1.0, -1.0, -1.0, -1.0];
        layer_norm_rows(&mut x, &norm, 1e-12);
        // Row 1: mean 2.5, variance 1.25.
        let sd = 1.25f32.sqrt();
        for (i, &v) in x[..4].iter().enumerate() {
            let want = (i as f32 + 1.0 - 2.5) / sd * 2.0 + 1.0;
            assert!((v - want).abs() < 1e-5, "{i}: {v} vs {want}");
        }
        // A constant row becomes the shift.
        assert!(x[4..].iter().all(|&v| (v - 1.0).abs() < 1e-5));
    }
}
