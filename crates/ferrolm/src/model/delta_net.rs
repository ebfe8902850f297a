//! Gated delta net layers (Qwen 3.5's linear attention).
//!
//! For each token, a causal depthwise convolution (SiLU after it) over its projected queries,
//! keys and values and those of the `K - 1` tokens before; then, per value head, a
//! `[head_k_dim, head_v_dim]` state `S` updated by the gated delta rule
//!
//! ```text
//! S ← exp(g) · S;   S ← S + k ⊗ β (v − Sᵀk);   o = Sᵀq
//! ```
//!
//! with `q` and `k` L2-normalised per head (`q` also divided by `√head_k_dim`), `β = σ(b)`,
//! `g = a · softplus(α + dt_bias)` (`a < 0`); the output is RMS-normalised per head, multiplied by
//! `silu(z)` and projected back.
//!
//! The projections run on the backend over the whole batch; the convolution and the recurrence
//! run on the host, token after token, in each sequence's [`RecurrentState`]: one buffer per
//! delta net layer holding the last `K - 1` convolution inputs (`[K - 1, conv_dim]`, oldest
//! first), then the states (`[n_v_heads, head_k_dim, head_v_dim]`).
//!
//! [`super::recurrent`] checks before a pass that each sequence continues its state.

use super::config::DeltaNetConfig;
use super::forward::buf;
use super::recurrent::{causal_conv, layer_state};
use super::weights::{Loader, Weight};
use crate::backend::Backend;
use crate::batch::BatchEntry;
use crate::kv::{KvCache, SeqId};
use crate::ops::MatmulJob;
use crate::{Error, Result};

/// The weights of one gated delta net layer.
#[derive(Debug)]
pub struct DeltaNetWeights {
    /// Queries, keys and values before the convolution. `[conv_dim, n_embd]`
    pub qkv: Weight,
    /// Output gate `z`. `[v_dim, n_embd]`
    pub gate: Weight,
    /// `β`'s logits. `[n_v_heads, n_embd]`
    pub beta: Weight,
    /// The decay's input `α`. `[n_v_heads, n_embd]`
    pub alpha: Weight,
    /// Convolution taps, oldest input first. `[conv_dim, conv_kernel]`
    pub conv: Vec<f32>,
    /// Added to `α`. `[n_v_heads]`
    pub dt_bias: Vec<f32>,
    /// Decay rates `a = −exp(A_log)`. `[n_v_heads]`
    pub a: Vec<f32>,
    /// RMSNorm of each output head. `[head_v_dim]`
    pub norm: Vec<f32>,
    /// Output projection. `[n_embd, v_dim]`
    pub out: Weight,
}

impl DeltaNetWeights {
    /// Block `i`'s delta net from llama.cpp's tensor names (`attn_qkv`, `attn_gate`, `ssm_*`).
    pub(super) fn load(l: &Loader<'_>, i: usize, d: usize, cfg: &DeltaNetConfig) -> Result<Self> {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let (cd, vd, nv) = (cfg.conv_dim(), cfg.v_dim(), cfg.n_v_heads);
        let a = l.vector(&format!("blk.{i}.ssm_a"), nv)?;
        if let Some(h) = a.iter().position(|&a| a >= 0.0) {
            return Err(Error::Config(format!("blk.{i}.ssm_a[{h}] = {} must be negative", a[h])));
        }
        let (qkv, gate) = match l.tensors.contains(&n("ssm_in")) {
            // Qwen3-Next's files before llama.cpp split it (and its Hugging Face folders).
            true => {
                let (qkv, z) = qkvz_rows(cfg);
                let name = n("ssm_in");
                (l.matrix_rows(&name, cd + vd, d, &qkv)?, l.matrix_rows(&name, cd + vd, d, &z)?)
            }
            false => (l.matrix(&n("attn_qkv"), cd, d)?, l.matrix(&n("attn_gate"), vd, d)?),
        };
        let (beta, alpha) = match l.tensors.contains(&n("ssm_ba")) {
            // Qwen3-Next: for each key head, `β`'s rows of its value heads, then their `α`'s.
            true => {
                let r = nv / cfg.n_k_heads;
                let rows = |off: usize| (0..nv).map(|h| h / r * 2 * r + off + h % r).collect::<Vec<_>>();
                let name = n("ssm_ba");
                (l.matrix_rows(&name, 2 * nv, d, &rows(0))?, l.matrix_rows(&name, 2 * nv, d, &rows(r))?)
            }
            false => (l.matrix(&n("ssm_beta"), nv, d)?, l.matrix(&n("ssm_alpha"), nv, d)?),
        };
        Ok(Self {
            qkv,
            gate,
            beta,
            alpha,
            conv: l.vectors(&n("ssm_conv1d"), cd, cfg.conv_kernel)?,
            dt_bias: l.vector(&format!("blk.{i}.ssm_dt.bias"), nv)?,
            a,
            norm: l.vector(&n("ssm_norm"), cfg.head_v_dim)?,
            out: l.matrix(&n("ssm_out"), d, vd)?,
        })
    }

