//! Helpers shared by the CLI's end-to-end tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

/// The `ferrolm` binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
}

/// The SmolLM2 test model (see `crates/ferrolm/tests/common`): required under `CI=true`.
pub fn smollm2() -> Option<PathBuf> {
    test_model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The Gemma 3 test model: required under `CI=true`.
pub fn gemma3() -> Option<PathBuf> {
    test_model("gemma-3-270m-q4_k_m.gguf")
}

/// The test model file `name` in `FERROLM_MODEL_DIR` (else the model cache): required under
/// `CI=true`, else `None` with a notice.
pub fn test_model(name: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("FERROLM_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => ferrolm::hub::model_dir().unwrap(),
    };
    let p = dir.join(name);
    if p.is_file() {
        return Some(p);
    }
    assert!(std::env::var("CI").map_or(true, |v| v != "true"), "{} is missing and CI=true", p.display());
    eprintln!("notice: skipping, {} not found", p.display());
    None
}
