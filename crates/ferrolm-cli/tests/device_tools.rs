//! End-to-end runs of the on-device tools: `ferrolm micro-bench`, `ferrolm profile` (and
//! `generate --profile`) and `ferrolm check-model`.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Output;

use common::{bin, smollm2};
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn stdout_of(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn assert_clear_error(out: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "succeeded: {}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains(expect) && !stderr.contains("panicked"), "{stderr}");
}

/// Runs `micro-bench OP ARGS` with JSON output on one thread and returns its records.
fn micro_bench(op_args: &[&str]) -> Vec<Value> {
    let mut args = vec!["micro-bench"];
    args.extend(op_args);
    args.extend(["-o", "json", "-r", "2", "-t", "1", "--min-time-ms", "1"]);
    let v: Value = serde_json::from_str(&stdout_of(&run(&args))).unwrap();
    let records = v.as_array().unwrap().clone();
    for r in &records {
        assert_eq!(r["n_threads"], 1, "{r}");
        assert!(ferrolm::Isa::from_name(r["isa"].as_str().unwrap()).is_some(), "{r}");
        let samples = r["samples_ns"].as_array().unwrap();
        assert_eq!(samples.len(), 2, "{r}");
        assert!(samples.iter().all(|s| s.as_u64().unwrap() > 0), "{r}");
        assert!(r["median_ns"].as_u64().unwrap() > 0 && r["iterations"].as_u64().unwrap() >= 1, "{r}");
    }
    records
}

#[test]
fn micro_bench_matmul_runs_every_quantizable_weight_type() {
    let types = "f32,f16,bf16,q4_0,q4_1,q5_0,q5_1,q8_0,q4_k,mxfp4";
    let records = micro_bench(&["matmul", "--type", types, "--rows", "16", "--cols", "256", "-n", "1,3"]);
    assert_eq!(records.len(), 20);
    for (r, ty) in records.chunks(2).zip(types.split(',')) {
        assert_eq!((r[0]["type"].as_str(), r[1]["type"].as_str()), (Some(ty), Some(ty)));
        assert_eq!((r[0]["n_tokens"].as_u64(), r[1]["n_tokens"].as_u64()), (Some(1), Some(3)));
        assert_eq!(r[1]["flops"], 2.0 * 16.0 * 256.0 * 3.0);
        assert!(r.iter().all(|r| r["gflops"].as_f64().unwrap() > 0.0), "{r:?}");
        // Weight bytes per second only for the matrix-vector product.
        assert!(r[0]["weight_gbs"].as_f64().unwrap() > 0.0 && r[1]["weight_gbs"].is_null(), "{r:?}");
    }
}

#[test]
fn micro_bench_attention_norm_and_rope() {
    let attn = micro_bench(&[
        "attention",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--head-dim",
        "64",
        "-d",
        "0,32",
        "-n",
        "1,4",
        "--kv-type",
        "f16,q8_0",
    ]);
    assert_eq!(attn.len(), 8);
    assert!(attn.iter().all(|r| r["op"] == "attention" && r["gflops"].as_f64().unwrap() > 0.0));
    assert_eq!(attn[7]["type"], "q8_0");
    assert_eq!((attn[7]["n_depth"].as_u64(), attn[7]["n_tokens"].as_u64()), (Some(32), Some(4)));

    let norm = micro_bench(&["rmsnorm", "--rows", "1,8", "--width", "64"]);
    assert_eq!(norm.len(), 2);
    assert_eq!(norm[1]["elements"], 512.0);
    assert!(norm.iter().all(|r| r["elements_per_s"].as_f64().unwrap() > 0.0 && r["gflops"].is_null()));

    let rope = micro_bench(&[
        "rope",
        "--heads",
        "2",
        "--head-dim",
        "64",
        "-n",
        "1,2",
        "--style",
        "neox,interleaved",
    ]);
    let styles: Vec<&str> = rope.iter().map(|r| r["style"].as_str().unwrap()).collect();
    assert_eq!(styles, ["neox", "neox", "interleaved", "interleaved"]);
    assert!(rope.iter().all(|r| r["elements_per_s"].as_f64().unwrap() > 0.0));
}

#[test]
fn micro_bench_markdown_and_csv() {
    let args = ["micro-bench", "rmsnorm", "--rows", "1", "--width", "32", "-r", "1", "--min-time-ms", "0"];
    let md = stdout_of(&run(&args));
    assert!(md.contains("| op | type | size | isa | threads |"), "{md}");
    assert!(
        md.lines().any(|l| l.starts_with("| rmsnorm | f32 | 1 x 32 |") && l.contains("G elem/s")),
        "{md}"
    );
    let csv = stdout_of(&run(&[&args[..], &["-o", "csv"]].concat()));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert_eq!(lines[0].split(',').count(), lines[1].split("\",\"").count(), "{csv}");
}

#[test]
fn micro_bench_refuses_what_it_cannot_make() {
    let out = run(&["micro-bench", "matmul", "--type", "q6_k", "--cols", "256"]);
    assert_clear_error(&out, "no quantizer for Q6_K");
    assert!(out.stdout.is_empty());
    assert_clear_error(
        &run(&["micro-bench", "matmul", "--type", "q4_k", "--cols", "100"]),
        "multiple of 256",
    );
    assert_clear_error(
        &run(&["micro-bench", "attention", "--heads", "6", "--kv-heads", "4"]),
        "does not divide",
    );
    assert_clear_error(&run(&["micro-bench", "rmsnorm", "--rows", "0"]), "at least 1");
    assert_clear_error(&run(&["micro-bench", "rope", "--style", "sideways"]), "unknown RoPE style");
}

/// Checks one phase of a profile: operators with calls, their time against the measured one.
fn check_phase(p: &Value, min_tokens: u64) {
    assert!(p["tokens"].as_u64().unwrap() >= min_tokens, "{p}");
    let passes = p["passes"].as_u64().unwrap();
    assert!(passes >= 1, "{p}");
    let ops = p["ops"].as_array().unwrap();
    let (real, other): (Vec<&Value>, Vec<&Value>) = ops.iter().partition(|o| o["op"] != "other");
    assert_eq!(other.len(), 1, "{p}");
    assert!(real.iter().all(|o| o["calls"].as_u64().unwrap() > 0), "{p}");
    let names: Vec<&str> = real.iter().map(|o| o["op"].as_str().unwrap()).collect();
    for op in ["matmul", "attention", "rms_norm", "rope", "activation", "add", "embedding"] {
        assert!(names.contains(&op), "{op} missing: {names:?}");
    }
    let roles: Vec<&str> = real.iter().filter_map(|o| o["role"].as_str()).collect();
    assert!(roles.contains(&"output") && roles.contains(&"ffn_down"), "{roles:?}");
    // The operators account for about all of the phase's measured time, and the rows add up.
    let (ops_ms, measured) = (p["ops_ms"].as_f64().unwrap(), p["measured_ms"].as_f64().unwrap());
    assert!(ops_ms <= measured * 1.01 && ops_ms >= 0.6 * measured, "{ops_ms} of {measured} ms");
    let sum: f64 = ops.iter().map(|o| o["total_ms"].as_f64().unwrap()).sum();
    assert!((sum - measured.max(ops_ms)).abs() < 0.01 * measured, "{sum} vs {measured}");
    // Matrix products dominate a small model's passes.
    let matmul: f64 =
        real.iter().filter(|o| o["op"] == "matmul").map(|o| o["total_ms"].as_f64().unwrap()).sum();
    assert!(matmul > 0.5 * ops_ms, "matmul {matmul} of {ops_ms} ms");
    let per_pass = real[0]["ms_per_pass"].as_f64().unwrap() * passes as f64;
    assert!((per_pass - real[0]["total_ms"].as_f64().unwrap()).abs() < 1e-6, "{p}");
}

#[test]
fn profile_times_each_operator_of_prefill_and_decode() {
    let Some(model) = smollm2() else { return };
    let m = model.to_str().unwrap();
    let out = run(&[
        "profile",
        "-m",
        m,
        "-p",
        "The quick brown fox jumps over the lazy dog",
        "-n",
        "6",
        "-t",
        "1",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert_eq!(v["n_threads"], 1);
    assert_eq!(v["backend"], "cpu");
    let phases = v["phases"].as_array().unwrap();
    assert_eq!((phases[0]["phase"].as_str(), phases[1]["phase"].as_str()), (Some("prefill"), Some("decode")));
    check_phase(&phases[0], 9);
    // The first generated token comes from the prompt's logits; each next one from a pass.
    check_phase(&phases[1], 5);
    assert_eq!(phases[1]["passes"], 5);
    let md = stdout_of(&run(&["profile", "-m", m, "-n", "2", "-t", "1", "--no-warmup"]));
    assert!(md.contains("### prefill:") && md.contains("### decode: 1 token in 1 pass,"), "{md}");
    assert!(md.contains("| matmul | q4_1 | attn_q+attn_k+attn_v |"), "{md}");
}

#[test]
fn generate_profile_prints_the_table_after_the_text() {
    let Some(model) = smollm2() else { return };
    let out =
        run(&["generate", "-m", model.to_str().unwrap(), "-p", "Hi", "-n", "4", "--temp", "0", "--profile"]);
    let stdout = stdout_of(&out);
    assert!(!stdout.contains("| op |"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let timings = stderr.find("eval time").unwrap();
    let table = stderr.find("### decode:").unwrap();
    assert!(timings < table && stderr.contains("| matmul |"), "{stderr}");
}

#[test]
fn check_model_passes_on_smollm2() {
    let Some(model) = smollm2() else { return };
    let out = run(&["check-model", "-m", model.to_str().unwrap(), "-n", "8"]);
    let stdout = stdout_of(&out);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.last(), Some(&"OK"), "{stdout}");
    for check in ["finite logits:", "greedy reproducible:", "batch = token by token:"] {
        let line = lines.iter().find(|l| l.starts_with(check)).unwrap();
        assert!(line[check.len()..].trim_start().starts_with("OK ("), "{line}");
    }
}

#[test]
fn check_model_reports_broken_files_clearly() {
    let Some(model) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&model).unwrap();
    // Header and tensor table intact, tensor data cut short.
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert_clear_error(&run(&["check-model", "-m", cut.to_str().unwrap()]), "runs past the end of the file");
    // Cut inside the metadata.
    let head = dir.path().join("head.gguf");
    std::fs::write(&head, &bytes[..4096]).unwrap();
    assert_clear_error(&run(&["check-model", "-m", head.to_str().unwrap()]), "loading");
    let missing = dir.path().join("missing.gguf");
    assert_clear_error(&run(&["check-model", "-m", missing.to_str().unwrap()]), "not an existing file");
}