    /// Every matrix with its name's stem.
    pub(super) fn matrices(&self) -> Vec<(String, &Weight)> {
        let m = [("attn_qkv", &self.qkv), ("attn_gate", &self.gate), ("ssm_beta", &self.beta)];
        let m2 = [("ssm_alpha", &self.alpha), ("ssm_out", &self.out)];
        m.into_iter().chain(m2).map(|(n, w)| (n.to_string(), w)).collect()
    }
}

/// The rows of Qwen3-Next's fused `[q, k, v, z]` projection (`ssm_in`, Hugging Face's
/// `in_proj_qkvz`: for each key head its query, its key, then the values and gates of its value
/// heads) that give `attn_qkv` (all queries, all keys, all values) and those that give
/// `attn_gate`.
fn qkvz_rows(cfg: &DeltaNetConfig) -> (Vec<usize>, Vec<usize>) {
    let (nk, dk) = (cfg.n_k_heads, cfg.head_k_dim);
    let rv = cfg.v_dim() / nk; // value (and gate) rows of one key head
    let group = 2 * dk + 2 * rv;
    let part = |off: usize, len: usize| (0..nk).flat_map(move |g| g * group + off..g * group + off + len);
    let qkv = part(0, dk).chain(part(dk, dk)).chain(part(2 * dk, rv)).collect();
    (qkv, part(2 * dk + rv, rv).collect())
}

/// The buffers of the delta net layers, grown to the largest batch seen and reused.
#[derive(Debug, Default)]
pub(crate) struct DeltaNetBuffers {
    /// Projected queries, keys and values, then (in place) convolved and normalised.
    /// `[n, conv_dim]`
    qkv: Vec<f32>,
    /// Output gates. `[n, v_dim]`
    z: Vec<f32>,
    /// `β`'s logits, then `β`. `[n, n_v_heads]`
    beta: Vec<f32>,
    /// `α`, then the decay `exp(g)`. `[n, n_v_heads]`
    alpha: Vec<f32>,
    /// Outputs by sequence and head (`[seq][head][token][head_v_dim]`), then by token. `[n, v_dim]`
    o: Vec<f32>,
    /// One token's projections before the convolution. `[conv_dim]`
    raw: Vec<f32>,
    /// The batch's sequences and, for each, its tokens' indices in the batch.
    seqs: Vec<(SeqId, Vec<usize>)>,
}

