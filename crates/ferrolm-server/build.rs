//! Records the git commit the server is built from (`FERROLM_COMMIT`: its short hash, or
//! `unknown` outside a git checkout) for the `system_fingerprint` and `build_info` fields.

use std::path::Path;
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=7", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=FERROLM_COMMIT={commit}");
    // Rebuild when HEAD moves: HEAD itself (a checkout) and the branch it points at (a commit).
    let git = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.git");
    let head = git.join("HEAD");
    if head.is_file() {
        println!("cargo:rerun-if-changed={}", head.display());
        if let Ok(text) = std::fs::read_to_string(&head)
            && let Some(reference) = text.strip_prefix("ref: ")
        {
            println!("cargo:rerun-if-changed={}", git.join(reference.trim()).display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
