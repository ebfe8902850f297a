//! Models: configuration, weights and the forward pass.

pub mod config;
mod forward;
pub mod weights;

use std::path::Path;
use std::sync::Arc;

pub use config::{Activation, Arch, ModelConfig, RopeStyle};

use crate::Result;
use crate::format::gguf::GgufFile;
use crate::kv::{KvCache, KvType};
use crate::tokenizer::Tokenizer;
use weights::ModelWeights;

/// A loaded model: immutable and shareable across threads (wrap it in an [`Arc`]).
pub struct Model {
    config: ModelConfig,
    weights: ModelWeights,
    tokenizer: Tokenizer,
    gguf: Arc<GgufFile>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Model {
    /// Loads a GGUF model file (memory-mapped; weights are not copied).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let t0 = std::time::Instant::now();
        let gguf = GgufFile::open(path)?;
        let config = ModelConfig::from_gguf(&gguf)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let weights = ModelWeights::from_gguf(&gguf, &config)?;
        tracing::info!(
            path = %path.display(),
            arch = config.arch.name(),
            layers = config.n_layer,
            ms = t0.elapsed().as_millis() as u64,
            "model loaded"
        );
        Ok(Self { config, weights, tokenizer, gguf: Arc::new(gguf) })
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

    /// The GGUF file the model was loaded from (metadata, chat template, …).
    pub fn gguf(&self) -> &GgufFile {
        &self.gguf
    }

    /// An empty KV cache shaped for this model, holding up to `n_ctx` tokens per sequence, with
    /// keys and values stored as f16 (llama.cpp's default).
    pub fn new_kv_cache(&self, n_ctx: usize) -> KvCache {
        self.new_kv_cache_typed(n_ctx, KvType::F16, KvType::F16)
    }

    /// An empty KV cache with the given storage types for keys and values.
    pub fn new_kv_cache_typed(&self, n_ctx: usize, type_k: KvType, type_v: KvType) -> KvCache {
        KvCache::new(self.config.n_layer, self.config.kv_dim(), n_ctx, type_k, type_v)
    }
}
