//! Conformance against llama.cpp: prompt tokens, greedy tokens and top-10 logits for both test
//! models (`tests/fixtures/reference`, made with libllama on CPU).
//!
//! Greedy tokens must match up to the first step whose two best reference logits are within
//! 0.5 of each other; on every compared step the logits of the reference top-3 tokens must be
//! within 1.0 of llama.cpp's and those of the rest of the top 10 within 1.5, each measured from
//! the logit of the reference's best token (ours from ours, llama.cpp's from llama.cpp's): the
//! softmax, and so every sampler, depends on the differences only, and a shift common to the
//! whole vocabulary is not an error. (Such a shift appeared when the decode attention moved from
//! llama.cpp's f16 value accumulator to f32 in 2026-11: Gemma 3's raw logits moved by up to 1.06
//! while the differences stayed as close as before — within 0.94 on the top-3 under forced
//! decoding of all 32 steps, old and new alike. llama.cpp's own flash and non-flash attention
//! differ by up to 0.53 in log-probability on this reference's top-3.)
//!
//! The wider tail bound is the measured noise floor, not slack: activations are re-quantized
//! to 8 bits before every matmul, so an ulp of difference in one layer's float accumulation
//! can flip a rounding and grow through the layers. Our portable kernels and our AVX2 kernels
//! (bit-identical to GGML's) differ from each other by up to 1.02 on a tail logit of Gemma 3's
//! `gemma-chat` prompt, and every kernel level stays within 0.85 on the top-3.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::Reference;
use ferrolm::batch::Batch;
use ferrolm::eval::{PerplexityOptions, Scoring, perplexity};
use ferrolm::kv::KvType;
use ferrolm::model::Model;
use ferrolm::sampling::argmax;

const LOGIT_TOL: f32 = 1.0;
const TAIL_LOGIT_TOL: f32 = 1.5;
const TIE_GAP: f32 = 0.5;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reference")
}

/// Outcome of one reference file.
struct Outcome {
    name: String,
    compared: usize,
    total: usize,
    max_err: f32,
}

fn check_file(model: &Model, json: &Path) -> Outcome {
    let name = json.file_stem().unwrap().to_string_lossy().to_string();
    let r: Reference = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let text = std::fs::read_to_string(fixtures().join("prompts").join(format!("{name}.txt"))).unwrap();
    let tokens = model.tokenizer().encode(&text, true, true).unwrap();
    assert_eq!(tokens, r.prompt_tokens, "{name}: prompt tokens differ from llama.cpp");

    let mut kv = model.new_kv_cache(1024);
    let mut logits =
        model.forward(&Batch::from_prompt(0, 0, &tokens), &mut kv).unwrap().last().unwrap().to_vec();
    let mut max_err = 0.0f32;
    let mut compared = 0;
    for (pos, (i, step)) in (tokens.len() as u32..).zip(r.steps.iter().enumerate()) {
        let (ours0, ref0) = (logits[step.top[0].0 as usize], step.top[0].1);
        for (rank, &(id, l)) in step.top.iter().enumerate() {
            let err = ((logits[id as usize] - ours0) - (l - ref0)).abs();
            max_err = max_err.max(err);
            let tol = if rank < 3 { LOGIT_TOL } else { TAIL_LOGIT_TOL };
            assert!(
                err <= tol,
                "{name} step {i}: logit of rank-{rank} token {id} is {} from the best one (llama.cpp {}, |diff| {err} > {tol})",
                logits[id as usize] - ours0,
                l - ref0
            );
        }
        compared += 1;
        assert_eq!(model.tokenizer().token_to_piece(step.token), step.bytes, "{name} step {i}: piece bytes");
        let gap = step.top[0].1 - step.top[1].1;
        if gap < TIE_GAP {
            break; // a near-tie: llama.cpp's 8-bit activations may legitimately pick the other token
        }
        let ours = argmax(&logits);
        assert_eq!(ours, step.token, "{name} step {i}: greedy token {ours}, llama.cpp {}", step.token);
        logits =
            model.forward(&Batch::from_prompt(0, pos, &[ours]), &mut kv).unwrap().last().unwrap().to_vec();
    }
    Outcome { name, compared, total: r.steps.len(), max_err }
}

