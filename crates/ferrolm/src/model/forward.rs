//! The forward pass: one function for every architecture, driven by [`ModelConfig`].
//!
//! Reads top to bottom like a textbook transformer: embed, then per block
//! `x += attn(norm(x))` and `x += ffn(norm(x))`, then norm and the LM head. Every buffer lives
//! in a [`Workspace`] kept by the model between passes, so a decode step allocates nothing.

use super::delta_net::{self, DeltaNetBuffers};
use super::moe::{MoeBuffers, gated_ffn, moe_ffn};
use super::recurrent;
use super::short_conv::{self, ShortConvBuffers};
use super::weights::{AttentionWeights, Ffn, FfnWeights, Mixer, PerLayerBlock};
use super::{Model, ModelConfig};
use crate::backend::{Backend, HostRange, PassId};
use crate::batch::BatchEntry;
use crate::batch::{Batch, Logits};
use crate::kv::{KvCache, KvRotation, KvType, SeqId};
use crate::ops::{Activation, AttentionShape, MatmulJob};
use crate::{Error, Result};
use half::f16;

/// The buffers of one forward pass, grown to the largest batch seen and reused.
#[derive(Debug, Default)]
pub(crate) struct Workspace {
    /// Residual stream. `[n, n_embd]`
    x: Vec<f32>,
    /// Normalised residual. `[n, n_embd]`
    xn: Vec<f32>,
    /// Queries. `[n, n_head * head_dim]`
    q: Vec<f32>,
    /// Keys. `[n, n_head_kv * head_dim]`
    k: Vec<f32>,
    /// Values. `[n, n_head_kv * head_dim]`
    v: Vec<f32>,
    /// Attention output. `[n, n_head * head_dim]`
    att: Vec<f32>,
    /// Projection output. `[n, n_embd]`
    y: Vec<f32>,
    /// Gate projection (then the gated activation). `[n, n_ff]`
    gate: Vec<f32>,
    /// Up projection. `[n, n_ff]`
    up: Vec<f32>,
    /// RoPE (cos, sin) of the global layers. `[n, rope_dims / 2]`
    cs_global: Vec<(f32, f32)>,
    /// RoPE (cos, sin) of the sliding-window layers. `[n, rope_dims_swa / 2]`
    cs_local: Vec<(f32, f32)>,
    /// KV slot of each batch entry. `[n]`
    slots: Vec<usize>,
    /// Token id of each batch entry. `[n]`
    ids: Vec<u32>,
    /// Logical position of each batch entry. `[n]`
    pos: Vec<u32>,
    /// Batch index of each entry that wants logits. `[m]`
    out_idx: Vec<usize>,
    /// Output-normed rows that want logits. `[m, n_embd]`
    h: Vec<f32>,
    /// Attention mass per head and slot, for eviction policies. `[n_head, len]`
    mass: Vec<f32>,
    /// Queries of one sequence, for its attention mass. `[m, n_head * head_dim]`
    q_seq: Vec<f32>,
    /// Positions of those queries. `[m]`
    pos_seq: Vec<u32>,
    /// The batch's keys and values as f16, for a cache of several sequences. `[2, n, kv_dim]`
    kv16: Vec<f16>,
    /// The mixture-of-experts blocks' buffers.
    moe: MoeBuffers,
    /// Per-layer embeddings, layer-major (Gemma 4). `[n_layer, n, n_embd_per_layer]`
    pl: Vec<f32>,
    /// The same token-major while they are computed. `[n, n_layer * n_embd_per_layer]`
    pl_tok: Vec<f32>,
    /// A block's per-layer branch: its gate. `[n, n_embd_per_layer]`
    pl_gate: Vec<f32>,
    /// Experts beside a dense MLP (Gemma 4): their input, the router's input and their output.
    /// `[3, n, n_embd]`
    beside: [Vec<f32>; 3],
    /// Gated queries (Qwen 3.5): per head its queries, then its gates. `[n, 2 q_dim]`
    qgate: Vec<f32>,
    /// Their gates, apart. `[n, q_dim]`
    gates: Vec<f32>,
    /// The gated delta net layers' buffers.
    delta: DeltaNetBuffers,
    /// The short convolution layers' buffers.
    short_conv: ShortConvBuffers,
}

impl Workspace {
    /// Grows every buffer a pass of `n` tokens slices, so that the pass takes them without
    /// reallocating, and returns those slices' memory: what the backend may keep on its device
    /// during the pass. `h` is reserved for every row (the LM head takes its first rows).
    fn reserve(&mut self, cfg: &ModelConfig, n: usize) -> [HostRange; 18] {
        let (d, qd, kvd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), dense_ff(cfg));
        let half = (cfg.rope_dims / 2).max(1);
        let local = if has_local_rope(cfg) { n * (cfg.rope_dims_swa / 2).max(1) } else { 0 };
        let pl = n * cfg.n_layer * cfg.n_embd_per_layer;
        let beside = if cfg.moe_beside_dense() { n * d } else { 0 };
        let [b0, b1, b2] = &mut self.beside;
        [
            HostRange::of(buf(&mut self.x, n * d)),
            HostRange::of(buf(&mut self.xn, n * d)),
            HostRange::of(buf(&mut self.q, n * qd)),
            HostRange::of(buf(&mut self.k, n * kvd)),
            HostRange::of(buf(&mut self.v, n * kvd)),
            HostRange::of(buf(&mut self.att, n * qd)),
            HostRange::of(buf(&mut self.y, n * d)),
            HostRange::of(buf(&mut self.gate, n * ff)),
            HostRange::of(buf(&mut self.up, n * ff)),
            HostRange::of(buf(&mut self.cs_global, n * half)),
            HostRange::of(buf(&mut self.cs_local, local)),
            HostRange::of(buf(&mut self.h, n * d)),
            HostRange::of(buf(&mut self.pl, pl)),
            HostRange::of(buf(&mut self.pl_tok, pl)),
            HostRange::of(buf(&mut self.pl_gate, n * cfg.n_embd_per_layer)),
            HostRange::of(buf(b0, beside)),
            HostRange::of(buf(b1, beside)),
            HostRange::of(buf(b2, beside)),
        ]
    }
}

