//! The CUDA backend (feature `cuda`) on both test models: every operator is within 1e-3 of the
//! CPU (`test-backend`'s comparison), greedy generation for the reference prompts gives the
//! CPU's tokens (as [`common::parity`] compares them), and eviction works over the host cache.
//!
//! Needs an NVIDIA GPU, its driver and NVRTC (scripts/gpu/device-check.sh runs these on one).
//! Without them the tests say so and pass, except under `CI=true`, where they fail; the error
//! itself is checked to say what is missing.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::parity::{GEMMA, GEMMA_TOL, SMOL, SMOL_TOL, check, check_eviction, gpu_or_skip};
use ferrolm::backend::{Backend, BackendError, Placement};

fn cuda() -> Option<Arc<dyn Backend>> {
    gpu_or_skip(ferrolm::backend::cuda(), "an NVIDIA GPU, its driver and NVRTC with the cuda feature")
}

fn single() -> Placement {
    Placement::Single(ferrolm::backend::cuda().unwrap())
}

#[test]
fn a_missing_driver_or_nvrtc_is_a_clear_error() {
    match ferrolm::backend::cuda() {
        Ok(b) => eprintln!("CUDA is here: {}", b.description()),
        Err(e @ (BackendError::NoCudaDriver(_) | BackendError::NoNvrtc | BackendError::NoDevice)) => {
            let msg = e.to_string();
            assert!(msg.contains("libcuda") || msg.contains("NVRTC") || msg.contains("no device"), "{msg}");
        }
        Err(e) => panic!("CUDA failed for another reason than a missing driver: {e}"),
    }
}

#[test]
fn every_operator_is_within_1e3_of_the_cpu() {
    let Some(b) = cuda() else { return };
    let reports = ferrolm::backend::compare::compare_with_cpu(b.as_ref(), 7).unwrap();
    assert!(reports.len() > 100, "only {} cases", reports.len());
    for r in &reports {
        assert!(r.max_rel_err <= 1e-3, "{} {}: {:.2e}", r.op, r.case, r.max_rel_err);
    }
}

#[test]
fn smollm2_cuda_matches_cpu() {
    if cuda().is_some() {
        check(SMOL.0, SMOL.1, &SMOL_TOL, single, "cuda");
    }
}

#[test]
fn gemma3_cuda_matches_cpu() {
    if cuda().is_some() {
        check(GEMMA.0, GEMMA.1, &GEMMA_TOL, single, "cuda");
    }
}

#[test]
fn eviction_policies_work_on_cuda() {
    if cuda().is_some() {
        check_eviction(single, "cuda");
    }
}
