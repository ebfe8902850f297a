//! Tests of the whole chain: reproducibility, order, the draw's distribution, masks, greedy.

use super::*;

fn params(seed: u64) -> SamplerParams {
    SamplerParams { seed: Some(seed), ..SamplerParams::default() }
}

fn plain(seed: u64) -> SamplerParams {
    SamplerParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, ..params(seed) }
}

fn sampler(p: SamplerParams) -> Sampler {
    Sampler::with_breaker_tokens(p, &[]).expect("valid parameters")
}

fn freqs(p: SamplerParams, logits: &[f32], n: usize) -> Vec<f32> {
    let mut s = sampler(p);
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n {
        counts[s.sample(logits) as usize] += 1;
    }
    counts.iter().map(|&c| c as f32 / n as f32).collect()
}

fn logits_of(n: usize, seed: u32) -> Vec<f32> {
    // A fixed pseudo-random spread of logits.
    (0..n as u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 100.0).collect()
}

#[test]
fn argmax_first_max_and_masks() {
    assert_eq!(argmax(&[0.1, 3.0, -1.0, 3.0]), 1);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY, -5.0]), 2);
    assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
    assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), 0);
    assert_eq!(argmax(&[]), 0);
}

#[test]
fn argmax_matches_the_sequential_scan_on_long_rows() {
    // The first strictly greater value, scanning left to right: what `argmax` promises.
    let scan = |l: &[f32]| {
        let (mut best, mut val) = (0, f32::NEG_INFINITY);
        for (i, &x) in l.iter().enumerate() {
            if x > val {
                (best, val) = (i, x);
            }
        }
        best as u32
    };
    for n in [1, 15, 16, 17, 33, 1000, 49152, 49155] {
        let mut l = logits_of(n, n as u32);
        assert_eq!(argmax(&l), scan(&l), "n={n}");
        // Ties in different lanes and chunks, NaNs, -0 before +0, a maximum in the tail.
        l.iter_mut().step_by(7).for_each(|x| *x = f32::NAN);
        assert_eq!(argmax(&l), scan(&l), "n={n} with NaN");
        l.iter_mut().for_each(|x| *x = if x.is_nan() { *x } else { -1.0 });
        for i in [n / 3, n / 2, n - 1] {
            l[i] = 5.0;
        }
        assert_eq!(argmax(&l), scan(&l), "n={n} ties");
        l[n - 1] = f32::INFINITY;
        assert_eq!(argmax(&l), (n - 1) as u32, "n={n} +inf last");
        l.iter_mut().for_each(|x| *x = if x.is_nan() { *x } else { 0.0 });
        l[n / 2] = -0.0;
        assert_eq!(argmax(&l), scan(&l), "n={n} zeros");
        l.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
        assert_eq!(argmax(&l), 0, "n={n} all masked");
    }
}

#[test]
fn same_seed_same_tokens_and_reset_replays() {
    let logits = logits_of(5000, 7);
    let p = SamplerParams {
        xtc_probability: 0.5,
        xtc_threshold: 0.05,
        temperature: 1.5,
        repeat_penalty: 1.3,
        dry_multiplier: 0.8,
        ..params(42)
    };
    let run = |s: &mut Sampler| {
        (0..200)
            .map(|_| {
                let t = s.sample(&logits);
                s.accept(t);
                t
            })
            .collect::<Vec<_>>()
    };
    let mut a = sampler(p.clone());
    let first = run(&mut a);
    assert_eq!(first, run(&mut sampler(p.clone())));
    a.reset();
    assert_eq!(first, run(&mut a));
    let other = run(&mut sampler(SamplerParams { seed: Some(43), ..p }));
    assert_ne!(first, other);
    assert!(first.iter().collect::<std::collections::HashSet<_>>().len() > 5);
}