/// Inner size of the dense FFN buffers (none for a mixture of experts without a dense MLP: its
/// blocks have their own).
fn dense_ff(cfg: &ModelConfig) -> usize {
    if cfg.moe.is_some() && !cfg.moe_beside_dense() { 0 } else { cfg.n_ff }
}

/// Whether the sliding-window layers rotate with their own RoPE parameters.
fn has_local_rope(cfg: &ModelConfig) -> bool {
    cfg.swa_layers.iter().any(|&l| l)
        && (cfg.rope_local != cfg.rope_global || cfg.rope_dims_swa != cfg.rope_dims)
}

/// Ends a backend pass when dropped (also when the pass fails or panics).
struct PassGuard<'a> {
    be: &'a dyn Backend,
    pass: PassId,
}

impl Drop for PassGuard<'_> {
    fn drop(&mut self) {
        self.be.end_pass(self.pass);
    }
}

/// `v[..len]`, growing `v` (zero-filled) when shorter.
pub(super) fn buf<T: Default + Clone>(v: &mut Vec<T>, len: usize) -> &mut [T] {
    if v.len() < len {
        v.resize(len, T::default());
    }
    &mut v[..len]
}

impl Model {
    /// Runs a batch through the model, appending each token's keys and values to its sequence in
    /// `kv`, and returns the logits of the entries that asked for them.
    pub fn forward(&self, batch: &Batch, kv: &mut KvCache) -> Result<Logits> {
        let mut logits = Logits::default();
        self.forward_into(batch, kv, &mut logits)?;
        Ok(logits)
    }

    /// [`Model::forward`] writing into `logits`, whose buffers are reused: with a `logits` kept
    /// between decode steps, a step allocates nothing.
    pub fn forward_into(&self, batch: &Batch, kv: &mut KvCache, logits: &mut Logits) -> Result<()> {
        self.check_generative()?;
        self.prepare_weights();
        let be = self.placement.backend_for(batch, kv);
        let mut ws = self.take_workspace();
        let res = self.in_pass(be, batch, &mut ws, |ws| {
            self.forward_blocks(be, batch, kv, ws)?;
            self.lm_head(be, batch, ws, logits)
        });
        self.return_workspace(ws);
        res
    }

    /// Runs `f` as one backend pass over the workspace's buffers sized for `batch`
    /// ([`Backend::begin_pass`]: a GPU backend keeps them on its device meanwhile).
    fn in_pass<R>(
        &self,
        be: &dyn Backend,
        batch: &Batch,
        ws: &mut Workspace,
        f: impl FnOnce(&mut Workspace) -> Result<R>,
    ) -> Result<R> {
        let scratch = ws.reserve(&self.config, batch.entries().len());
        let pass = be.begin_pass(&scratch, &mut self.weights.constants())?;
        let _guard = PassGuard { be, pass };
        f(ws)
    }

    /// The final norm and the LM head, only for the rows that want logits.
    fn lm_head(
        &self,
        be: &dyn Backend,
        batch: &Batch,
        ws: &mut Workspace,
        logits: &mut Logits,
    ) -> Result<()> {
        let cfg = &self.config;
        let w = &self.weights;
        let d = cfg.n_embd;
        let Workspace { x, xn, out_idx, h, .. } = ws;
        out_idx.clear();
        out_idx.extend(batch.entries().iter().enumerate().filter(|(_, e)| e.logits).map(|(i, _)| i));
        let m = out_idx.len();
        let n = batch.entries().len();
        let h = buf(h, m * d); // [m, d]
        if m == n {
            be.rms_norm(&x[..m * d], &w.output_norm, cfg.norm_eps, h)?;
        } else {
            // Gather the rows first (on the host) so that the norm is one call.
            if m <= 8 {
                for &i in out_idx.iter() {
                    be.to_host(&mut x[i * d..(i + 1) * d])?;
                }
            } else {
                be.to_host(&mut x[..n * d])?;
            }
            let rows = buf(xn, m * d); // [m, d]
            for (j, &i) in out_idx.iter().enumerate() {
                rows[j * d..(j + 1) * d].copy_from_slice(&x[i * d..(i + 1) * d]);
            }
            be.host_wrote(rows)?;
            be.rms_norm(rows, &w.output_norm, cfg.norm_eps, h)?;
        }
        let out = logits.reset(cfg.n_vocab, out_idx); // [m, n_vocab]
        if m > 0 {
            be.matmul(&w.output, h, m, out)?;
        }
        if let Some(s) = cfg.logit_scale {
            be.scale(out, 1.0 / s)?;
        }
        if let Some(c) = cfg.final_logit_softcap {
            be.softcap(out, c)?;
        }
        Ok(())
    }

    /// Runs a batch through the model like [`Model::forward`] and returns the final hidden state
    /// of every entry (after the output norm, before the LM head): the embeddings that pooling
    /// starts from. `[n_tokens, n_embd]`
    pub fn forward_hidden(&self, batch: &Batch, kv: &mut KvCache) -> Result<Vec<f32>> {
        self.check_generative()?;
        let cfg = &self.config;
        self.prepare_weights();
        let be = self.placement.backend_for(batch, kv);
        let mut ws = self.take_workspace();
        let n = batch.entries().len() * cfg.n_embd;
        let out = self.in_pass(be, batch, &mut ws, |ws| {
            self.forward_blocks(be, batch, kv, ws)?;
            be.to_host(&mut ws.x[..n])?;
            Ok(ws.x[..n].to_vec())
        });
        let out = out.and_then(|mut x| {
            be.rms_norm_inplace(&mut x, &self.weights.output_norm, cfg.norm_eps)?;
            Ok(x)
        });
        self.return_workspace(ws);
        out
    }

