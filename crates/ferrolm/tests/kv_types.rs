//! Every KV cache type on both test models: the perplexity of this project's
//! own prose (`tests/fixtures/ppl_text.txt`, paragraphs of `docs/*.md`: 1350–1400 tokens on SmolLM2,
//! the first 700 on Gemma 3, whose vocabulary makes each logits row 5x larger) with
//! keys and values stored as f32, f16, q8_0 and q4_0, and q8_0 keys with q4_0 values.
//!
//! The text goes through the model in chunks of alternately 64 and 37 tokens with logits for
//! every token, so both attention paths read the cache (64 queries: the tiled path; 37: the
//! per-query path), and every next-token prediction counts. f16 must stay within 1% of f32's
//! perplexity, q8_0 and q8_0 keys with q4_0 values within 3%.
//!
//! q4_0 keys cost more: +6.4% on SmolLM2 and +8.6% on Gemma 3 with the keys rotated as llama.cpp
//! rotates them (`ferrolm::kv::KvRotation`), +16% and +10% without (see docs/kernels.md), so
//! q4_0 is held to 12%, which unrotated keys on SmolLM2 and a broken q4_0 path exceed.
#![allow(clippy::unwrap_used)]

mod common;

use ferrolm::batch::Batch;
use ferrolm::kv::KvType;
use ferrolm::model::Model;

/// Chunk sizes, used in turn.
const CHUNKS: [usize; 2] = [64, 37];

/// `ln Σ exp(x)`, in f64.
fn log_sum_exp(x: &[f32]) -> f64 {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
}

/// Perplexity of `tokens` (the exponential of the mean negative log-likelihood of each token
/// given the ones before it) with keys and values stored as `types`.
fn perplexity(model: &Model, tokens: &[u32], types: (KvType, KvType)) -> f64 {
    let mut kv = model.new_kv_cache_typed(tokens.len(), types.0, types.1).unwrap();
    let mut batch = Batch::new();
    let (mut nll, mut n) = (0f64, 0usize);
    let mut start = 0;
    for chunk in CHUNKS.iter().cycle() {
        if start >= tokens.len() {
            break;
        }
        let len = (*chunk).min(tokens.len() - start);
        batch.clear();
        for (p, &t) in (start..start + len).zip(&tokens[start..start + len]) {
            batch.push(0, p as u32, t, true);
        }
        let logits = model.forward(&batch, &mut kv).unwrap();
        assert_eq!(logits.len(), len);
        for (j, next) in tokens[start + 1..].iter().take(len).enumerate() {
            let row = logits.row(j);
            nll += log_sum_exp(row) - row[*next as usize] as f64;
            n += 1;
        }
        start += len;
    }
    assert_eq!(n, tokens.len() - 1);
    (nll / n as f64).exp()
}

/// Checks every cache type on `file` over the first `max_tokens` tokens of the text.
fn check_model(file: &str, max_tokens: usize) {
    let Some(path) = common::require_model(file) else { return };
    let model = Model::load(&path).unwrap();
    let text = std::fs::read_to_string(common::fixtures_dir().join("ppl_text.txt")).unwrap();
    let mut tokens = model.tokenizer().encode(&text, true, false).unwrap();
    tokens.truncate(max_tokens);
    assert!(tokens.len() >= 600, "{file}: only {} tokens", tokens.len());
    let base = perplexity(&model, &tokens, (KvType::F32, KvType::F32));
    assert!(base.is_finite() && base > 1.0, "{file}: f32 perplexity {base}");
    eprintln!("{file}: {} tokens, f32 cache: perplexity {base:.4}", tokens.len());
    for (k, v, tol) in [
        (KvType::F16, KvType::F16, 0.01),
        (KvType::Q8_0, KvType::Q8_0, 0.03),
        (KvType::Q8_0, KvType::Q4_0, 0.03),
        (KvType::Q4_0, KvType::Q4_0, 0.12),
    ] {
        let p = perplexity(&model, &tokens, (k, v));
        let rel = p / base - 1.0;
        eprintln!("{file}: keys {k}, values {v}: perplexity {p:.4} ({:+.2}% vs f32)", 100.0 * rel);
        assert!(rel.abs() <= tol, "{file}: {k}/{v} perplexity {p} is {:+.2}% off f32's {base}", 100.0 * rel);
    }
}

#[test]
fn smollm2_perplexity_per_cache_type() {
    check_model("SmolLM2-135M-Instruct.Q4_1.gguf", usize::MAX);
}

#[test]
fn gemma3_perplexity_per_cache_type() {
    // Gemma's 262k-token vocabulary makes every logits row 5x SmolLM2's: 700 tokens.
    check_model("gemma-3-270m-q4_k_m.gguf", 700);
}
