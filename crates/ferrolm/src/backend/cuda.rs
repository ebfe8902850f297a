//! The CUDA backend: the GPU operators of [`super::gpu`] on an NVIDIA GPU through the CUDA driver
//! API ([`cudarc`]), with the kernels compiled by NVRTC when the backend starts.
//!
//! Both libraries are loaded at run time (`libcuda.so.1` from the NVIDIA driver, `libnvrtc.so`
//! from the CUDA toolkit or the `nvidia-cuda-nvrtc` wheel, found through the library path), so a
//! binary built without any CUDA files runs on a machine that has them, and says clearly what
//! is missing on one that has not. `FERROLM_CUDA_DEVICE` picks the device by ordinal (default 0).
//!
//! Memory model: weights are uploaded once and stay on the device. During a forward pass the
//! pass's activation buffers, the model's norm weights and biases live in device mirrors
//! ([`super::gpu`]'s `resident`), so one operator's output is the next one's input without a
//! copy, and kernels are queued without waiting. Other host inputs (token ids, RoPE tables,
//! the KV rows attention reads) are staged through pinned memory and copied behind the queued
//! kernels. The KV cache stays the host's: each layer's new key and value rows are copied back
//! to it (two waits per layer), so eviction, the prefix cache and the hybrid placement work
//! unchanged. A device-resident KV cache and CUDA graphs for decode are the next steps (see
//! docs/backends.md).

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