    /// An error for an encoder: it has no causal pass over a KV cache to run.
    pub(crate) fn check_generative(&self) -> Result<()> {
        if self.config.arch.is_encoder() {
            return Err(Error::InvalidInput(format!(
                "{} is an encoder model: it embeds text (ferrolm embed, /v1/embeddings) but cannot generate",
                self.config.arch.name()
            )));
        }
        Ok(())
    }

    /// A workspace from the model's pool of them (a new one when every one is in use).
    fn take_workspace(&self) -> Workspace {
        self.workspaces.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default()
    }

    /// Gives a workspace back for the next pass.
    fn return_workspace(&self, ws: Workspace) {
        self.workspaces.lock().unwrap_or_else(|e| e.into_inner()).push(ws);
    }

    /// Embeds the batch and runs every transformer block, leaving the residual stream in
    /// `ws.x[..n * n_embd]`.
    fn forward_blocks(
        &self,
        be: &dyn Backend,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
    ) -> Result<()> {
        let cfg = &self.config;
        let entries = batch.entries();
        let (kvd, hd) = (cfg.kv_dim(), cfg.head_dim);
        if kv.n_layer() != cfg.n_layer || kv.kv_dim() != kvd {
            return Err(Error::InvalidInput("KV cache was made for a different model".into()));
        }
        kv.types().0.check_width(hd)?;
        kv.types().1.check_width(hd)?;
        be.check_kv(kv)?;
        if let Some(e) = entries.iter().find(|e| e.token as usize >= cfg.n_vocab) {
            return Err(Error::InvalidInput(format!(
                "token id {} is outside the vocabulary ({})",
                e.token, cfg.n_vocab
            )));
        }
        // Reserve a physical slot for every token before computing anything, so a full context
        // fails cleanly. On failure, roll back the slots already taken.
        let slots = &mut ws.slots;
        slots.clear();
        for e in entries {
            match kv.push_slot(e.seq, e.pos) {
                Ok(s) => slots.push(s),
                Err(err) => {
                    release_slots(entries, slots, kv);
                    return Err(err);
                }
            }
        }

        if let Some(layout) = cfg.recurrent_state()
            && let Err(e) = recurrent::begin(layout, entries, kv)
        {
            release_slots(entries, &ws.slots, kv);
            return Err(e);
        }
        if let Err(e) = self.compute_blocks(be, batch, kv, ws) {
            // A backend failed mid-way: give the slots back, as if the pass never ran (a
            // recurrent state the pass had begun to advance is dropped with them).
            release_slots(entries, &ws.slots, kv);
            return Err(e);
        }
        if cfg.is_recurrent() {
            recurrent::end(entries, kv);
        }
        Ok(())
    }

    /// The batch's RoPE angle tables into `ws.cs_global` and, when the sliding-window layers
    /// rotate with their own parameters, `ws.cs_local`: they depend only on the position and
    /// the layer kind, so they are computed once per batch. `n_ctx`: the cache's capacity.
    fn rope_tables(
        &self,
        be: &dyn Backend,
        entries: &[BatchEntry],
        n_ctx: usize,
        ws: &mut Workspace,
    ) -> Result<()> {
        let cfg = &self.config;
        let n = entries.len();
        let half = (cfg.rope_dims / 2).max(1);
        let factors = self.weights.rope_factors.for_context(n_ctx, cfg.rope_global.n_ctx_orig);
        ws.pos.clear();
        ws.pos.extend(entries.iter().map(|e| e.pos));
        let cs_global = buf(&mut ws.cs_global, n * half); // [n, rope_dims / 2]
        be.rope_cos_sin(&ws.pos, cfg.rope_dims, &cfg.rope_global, factors, cs_global)?;
        if has_local_rope(cfg) {
            let half_swa = (cfg.rope_dims_swa / 2).max(1);
            let cs_local = buf(&mut ws.cs_local, n * half_swa); // [n, rope_dims_swa / 2]
            let local_factors = if cfg.local_rope_factors() { factors } else { None };
            be.rope_cos_sin(&ws.pos, cfg.rope_dims_swa, &cfg.rope_local, local_factors, cs_local)?;
        }
        Ok(())
    }

    /// The body of [`Model::forward_blocks`] once every token has its slot (`ws.slots`).
    fn compute_blocks(
        &self,
        be: &dyn Backend,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
    ) -> Result<()> {
        let cfg = &self.config;
        let w = &self.weights;
        let entries = batch.entries();
        let n = entries.len();
        let (d, qd, kvd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), dense_ff(cfg));
        self.rope_tables(be, entries, kv.capacity(), ws)?;
        // Token embeddings. [n, d]
        let x = buf(&mut ws.x, n * d);
        let ids = &mut ws.ids;
        ids.clear();
        ids.extend(entries.iter().map(|e| e.token));
        be.gather(&w.token_embd, ids, cfg.embed_scale.unwrap_or(1.0), x)?;
        self.per_layer_inputs(be, x, ids, (&mut ws.pl, &mut ws.pl_tok))?;

