//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

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
