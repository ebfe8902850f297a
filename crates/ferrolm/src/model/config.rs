//! One [`ModelConfig`] describes every supported architecture's variations.

use super::tensors::TensorMap;
use crate::format::gguf::GgufFile;
use crate::{Error, Result};

// Defined with the operators, below the model, the KV cache and the backends.
pub use crate::ops::{Activation, RopeParams, RopeStyle};

/// Largest context length accepted (16 Mi tokens; the largest released models train on 10M).
const MAX_CONTEXT: usize = 1 << 24;
/// Largest vocabulary accepted (16 Mi entries).
const MAX_VOCAB: usize = 1 << 24;

/// An optional float key that must be finite when present (NaN and ±inf are errors that name
/// the key; whether zero or negative values are allowed is the caller's business).
fn opt_finite(f: &GgufFile, key: &str) -> Result<Option<f32>> {
    match f.opt_f32(key)? {
        Some(v) if !v.is_finite() => Err(Error::Config(format!("{key} = {v} is not a finite number"))),
        v => Ok(v),
    }
}

/// An optional float key that must be finite and strictly positive when present.
fn opt_positive(f: &GgufFile, key: &str) -> Result<Option<f32>> {
    match opt_finite(f, key)? {
        Some(v) if v <= 0.0 => Err(Error::Config(format!("{key} = {v} must be positive"))),
        v => Ok(v),
    }
}

/// An optional float key where 0 means "not set" (llama.cpp's convention for scaling factors
/// and soft-caps); negative, NaN and infinite values are errors.
fn opt_positive_or_unset(f: &GgufFile, key: &str) -> Result<Option<f32>> {
    match opt_finite(f, key)? {
        Some(v) if v < 0.0 => Err(Error::Config(format!("{key} = {v} must not be negative"))),
        v => Ok(v.filter(|&v| v > 0.0)),
    }
}

/// The norm epsilon at `key`: finite, positive and below 1 (default 1e-5).
fn norm_eps_from(f: &GgufFile, key: &str) -> Result<f32> {
    let eps = opt_positive(f, key)?.unwrap_or(1e-5);
    if eps >= 1.0 {
        return Err(Error::Config(format!("{key} = {eps} is not a plausible epsilon (must be < 1)")));
    }
    Ok(eps)
}

/// RoPE of the global layers from `{arch}.rope.*` keys, as llama.cpp reads them. Every float is
/// checked (finite; bases and factors positive) so a corrupt file fails here, not as NaN logits.
fn rope_from_gguf(f: &GgufFile, arch: &str, n_ctx_train: usize) -> Result<RopeParams> {
    let key = |k: &str| format!("{arch}.rope.{k}");
    let mut p = RopeParams::plain(opt_positive(f, &key("freq_base"))?.unwrap_or(10_000.0));
    p.n_ctx_orig = match f.opt_u64(&key("scaling.original_context_length"))? {
        Some(v) => match usize::try_from(v) {
            Ok(n) if n > 0 && n <= MAX_CONTEXT => n,
            _ => {
                return Err(Error::Config(format!(
                    "{} = {v} is not a context length",
                    key("scaling.original_context_length")
                )));
            }
        },
        None => n_ctx_train,
    };
    let factor = match opt_positive_or_unset(f, &key("scaling.factor"))? {
        Some(v) => Some(v),
        None => opt_positive_or_unset(f, &key("scale_linear"))?,
    };
    let attn_factor = opt_positive_or_unset(f, &key("scaling.attn_factor"))?.unwrap_or(1.0);
    p.attn_factor = attn_factor;
    match f.opt_str(&key("scaling.type"))? {
        Some("none") => {}
        // llama.cpp's default when the type is absent is linear with the given factor (if any).
        None | Some("linear") | Some("longrope") => p.freq_scale = factor.map_or(1.0, |v| 1.0 / v),
        Some("yarn") => {
            let factor = factor.unwrap_or(1.0);
            p.freq_scale = 1.0 / factor;
            // llama.cpp: a negative ext_factor means "the default".
            p.ext_factor =
                opt_finite(f, &key("scaling.yarn_ext_factor"))?.filter(|&v| v >= 0.0).unwrap_or(1.0);
            p.beta_fast = opt_finite(f, &key("scaling.yarn_beta_fast"))?.unwrap_or(32.0);
            p.beta_slow = opt_finite(f, &key("scaling.yarn_beta_slow"))?.unwrap_or(1.0);
            // ferrolm's own key, from a Hugging Face config's `"truncate": false` (llama.cpp
            // has none and always truncates).
            p.yarn_truncate = f.opt_bool(&key("scaling.yarn_truncate"))?.unwrap_or(true);
            // YaRN's magnitude correction: 0.1·ln(factor) + 1 (transformers' default mscale).
            if factor > 1.0 {
                p.attn_factor *= 0.1 * factor.ln() + 1.0;
            }
        }
        Some(other) => return Err(Error::Config(format!("RoPE scaling '{other}' is not supported"))),
    }
    Ok(p)
}

