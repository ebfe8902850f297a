//! Encoder embedding models (`tests/fixtures/encoders`, made by `scripts/gen_encoder_fixture.py`):
//! a tiny random BERT converted by llama.cpp's converter, whose embeddings must be transformers'
//! within 2e-5 in exact f32 numerics and llama.cpp's within 5e-4 in its own (GELU through an f16
//! table), and tiny random Nomic BERT and Jina BERT v2 GGUFs (transformers has neither), whose
//! mean- and CLS-pooled embeddings must be llama.cpp's within 5e-4. And a real one:
//! sentence-transformers' all-MiniLM-L6-v2 (`scripts/fetch-test-models.sh`), from its folder and
//! converted to GGUF, against transformers' embeddings.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;

use ferrolm::model::{LoadOptions, Model, Pooling};
use serde::Deserialize;

#[derive(Deserialize)]
struct Expected {
    texts: Vec<Text>,
}

#[derive(Deserialize)]
struct Text {
    text: String,
    tokens: Vec<u32>,
    /// transformers' mean and CLS pooling (BERT only).
    mean: Option<Vec<f32>>,
    cls: Option<Vec<f32>>,
    llamacpp_tokens: Vec<u32>,
    llamacpp_mean: Vec<f32>,
    llamacpp_cls: Option<Vec<f32>>,
}

fn fixture(arch: &str) -> (PathBuf, Expected) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/encoders").join(arch);
    let exp = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    (dir.join("model.gguf"), exp)
}

fn load(path: &PathBuf, exact: bool) -> Model {
    Model::load_with(path, &LoadOptions { exact_f32: exact, ..Default::default() }).unwrap()
}

/// Largest |a - b|, checking the lengths agree.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn check(
    model: &Model,
    texts: &[Text],
    pooling: Pooling,
    want: impl Fn(&Text) -> &[f32],
    tol: f32,
    what: &str,
) {
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| t.tokens.clone()).collect();
    let got = model.embed_tokens(&ids, pooling).unwrap();
    for (t, g) in texts.iter().zip(&got) {
        let d = max_diff(g, want(t));
        assert!(d <= tol, "{what}, {:?}: max |Δ| {d:e} > {tol:e}", t.text);
    }
}

fn llamacpp_cls(t: &Text) -> &[f32] {
    t.llamacpp_cls.as_deref().unwrap()
}

#[test]
fn bert_matches_transformers_in_f32_and_llama_cpp_in_its_numerics() {
    let (path, exp) = fixture("bert");
    let exact = load(&path, true);
    assert_eq!(exact.config().arch.name(), "bert");
    assert_eq!(exact.default_pooling(), Some(Pooling::Mean));
    check(&exact, &exp.texts, Pooling::Mean, |t| t.mean.as_deref().unwrap(), 2e-5, "mean vs transformers");
    check(&exact, &exp.texts, Pooling::Cls, |t| t.cls.as_deref().unwrap(), 2e-5, "CLS vs transformers");
    let model = load(&path, false);
    check(&model, &exp.texts, Pooling::Mean, |t| &t.llamacpp_mean, 5e-4, "mean vs llama.cpp");
}

#[test]
fn nomic_bert_nomic_bert_moe_and_jina_bert_v2_match_llama_cpp() {
    for arch in ["nomic-bert", "nomic-bert-moe", "jina-bert-v2"] {
        let (path, exp) = fixture(arch);
        let model = load(&path, false);
        assert_eq!(model.config().arch.name(), arch);
        check(&model, &exp.texts, Pooling::Mean, |t| &t.llamacpp_mean, 5e-4, &format!("{arch} mean"));
        check(&model, &exp.texts, Pooling::Cls, llamacpp_cls, 5e-4, &format!("{arch} CLS"));
    }
}

#[test]
fn texts_embedded_together_equal_texts_embedded_alone() {
    for arch in ["bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2"] {
        let (path, exp) = fixture(arch);
        let model = load(&path, false);
        let ids: Vec<Vec<u32>> = exp.texts.iter().map(|t| t.tokens.clone()).collect();
        let together = model.embed_tokens(&ids, Pooling::Mean).unwrap();
        for (one, want) in ids.iter().zip(&together) {
            let alone = model.embed_tokens(std::slice::from_ref(one), Pooling::Mean).unwrap();
            assert!(max_diff(&alone[0], want) <= 1e-5, "{arch}: batching changed an embedding");
        }
    }
}

