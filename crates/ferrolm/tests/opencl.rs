//! The OpenCL backend (feature `opencl`) on both test models: greedy generation for the
//! reference prompts gives the CPU's tokens on `opencl` and in the hybrid modes, and every
//! operator is within 1e-3 of the CPU (`test-backend`'s comparison).
//!
//! Runs on any OpenCL runtime; CI installs PoCL, which runs the kernels on the CPU. Without a
//! runtime the tests say so and pass, except under `CI=true`, where they fail.
//!
//! Greedy tokens are compared with per-model tolerances ([`Tol`]): both backends are fed the
//! CPU's greedy tokens, the greedy token must agree at every step except near-ties of the CPU's
//! logits (best two within [`Tol::tie_gap`], where rounding legitimately decides), and the
//! top-10 logits must be close at every step.
#![cfg(feature = "opencl")]
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::Reference;
use ferrolm::backend::{Backend, CpuBackend, Placement};
use ferrolm::batch::Batch;
use ferrolm::model::Model;
use ferrolm::sampling::argmax;

/// How close the backends must be on one model. Not ulp bounds: activations are re-quantized to
/// 8 bits before every matmul, so an ulp of difference (a different summation order) now and
/// then moves a value by a quantization step, which grows through the layers.
struct Tol {
    /// Largest difference of a top-3 logit.
    top3: f32,
    /// Largest difference of the other top-10 logits.
    tail: f32,
    /// A step whose two best CPU logits are closer than this is a near-tie (either token may
    /// win), so its greedy tokens are not compared.
    tie_gap: f32,
}

/// SmolLM2: the backends stay within 0.5.
const SMOL_TOL: Tol = Tol { top3: 1.5, tail: 2.0, tie_gap: 0.5 };

/// Gemma 3 (logits spanning ~40) is far more sensitive. On the same forced decoding (all 32
/// steps of the `code`, `capital` and `gemma-chat` references) our own CPU kernel levels
/// (AVX-512, AVX2, portable) differ by up to 2.10 on a top-3 logit, and by 1.81 with the f16
/// value accumulator the attention had until 2026-11 (which made the two backends round alike:
/// they then agreed within 0.97). The backends now differ by up to 1.9; the one greedy flip seen
/// (`code`, step 23) had a CPU gap between 0.5 and 0.75.
const GEMMA_TOL: Tol = Tol { top3: 2.5, tail: 2.5, tie_gap: 0.75 };

fn opencl() -> Option<Arc<dyn Backend>> {
    match ferrolm::backend::opencl() {
        Ok(b) => Some(b),
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipping: no OpenCL backend: {e}");
            None
        }
        Err(e) => panic!("CI=true needs an OpenCL runtime (scripts/install-opencl.sh installs PoCL): {e}"),
    }
}

/// The greedy tokens and their logits' top two of the reference prompt `name` on `model`'s
/// placement, forcing `forced` tokens when given (so both backends see the same text).
fn greedy(model: &Model, prompt: &[u32], steps: usize, forced: Option<&[u32]>) -> Vec<(u32, Vec<f32>)> {
    let mut kv = model.new_kv_cache(1024);
    let mut logits =
        model.forward(&Batch::from_prompt(0, 0, prompt), &mut kv).unwrap().last().unwrap().to_vec();
    let mut out = Vec::new();
    for (i, pos) in (0..steps).zip(prompt.len() as u32..) {
        let ours = argmax(&logits);
        out.push((ours, logits.clone()));
        let next = forced.map_or(ours, |f| f[i]);
        logits =
            model.forward(&Batch::from_prompt(0, pos, &[next]), &mut kv).unwrap().last().unwrap().to_vec();
    }
    out
}

fn prompts(dir: &str) -> Vec<(String, Vec<u32>, usize)> {
    common::reference_files(dir)
        .iter()
        .map(|f| {
            let r: Reference = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            let name = f.file_stem().unwrap().to_string_lossy().to_string();
            (name, r.prompt_tokens, r.steps.len())
        })
        .collect()
}

/// Top-10 indices of `l`.
fn top10(l: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..l.len()).collect();
    idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
    idx.truncate(10);
    idx
}