/// The architecture families ferrolm implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 1/2/3.x, Mistral, SmolLM and other llama-compatible models.
    Llama,
    /// Qwen 2 / 2.5: biases on the query, key and value projections.
    Qwen2,
    /// Qwen 3: per-head RMSNorm of queries and keys.
    Qwen3,
    /// Phi-3 / Phi-4-mini: fused QKV and gate-up projections, partial RoPE, LongRoPE.
    Phi3,
    /// Gemma 1.
    Gemma,
    /// Gemma 2: soft-capped attention and logits, alternating sliding-window layers.
    Gemma2,
    /// Gemma 3 (text).
    Gemma3,
    /// Gemma 4 (text): per-layer embeddings, layers attending over an earlier layer's keys and
    /// values, proportional RoPE on the global layers, unscaled attention.
    Gemma4,
    /// Qwen 1.5/2 MoE: Qwen 2 attention, softmax-routed experts plus a gated shared expert.
    Qwen2Moe,
    /// Qwen 3 MoE: Qwen 3 attention, softmax-routed experts with normalised top-k weights.
    Qwen3Moe,
    /// OLMoE: RMSNorm of the whole query and key rows, softmax-routed experts.
    Olmoe,
    /// SmolLM 3: Llama with every fourth layer attending without RoPE.
    SmolLM3,
    /// Granite 3: Llama with scaled embeddings, residual branches and logits.
    Granite,
    /// Granite 3 MoE: Granite with softmax-routed experts (and a shared expert, "MoE shared").
    GraniteMoe,
    /// BERT encoders (bge, MiniLM, e5): absolute positions, post-LayerNorm blocks, GELU.
    Bert,
    /// Nomic BERT (nomic-embed-text): RoPE, fused QKV, SwiGLU, no biases.
    NomicBert,
    /// Jina BERT v2 (jina-embeddings-v2): ALiBi, GEGLU or GELU feed-forward.
    JinaBertV2,
    /// gpt-oss: attention sinks, alternating sliding-window layers, biases everywhere, and
    /// experts picked by their top-k logits with gpt-oss's clamped SwiGLU.
    GptOss,
    /// Nomic BERT MoE (nomic-embed-text-v2-moe): Nomic BERT's attention with BERT's GELU
    /// feed-forward, every second block a mixture of GELU experts.
    NomicBertMoe,
    /// Qwen 3.5 (text): gated delta net layers (linear attention with a recurrent state)
    /// between full-attention layers whose output is gated per head.
    Qwen35,
    /// Qwen 3.5 MoE (text): Qwen 3.5's layers with softmax-routed experts (top k renormalised)
    /// and a shared expert gated by a sigmoid.
    Qwen35Moe,
    /// Qwen3-Next: Qwen 3.5 MoE's layers as first released (fused projections in its files,
    /// value heads grouped by key head).
    Qwen3Next,
    /// LFM2: short gated causal convolutions (a recurrent state of a few tokens) between
    /// attention layers with q/k norms.
    Lfm2,
}

impl Arch {
    /// Every architecture, for listings and errors.
    pub const ALL: [Arch; 23] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Phi3,
        Arch::Gemma,
        Arch::Gemma2,
        Arch::Gemma3,
        Arch::Gemma4,
        Arch::Qwen2Moe,
        Arch::Qwen3Moe,
        Arch::Olmoe,
        Arch::SmolLM3,
        Arch::Granite,
        Arch::GraniteMoe,
        Arch::Bert,
        Arch::NomicBert,
        Arch::JinaBertV2,
        Arch::GptOss,
        Arch::NomicBertMoe,
        Arch::Qwen35,
        Arch::Qwen35Moe,
        Arch::Qwen3Next,
        Arch::Lfm2,
    ];

    /// The `general.architecture` name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Phi3 => "phi3",
            Arch::Gemma => "gemma",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma4 => "gemma4",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Olmoe => "olmoe",
            Arch::SmolLM3 => "smollm3",
            Arch::Granite => "granite",
            Arch::GraniteMoe => "granitemoe",
            Arch::Bert => "bert",
            Arch::NomicBert => "nomic-bert",
            Arch::JinaBertV2 => "jina-bert-v2",
            Arch::GptOss => "gpt-oss",
            Arch::NomicBertMoe => "nomic-bert-moe",
            Arch::Qwen35 => "qwen35",
            Arch::Qwen35Moe => "qwen35moe",
            Arch::Qwen3Next => "qwen3next",
            Arch::Lfm2 => "lfm2",
        }
    }

    /// Parses a `general.architecture` value (`mistral` is an alias of `llama`).
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "mistral" => Ok(Arch::Llama),
            other => Arch::ALL
                .into_iter()
                .find(|a| a.name() == other)
                .ok_or_else(|| Error::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// Whether this is a bidirectional encoder (BERT family): it embeds text, it does not generate.
    pub fn is_encoder(self) -> bool {
        matches!(self, Arch::Bert | Arch::NomicBert | Arch::JinaBertV2 | Arch::NomicBertMoe)
    }

    /// Whether this is Qwen 3.5 (dense or with experts) or Qwen3-Next: gated delta net layers,
    /// zero-centred norms, the pre-FFN norm named `post_attention_norm`.
    pub fn is_qwen_hybrid(self) -> bool {
        matches!(self, Arch::Qwen35 | Arch::Qwen35Moe | Arch::Qwen3Next)
    }

    /// Whether every block of this architecture routes over experts (Mixtral, `llama` with
    /// expert keys, and Gemma 4's variant are not: their experts come from the keys).
    pub fn is_moe(self) -> bool {
        matches!(
            self,
            Arch::Qwen2Moe
                | Arch::Qwen3Moe
                | Arch::Olmoe
                | Arch::GraniteMoe
                | Arch::GptOss
                | Arch::NomicBertMoe
                | Arch::Qwen35Moe
                | Arch::Qwen3Next
        )
    }

    /// Whether this is one of the Gemma family (GeGLU, embeddings scaled by √n_embd).
    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma | Arch::Gemma2 | Arch::Gemma3 | Arch::Gemma4)
    }
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
    /// Key/value heads of each layer (Gemma 4's global layers may have fewer: each of their
    /// heads is repeated for the KV cache and attention, which leaves the outputs the same).
    /// `[n_layer]`
    pub n_head_kv_layers: Vec<usize>,
    /// Dimension of one head (of the global layers, when the sliding ones differ): also the
    /// width of each head in the KV cache and in attention.
    pub head_dim: usize,
    /// Dimension of one head of the sliding-window layers (Gemma 4's are narrower than its
    /// global ones: their heads are zero-padded to `head_dim` for the cache and attention, which
    /// leaves every score and output the same).
    pub head_dim_swa: usize,
    /// Feed-forward inner size (the largest, when layers differ).
    pub n_ff: usize,
    /// Feed-forward inner size of each layer (Gemma 4's KV-shared layers may be twice as wide).
    /// `[n_layer]`
    pub n_ff_layers: Vec<usize>,
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
    /// Number of rotated dimensions per head of the sliding-window layers (≤ `head_dim_swa`).
    pub rope_dims_swa: usize,
    /// RoPE for global-attention layers.
    pub rope_global: RopeParams,
    /// RoPE for sliding-window layers.
    pub rope_local: RopeParams,
    /// Multiply token embeddings by this (Gemma: √n_embd).
    pub embed_scale: Option<f32>,
    /// Biases on the query, key and value projections (Qwen 2).
    pub qkv_bias: bool,
    /// RMSNorm of queries and keys before RoPE.
    pub qk_norm: Option<QkNorm>,
    /// Extra RMSNorms after attention and after the FFN, before the residual add.
    pub post_norms: bool,
    /// Scale applied to attention scores.
    pub attn_scale: f32,
    /// Soft-capping of attention scores (`cap * tanh(s / cap)`, Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Sliding-window size of the local layers.
    pub sliding_window: Option<usize>,
    /// Which layers use sliding-window attention.
    pub swa_layers: Vec<bool>,
    /// Final logit soft-capping (`cap * tanh(x / cap)`).
    pub final_logit_softcap: Option<f32>,
    /// Multiplies each attention and FFN output before its residual add (Granite).
    pub residual_scale: Option<f32>,
    /// Divides the logits (Granite).
    pub logit_scale: Option<f32>,
    /// Which layers rotate queries and keys (SmolLM 3 leaves every fourth layer unrotated).
    pub rope_layers: Vec<bool>,
    /// The mixture-of-experts feed-forward blocks, when the model has them (every layer).
    pub moe: Option<MoeConfig>,
    /// A learned sink logit per query head joins each softmax (gpt-oss).
    pub attn_sinks: bool,
    /// A bias on the attention output projection (gpt-oss).
    pub attn_out_bias: bool,
    /// Nomic BERT MoE: blocks `il` with `il % n == 1` are mixtures of experts (llama.cpp's
    /// `moe_every_n_layers`); `None`: every block is dense.
    pub moe_every_n_layers: Option<usize>,
    /// Width of each layer's slice of the per-layer embeddings (Gemma 4); 0: none.
    pub n_embd_per_layer: usize,
    /// The layer whose keys and values each layer attends over: itself, or (Gemma 4's
    /// KV-shared layers, which have no key and value projections) the last earlier layer of the
    /// same kind that has its own. `[n_layer]`
    pub kv_source: Vec<usize>,
    /// A weightless RMSNorm of each value head before it is cached (Gemma 4).
    pub v_norm: bool,
    /// The query projection also gives a gate per query value: the attention output is
    /// multiplied by its sigmoid (Qwen 3.5's full-attention layers; per head, `head_dim`
    /// queries then `head_dim` gates).
    pub attn_output_gate: bool,
    /// The gated delta net layers (Qwen 3.5), when the model has them.
    pub delta_net: Option<DeltaNetConfig>,
    /// The short convolution layers (LFM2), when the model has them.
    pub short_conv: Option<ShortConvConfig>,
    /// Multi-token-prediction blocks the file holds after the decoder's (Qwen 3.5's
    /// `nextn_predict_layers`): not run, their tensors are ignored.
    pub n_nextn_layers: usize,
}

