//! The sampler with real tokenizers: DRY sequence breakers built from strings, logit-bias bounds.

mod common;

use ferrolm::format::gguf::GgufFile;
use ferrolm::sampling::{Sampler, SamplerParams};
use ferrolm::tokenizer::Tokenizer;

const MODELS: [&str; 2] = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"];

fn tokenizers() -> Vec<(String, Tokenizer)> {
    let mut out = Vec::new();
    for m in MODELS {
        let Some(path) = common::require_model(m) else { continue };
        let gguf = GgufFile::open(&path).expect("open model");
        out.push((m.to_string(), Tokenizer::from_gguf(&gguf).expect("tokenizer")));
    }
    out
}

/// Greedy with DRY on (multiplier 1, allowed length 2, whole history), the given breakers.
fn dry_greedy(breakers: &[&str]) -> SamplerParams {
    SamplerParams {
        dry_multiplier: 1.0,
        dry_allowed_length: 2,
        dry_penalty_last_n: -1,
        dry_sequence_breakers: breakers.iter().map(|s| s.to_string()).collect(),
        ..SamplerParams::greedy()
    }
}

/// Feeds `text` as history and samples from logits that are 0 except 0.5 for `favoured`.
fn pick(tok: &Tokenizer, params: SamplerParams, text: &str, favoured: u32) -> u32 {
    let mut s = Sampler::new(params, tok).expect("sampler");
    for t in tok.encode(text, false, false).expect("encode") {
        s.accept(t);
    }
    let mut logits = vec![0.0f32; tok.n_vocab()];
    logits[favoured as usize] = 0.5;
    s.sample(&logits)
}

#[test]
fn dry_penalises_the_continuation_of_a_repeat() {
    for (name, tok) in tokenizers() {
        let text = " a b two three c d a b two three c";
        let ids = tok.encode(text, false, false).expect("encode");
        let d = ids[5];
        assert_eq!(tok.decode(&[d]), " d", "{name}: {ids:?}");
        assert_eq!(ids[..5], ids[6..], "{name}");
        // Without DRY the favoured token wins; with it, it is penalised by 1 (repeat of 5).
        assert_eq!(pick(&tok, SamplerParams::greedy(), text, d), d, "{name}");
        assert_eq!(pick(&tok, dry_greedy(&[]), text, d), 0, "{name}");
        assert_eq!(pick(&tok, dry_greedy(&["\n", ":"]), text, d), 0, "{name}");
        // A two-token breaker "two three" (head " two", tail [" three"]) cuts the repeat to 1.
        assert_eq!(pick(&tok, dry_greedy(&["two three"]), text, d), d, "{name}");
    }
}

#[test]
fn single_token_breakers_are_not_penalised_and_cut_repeats() {
    for (name, tok) in tokenizers() {
        let text = " one two:\n one two";
        let ids = tok.encode(text, false, false).expect("encode");
        let colon = ids[2];
        assert_eq!(tok.decode(&[colon]), ":", "{name}: {ids:?}");
        // ":" would extend the repeat " one two", but it is a breaker itself.
        assert_eq!(pick(&tok, dry_greedy(&["\n", ":"]), text, colon), colon, "{name}");
        assert_eq!(pick(&tok, dry_greedy(&["\n"]), text, colon), 0, "{name}");
        // "\n" right before the repeat limits it to 2 tokens: still penalised at allowed length 2
        // but not at 3.
        let p = SamplerParams { dry_allowed_length: 3, ..dry_greedy(&["\n"]) };
        assert_eq!(pick(&tok, p, text, colon), colon, "{name}");
    }
}

#[test]
fn logit_bias_ids_are_checked_against_the_vocabulary() {
    for (name, tok) in tokenizers() {
        let n = tok.n_vocab() as u32;
        let bad = SamplerParams { logit_bias: vec![(n, 1.0)], ..SamplerParams::default() };
        let e = Sampler::new(bad, &tok).expect_err(&name).to_string();
        assert!(e.contains("logit bias"), "{e}");
        let ok = SamplerParams { logit_bias: vec![(n - 1, f32::NEG_INFINITY)], ..SamplerParams::greedy() };
        let mut s = Sampler::new(ok, &tok).expect("sampler");
        let mut logits = vec![0.0f32; n as usize];
        logits[n as usize - 1] = 10.0;
        assert_eq!(s.sample(&logits), 0, "{name}");
    }
}
