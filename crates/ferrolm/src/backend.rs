//! Compute backends: the operators a transformer needs, behind one [`Backend`] trait.
//!
//! The CPU backend ([`CpuBackend`], operators in [`cpu`]) is the reference and the fast path.
//! The types the operators take (weights, shapes, parameters) are [`crate::ops`]'s, shared with
//! the model and the KV cache.
//! The GPU backends implement the same trait with one set of kernels and launch logic
//! ([`gpu`]): OpenCL (`opencl`, cargo feature `opencl`) for any OpenCL device, and CUDA (`cuda`,
//! cargo feature `cuda`) for NVIDIA GPUs, both loading their runtime libraries when they start;
//! `ferrolm test-backend` compares either with the CPU op by op ([`compare`]).
//!
//! Every operator takes and returns host memory (`[f32]` rows), so a forward pass can run each
//! batch on either backend over the same host-side KV cache ([`Placement`]). Within one pass a
//! GPU backend keeps the pass's buffers on its device between operators
//! ([`Backend::begin_pass`]): the host gets a buffer back only when it asks
//! ([`Backend::to_host`]), so a pass uploads the batch once and downloads the logits rows.

pub mod compare;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(any(feature = "opencl", feature = "cuda"))]
mod gpu;
#[cfg(feature = "opencl")]
pub mod opencl;
mod placement;
pub mod profile;

use std::fmt;
use std::sync::Arc;

use half::f16;

use crate::batch::BatchEntry;
use crate::kv::{KvCache, SeqCache, SeqId};
use crate::ops::{Activation, RopeParams, RopeStyle, Weight};
pub use crate::ops::{AttentionShape, MatmulJob};
pub use placement::{BackendChoice, Placement};

/// Errors of a compute backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The OpenCL backend was asked for but this build does not have it.
    #[error(
        "this ferrolm was built without OpenCL: rebuild with `--features opencl` to use --backend opencl"
    )]
    NotBuilt,
    /// No OpenCL runtime (ICD loader or platform) could be loaded.
    #[error(
        "no OpenCL runtime found ({0}): install an OpenCL driver or ICD (on Debian/Ubuntu: ocl-icd-libopencl1 plus a driver such as pocl-opencl-icd)"
    )]
    NoRuntime(String),
    /// The OpenCL runtime (or the CUDA driver) has no device.
    #[error("the GPU runtime lists no device")]
    NoDevice,
    /// The CUDA backend was asked for but this build does not have it.
    #[error(
        "this ferrolm was built without CUDA: rebuild with `--features cuda` (no CUDA files needed to build) to use --backend cuda"
    )]
    CudaNotBuilt,
    /// No CUDA driver could be loaded or initialised.
    #[error("no CUDA driver found ({0}): install the NVIDIA driver (libcuda.so.1)")]
    NoCudaDriver(String),
    /// NVRTC, which compiles the CUDA kernels at start, could not be loaded.
    #[error(
        "the CUDA backend compiles its kernels with NVRTC and libnvrtc.so was not found: install the CUDA toolkit (or `pip install nvidia-cuda-nvrtc`) and put its lib folder on LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    /// `FERROLM_CUDA_DEVICE` names no device.
    #[error("no CUDA device matches FERROLM_CUDA_DEVICE={0:?}")]
    CudaDeviceNotFound(String),
    /// A CUDA driver call failed.
    #[error("{what} failed: {message}")]
    Cuda {
        /// The driver call.
        what: &'static str,
        /// The driver's error.
        message: String,
    },
    /// `FERROLM_OPENCL_DEVICE` names no device.
    #[error("no OpenCL device matches FERROLM_OPENCL_DEVICE={0:?}")]
    DeviceNotFound(String),
    /// The kernels did not compile for the device.
    #[error("compiling the GPU kernels failed: {0}")]
    Compile(String),
    /// An OpenCL call failed.
    #[error("{what} failed (OpenCL error {code})")]
    Cl {
        /// The API call.
        what: &'static str,
        /// The OpenCL error code.
        code: i32,
    },
    /// A kernel's argument could not be set.
    #[error("setting argument {index} of kernel {kernel} failed (OpenCL error {code})")]
    KernelArg {
        /// The kernel.
        kernel: String,
        /// Argument index.
        index: u32,
        /// The OpenCL error code.
        code: i32,
    },
    /// A kernel could not be launched.
    #[error("launching kernel {kernel} failed (OpenCL error {code})")]
    Launch {
        /// The kernel.
        kernel: String,
        /// The OpenCL error code.
        code: i32,
    },
    /// A kernel is missing from the compiled program.
    #[error("the compiled GPU program has no kernel {0}")]
    MissingKernel(String),
    /// The backend cannot run this model or cache (a weight type, a KV cache type).
    #[error("the {backend} backend does not support {what}")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// What it lacks.
        what: String,
    },
}