#[test]
fn the_bert_vocabulary_tokenizes_as_transformers_and_llama_cpp() {
    for arch in ["bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2"] {
        let (path, exp) = fixture(arch);
        let model = load(&path, false);
        for t in &exp.texts {
            assert_eq!(t.tokens, t.llamacpp_tokens, "fixture: the two references disagree on {:?}", t.text);
            let got = model.tokenizer().encode(&t.text, true, false).unwrap();
            assert_eq!(got, t.tokens, "{arch}: {:?}", t.text);
        }
        let texts: Vec<&str> = exp.texts.iter().map(|t| t.text.as_str()).collect();
        let by_text = model.embed(&texts, Pooling::Mean, false).unwrap();
        for (t, e) in exp.texts.iter().zip(&by_text) {
            assert!(max_diff(e, &t.llamacpp_mean) <= 5e-4, "{arch}: embed({:?})", t.text);
        }
    }
}

#[test]
fn an_encoder_refuses_to_generate_and_overlong_texts() {
    let (path, _) = fixture("bert");
    let model = load(&path, false);
    let mut kv = model.new_kv_cache(16);
    let mut batch = ferrolm::batch::Batch::new();
    batch.push(0, 0, 2, true);
    let err = model.forward(&batch, &mut kv).unwrap_err().to_string();
    assert!(err.contains("bert is an encoder model"), "{err}");
    // 64 positions: a 65-token text cannot be embedded.
    let err = model.embed_tokens(&[vec![5; 65]], Pooling::Mean).unwrap_err().to_string();
    assert!(err.contains("longer than this encoder's 64 positions"), "{err}");
}

/// The engine embeds token sequences exactly as the model does (normalised when asked), caps
/// its context at the encoder's positions, and counts the tokens in its metrics.
#[test]
fn the_engine_embeds_tokens_as_the_model_does() {
    use ferrolm::engine::{Engine, EngineConfig};
    let (path, exp) = fixture("bert");
    let model = std::sync::Arc::new(load(&path, false));
    let engine = Engine::start(model.clone(), EngineConfig::default()).unwrap();
    assert_eq!(engine.config().n_ctx, 64, "the slot context is the encoder's 64 positions");
    let ids: Vec<Vec<u32>> = exp.texts.iter().map(|t| t.tokens.clone()).collect();
    let want = model.embed_tokens(&ids, Pooling::Cls).unwrap();
    let raw = engine.embed_tokens(ids.clone(), Some(Pooling::Cls), false).unwrap();
    assert_eq!(raw, want);
    let unit = engine.embed_tokens(ids.clone(), Some(Pooling::Cls), true).unwrap();
    for (u, w) in unit.iter().zip(&want) {
        let norm = w.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(max_diff(u, &w.iter().map(|x| x / norm).collect::<Vec<_>>()) < 1e-6);
    }
    // Without pooling: every token's state; its first row is CLS, its mean is mean pooling.
    let rows = engine.embed_tokens(ids.clone(), Some(Pooling::None), true).unwrap();
    let mean = model.embed_tokens(&ids, Pooling::Mean).unwrap();
    let d = model.config().n_embd;
    for ((r, t), (c, m)) in rows.iter().zip(&ids).zip(want.iter().zip(&mean)) {
        assert_eq!(r.len(), t.len() * d, "one row per token, not normalised");
        assert_eq!(&r[..d], &c[..]);
        let avg: Vec<f32> =
            (0..d).map(|k| r.chunks_exact(d).map(|row| row[k]).sum::<f32>() / t.len() as f32).collect();
        assert!(max_diff(&avg, m) < 1e-5);
    }
    let n: usize = ids.iter().map(Vec::len).sum();
    assert_eq!(engine.metrics().prompt_tokens_total, 3 * n as u64);
    let err = engine.embed_tokens(vec![vec![u32::MAX]], None, true).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}

