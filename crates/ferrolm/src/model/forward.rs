//! The forward pass: one function for every architecture, driven by [`ModelConfig`].
//!
//! Reads top to bottom like a textbook transformer: embed, then per block
//! `x += attn(norm(x))` and `x += ffn(norm(x))`, then norm and the LM head.

use super::{Model, RopeParams};
use crate::backend::cpu::{self, AttentionShape};
use crate::engine::{Batch, Logits};
use crate::kv::KvCache;
use crate::{Error, Result};

impl Model {
    /// Runs a batch through the model, appending each token's keys and values to its sequence in
    /// `kv`, and returns the logits of the entries that asked for them.
    pub fn forward(&self, batch: &Batch, kv: &mut KvCache) -> Result<Logits> {
        let cfg = &self.config;
        let w = &self.weights;
        let d = cfg.n_embd;
        let x = self.forward_blocks(batch, kv)?; // [n, d]

        // Final norm and LM head, only for the rows that want logits.
        let out_idx: Vec<usize> =
            batch.entries().iter().enumerate().filter(|(_, e)| e.logits).map(|(i, _)| i).collect();
        let m = out_idx.len();
        let mut h = vec![0.0f32; m * d]; // [m, d]
        for (j, &i) in out_idx.iter().enumerate() {
            cpu::rms_norm_rows(
                &x[i * d..(i + 1) * d],
                &w.output_norm,
                cfg.norm_eps,
                &mut h[j * d..(j + 1) * d],
            );
        }
        let mut logits = vec![0.0f32; m * cfg.n_vocab]; // [m, n_vocab]
        if m > 0 {
            cpu::matmul(&w.output, &h, m, &mut logits);
        }
        if let Some(c) = cfg.final_logit_softcap {
            cpu::softcap(&mut logits, c);
        }
        Ok(Logits::new(cfg.n_vocab, logits, out_idx))
    }

    /// Runs a batch through the model like [`Model::forward`] and returns the final hidden state
    /// of every entry (after the output norm, before the LM head): the embeddings that pooling
    /// starts from. `[n_tokens, n_embd]`
    pub fn forward_hidden(&self, batch: &Batch, kv: &mut KvCache) -> Result<Vec<f32>> {
        let cfg = &self.config;
        let mut x = self.forward_blocks(batch, kv)?; // [n, d]
        cpu::rms_norm_inplace(&mut x, &self.weights.output_norm, cfg.norm_eps);
        Ok(x)
    }