/// Result of a backend operator.
pub type BackendResult<T = ()> = std::result::Result<T, BackendError>;

/// The operators of a transformer forward pass. Shapes are row-major; `n` is the number of
/// tokens (rows). Every method leaves its result in host memory.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Short name ("cpu", "opencl", "cuda").
    fn name(&self) -> &'static str;

    /// What the backend runs on, for people ("cpu", "OpenCL: <device> (<platform>)").
    fn description(&self) -> String {
        self.name().to_string()
    }

    /// Whether this backend can multiply by weights of this block type.
    fn supports_weight(&self, ty: crate::GgmlType) -> bool;

    /// Whether this backend can attend over this cache (its storage types).
    fn check_kv(&self, _kv: &KvCache) -> BackendResult {
        Ok(())
    }

    /// Makes what this backend keeps with the weights it will multiply by, once, so that no
    /// forward pass pays for it (the CPU: the row-interleaved copies its packed kernels read,
    /// see [`cpu::pack_weights`]). Called for the backends of a model's placement; returns the
    /// bytes made. Nothing by default.
    fn prepare_weights(&self, _weights: &[&Weight]) -> usize {
        0
    }

    /// Starts a forward pass whose operators may leave what they write into `scratch` in the
    /// device's memory, between operators, until [`Backend::end_pass`]; `constants` (norm
    /// weights, biases) may stay on the device across passes while their values do not change.
    /// Returns the pass's id for [`Backend::end_pass`]. During the pass the host reads a scratch
    /// range only after [`Backend::to_host`] and tells the backend of its own writes to one with
    /// [`Backend::host_wrote`]; the caller keeps the ranges alive and unmoved until the pass
    /// ends. Backends that work in host memory (the CPU) do nothing.
    fn begin_pass(
        &self,
        _scratch: &[HostRange],
        _constants: &mut dyn Iterator<Item = &[f32]>,
    ) -> BackendResult<PassId> {
        Ok(PassId(0))
    }

    /// Ends a pass begun by [`Backend::begin_pass`]: its scratch ranges are the host's again
    /// (their contents undefined until an operator writes them).
    fn end_pass(&self, _pass: PassId) {}

    /// Makes the host memory of `data` (part of a pass's scratch) hold what the operators wrote.
    fn to_host(&self, _data: &mut [f32]) -> BackendResult {
        Ok(())
    }

    /// Tells the backend that the host wrote `data` (part of a pass's scratch).
    fn host_wrote(&self, _data: &[f32]) -> BackendResult {
        Ok(())
    }

    /// `out [n, w.rows] = x [n, w.cols] · Wᵀ` on quantized or float weights.
    fn matmul(&self, w: &Weight, x: &[f32], n: usize, out: &mut [f32]) -> BackendResult;

    /// Several products of the same input (e.g. Q, K and V), each `out = x · Wᵀ`.
    fn matmul_many(&self, x: &[f32], n: usize, jobs: &mut [MatmulJob<'_>]) -> BackendResult {
        for j in jobs.iter_mut() {
            self.matmul(j.w, x, n, j.out)?;
        }
        Ok(())
    }

    /// Gathers rows `ids` of `table` (an embedding matrix), dequantized and multiplied by
    /// `scale`. `out: [ids.len(), table.cols]`
    fn gather(&self, table: &Weight, ids: &[u32], scale: f32, out: &mut [f32]) -> BackendResult;

    /// RMSNorm of each row of `x` (rows of `w.len()`), times `w`, into `out` (same shape).
    fn rms_norm(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> BackendResult;

    /// RMSNorm in place, rows of `w.len()` (also per-head norms: `w` is `[head_dim]`).
    fn rms_norm_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) -> BackendResult;

    /// The RoPE angle table of a batch: for each position, the `(cos, sin)` of the
    /// `rope_dims / 2` rotated pairs (ggml's `rope_yarn`, see [`cpu::rope_cos_sin`]), with the
    /// model's per-pair frequency `factors` if any. `out: [positions.len(), max(rope_dims / 2, 1)]`
    fn rope_cos_sin(
        &self,
        positions: &[u32],
        rope_dims: usize,
        params: &RopeParams,
        factors: Option<&[f32]>,
        out: &mut [(f32, f32)],
    ) -> BackendResult;

    /// Rotates every head of each token's row. `x: [n, heads * head_dim]`; `cos_sin:
    /// [n, rope_dims / 2]` (the first `rope_dims` of each head rotate).
    fn rope(
        &self,
        x: &mut [f32],
        n: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) -> BackendResult;

    /// Softmax of each row of `cols` values, in place.
    fn softmax(&self, x: &mut [f32], cols: usize) -> BackendResult;

    /// `gate = act(gate) * up` (SwiGLU / GeGLU); `exact`: GELU in exact f32 instead of
    /// llama.cpp's f16 table.
    fn gated_activation(&self, gate: &mut [f32], up: &[f32], act: Activation, exact: bool) -> BackendResult;

    /// `x += y`.
    fn add(&self, x: &mut [f32], y: &[f32]) -> BackendResult;

    /// Adds `bias` to each `bias.len()`-wide row of `x` (Qwen 2's QKV biases).
    fn add_bias(&self, x: &mut [f32], bias: &[f32]) -> BackendResult;

    /// `x *= s`, element-wise (Granite's residual and logit scales).
    fn scale(&self, x: &mut [f32], s: f32) -> BackendResult;

    /// `x = cap * tanh(x / cap)`, element-wise (Gemma 2's final logit soft-capping).
    fn softcap(&self, x: &mut [f32], cap: f32) -> BackendResult;

    /// Converts `src` to f16 into `dst` (same length): stores key/value rows in an f16 cache.
    fn copy_to_f16(&self, src: &[f32], dst: &mut [f16]) -> BackendResult;

    /// Causal attention of every batch entry over its sequence's cache in `layer` (see
    /// [`cpu::attention`]). `q`, `out`: `[entries.len(), n_head * head_dim]`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        shape: AttentionShape,
        entries: &[BatchEntry],
        prompt_chunks: &[(SeqId, u32)],
        kv: &KvCache,
        layer: usize,
        q: &[f32],
        out: &mut [f32],
    ) -> BackendResult;

    /// Attention statistics for the eviction policies (H2O): adds, for every query head `h` and
    /// slot `j` of `seq`, the attention probability each query puts on slot `j` in `layer` to
    /// `mass[h * seq.len() + j]` (see [`crate::kv::attention_mass`], the reference). `q`:
    /// `[qpos.len(), n_head * head_dim]` (rotated); `qpos`: the queries' logical positions.
    fn attention_mass(
        &self,
        shape: AttentionShape,
        seq: &SeqCache,
        layer: usize,
        q: &[f32],
        qpos: &[u32],
        mass: &mut [f32],
    ) -> BackendResult;
}

