//! The low-memory mode's budget: a generation's peak resident size stays within the model
//! file, the KV cache at the full context and a stated margin.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{bin, gemma3, smollm2};

/// What a generation holds besides the mapped weights and the KV cache: the program, the
/// tokenizer's tables (the largest part for Gemma 3's 262k-token vocabulary: ~60 MiB), the
/// forward pass's buffers and the allocator's slack.
const MARGIN_MIB: f64 = 80.0;

/// The context the test runs with.
const N_CTX: usize = 512;

/// The first number after `key` in `text` (a figure of the run's report).
fn figure(text: &str, line_start: &str, key: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start:?} in {text}"));
    let rest = &line[line.find(key).unwrap_or_else(|| panic!("no {key:?} in {line}")) + key.len()..];
    let num: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    num.parse().unwrap()
}

/// Runs a short `--low-memory` generation and checks its peak resident size.
fn check_budget(model: &Path) {
    let out = bin()
        .args(["generate", "--low-memory", "-c", &N_CTX.to_string(), "-n", "16", "-t", "2", "--temp", "0"])
        .args(["-p", "The capital of France is", "-m"])
        .arg(model)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // "kv cache = 20 tokens, 0.44 MiB; ..." and "memory = 122.5 MiB resident, 122.5 MiB peak".
    let kv_tokens = figure(&stderr, "kv cache", "=");
    let kv_mib = figure(&stderr, "kv cache", "tokens,");
    let peak = figure(&stderr, "memory", "resident,");
    let file_mib = std::fs::metadata(model).unwrap().len() as f64 / (1 << 20) as f64;
    let kv_full = kv_mib / kv_tokens * N_CTX as f64;
    let budget = file_mib + kv_full + MARGIN_MIB;
    eprintln!(
        "{}: peak {peak:.1} MiB, file {file_mib:.1} + KV at {N_CTX} {kv_full:.1} + margin {MARGIN_MIB} = {budget:.1} MiB",
        model.display()
    );
    assert!(peak <= budget, "peak resident {peak:.1} MiB is over the budget {budget:.1} MiB\n{stderr}");
}

#[test]
fn low_memory_generation_stays_within_file_kv_and_margin() {
    for model in [smollm2(), gemma3()].into_iter().flatten() {
        check_budget(&model);
    }
}
