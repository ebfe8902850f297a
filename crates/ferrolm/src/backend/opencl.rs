//! The OpenCL backend: the GPU operators of [`super::gpu`] on any OpenCL device, with the
//! kernels compiled for the device when the backend starts.
//!
//! Every operator works on host memory shared with the device (see [`cl`]): on unified-memory
//! devices nothing is copied, and the KV cache the kernels read is the same [`KvCache`] the CPU
//! reads, prunes and compacts. One operator runs at a time (the device state is behind a mutex)
//! and returns when its results are in host memory.
//!
//! [`KvCache`]: crate::kv::KvCache

mod cl;

use std::sync::{Arc, Mutex, OnceLock};

use super::BackendResult;
use super::gpu::GpuBackend;
use cl::Cl;
pub use cl::{DeviceInfo, list_devices, pick_device};

/// The OpenCL backend on one device.
#[allow(private_interfaces)] // its device type is an implementation detail
pub type OpenClBackend = GpuBackend<Cl>;

impl GpuBackend<Cl> {
    /// Opens the device [`cl::pick_device`] chooses (`FERROLM_OPENCL_DEVICE`, else the first
    /// GPU, else the first device) and compiles the kernels for it.
    pub fn new() -> BackendResult<Self> {
        let (id, info) = cl::pick_device()?;
        tracing::info!(device = %info.name, platform = %info.platform, "compiling OpenCL kernels");
        let t = std::time::Instant::now();
        let cl = Cl::new(id, info)?;
        tracing::info!(ms = t.elapsed().as_millis() as u64, "OpenCL kernels ready");
        Ok(GpuBackend::on(cl))
    }

    /// One backend per process, opened on first use (compiling the kernels once).
    pub fn shared() -> BackendResult<Arc<OpenClBackend>> {
        static SHARED: OnceLock<Mutex<Option<Arc<OpenClBackend>>>> = OnceLock::new();
        GpuBackend::shared_in(&SHARED, OpenClBackend::new)
    }

    /// The device.
    pub fn device(&self) -> DeviceInfo {
        self.dev().info.clone()
    }
}