/// A range of host memory, by address and length (never read through by itself): what
/// [`Backend::begin_pass`] lets a backend mirror on its device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostRange {
    /// The first byte's address.
    pub addr: usize,
    /// Its length in bytes.
    pub bytes: usize,
}

impl HostRange {
    /// The memory of `data`.
    pub fn of<T: Copy>(data: &[T]) -> Self {
        HostRange { addr: data.as_ptr() as usize, bytes: std::mem::size_of_val(data) }
    }

    /// One past the last byte.
    pub fn end(&self) -> usize {
        self.addr + self.bytes
    }

    /// Whether `other` lies inside this range.
    pub fn contains(&self, other: &HostRange) -> bool {
        other.addr >= self.addr && other.end() <= self.end()
    }

    /// Whether the two ranges share a byte.
    pub fn overlaps(&self, other: &HostRange) -> bool {
        self.addr < other.end() && other.addr < self.end() && self.bytes > 0 && other.bytes > 0
    }
}

/// A forward pass begun by [`Backend::begin_pass`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassId(pub u64);

/// The CPU backend: the operators of [`cpu`] on the worker pool of [`crate::threads`].
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

thread_local! {
    /// Quantized activations of the current matmul on this thread.
    static XQ: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Element-wise operators of at least this many values run on the worker pool: below, one
/// decode step's, the synchronisation costs more than the work.
const PAR_ELEMENTWISE_MIN: usize = 4096;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn supports_weight(&self, ty: crate::GgmlType) -> bool {
        ferrolm_kernels::quant::supports(ty)
    }

    fn prepare_weights(&self, weights: &[&Weight]) -> usize {
        cpu::pack_weights(weights)
    }

    fn matmul(&self, w: &Weight, x: &[f32], n: usize, out: &mut [f32]) -> BackendResult {
        self.matmul_many(x, n, &mut [MatmulJob { w, out }])
    }

    fn matmul_many(&self, x: &[f32], n: usize, jobs: &mut [MatmulJob<'_>]) -> BackendResult {
        let pool = crate::threads::pool();
        XQ.with(|xq| cpu::matmul_many(&pool, x, n, jobs, &mut xq.borrow_mut()));
        Ok(())
    }

    fn gather(&self, table: &Weight, ids: &[u32], scale: f32, out: &mut [f32]) -> BackendResult {
        for (&id, row) in ids.iter().zip(out.chunks_exact_mut(table.cols)) {
            table.dequantize_row(id as usize, row);
            if scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        Ok(())
    }

    fn rms_norm(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> BackendResult {
        // Rows of a batch split over the threads (a row's arithmetic is the same either way),
        // in whole groups of rows normalised together; a decode batch's few groups stay on one
        // thread, where they take less than the synchronisation would.
        let n = w.len().max(1);
        let group = cpu::RMS_GROUP;
        if out.len() / n >= 4 * group && out.len() >= PAR_ELEMENTWISE_MIN {
            let pool = crate::threads::pool();
            let rows = (out.len() / n).div_ceil(2 * pool.n_threads()).next_multiple_of(group);
            crate::threads::par_chunks_mut(&pool, out, rows * n, |c, o| {
                let x = &x[c * rows * n..c * rows * n + o.len()];
                cpu::rms_norm_rows(x, w, eps, o);
            });
        } else {
            cpu::rms_norm_rows(x, w, eps, out);
        }
        Ok(())
    }

    fn rms_norm_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) -> BackendResult {
        cpu::rms_norm_inplace(x, w, eps);
        Ok(())
    }

    fn rope_cos_sin(
        &self,
        positions: &[u32],
        rope_dims: usize,
        params: &RopeParams,
        factors: Option<&[f32]>,
        out: &mut [(f32, f32)],
    ) -> BackendResult {
        cpu::rope_table(positions, rope_dims, params, factors, out);
        Ok(())
    }

    fn rope(
        &self,
        x: &mut [f32],
        n: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) -> BackendResult {
        if n == 0 {
            return Ok(());
        }
        let (width, half) = (x.len() / n, cos_sin.len() / n);
        for (row, cs) in x.chunks_exact_mut(width).zip(cos_sin.chunks_exact(half.max(1))) {
            cpu::rope_apply(row, head_dim, &cs[..half], style);
        }
        Ok(())
    }

    fn softmax(&self, x: &mut [f32], cols: usize) -> BackendResult {
        for row in x.chunks_exact_mut(cols.max(1)) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for v in row.iter_mut() {
                *v = (*v - max).exp();
                sum += *v;
            }
            row.iter_mut().for_each(|v| *v /= sum);
        }
        Ok(())
    }

    fn gated_activation(&self, gate: &mut [f32], up: &[f32], act: Activation, exact: bool) -> BackendResult {
        // Element-wise: split over the threads for a batch (a server's slots, a prompt).
        if gate.len() >= PAR_ELEMENTWISE_MIN {
            let pool = crate::threads::pool();
            let chunk = gate.len().div_ceil(2 * pool.n_threads()).next_multiple_of(16);
            crate::threads::par_chunks_mut(&pool, gate, chunk, |c, g| {
                cpu::gated_activation(g, &up[c * chunk..c * chunk + g.len()], act, exact);
            });
        } else {
            cpu::gated_activation(gate, up, act, exact);
        }
        Ok(())
    }

    fn add(&self, x: &mut [f32], y: &[f32]) -> BackendResult {
        cpu::add_inplace(x, y);
        Ok(())
    }

    fn add_bias(&self, x: &mut [f32], bias: &[f32]) -> BackendResult {
        cpu::add_bias_rows(x, bias);
        Ok(())
    }

    fn scale(&self, x: &mut [f32], s: f32) -> BackendResult {
        x.iter_mut().for_each(|v| *v *= s);
        Ok(())
    }

    fn softcap(&self, x: &mut [f32], cap: f32) -> BackendResult {
        cpu::softcap(x, cap);
        Ok(())
    }

    fn copy_to_f16(&self, src: &[f32], dst: &mut [f16]) -> BackendResult {
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src);
        Ok(())
    }

    fn attention(
        &self,
        shape: AttentionShape,
        entries: &[BatchEntry],
        prompt_chunks: &[(SeqId, u32)],
        kv: &KvCache,
        layer: usize,
        q: &[f32],
        out: &mut [f32],
    ) -> BackendResult {
        cpu::attention(shape, entries, prompt_chunks, kv, layer, q, out);
        Ok(())
    }

    fn attention_mass(
        &self,
        shape: AttentionShape,
        seq: &SeqCache,
        layer: usize,
        q: &[f32],
        qpos: &[u32],
        mass: &mut [f32],
    ) -> BackendResult {
        crate::kv::attention_mass(shape, seq, layer, q, qpos, mass);
        Ok(())
    }
}

