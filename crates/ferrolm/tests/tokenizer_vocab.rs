//! Tokenizer conformance with llama.cpp: the `ggml-vocab-*.gguf` test vectors of llama.cpp's
//! `test-tokenizer-0`, and the prompt tokens and piece bytes of real reference generations.

mod common;

use std::fs;
use std::path::Path;

use ferrolm::format::gguf::GgufFile;
use ferrolm::tokenizer::Tokenizer;

/// Splits a `.inp` file like `test-tokenizer-0` does.
fn split_inputs(raw: &str) -> Vec<&str> {
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].find(SEP) {
            Some(rel) => {
                out.push(&raw[pos..pos + rel]);
                pos += rel + SEP.len();
            }
            None => {
                out.push(&raw[pos..]);
                break;
            }
        }
    }
    out
}

fn parse_ids(line: &str) -> Vec<u32> {
    line.split_whitespace().map(|t| t.parse().unwrap_or_else(|_| panic!("bad token id {t:?}"))).collect()
}

/// Runs one vocabulary's vectors (`.inp`/`.out` next to it); returns (passed, total, failure
/// descriptions).
fn run_vocab(gguf_path: &Path) -> (usize, usize, Vec<String>) {
    run_vectors(gguf_path, &gguf_path.with_extension("gguf.inp"), &gguf_path.with_extension("gguf.out"))
}

/// [`run_vocab`] with the vectors at `inp_path` and `out_path`.
fn run_vectors(gguf_path: &Path, inp_path: &Path, out_path: &Path) -> (usize, usize, Vec<String>) {
    let raw = fs::read_to_string(inp_path).expect("read .inp");
    let expected = fs::read_to_string(out_path).expect("read .out");
    let inputs = split_inputs(&raw);
    let outputs: Vec<&str> = expected.lines().collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{}: .inp and .out disagree on the number of tests",
        gguf_path.display()
    );

    let gguf = GgufFile::open(gguf_path).expect("open vocab");
    let tok = Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{}: {e}", gguf_path.display()));
    let mut failures = Vec::new();
    let mut passed = 0;
    for (text, line) in inputs.iter().zip(&outputs) {
        let want = parse_ids(line);
        match tok.encode(text, false, false) {
            Ok(got) if got == want => passed += 1,
            Ok(got) => failures.push(format!("  {text:?}\n    want {want:?}\n    got  {got:?}")),
            Err(e) => failures.push(format!("  {text:?}: error {e}")),
        }
    }
    (passed, inputs.len(), failures)
}

