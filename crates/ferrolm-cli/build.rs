//! Records the git commit the CLI is built from in `FERROLM_GIT_COMMIT` (for `ferrolm bench`),
//! or "unknown" outside a git checkout. Reruns only when HEAD or the branch it points to moves.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Asks cargo to rerun when `git_path` (a path inside the git directory) changes, if it exists:
/// a missing file would make cargo rerun the script on every build.
fn watch(git_path: &str) {
    if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", git_path])
        && Path::new(&p).is_file()
    {
        println!("cargo:rerun-if-changed={p}");
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    if commit.is_some() {
        watch("HEAD");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch(&branch);
        }
        // A branch whose loose ref was packed lives in packed-refs.
        watch("packed-refs");
    }
    println!("cargo:rustc-env=FERROLM_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