/// The gated delta net layers of a hybrid model (Qwen 3.5): linear attention whose state, per
/// value head a `[head_k_dim, head_v_dim]` matrix, carries everything before a token, after a
/// short causal convolution of the queries, keys and values.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaNetConfig {
    /// Which layers are delta nets (the others attend). `[n_layer]`
    pub layers: Vec<bool>,
    /// Width of the causal depthwise convolution.
    pub conv_kernel: usize,
    /// Query and key heads.
    pub n_k_heads: usize,
    /// Value heads (a multiple of the key heads).
    pub n_v_heads: usize,
    /// Size of a query or key head.
    pub head_k_dim: usize,
    /// Size of a value head.
    pub head_v_dim: usize,
    /// Value head `h` uses key head `h / (n_v_heads / n_k_heads)` (Hugging Face's order);
    /// otherwise `h % n_k_heads` (llama.cpp's converter reorders the value heads so).
    pub grouped_heads: bool,
}

/// The short convolution layers of a hybrid model (LFM2): `out(C ⊙ conv(B ⊙ x))` with `B`, `C`
/// and `x` one projection of the token, and a causal depthwise convolution whose state is its
/// last `l_cache - 1` inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct ShortConvConfig {
    /// Which layers convolve (the others attend). `[n_layer]`
    pub layers: Vec<bool>,
    /// Width of the convolution (llama.cpp's `shortconv.l_cache`).
    pub l_cache: usize,
    /// Channels (the hidden size).
    pub width: usize,
}

impl ShortConvConfig {
    /// Floats of one layer's recurrent state: the convolution's last `l_cache - 1` inputs.
    pub fn state_len(&self) -> usize {
        (self.l_cache - 1) * self.width
    }
}

impl DeltaNetConfig {
    /// Width of the convolved queries, keys and values: `2 n_k_heads head_k_dim + n_v_heads
    /// head_v_dim`.
    pub fn conv_dim(&self) -> usize {
        2 * self.n_k_heads * self.head_k_dim + self.n_v_heads * self.head_v_dim
    }

    /// Width of the values (and of the output gate).
    pub fn v_dim(&self) -> usize {
        self.n_v_heads * self.head_v_dim
    }

    /// The key head value head `h` uses.
    pub fn k_head_of(&self, h: usize) -> usize {
        if self.grouped_heads { h / (self.n_v_heads / self.n_k_heads) } else { h % self.n_k_heads }
    }

    /// Floats of one layer's recurrent state: the convolution's last `conv_kernel - 1` inputs,
    /// then the delta rule's matrices.
    pub fn state_len(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim() + self.n_v_heads * self.head_k_dim * self.head_v_dim
    }

    /// Checks the sizes against each other and against plausible limits.
    fn validate(&self, n_layer: usize) -> Result<()> {
        let sane = |v: usize| v > 0 && v <= 1 << 16;
        if self.layers.len() != n_layer
            || !(2..=64).contains(&self.conv_kernel)
            || ![self.n_k_heads, self.n_v_heads, self.head_k_dim, self.head_v_dim].into_iter().all(sane)
            || !self.n_v_heads.is_multiple_of(self.n_k_heads)
            || self.state_len() > 1 << 28
        {
            return Err(Error::Config(format!(
                "gated delta net: {} layers of {n_layer}, conv kernel {}, {} key heads of {}, {} value \
                 heads of {} is not a valid shape",
                self.layers.len(),
                self.conv_kernel,
                self.n_k_heads,
                self.head_k_dim,
                self.n_v_heads,
                self.head_v_dim
            )));
        }
        Ok(())
    }
}

