//! Mixture-of-experts feed-forward blocks.
//!
//! A router scores every token against every expert; the token goes through the gated FFNs of
//! its `k` best experts, whose outputs are summed weighted by the router's probabilities
//! (llama.cpp's `build_moe_ffn`: softmax or sigmoid, top k, optionally normalised and scaled).
//! A shared expert, where the model has one, sees every token and is added scaled by its own
//! sigmoid gate.
//!
//! Routing runs on the host (it is `n × n_expert` numbers). The experts' products run on the
//! backend, one per expert over the rows of the tokens routed to it: a decode step reads only
//! the chosen experts' weights, and a prompt multiplies each expert once for all its tokens.

use super::config::{Gating, MoeConfig};
use super::forward::buf;
#[cfg(test)]
use super::weights::MoeBiases;
use super::weights::{FfnBias, FfnWeights, MoeWeights};
use crate::Result;
use crate::backend::Backend;
use crate::ops::{Activation, MatmulJob};

/// llama.cpp's floor for the sum of the chosen weights before normalising (the smallest
/// normal f16), so that a token whose experts all have zero weight gets zeros, not NaN.
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// The buffers of the expert blocks, grown to the largest batch seen and reused.
#[derive(Debug, Default)]
pub(crate) struct MoeBuffers {
    /// Router logits, then probabilities. `[n, n_expert]`
    logits: Vec<f32>,
    /// Chosen experts, best first. `[n, k]`
    chosen: Vec<u32>,
    /// Their weights. `[n, k]`
    weights: Vec<f32>,
    /// `(token, weight)` of every route, grouped by expert. `[n * k]`
    routes: Vec<(u32, f32)>,
    /// Where each expert's routes start in `routes`. `[n_expert + 1]`
    starts: Vec<usize>,
    /// The rows of the tokens routed to one expert. `[m, n_embd]`
    x: Vec<f32>,
    /// Gate projection, then the gated activation. `[m, n_ff_expert]`
    gate: Vec<f32>,
    /// Up projection. `[m, n_ff_expert]`
    up: Vec<f32>,
    /// One expert's output rows. `[m, n_embd]`
    out: Vec<f32>,
    /// The shared expert's gate logit per token. `[n]`
    shared_gate: Vec<f32>,
}

/// Picks each token's experts from its router logits (`logits`: `[n, n_expert]`, turned into
/// probabilities in place): the `k` most probable, best first (the lower index on a tie), into
/// `chosen` with their weights into `weights` (`[n, k]` each). With [`Gating::SoftmaxWeight`]
/// the logits pick and the weights are the softmax of the `k` chosen logits.
pub(crate) fn route(logits: &mut [f32], cfg: &MoeConfig, chosen: &mut Vec<u32>, weights: &mut Vec<f32>) {
    let (ne, k) = (cfg.n_expert, cfg.n_used);
    chosen.clear();
    weights.clear();
    for probs in logits.chunks_exact_mut(ne) {
        match cfg.gating {
            Gating::Softmax => {
                let max = probs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f64;
                for p in probs.iter_mut() {
                    *p = (*p - max).exp();
                    sum += f64::from(*p);
                }
                let inv = (1.0 / sum) as f32;
                probs.iter_mut().for_each(|p| *p *= inv);
            }
            Gating::Sigmoid => probs.iter_mut().for_each(|p| *p = 1.0 / (1.0 + (-*p).exp())),
            Gating::SoftmaxWeight => {} // the logits pick; their softmax over the k is below
        }
        let first = chosen.len();
        for _ in 0..k {
            let best = (0..ne)
                .filter(|&e| !chosen[first..].contains(&(e as u32)))
                .fold(None, |best: Option<usize>, e| match best {
                    Some(b) if probs[b] >= probs[e] => Some(b),
                    _ => Some(e),
                })
                .unwrap_or(0);
            chosen.push(best as u32);
            weights.push(probs[best]);
        }
        let w = &mut weights[first..];
        if cfg.gating == Gating::SoftmaxWeight {
            // The chosen come best first: the first is their maximum.
            let max = w[0];
            w.iter_mut().for_each(|x| *x = (*x - max).exp());
            let sum: f32 = w.iter().sum();
            w.iter_mut().for_each(|x| *x /= sum);
        }
        if cfg.norm_topk {
            let sum = w.iter().sum::<f32>().max(MIN_WEIGHT_SUM);
            w.iter_mut().for_each(|x| *x /= sum);
        }
        if cfg.weight_scale != 1.0 {
            w.iter_mut().for_each(|x| *x *= cfg.weight_scale);
        }
    }
}