#[test]
fn bert_from_its_hugging_face_folder_equals_transformers() {
    let (path, exp) = fixture("bert");
    let folder = path.parent().unwrap().join("hf");
    let model = load(&folder, true);
    assert_eq!(model.config().arch.name(), "bert");
    assert_eq!(model.default_pooling(), Some(Pooling::Mean), "from 1_Pooling/config.json");
    check(&model, &exp.texts, Pooling::Mean, |t| t.mean.as_deref().unwrap(), 2e-5, "folder, mean");
    check(&model, &exp.texts, Pooling::Cls, |t| t.cls.as_deref().unwrap(), 2e-5, "folder, CLS");
    for t in &exp.texts {
        assert_eq!(model.tokenizer().encode(&t.text, true, false).unwrap(), t.tokens, "folder: {:?}", t.text);
    }
}

#[derive(Deserialize)]
struct RealExpected {
    texts: Vec<RealText>,
}

#[derive(Deserialize)]
struct RealText {
    text: String,
    tokens: Vec<u32>,
    embedding: Vec<f32>,
}

#[test]
fn all_minilm_l6_v2_matches_sentence_transformers_from_its_folder_and_as_gguf() {
    let Some(dir) = common::require_hf_folder("all-MiniLM-L6-v2") else { return };
    let exp: RealExpected =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ferrolm_expected.json")).unwrap()).unwrap();
    let folder = Model::load(&dir).unwrap();
    assert_eq!(folder.default_pooling(), Some(Pooling::Mean));
    let tmp = tempfile::tempdir().unwrap();
    let gguf_path = tmp.path().join("minilm-f16.gguf");
    ferrolm::model::convert::convert_hf_to_gguf(
        &dir,
        &gguf_path,
        ferrolm::model::GgmlType::F16,
        &mut |_, _| {},
    )
    .unwrap();
    let gguf = Model::load(&gguf_path).unwrap();
    let texts: Vec<&str> = exp.texts.iter().map(|t| t.text.as_str()).collect();
    for (what, model, tol) in [("folder", &folder, 1e-3), ("f16 GGUF", &gguf, 1e-3)] {
        for t in &exp.texts {
            assert_eq!(
                model.tokenizer().encode(&t.text, true, false).unwrap(),
                t.tokens,
                "{what}: {:?}",
                t.text
            );
        }
        let got = model.embed(&texts, Pooling::Mean, true).unwrap();
        for (t, g) in exp.texts.iter().zip(&got) {
            let d = max_diff(g, &t.embedding);
            let cos: f32 = g.iter().zip(&t.embedding).map(|(a, b)| a * b).sum();
            assert!(d <= tol && cos > 0.9999, "{what}, {:?}: max |Δ| {d:e}, cosine {cos}", t.text);
        }
    }
}

#[derive(Deserialize)]
struct LastExpected {
    texts: Vec<LastText>,
}

#[derive(Deserialize)]
struct LastText {
    text: String,
    tokens: Vec<u32>,
    last: Vec<f32>,
    llamacpp_last: Vec<f32>,
}

/// Qwen3-Embedding's pooling: a decoder's final-norm hidden state of the last token, on the
/// conformance suite's tiny Qwen 3 (bf16 weights). Embeddings run with an f32 cache, so both
/// numerics are transformers' within 1e-4; llama.cpp (activations rounded to bf16 for these
/// weights) is up to 0.085 from transformers on values of about 10.
#[test]
fn last_token_pooling_of_a_decoder_matches_transformers_and_llama_cpp() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let exp: LastExpected = serde_json::from_str(
        &std::fs::read_to_string(root.join("encoders/qwen3-last/expected.json")).unwrap(),
    )
    .unwrap();
    let path = root.join("conformance/qwen3/model.gguf");
    let texts: Vec<&str> = exp.texts.iter().map(|t| t.text.as_str()).collect();
    for exact in [true, false] {
        let model = load(&path, exact);
        let got = model.embed(&texts, Pooling::Last, false).unwrap();
        for (t, g) in exp.texts.iter().zip(&got) {
            assert_eq!(model.tokenizer().encode(&t.text, true, false).unwrap(), t.tokens);
            let d = max_diff(g, &t.last);
            assert!(d <= 1e-4, "{:?} (exact {exact}): vs transformers {d:e}", t.text);
            let d = max_diff(g, &t.llamacpp_last);
            assert!(d <= 0.2, "{:?} (exact {exact}): vs llama.cpp {d:e}", t.text);
        }
    }
}
