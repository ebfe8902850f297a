//! Models: configuration, weights and the forward pass.

pub mod config;
pub mod convert;
mod delta_net;
mod embed;
mod encoder;
mod forward;
pub mod hf;
mod moe;
pub mod quantize;
mod recurrent;
mod rerank;
mod short_conv;
mod split;
pub mod tensors;
pub mod weights;

use std::path::Path;
use std::sync::{Arc, OnceLock};

pub use config::{Activation, Arch, Gating, ModelConfig, MoeConfig, QkNorm, RopeParams, RopeStyle};
pub use embed::{Pooling, normalize_embeddings};
pub use ferrolm_kernels::GgmlType;
pub use rerank::{Relevance, ranking};
pub use tensors::{TensorMap, TensorRef};

use crate::backend::Placement;
use crate::constrain::TokenEnv;
use crate::format::gguf::GgufFile;
use crate::kv::{KvCache, KvType};
use crate::ops::AttentionShape;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use weights::ModelWeights;

/// How to load a model.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Quantize float weight matrices (F32/F16/BF16, e.g. from a Hugging Face folder) to this
    /// block format at load: Q8_0, Q4_0, Q4_K or F16. Rows that do not fit the format's blocks
    /// fall back to a nearby one (see [`quantize::effective_type`]).
    pub quantize: Option<GgmlType>,
    /// Compute in exact f32 where llama.cpp rounds for speed (GELU through an f16 table). Use it
    /// with an F32 KV cache to compare against PyTorch's float32 reference.
    pub exact_f32: bool,
    /// Use the weights as stored in the memory-mapped file: no backend makes a copy in another
    /// layout (the CPU's repacked rows), so the resident size stays near the file's size plus
    /// the KV cache and buffers; prefill is slower where repacked kernels exist (AVX-512).
    pub low_memory: bool,
}

/// A loaded model: immutable and shareable across threads (wrap it in an [`Arc`]).
pub struct Model {
    config: ModelConfig,
    weights: ModelWeights,
    tokenizer: Tokenizer,
    gguf: Arc<GgufFile>,
    tensors: TensorMap,
    exact_f32: bool,
    /// The vocabulary prepared for constrained output, built on first use.
    token_env: OnceLock<Arc<TokenEnv>>,
    /// Forward-pass buffers kept between passes (one per concurrent pass).
    workspaces: std::sync::Mutex<Vec<forward::Workspace>>,
    /// Which backend runs each forward pass.
    placement: Placement,
    /// Set once the placement's backends have prepared the weights they multiply by (see
    /// [`Model::prepare_weights`]).
    weights_prepared: OnceLock<()>,
    /// Declared last, so dropped last: see [`ReleaseOnDrop`].
    _release: ReleaseOnDrop,
}

