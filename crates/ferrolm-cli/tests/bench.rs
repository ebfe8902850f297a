//! End-to-end runs of `ferrolm bench`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{bin, smollm2};
use serde_json::Value;

fn bench(model: &Path, extra: &[&str]) -> std::process::Output {
    bin().args(["bench", "-m"]).arg(model).args(extra).output().unwrap()
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn assert_fails(args: &[&str], expect: &str) {
    let out = bin().arg("bench").args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(expect) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    // Results go to stdout only: nothing is printed before the first model loads.
    assert!(out.stdout.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stdout));
}

/// Checks one result object: its fields, and that its statistics agree with its samples.
fn check_result(r: &Value, n_prompt: u64, n_gen: u64, reps: usize) {
    assert_eq!(r["n_prompt"], n_prompt, "{r}");
    assert_eq!(r["n_gen"], n_gen, "{r}");
    assert_eq!(r["n_threads"], 1);
    assert_eq!(r["n_batch"], 512);
    assert_eq!(r["backends"], "CPU");
    assert_eq!(r["build_number"], 0);
    assert_eq!((r["type_k"].as_str(), r["type_v"].as_str()), (Some("f16"), Some("f16")));
    assert!(r["model_filename"].as_str().unwrap().ends_with("SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(r["model_type"].as_str().unwrap().starts_with("llama "), "{r}");
    // SmolLM2-135M: about 135 M parameters in about 80 MiB of Q4_1 and F32 tensors.
    let n_params = r["model_n_params"].as_u64().unwrap();
    assert!((130_000_000..140_000_000).contains(&n_params), "{n_params}");
    let size = r["model_size"].as_u64().unwrap();
    assert!((60 << 20..100 << 20).contains(&size), "{size}");
    // The host name unless --device-name says otherwise.
    assert!(!r["device"].as_str().unwrap().is_empty(), "{r}");
    let time = r["test_time"].as_str().unwrap();
    assert!(time.len() == 20 && time.ends_with('Z') && &time[10..11] == "T", "{time}");

    let ns: Vec<u64> = r["samples_ns"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let ts: Vec<f64> = r["samples_ts"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!((ns.len(), ts.len()), (reps, reps));
    for (&n, &t) in ns.iter().zip(&ts) {
        assert!(n > 0);
        let want = 1e9 * (n_prompt + n_gen) as f64 / n as f64;
        assert!((t - want).abs() <= 1e-9 * want, "{t} vs {want}");
    }
    let avg = ts.iter().sum::<f64>() / reps as f64;
    assert!((r["avg_ts"].as_f64().unwrap() - avg).abs() <= 1e-9 * avg, "{r}");
    let avg_ns = ns.iter().sum::<u64>() as f64 / reps as f64;
    assert!((r["avg_ns"].as_u64().unwrap() as f64 - avg_ns).abs() <= 1.0, "{r}");
    let sd = if reps > 1 {
        (ts.iter().map(|t| (t - avg).powi(2)).sum::<f64>() / (reps - 1) as f64).sqrt()
    } else {
        0.0
    };
    assert!((r["stddev_ts"].as_f64().unwrap() - sd).abs() <= 1e-9 * avg, "{r}");
    let mut sorted = ts.clone();
    sorted.sort_by(f64::total_cmp);
    let median =
        if reps % 2 == 1 { sorted[reps / 2] } else { (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2.0 };
    assert!((r["median_ts"].as_f64().unwrap() - median).abs() <= 1e-9 * median, "{r}");
}

#[test]
fn json_has_one_object_per_test_with_consistent_statistics() {
    let Some(model) = smollm2() else { return };
    let out = bench(&model, &["-p", "16", "-n", "4", "-r", "2", "-t", "1", "-o", "json"]);
    let results: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 2, "{results:?}");
    check_result(&results[0], 16, 0, 2);
    check_result(&results[1], 0, 4, 2);
    let commit = results[0]["build_commit"].as_str().unwrap();
    assert!(!commit.is_empty());
}

#[test]
fn jsonl_prints_one_object_per_line() {
    let Some(model) = smollm2() else { return };
    let out = bench(
        &model,
        &[
            "-p",
            "8,0",
            "-n",
            "0",
            "-r",
            "3",
            "-t",
            "1",
            "-b",
            "3",
            "-o",
            "jsonl",
            "--no-warmup",
            "--device-name",
            "pixel 7 \"lab\"",
        ],
    );
    let text = stdout_of(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let r: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(r["n_batch"], 3);
    assert_eq!(r["device"], "pixel 7 \"lab\"");
    let mut r = r;
    r["n_batch"] = 512.into(); // check_result expects the default
    check_result(&r, 8, 0, 3);
}

#[test]
fn markdown_has_a_header_and_a_table() {
    let Some(model) = smollm2() else { return };
    let out = bench(&model, &["-p", "8", "-n", "2", "-r", "1", "-t", "1", "--cache-type-k", "f32"]);
    let text = stdout_of(&out);
    assert!(text.contains("- build: ferrolm "), "{text}");
    assert!(text.contains("- CPU: "), "{text}");
    assert!(text.contains("- device: "), "{text}");
    assert!(text.contains("- model: SmolLM2-135M-Instruct.Q4_1.gguf (llama, "), "{text}");
    assert!(text.contains("weights Q4_1 "), "{text}");
    assert!(
        text.contains("| model | size | params | backend | threads | test | t/s | median t/s |"),
        "{text}"
    );
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| llama ")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].contains("| CPU | 1 | pp8 |") && rows[0].contains(" ± "), "{}", rows[0]);
    assert!(rows[1].contains("| CPU | 1 | tg2 |"), "{}", rows[1]);
}

#[test]
fn csv_has_a_header_and_a_row_per_test() {
    let Some(model) = smollm2() else { return };
    let out = bench(&model, &["-p", "0", "-n", "2", "-r", "2", "-t", "1", "-o", "csv"]);
    let text = stdout_of(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("build_commit,build_number,cpu_info,device,backends,"), "{}", lines[0]);
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    // The row's cells are quoted; none of these hold commas.
    let cells: Vec<&str> = lines[1].split("\",\"").collect();
    assert_eq!(cells.len(), header.len(), "{}", lines[1]);
    assert_eq!(cells[col("n_gen")], "2");
    assert_eq!(cells[col("samples_ns")].split(';').count(), 2);
}

#[test]
fn bad_input_is_reported_without_a_panic() {
    assert_fails(&["-m", "/nonexistent/model.gguf", "-p", "1", "-n", "0"], "error:");
    assert_fails(&["-p", "1"], "--model");
    let Some(model) = smollm2() else { return };
    let m = model.to_str().unwrap();
    assert_fails(&["-m", m, "-t", "0"], "--threads values must be at least 1");
    assert_fails(&["-m", m, "-t", "1,x"], "invalid value 'x'");
    assert_fails(&["-m", m, "-r", "0"], "--repetitions must be at least 1");
    assert_fails(&["-m", m, "-p", "0", "-n", "0,0"], "nothing to run");
    assert_fails(&["-m", m, "-p", "4,-1"], "invalid value");
    assert_fails(&["-m", m, "-o", "yaml"], "invalid value 'yaml'");
    assert_fails(&["-m", m, "--device-name", ""], "--device-name must not be empty");
}

#[test]
fn depth_runs_every_test_after_cached_tokens() {
    let Some(model) = smollm2() else { return };
    let out = bench(&model, &["-p", "8", "-n", "2", "-d", "0,24", "-r", "1", "-t", "1", "-o", "json"]);
    let results: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let results = results.as_array().unwrap();
    let got: Vec<(u64, u64, u64)> = results
        .iter()
        .map(|r| {
            (r["n_prompt"].as_u64().unwrap(), r["n_gen"].as_u64().unwrap(), r["n_depth"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(got, vec![(8, 0, 0), (8, 0, 24), (0, 2, 0), (0, 2, 24)]);
    for r in results {
        // Tokens/s count the test's tokens, not the depth's.
        check_result(r, r["n_prompt"].as_u64().unwrap(), r["n_gen"].as_u64().unwrap(), 1);
    }
    let md = stdout_of(&bench(&model, &["-p", "8", "-n", "0", "-d", "16", "-r", "1", "-t", "1"]));
    assert!(md.contains("| CPU | 1 | pp8 @ d16 |"), "{md}");
}

#[test]
fn prompt_file_runs_text_tests_plain_and_speculative() {
    let Some(model) = smollm2() else { return };
    let file = std::env::temp_dir().join(format!("ferrolm-bench-text-{}.txt", std::process::id()));
    std::fs::write(&file, "one two three four five six seven eight nine ten. ".repeat(6)).unwrap();
    let args = ["-p", "0", "-n", "16", "-r", "1", "-t", "1", "--lookup", "-o", "json", "--prompt-file"];
    let out = bin().args(["bench", "-m"]).arg(&model).args(args).arg(&file).output().unwrap();
    std::fs::remove_file(&file).ok();
    let results: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let results = results.as_array().unwrap();
    let modes: Vec<&str> = results.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["", "text", "lookup"], "{results:?}");
    for r in results {
        check_result(r, 0, 16, 1);
    }
    let (plain, spec) = (&results[1], &results[2]);
    // The text's tokens are the cached context of both text tests.
    let depth = plain["n_depth"].as_u64().unwrap();
    assert!(depth > 50 && spec["n_depth"] == depth, "{plain} {spec}");
    assert_eq!(plain["n_drafted"], 0);
    // A text that repeats itself: prompt lookup drafts, and the model keeps drafts.
    let (drafted, kept) = (spec["n_drafted"].as_u64().unwrap(), spec["n_accepted"].as_u64().unwrap());
    assert!(drafted > 0 && kept > 0 && kept <= drafted, "{spec}");
    assert_fails(&["-m", "x.gguf", "--lookup"], "--prompt-file");
}