/// LFM2's short convolutions from `{arch}.shortconv.l_cache` and the layers without key/value
/// heads, which then get the widest layer's count (their cache rows go unused).
fn short_conv_from_gguf(
    f: &GgufFile,
    arch_name: &str,
    n_head_kv_layers: &mut [usize],
    n_embd: usize,
) -> Result<ShortConvConfig> {
    let key = |k: &str| format!("{arch_name}.{k}");
    if f.opt_bool(&key("attention.causal"))? == Some(false) {
        return Err(Error::Config(format!(
            "{} = false: bidirectional LFM2 is not supported",
            key("attention.causal")
        )));
    }
    let l_cache = opt_usize(f, &key("shortconv.l_cache"))?
        .ok_or_else(|| Error::Config(format!("{} is missing", key("shortconv.l_cache"))))?;
    if !(2..=64).contains(&l_cache) {
        return Err(Error::Config(format!(
            "{} = {l_cache} must be between 2 and 64",
            key("shortconv.l_cache")
        )));
    }
    let layers: Vec<bool> = n_head_kv_layers.iter().map(|&h| h == 0).collect();
    let widest = n_head_kv_layers.iter().copied().max().unwrap_or(0);
    n_head_kv_layers.iter_mut().filter(|h| **h == 0).for_each(|h| *h = widest);
    Ok(ShortConvConfig { layers, l_cache, width: n_embd })
}

/// Qwen 3.5's gated delta net from the `{arch}.ssm.*` keys: which layers are recurrent (the
/// `attention.recurrent_layers` flags, else every layer but each `full_attention_interval`-th).
fn delta_net_from_gguf(f: &GgufFile, arch_name: &str, n_layer: usize) -> Result<DeltaNetConfig> {
    let key = |k: &str| format!("{arch_name}.{k}");
    let req = |k: &str| opt_usize(f, &key(k))?.ok_or_else(|| Error::Config(format!("{} is missing", key(k))));
    let layers = match f.opt_array(&key("attention.recurrent_layers"))? {
        Some(arr) => {
            let flags = arr.to_i64_vec().ok_or_else(|| {
                Error::Config(format!("{} must be an array of bools", key("attention.recurrent_layers")))
            })?;
            flags.into_iter().take(n_layer).map(|v| v != 0).collect()
        }
        None => {
            let every = opt_usize(f, &key("full_attention_interval"))?.unwrap_or(4).max(1);
            (0..n_layer).map(|il| (il + 1) % every != 0).collect()
        }
    };
    let (n_v_heads, inner) = (req("ssm.time_step_rank")?, req("ssm.inner_size")?);
    let cfg = DeltaNetConfig {
        layers,
        conv_kernel: req("ssm.conv_kernel")?,
        n_k_heads: req("ssm.group_count")?,
        n_v_heads,
        head_k_dim: req("ssm.state_size")?,
        head_v_dim: inner.checked_div(n_v_heads).unwrap_or(0),
        grouped_heads: f.opt_bool(&key("ssm.v_heads_grouped"))?.unwrap_or(false),
    };
    if cfg.v_dim() != inner {
        return Err(Error::Config(format!(
            "{} = {inner} is not a multiple of {} = {n_v_heads}",
            key("ssm.inner_size"),
            key("ssm.time_step_rank")
        )));
    }
    cfg.validate(n_layer)?;
    Ok(cfg)
}

/// Over what an RMSNorm of queries and keys normalises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// Each head on its own (Qwen 3, Gemma 3): weights `[head_dim]`.
    PerHead,
    /// A token's whole query (key) row (OLMoE): weights `[n_head * head_dim]` (`[kv_dim]`).
    Whole,
}

/// How a router turns its logits into expert probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts, then the top k.
    Softmax,
    /// Each logit's sigmoid, then the top k.
    Sigmoid,
    /// The top k logits, then a softmax over those k only (gpt-oss).
    SoftmaxWeight,
}

/// A mixture-of-experts feed-forward block: a router picks `n_used` of `n_expert` gated FFNs
/// for each token and sums their outputs weighted by the router's probabilities.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts each token uses (top k).
    pub n_used: usize,
    /// Inner size of one expert's FFN.
    pub n_ff_expert: usize,
    /// Inner size of the shared expert every token also goes through, if any.
    pub n_ff_shared: Option<usize>,
    /// Router probabilities.
    pub gating: Gating,
    /// Whether the k chosen weights are divided by their sum.
    pub norm_topk: bool,
    /// Factor applied to the chosen weights (1 when none).
    pub weight_scale: f32,
    /// Biases on the router logits and on every expert's three projections (gpt-oss).
    pub biases: bool,
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

/// A per-layer count at `key`: one unsigned integer for every layer, or an array of `n_layer`
/// of them (llama.cpp's `get_key_or_arr`).
fn per_layer_counts(f: &GgufFile, key: &str, n_layer: usize) -> Result<Vec<usize>> {
    let to_usize = |v: i64| usize::try_from(v).map_err(|_| Error::Config(format!("{key} has the entry {v}")));
    match f.opt_array(key) {
        Ok(Some(arr)) => {
            let vals = arr.to_i64_vec().ok_or_else(|| Error::Config(format!("{key} must be integers")))?;
            if vals.len() != n_layer {
                return Err(Error::Config(format!("{key} has {} entries for {n_layer} layers", vals.len())));
            }
            vals.into_iter().map(to_usize).collect()
        }
        _ => {
            let v = f.get_u64(key)?;
            let v = usize::try_from(v).map_err(|_| Error::Config(format!("{key} = {v} is too large")))?;
            // Bounded before the table is made (`validate` names a bad layer count).
            Ok(vec![v; n_layer.min(4097)])
        }
    }
}