#[test]
fn llama_cpp_vocab_vectors() {
    let dir = common::fixtures_dir().join("vocab");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .expect("vocab fixtures folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("ggml-vocab-")
                && name.ends_with(".gguf")
                && p.with_extension("gguf.inp").is_file()
                && p.with_extension("gguf.out").is_file()
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vocab test vectors in {}", dir.display());

    let mut all_failures = Vec::new();
    for path in &files {
        let (passed, total, failures) = run_vocab(path);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        println!("{name}: {passed}/{total} passed");
        if !failures.is_empty() {
            all_failures.push(format!(
                "{name}: {} mismatches, first ones:\n{}",
                failures.len(),
                failures[..failures.len().min(5)].join("\n")
            ));
        }
    }
    assert!(all_failures.is_empty(), "tokenizer mismatches:\n{}", all_failures.join("\n"));
}

/// Checks a real model's tokenizer against the reference generations made with llama.cpp.
/// The vectors of vocabularies too large to keep in the repository (Qwen 3.5's 5.9 MB, Gemma 4's
/// 15 MB): `scripts/fetch-test-models.sh` copies them from llama.cpp's sources (the
/// llama-cpp-python sdist) into `vocab/` of the model folder.
#[test]
fn llama_cpp_vocab_vectors_of_large_vocabularies() {
    for name in ["ggml-vocab-qwen35.gguf", "ggml-vocab-gemma-4.gguf"] {
        let Some(path) = common::require_model(&format!("vocab/{name}")) else { return };
        assert_all_pass(name, run_vocab(&path));
    }
}

/// Fails with the first mismatches unless every vector of `name` passed.
fn assert_all_pass(name: &str, (passed, total, failures): (usize, usize, Vec<String>)) {
    println!("{name}: {passed}/{total} passed");
    assert!(
        failures.is_empty(),
        "{name}: {} mismatches:\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

/// The unigram (SentencePiece UGM) vocabulary of nomic-embed-text-v2-moe (XLM-RoBERTa's 250k
/// tokens and NFKC charsmap), which llama.cpp ships without vectors: the vectors in
/// `fixtures/vocab-ugm` were made by llama.cpp itself (`scripts/gen_ugm_vectors.py`); the
/// vocabulary (6.8 MB) is copied into `vocab/` by `scripts/fetch-test-models.sh`.
#[test]
fn llama_cpp_vectors_of_a_unigram_vocabulary() {
    let name = "ggml-vocab-nomic-bert-moe.gguf";
    let Some(path) = common::require_model(&format!("vocab/{name}")) else { return };
    let dir = common::fixtures_dir().join("vocab-ugm");
    let (inp, out) = (dir.join(format!("{name}.inp")), dir.join(format!("{name}.out")));
    assert_all_pass(name, run_vectors(&path, &inp, &out));
}

fn check_reference(model_file: &str) {
    let Some(path) = common::require_model(model_file) else {
        return;
    };
    let gguf = GgufFile::open(&path).expect("open model");
    let t0 = std::time::Instant::now();
    let tok = Tokenizer::from_gguf(&gguf).expect("tokenizer");
    println!("{model_file}: tokenizer built in {:?} ({} tokens)", t0.elapsed(), tok.n_vocab());

    let stem = model_file.trim_end_matches(".gguf");
    let ref_dir = common::fixtures_dir().join("reference").join(stem);
    let prompt_dir = common::fixtures_dir().join("reference").join("prompts");
    let mut refs: Vec<_> =
        fs::read_dir(&ref_dir).expect("reference folder").filter_map(|e| e.ok().map(|e| e.path())).collect();
    refs.sort();
    assert!(!refs.is_empty());
    let mut failures = Vec::new();
    for r in refs.iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        let name = r.file_stem().and_then(|s| s.to_str()).unwrap_or("?").to_string();
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(r).expect("read json")).expect("json");
        let prompt = fs::read_to_string(prompt_dir.join(format!("{name}.txt"))).expect("prompt file");
        let want: Vec<u32> = json["prompt_tokens"]
            .as_array()
            .expect("prompt_tokens")
            .iter()
            .map(|v| v.as_u64().expect("token id") as u32)
            .collect();
        let got = tok.encode(&prompt, true, true).expect("encode");
        if got != want {
            failures.push(format!("{model_file}/{name}: prompt tokens\n  want {want:?}\n  got  {got:?}"));
        }
        let mut n_steps = 0;
        for step in json["steps"].as_array().expect("steps") {
            let id = step["token"].as_u64().expect("token") as u32;
            let bytes: Vec<u8> = step["bytes"]
                .as_array()
                .expect("bytes")
                .iter()
                .map(|b| b.as_u64().expect("byte") as u8)
                .collect();
            let piece = tok.token_to_piece(id);
            if piece != bytes {
                failures.push(format!("{model_file}/{name}: token {id} piece {piece:?}, want {bytes:?}"));
            }
            n_steps += 1;
        }
        println!("{model_file}/{name}: {} prompt tokens, {n_steps} step pieces checked", want.len());
    }
    assert!(failures.is_empty(), "reference mismatches:\n{}", failures.join("\n"));

    // Throughput on a longer text (printed, not asserted: machines differ).
    let story = fs::read_to_string(prompt_dir.join("story.txt")).expect("story prompt");
    let long = story.repeat(40);
    let t0 = std::time::Instant::now();
    let ids = tok.encode(&long, true, true).expect("encode");
    println!("{model_file}: {} bytes -> {} tokens in {:?}", long.len(), ids.len(), t0.elapsed());
    assert_eq!(tok.decode(&ids[usize::from(tok.add_bos())..]), long);
}

#[test]
fn smollm2_reference_tokens() {
    check_reference("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn gemma3_reference_tokens() {
    check_reference("gemma-3-270m-q4_k_m.gguf");
}
