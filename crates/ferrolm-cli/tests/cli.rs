//! End-to-end runs of the `ferrolm` binary.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;

use common::{bin, smollm2};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ferrolm/tests/fixtures")
}

#[test]
fn generate_streams_greedy_text_and_prints_timings() {
    let Some(model) = smollm2() else { return };
    let out = bin()
        .args(["generate", "-m"])
        .arg(&model)
        .args(["-p", "The capital of France is", "-n", "4", "--temp", "0", "-t", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    // llama.cpp's greedy continuation starts with " Paris." (see the reference fixtures).
    assert!(stdout.starts_with("The capital of France is Paris."), "{stdout:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("prompt eval time") && stderr.contains("tokens per second"), "{stderr}");
}

#[test]
fn generate_reports_bad_input_clearly() {
    let out = bin().args(["generate", "-m", "/nonexistent/model.gguf", "-p", "hi"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("error:") && !stderr.contains("panicked"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x03\0\0\0garbage").unwrap();
    let out = bin().args(["generate", "-p", "hi", "-m"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("truncated") && !stderr.contains("panicked"), "{stderr}");
}

#[test]
fn tokenize_vocab_only_file() {
    let vocab = fixtures().join("vocab/ggml-vocab-llama-spm.gguf");
    let out =
        bin().args(["tokenize", "-p", "Hello world", "--no-add-special", "-m"]).arg(&vocab).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // As in ggml-vocab-llama-spm.gguf.out for "Hello world".
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "[15043, 3186]");
}

#[test]
fn inspect_json_lists_tensors() {
    let vocab = fixtures().join("vocab/ggml-vocab-gpt-2.gguf");
    let out = bin().args(["inspect", "--json"]).arg(&vocab).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.is_object());
    assert!(v.to_string().contains("tokenizer.ggml.model"));
}

/// Runs `cmd`, killing it and failing the test if it has not exited within `secs` seconds.
fn output_within(mut cmd: std::process::Command, secs: u64) -> std::process::Output {
    use std::process::Stdio;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed().as_secs() >= secs {
            child.kill().unwrap();
            panic!("command still running after {secs} s: {cmd:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn inspect_truncates_huge_keys_and_tensor_names() {
    use ferrolm::GgmlType;
    use ferrolm::format::gguf::MetaValue;
    use ferrolm::format::gguf_write::GgufWriter;
    // Names of 64 KiB and more were used as a format width: a panic (exit 101) above 65,535.
    let long = "k".repeat(70_000);
    let mut w = GgufWriter::new();
    w.add(long.clone(), MetaValue::U32(1)).unwrap();
    w.add_tensor(format!("t{long}"), &[4], GgmlType::F32, vec![0; 16]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("long.gguf");
    std::fs::write(&p, w.to_bytes()).unwrap();
    let mut cmd = bin();
    cmd.arg("inspect").arg(&p);
    let out = output_within(cmd, 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("… (70000 bytes)") && stdout.contains("… (70001 bytes)"), "{stdout:.2000}");
    assert!(stdout.lines().all(|l| l.len() < 1000), "a line is as wide as the name");
}

#[cfg(unix)]
#[test]
fn inspect_and_generate_refuse_a_fifo_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("m.gguf");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for args in [vec!["inspect"], vec!["generate", "-p", "hi", "-n", "1", "-m"]] {
        let mut cmd = bin();
        cmd.args(&args).arg(&fifo);
        let out = output_within(cmd, 30);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        // `generate` resolves the name first: a FIFO is "not an existing file" there.
        let named = if args[0] == "inspect" { "FIFO" } else { "not an existing file" };
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    let mut cmd = bin();
    cmd.arg("inspect").arg(dir.path());
    let out = output_within(cmd, 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("directory"), "{stderr}");
}