/// Groups the routes by expert: `routes[starts[e]..starts[e + 1]]` are the `(token, weight)`
/// pairs of expert `e`, tokens ascending.
pub(crate) fn group(
    chosen: &[u32],
    weights: &[f32],
    k: usize,
    n_expert: usize,
    b: &mut (Vec<(u32, f32)>, Vec<usize>),
) {
    let (routes, starts) = b;
    starts.clear();
    starts.resize(n_expert + 1, 0);
    for &e in chosen {
        starts[e as usize + 1] += 1;
    }
    for e in 0..n_expert {
        starts[e + 1] += starts[e];
    }
    routes.clear();
    routes.resize(chosen.len(), (0, 0.0));
    let mut next = starts.clone();
    for (i, (&e, &w)) in chosen.iter().zip(weights).enumerate() {
        routes[next[e as usize]] = ((i / k) as u32, w);
        next[e as usize] += 1;
    }
}

/// One gated FFN over `n` rows: `out = down(act(gate · x) * (up · x))`, each projection
/// followed by its bias when given. `x`: `[n, n_embd]`, `gate`/`up`: `[n, n_ff]` scratch,
/// `out`: `[n, n_embd]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gated_ffn(
    be: &dyn Backend,
    f: &FfnWeights,
    bias: Option<&FfnBias>,
    act: Activation,
    exact: bool,
    x: &[f32],
    n: usize,
    (gate, up): (&mut [f32], &mut [f32]),
    out: &mut [f32],
) -> Result<()> {
    be.matmul_many(x, n, &mut [MatmulJob { w: &f.gate, out: gate }, MatmulJob { w: &f.up, out: up }])?;
    if let Some(b) = bias {
        be.add_bias(gate, &b.gate)?;
        be.add_bias(up, &b.up)?;
    }
    be.gated_activation(gate, up, act, exact)?;
    be.matmul(&f.down, gate, n, out)?;
    if let Some(b) = bias {
        be.add_bias(out, &b.down)?;
    }
    Ok(())
}

