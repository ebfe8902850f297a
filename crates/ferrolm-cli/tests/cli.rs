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

/// Runs `ferrolm ARGS` and returns (success, stderr).
fn run(args: &[&str], model: Option<&std::path::Path>) -> (bool, String) {
    let mut cmd = bin();
    cmd.args(args);
    if let Some(m) = model {
        cmd.arg("-m").arg(m);
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn chat_without_a_template_names_the_cli_flag() {
    let Some(model) = smollm2() else { return };
    let gguf = ferrolm::format::gguf::GgufFile::open(&model).unwrap();
    let mut w = ferrolm::format::gguf_write::GgufWriter::from_file(&gguf).unwrap();
    assert!(w.remove("tokenizer.chat_template").is_some(), "SmolLM2 has a chat template");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-template.gguf");
    w.write(&path).unwrap();
    let (ok, stderr) = run(&["chat", "-t", "1"], Some(&path));
    assert!(!ok);
    assert!(stderr.contains("--chat-template-file") && !stderr.contains("with_template"), "{stderr}");
}

#[test]
fn generate_says_when_the_context_filled() {
    let Some(model) = smollm2() else { return };
    let base = ["generate", "-p", "Once upon a time", "--temp", "0", "--ignore-eos", "-t", "2"];
    let (ok, stderr) = run(&[&base[..], &["-c", "32", "-n", "64"]].concat(), Some(&model));
    assert!(ok, "{stderr}");
    assert!(stderr.contains("stopped: the context of 32 tokens is full"), "{stderr}");
    let (ok, stderr) = run(&[&base[..], &["-c", "32", "-n", "3"]].concat(), Some(&model));
    assert!(ok, "{stderr}");
    assert!(stderr.contains("generated 3 tokens, stopped by length (-n)"), "{stderr}");
}

#[test]
fn memory_threshold_needs_an_eviction_policy() {
    let m = ["-m", "/nonexistent/model.gguf"];
    for cmd in
        [&["generate", "-p", "hi"][..], &["chat"], &["serve"], &["perplexity", "-f", "x.txt"], &["bench"]]
    {
        let (ok, stderr) = run(&[cmd, &m, &["--memory-threshold-mb", "512"]].concat(), None);
        assert!(!ok, "{cmd:?}");
        assert!(stderr.contains("--memory-threshold-mb 512 needs an eviction policy"), "{cmd:?}: {stderr}");
    }
    // With a policy the option is accepted (the error is then the missing file).
    let (ok, stderr) = run(
        &[
            "generate",
            "-p",
            "hi",
            "--memory-threshold-mb",
            "512",
            "--eviction-policy",
            "sliding",
            "-m",
            "/nonexistent/model.gguf",
        ],
        None,
    );
    assert!(!ok && !stderr.contains("needs an eviction policy"), "{stderr}");
}

#[test]
fn quantizing_an_already_quantized_model_is_an_error() {
    let Some(model) = smollm2() else { return };
    let (ok, stderr) =
        run(&["generate", "-p", "hi", "-n", "1", "--quantize", "q8_0", "-t", "2"], Some(&model));
    assert!(!ok);
    assert!(
        stderr.contains("already quantized") && stderr.contains("load it without quantizing"),
        "{stderr}"
    );
}

#[test]
fn perplexity_help_says_what_stride_0_means() {
    let out = bin().args(["perplexity", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("half the context") && !help.contains("[default: 0]"), "{help}");
}

#[test]
fn logs_have_no_colours_when_stderr_is_piped() {
    let Some(model) = smollm2() else { return };
    let out = bin()
        .env("FERROLM_LOG", "info")
        .env_remove("NO_COLOR")
        .args(["generate", "-p", "hi", "-n", "1", "-t", "1", "-m"])
        .arg(&model)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("model loaded"), "{stderr}");
    assert!(!stderr.contains("\x1b["), "{stderr:?}");
}

/// A constraint that cannot be used is an error naming its flag, before the prompt is echoed or
/// anything generated (three runs that load the model and stop: about a second).
#[test]
fn generate_reports_unusable_constraints_before_generating() {
    let Some(model) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let lark = dir.path().join("loop.lark");
    std::fs::write(&lark, "start: start\n").unwrap();
    let cases: [(&str, &std::ffi::OsStr); 3] = [
        ("--json-schema", r##"{"$ref": "#"}"##.as_ref()),
        ("--lark-file", lark.as_os_str()),
        ("--regex", "a{1000000000}".as_ref()),
    ];
    for (flag, value) in cases {
        let out = bin()
            .args(["generate", "-p", "PROMPT-TEXT", "-n", "4", "-t", "1", "-m"])
            .arg(&model)
            .arg(flag)
            .arg(value)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{flag} cannot be used"))
                && stderr.contains("invalid constraint")
                && !stderr.contains("panicked"),
            "{flag}: {stderr}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("PROMPT-TEXT"), "{flag}: echoed the prompt");
    }
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

/// `generate --lookup` prints plain decoding's text and reports its drafts; two drafters at
/// once is an error.
#[test]
fn generate_with_prompt_lookup_prints_the_plain_text() {
    let Some(model) = smollm2() else { return };
    let prompt = "One, two, three, four. One, two, three, four. One, two, three, four. One,";
    let run = |extra: &[&str]| {
        let out = bin()
            .args(["generate", "-m"])
            .arg(&model)
            .args(["-p", prompt, "-n", "24", "--temp", "0", "-t", "2"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let (plain, plain_err) = run(&[]);
    let (fast, fast_err) = run(&["--lookup", "--draft-max", "6"]);
    assert_eq!(fast, plain);
    assert!(!plain_err.contains("speculative"), "{plain_err}");
    let line =
        fast_err.lines().find(|l| l.starts_with("speculative")).unwrap_or_else(|| panic!("{fast_err}"));
    assert!(line.contains("tokens drafted") && !line.contains(" 0 kept"), "{line}");
    let both = bin()
        .args(["generate", "-m"])
        .arg(&model)
        .args(["-p", "hi", "--lookup", "--model-draft"])
        .arg(&model)
        .output()
        .unwrap();
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("--lookup"));
}

/// `perplexity --scoring chunks` prints llama-perplexity's lines; a stride with chunks is refused.
#[test]
fn perplexity_chunks_print_the_llama_perplexity_lines() {
    let Some(model) = smollm2() else { return };
    let text = fixtures().join("ppl_text.txt");
    let out = bin()
        .args(["perplexity", "-m"])
        .arg(&model)
        .arg("-f")
        .arg(&text)
        .args(["-c", "128", "-b", "128", "-t", "2", "--scoring", "chunks", "--chunks", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("[1]") && stdout.contains(",[2]"), "{stdout}");
    assert!(
        stdout.contains("Final estimate: PPL = ") && stdout.contains("(2 chunks of 128, 126 tokens scored)"),
        "{stdout}"
    );
    let bad = bin()
        .args(["perplexity", "-m"])
        .arg(&model)
        .arg("-f")
        .arg(&text)
        .args(["-c", "128", "--scoring", "chunks", "--stride", "32"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--stride"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn cpu_mask_and_range_choose_the_worker_cpus() {
    let Some(model) = smollm2() else { return };
    let run = |flags: &[&str]| {
        bin()
            .env("FERROLM_LOG", "ferrolm=info")
            .args(["generate", "-p", "Hi", "-n", "2", "--temp", "0", "-m"])
            .arg(&model)
            .args(flags)
            .output()
            .unwrap()
    };
    // CPU 0 exists everywhere: the log names the set and the threads.
    for flags in [["--cpu-mask", "0x1"], ["--cpu-range", "0-0"]] {
        let out = run(&flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("worker threads restricted to CPUs cpus=0 threads=1"), "{stderr}");
    }
    // Bad sets are clear errors, not panics.
    for (flags, msg) in [
        (["--cpu-mask", "0xZ"], "bad CPU mask"),
        (["--cpu-range", "3-1"], "bad CPU list"),
        (["--cpu-mask", "0x8000000000000000000000000000"], "cannot run on CPUs"),
    ] {
        let out = run(&flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(msg) && !stderr.contains("panicked"),
            "{flags:?}: {stderr}"
        );
    }
    let out = run(&["--cpu-mask", "0x1", "--cpu-range", "0"]);
    assert!(!out.status.success(), "the two flags conflict");
}

/// `serve --reranking` (llama-server's flag) starts only on a model that reranks.
#[test]
fn serve_reranking_refuses_a_model_that_cannot_rerank() {
    let Some(model) = smollm2() else { return };
    let (ok, stderr) = run(&["serve", "--reranking", "--port", "0", "-t", "1"], Some(&model));
    assert!(!ok);
    assert!(stderr.contains("--reranking") && stderr.contains("is not a reranking model"), "{stderr}");
    // A cross-encoder passes the check: the server starts (and is stopped here).
    let reranker = fixtures().join("rerank/bert-cross/model.gguf");
    let mut cmd = bin();
    cmd.args(["serve", "--reranking", "--port", "0", "-t", "1", "-m"]).arg(&reranker);
    let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let mut seen = String::new();
    while std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0 {
        seen.push_str(&line);
        if line.contains("serving it as") {
            break;
        }
        line.clear();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.contains("serving it as"), "{seen}");
}