/// The OpenCL backend on the default device, or why there is none (a build without the
/// feature, no runtime, no device, kernels that do not compile).
pub fn opencl() -> BackendResult<Arc<dyn Backend>> {
    #[cfg(feature = "opencl")]
    {
        Ok(opencl::OpenClBackend::shared()?)
    }
    #[cfg(not(feature = "opencl"))]
    {
        Err(BackendError::NotBuilt)
    }
}

/// The CUDA backend on device `FERROLM_CUDA_DEVICE` (default 0), or why there is none (a
/// build without the feature, no driver, no NVRTC, no device, kernels that do not compile).
pub fn cuda() -> BackendResult<Arc<dyn Backend>> {
    #[cfg(feature = "cuda")]
    {
        Ok(cuda::CudaBackend::shared()?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(BackendError::CudaNotBuilt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_cuda_says_how_to_get_it() {
        let msg = BackendError::CudaNotBuilt.to_string();
        assert!(msg.contains("built without CUDA") && msg.contains("--features cuda"), "{msg}");
        #[cfg(not(feature = "cuda"))]
        {
            assert!(matches!(cuda(), Err(BackendError::CudaNotBuilt)));
            assert!(matches!(BackendChoice::Cuda.resolve(32, None), Err(BackendError::CudaNotBuilt)));
        }
    }

    #[test]
    fn a_build_without_opencl_says_how_to_get_it() {
        let msg = BackendError::NotBuilt.to_string();
        assert!(msg.contains("built without OpenCL") && msg.contains("--features opencl"), "{msg}");
        #[cfg(not(feature = "opencl"))]
        {
            assert!(matches!(opencl(), Err(BackendError::NotBuilt)));
            assert!(matches!(BackendChoice::OpenCl.resolve(32, None), Err(BackendError::NotBuilt)));
            assert!(matches!(BackendChoice::Hybrid.resolve(32, None), Err(BackendError::NotBuilt)));
        }
    }
}