    /// Embeds the batch and runs every transformer block; returns the residual stream. `[n, d]`
    fn forward_blocks(&self, batch: &Batch, kv: &mut KvCache) -> Result<Vec<f32>> {
        let cfg = &self.config;
        let w = &self.weights;
        let entries = batch.entries();
        let n = entries.len();
        let (d, qd, kvd, hd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim, cfg.n_ff);
        if kv.n_layer() != cfg.n_layer || kv.kv_dim() != kvd {
            return Err(Error::InvalidInput("KV cache was made for a different model".into()));
        }
        if let Some(e) = entries.iter().find(|e| e.token as usize >= cfg.n_vocab) {
            return Err(Error::InvalidInput(format!(
                "token id {} is outside the vocabulary ({})",
                e.token, cfg.n_vocab
            )));
        }
        // Reserve a physical slot for every token before computing anything, so a full context
        // fails cleanly. On failure, roll back the slots already taken.
        let mut slots = Vec::with_capacity(n);
        for e in entries {
            match kv.push_slot(e.seq, e.pos) {
                Ok(s) => slots.push(s),
                Err(err) => {
                    for (e2, &s) in entries.iter().zip(&slots).rev() {
                        kv.seq_mut(e2.seq).truncate(s);
                    }
                    return Err(err);
                }
            }
        }

        // Token embeddings. [n, d]
        let mut x = vec![0.0f32; n * d];
        for (e, row) in entries.iter().zip(x.chunks_exact_mut(d)) {
            w.token_embd.dequantize_row(e.token as usize, row);
            if let Some(s) = cfg.embed_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }

        let mut xn = vec![0.0f32; n * d]; // [n, d]
        let mut q = vec![0.0f32; n * qd]; // [n, n_head * head_dim]
        let mut k = vec![0.0f32; n * kvd]; // [n, n_head_kv * head_dim]
        let mut v = vec![0.0f32; n * kvd]; // [n, n_head_kv * head_dim]
        let mut att = vec![0.0f32; n * qd]; // [n, n_head * head_dim]
        let mut y = vec![0.0f32; n * d]; // [n, d]
        let mut gate = vec![0.0f32; n * ff]; // [n, n_ff]
        let mut up = vec![0.0f32; n * ff]; // [n, n_ff]
        // RoPE angles depend only on the position and the layer kind: computed once per batch.
        let half = cfg.rope_dims / 2;
        let rope_factors = w.rope_factors.for_context(kv.capacity(), cfg.rope_global.n_ctx_orig);
        let rope_table = |p: &RopeParams| {
            let mut cs = vec![(0.0f32, 0.0f32); n * half]; // [n, rope_dims / 2]
            for (e, row) in entries.iter().zip(cs.chunks_exact_mut(half.max(1))) {
                cpu::rope_cos_sin(e.pos, cfg.rope_dims, p, rope_factors, row);
            }
            cs
        };
        let cs_global = rope_table(&cfg.rope_global);
        let has_local = cfg.swa_layers.iter().any(|&l| l) && cfg.rope_local != cfg.rope_global;
        let cs_local = if has_local { rope_table(&cfg.rope_local) } else { Vec::new() };

        for (il, lw) in w.layers.iter().enumerate() {
            // Attention.
            cpu::rms_norm_rows(&x, &lw.attn_norm, cfg.norm_eps, &mut xn);
            cpu::matmul(&lw.wq, &xn, n, &mut q);
            cpu::matmul(&lw.wk, &xn, n, &mut k);
            cpu::matmul(&lw.wv, &xn, n, &mut v);
            if let Some([bq, bk, bv]) = &lw.qkv_bias {
                cpu::add_bias_rows(&mut q, bq);
                cpu::add_bias_rows(&mut k, bk);
                cpu::add_bias_rows(&mut v, bv);
            }
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                cpu::rms_norm_inplace(&mut q, qn, cfg.norm_eps);
                cpu::rms_norm_inplace(&mut k, kn, cfg.norm_eps);
            }
            let cs = if has_local && cfg.swa_layers[il] { &cs_local } else { &cs_global };
            for (t, e) in entries.iter().enumerate() {
                let cos_sin = &cs[t * half..(t + 1) * half];
                cpu::rope_apply(&mut q[t * qd..(t + 1) * qd], hd, cos_sin, cfg.rope_style);
                cpu::rope_apply(&mut k[t * kvd..(t + 1) * kvd], hd, cos_sin, cfg.rope_style);
                let r = t * kvd..(t + 1) * kvd;
                kv.seq_mut(e.seq).write(il, slots[t], &k[r.clone()], &v[r]);
            }
            let shape = AttentionShape {
                n_head: cfg.n_head,
                n_head_kv: cfg.n_head_kv,
                head_dim: hd,
                scale: cfg.attn_scale,
                window: cfg.window_for_layer(il),
                softcap: cfg.attn_softcap,
            };
            cpu::attention(shape, entries, kv, il, &q, &mut att);
            cpu::matmul(&lw.wo, &att, n, &mut y);
            if let Some(pn) = &lw.post_attn_norm {
                cpu::rms_norm_inplace(&mut y, pn, cfg.norm_eps);
            }
            cpu::add_inplace(&mut x, &y);

            // Feed-forward.
            cpu::rms_norm_rows(&x, &lw.ffn_norm, cfg.norm_eps, &mut xn);
            cpu::matmul(&lw.w_gate, &xn, n, &mut gate);
            cpu::matmul(&lw.w_up, &xn, n, &mut up);
            cpu::gated_activation(&mut gate, &up, cfg.activation, self.exact_f32);
            cpu::matmul(&lw.w_down, &gate, n, &mut y);
            if let Some(pn) = &lw.post_ffn_norm {
                cpu::rms_norm_inplace(&mut y, pn, cfg.norm_eps);
            }
            cpu::add_inplace(&mut x, &y);
        }

        Ok(x)
    }
}