        let xn = buf(&mut ws.xn, n * d); // [n, d]
        let y = buf(&mut ws.y, n * d); // [n, d]
        let beside = if cfg.moe_beside_dense() { n * d } else { 0 };
        let [b0, b1, b2] = &mut ws.beside;
        let mut ffn_scratch = FfnScratch {
            gate: buf(&mut ws.gate, n * ff), // [n, n_ff]
            up: buf(&mut ws.up, n * ff),     // [n, n_ff]
            moe_in: buf(b0, beside),         // [n, d]
            router_in: buf(b1, beside),      // [n, d]
            moe_out: buf(b2, beside),        // [n, d]
            moe: &mut ws.moe,
        };
        let (half, half_swa) = ((cfg.rope_dims / 2).max(1), (cfg.rope_dims_swa / 2).max(1));
        let has_local = has_local_rope(cfg);
        let mut attn = AttnScratch {
            q: buf(&mut ws.q, n * qd),     // [n, n_head * head_dim]
            k: buf(&mut ws.k, n * kvd),    // [n, n_head_kv * head_dim]
            v: buf(&mut ws.v, n * kvd),    // [n, n_head_kv * head_dim]
            att: buf(&mut ws.att, n * qd), // [n, n_head * head_dim]
            observe: (&mut ws.mass, &mut ws.q_seq, &mut ws.pos_seq),
            kv16: &mut ws.kv16,
            gated: (&mut ws.qgate, &mut ws.gates),
            slots: &ws.slots,
            // Whether an eviction policy wants this batch's attention (H2O) or its queries
            // (SnapKV).
            tracking: entries.iter().any(|e| kv.seq(e.seq).is_some_and(|s| s.tracks_attention())),
            logging: entries.iter().any(|e| kv.seq(e.seq).is_some_and(|s| s.query_log().is_some())),
            cs_global: &ws.cs_global[..n * half], // [n, rope_dims / 2]
            cs_local: &ws.cs_local[..if has_local { n * half_swa } else { 0 }], // [n, rope_dims_swa / 2]
            kv_types: kv.types(),
        };
        let mut n_recurrent = 0; // recurrent layers so far: the index of the next one's state

