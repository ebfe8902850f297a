//! End-to-end runs of `ferrolm chat`, `ferrolm embed` and constrained `ferrolm generate`.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, smollm2};

/// `(n_prompt, n_cached, n_prefilled)` from each `--stats` line.
fn stats_lines(stderr: &str) -> Vec<(usize, usize, usize)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("[prompt: "))
        .map(|l| {
            let nums: Vec<usize> = l
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            (nums[0], nums[1], nums[2])
        })
        .collect()
}

/// `ferrolm chat` greedy with `--stats`, its stdin, stdout and stderr piped.
fn spawn_chat(model: &std::path::Path, extra: &[&str]) -> std::process::Child {
    bin()
        .args(["chat", "--temp", "0", "--stats", "-t", "2"])
        .args(extra)
        .arg("-m")
        .arg(model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn chat_keeps_the_conversation_and_its_cache() {
    let Some(model) = smollm2() else { return };
    let mut child = spawn_chat(&model, &["-n", "24", "-c", "1024"]);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"What is the capital of France?\nAnd of Germany?\n/reset\nWhat is the capital of France?\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().filter(|l| !l.trim().is_empty()).count(), 3, "three replies: {stdout}");
    let s = stats_lines(&stderr);
    assert_eq!(s.len(), 3, "{stderr}");
    assert_eq!(s[0].1, 0, "the first turn has nothing cached");
    // The second turn reuses everything the first left in the cache and prefills only the new
    // turn: the end of the reply's turn, the user message and the generation prompt.
    assert_eq!(s[1].1, s[0].0 + 23, "the prompt and the first reply's 24 tokens but the last: {s:?}");
    assert!(s[1].2 < 20, "{s:?}");
    assert!(stderr.contains("(conversation reset)"));
    assert_eq!(s[2].1, 0, "after /reset nothing is cached");
    assert_eq!(s[2].0, s[0].0, "after /reset the prompt is the first one again");
    // Greedy replies to the same conversation are the same.
    let replies: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(replies.first(), replies.last(), "{stdout}");
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_the_reply_not_the_program() {
    let Some(model) = smollm2() else { return };
    let mut child = spawn_chat(&model, &["-n", "-1", "-c", "4096"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"Write a very long story about a dragon, with many chapters.\n").unwrap();
    stdin.flush().unwrap();
    // Wait until the reply is streaming, then press Ctrl-C.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(!first.is_empty());
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    // The program goes on: a second question gets an answer, then EOF ends it.
    stdin.write_all(b"What is the capital of France?\n").unwrap();
    drop(stdin);
    let t0 = Instant::now();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(120));
    assert!(stderr.contains("(stopped)"), "{stderr}");
    assert_eq!(stats_lines(&stderr).len(), 2, "{stderr}");
}

#[test]
fn embed_prints_normalised_vectors() {
    let Some(model) = smollm2() else { return };
    let out = bin()
        .args(["embed", "-p", "hello world", "-p", "good morning", "--pooling", "last", "-t", "2", "-m"])
        .arg(&model)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let data = doc["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i);
        let v: Vec<f64> = d["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(v.len(), 576, "SmolLM2-135M has 576-wide hidden states");
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "{norm}");
    }
    assert_eq!(doc["pooling"], "last");
    let bad = bin().args(["embed", "--pooling", "max", "-p", "x"]).output().unwrap();
    assert!(!bad.status.success());
}

#[test]
fn generate_with_a_json_schema_prints_valid_json() {
    let Some(model) = smollm2() else { return };
    let schema = r#"{"type":"object","properties":{"city":{"type":"string","maxLength":20},"population":{"type":"integer","minimum":0}},"required":["city","population"],"additionalProperties":false}"#;
    let out = bin()
        .args(["generate", "--no-display-prompt", "-n", "80", "-s", "3", "-t", "2", "--json-schema", schema])
        .args([
            "-p",
            "<|im_start|>user\nGive a city and its population as JSON.<|im_end|>\n<|im_start|>assistant\n",
        ])
        .arg("-m")
        .arg(&model)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert!(v["city"].is_string() && v["population"].is_u64(), "{v}");
    assert_eq!(v.as_object().unwrap().len(), 2);
    let both = bin().args(["generate", "-p", "x", "--json", "--regex", "a+"]).output().unwrap();
    assert!(!both.status.success());
}