/// Delta net layer number `ordinal` (among the model's delta net layers) over the normalised
/// rows `xn` (`[n, n_embd]`) of the batch, its output into `y` (`[n, n_embd]`), each token
/// advancing its sequence's state. The convolution runs token by token; the recurrence of each
/// (sequence, value head) pair is independent of the others and they run on the worker pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn delta_net(
    be: &dyn Backend,
    w: &DeltaNetWeights,
    cfg: &DeltaNetConfig,
    (ordinal, eps): (usize, f32),
    entries: &[BatchEntry],
    kv: &mut KvCache,
    xn: &[f32],
    y: &mut [f32],
    b: &mut DeltaNetBuffers,
) -> Result<()> {
    let n = entries.len();
    let (cd, vd, nv) = (cfg.conv_dim(), cfg.v_dim(), cfg.n_v_heads);
    let qkv = buf(&mut b.qkv, n * cd); // [n, conv_dim]
    let z = buf(&mut b.z, n * vd); // [n, v_dim]
    let beta = buf(&mut b.beta, n * nv); // [n, n_v_heads]
    let alpha = buf(&mut b.alpha, n * nv); // [n, n_v_heads]
    // Backends take at most three matrices a call.
    be.matmul_many(xn, n, &mut [MatmulJob { w: &w.qkv, out: qkv }, MatmulJob { w: &w.gate, out: z }])?;
    be.matmul_many(xn, n, &mut [MatmulJob { w: &w.beta, out: beta }, MatmulJob { w: &w.alpha, out: alpha }])?;
    for out in [&mut *qkv, &mut *z, &mut *beta, &mut *alpha] {
        be.to_host(out)?;
    }
    for (bt, at) in beta.chunks_exact_mut(nv).zip(alpha.chunks_exact_mut(nv)) {
        for h in 0..nv {
            bt[h] = 1.0 / (1.0 + (-bt[h]).exp());
            at[h] = (w.a[h] * softplus(at[h] + w.dt_bias[h])).exp();
        }
    }
    let raw = buf(&mut b.raw, cd);
    for (t, e) in entries.iter().enumerate() {
        let hist = &mut layer_state(kv, e.seq, ordinal)?[..(cfg.conv_kernel - 1) * cd];
        raw.copy_from_slice(&qkv[t * cd..(t + 1) * cd]);
        convolve(cfg, w, hist, raw, &mut qkv[t * cd..(t + 1) * cd]);
    }
    group_by_sequence(entries, &mut b.seqs);
    let o = buf(&mut b.o, n * vd); // [seq][head][token][dv], then [n, v_dim]
    recur(cfg, ordinal, kv, &b.seqs, (qkv, beta, alpha), o)?;
    by_token(o, &b.seqs, nv, cfg.head_v_dim, &mut b.raw);
    let o = &mut b.o[..n * vd];
    for (t, ot) in o.chunks_exact_mut(vd).enumerate() {
        gated_norm(ot, &z[t * vd..(t + 1) * vd], &w.norm, eps);
    }
    be.host_wrote(o)?;
    be.matmul(&w.out, o, n, y)?;
    Ok(())
}

/// The batch's sequences in order of first appearance, each with its tokens' indices.
fn group_by_sequence(entries: &[BatchEntry], seqs: &mut Vec<(SeqId, Vec<usize>)>) {
    seqs.iter_mut().for_each(|(_, v)| v.clear());
    let mut used = 0;
    for (t, e) in entries.iter().enumerate() {
        match seqs[..used].iter_mut().find(|(id, _)| *id == e.seq) {
            Some((_, v)) => v.push(t),
            None => {
                if used == seqs.len() {
                    seqs.push((e.seq, Vec::new()));
                }
                seqs[used].0 = e.seq;
                seqs[used].1.push(t);
                used += 1;
            }
        }
    }
    seqs.truncate(used);
}

