//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// Folder holding the real model files: `$FERROLM_MODEL_DIR`, else `<cache dir>/ferrolm/models`.
pub fn model_dir() -> PathBuf {
    match std::env::var_os("FERROLM_MODEL_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("ferrolm").join("models"),
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
    let msg = format!(
        "model file {file_name} not found in {} (set FERROLM_MODEL_DIR to the folder holding it)",
        model_dir().display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}; CI=true requires it");
    }
    eprintln!("notice: skipping: {msg}");
    None
}

/// The crate's test fixtures folder.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}