fn check_model(file: &str, dir: &str) {
    let Some(path) = common::require_model(file) else { return };
    let model = Model::load(&path).unwrap();
    for f in common::reference_files(dir) {
        let o = check_file(&model, &f);
        eprintln!(
            "{dir}/{}: {}/{} steps compared, max |logit diff| (from the best token) {:.3}",
            o.name, o.compared, o.total, o.max_err
        );
    }
}

#[test]
fn smollm2_matches_llama_cpp() {
    check_model("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_model("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m");
}

/// How far (relative) `ferrolm`'s perplexity may be from `llama-perplexity`'s, see
/// [`check_perplexity`].
const PPL_TOLERANCE: f64 = 0.01;

/// `Scoring::Chunks` reproduces `llama-perplexity`'s final estimate within [`PPL_TOLERANCE`]
/// (and its chunk count), on the first 12000 bytes of `data/alice29.txt` at a context of 512
/// (`fixtures/reference/perplexity.json`).
///
/// Why not tighter: on 1530 scored tokens, kernels that differ only in the order of their f32
/// sums move Gemma 3's estimate by up to 0.3% (a last-bit difference that flips one 8-bit
/// activation rounding is amplified through the layers). Measured on this text: the portable
/// kernels 17.522, AVX2 17.548, AVX-512 17.527 without packed Q5_0/Q4_K weights, 17.572 with
/// packed Q5_0 only, 17.493 with both; llama.cpp's own two attention paths give 17.460 and
/// 17.425. On three other 12 kB slices of the same book ferrolm and llama.cpp differ by −0.6% to
/// +0.3%. A real numerics bug moves it by far more.
///
/// With `q8_0` keys and values (`kv_q8_0`), against llama.cpp's figure for the same cache
/// (`"q8_0"`): both rotate the rows before quantizing them (`ferrolm::kv::KvRotation`).
fn check_perplexity(file: &str, kv_q8_0: bool) {
    let Some(path) = common::require_model(file) else { return };
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("perplexity.json")).unwrap()).unwrap();
    let want = if kv_q8_0 { &r["models"][file]["q8_0"] } else { &r["models"][file] };
    let alice = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/alice29.txt");
    let text = std::fs::read_to_string(alice).unwrap();
    let text = &text[..r["text_bytes"].as_u64().unwrap() as usize];
    let model = Model::load(&path).unwrap();
    // llama-perplexity tokenizes with BOS in front.
    let tokens = model.tokenizer().encode(text, true, false).unwrap();
    let n_ctx = r["n_ctx"].as_u64().unwrap() as usize;
    let kv = if kv_q8_0 { KvType::Q8_0 } else { KvType::F16 };
    let opts = PerplexityOptions {
        n_ctx,
        n_batch: n_ctx,
        scoring: Scoring::Chunks,
        type_k: kv,
        type_v: kv,
        ..PerplexityOptions::default()
    };
    let res = perplexity(&model, &tokens, &opts, &mut |_, _| {}).unwrap();
    let chunks = r["models"][file]["chunks"].as_u64().unwrap() as usize;
    let final_ppl = want["final"].as_f64().unwrap();
    eprintln!(
        "{file}, {kv} cache: PPL {:.4} vs llama-perplexity {final_ppl:.4} over {} chunks",
        res.perplexity, res.n_windows
    );
    assert_eq!(res.n_windows, chunks, "{file}: chunk count");
    assert_eq!(res.n_scored, chunks * (n_ctx - n_ctx / 2 - 1), "{file}: scored tokens");
    let rel = (res.perplexity - final_ppl).abs() / final_ppl;
    assert!(
        rel <= PPL_TOLERANCE,
        "{file}, {kv} cache: PPL {} is {:.2}% off llama-perplexity's {final_ppl}",
        res.perplexity,
        100.0 * rel
    );
}