/// The layer each layer attends over ([`ModelConfig::kv_source`]) when the last `n_shared` of
/// them have no keys and values of their own: the last earlier layer of the same kind (sliding
/// or global) that has them, as transformers' Gemma 4 picks it (llama.cpp takes the last
/// unshared layer for global layers and the one before it for sliding ones: the same layers
/// whenever those two are global and sliding).
fn kv_sources(swa_layers: &[bool], n_shared: usize) -> Result<Vec<usize>> {
    let n_layer = swa_layers.len();
    if n_shared >= n_layer && n_shared > 0 {
        return Err(Error::Config(format!("{n_shared} KV-shared layers leave none of {n_layer} with keys")));
    }
    let first_shared = n_layer - n_shared;
    (0..n_layer)
        .map(|il| {
            if il < first_shared {
                return Ok(il);
            }
            (0..first_shared).rev().find(|&j| swa_layers[j] == swa_layers[il]).ok_or_else(|| {
                Error::Config(format!("KV-shared layer {il} has no earlier layer of its kind to share with"))
            })
        })
        .collect()
}

/// The mixture-of-experts block from `{arch}.expert_*` keys (`None` for a dense model), with
/// llama.cpp's per-architecture defaults where a key is absent: softmax routing, top-k weights
/// normalised for Mixtral (`llama`), Qwen 3 MoE and Granite MoE but not for Qwen 2 MoE and OLMoE.
/// Gemma 4's experts (beside its dense MLP) route as llama.cpp's graph does whatever the keys say:
/// softmax, the k weights normalised, unscaled; Qwen 3.5 MoE's and Qwen3-Next's too, but scaled
/// by the key.
fn moe_from_gguf(f: &GgufFile, arch: Arch, arch_name: &str, n_ff: usize) -> Result<Option<MoeConfig>> {
    let key = |k: &str| format!("{arch_name}.{k}");
    let count = |k: &str| -> Result<Option<usize>> {
        f.opt_u64(&key(k))?
            .map(|v| usize::try_from(v).map_err(|_| Error::Config(format!("{} = {v} is too large", key(k)))))
            .transpose()
    };
    let n_expert = count("expert_count")?.unwrap_or(0);
    let is_moe_arch = arch.is_moe();
    if n_expert == 0 {
        if is_moe_arch {
            return Err(Error::Config(format!(
                "{} is missing: {arch_name} needs experts",
                key("expert_count")
            )));
        }
        return Ok(None);
    }
    if !(is_moe_arch || matches!(arch, Arch::Llama | Arch::Gemma4)) {
        return Err(Error::Config(format!(
            "{} = {n_expert}: {arch_name} with experts is not supported",
            key("expert_count")
        )));
    }
    if let Some(g) = count("expert_group_count")?
        && g > 1
    {
        return Err(Error::Config(format!(
            "{} = {g}: grouped expert routing is not supported",
            key("expert_group_count")
        )));
    }
    let n_used = count("expert_used_count")?
        .ok_or_else(|| Error::Config(format!("{} is missing", key("expert_used_count"))))?;
    let gating = match count("expert_gating_func")? {
        // llama.cpp's gpt-oss graph routes this way whatever the key says.
        _ if arch == Arch::GptOss => Gating::SoftmaxWeight,
        _ if matches!(arch, Arch::Gemma4 | Arch::Qwen35Moe | Arch::Qwen3Next) => Gating::Softmax,
        None | Some(1) => Gating::Softmax,
        Some(2) => Gating::Sigmoid,
        Some(3) => Gating::SoftmaxWeight,
        Some(v) => {
            return Err(Error::Config(format!(
                "{} = {v}: this expert gating is not supported",
                key("expert_gating_func")
            )));
        }
    };
    let default_norm = matches!(arch, Arch::Llama | Arch::Qwen3Moe | Arch::GraniteMoe);
    let norm_topk = match f.opt_bool(&key("expert_weights_norm"))? {
        // The k weights of a softmax over the k already sum to one.
        _ if gating == Gating::SoftmaxWeight => false,
        // llama.cpp's gemma4, qwen35moe and qwen3next graphs renormalise whatever the key says.
        _ if matches!(arch, Arch::Gemma4 | Arch::Qwen35Moe | Arch::Qwen3Next) => true,
        Some(b) => b,
        None => default_norm,
    };
    let weight_scale = match arch {
        Arch::Gemma4 => 1.0,
        _ => opt_positive_or_unset(f, &key("expert_weights_scale"))?.unwrap_or(1.0),
    };
    // llama.cpp: without its own key an expert's FFN is the dense size split over the used experts
    // (Mixtral's experts are `feed_forward_length` wide and have no such key).
    let n_ff_expert = match count("expert_feed_forward_length")? {
        Some(n) => n,
        None if matches!(arch, Arch::Llama | Arch::Olmoe | Arch::GraniteMoe | Arch::NomicBertMoe) => n_ff,
        None => n_ff / n_used.max(1),
    };
    let n_ff_shared = match count("expert_shared_count")? {
        Some(0) => None,
        _ => count("expert_shared_feed_forward_length")?,
    };
    let biases = arch == Arch::GptOss;
    Ok(Some(MoeConfig {
        n_expert,
        n_used,
        n_ff_expert,
        n_ff_shared,
        gating,
        norm_topk,
        weight_scale,
        biases,
    }))
}