/// The delta rule of every (sequence, value head) pair over its tokens, on the worker pool:
/// outputs into `o` as `[seq][head][token][head_v_dim]`. `x`: the convolved, normalised
/// queries, keys and values (`[n, conv_dim]`), `β` and the decays (`[n, n_v_heads]`).
fn recur(
    cfg: &DeltaNetConfig,
    ordinal: usize,
    kv: &mut KvCache,
    seqs: &[(SeqId, Vec<usize>)],
    x: (&[f32], &[f32], &[f32]),
    o: &mut [f32],
) -> Result<()> {
    let (dk, dv, nv, cd) = (cfg.head_k_dim, cfg.head_v_dim, cfg.n_v_heads, cfg.conv_dim());
    let skip = (cfg.conv_kernel - 1) * cd; // the convolution history before the states
    // One unit of work per (sequence, head): its state `[dk, dv]`, its outputs `[tokens, dv]`.
    let mut outs: Vec<Option<&mut [f32]>> = Vec::with_capacity(seqs.len());
    let mut rest = o;
    for (_, toks) in seqs {
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut(nv * toks.len() * dv);
        outs.push(Some(mine));
        rest = tail;
    }
    let mut units = Vec::with_capacity(seqs.len() * nv);
    for (seq, cache) in kv.iter_mut() {
        let Some(si) = seqs.iter().position(|(id, _)| *id == seq) else { continue };
        let missing = || Error::InvalidInput(format!("sequence {seq} has no recurrent state"));
        let state =
            cache.recurrent_mut().as_mut().and_then(|s| s.layers.get_mut(ordinal)).ok_or_else(missing)?;
        let out = outs[si].take().ok_or_else(missing)?;
        let per_head = out.chunks_exact_mut(seqs[si].1.len() * dv);
        for (h, (s, out)) in state[skip..].chunks_exact_mut(dk * dv).zip(per_head).enumerate() {
            units.push((si, h, std::sync::Mutex::new((s, out))));
        }
    }
    if units.len() != seqs.len() * nv {
        return Err(Error::InvalidInput("a sequence of the batch has no cache".into()));
    }
    let pool = crate::threads::pool();
    crate::threads::parallel_for(&pool, units.len(), |u| {
        let (si, h, unit) = &units[u];
        let mut guard = unit.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (s, out) = &mut *guard;
        let kh = cfg.k_head_of(*h);
        let mut mem = vec![0.0f32; dv];
        for (&t, oh) in seqs[*si].1.iter().zip(out.chunks_exact_mut(dv)) {
            let xt = &x.0[t * cd..(t + 1) * cd];
            let q = &xt[kh * dk..(kh + 1) * dk];
            let k = &xt[(cfg.n_k_heads + kh) * dk..(cfg.n_k_heads + kh + 1) * dk];
            let v = &xt[2 * cfg.n_k_heads * dk + h * dv..][..dv];
            let gates = (x.1[t * nv + h], x.2[t * nv + h]);
            delta_rule(s, (q, k, v), gates, oh, &mut mem);
        }
    });
    Ok(())
}

/// Reorders the outputs from `[seq][head][token][dv]` to `[token][head][dv]` in place
/// (`scratch` grows to a copy).
fn by_token(o: &mut [f32], seqs: &[(SeqId, Vec<usize>)], nv: usize, dv: usize, scratch: &mut Vec<f32>) {
    scratch.clear();
    scratch.extend_from_slice(o);
    let mut at = 0;
    for (_, toks) in seqs {
        for h in 0..nv {
            for &t in toks {
                o[(t * nv + h) * dv..][..dv].copy_from_slice(&scratch[at..at + dv]);
                at += dv;
            }
        }
    }
}

/// One token's causal depthwise convolution of `x` (`[conv_dim]`, the token's projections)
/// with the history `hist` (`[K - 1, conv_dim]`, oldest first, then advanced by `x`), SiLU,
/// and the queries and keys L2-normalised per head (the queries also / `√head_k_dim`), into
/// `out`.
fn convolve(cfg: &DeltaNetConfig, w: &DeltaNetWeights, hist: &mut [f32], x: &[f32], out: &mut [f32]) {
    causal_conv(&w.conv, cfg.conv_kernel, hist, x, out);
    out.iter_mut().for_each(|v| *v /= 1.0 + (-*v).exp());
    let (dk, nk) = (cfg.head_k_dim, cfg.n_k_heads);
    let (qs, rest) = out.split_at_mut(nk * dk);
    let q_scale = (dk as f32).sqrt().recip();
    for (q, k) in qs.chunks_exact_mut(dk).zip(rest[..nk * dk].chunks_exact_mut(dk)) {
        l2_normalise(q, q_scale);
        l2_normalise(k, 1.0);
    }
}

