//! Which backend runs each forward pass: one backend, or a hybrid that moves a running
//! generation between two of them.
//!
//! Both backends read and write the same host-shared KV cache, so moving costs nothing: a
//! prompt can be prefilled on the GPU and its tokens generated on the CPU (the split that suits
//! a phone, where the GPU is strong at matrix-matrix work and the CPU at the memory-bound
//! decode), and a generation can change backend when its context crosses a threshold.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::{Backend, BackendError, BackendResult, CpuBackend};
use crate::batch::Batch;
use crate::kv::KvCache;

/// Where forward passes run.
#[derive(Clone)]
pub enum Placement {
    /// Every pass on one backend.
    Single(Arc<dyn Backend>),
    /// Passes split between two backends by the size of the batch and the length of the context.
    Hybrid {
        /// Runs batches of at least `min_batch` tokens (prompt chunks).
        prefill: Arc<dyn Backend>,
        /// Runs smaller batches (decode steps)...
        decode: Arc<dyn Backend>,
        /// Smallest batch that goes to `prefill`.
        min_batch: usize,
        /// ...until a sequence of the batch holds this many tokens: from then on its decode
        /// steps run on `prefill` too.
        switch_ctx: Option<usize>,
    },
}

impl Default for Placement {
    fn default() -> Self {
        Placement::Single(Arc::new(CpuBackend))
    }
}

impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Single(b) => write!(f, "{}", b.name()),
            Placement::Hybrid { prefill, decode, min_batch, switch_ctx } => {
                write!(
                    f,
                    "hybrid(prefill {} for batches >= {min_batch}, decode {}",
                    prefill.name(),
                    decode.name()
                )?;
                if let Some(c) = switch_ctx {
                    write!(f, ", {} from {c} tokens", prefill.name())?;
                }
                write!(f, ")")
            }
        }
    }
}

impl Placement {
    /// The backend that runs `batch` over `kv`.
    pub fn backend_for(&self, batch: &Batch, kv: &KvCache) -> &dyn Backend {
        match self {
            Placement::Single(b) => b.as_ref(),
            Placement::Hybrid { prefill, decode, min_batch, switch_ctx } => {
                let n = batch.entries().len();
                let long = switch_ctx.is_some_and(|c| {
                    batch.entries().iter().any(|e| kv.seq(e.seq).is_some_and(|s| s.len() >= c))
                });
                if n >= *min_batch || long { prefill.as_ref() } else { decode.as_ref() }
            }
        }
    }

    /// Every backend in use (one or two).
    pub fn backends(&self) -> Vec<&dyn Backend> {
        match self {
            Placement::Single(b) => vec![b.as_ref()],
            Placement::Hybrid { prefill, decode, .. } => vec![prefill.as_ref(), decode.as_ref()],
        }
    }

    /// A short description ("cpu", "opencl", "hybrid(...)").
    pub fn describe(&self) -> String {
        format!("{self:?}")
    }
}

/// The `--backend` choice of the command line, resolved into a [`Placement`] by
/// [`BackendChoice::resolve`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// The CPU.
    #[default]
    Cpu,
    /// OpenCL (an error when the build or the machine has none).
    OpenCl,
    /// CUDA (an error when the build or the machine has none).
    Cuda,
    /// A GPU when there is one (CUDA first, then an OpenCL GPU), else the CPU.
    Auto,
    /// Prompt chunks on OpenCL, decode steps on the CPU.
    Hybrid,
}

impl FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Self::Cpu),
            "opencl" | "gpu" => Ok(Self::OpenCl),
            "cuda" => Ok(Self::Cuda),
            "auto" => Ok(Self::Auto),
            "hybrid" => Ok(Self::Hybrid),
            _ => Err(format!("unknown backend '{s}' (use cpu, opencl, cuda, auto or hybrid)")),
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::OpenCl => "opencl",
            Self::Cuda => "cuda",
            Self::Auto => "auto",
            Self::Hybrid => "hybrid",
        })
    }
}

impl BackendChoice {
    /// The placement this choice means. `min_batch` and `switch_ctx` configure the hybrid.
    /// `Auto` takes CUDA when it starts, else OpenCL only for a GPU device (a CPU OpenCL device
    /// such as PoCL is slower than the CPU backend), and falls back to the CPU with a log line
    /// otherwise.
    pub fn resolve(self, min_batch: usize, switch_ctx: Option<usize>) -> BackendResult<Placement> {
        match self {
            Self::Cpu => Ok(Placement::default()),
            Self::OpenCl => Ok(Placement::Single(super::opencl()?)),
            Self::Cuda => Ok(Placement::Single(super::cuda()?)),
            Self::Hybrid => Ok(Placement::Hybrid {
                prefill: super::opencl()?,
                decode: Arc::new(CpuBackend),
                min_batch: min_batch.max(1),
                switch_ctx,
            }),
            Self::Auto => match super::cuda().or_else(|e| {
                tracing::debug!(reason = %e, "backend auto: no CUDA");
                auto_gpu()
            }) {
                Ok(b) => Ok(Placement::Single(b)),
                Err(e) => {
                    tracing::info!(reason = %e, "backend auto: using the CPU");
                    Ok(Placement::default())
                }
            },
        }
    }
}

/// The OpenCL backend when its device is a GPU.
fn auto_gpu() -> BackendResult<Arc<dyn Backend>> {
    #[cfg(feature = "opencl")]
    {
        let (_, info) = super::opencl::pick_device()?;
        if !info.is_gpu {
            return Err(BackendError::Unsupported {
                backend: "auto",
                what: format!("the OpenCL device '{}', which is not a GPU", info.name),
            });
        }
        super::opencl()
    }
    #[cfg(not(feature = "opencl"))]
    {
        Err(BackendError::NotBuilt)
    }
}