/// The mixture-of-experts block over `n` normalised rows `xn` (`[n, n_embd]`), its output
/// into `y` (`[n, n_embd]`). The router reads `router_in` (`[n, n_embd]`; Gemma 4 routes on
/// another norm of the residual than the experts read), else `xn`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe_ffn(
    be: &dyn Backend,
    w: &MoeWeights,
    cfg: &MoeConfig,
    act: Activation,
    exact: bool,
    (xn, router_in): (&mut [f32], Option<&[f32]>),
    n: usize,
    y: &mut [f32],
    b: &mut MoeBuffers,
) -> Result<()> {
    let d = xn.len() / n.max(1);
    let (ne, k) = (cfg.n_expert, cfg.n_used);
    let logits = buf(&mut b.logits, n * ne); // [n, n_expert]
    be.matmul(&w.router, router_in.unwrap_or(xn), n, logits)?;
    be.to_host(logits)?;
    if let Some(b) = &w.biases {
        for row in logits.chunks_exact_mut(ne) {
            row.iter_mut().zip(&b.router).for_each(|(l, &b)| *l += b);
        }
    }
    route(logits, cfg, &mut b.chosen, &mut b.weights);
    if let Some(scale) = &w.expert_scale {
        // llama.cpp scales the expert's output; the weight is the same factor.
        b.weights.iter_mut().zip(&b.chosen).for_each(|(wt, &e)| *wt *= scale[e as usize]);
    }
    let mut grouped = (std::mem::take(&mut b.routes), std::mem::take(&mut b.starts));
    group(&b.chosen, &b.weights, k, ne, &mut grouped);
    (b.routes, b.starts) = grouped;

    be.to_host(xn)?;
    y.fill(0.0);
    for (e, expert) in w.experts.iter().enumerate() {
        let routes = &b.routes[b.starts[e]..b.starts[e + 1]];
        let m = routes.len();
        if m == 0 {
            continue;
        }
        let x = buf(&mut b.x, m * d); // [m, n_embd]
        for (row, &(t, _)) in x.chunks_exact_mut(d).zip(routes) {
            row.copy_from_slice(&xn[t as usize * d..(t as usize + 1) * d]);
        }
        be.host_wrote(x)?;
        let ff = cfg.n_ff_expert;
        let (gate, up) = (buf(&mut b.gate, m * ff), buf(&mut b.up, m * ff)); // [m, n_ff_expert]
        let out = buf(&mut b.out, m * d); // [m, n_embd]
        gated_ffn(
            be,
            expert,
            w.biases.as_ref().and_then(|b| b.experts.get(e)),
            act,
            exact,
            x,
            m,
            (gate, up),
            out,
        )?;
        be.to_host(out)?;
        for (row, &(t, wt)) in out.chunks_exact(d).zip(routes) {
            let dst = &mut y[t as usize * d..(t as usize + 1) * d];
            dst.iter_mut().zip(row).for_each(|(a, &o)| *a += wt * o);
        }
    }
    if let (Some(shared), Some(ff)) = (&w.shared, cfg.n_ff_shared) {
        let (gate, up) = (buf(&mut b.gate, n * ff), buf(&mut b.up, n * ff)); // [n, n_ff_shared]
        let out = buf(&mut b.out, n * d); // [n, n_embd]
        gated_ffn(be, shared, None, act, exact, xn, n, (gate, up), out)?;
        be.to_host(out)?;
        let scale = buf(&mut b.shared_gate, n); // [n]
        match &w.shared_gate {
            Some(g) => {
                be.matmul(g, xn, n, scale)?;
                be.to_host(scale)?;
                scale.iter_mut().for_each(|s| *s = 1.0 / (1.0 + (-*s).exp()));
            }
            None => scale.fill(1.0),
        }
        for ((dst, row), &s) in y.chunks_exact_mut(d).zip(out.chunks_exact(d)).zip(scale.iter()) {
            dst.iter_mut().zip(row).for_each(|(a, &o)| *a += s * o);
        }
    }
    be.host_wrote(y)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;
    use crate::ops::Weight;
    use ferrolm_kernels::GgmlType;

    /// A deterministic pseudo-random F32 matrix `[rows, cols]`, and its values.
    fn matrix(rows: usize, cols: usize, seed: u64) -> (Weight, Vec<f32>) {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let vals: Vec<f32> = (0..rows * cols)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 / (cols as f32).sqrt()
            })
            .collect();
        let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        (Weight::owned(GgmlType::F32, rows, cols, bytes), vals)
    }

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// `W x` for `W`: `[rows, cols]`.
    fn mv(w: &[f32], x: &[f32]) -> Vec<f32> {
        w.chunks_exact(x.len()).map(|r| dot(r, x)).collect()
    }

    /// A deterministic pseudo-random vector of `n` values in (-0.5, 0.5).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        matrix(1, n, seed).1.iter().map(|v| v * (n as f32).sqrt() / 2.0).collect()
    }

    /// One expert's FFN in plain f32: `down(act(gate x + bg) * (up x + bu)) + bd`.
    fn ffn_ref(f: &[Vec<f32>; 3], bias: Option<&FfnBias>, act: Activation, x: &[f32]) -> Vec<f32> {
        let (mut g, mut u) = (mv(&f[0], x), mv(&f[1], x));
        if let Some(b) = bias {
            g.iter_mut().zip(&b.gate).for_each(|(a, b)| *a += b);
            u.iter_mut().zip(&b.up).for_each(|(a, b)| *a += b);
        }
        let h: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(&g, &u)| match act {
                Activation::SwigluOai => {
                    let g = g.min(7.0);
                    g / (1.0 + (-1.702 * g).exp()) * (u.clamp(-7.0, 7.0) + 1.0)
                }
                Activation::GeluTanh => crate::ops::gelu_tanh(g) * u,
                Activation::Silu => g / (1.0 + (-g).exp()) * u,
            })
            .collect();
        let mut out = mv(&f[2], &h);
        if let Some(b) = bias {
            out.iter_mut().zip(&b.down).for_each(|(a, b)| *a += b);
        }
        out
    }

    /// The mixture computed densely: every expert over every token, weighted by the router's
    /// softmax restricted to the token's top k (zero elsewhere), plus the gated shared expert.
    #[test]
    fn experts_match_a_dense_reference_over_all_experts() {
        check_dense(Variant::Shared);
    }

    /// gpt-oss's block the same way: a router bias, the top k by logit weighted by the softmax
    /// of those k, biased experts, the clamped SwiGLU, no shared expert.
    #[test]
    fn gpt_oss_experts_match_a_dense_reference() {
        check_dense(Variant::GptOss);
    }

    /// Gemma 4's experts: routed on their own input, each expert's output scaled, GELU.
    #[test]
    fn experts_with_their_own_router_input_and_scales_match_a_dense_reference() {
        check_dense(Variant::Gemma4);
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Variant {
        /// SiLU experts and a gated shared expert (Qwen 2 MoE).
        Shared,
        GptOss,
        Gemma4,
    }

    fn check_dense(variant: Variant) {
        let gpt_oss = variant == Variant::GptOss;
        let shared = variant == Variant::Shared;
        let (d, ff, ne, n) = (32, 16, 6, 7);
        let cfg = MoeConfig {
            n_expert: ne,
            n_used: 2,
            n_ff_expert: ff,
            n_ff_shared: shared.then_some(24),
            gating: if gpt_oss { Gating::SoftmaxWeight } else { Gating::Softmax },
            norm_topk: !gpt_oss,
            weight_scale: 1.0,
            biases: gpt_oss,
        };
        let act = match variant {
            Variant::Shared => Activation::Silu,
            Variant::GptOss => Activation::SwigluOai,
            Variant::Gemma4 => Activation::GeluTanh,
        };
        let (router, router_v) = matrix(ne, d, 1);
        let router_bias = gpt_oss.then(|| values(ne, 2));
        let mut experts = Vec::new();
        let mut expert_vals = Vec::new();
        let mut expert_bias = Vec::new();
        for e in 0..ne as u64 {
            let (gate, g) = matrix(ff, d, 10 + 3 * e);
            let (up, u) = matrix(ff, d, 11 + 3 * e);
            let (down, dn) = matrix(d, ff, 12 + 3 * e);
            experts.push(FfnWeights { gate, up, down });
            expert_vals.push([g, u, dn]);
            if gpt_oss {
                let b = |k: u64, n: usize| values(n, 50 + 3 * e + k);
                expert_bias.push(FfnBias { gate: b(0, ff), up: b(1, ff), down: b(2, d) });
            }
        }
        let (sg, sg_v) = matrix(24, d, 100);
        let (su, su_v) = matrix(24, d, 101);
        let (sd, sd_v) = matrix(d, 24, 102);
        let (shared_gate, shared_gate_v) = matrix(1, d, 103);
        let w = MoeWeights {
            router,
            biases: router_bias.clone().map(|router| Box::new(MoeBiases { router, experts: expert_bias })),
            experts,
            shared: shared.then_some(FfnWeights { gate: sg, up: su, down: sd }),
            shared_gate: shared.then_some(shared_gate),
            expert_scale: (variant == Variant::Gemma4).then(|| values(ne, 104)),
        };
        let (_, xs) = matrix(n, d, 7);
        let mut xn = xs.iter().map(|v| v * 4.0).collect::<Vec<_>>();
        let router_in = (variant == Variant::Gemma4).then(|| values(n * d, 105));
        let mut y = vec![0.0; n * d];
        let mut b = MoeBuffers::default();
        let inputs = (&mut xn[..], router_in.as_deref());
        moe_ffn(&CpuBackend, &w, &cfg, act, true, inputs, n, &mut y, &mut b).expect("moe_ffn");

        let shared_v = [sg_v, su_v, sd_v];
        for t in 0..n {
            let x = &xn[t * d..(t + 1) * d];
            let mut logits = mv(&router_v, router_in.as_ref().map_or(x, |r| &r[t * d..(t + 1) * d]));
            if let Some(rb) = &router_bias {
                logits.iter_mut().zip(rb).for_each(|(l, b)| *l += b);
            }
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let p: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let mut order: Vec<usize> = (0..ne).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            // Both gatings give the chosen two p_e / (p_a + p_b): a softmax over the two
            // logits equals the full softmax renormalised over them.
            let top_sum = p[order[0]] + p[order[1]];
            let mut want = vec![0.0f32; d];
            for e in 0..ne {
                let scale = w.expert_scale.as_ref().map_or(1.0, |s| s[e]);
                let wt = if order[..2].contains(&e) { scale * p[e] / top_sum } else { 0.0 };
                for (a, o) in want.iter_mut().zip(ffn_ref(
                    &expert_vals[e],
                    w.biases.as_ref().map(|b| &b.experts[e]),
                    act,
                    x,
                )) {
                    *a += wt * o;
                }
            }
            if shared {
                let s = 1.0 / (1.0 + (-dot(&shared_gate_v, x)).exp());
                for (a, o) in want.iter_mut().zip(ffn_ref(&shared_v, None, act, x)) {
                    *a += s * o;
                }
            }
            let got = &y[t * d..(t + 1) * d];
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-4, "token {t}: {g} vs {w}");
            }
        }
    }

    fn cfg(n_expert: usize, n_used: usize, norm_topk: bool) -> MoeConfig {
        MoeConfig {
            n_expert,
            n_used,
            n_ff_expert: 4,
            n_ff_shared: None,
            gating: Gating::Softmax,
            norm_topk,
            weight_scale: 1.0,
            biases: false,
        }
    }

    #[test]
    fn softmax_routing_picks_the_k_largest_best_first_with_their_probabilities() {
        let mut logits = vec![0.0, 2.0, 1.0, -1.0];
        let (mut chosen, mut weights) = (Vec::new(), Vec::new());
        route(&mut logits, &cfg(4, 2, false), &mut chosen, &mut weights);
        assert_eq!(chosen, [1, 2]);
        let z = 1.0 + 2f32.exp() + 1f32.exp() + (-1f32).exp();
        assert!((weights[0] - 2f32.exp() / z).abs() < 1e-6);
        assert!((weights[1] - 1f32.exp() / z).abs() < 1e-6);
    }

    #[test]
    fn normalised_weights_sum_to_one_and_keep_their_ratio() {
        let mut logits = vec![0.5, 0.1, 3.0, 2.0, /* token 2 */ 1.0, 1.0, 0.0, 5.0];
        let (mut chosen, mut weights) = (Vec::new(), Vec::new());
        route(&mut logits, &cfg(4, 2, true), &mut chosen, &mut weights);
        assert_eq!(chosen, [2, 3, 3, 0], "a tie goes to the lower index");
        for w in weights.chunks(2) {
            assert!((w[0] + w[1] - 1.0).abs() < 1e-6);
        }
        assert!((weights[0] / weights[1] - 1f32.exp()).abs() < 1e-4);
    }

    #[test]
    fn sigmoid_routing_and_scale_apply_to_each_weight() {
        let mut c = cfg(3, 1, false);
        c.gating = Gating::Sigmoid;
        c.weight_scale = 2.5;
        let mut logits = vec![-1.0, 0.0, 0.5];
        let (mut chosen, mut weights) = (Vec::new(), Vec::new());
        route(&mut logits, &c, &mut chosen, &mut weights);
        assert_eq!(chosen, [2]);
        assert!((weights[0] - 2.5 / (1.0 + (-0.5f32).exp())).abs() < 1e-6);
    }

    #[test]
    fn softmax_weight_routing_picks_by_logit_and_softmaxes_the_chosen() {
        let mut c = cfg(4, 2, false);
        c.gating = Gating::SoftmaxWeight;
        let mut logits = vec![0.0, 2.0, 1.0, -1.0];
        let (mut chosen, mut weights) = (Vec::new(), Vec::new());
        route(&mut logits, &c, &mut chosen, &mut weights);
        assert_eq!(chosen, [1, 2]);
        let z = 1.0 + (-1f32).exp();
        assert!((weights[0] - 1.0 / z).abs() < 1e-6 && (weights[1] - (-1f32).exp() / z).abs() < 1e-6);
    }

    #[test]
    fn grouping_lists_each_experts_tokens_in_order() {
        // Three tokens, two experts each, four experts.
        let chosen = [1, 3, 3, 0, 1, 0];
        let weights = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6];
        let mut b = (Vec::new(), Vec::new());
        group(&chosen, &weights, 2, 4, &mut b);
        let (routes, starts) = b;
        assert_eq!(starts, [0, 2, 4, 4, 6]);
        assert_eq!(routes, [(1, 0.4), (2, 0.6), (0, 0.1), (2, 0.5), (0, 0.2), (1, 0.3)]);
    }
}