#[test]
fn smollm2_perplexity_matches_llama_perplexity() {
    check_perplexity("SmolLM2-135M-Instruct.Q4_1.gguf", false);
}

#[test]
fn gemma3_perplexity_matches_llama_perplexity() {
    check_perplexity("gemma-3-270m-q4_k_m.gguf", false);
}

#[test]
fn smollm2_perplexity_with_a_q8_0_cache_matches_llama_perplexity() {
    check_perplexity("SmolLM2-135M-Instruct.Q4_1.gguf", true);
}

#[test]
fn gemma3_perplexity_with_a_q8_0_cache_matches_llama_perplexity() {
    check_perplexity("gemma-3-270m-q4_k_m.gguf", true);
}

/// The `Batch` interface: a prompt split into chunks, and two sequences mixed in one batch,
/// give the same logits as one sequence in one batch.
#[test]
fn chunked_and_mixed_batches_agree() {
    let Some(path) = common::require_model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let model = Model::load(&path).unwrap();
    let a =
        model.tokenizer().encode("The quick brown fox jumps over the lazy dog because", true, true).unwrap();
    let b = model.tokenizer().encode("Rust is a systems programming language that", true, true).unwrap();

    let one_batch = |toks: &[u32]| {
        let mut kv = model.new_kv_cache(256);
        model.forward(&Batch::from_prompt(0, 0, toks), &mut kv).unwrap().last().unwrap().to_vec()
    };
    let ref_a = one_batch(&a);
    let ref_b = one_batch(&b);

    // Chunked prefill of `a`: 3 tokens, then the rest.
    let mut kv = model.new_kv_cache(256);
    model.forward(&Batch::from_prompt(0, 0, &a[..3]), &mut kv).unwrap();
    let chunked =
        model.forward(&Batch::from_prompt(0, 3, &a[3..]), &mut kv).unwrap().last().unwrap().to_vec();

    // Both prompts interleaved in one batch, as sequences 7 and 9.
    let mut kv = model.new_kv_cache(256);
    let mut batch = Batch::new();
    for i in 0..a.len().max(b.len()) {
        if let Some(&t) = a.get(i) {
            batch.push(7, i as u32, t, i + 1 == a.len());
        }
        if let Some(&t) = b.get(i) {
            batch.push(9, i as u32, t, i + 1 == b.len());
        }
    }
    let out = model.forward(&batch, &mut kv).unwrap();
    assert_eq!(out.len(), 2);
    let ia = batch.entries().iter().position(|e| e.seq == 7 && e.logits).unwrap();
    let ib = batch.entries().iter().position(|e| e.seq == 9 && e.logits).unwrap();

    let max_diff = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    assert!(max_diff(&chunked, &ref_a) < 1e-3, "chunked prefill differs: {}", max_diff(&chunked, &ref_a));
    assert!(max_diff(out.for_entry(ia).unwrap(), &ref_a) < 1e-3);
    assert!(max_diff(out.for_entry(ib).unwrap(), &ref_b) < 1e-3);
    assert_eq!(kv.seq(7).unwrap().len(), a.len());
    assert_eq!(kv.seq(9).unwrap().len(), b.len());
}

/// A full context is a clean error that leaves the cache as it was.
#[test]
fn full_context_is_an_error() {
    let Some(path) = common::require_model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let model = Model::load(&path).unwrap();
    let mut kv = model.new_kv_cache(4);
    model.forward(&Batch::from_prompt(0, 0, &[1, 2, 3]), &mut kv).unwrap();
    let err = model.forward(&Batch::from_prompt(0, 3, &[4, 5]), &mut kv).unwrap_err();
    assert!(err.to_string().contains("context is full"), "{err}");
    assert_eq!(kv.seq(0).unwrap().len(), 3);
    let err = model.forward(&Batch::from_prompt(0, 3, &[u32::MAX]), &mut kv).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
}