        for (il, lw) in w.layers.iter().enumerate() {
            be.rms_norm(x, &lw.attn_norm, cfg.norm_eps, xn)?;
            match (&lw.mixer, &cfg.delta_net) {
                (Mixer::Attention(aw), _) => self.attention_layer(be, il, aw, batch, kv, xn, y, &mut attn)?,
                (Mixer::DeltaNet(dw), Some(dn)) => {
                    let at = (n_recurrent, cfg.norm_eps);
                    delta_net::delta_net(be, dw, dn, at, entries, kv, xn, y, &mut ws.delta)?;
                    n_recurrent += 1;
                }
                (Mixer::DeltaNet(_), None) => {
                    return Err(Error::Config("delta net weights in a model configured without them".into()));
                }
                (Mixer::ShortConv(cw), _) => {
                    let sc = cfg.short_conv.as_ref().ok_or_else(|| {
                        Error::Config("short convolution weights in a model configured without them".into())
                    })?;
                    short_conv::short_conv(be, cw, sc, n_recurrent, entries, kv, xn, y, &mut ws.short_conv)?;
                    n_recurrent += 1;
                }
            }
            self.residual_add(be, lw.post_attn_norm.as_deref(), x, y)?;

            // Feed-forward.
            be.rms_norm(x, &lw.ffn_norm, cfg.norm_eps, xn)?;
            self.feed_forward(be, &lw.ffn, (x, xn), n, y, &mut ffn_scratch)?;
            self.residual_add(be, lw.post_ffn_norm.as_deref(), x, y)?;
            if let Some(pb) = &lw.per_layer {
                let pd = cfg.n_embd_per_layer;
                let e = &ws.pl[il * n * pd..(il + 1) * n * pd]; // [n, n_embd_per_layer]
                per_layer_branch(be, pb, (cfg.norm_eps, self.exact_f32), x, e, &mut ws.pl_gate, y)?;
            }
            if let Some(s) = lw.out_scale {
                be.scale(x, s)?;
            }
        }
        Ok(())
    }

    /// Attention layer `il` over the normalised rows `xn` (`[n, n_embd]`), its output projected
    /// into `y` (`[n, n_embd]`): queries, keys and values, the cache, what eviction policies
    /// observe, a quantized cache's value rotation undone, Qwen 3.5's output gates.
    #[allow(clippy::too_many_arguments)]
    fn attention_layer(
        &self,
        be: &dyn Backend,
        il: usize,
        aw: &AttentionWeights,
        batch: &Batch,
        kv: &mut KvCache,
        xn: &[f32],
        y: &mut [f32],
        s: &mut AttnScratch<'_>,
    ) -> Result<()> {
        let cfg = &self.config;
        let entries = batch.entries();
        let (n, qd, kvd) = (entries.len(), cfg.q_dim(), cfg.kv_dim());
        let cs = if !s.cs_local.is_empty() && cfg.swa_layers[il] { s.cs_local } else { s.cs_global };
        let own_kv = self.project_qkv(be, il, aw, xn, n, s, cs)?;
        if own_kv {
            store_kv(be, entries, s.slots, kv, il, (s.k, s.v), kvd, s.kv16)?;
        }
        if s.logging || s.tracking {
            be.to_host(s.q)?;
        }
        if s.logging {
            for (t, e) in entries.iter().enumerate() {
                kv.seq_mut(e.seq).observe_query(il, e.pos, &s.q[t * qd..(t + 1) * qd]);
            }
        }
        // A KV-shared layer attends over its source layer's keys and values.
        let (shape, src) = (self.attention_shape(il), cfg.kv_source.get(il).copied().unwrap_or(il));
        be.attention(shape, entries, batch.prompt_chunks(), kv, src, s.q, s.att)?;
        if s.tracking {
            let (mass, q_seq, pos_seq) = &mut s.observe;
            report_attention(be, shape, entries, kv, src, s.q, cfg.n_layer, (mass, q_seq, pos_seq))?;
        }
        let hdl = cfg.layer_head_dim(il);
        if hdl != cfg.head_dim {
            unpad_heads(be, s.att, cfg.head_dim, hdl)?;
        }
        let att = &mut s.att[..n * cfg.n_head * hdl];
        if let Some(r) = KvRotation::new(s.kv_types, hdl).v {
            hadamard_rows(be, att, r)?;
        }
        if cfg.attn_output_gate {
            be.to_host(att)?;
            for (a, &g) in att.iter_mut().zip(s.gated.1.iter()) {
                *a /= 1.0 + (-g).exp();
            }
            be.host_wrote(att)?;
        }
        be.matmul(&aw.wo, att, n, y)?;
        if let Some(b) = &aw.wo_bias {
            be.add_bias(y, b)?;
        }
        Ok(())
    }

    /// Layer `il`'s queries, keys and values of the normalised rows `xn` (`[n, n_embd]`) into
    /// `q` (`[n, n_head * head_dim]`), `k` and `v` (`[n, n_head_kv * head_dim]`): projected,
    /// biased, normalised and rotated (`cs`: the layer's RoPE table; then the Walsh–Hadamard
    /// rotation of a quantized cache, [`KvRotation`]) at the layer's own head size, then
    /// zero-padded to `head_dim` when that is larger, and each key/value head repeated
    /// up to `n_head_kv` heads when the layer has fewer. Keys and values only for a layer with
    /// its own (returns whether it has them).
    #[allow(clippy::too_many_arguments)]
    fn project_qkv(
        &self,
        be: &dyn Backend,
        il: usize,
        aw: &AttentionWeights,
        xn: &[f32],
        n: usize,
        s: &mut AttnScratch<'_>,
        cs: &[(f32, f32)],
    ) -> Result<bool> {
        let cfg = &self.config;
        let (hdl, n_kv) = (cfg.layer_head_dim(il), cfg.layer_n_head_kv(il));
        let (ql, kvl) = (n * cfg.n_head * hdl, n * n_kv * hdl);
        let (qs, ks, vs) = (&mut s.q[..ql], &mut s.k[..kvl], &mut s.v[..kvl]);
        let gated = cfg.attn_output_gate;
        let qgate = buf(s.gated.0, if gated { 2 * ql } else { 0 }); // [n, n_head, 2, head_dim]
        let q_out = if gated { &mut *qgate } else { &mut *qs };
        let own_kv = match (&aw.wk, &aw.wv) {
            (Some(wk), Some(wv)) => {
                let mut jobs = [
                    MatmulJob { w: &aw.wq, out: q_out },
                    MatmulJob { w: wk, out: ks },
                    MatmulJob { w: wv, out: vs },
                ];
                be.matmul_many(xn, n, &mut jobs)?;
                true
            }
            (Some(wk), None) => {
                // The keys, before their norm and rotation, are also the values.
                be.matmul_many(
                    xn,
                    n,
                    &mut [MatmulJob { w: &aw.wq, out: q_out }, MatmulJob { w: wk, out: ks }],
                )?;
                be.to_host(ks)?;
                vs.copy_from_slice(ks);
                be.host_wrote(vs)?;
                true
            }
            (None, _) => {
                be.matmul(&aw.wq, xn, n, q_out)?;
                false
            }
        };
        if gated {
            split_gates(be, qgate, qs, buf(s.gated.1, ql), hdl)?;
        }
        if let Some([bq, bk, bv]) = &aw.qkv_bias {
            be.add_bias(qs, bq)?;
            be.add_bias(ks, bk)?;
            be.add_bias(vs, bv)?;
        }
        if let Some(qn) = &aw.q_norm {
            be.rms_norm_inplace(qs, qn, cfg.norm_eps)?;
        }
        if let (Some(kn), true) = (&aw.k_norm, own_kv) {
            be.rms_norm_inplace(ks, kn, cfg.norm_eps)?;
        }
        if let (Some(vn), true) = (&aw.v_norm, own_kv) {
            be.rms_norm_inplace(vs, vn, cfg.norm_eps)?;
        }
        if cfg.rope_layers[il] {
            be.rope(qs, n, hdl, cs, cfg.rope_style)?;
            if own_kv {
                be.rope(ks, n, hdl, cs, cfg.rope_style)?;
            }
        }
        let rot = KvRotation::new(s.kv_types, hdl);
        if let Some(r) = rot.k {
            hadamard_rows(be, qs, r)?;
            if own_kv {
                hadamard_rows(be, ks, r)?;
            }
        }
        if let (Some(r), true) = (rot.v, own_kv) {
            hadamard_rows(be, vs, r)?;
        }
        let hd = cfg.head_dim;
        if hdl != hd {
            spread_heads(be, s.q, n * cfg.n_head, hdl, (1, hd))?;
        }
        let rep = cfg.n_head_kv / n_kv;
        if own_kv && (hdl != hd || rep != 1) {
            spread_heads(be, s.k, n * n_kv, hdl, (rep, hd))?;
            spread_heads(be, s.v, n * n_kv, hdl, (rep, hd))?;
        }
        Ok(own_kv)
    }

    /// Gemma 4's per-layer embeddings of the batch into `bufs.0` (`[n_layer, n, n_pl]`, layer
    /// major; `bufs.1`: token-major scratch): `(norm(P · x / √n_embd) + E[id] · √n_pl) / √2`,
    /// `x` the scaled token embeddings (`[n, n_embd]`), `P` the model projection, `E` the table,
    /// the norm over each layer's slice. Nothing for a model without them.
    fn per_layer_inputs(
        &self,
        be: &dyn Backend,
        x: &[f32],
        ids: &[u32],
        bufs: (&mut Vec<f32>, &mut Vec<f32>),
    ) -> Result<()> {
        let cfg = &self.config;
        let Some(pe) = &self.weights.per_layer else { return Ok(()) };
        let (n, l, p) = (ids.len(), cfg.n_layer, cfg.n_embd_per_layer);
        let proj = buf(bufs.1, n * l * p); // [n, n_layer * n_pl]
        be.matmul(&pe.model_proj, x, n, proj)?;
        be.scale(proj, 1.0 / (cfg.n_embd as f32).sqrt())?;
        be.rms_norm_inplace(proj, &pe.proj_norm, cfg.norm_eps)?;
        let out = buf(bufs.0, n * l * p); // [n_layer, n, n_pl], token-major at first
        be.gather(&pe.tok_embd, ids, (p as f32).sqrt(), out)?;
        be.add(proj, out)?;
        be.scale(proj, std::f32::consts::FRAC_1_SQRT_2)?;
        // Layer-major, so that each block reads one contiguous `[n, n_pl]` slice.
        be.to_host(proj)?;
        for (t, row) in proj.chunks_exact(l * p).enumerate() {
            for (il, part) in row.chunks_exact(p).enumerate() {
                out[(il * n + t) * p..(il * n + t + 1) * p].copy_from_slice(part);
            }
        }
        be.host_wrote(out)?;
        Ok(())
    }

    /// `x += scale · post_norm(y)`: a branch's output (`y`, overwritten) into the residual
    /// stream, through the block's optional post-norm (Gemma 2/3) and residual scale (Granite).
    fn residual_add(
        &self,
        be: &dyn Backend,
        post_norm: Option<&[f32]>,
        x: &mut [f32],
        y: &mut [f32],
    ) -> Result<()> {
        let cfg = &self.config;
        if let Some(pn) = post_norm {
            be.rms_norm_inplace(y, pn, cfg.norm_eps)?;
        }
        if let Some(s) = cfg.residual_scale {
            be.scale(y, s)?;
        }
        be.add(x, y)?;
        Ok(())
    }

    /// A block's feed-forward network over the normalised rows `xn` (`[n, n_embd]`) of the
    /// residual stream `x`, its output into `y`: one gated FFN, a mixture of experts, or both
    /// side by side (Gemma 4, whose experts and router read their own norms of `x`).
    fn feed_forward(
        &self,
        be: &dyn Backend,
        ffn: &Ffn,
        (x, xn): (&[f32], &mut [f32]),
        n: usize,
        y: &mut [f32],
        s: &mut FfnScratch<'_>,
    ) -> Result<()> {
        let cfg = &self.config;
        let (act, exact, eps) = (cfg.activation, self.exact_f32, cfg.norm_eps);
        let dense = |f: &FfnWeights, xn: &mut [f32], y: &mut [f32], gate: &mut [f32], up: &mut [f32]| {
            // This layer's width (Gemma 4's layers differ).
            let m = n * f.gate.rows;
            gated_ffn(be, f, None, act, exact, xn, n, (&mut gate[..m], &mut up[..m]), y)
        };
        let no_experts = || Error::Config("expert weights in a model configured without experts".into());
        match ffn {
            Ffn::Dense(f) => dense(f, xn, y, s.gate, s.up),
            Ffn::Moe(m) => {
                let mc = cfg.moe.as_ref().ok_or_else(no_experts)?;
                moe_ffn(be, m, mc, act, exact, (xn, None), n, y, s.moe)
            }
            Ffn::DenseAndMoe(p) => {
                let mc = cfg.moe.as_ref().ok_or_else(no_experts)?;
                dense(&p.dense, xn, y, s.gate, s.up)?;
                be.rms_norm_inplace(y, &p.dense_post_norm, eps)?;
                be.rms_norm(x, &p.moe_pre_norm, eps, s.moe_in)?;
                be.rms_norm(x, &p.router_norm, eps, s.router_in)?;
                moe_ffn(be, &p.moe, mc, act, exact, (s.moe_in, Some(s.router_in)), n, s.moe_out, s.moe)?;
                be.rms_norm_inplace(s.moe_out, &p.moe_post_norm, eps)?;
                be.add(y, s.moe_out)?;
                Ok(())
            }
        }
    }
}

