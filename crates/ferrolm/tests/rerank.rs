//! Reranking against transformers: a tiny random Qwen3-Reranker (`tests/fixtures/rerank`, made
//! by `scripts/gen_rerank_fixture.py` and converted by llama.cpp's converter, which writes the
//! classifier head and the rerank template). The prompts must tokenize as the Hugging Face
//! tokenizer does, and the scores must be transformers' (softmax over the "yes"/"no" logits of
//! the last token) within 1e-4 in exact f32 numerics. And tiny random BERT and XLM-RoBERTa
//! cross-encoders (`tests/fixtures/rerank/{bert,xlmr}-cross`, `scripts/gen_cross_encoder_fixture.py`):
//! pairs laid out as llama.cpp's server lays them out, scores equal to transformers' and
//! llama.cpp's.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use ferrolm::model::{LoadOptions, Model};
use serde::Deserialize;

#[derive(Deserialize)]
struct Expected {
    queries: Vec<Query>,
}

#[derive(Deserialize)]
struct Query {
    query: String,
    documents: Vec<Doc>,
    ranking: Vec<usize>,
}

#[derive(Deserialize)]
struct Doc {
    document: String,
    tokens: Vec<u32>,
    score: f32,
    /// llama.cpp's score (the cross-encoder fixture).
    #[serde(default)]
    llamacpp_score: Option<f32>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rerank/qwen3-reranker")
}

#[test]
fn qwen3_reranker_scores_match_transformers() {
    check_scores(&dir().join("model.gguf"));
}

/// The Hugging Face folder the GGUF was converted from is recognised as a reranker (its README's
/// `# Qwen3-Reranker` heading, as llama.cpp's converter looks for) and scores the same.
#[test]
fn a_qwen3_reranker_folder_scores_like_its_gguf() {
    check_scores(&dir().join("hf"));
}

fn check_scores(path: &std::path::Path) {
    let exp: Expected =
        serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap()).unwrap();
    let model = Model::load_with(path, &LoadOptions { exact_f32: true, ..LoadOptions::default() }).unwrap();
    assert!(model.is_reranker(), "{}", path.display());
    for q in &exp.queries {
        let docs: Vec<&str> = q.documents.iter().map(|d| d.document.as_str()).collect();
        for d in &q.documents {
            assert_eq!(model.rerank_tokens(&q.query, &d.document).unwrap(), d.tokens, "{:?}", d.document);
        }
        let got = model.rerank(&q.query, &docs).unwrap();
        for (g, d) in got.iter().zip(&q.documents) {
            assert!((g.score - d.score).abs() < 1e-4, "{:?}: {} vs {}", d.document, g.score, d.score);
            assert_eq!(g.n_tokens, d.tokens.len());
        }
        let mut order: Vec<usize> = (0..got.len()).collect();
        order.sort_by(|&a, &b| got[b].score.total_cmp(&got[a].score));
        assert_eq!(order, q.ranking);
        // A document's score does not depend on the others scored with it.
        let alone = model.rerank(&q.query, &docs[1..2]).unwrap();
        assert!((alone[0].score - got[1].score).abs() < 1e-5);
    }
}

#[test]
fn the_engine_reranks_between_ticks_like_the_model() {
    let model = std::sync::Arc::new(Model::load(dir().join("model.gguf")).unwrap());
    let engine =
        ferrolm::engine::Engine::start(model.clone(), ferrolm::engine::EngineConfig::default()).unwrap();
    assert!(engine.is_reranker());
    let docs = vec!["Paris is the capital of France.".to_string(), "Bananas are yellow.".to_string()];
    let want = model.rerank("What is the capital of France?", &docs).unwrap();
    let got = engine.rerank("What is the capital of France?".into(), docs).unwrap();
    assert_eq!(got, want);
    engine.shutdown();
}

#[test]
fn a_model_without_a_classifier_head_cannot_rerank() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conformance/qwen3/model.gguf");
    let model = Model::load(&path).unwrap();
    assert!(!model.is_reranker());
    let err = model.rerank("q", &["d"]).unwrap_err().to_string();
    assert!(err.contains("cannot rerank"), "{err}");
}

#[test]
fn a_bert_cross_encoder_scores_pairs_like_transformers_and_llama_cpp() {
    check_cross_encoder("bert-cross");
}

/// bge-reranker's shape: RoBERTa's head, positions after the padding id, a unigram vocabulary
/// (pairs as `<s> query </s></s> document </s>`).
#[test]
fn an_xlm_roberta_cross_encoder_scores_pairs_like_transformers_and_llama_cpp() {
    check_cross_encoder("xlmr-cross");
}

/// The fixture `tests/fixtures/rerank/NAME`: pair tokens as llama.cpp's, scores within 1e-4 of
/// transformers' (exact f32) and 2e-3 of llama.cpp's (the default kernels), the same ranking.
fn check_cross_encoder(name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rerank").join(name);
    let exp: Expected =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let path = dir.join("model.gguf");
    let exact = Model::load_with(&path, &LoadOptions { exact_f32: true, ..LoadOptions::default() }).unwrap();
    let fast = Model::load(&path).unwrap();
    assert!(exact.is_reranker(), "a cross-encoder needs no rerank template");
    for q in &exp.queries {
        let docs: Vec<&str> = q.documents.iter().map(|d| d.document.as_str()).collect();
        for d in &q.documents {
            assert_eq!(exact.rerank_tokens(&q.query, &d.document).unwrap(), d.tokens, "{:?}", d.document);
        }
        let (got, got_fast) = (exact.rerank(&q.query, &docs).unwrap(), fast.rerank(&q.query, &docs).unwrap());
        for ((g, f), d) in got.iter().zip(&got_fast).zip(&q.documents) {
            assert!(
                (g.score - d.score).abs() < 1e-4,
                "{:?}: {} vs transformers {}",
                d.document,
                g.score,
                d.score
            );
            let lc = d.llamacpp_score.unwrap();
            assert!((f.score - lc).abs() < 2e-3, "{:?}: {} vs llama.cpp {lc}", d.document, f.score);
        }
        let mut order: Vec<usize> = (0..got.len()).collect();
        order.sort_by(|&a, &b| got[b].score.total_cmp(&got[a].score));
        assert_eq!(order, q.ranking);
    }
}
