//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod parity;

/// Folder holding the real model files: `$FERROLM_MODEL_DIR`, else the cache folder that
/// `ferrolm pull` (and `scripts/fetch-test-models.sh`) downloads into.
pub fn model_dir() -> PathBuf {
    match std::env::var_os("FERROLM_MODEL_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            ferrolm::hub::model_dir().unwrap_or_else(|_| std::env::temp_dir().join("ferrolm-models-missing"))
        }
    }
}

/// Path of a model file in [`model_dir`], if it is there.
pub fn model_path(file_name: &str) -> Option<PathBuf> {
    let path = model_dir().join(file_name);
    path.is_file().then_some(path)
}

/// Like [`model_path`], but a missing model fails the test when `CI=true` and otherwise prints a
/// notice (the caller then skips the test).
pub fn require_model(file_name: &str) -> Option<PathBuf> {
    if let Some(p) = model_path(file_name) {
        return Some(p);
    }
    missing(format!(
        "model file {file_name} not found in {} (set FERROLM_MODEL_DIR to the folder holding it)",
        model_dir().display()
    ))
}

/// A Hugging Face model folder in [`model_dir`] (made by `scripts/fetch-test-models.sh`), with
/// the same CI rule as [`require_model`].
pub fn require_hf_folder(name: &str) -> Option<PathBuf> {
    let dir = model_dir().join(name);
    if dir.join("config.json").is_file() {
        return Some(dir);
    }
    missing(format!(
        "Hugging Face folder {name} not found in {} (scripts/fetch-test-models.sh makes it)",
        model_dir().display()
    ))
}

fn missing(msg: String) -> Option<PathBuf> {
    if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1") {
        panic!("{msg}; CI=true requires it");
    }
    eprintln!("notice: skipping: {msg}");
    None
}

/// The crate's test fixtures folder.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}

/// The reference files of one model (`tests/fixtures/reference/<dir>/*.json`), sorted; at
/// least five.
pub fn reference_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir().join("reference").join(dir))
        .expect("reference folder")
        .map(|e| e.expect("reference entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "expected reference files in {dir}");
    files
}

/// A llama.cpp reference file (`tests/fixtures/reference/<model>/<prompt>.json`): the prompt's
/// tokens and, per greedy step, the token, its bytes and the top-10 `(id, logit)`.
#[derive(serde::Deserialize)]
pub struct Reference {
    /// The prompt's token ids.
    pub prompt_tokens: Vec<u32>,
    /// The greedy steps.
    pub steps: Vec<RefStep>,
}

/// One greedy step of a [`Reference`].
#[derive(serde::Deserialize)]
pub struct RefStep {
    /// The token llama.cpp picked.
    pub token: u32,
    /// Its piece's bytes.
    pub bytes: Vec<u8>,
    /// The ten best `(token, logit)`.
    pub top: Vec<(u32, f32)>,
}
