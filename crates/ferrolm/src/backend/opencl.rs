//! The OpenCL backend: the [`Backend`] operators as OpenCL kernels (`kernels/*.cl`, embedded at
//! build time and compiled for the device when the backend starts).
//!
//! Every operator works on host memory shared with the device (see [`cl`]): on unified-memory
//! devices nothing is copied, and the KV cache the kernels read is the same [`KvCache`] the CPU
//! reads, prunes and compacts. One operator runs at a time (the device state is behind a mutex)
//! and returns when its results are in host memory.

mod attention;
#[cfg(test)]
mod attention_tests;
mod cl;
mod matmul;
#[cfg(test)]
mod matmul_tests;
mod ops;
#[cfg(test)]
mod ops_tests;
#[cfg(test)]
mod test_util;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use half::f16;

use super::{AttentionShape, Backend, BackendResult, cpu};
use crate::GgmlType;
use crate::batch::BatchEntry;
use crate::kv::{KvCache, SeqCache, SeqId};
use crate::ops::{Activation, RopeParams, RopeStyle, Weight};
use cl::Cl;
pub use cl::{DeviceInfo, list_devices, pick_device};

/// The OpenCL backend on one device.
#[derive(Debug)]
pub struct OpenClBackend {
    info: DeviceInfo,
    cl: Mutex<Cl>,
}

impl OpenClBackend {
    /// Opens the device [`cl::pick_device`] chooses (`FERROLM_OPENCL_DEVICE`, else the first
    /// GPU, else the first device) and compiles the kernels for it.
    pub fn new() -> BackendResult<Self> {
        let (id, info) = cl::pick_device()?;
        tracing::info!(device = %info.name, platform = %info.platform, "compiling OpenCL kernels");
        let t = std::time::Instant::now();
        let cl = Cl::new(id, info.clone())?;
        tracing::info!(ms = t.elapsed().as_millis() as u64, "OpenCL kernels ready");
        Ok(OpenClBackend { info, cl: Mutex::new(cl) })
    }

    /// One backend per process, opened on first use (compiling the kernels once).
    pub fn shared() -> BackendResult<Arc<OpenClBackend>> {
        static SHARED: OnceLock<Mutex<Option<Arc<OpenClBackend>>>> = OnceLock::new();
        let slot = SHARED.get_or_init(|| Mutex::new(None));
        let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = g.as_ref() {
            return Ok(b.clone());
        }
        let b = Arc::new(OpenClBackend::new()?);
        *g = Some(b.clone());
        Ok(b)
    }

    /// The device.
    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn cl(&self) -> MutexGuard<'_, Cl> {
        self.cl.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for OpenClBackend {
    fn name(&self) -> &'static str {
        "opencl"
    }

    fn supports_weight(&self, ty: GgmlType) -> bool {
        matmul::supports(ty)
    }

    fn description(&self) -> String {
        let i = &self.info;
        let kind = if i.is_gpu { "GPU" } else { "non-GPU device" };
        let mem = if i.unified_memory { "unified memory" } else { "own memory" };
        format!("OpenCL: {} ({}, {kind}, {mem}, {})", i.name, i.platform, i.version)
    }

    fn check_kv(&self, kv: &KvCache) -> BackendResult {
        attention::check_kv(kv)
    }

    fn matmul(&self, w: &Weight, x: &[f32], n: usize, out: &mut [f32]) -> BackendResult {
        matmul::matmul(&mut self.cl(), w, x, n, out)
    }

    fn gather(&self, table: &Weight, ids: &[u32], scale: f32, out: &mut [f32]) -> BackendResult {
        matmul::gather(&mut self.cl(), table, ids, scale, out)
    }

    fn rms_norm(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> BackendResult {
        ops::rms_norm(&mut self.cl(), x, w, eps, out)
    }

    fn rms_norm_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) -> BackendResult {
        ops::rms_norm_inplace(&mut self.cl(), x, w, eps)
    }

    fn rope_cos_sin(
        &self,
        positions: &[u32],
        rope_dims: usize,
        params: &RopeParams,
        factors: Option<&[f32]>,
        out: &mut [(f32, f32)],
    ) -> BackendResult {
        // One row per token: on the host, as the CPU computes it.
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
        ops::rope(&mut self.cl(), x, n, head_dim, cos_sin, style)
    }

    fn softmax(&self, x: &mut [f32], cols: usize) -> BackendResult {
        ops::softmax(&mut self.cl(), x, cols)
    }

    fn gated_activation(&self, gate: &mut [f32], up: &[f32], act: Activation, exact: bool) -> BackendResult {
        ops::gated_activation(&mut self.cl(), gate, up, act, exact)
    }

    fn add(&self, x: &mut [f32], y: &[f32]) -> BackendResult {
        ops::add(&mut self.cl(), x, y)
    }

    fn add_bias(&self, x: &mut [f32], bias: &[f32]) -> BackendResult {
        // Rare (Qwen 2's QKV biases) and small: on the host, as the CPU computes it.
        cpu::add_bias_rows(x, bias);
        Ok(())
    }

    fn softcap(&self, x: &mut [f32], cap: f32) -> BackendResult {
        // Rare (Gemma 2's final logits): on the host, as the CPU computes it.
        cpu::softcap(x, cap);
        Ok(())
    }

    fn copy_to_f16(&self, src: &[f32], dst: &mut [f16]) -> BackendResult {
        ops::copy_to_f16(&mut self.cl(), src, dst)
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
        attention::attention(&mut self.cl(), shape, entries, prompt_chunks, kv, layer, q, out)
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
        // Only for H2O: on the host over the shared cache, with the CPU's reference.
        crate::kv::attention_mass(shape, seq, layer, q, qpos, mass);
        Ok(())
    }
}