/// One head's delta rule for one token: `S ← decay · S; S ← S + k ⊗ β (v − Sᵀk)`, then
/// `out = Sᵀq`. `s`: `[dk, dv]`; `mem`: `[dv]` scratch.
fn delta_rule(
    s: &mut [f32],
    (q, k, v): (&[f32], &[f32], &[f32]),
    (beta, decay): (f32, f32),
    out: &mut [f32],
    mem: &mut [f32],
) {
    let dv = v.len();
    mem.fill(0.0);
    for (row, &ki) in s.chunks_exact_mut(dv).zip(k) {
        for (sij, m) in row.iter_mut().zip(mem.iter_mut()) {
            *sij *= decay;
            *m += *sij * ki;
        }
    }
    for (m, &vj) in mem.iter_mut().zip(v) {
        *m = (vj - *m) * beta;
    }
    out.fill(0.0);
    for ((row, &ki), &qi) in s.chunks_exact_mut(dv).zip(k).zip(q) {
        for ((sij, &dj), oj) in row.iter_mut().zip(mem.iter()).zip(out.iter_mut()) {
            *sij += ki * dj;
            *oj += *sij * qi;
        }
    }
}

/// `x · scale / ‖x‖` (with FLA's `1e-6` inside the root).
fn l2_normalise(x: &mut [f32], scale: f32) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let f = scale / (ss + 1e-6).sqrt();
    x.iter_mut().for_each(|v| *v *= f);
}

