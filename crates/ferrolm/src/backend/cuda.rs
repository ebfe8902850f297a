//! The CUDA backend: the GPU operators of [`super::gpu`] on an NVIDIA GPU through the CUDA driver
//! API ([`cudarc`]), with the kernels compiled by NVRTC when the backend starts.
//!
//! Both libraries are loaded at run time (`libcuda.so.1` from the NVIDIA driver, `libnvrtc.so`
//! from the CUDA toolkit or the `nvidia-cuda-nvrtc` wheel, found through the library path), so a
//! binary built without any CUDA files runs on a machine that has them, and says clearly what
//! is missing on one that has not. `FERROLM_CUDA_DEVICE` picks the device by ordinal (default 0).
//!
//! Memory model (this first version): weights are uploaded once and stay on the device; each
//! operator uploads its activations and the KV rows it reads, runs, and downloads its output,
//! so the host-side KV cache, eviction and prefix cache work unchanged. Per-operator transfers
//! cost more than the kernels for small models: a device-resident forward pass is the next step
//! (see docs/gpu.md).

mod driver;

use std::sync::{Arc, Mutex, OnceLock};

use super::BackendResult;
use super::gpu::GpuBackend;
use driver::Cuda;
pub use driver::DeviceInfo;

/// The CUDA backend on one device.
#[allow(private_interfaces)] // its device type is an implementation detail
pub type CudaBackend = GpuBackend<Cuda>;

impl GpuBackend<Cuda> {
    /// Opens the device (`FERROLM_CUDA_DEVICE`, else 0) and compiles the kernels for it.
    pub fn new() -> BackendResult<Self> {
        Ok(GpuBackend::on(Cuda::open()?))
    }

    /// One backend per process, opened on first use (compiling the kernels once).
    pub fn shared() -> BackendResult<Arc<CudaBackend>> {
        static SHARED: OnceLock<Mutex<Option<Arc<CudaBackend>>>> = OnceLock::new();
        GpuBackend::shared_in(&SHARED, CudaBackend::new)
    }

    /// The device.
    pub fn device(&self) -> DeviceInfo {
        self.dev().info.clone()
    }
}
