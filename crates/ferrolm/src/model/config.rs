//! One [`ModelConfig`] describes every supported architecture's variations.

use crate::format::gguf::GgufFile;
use crate::{Error, Result};

/// The architecture families ferrolm implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, SmolLM, and other llama-compatible models.
    Llama,
    /// Gemma 3.
    Gemma3,
}

impl Arch {
    /// The `general.architecture` name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Gemma3 => "gemma3",
        }
    }

    /// Parses a `general.architecture` value.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "llama" => Ok(Arch::Llama),
            "gemma3" => Ok(Arch::Gemma3),
            other => Err(Error::UnsupportedArchitecture(other.to_string())),
        }
    }
}

/// Activation of the gated feed-forward network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) * up` (SwiGLU).
    Silu,
    /// `gelu_tanh(gate) * up` (GeGLU).
    GeluTanh,
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)` — GGUF llama models (the converter permutes Q/K for this).
    Interleaved,
    /// Halves `(i, i + d/2)` — GPT-NeoX style, used by Gemma.
    Neox,
}

/// RoPE parameters for one kind of layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Frequency base θ.
    pub base: f32,
    /// Linear position scale (1 / scaling factor).
    pub freq_scale: f32,
}

/// Everything the forward pass needs to know about a model's shape and variant.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Architecture family.
    pub arch: Arch,
    /// Vocabulary size (rows of the embedding table).
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (GQA when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// Feed-forward inner size.
    pub n_ff: usize,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// Context length the model was trained with.
    pub n_ctx_train: usize,
    /// Gated FFN activation.
    pub activation: Activation,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// Number of rotated dimensions per head (≤ `head_dim`).
    pub rope_dims: usize,
    /// RoPE for global-attention layers.
    pub rope_global: RopeParams,
    /// RoPE for sliding-window layers.
    pub rope_local: RopeParams,
    /// Multiply token embeddings by this (Gemma: √n_embd).
    pub embed_scale: Option<f32>,
    /// Per-head RMSNorm of queries and keys before RoPE.
    pub qk_norm: bool,
    /// Extra RMSNorms after attention and after the FFN, before the residual add.
    pub post_norms: bool,
    /// Scale applied to attention scores.
    pub attn_scale: f32,
    /// Sliding-window size of the local layers.
    pub sliding_window: Option<usize>,
    /// Which layers use sliding-window attention.
    pub swa_layers: Vec<bool>,
    /// Final logit soft-capping (`cap * tanh(x / cap)`).
    pub final_logit_softcap: Option<f32>,
}

/// Which layers use sliding-window attention: from `key` (a per-layer bool array, or a period
/// `n` meaning every `n`-th layer is global), else `default_period` (Gemma 3: five local layers,
/// then one global).
fn swa_pattern(f: &GgufFile, key: &str, n_layer: usize, default_period: u64) -> Result<Vec<bool>> {
    if let Some(arr) = f.opt_array(key)? {
        let flags =
            arr.to_i64_vec().ok_or_else(|| Error::Config(format!("{key} must be an array of bools")))?;
        if flags.len() != n_layer {
            return Err(Error::Config(format!("{key} has {} entries for {n_layer} layers", flags.len())));
        }
        return Ok(flags.iter().map(|&v| v != 0).collect());
    }
    let period = f.opt_u64(key)?.unwrap_or(default_period);
    Ok((0..n_layer as u64).map(|il| period == 0 || il % period < period - 1).collect())
}

impl ModelConfig {
    /// Reads the configuration from GGUF metadata.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let arch_name = f.architecture()?;
        let arch = Arch::from_name(arch_name)?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let req = |k: &str| -> Result<usize> {
            let v = f.get_u64(&key(k))?;
            usize::try_from(v).map_err(|_| Error::Config(format!("{} = {v} is too large", key(k))))
        };
        let n_embd = req("embedding_length")?;
        let n_layer = req("block_count")?;
        let n_head = req("attention.head_count")?;
        let n_head_kv = match f.opt_u64(&key("attention.head_count_kv"))? {
            Some(v) => v as usize,
            None => n_head,
        };
        let n_ff = req("feed_forward_length")?;
        let head_dim = match f.opt_u64(&key("attention.key_length"))? {
            Some(v) => v as usize,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        if let Some(vl) = f.opt_u64(&key("attention.value_length"))? {
            if vl as usize != head_dim {
                return Err(Error::Config(format!(
                    "value_length {vl} != key_length {head_dim} is not supported"
                )));
            }
        }
        let norm_eps = f.opt_f32(&key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5);
        let n_ctx_train = f.opt_u64(&key("context_length"))?.unwrap_or(2048) as usize;
        let rope_dims = f.opt_u64(&key("rope.dimension_count"))?.map(|v| v as usize).unwrap_or(head_dim);
        let rope_base = f.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        let freq_scale = match f.opt_str(&key("rope.scaling.type"))? {
            None | Some("none") => 1.0,
            Some("linear") => {
                let factor = f.opt_f32(&key("rope.scaling.factor"))?.unwrap_or(1.0);
                if factor > 0.0 { 1.0 / factor } else { 1.0 }
            }
            Some(other) => return Err(Error::Config(format!("RoPE scaling '{other}' is not supported yet"))),
        };
        let rope_global = RopeParams { base: rope_base, freq_scale };
        let n_vocab = match f.tensor("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
            _ => return Err(Error::MissingTensor("token_embd.weight".into())),
        };

        let mut cfg = ModelConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            norm_eps,
            n_ctx_train,
            activation: Activation::Silu,
            rope_style: RopeStyle::Interleaved,
            rope_dims,
            rope_global,
            rope_local: rope_global,
            embed_scale: None,
            qk_norm: false,
            post_norms: false,
            attn_scale: 1.0 / (head_dim.max(1) as f32).sqrt(),
            sliding_window: None,
            swa_layers: vec![false; n_layer],
            final_logit_softcap: None,
        };

        match arch {
            Arch::Llama => {}
            Arch::Gemma3 => {
                cfg.activation = Activation::GeluTanh;
                cfg.rope_style = RopeStyle::Neox;
                cfg.embed_scale = Some((n_embd as f32).sqrt());
                cfg.qk_norm = true;
                cfg.post_norms = true;
                // Local layers use their own base (10k unless the file says otherwise) and no scaling.
                let local_base = f.opt_f32(&key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
                cfg.rope_local = RopeParams { base: local_base, freq_scale: 1.0 };
                cfg.sliding_window = f.opt_u64(&key("attention.sliding_window"))?.map(|v| v as usize);
                cfg.swa_layers = swa_pattern(f, &key("attention.sliding_window_pattern"), n_layer, 6)?;
                if cfg.sliding_window.is_none() {
                    cfg.swa_layers = vec![false; n_layer];
                }
                cfg.final_logit_softcap = f.opt_f32(&key("final_logit_softcapping"))?.filter(|&c| c > 0.0);
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.n_embd == 0
            || self.n_layer == 0
            || self.n_head == 0
            || self.n_head_kv == 0
            || self.head_dim == 0
        {
            return bad(format!(
                "degenerate shape: n_embd {}, n_layer {}, n_head {}, n_head_kv {}, head_dim {}",
                self.n_embd, self.n_layer, self.n_head, self.n_head_kv, self.head_dim
            ));
        }
        if self.n_head % self.n_head_kv != 0 {
            return bad(format!("n_head {} is not a multiple of n_head_kv {}", self.n_head, self.n_head_kv));
        }
        if self.rope_dims > self.head_dim || self.rope_dims % 2 != 0 {
            return bad(format!("rope dimension {} invalid for head size {}", self.rope_dims, self.head_dim));
        }
        // Guard against absurd sizes before allocating work buffers.
        let limit = 1usize << 20;
        if self.n_embd > limit
            || self.n_ff > 4 * limit
            || self.n_layer > 4096
            || self.n_head > 4096
            || self.head_dim > 4096
        {
            return bad("model dimensions are implausibly large".to_string());
        }
        Ok(())
    }

    /// Width of the query projection (`n_head * head_dim`).
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the key/value projections (`n_head_kv * head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// RoPE parameters of a layer.
    pub fn rope_for_layer(&self, il: usize) -> RopeParams {
        if self.swa_layers.get(il).copied().unwrap_or(false) { self.rope_local } else { self.rope_global }
    }

    /// Sliding window of a layer, `None` for global attention.
    pub fn window_for_layer(&self, il: usize) -> Option<usize> {
        if self.swa_layers.get(il).copied().unwrap_or(false) { self.sliding_window } else { None }
    }
}