/// PyTorch's softplus: `ln(1 + eˣ)`, `x` itself above 20.
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// Each head of `o` (`[n_v_heads, head_v_dim]`) RMS-normalised, times `norm` and `silu(z)`.
fn gated_norm(o: &mut [f32], z: &[f32], norm: &[f32], eps: f32) {
    let dv = norm.len();
    for (oh, zh) in o.chunks_exact_mut(dv).zip(z.chunks_exact(dv)) {
        let ms = oh.iter().map(|v| v * v).sum::<f32>() / dv as f32;
        let r = (ms + eps).sqrt().recip();
        for ((v, &w), &g) in oh.iter_mut().zip(norm).zip(zh) {
            *v = *v * r * w * (g / (1.0 + (-g).exp()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolm_kernels::GgmlType;

    /// A zero F32 matrix (the steps under test do not read the projections).
    fn zeros(rows: usize, cols: usize) -> Weight {
        Weight::owned(GgmlType::F32, rows, cols, vec![0; rows * cols * 4])
    }

    fn cfg(grouped: bool) -> DeltaNetConfig {
        DeltaNetConfig {
            layers: vec![true],
            conv_kernel: 3,
            n_k_heads: 1,
            n_v_heads: 2,
            head_k_dim: 2,
            head_v_dim: 2,
            grouped_heads: grouped,
        }
    }

    #[test]
    fn value_heads_share_key_heads_grouped_or_tiled() {
        let mut c = cfg(true);
        c.n_k_heads = 2;
        c.n_v_heads = 4;
        assert_eq!((0..4).map(|h| c.k_head_of(h)).collect::<Vec<_>>(), [0, 0, 1, 1]);
        c.grouped_heads = false;
        assert_eq!((0..4).map(|h| c.k_head_of(h)).collect::<Vec<_>>(), [0, 1, 0, 1]);
    }

    #[test]
    fn qwen3_next_fused_rows_split_into_qkv_and_gates() {
        // Two key heads of 1 row each, 4 value heads of 1 row: per key head [q, k, v, v, z, z].
        let mut c = cfg(true);
        (c.n_k_heads, c.n_v_heads, c.head_k_dim, c.head_v_dim) = (2, 4, 1, 1);
        let (qkv, z) = qkvz_rows(&c);
        assert_eq!(qkv, [0, 6, 1, 7, 2, 3, 8, 9]);
        assert_eq!(z, [4, 5, 10, 11]);
    }

    #[test]
    fn softplus_and_l2_norm_match_their_definitions() {
        assert!((softplus(0.0) - 2f32.ln()).abs() < 1e-7);
        assert_eq!(softplus(30.0), 30.0);
        let mut x = [3.0, 4.0];
        l2_normalise(&mut x, 2.0);
        assert!((x[0] - 1.2).abs() < 1e-5 && (x[1] - 1.6).abs() < 1e-5, "{x:?}");
    }

    /// Two tokens by hand: the convolution sees the first token as history for the second, and
    /// the second's output reads the state the first left, decayed.
    #[test]
    fn two_steps_follow_the_delta_rule() {
        let c = cfg(true);
        let cd = c.conv_dim(); // q 2, k 2, v 4
        // Taps [0, 0.5, 1]: out_t = x_t + 0.5 x_{t-1}, then SiLU.
        let conv = (0..cd).flat_map(|_| [0.0, 0.5, 1.0]).collect();
        let w = DeltaNetWeights {
            qkv: zeros(cd, 1),
            gate: zeros(4, 1),
            beta: zeros(2, 1),
            alpha: zeros(2, 1),
            conv,
            dt_bias: vec![0.0, 0.0],
            a: vec![-1.0, -2.0],
            norm: vec![1.0, 1.0],
            out: zeros(1, 4),
        };
        let mut state = vec![0.0; c.state_len()];
        let silu = |v: f32| v / (1.0 + (-v).exp());
        let x1 = [1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 3.0, 4.0];
        let x2 = [0.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5];
        let mut s_ref = [[[0.0f32; 2]; 2]; 2]; // [head][i][j]
        let mut prev = [0.0f32; 8];
        for x in [x1, x2] {
            // The production path: convolution, then each head's delta rule (β = σ(0),
            // decay = exp(a · softplus(0))).
            let (hist, s) = state.split_at_mut((c.conv_kernel - 1) * cd);
            let mut xc = vec![0.0; cd];
            convolve(&c, &w, hist, &x, &mut xc);
            let mut got = [0.0; 4];
            let mut mem = [0.0; 2];
            for h in 0..2 {
                let (q, k, v) = (&xc[0..2], &xc[2..4], &xc[4 + 2 * h..6 + 2 * h]);
                let decay = (w.a[h] * softplus(0.0)).exp();
                delta_rule(
                    &mut s[4 * h..4 * h + 4],
                    (q, k, v),
                    (0.5, decay),
                    &mut got[2 * h..2 * h + 2],
                    &mut mem,
                );
            }
            // Brute force from the formulas in the module doc.
            let conv: Vec<f32> = (0..8).map(|i| silu(x[i] + 0.5 * prev[i])).collect();
            prev = x;
            let norm = |v: &[f32], s: f32| {
                let r = (v.iter().map(|a| a * a).sum::<f32>() + 1e-6).sqrt();
                v.iter().map(|a| a * s / r).collect::<Vec<_>>()
            };
            let q = norm(&conv[0..2], 1.0 / 2f32.sqrt());
            let k = norm(&conv[2..4], 1.0);
            let mut want = [0.0; 4];
            for h in 0..2 {
                let v = &conv[4 + 2 * h..6 + 2 * h];
                let decay = (w.a[h] * 2f32.ln()).exp(); // softplus(0) = ln 2
                let sr = &mut s_ref[h];
                sr.iter_mut().flatten().for_each(|x| *x *= decay);
                let mem: Vec<f32> = (0..2).map(|j| sr[0][j] * k[0] + sr[1][j] * k[1]).collect();
                for i in 0..2 {
                    for j in 0..2 {
                        sr[i][j] += k[i] * (v[j] - mem[j]) * 0.5;
                    }
                }
                for j in 0..2 {
                    want[2 * h + j] = sr[0][j] * q[0] + sr[1][j] * q[1];
                }
            }
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn outputs_return_to_token_order() {
        // Two sequences interleaved in the batch: tokens 0, 2 of sequence 7, token 1 of 9.
        let seqs = vec![(7, vec![0, 2]), (9, vec![1])];
        let (nv, dv) = (2, 1);
        // [seq][head][token][dv]: seq 7: head 0: t0, t2; head 1: t0, t2; seq 9: head 0: t1; head 1: t1.
        let mut o = vec![0.0, 20.0, 1.0, 21.0, 10.0, 11.0];
        by_token(&mut o, &seqs, nv, dv, &mut Vec::new());
        assert_eq!(o, [0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
        let mut grouped = Vec::new();
        let entries: Vec<BatchEntry> = [7, 9, 7]
            .iter()
            .enumerate()
            .map(|(i, &seq)| BatchEntry { seq, pos: i as u32, token: 0, logits: false })
            .collect();
        group_by_sequence(&entries, &mut grouped);
        assert_eq!(grouped, seqs);
    }
}