/// A pass's scratch for the attention layers.
struct AttnScratch<'a> {
    /// Queries. `[n, n_head * head_dim]`
    q: &'a mut [f32],
    /// Keys. `[n, n_head_kv * head_dim]`
    k: &'a mut [f32],
    /// Values. `[n, n_head_kv * head_dim]`
    v: &'a mut [f32],
    /// Attention output. `[n, n_head * head_dim]`
    att: &'a mut [f32],
    /// What H2O's observation needs: attention mass, one sequence's queries and positions.
    observe: (&'a mut Vec<f32>, &'a mut Vec<f32>, &'a mut Vec<u32>),
    /// The batch's keys and values as f16. `[2, n, kv_dim]`
    kv16: &'a mut Vec<f16>,
    /// Qwen 3.5's gated queries as projected (`[n, 2 q_dim]`), and their gates (`[n, q_dim]`).
    gated: (&'a mut Vec<f32>, &'a mut Vec<f32>),
    /// KV slot of each batch entry. `[n]`
    slots: &'a [usize],
    /// Whether an eviction policy wants the attention (H2O).
    tracking: bool,
    /// Whether an eviction policy wants the queries (SnapKV).
    logging: bool,
    /// RoPE tables of the global layers (`[n, rope_dims / 2]`) and of the sliding ones (empty
    /// when they rotate alike).
    cs_global: &'a [(f32, f32)],
    cs_local: &'a [(f32, f32)],
    /// The cache's key and value types: whether rows are rotated ([`KvRotation`]).
    kv_types: (KvType, KvType),
}