#[test]
fn draw_follows_the_softmax() {
    let f = freqs(plain(7), &[0.0, 1.0, 2.0], 20_000);
    // softmax([0, 1, 2]) = [0.090, 0.245, 0.665]
    for (got, want) in f.iter().zip([0.0900, 0.2447, 0.6652]) {
        assert!((got - want).abs() < 0.015, "{f:?}");
    }
    // top-k 2 then temperature 0.5: logits 4, 2 → p(2) = 1 / (1 + e^-2) = 0.8808.
    let f = freqs(SamplerParams { top_k: 2, temperature: 0.5, ..plain(8) }, &[0.0, 1.0, 2.0], 20_000);
    assert_eq!(f[0], 0.0);
    assert!((f[2] - 0.8808).abs() < 0.015, "{f:?}");
}

#[test]
fn order_is_configurable() {
    use SamplerStep::*;
    let logits = [2.0, 1.0, 0.0];
    // top-p 0.7 at T=1 keeps {0, 1}; after T=0.25 (p = 0.982, 0.018, ...) it keeps {0}.
    let base = SamplerParams { top_k: 0, min_p: 0.0, top_p: 0.7, temperature: 0.25, ..params(3) };
    let f = freqs(SamplerParams { order: vec![TopP, Temperature], ..base.clone() }, &logits, 5000);
    assert!(f[1] > 0.005 && f[2] == 0.0, "{f:?}");
    let f = freqs(SamplerParams { order: vec![Temperature, TopP], ..base.clone() }, &logits, 5000);
    assert_eq!(f, vec![1.0, 0.0, 0.0]);
    // Without the temperature step the temperature is not applied (as in llama.cpp).
    let f = freqs(SamplerParams { order: vec![], ..base }, &logits, 20_000);
    assert!((f[0] - 0.665).abs() < 0.015, "{f:?}");
}

#[test]
fn greedy_is_argmax_after_bias_and_penalties() {
    let logits = [1.0, 3.0, 2.9, -1.0, 3.0];
    let mut s = sampler(SamplerParams::greedy());
    assert_eq!(s.sample(&logits), 1);
    let mut s = sampler(SamplerParams { logit_bias: vec![(2, 0.2)], ..SamplerParams::greedy() });
    assert_eq!(s.sample(&logits), 2);
    let mut s = sampler(SamplerParams { repeat_penalty: 1.5, ..SamplerParams::greedy() });
    s.accept(1);
    s.accept(4);
    assert_eq!(s.sample(&logits), 2);
    // Greedy does not depend on the seed.
    for seed in 0..20 {
        let mut s = sampler(SamplerParams { seed: Some(seed), ..SamplerParams::greedy() });
        assert_eq!(s.sample(&logits_of(3000, 1)), argmax(&logits_of(3000, 1)));
    }
}

#[test]
fn masked_tokens_are_never_drawn() {
    let mut logits = logits_of(4000, 3);
    for (i, l) in logits.iter_mut().enumerate() {
        if i % 3 != 0 {
            *l = f32::NEG_INFINITY;
        }
    }
    let settings = [
        params(1),
        plain(2),
        SamplerParams { top_k: 0, top_p: 1.0, min_p: 0.0, typical_p: 0.5, ..params(3) },
        SamplerParams { top_n_sigma: 1.0, ..plain(4) },
        SamplerParams { xtc_probability: 1.0, xtc_threshold: 0.001, ..plain(5) },
        SamplerParams { dynatemp_range: 0.5, ..plain(6) },
        SamplerParams { mirostat: 2, ..params(7) },
        SamplerParams { mirostat: 1, ..params(8) },
        SamplerParams { repeat_penalty: 1.2, frequency_penalty: 0.5, dry_multiplier: 1.0, ..plain(9) },
        SamplerParams::greedy(),
        SamplerParams { min_keep: 50, top_k: 10, top_p: 0.1, min_p: 0.9, ..params(10) },
    ];
    for p in settings {
        let mut s = sampler(p.clone());
        for _ in 0..200 {
            let t = s.sample(&logits);
            assert!(logits[t as usize].is_finite(), "{p:?} drew masked token {t}");
            s.accept(t);
        }
    }
    // Everything masked (here by the bias): the unbiased argmax.
    let mut s = sampler(SamplerParams { logit_bias: vec![(0, f32::NEG_INFINITY)], ..params(1) });
    assert_eq!(s.sample(&[0.5, f32::NEG_INFINITY]), 0);
    assert_eq!(s.sample(&[f32::NEG_INFINITY; 3]), 0);
}

