//! Helpers for the GPU operators' unit tests, which run them on the OpenCL backend (PoCL in CI;
//! the CUDA backend runs `compare`'s checks of the same operators on a GPU: tests/cuda.rs).

use crate::backend::opencl::OpenClBackend;
use std::sync::Arc;

/// The shared backend, or `None` (with a note) when no OpenCL runtime is installed. Under
/// `CI=true` a missing runtime fails the test instead: CI installs PoCL.
pub(crate) fn backend() -> Option<Arc<OpenClBackend>> {
    match OpenClBackend::shared() {
        Ok(b) => Some(b),
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipping: no OpenCL backend: {e}");
            None
        }
        Err(e) => panic!("CI=true needs an OpenCL runtime (PoCL): {e}"),
    }
}

/// Deterministic pseudo-random f32 values in [-1, 1).
pub(crate) fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `max |a - b| / max |b|` (0 when `b` is all zeros and `a == b`).
pub(crate) fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}