/// Splits gated queries (`qgate`: per token and head, `hd` queries then `hd` gates) into the
/// queries `q` and the gates `gates` (`[n, n_head * hd]` each), on the host.
fn split_gates(
    be: &dyn Backend,
    qgate: &mut [f32],
    q: &mut [f32],
    gates: &mut [f32],
    hd: usize,
) -> Result<()> {
    be.to_host(qgate)?;
    for ((pair, qh), gh) in
        qgate.chunks_exact(2 * hd).zip(q.chunks_exact_mut(hd)).zip(gates.chunks_exact_mut(hd))
    {
        qh.copy_from_slice(&pair[..hd]);
        gh.copy_from_slice(&pair[hd..]);
    }
    be.host_wrote(q)?;
    Ok(())
}

/// A pass's scratch for the feed-forward networks.
struct FfnScratch<'a> {
    /// Gate projection, then the gated activation. `[n, n_ff]`
    gate: &'a mut [f32],
    /// Up projection. `[n, n_ff]`
    up: &'a mut [f32],
    /// Experts beside a dense MLP: their normalised input. `[n, n_embd]` (else empty)
    moe_in: &'a mut [f32],
    /// Their router's normalised input. `[n, n_embd]` (else empty)
    router_in: &'a mut [f32],
    /// Their output. `[n, n_embd]` (else empty)
    moe_out: &'a mut [f32],
    /// The mixture-of-experts blocks' own buffers.
    moe: &'a mut MoeBuffers,
}

/// Spreads the `heads` heads of `hdl` values packed at the start of `x` (`[heads, hdl]`) to
/// `rep` consecutive copies of each, `hd` wide and zero-filled at the end
/// (`[heads * rep, hd]`), on the host.
fn spread_heads(
    be: &dyn Backend,
    x: &mut [f32],
    heads: usize,
    hdl: usize,
    (rep, hd): (usize, usize),
) -> Result<()> {
    let out = &mut x[..heads * rep * hd];
    be.to_host(&mut out[..heads * hdl])?;
    // From the last head and copy back, so that no head is overwritten before it moves.
    for h in (0..heads).rev() {
        for c in (0..rep).rev() {
            let dst = (h * rep + c) * hd;
            out.copy_within(h * hdl..(h + 1) * hdl, dst);
            out[dst + hdl..dst + hd].fill(0.0);
        }
    }
    be.host_wrote(out)?;
    Ok(())
}

/// The inverse of [`spread_heads`] without copies: the first `hdl` values of each `hd`-wide head of `x`, packed at
/// its start, on the host.
fn unpad_heads(be: &dyn Backend, x: &mut [f32], hd: usize, hdl: usize) -> Result<()> {
    let rows = x.len() / hd;
    be.to_host(x)?;
    for r in 0..rows {
        x.copy_within(r * hd..r * hd + hdl, r * hdl);
    }
    be.host_wrote(&x[..rows * hdl])?;
    Ok(())
}

/// A block's per-layer-embedding branch (Gemma 4): `x += norm(proj(gelu(gate · x) ⊙ e))`, `x`
/// the residual stream (`[n, n_embd]`), `e` the layer's per-layer embeddings
/// (`[n, n_embd_per_layer]`), `gate_buf` and `y` scratch. `(eps, exact)`: the norm's epsilon
/// and whether the activation is computed exactly.
fn per_layer_branch(
    be: &dyn Backend,
    pb: &PerLayerBlock,
    (eps, exact): (f32, bool),
    x: &mut [f32],
    e: &[f32],
    gate_buf: &mut Vec<f32>,
    y: &mut [f32],
) -> Result<()> {
    let g = buf(gate_buf, e.len()); // [n, n_embd_per_layer]
    let n = x.len() / pb.proj.rows.max(1);
    be.matmul(&pb.gate, x, n, g)?;
    be.gated_activation(g, e, Activation::GeluTanh, exact)?;
    be.matmul(&pb.proj, g, n, y)?;
    be.rms_norm_inplace(y, &pb.post_norm, eps)?;
    be.add(x, y)?;
    Ok(())
}

/// The Walsh–Hadamard rotation of a quantized cache ([`KvRotation`]) of each `n`-wide chunk of
/// `x`, on the host (the backends that keep quantized caches work in host memory).
/// A prompt's rows are spread over the worker threads in pieces of about 16k values.
fn hadamard_rows(be: &dyn Backend, x: &mut [f32], n: usize) -> Result<()> {
    const PIECE: usize = 1 << 14;
    be.to_host(x)?;
    if x.len() <= PIECE {
        ferrolm_kernels::rows::hadamard(x, n);
    } else {
        let piece = PIECE.next_multiple_of(n);
        crate::threads::par_chunks_mut(&crate::threads::pool(), x, piece, |_, p| {
            ferrolm_kernels::rows::hadamard(p, n)
        });
    }
    be.host_wrote(x)?;
    Ok(())
}

/// Gives back the slots taken for `entries` (as many as `slots` holds), newest first.
fn release_slots(entries: &[BatchEntry], slots: &[usize], kv: &mut KvCache) {
    for (e, &s) in entries.iter().zip(slots).rev() {
        kv.seq_mut(e.seq).truncate(s);
    }
}

