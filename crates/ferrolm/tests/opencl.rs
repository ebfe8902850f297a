//! The OpenCL backend (feature `opencl`) on both test models: greedy generation for the
//! reference prompts gives the CPU's tokens on `opencl` and in the hybrid modes, and every
//! operator is within 1e-3 of the CPU (`test-backend`'s comparison).
//!
//! Runs on any OpenCL runtime; CI installs PoCL, which runs the kernels on the CPU. Without a
//! runtime the tests say so and pass, except under `CI=true`, where they fail.
//!
//! Greedy tokens are compared as [`common::parity`] says.
#![cfg(feature = "opencl")]
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::parity::{GEMMA, GEMMA_TOL, SMOL, SMOL_TOL, check, check_eviction, check_prompts, gpu_or_skip};
use ferrolm::backend::{Backend, CpuBackend, Placement};

fn opencl() -> Option<Arc<dyn Backend>> {
    gpu_or_skip(ferrolm::backend::opencl(), "an OpenCL runtime (scripts/install-opencl.sh installs PoCL)")
}

fn single() -> Placement {
    Placement::Single(ferrolm::backend::opencl().unwrap())
}

/// Prompts on OpenCL, generation on the CPU.
fn hybrid_prefill() -> Placement {
    Placement::Hybrid {
        prefill: ferrolm::backend::opencl().unwrap(),
        decode: Arc::new(CpuBackend),
        min_batch: 2,
        switch_ctx: None,
    }
}

/// Prompts and the first tokens on the CPU, then OpenCL once the context holds 40 tokens.
fn hybrid_switch() -> Placement {
    Placement::Hybrid {
        prefill: ferrolm::backend::opencl().unwrap(),
        decode: Arc::new(CpuBackend),
        min_batch: usize::MAX,
        switch_ctx: Some(40),
    }
}

#[test]
fn smollm2_opencl_matches_cpu() {
    if opencl().is_some() {
        check(SMOL.0, SMOL.1, &SMOL_TOL, single, "opencl");
    }
}

#[test]
fn gemma3_opencl_matches_cpu() {
    if opencl().is_some() {
        check(GEMMA.0, GEMMA.1, &GEMMA_TOL, single, "opencl");
    }
}

/// The hybrid modes on two prompts each (the single-backend tests above take all five): the
/// longest prompt (121 tokens, prefilled on OpenCL) and a short one for the prefill split; for
/// the switch at 40 tokens, one prompt that crosses it after 21 generated tokens and one after
/// the first.
#[test]
fn hybrid_modes_match_cpu() {
    if opencl().is_some() {
        check_prompts(SMOL.0, SMOL.1, &SMOL_TOL, hybrid_prefill, "hybrid prefill", &["story", "code"]);
        check_prompts(GEMMA.0, GEMMA.1, &GEMMA_TOL, hybrid_switch, "hybrid switch", &["code", "unicode"]);
    }
}

#[test]
fn every_operator_is_within_1e3_of_the_cpu() {
    let Some(b) = opencl() else { return };
    let reports = ferrolm::backend::compare::compare_with_cpu(b.as_ref(), 7).unwrap();
    assert!(reports.len() > 100, "only {} cases", reports.len());
    for r in &reports {
        assert!(r.max_rel_err <= 1e-3, "{} {}: {:.2e}", r.op, r.case, r.max_rel_err);
    }
}

/// Eviction on OpenCL, where the device reads the host's cache through shared memory.
#[test]
fn eviction_policies_work_on_opencl() {
    if opencl().is_some() {
        check_eviction(single, "opencl");
    }
}

/// Without an OpenCL runtime (the ICD loader pointed at an empty vendor folder, in a child
/// process since the runtime is loaded once per process), asking for the backend is a clear
/// error, not a crash.
#[test]
fn no_runtime_is_a_clear_error() {
    if std::env::var_os("FERROLM_TEST_NO_RUNTIME_CHILD").is_some() {
        let Err(err) = ferrolm::backend::opencl() else { panic!("no runtime, yet the backend opened") };
        let msg = err.to_string();
        assert!(msg.contains("no OpenCL runtime found") || msg.contains("lists no device"), "{msg}");
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "no_runtime_is_a_clear_error", "--nocapture"])
        .env("FERROLM_TEST_NO_RUNTIME_CHILD", "1")
        .env("OCL_ICD_VENDORS", empty.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {text}");
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
}

/// Last-position logits and `n` greedy tokens of `tokens` (an f16 cache, as the GPU keeps).
fn run(model: &ferrolm::model::Model, tokens: &[u32], n: usize) -> (Vec<f32>, Vec<u32>) {
    use ferrolm::batch::Batch;
    let mut kv = model.new_kv_cache_typed(128, ferrolm::kv::KvType::F16, ferrolm::kv::KvType::F16).unwrap();
    let first = model.forward(&Batch::from_prompt(0, 0, tokens), &mut kv).unwrap().last().unwrap().to_vec();
    let (mut logits, mut out) = (first.clone(), Vec::new());
    for pos in tokens.len() as u32..tokens.len() as u32 + n as u32 {
        let t = ferrolm::sampling::argmax(&logits);
        out.push(t);
        logits = model.forward(&Batch::from_prompt(0, pos, &[t]), &mut kv).unwrap().last().unwrap().to_vec();
    }
    (first, out)
}

#[test]
fn the_tiny_conformance_architectures_match_the_cpu() {
    // The tiny conformance models: experts routed on the host around GPU matmuls, Granite's
    // scale operator, layers without RoPE, gpt-oss's attention sinks, biases and SwiGLU, Gemma
    // 4's mixed head sizes, KV-shared layers, per-layer embeddings and experts beside its MLP,
    // Qwen 3.5's gated delta nets and LFM2's short convolutions (on the host, around GPU
    // matmuls) and gated attention.
    if opencl().is_none() {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conformance");
    for name in [
        "qwen2moe",
        "qwen3moe",
        "granitemoeshared",
        "smollm3",
        "gpt-oss",
        "gemma4",
        "gemma4moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
    ] {
        let path = root.join(name).join("model.gguf");
        let cpu = ferrolm::model::Model::load(&path).unwrap();
        let mut gpu = ferrolm::model::Model::load(&path).unwrap();
        gpu.set_placement(single()).unwrap();
        let exp: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join(name).join("expected.json")).unwrap())
                .unwrap();
        for p in exp["prompts"].as_array().unwrap() {
            let tokens: Vec<u32> =
                p["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
            let (a, ga) = run(&cpu, &tokens, 4);
            let (b, gb) = run(&gpu, &tokens, 4);
            let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(diff < 2e-2, "{name}: max |logit diff| {diff}");
            assert_eq!(ga, gb, "{name}: greedy tokens differ");
        }
    }
}