/// Hands the allocator's free pages back to the system when dropped. A model owns hundreds of
/// MiB of heap (repacked weights, forward-pass buffers), allocated by whichever threads loaded and
/// ran it; glibc keeps freed memory in those threads' arenas, so without this, loading and
/// dropping models from several threads (an Elixir or Python process reloading models) leaves
/// the resident size growing.
#[derive(Debug, Default)]
struct ReleaseOnDrop;

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        crate::sysmem::release_free_memory();
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Model {
    /// Loads a GGUF model file (the first shard of a split model) or a Hugging Face model folder
    /// (memory-mapped; weights used as stored are not copied).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_with(path, &LoadOptions::default())
    }

    /// Loads a model with options (quantize at load, exact f32 numerics).
    pub fn load_with(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        let path = path.as_ref();
        let t0 = std::time::Instant::now();
        let (gguf, tensors, tokenizer, rope_override) = if path.is_dir() {
            let hf = hf::HfModel::open(path)?;
            (hf.metadata, hf.tensors, hf.tokenizer, Some(RopeStyle::Neox))
        } else {
            let gguf = GgufFile::open(path)?;
            let tensors = split::load_tensors(&gguf, path)?;
            let tokenizer = Tokenizer::from_gguf(&gguf)?;
            (gguf, tensors, tokenizer, None)
        };
        let tensors = match opts.quantize {
            Some(ty) => {
                if !quantize::LOAD_QUANT_TYPES.contains(&ty) {
                    return Err(Error::Config(format!(
                        "cannot quantize to {} at load (choose q8_0, q4_0, q4_k or f16)",
                        ty.name()
                    )));
                }
                let t1 = std::time::Instant::now();
                let (q, summary) = quantize::quantize_tensors_summarized(&tensors, ty)?;
                if summary.n_written() == 0 {
                    return Err(Error::Config(format!(
                        "cannot quantize to {}: none of the {} weight matrices is stored as floats \
                         (the model is already quantized); load it without quantizing",
                        ty.name(),
                        summary.n_kept
                    )));
                }
                if summary.n_kept > 0 || summary.n_fallback > 0 {
                    tracing::warn!("quantizing to {}: {}", ty.name(), summary.describe());
                }
                tracing::info!(to = ty.name(), ms = t1.elapsed().as_millis() as u64, "weights quantized");
                q
            }
            None => tensors,
        };
        let mut config = ModelConfig::from_gguf(&gguf, &tensors)?;
        if let Some(style) = rope_override {
            // Hugging Face checkpoints keep Q/K rows in the order that pairs dimension i with
            // i + d/2; GGUF llama files are permuted for adjacent pairs instead.
            config.rope_style = style;
        }
        let weights = ModelWeights::from_tensors(&tensors, &config)?;
        if opts.low_memory {
            weights.matmul_weights().iter().for_each(|w| w.keep_as_stored());
        }
        tracing::info!(
            path = %path.display(),
            arch = config.arch.name(),
            layers = config.n_layer,
            ms = t0.elapsed().as_millis() as u64,
            "model loaded"
        );
        Ok(Self {
            config,
            weights,
            tokenizer,
            gguf: Arc::new(gguf),
            tensors,
            exact_f32: opts.exact_f32,
            token_env: OnceLock::new(),
            workspaces: std::sync::Mutex::new(Vec::new()),
            placement: Placement::default(),
            weights_prepared: OnceLock::new(),
            _release: ReleaseOnDrop,
        })
    }

    /// Runs the forward passes on `placement`'s backends (the CPU by default). An error when a
    /// backend cannot multiply by one of the model's weight types.
    pub fn set_placement(&mut self, placement: Placement) -> Result<()> {
        if self.config.arch.is_encoder()
            && let Some(be) = placement.backends().into_iter().find(|b| b.name() != "cpu")
        {
            return Err(crate::backend::BackendError::Unsupported {
                backend: be.name(),
                what: format!("{} encoder models (they run on the CPU)", self.config.arch.name()),
            }
            .into());
        }
        for be in placement.backends() {
            for (name, w) in self.weights.matrices() {
                if !be.supports_weight(w.ty) {
                    return Err(crate::backend::BackendError::Unsupported {
                        backend: be.name(),
                        what: format!("{} weights (tensor '{name}')", w.ty),
                    }
                    .into());
                }
            }
        }
        tracing::info!(placement = %placement.describe(), "compute placement");
        self.placement = placement;
        self.weights_prepared = OnceLock::new();
        self.prepare_weights();
        Ok(())
    }

    /// Lets each backend of the placement prepare the weights it multiplies by, once per
    /// placement: [`Model::set_placement`] does it right away, else the first forward pass does
    /// (so a model loaded for another placement never makes, say, the CPU's repacked copies).
    pub(crate) fn prepare_weights(&self) {
        self.weights_prepared.get_or_init(|| {
            let weights = self.weights.matmul_weights();
            for be in self.placement.backends() {
                let t = std::time::Instant::now();
                let bytes = be.prepare_weights(&weights);
                if bytes > 0 {
                    tracing::info!(
                        backend = be.name(),
                        mib = bytes >> 20,
                        ms = t.elapsed().as_millis() as u64,
                        "weights prepared for the backend"
                    );
                }
            }
        });
    }

    /// Where the forward passes run.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The model's weights.
    pub fn weights(&self) -> &ModelWeights {
        &self.weights
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The model's chat template (GGUF `tokenizer.chat_template`, or the Hugging Face folder's
    /// `chat_template.jinja` / `tokenizer_config.json`), compiled; `None` when it has none.
    pub fn chat_template(&self) -> Result<Option<crate::chat::ChatTemplate>> {
        match self.tokenizer.chat_template() {
            Some(src) => Ok(Some(crate::chat::ChatTemplate::new(src)?)),
            None => Ok(None),
        }
    }

    /// The vocabulary prepared for constrained output (built on the first call, then shared).
    pub fn token_env(&self) -> Result<Arc<TokenEnv>> {
        if let Some(env) = self.token_env.get() {
            return Ok(env.clone());
        }
        let env = TokenEnv::new(&self.tokenizer)?;
        Ok(self.token_env.get_or_init(|| env).clone())
    }

    /// The model's GGUF metadata (chat template, …). For a Hugging Face folder, the metadata a
    /// conversion to GGUF writes.
    pub fn gguf(&self) -> &GgufFile {
        &self.gguf
    }

    /// The model's tensors under their GGUF names, as used for compute (after any quantization
    /// at load).
    pub fn tensors(&self) -> &TensorMap {
        &self.tensors
    }

    /// An empty KV cache shaped for this model, holding up to `n_ctx` tokens per sequence, with
    /// keys and values stored as f16 (llama.cpp's default).
    pub fn new_kv_cache(&self, n_ctx: usize) -> KvCache {
        KvCache::new(self.config.n_layer, self.config.kv_dim(), n_ctx, KvType::F16, KvType::F16)
    }

    /// What a saved KV state must match to be loaded into a cache `kv` of this model
    /// ([`crate::kv::encode_state`]): the architecture, the cache's layout and types, and a hash
    /// of the vocabulary (its size and every token's text), so that a state of another model of
    /// the same shape is refused.
    pub fn state_identity(&self, kv: &KvCache) -> crate::kv::StateIdentity {
        let mut h = crate::kv::fnv1a(&(self.config.n_vocab as u64).to_le_bytes());
        if let Ok(tokens) = self.gguf.get_str_array("tokenizer.ggml.tokens") {
            for t in tokens {
                h ^= crate::kv::fnv1a(t.as_bytes());
                h = h.rotate_left(7).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        crate::kv::StateIdentity::of(kv, self.config.arch.name(), h)
    }

    /// The attention geometry of layer `il` (heads, scale, sliding window, soft-capping, sinks).
    pub fn attention_shape(&self, il: usize) -> AttentionShape<'_> {
        let cfg = &self.config;
        AttentionShape {
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
            scale: cfg.attn_scale,
            window: cfg.window_for_layer(il),
            softcap: cfg.attn_softcap,
            sinks: self.weights.layers.get(il).and_then(|l| l.mixer.attention()?.attn_sinks.as_deref()),
        }
    }

    /// The attention geometry of every layer, in order, without the attention sinks: what the
    /// eviction policies score slots with (a sink scales every probability of a query alike, so
    /// it changes no ranking of the slots).
    pub fn attention_shapes(&self) -> Vec<AttentionShape<'static>> {
        (0..self.config.n_layer)
            .map(|il| AttentionShape { sinks: None, ..self.attention_shape(il) })
            .collect()
    }

    /// An empty KV cache with the given storage types for keys and values. An
    /// [`Error::InvalidInput`] for a block type (`q8_0`, `q4_0`) whose blocks of 32 values do
    /// not divide the model's head dimension.
    pub fn new_kv_cache_typed(&self, n_ctx: usize, type_k: KvType, type_v: KvType) -> Result<KvCache> {
        type_k.check_width(self.config.head_dim)?;
        type_v.check_width(self.config.head_dim)?;
        Ok(KvCache::new(self.config.n_layer, self.config.kv_dim(), n_ctx, type_k, type_v))
    }
}