/// The runs of a batch: `(sequence, first entry, one past the last)` for each stretch of
/// entries of one sequence in consecutive slots (a prompt chunk is one run).
fn runs<'a>(
    entries: &'a [BatchEntry],
    slots: &'a [usize],
) -> impl Iterator<Item = (SeqId, usize, usize)> + 'a {
    let mut t = 0;
    std::iter::from_fn(move || {
        if t >= entries.len() {
            return None;
        }
        let (seq, start) = (entries[t].seq, t);
        t += 1;
        while t < entries.len() && entries[t].seq == seq && slots[t] == slots[t - 1] + 1 {
            t += 1;
        }
        Some((seq, start, t))
    })
}

/// Writes each entry's key and value rows (`kv_rows`: `[n, kv_dim]` each) into its slot of
/// `layer`. An f16 cache is written by the backend's copy: one call per run of the batch when
/// it has one run, else one call for the whole batch into `kv16` whose rows are then copied to
/// each sequence's slots (on a GPU, one round trip per layer whatever the number of
/// sequences). Other storage types are written on the host.
#[allow(clippy::too_many_arguments)]
fn store_kv(
    be: &dyn Backend,
    entries: &[BatchEntry],
    slots: &[usize],
    kv: &mut KvCache,
    layer: usize,
    kv_rows: (&mut [f32], &mut [f32]),
    kvd: usize,
    kv16: &mut Vec<f16>,
) -> Result<()> {
    let (k, v) = kv_rows;
    let n = entries.len();
    if kv.types() == (KvType::F16, KvType::F16) && runs(entries, slots).nth(1).is_some() {
        let (k16, v16) = buf(kv16, 2 * n * kvd).split_at_mut(n * kvd); // [n, kv_dim] each
        be.copy_to_f16(&k[..n * kvd], k16)?;
        be.copy_to_f16(&v[..n * kvd], v16)?;
        for (seq, t, end) in runs(entries, slots) {
            let rows = t * kvd..end * kvd;
            let Some((kd, vd)) = kv.seq_mut(seq).rows_f16_mut(layer, slots[t]..slots[t] + (end - t)) else {
                return Err(Error::InvalidInput(format!("sequence {seq} has no f16 rows for its slots")));
            };
            kd.copy_from_slice(&k16[rows.clone()]);
            vd.copy_from_slice(&v16[rows]);
        }
        return Ok(());
    }
    for (seq, t, end) in runs(entries, slots) {
        let rows = t * kvd..end * kvd;
        let cache = kv.seq_mut(seq);
        match cache.rows_f16_mut(layer, slots[t]..slots[t] + (end - t)) {
            Some((kd, vd)) => {
                be.copy_to_f16(&k[rows.clone()], kd)?;
                be.copy_to_f16(&v[rows], vd)?;
            }
            None => {
                be.to_host(&mut k[rows.clone()])?;
                be.to_host(&mut v[rows])?;
                for i in t..end {
                    cache.write(layer, slots[i], &k[i * kvd..(i + 1) * kvd], &v[i * kvd..(i + 1) * kvd]);
                }
            }
        }
    }
    Ok(())
}

/// Computes the attention each query of the batch gave to each slot of its sequence in `layer`
/// and reports it to the sequences whose eviction policy asked for it
/// ([`crate::kv::SeqCache::observe_attention`]); the forward pass keeps nothing of it. `bufs`:
/// reused buffers (mass, queries, positions).
#[allow(clippy::too_many_arguments)]
fn report_attention(
    be: &dyn Backend,
    shape: AttentionShape,
    entries: &[BatchEntry],
    kv: &mut KvCache,
    layer: usize,
    q: &[f32],
    n_layer: usize,
    bufs: (&mut Vec<f32>, &mut Vec<f32>, &mut Vec<u32>),
) -> Result<()> {
    let (mass, q_seq, pos_seq) = bufs;
    let qd = shape.n_head * shape.head_dim;
    for (i, e) in entries.iter().enumerate() {
        if entries[..i].iter().any(|x| x.seq == e.seq) {
            continue; // this sequence is done
        }
        let Some(seq) = kv.seq(e.seq).filter(|s| s.tracks_attention()) else { continue };
        q_seq.clear();
        pos_seq.clear();
        for (t, x) in entries.iter().enumerate().skip(i).filter(|(_, x)| x.seq == e.seq) {
            q_seq.extend_from_slice(&q[t * qd..(t + 1) * qd]);
            pos_seq.push(x.pos);
        }
        let len = seq.len();
        mass.clear();
        mass.resize(shape.n_head * len, 0.0);
        be.attention_mass(shape, seq, layer, q_seq, pos_seq, mass)?;
        kv.seq_mut(e.seq).observe_attention(mass, shape.n_head, n_layer);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{spread_heads, unpad_heads};
    use crate::backend::CpuBackend;

    #[test]
    fn heads_spread_to_wider_repeated_heads_and_back() {
        // Two tokens of two 2-wide heads, spread to 3-wide heads each repeated twice.
        let mut x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        x.resize(2 * 2 * 2 * 3, f32::NAN);
        spread_heads(&CpuBackend, &mut x, 4, 2, (2, 3)).expect("spread");
        let want =
            [1., 2., 0., 1., 2., 0., 3., 4., 0., 3., 4., 0., 5., 6., 0., 5., 6., 0., 7., 8., 0., 7., 8., 0.];
        assert_eq!(x, want);
        // Unrepeated padding round-trips.
        let mut y = vec![1.0, 2.0, 3.0, 4.0, f32::NAN, f32::NAN];
        spread_heads(&CpuBackend, &mut y, 2, 2, (1, 3)).expect("spread");
        assert_eq!(y, [1.0, 2.0, 0.0, 3.0, 4.0, 0.0]);
        unpad_heads(&CpuBackend, &mut y, 3, 2).expect("spread");
        assert_eq!(y[..4], [1.0, 2.0, 3.0, 4.0]);
    }
}