impl ModelConfig {
    /// Reads the configuration from GGUF metadata (the vocabulary size from the embedding table).
    pub fn from_gguf(f: &GgufFile, tensors: &TensorMap) -> Result<Self> {
        let arch_name = f.architecture()?;
        let arch = Arch::from_name(arch_name)?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let to_usize = |k: &str, v: u64| {
            usize::try_from(v).map_err(|_| Error::Config(format!("{} = {v} is too large", key(k))))
        };
        let req = |k: &str| -> Result<usize> { to_usize(k, f.get_u64(&key(k))?) };
        let opt =
            |k: &str| -> Result<Option<usize>> { f.opt_u64(&key(k))?.map(|v| to_usize(k, v)).transpose() };
        let n_embd = req("embedding_length")?;
        // Multi-token-prediction blocks after the decoder's (Qwen 3.5) are not run.
        let n_nextn = opt("nextn_predict_layers")?.unwrap_or(0);
        let n_layer = req("block_count")?.checked_sub(n_nextn).ok_or_else(|| {
            Error::Config(format!("{} exceeds {}", key("nextn_predict_layers"), key("block_count")))
        })?;
        let n_head = req("attention.head_count")?;
        let mut n_head_kv_layers = match f.get(&key("attention.head_count_kv")) {
            Some(_) => per_layer_counts(f, &key("attention.head_count_kv"), n_layer)?,
            None => vec![n_head; n_layer.min(4097)],
        };
        let n_head_kv = n_head_kv_layers.iter().copied().max().unwrap_or(0);
        let short_conv = match arch {
            Arch::Lfm2 => Some(short_conv_from_gguf(f, arch_name, &mut n_head_kv_layers, n_embd)?),
            _ => None,
        };
        let n_ff_layers = per_layer_counts(f, &key("feed_forward_length"), n_layer)?;
        let n_ff = n_ff_layers.iter().copied().max().unwrap_or(0);
        let head_dim = match opt("attention.key_length")? {
            Some(v) => v,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        if let Some(vl) = opt("attention.value_length")?
            && vl != head_dim
        {
            return Err(Error::Config(format!(
                "value_length {vl} != key_length {head_dim} is not supported"
            )));
        }
        let norm_key = if arch.is_encoder() {
            "attention.layer_norm_epsilon"
        } else {
            "attention.layer_norm_rms_epsilon"
        };
        let norm_eps = norm_eps_from(f, &key(norm_key))?;
        let n_ctx_train = opt("context_length")?.unwrap_or(2048);
        let moe = moe_from_gguf(f, arch, arch_name, n_ff)?;
        let rope_dims = opt("rope.dimension_count")?.unwrap_or(head_dim);
        let rope_global = rope_from_gguf(f, arch_name, n_ctx_train)?;
        let n_vocab = match tensors.get("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => to_usize("vocab_size", t.dims[1])?,
            _ => return Err(Error::MissingTensor("token_embd.weight".into())),
        };
        if let Some(v) = opt("vocab_size")?
            && v != n_vocab
        {
            return Err(Error::Config(format!(
                "{} = {v} contradicts the embedding table's {n_vocab} rows",
                key("vocab_size")
            )));
        }
        let sliding_window = opt("attention.sliding_window")?.filter(|&w| w > 0);
        let attn_scale = match opt_positive_or_unset(f, &key("attention.scale"))? {
            Some(s) => s,
            None => 1.0 / (head_dim.max(1) as f32).sqrt(),
        };

        let mut cfg = ModelConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_head_kv_layers,
            head_dim,
            head_dim_swa: head_dim,
            n_ff,
            n_ff_layers,
            norm_eps,
            n_ctx_train,
            activation: Activation::Silu,
            rope_style: RopeStyle::Neox,
            rope_dims,
            rope_dims_swa: rope_dims,
            rope_global,
            rope_local: rope_global,
            embed_scale: None,
            qkv_bias: false,
            qk_norm: None,
            post_norms: false,
            attn_scale,
            attn_softcap: None,
            sliding_window,
            // Filled below, once `n_layer` is known to be sane.
            swa_layers: Vec::new(),
            final_logit_softcap: opt_positive_or_unset(f, &key("final_logit_softcapping"))?,
            residual_scale: opt_positive_or_unset(f, &key("residual_scale"))?,
            logit_scale: opt_positive_or_unset(f, &key("logit_scale"))?,
            // Filled below, once `n_layer` is known to be sane.
            rope_layers: Vec::new(),
            moe,
            attn_sinks: false,
            attn_out_bias: false,
            moe_every_n_layers: None,
            n_embd_per_layer: 0,
            // Filled below, once `n_layer` is known to be sane.
            kv_source: Vec::new(),
            v_norm: false,
            attn_output_gate: false,
            delta_net: None,
            short_conv,
            n_nextn_layers: n_nextn,
        };
        // Every size is checked before anything is allocated from it (a per-layer table below).
        cfg.validate()?;
        // Unless the architecture says otherwise, a window applies to every layer (Mistral).
        cfg.swa_layers = vec![sliding_window.is_some(); n_layer];
        cfg.rope_layers = vec![true; n_layer];
        let n_kv_shared = cfg.arch_from_gguf(f, arch_name)?;
        if cfg.sliding_window.is_none() {
            cfg.swa_layers = vec![false; n_layer];
        }
        cfg.kv_source = kv_sources(&cfg.swa_layers, n_kv_shared)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The architecture's own settings and keys (activation, RoPE pairing, norms, windows, …);
    /// returns the number of KV-shared layers (Gemma 4; the last ones).
    fn arch_from_gguf(&mut self, f: &GgufFile, arch_name: &str) -> Result<usize> {
        let (arch, n_layer) = (self.arch, self.n_layer);
        let key = |k: &str| format!("{arch_name}.{k}");
        let opt = |k: &str| opt_usize(f, &key(k));
        let mut n_kv_shared = 0;
        if arch.is_gemma() {
            self.activation = Activation::GeluTanh;
            self.embed_scale = Some((self.n_embd as f32).sqrt());
        }
        match arch {
            Arch::Llama => self.rope_style = RopeStyle::Interleaved,
            Arch::Granite | Arch::GraniteMoe => {
                self.rope_style = RopeStyle::Interleaved;
                self.embed_scale = opt_positive_or_unset(f, &key("embedding_scale"))?;
            }
            Arch::SmolLM3 => {
                self.rope_style = RopeStyle::Interleaved;
                // llama.cpp's fixed step: layers 3, 7, 11, … attend without RoPE.
                self.rope_layers = (0..n_layer).map(|il| (il + 1) % 4 != 0).collect();
            }
            Arch::Qwen2 | Arch::Qwen2Moe => self.qkv_bias = true,
            Arch::Qwen3 | Arch::Qwen3Moe => self.qk_norm = Some(QkNorm::PerHead),
            Arch::Qwen35 | Arch::Qwen35Moe | Arch::Qwen3Next => {
                self.qk_norm = Some(QkNorm::PerHead);
                self.attn_output_gate = true;
                let mut dn = delta_net_from_gguf(f, arch_name, n_layer)?;
                // llama.cpp's qwen3next graph repeats each key head for its value heads in turn.
                dn.grouped_heads |= arch == Arch::Qwen3Next;
                self.delta_net = Some(dn);
            }
            Arch::Olmoe => self.qk_norm = Some(QkNorm::Whole),
            Arch::Lfm2 => self.qk_norm = Some(QkNorm::PerHead),
            Arch::Phi3 | Arch::Gemma | Arch::Bert | Arch::NomicBert | Arch::JinaBertV2 => {}
            Arch::NomicBertMoe => {
                self.moe_every_n_layers = match opt("moe_every_n_layers")? {
                    Some(0) | None => None,
                    Some(n) => Some(n),
                };
            }
            Arch::GptOss => {
                self.qkv_bias = true;
                self.attn_out_bias = true;
                self.attn_sinks = true;
                self.activation = Activation::SwigluOai;
                // Even layers attend in a window; both kinds rotate alike (YaRN included)
                // unless the file gives the local layers their own base.
                self.swa_layers = swa_pattern(f, &key("attention.sliding_window_pattern"), n_layer, 2)?;
                if let Some(base) = opt_positive(f, &key("rope.freq_base_swa"))? {
                    self.rope_local.base = base;
                }
            }
            Arch::Gemma2 => {
                self.post_norms = true;
                self.attn_softcap = opt_positive_or_unset(f, &key("attn_logit_softcapping"))?;
                self.swa_layers = swa_pattern(f, &key("attention.sliding_window_pattern"), n_layer, 2)?;
            }
            Arch::Gemma3 | Arch::Gemma4 => {
                self.qk_norm = Some(QkNorm::PerHead);
                self.post_norms = true;
                // Local layers use their own base (10k unless the file says otherwise) and no scaling.
                let local_base = opt_positive(f, &key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
                self.rope_local = RopeParams::plain(local_base);
                self.swa_layers = swa_pattern(f, &key("attention.sliding_window_pattern"), n_layer, 6)?;
                if arch == Arch::Gemma4 {
                    n_kv_shared = self.gemma4_from_gguf(f, arch_name)?;
                }
            }
        }
        Ok(n_kv_shared)
    }

    /// Gemma 4's keys beyond Gemma 3's: the sliding layers' head size and rotated dimensions
    /// (the global layers' partial rotation is in `rope_freqs.weight`), the value norm,
    /// unscaled attention, per-layer embeddings; returns the number of KV-shared layers.
    fn gemma4_from_gguf(&mut self, f: &GgufFile, arch_name: &str) -> Result<usize> {
        let key = |k: &str| format!("{arch_name}.{k}");
        let opt = |k: &str| opt_usize(f, &key(k));
        self.head_dim_swa = opt("attention.key_length_swa")?.unwrap_or(self.head_dim);
        let v_swa = opt("attention.value_length_swa")?.unwrap_or(self.head_dim_swa);
        if v_swa != self.head_dim_swa || self.head_dim_swa == 0 || self.head_dim_swa > self.head_dim {
            return Err(Error::Config(format!(
                "{} = {}, {} = {v_swa}: the sliding layers' key and value heads must be equal, \
                 nonzero and at most the global layers' {}",
                key("attention.key_length_swa"),
                self.head_dim_swa,
                key("attention.value_length_swa"),
                self.head_dim
            )));
        }
        self.rope_dims_swa = opt("rope.dimension_count_swa")?.unwrap_or(self.head_dim_swa);
        self.v_norm = true;
        // Queries and keys are RMS-normalised per head: llama.cpp and transformers scale by 1.
        self.attn_scale = 1.0;
        self.n_embd_per_layer = opt("embedding_length_per_layer_input")?.unwrap_or(0);
        if self.n_embd_per_layer > 1 << 16 {
            return Err(Error::Config(format!(
                "per-layer embedding width {} is too large",
                self.n_embd_per_layer
            )));
        }
        Ok(opt("attention.shared_kv_layers")?.unwrap_or(0))
    }

    /// Whether the RoPE frequency factors (`rope_freqs.weight`) also apply to the sliding-window
    /// layers (Gemma 4's encode the global layers' partial rotation only).
    pub fn local_rope_factors(&self) -> bool {
        self.arch != Arch::Gemma4
    }

    /// Checks sizes against each other and against plausible limits (names the offending
    /// quantity), and that every float the forward pass uses is finite and positive.
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.n_embd == 0
            || self.n_ff == 0
            || self.n_layer == 0
            || self.n_head == 0
            || self.n_head_kv == 0
            || self.head_dim == 0
        {
            return bad(format!(
                "degenerate shape: n_embd {}, n_ff {}, n_layer {}, n_head {}, n_head_kv {}, head_dim {}",
                self.n_embd, self.n_ff, self.n_layer, self.n_head, self.n_head_kv, self.head_dim
            ));
        }
        self.validate_layers()?;
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(format!("n_head {} is not a multiple of n_head_kv {}", self.n_head, self.n_head_kv));
        }
        if self.rope_dims > self.head_dim || !self.rope_dims.is_multiple_of(2) {
            return bad(format!("rope dimension {} invalid for head size {}", self.rope_dims, self.head_dim));
        }
        if self.rope_dims_swa > self.head_dim_swa || !self.rope_dims_swa.is_multiple_of(2) {
            return bad(format!(
                "sliding layers' rope dimension {} invalid for their head size {}",
                self.rope_dims_swa, self.head_dim_swa
            ));
        }
        // Guard against absurd sizes before allocating work buffers.
        let limit = 1usize << 20;
        if self.n_embd > limit
            || self.n_ff > 4 * limit
            || self.n_layer > 4096
            || self.n_head > 4096
            || self.head_dim > 4096
        {
            return bad(format!(
                "model dimensions are implausibly large: n_embd {}, n_ff {}, n_layer {}, n_head {}, head_dim {}",
                self.n_embd, self.n_ff, self.n_layer, self.n_head, self.head_dim
            ));
        }
        if let Some(m) = &self.moe {
            if m.n_expert == 0 || m.n_expert > 4096 || m.n_used == 0 || m.n_used > m.n_expert {
                return bad(format!(
                    "{} experts with {} used per token is not a valid mixture",
                    m.n_expert, m.n_used
                ));
            }
            let ff_ok = |n: usize| n > 0 && n <= 4 * limit;
            if !ff_ok(m.n_ff_expert) || m.n_ff_shared.is_some_and(|n| !ff_ok(n)) {
                return bad(format!(
                    "expert feed-forward sizes {} (shared {:?}) are out of range",
                    m.n_ff_expert, m.n_ff_shared
                ));
            }
            if !(m.weight_scale.is_finite() && m.weight_scale > 0.0) {
                return bad(format!(
                    "expert weight scale {} is not a finite positive number",
                    m.weight_scale
                ));
            }
        }
        if self.n_ctx_train == 0 || self.n_ctx_train > MAX_CONTEXT {
            return bad(format!("context length {} is out of range (1..={MAX_CONTEXT})", self.n_ctx_train));
        }
        if self.n_vocab == 0 || self.n_vocab > MAX_VOCAB {
            return bad(format!("vocabulary size {} is out of range (1..={MAX_VOCAB})", self.n_vocab));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0 && self.norm_eps < 1.0) {
            return bad(format!("norm epsilon {} is not in (0, 1)", self.norm_eps));
        }
        for (what, v) in [("residual", self.residual_scale), ("logit", self.logit_scale)] {
            if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return bad(format!("{what} scale {v:?} is not a finite positive number"));
            }
        }
        if !(self.attn_scale.is_finite() && self.attn_scale > 0.0) {
            return bad(format!("attention scale {} is not a finite positive number", self.attn_scale));
        }
        for (which, r) in [("global", &self.rope_global), ("local", &self.rope_local)] {
            let ok = |v: f32| v.is_finite() && v > 0.0;
            // The original context only matters to YaRN, and is 0 where a model does not set it
            // (Gemma 3's local RoPE).
            if !(ok(r.base) && ok(r.freq_scale) && ok(r.attn_factor)) {
                return bad(format!(
                    "{which} RoPE: base {}, scale {}, attention factor {} (finite positive values required)",
                    r.base, r.freq_scale, r.attn_factor
                ));
            }
        }
        Ok(())
    }

    /// Checks the per-layer tables: feed-forward sizes, key/value heads, KV sources.
    fn validate_layers(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if let Some(il) = self.n_ff_layers.iter().position(|&f| f == 0) {
            return bad(format!("layer {il} has a feed-forward size of 0"));
        }
        if let Some(il) =
            self.n_head_kv_layers.iter().position(|&h| h == 0 || !self.n_head_kv.is_multiple_of(h))
        {
            return bad(format!(
                "layer {il}'s {} key/value heads do not divide the {} of the widest layer",
                self.n_head_kv_layers[il], self.n_head_kv
            ));
        }
        if let Some((il, &src)) = self.kv_source.iter().enumerate().find(|&(il, &src)| src > il) {
            return bad(format!("layer {il} cannot attend over the keys of the later layer {src}"));
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

    /// Key/value heads of layer `il`'s projections (before repetition to `n_head_kv`).
    pub fn layer_n_head_kv(&self, il: usize) -> usize {
        self.n_head_kv_layers.get(il).copied().unwrap_or(self.n_head_kv)
    }

    /// Whether some layers keep a recurrent state per sequence (gated delta nets, short
    /// convolutions) instead of keys and values that can be cut back.
    pub fn is_recurrent(&self) -> bool {
        self.recurrent_state().is_some()
    }

    /// The recurrent layers' count and the floats of one layer's state, when there are some.
    pub fn recurrent_state(&self) -> Option<(usize, usize)> {
        let count = |layers: &[bool]| layers.iter().filter(|&&r| r).count();
        match (&self.delta_net, &self.short_conv) {
            (Some(dn), _) => Some((count(&dn.layers), dn.state_len())),
            (None, Some(sc)) => Some((count(&sc.layers), sc.state_len())),
            (None, None) => None,
        }
    }

    /// Whether a block's experts run beside a dense MLP rather than in its place (Gemma 4's
    /// mixture-of-experts variant; a block without a router is dense only).
    pub fn moe_beside_dense(&self) -> bool {
        self.moe.is_some() && self.arch == Arch::Gemma4
    }

    /// Feed-forward inner size of layer `il`.
    pub fn layer_n_ff(&self, il: usize) -> usize {
        self.n_ff_layers.get(il).copied().unwrap_or(self.n_ff)
    }

    /// Head size of layer `il`'s projections (before padding to [`ModelConfig::head_dim`]).
    pub fn layer_head_dim(&self, il: usize) -> usize {
        if self.swa_layers.get(il).copied().unwrap_or(false) { self.head_dim_swa } else { self.head_dim }
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

/// The GGUF integer `key` as a `usize`, if present.
fn opt_usize(f: &GgufFile, key: &str) -> Result<Option<usize>> {
    f.opt_u64(key)?
        .map(|v| usize::try_from(v).map_err(|_| Error::Config(format!("{key} = {v} is too large"))))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::kv_sources;

    #[test]
    fn kv_shared_layers_attend_over_the_last_earlier_layer_of_their_kind() {
        // Four sliding layers and a global one, twice; the last four share: the sliding ones
        // with layer 5, the global one with layer 4.
        let swa = [true, true, true, true, false, true, true, true, true, false];
        assert_eq!(kv_sources(&swa, 4).expect("sources"), [0, 1, 2, 3, 4, 5, 5, 5, 5, 4]);
        assert_eq!(kv_sources(&swa, 0).expect("sources"), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn kv_sharing_without_a_source_is_an_error() {
        // Every layer sharing, or a shared global layer with no global layer before it.
        assert!(kv_sources(&[true, false], 2).is_err());
        let err = kv_sources(&[true, true, false], 1).expect_err("no global source").to_string();
        assert!(err.contains("layer 2"), "{err}");
    }
}
