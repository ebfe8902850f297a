//! The forward pass: one function for every architecture, driven by [`ModelConfig`].
//!
//! Reads top to bottom like a textbook transformer: embed, then per block
//! `x += attn(norm(x))` and `x += ffn(norm(x))`, then norm and the LM head. Every buffer lives
//! in a [`Workspace`] kept by the model between passes, so a decode step allocates nothing.

use super::{Model, RopeParams};
use crate::backend::cpu::{self, AttentionShape, MatmulJob};
use crate::engine::BatchEntry;
use crate::engine::{Batch, Logits};
use crate::kv::KvCache;
use crate::threads::{self, ThreadPool};
use crate::{Error, Result};

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
    /// Quantized activations of the current matmul. `[n, act_row_bytes]`
    xq: Vec<u8>,
    /// RoPE (cos, sin) of the global layers. `[n, rope_dims / 2]`
    cs_global: Vec<(f32, f32)>,
    /// RoPE (cos, sin) of the sliding-window layers. `[n, rope_dims / 2]`
    cs_local: Vec<(f32, f32)>,
    /// KV slot of each batch entry. `[n]`
    slots: Vec<usize>,
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
}

/// `v[..len]`, growing `v` (zero-filled) when shorter.
fn buf<T: Default + Clone>(v: &mut Vec<T>, len: usize) -> &mut [T] {
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
        let cfg = &self.config;
        let w = &self.weights;
        let d = cfg.n_embd;
        let pool = threads::pool();
        let mut ws = self.take_workspace();
        let res = self.forward_blocks(&pool, batch, kv, &mut ws);
        if let Err(e) = res {
            self.return_workspace(ws);
            return Err(e);
        }
        // Final norm and LM head, only for the rows that want logits.
        let Workspace { x, out_idx, h, xq, .. } = &mut ws;
        out_idx.clear();
        out_idx.extend(batch.entries().iter().enumerate().filter(|(_, e)| e.logits).map(|(i, _)| i));
        let m = out_idx.len();
        let h = buf(h, m * d); // [m, d]
        for (j, &i) in out_idx.iter().enumerate() {
            cpu::rms_norm_rows(
                &x[i * d..(i + 1) * d],
                &w.output_norm,
                cfg.norm_eps,
                &mut h[j * d..(j + 1) * d],
            );
        }
        let out = logits.reset(cfg.n_vocab, out_idx); // [m, n_vocab]
        if m > 0 {
            cpu::matmul(&pool, &w.output, h, m, out, xq);
        }
        if let Some(c) = cfg.final_logit_softcap {
            cpu::softcap(out, c);
        }
        self.return_workspace(ws);
        Ok(())
    }

    /// Runs a batch through the model like [`Model::forward`] and returns the final hidden state
    /// of every entry (after the output norm, before the LM head): the embeddings that pooling
    /// starts from. `[n_tokens, n_embd]`
    pub fn forward_hidden(&self, batch: &Batch, kv: &mut KvCache) -> Result<Vec<f32>> {
        let cfg = &self.config;
        let pool = threads::pool();
        let mut ws = self.take_workspace();
        let res = self.forward_blocks(&pool, batch, kv, &mut ws);
        let n = batch.entries().len() * cfg.n_embd;
        let out = res.map(|()| {
            let mut x = ws.x[..n].to_vec();
            cpu::rms_norm_inplace(&mut x, &self.weights.output_norm, cfg.norm_eps);
            x
        });
        self.return_workspace(ws);
        out
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
        pool: &ThreadPool,
        batch: &Batch,
        kv: &mut KvCache,
        ws: &mut Workspace,
    ) -> Result<()> {
        let cfg = &self.config;
        let w = &self.weights;
        let entries = batch.entries();
        let n = entries.len();
        let (d, qd, kvd, hd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim, cfg.n_ff);
        if kv.n_layer() != cfg.n_layer || kv.kv_dim() != kvd {
            return Err(Error::InvalidInput("KV cache was made for a different model".into()));
        }
        kv.types().0.check_width(hd)?;
        kv.types().1.check_width(hd)?;
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
                    for (e2, &s) in entries.iter().zip(slots.iter()).rev() {
                        kv.seq_mut(e2.seq).truncate(s);
                    }
                    return Err(err);
                }
            }
        }

        // Token embeddings. [n, d]
        let x = buf(&mut ws.x, n * d);
        for (e, row) in entries.iter().zip(x.chunks_exact_mut(d)) {
            w.token_embd.dequantize_row(e.token as usize, row);
            if let Some(s) = cfg.embed_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }

        let xn = buf(&mut ws.xn, n * d); // [n, d]
        let q = buf(&mut ws.q, n * qd); // [n, n_head * head_dim]
        let k = buf(&mut ws.k, n * kvd); // [n, n_head_kv * head_dim]
        let v = buf(&mut ws.v, n * kvd); // [n, n_head_kv * head_dim]
        let att = buf(&mut ws.att, n * qd); // [n, n_head * head_dim]
        let y = buf(&mut ws.y, n * d); // [n, d]
        let gate = buf(&mut ws.gate, n * ff); // [n, n_ff]
        let up = buf(&mut ws.up, n * ff); // [n, n_ff]
        let xq = &mut ws.xq;
        let (mass, q_seq, pos_seq) = (&mut ws.mass, &mut ws.q_seq, &mut ws.pos_seq);
        // Whether an eviction policy wants this batch's attention (H2O).
        let tracking = entries.iter().any(|e| kv.seq(e.seq).is_some_and(|s| s.tracks_attention()));
        // RoPE angles depend only on the position and the layer kind: computed once per batch.
        let half = cfg.rope_dims / 2;
        let rope_factors = w.rope_factors.for_context(kv.capacity(), cfg.rope_global.n_ctx_orig);
        let rope_table = |p: &RopeParams, cs: &mut [(f32, f32)]| {
            for (e, row) in entries.iter().zip(cs.chunks_exact_mut(half.max(1))) {
                cpu::rope_cos_sin(e.pos, cfg.rope_dims, p, rope_factors, row);
            }
        };
        let cs_global = buf(&mut ws.cs_global, n * half.max(1)); // [n, rope_dims / 2]
        rope_table(&cfg.rope_global, cs_global);
        let has_local = cfg.swa_layers.iter().any(|&l| l) && cfg.rope_local != cfg.rope_global;
        let cs_local = buf(&mut ws.cs_local, if has_local { n * half.max(1) } else { 0 });
        if has_local {
            rope_table(&cfg.rope_local, cs_local);
        }

        for (il, lw) in w.layers.iter().enumerate() {
            // Attention.
            cpu::rms_norm_rows(x, &lw.attn_norm, cfg.norm_eps, xn);
            cpu::matmul_many(
                pool,
                xn,
                n,
                &mut [
                    MatmulJob { w: &lw.wq, out: q },
                    MatmulJob { w: &lw.wk, out: k },
                    MatmulJob { w: &lw.wv, out: v },
                ],
                xq,
            );
            if let Some([bq, bk, bv]) = &lw.qkv_bias {
                cpu::add_bias_rows(q, bq);
                cpu::add_bias_rows(k, bk);
                cpu::add_bias_rows(v, bv);
            }
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                cpu::rms_norm_inplace(q, qn, cfg.norm_eps);
                cpu::rms_norm_inplace(k, kn, cfg.norm_eps);
            }
            let cs: &[(f32, f32)] = if has_local && cfg.swa_layers[il] { cs_local } else { cs_global };
            for (t, e) in entries.iter().enumerate() {
                let cos_sin = &cs[t * half..(t + 1) * half];
                cpu::rope_apply(&mut q[t * qd..(t + 1) * qd], hd, cos_sin, cfg.rope_style);
                cpu::rope_apply(&mut k[t * kvd..(t + 1) * kvd], hd, cos_sin, cfg.rope_style);
                let r = t * kvd..(t + 1) * kvd;
                let seq = kv.seq_mut(e.seq);
                seq.write(il, slots[t], &k[r.clone()], &v[r]);
                if let Some(log) = seq.query_log_mut() {
                    log.record(il, e.pos, &q[t * qd..(t + 1) * qd]);
                }
            }
            let shape = self.attention_shape(il);
            cpu::attention(shape, entries, batch.prompt_chunks(), kv, il, q, att);
            if tracking {
                accumulate_attention(shape, entries, kv, il, q, cfg.n_layer, (mass, q_seq, pos_seq));
            }
            cpu::matmul(pool, &lw.wo, att, n, y, xq);
            if let Some(pn) = &lw.post_attn_norm {
                cpu::rms_norm_inplace(y, pn, cfg.norm_eps);
            }
            cpu::add_inplace(x, y);

            // Feed-forward.
            cpu::rms_norm_rows(x, &lw.ffn_norm, cfg.norm_eps, xn);
            cpu::matmul_many(
                pool,
                xn,
                n,
                &mut [MatmulJob { w: &lw.w_gate, out: gate }, MatmulJob { w: &lw.w_up, out: up }],
                xq,
            );
            cpu::gated_activation(gate, up, cfg.activation, self.exact_f32);
            cpu::matmul(pool, &lw.w_down, gate, n, y, xq);
            if let Some(pn) = &lw.post_ffn_norm {
                cpu::rms_norm_inplace(y, pn, cfg.norm_eps);
            }
            cpu::add_inplace(x, y);
        }
        Ok(())
    }
}

/// Adds the attention each query of the batch gave to each slot of its sequence in `layer`,
/// averaged over heads and layers, to the slot scores of the sequences that track attention
/// (H2O's accumulated attention). `bufs`: reused buffers (mass, queries, positions).
fn accumulate_attention(
    shape: AttentionShape,
    entries: &[BatchEntry],
    kv: &mut KvCache,
    layer: usize,
    q: &[f32],
    n_layer: usize,
    bufs: (&mut Vec<f32>, &mut Vec<f32>, &mut Vec<u32>),
) {
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
        cpu::attention_mass(shape, seq, layer, q_seq, pos_seq, mass);
        let w = 1.0 / (shape.n_head * n_layer) as f32;
        let scores = kv.seq_mut(e.seq).scores_mut();
        for head in mass.chunks_exact(len.max(1)) {
            scores.iter_mut().zip(head).for_each(|(s, m)| *s += m * w);
        }
    }
}
