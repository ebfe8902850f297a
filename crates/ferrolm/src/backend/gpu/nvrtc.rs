//! The kernels as CUDA C++ for NVRTC: the OpenCL C sources behind `kernels/cuda_prelude.h`,
//! compiled to PTX for a compute capability. NVRTC needs no GPU, so the tests compile the
//! kernels wherever `libnvrtc.so` is on the library path (CI installs the `nvidia-cuda-nvrtc`
//! wheel's: scripts/install-nvrtc.sh).

use cudarc::nvrtc::{CompileError, CompileOptions, compile_ptx_with_opts};

use super::SOURCES;
use crate::backend::{BackendError, BackendResult};

/// The prelude that makes the OpenCL C kernels CUDA C++.
const PRELUDE: &str = include_str!("kernels/cuda_prelude.h");

/// The full source NVRTC compiles: the prelude, then the kernels.
pub(crate) fn cuda_source() -> String {
    let mut s = String::from(PRELUDE);
    for f in SOURCES {
        s.push('\n');
        s.push_str(f);
    }
    s
}

/// NVRTC options: no contraction into FMAs (the kernels' FP_CONTRACT OFF), IEEE division and
/// square root, plain functions as device functions, PTX for the device's architecture.
pub(crate) fn compile_options(cc: (i32, i32)) -> CompileOptions {
    CompileOptions {
        fmad: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        ftz: Some(false),
        options: vec![
            "--device-as-default-execution-space".into(),
            format!("--gpu-architecture=compute_{}{}", cc.0, cc.1),
        ],
        ..Default::default()
    }
}

/// Compiles the kernels to PTX for compute capability `cc`.
pub(crate) fn compile(cc: (i32, i32)) -> BackendResult<String> {
    check_nvrtc()?;
    compile_ptx_with_opts(cuda_source(), compile_options(cc)).map(|p| p.to_src()).map_err(|e| match e {
        CompileError::CompileError { log, .. } => BackendError::Compile(log.to_string_lossy().into_owned()),
        e => BackendError::Compile(e.to_string()),
    })
}

/// An error unless NVRTC can be loaded.
pub(crate) fn check_nvrtc() -> BackendResult {
    // SAFETY: only tries to open the library (dlopen); nothing is called.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } { Ok(()) } else { Err(BackendError::NoNvrtc) }
}

/// The names of the kernels in the sources (`__kernel void NAME(` and the gather and matmul
/// macros' uses).
pub(crate) fn kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for src in SOURCES {
        // Lines of a macro's body (ending in `\`) define no kernel of their own.
        for line in src.lines().filter(|l| !l.trim_end().ends_with('\\')) {
            let l = line.trim_start();
            if let Some(rest) = l.strip_prefix("__kernel void ")
                && let Some(name) = rest.split('(').next()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.is_empty()
            {
                names.push(name.to_string());
            } else if let Some(rest) = l.strip_prefix("Q_GATHER(")
                && let Some(name) = rest.split(',').next()
            {
                names.push(name.trim().to_string());
            } else if let Some(rest) = l.strip_prefix("MM_KERNELS(")
                && let Some(name) = rest.split(',').next()
            {
                names.push(format!("mm_{}", name.trim()));
                names.push(format!("mmt_{}", name.trim()));
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_the_host_launches_is_found_in_the_sources() {
        let names = kernel_names();
        for k in [
            "q_act_q8_0",
            "q_act_q8_1",
            "q_act_q8_k",
            "mm_q4_0",
            "mmt_q4_0",
            "mm_q6_k",
            "mmt_q6_k",
            "mmt_bf16",
            "op_add_bias",
            "op_scale",
            "op_zero",
            "mm_f16",
            "mm_bf16",
            "q_get_q4_k",
            "q_get_f32",
            "op_rms_norm",
            "op_rope",
            "op_softmax",
            "op_gated",
            "op_add",
            "op_to_f16",
            "attn_partial",
            "attn_merge",
        ] {
            assert!(names.iter().any(|n| n == k), "{k} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n == "NAME"), "the macro's own parameter is not a kernel");
    }

    /// NVRTC needs no GPU: the kernels must compile as CUDA wherever it is installed, for the
    /// oldest architecture NVRTC 13 targets and for Hopper. Under `CI=true` it must be there.
    #[test]
    fn the_kernels_compile_with_nvrtc() {
        if let Err(e) = check_nvrtc() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true needs libnvrtc (scripts/install-nvrtc.sh): {e}"
            );
            eprintln!("skipping: {e}");
            return;
        }
        for cc in [(7, 5), (9, 0)] {
            let ptx = compile(cc).unwrap_or_else(|e| panic!("compute {cc:?}: {e}"));
            for k in kernel_names() {
                assert!(ptx.contains(&format!(".entry {k}(")), "{k} missing from the PTX for {cc:?}");
            }
        }
    }
}
