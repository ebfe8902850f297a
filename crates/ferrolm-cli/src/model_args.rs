//! Options shared by the commands that load a model and run a session (`generate`, `chat`).

use anyhow::Context;
use ferrolm::backend::BackendChoice;
use ferrolm::model::{GgmlType, LoadOptions, Model};
use ferrolm::session::SessionOptions;

/// Which model, how to load it, and how big its session is.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// GGUF model file, Hugging Face model folder, Hub model (org/repo[:quant],
    /// hf://org/repo/file.gguf) or catalog name; without it the default model is used
    /// (downloaded on first use).
    #[arg(short = 'm', long)]
    pub model: Option<String>,
    /// A Hugging Face Hub repository, org/repo[:quant] (llama.cpp's flag); downloaded into the
    /// Hub cache on first use.
    #[arg(long = "hf-repo", conflicts_with = "model")]
    pub hf_repo: Option<String>,
    /// The file of --hf-repo to load, instead of choosing one by quant tag.
    #[arg(long = "hf-file", requires = "hf_repo")]
    pub hf_file: Option<String>,
    /// Quantize float weights at load (for Hugging Face folders): q8_0, q4_0, q4_k or f16.
    #[arg(long, value_parser = crate::convert::parse_load_quant)]
    pub quantize: Option<GgmlType>,
    /// Worker threads (default: one per CPU used: the performance cores, else all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Which CPUs the worker threads run on.
    #[command(flatten)]
    pub cpu: crate::cpu_args::CpuArgs,
    /// Use the weights from the memory-mapped file as stored: no repacked copies for the CPU
    /// kernels (slower prefill on AVX-512 CPUs; the resident size stays near the file's size).
    #[arg(long)]
    pub low_memory: bool,
    /// Context size in tokens (prompt + generation).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx_size: usize,
    /// Largest prompt chunk per forward pass.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch_size: usize,
    /// Storage types of the KV cache.
    #[command(flatten)]
    pub kv_types: crate::cache_args::KvTypeArgs,
    /// Eviction policy, budget and memory threshold.
    #[command(flatten)]
    pub cache: crate::cache_args::CacheArgs,
    /// Where forward passes run.
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// `--backend` and the hybrid mode's thresholds.
#[derive(clap::Args, Debug, Clone)]
pub struct BackendArgs {
    /// Compute backend: cpu, cuda (needs a build with `--features cuda`, an NVIDIA driver and
    /// NVRTC), opencl (needs a build with `--features opencl` and an OpenCL runtime), auto
    /// (CUDA, else OpenCL when it finds a GPU, else cpu) or hybrid (prompt chunks on OpenCL,
    /// generation on the CPU, over one shared KV cache).
    #[arg(long, default_value = "cpu")]
    pub backend: BackendChoice,
    /// Hybrid mode: batches of at least this many tokens run on OpenCL, smaller ones on the CPU.
    #[arg(long, default_value_t = 32)]
    pub hybrid_min_batch: usize,
    /// Hybrid mode: once a sequence holds this many tokens, its generation moves to OpenCL too.
    #[arg(long)]
    pub hybrid_switch_ctx: Option<usize>,
}

impl BackendArgs {
    /// Resolves the choice (opening the GPU device when asked for) and puts `model` on it.
    pub fn apply(&self, model: &mut Model) -> anyhow::Result<()> {
        let placement = self
            .backend
            .resolve(self.hybrid_min_batch, self.hybrid_switch_ctx)
            .with_context(|| format!("--backend {}", self.backend))?;
        model.set_placement(placement).with_context(|| format!("--backend {}", self.backend))
    }
}

impl ModelArgs {
    /// Sizes the worker pool and loads the model; returns it with its load time in milliseconds.
    pub fn load(&self) -> anyhow::Result<(Model, f64)> {
        self.load_with_path().map(|(model, ms, _)| (model, ms))
    }

    /// [`ModelArgs::load`], also returning the file or folder the model came from.
    pub fn load_with_path(&self) -> anyhow::Result<(Model, f64, std::path::PathBuf)> {
        self.prepare()?;
        let path = match &self.hf_repo {
            Some(repo) => crate::pull::resolve_hf(repo, self.hf_file.as_deref())?,
            None => crate::pull::resolve_model(self.model.as_deref())?,
        };
        let t = std::time::Instant::now();
        let model = self.load_path(&path)?;
        Ok((model, t.elapsed().as_secs_f64() * 1e3, path))
    }

    /// Checks the options and sets up the worker threads (once per process, before any load).
    pub fn prepare(&self) -> anyhow::Result<()> {
        if self.ctx_size == 0 {
            anyhow::bail!("--ctx-size must be at least 1");
        }
        if self.batch_size == 0 {
            anyhow::bail!("--batch-size must be at least 1");
        }
        self.cache.validate()?;
        self.cpu.apply(self.threads)
    }

    /// Loads the model at `path` with these options (after [`ModelArgs::prepare`]).
    pub fn load_path(&self, path: &std::path::Path) -> anyhow::Result<Model> {
        let opts =
            LoadOptions { quantize: self.quantize, low_memory: self.low_memory, ..LoadOptions::default() };
        let mut model =
            Model::load_with(path, &opts).with_context(|| format!("loading {}", path.display()))?;
        self.backend.apply(&mut model)?;
        Ok(model)
    }

    /// The model as the user named it (`-m`, or `--hf-repo` with `--hf-file`), if they did.
    pub fn name(&self) -> Option<String> {
        match (&self.hf_repo, &self.hf_file) {
            (Some(repo), Some(file)) => Some(format!("{repo}/{file}")),
            (Some(repo), None) => Some(repo.clone()),
            (None, _) => self.model.clone(),
        }
    }

    /// The session options these arguments ask for.
    pub fn session_options(&self) -> SessionOptions {
        SessionOptions {
            n_ctx: self.ctx_size,
            n_batch: self.batch_size,
            type_k: self.kv_types.k,
            type_v: self.kv_types.v,
            cache: self.cache.options(),
        }
    }
}