/// Checks `placement`'s greedy tokens against the CPU's for every reference prompt of `dir`.
fn check(file: &str, dir: &str, tol: &Tol, placement: impl Fn() -> Placement, label: &str) {
    let Some(path) = common::require_model(file) else { return };
    let mut cpu = Model::load(&path).unwrap();
    cpu.set_placement(Placement::Single(Arc::new(CpuBackend))).unwrap();
    let mut other = Model::load(&path).unwrap();
    other.set_placement(placement()).unwrap();
    for (name, prompt, steps) in prompts(dir) {
        let want = greedy(&cpu, &prompt, steps, None);
        let forced: Vec<u32> = want.iter().map(|s| s.0).collect();
        let got = greedy(&other, &prompt, steps, Some(&forced));
        let (mut compared, mut ties, mut max_err) = (0, 0, 0f32);
        for (i, ((wt, wl), (gt, gl))) in want.iter().zip(&got).enumerate() {
            let t = top10(wl);
            for (rank, &id) in t.iter().enumerate() {
                let err = (wl[id] - gl[id]).abs();
                max_err = max_err.max(err);
                let tol = if rank < 3 { tol.top3 } else { tol.tail };
                assert!(
                    err <= tol,
                    "{label} {dir}/{name} step {i}: logit of token {id} {} vs cpu {}",
                    gl[id],
                    wl[id]
                );
            }
            if wl[t[0]] - wl[t[1]] < tol.tie_gap {
                ties += 1; // a near-tie: rounding legitimately decides
                continue;
            }
            compared += 1;
            assert_eq!(
                gt,
                wt,
                "{label} {dir}/{name} step {i}: greedy token {gt}, cpu {wt} (cpu gap {})",
                wl[t[0]] - wl[t[1]]
            );
        }
        eprintln!(
            "{label} {dir}/{name}: {compared}/{steps} steps agree, {ties} near-ties, max |logit diff| {max_err:.3}"
        );
        assert!(compared >= steps / 2, "{label} {dir}/{name}: only {compared} steps compared");
    }
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

const SMOL: (&str, &str) = ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1");
const GEMMA: (&str, &str) = ("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m");

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

#[test]
fn hybrid_modes_match_cpu() {
    if opencl().is_some() {
        check(SMOL.0, SMOL.1, &SMOL_TOL, hybrid_prefill, "hybrid prefill");
        check(GEMMA.0, GEMMA.1, &GEMMA_TOL, hybrid_switch, "hybrid switch");
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

/// Eviction prunes and compacts the KV cache on the host while the device reads it through
/// shared memory: each policy evicts the same way on both backends, and perplexity stays within
/// 5% of the CPU's (measured: 0.8–1.9% over the 96 scored tokens; the per-token logits differ
/// by the usual re-quantization noise, see [`Tol`]).
#[test]
fn eviction_policies_work_on_opencl() {
    use ferrolm::eval::{PerplexityOptions, perplexity};
    use ferrolm::kv::{CacheOptions, PolicyKind};
    if opencl().is_none() {
        return;
    }
    let Some(path) = common::require_model(SMOL.0) else { return };
    let cpu = Model::load(&path).unwrap();
    let mut gpu = Model::load(&path).unwrap();
    gpu.set_placement(single()).unwrap();
    let text = std::fs::read_to_string(common::fixtures_dir().join("reference/prompts/story.txt")).unwrap();
    let text = text.repeat(1 + 4000 / text.len().max(1));
    let tokens = cpu.tokenizer().encode(&text, false, false).unwrap();
    let base =
        PerplexityOptions { n_ctx: 128, n_batch: 32, max_windows: Some(1), ..PerplexityOptions::default() };
    for (policy, window) in [(PolicyKind::Sliding, 30), (PolicyKind::H2o, 8), (PolicyKind::SnapKv, 8)] {
        let cache = CacheOptions {
            policy,
            window,
            protected_prefix: 4,
            kv_budget: Some(40),
            ..CacheOptions::default()
        };
        let o = PerplexityOptions { cache, ..base.clone() };
        let want = perplexity(&cpu, &tokens, &o, &mut |_, _| {}).unwrap();
        let got = perplexity(&gpu, &tokens, &o, &mut |_, _| {}).unwrap();
        eprintln!(
            "{policy}: perplexity cpu {:.4} opencl {:.4}, evictions {} / {}",
            want.perplexity, got.perplexity, want.evictions.n_events, got.evictions.n_events
        );
        assert!(want.evictions.n_events > 0, "{policy}: no eviction happened");
        assert_eq!(got.evictions.n_events, want.evictions.n_events, "{policy}: evictions");
        assert_eq!(got.evictions.peak_len, want.evictions.peak_len, "{policy}: peak");
        let rel = (got.perplexity / want.perplexity - 1.0).abs();
        assert!(rel < 0.05, "{policy}: perplexity {} vs cpu {}", got.perplexity, want.perplexity);
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