#[test]
fn penalties_use_accepted_history() {
    // Token 0 is much more likely until it is accepted and penalised.
    let logits = [2.0, 0.0];
    let p = SamplerParams { presence_penalty: 100.0, ..plain(11) };
    let mut s = sampler(p);
    s.accept(0);
    for _ in 0..50 {
        assert_eq!(s.sample(&logits), 1);
    }
    s.reset();
    let f = (0..2000).filter(|_| s.sample(&logits) == 0).count();
    assert!(f > 1600, "{f}");
}

#[test]
fn mirostat_v2_draws_and_adapts() {
    let logits = logits_of(2000, 9);
    let p = SamplerParams { mirostat: 2, mirostat_tau: 3.0, mirostat_eta: 0.1, ..params(12) };
    let mut a = sampler(p.clone());
    let mut b = sampler(p);
    let ta: Vec<u32> = (0..100).map(|_| a.sample(&logits)).collect();
    let tb: Vec<u32> = (0..100).map(|_| b.sample(&logits)).collect();
    assert_eq!(ta, tb);
    assert!(ta.iter().collect::<std::collections::HashSet<_>>().len() > 1);
}

#[test]
fn constructor_validates() {
    assert!(Sampler::with_breaker_tokens(SamplerParams { top_p: 2.0, ..params(1) }, &[]).is_err());
}

#[test]
fn greedy_shortcut_equals_the_full_chain() {
    // Temperature 0 with steps that cannot move the maximum takes the argmax shortcut; with a
    // step that can (here a tiny logit bias, or penalties), it runs the chain. Both agree with a
    // chain run for every random logit vector.
    for seed in 0..50u32 {
        let logits = logits_of(5000, seed);
        let mut plain = sampler(SamplerParams { top_k: 40, min_p: 0.05, ..SamplerParams::greedy() });
        let mut chain = sampler(SamplerParams { logit_bias: vec![(0, 0.0)], ..SamplerParams::greedy() });
        let (a, b) = (plain.sample(&logits), chain.sample(&logits));
        assert_eq!(a, argmax(&logits));
        assert_eq!(a, b);
    }
    // Penalties still apply at temperature 0.
    let logits = [1.0, 3.0, 2.9];
    let mut s = sampler(SamplerParams { repeat_penalty: 2.0, ..SamplerParams::greedy() });
    s.accept(1);
    assert_eq!(s.sample(&logits), 2);
}

#[test]
fn the_drawn_distribution_is_what_the_chain_left() {
    let logits = [2.0f32, 1.0, 0.5, -1.0, 3.0];
    // top-k 2 at temperature 1: tokens 4 and 0, softmax of 3 and 2.
    let mut s = sampler(SamplerParams { top_k: 2, ..plain(7) });
    let tok = s.sample(&logits);
    let (p, top) = s.drawn_distribution(tok, 10);
    let e = (1.0f32).exp();
    let want = [(4, e / (e + 1.0)), (0, 1.0 / (e + 1.0))];
    assert_eq!(top.len(), 2, "{top:?}");
    for ((id, q), (wid, wq)) in top.iter().zip(want) {
        assert_eq!(*id, wid);
        assert!((q - wq).abs() < 1e-6);
    }
    assert!(tok == 4 || tok == 0);
    assert_eq!(p, top.iter().find(|t| t.0 == tok).expect("drawn token kept").1);
    assert_eq!(s.drawn_distribution(tok, 1).1.len(), 1);
    // Greedy: one-hot.
    let mut g = sampler(SamplerParams { temperature: 0.0, ..params(1) });
    assert_eq!(g.sample(&logits), 4);
    assert_eq!(g.drawn_distribution(4, 5), (1.0, vec![(4, 1.0)]));
}
