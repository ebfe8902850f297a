//! Operator types: the vocabulary that the model, the KV cache and the compute backends share.
//!
//! A weight as stored ([`Weight`]), the product a matmul makes ([`MatmulJob`]), the geometry of
//! an attention call ([`AttentionShape`]) and the parameters of the element-wise operators
//! ([`Activation`], [`RopeStyle`], [`RopeParams`]). The [`crate::model`] describes a forward
//! pass in these terms, the [`crate::backend`]s compute it, and the [`crate::kv`] eviction
//! policies score slots with them.
//!
//! This module sits below all three and imports nothing else of the crate
//! (`scripts/check-layers.py` checks that in CI), so none of them has to import another to
//! name what they pass each other.

mod act;
mod weight;

pub use act::{gelu_tanh, gelu_tanh_f16};
pub(crate) use weight::WeightBytes;
pub use weight::{MatmulJob, Weight};

/// Activation of the gated feed-forward network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) * up` (SwiGLU).
    Silu,
    /// `gelu_tanh(gate) * up` (GeGLU).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `g·σ(1.702·g) · (u + 1)` with `g = min(gate, 7)` and
    /// `u = clamp(up, -7, 7)` (llama.cpp's `swiglu_oai`, whose constants these are).
    SwigluOai,
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)` — GGUF llama models (the converter permutes Q/K for this).
    Interleaved,
    /// Halves `(i, i + d/2)` — GPT-NeoX style: Hugging Face checkpoints, Qwen, Phi-3, Gemma.
    Neox,
}

/// RoPE parameters for one kind of layer, with ggml's YaRN conventions.
///
/// For rotated pair `i` of `n` rotated dimensions at position `p`, the angle is
/// `θ = p · base^(-2i/n) / f_i` (`f_i` the optional per-pair frequency factors: Llama 3 scaling,
/// LongRoPE), scaled by `freq_scale` and, with YaRN, blended between scaled and unscaled per
/// pair; `cos θ` and `sin θ` are multiplied by `attn_factor`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Frequency base θ.
    pub base: f32,
    /// Linear position scale (1 / scaling factor).
    pub freq_scale: f32,
    /// YaRN extrapolation mix (1 with YaRN scaling, else 0).
    pub ext_factor: f32,
    /// Magnitude scale of the rotation (YaRN and LongRoPE attention factors), usually 1.
    pub attn_factor: f32,
    /// YaRN: rotations per context above which a pair is extrapolated.
    pub beta_fast: f32,
    /// YaRN: rotations per context below which a pair is interpolated.
    pub beta_slow: f32,
    /// Context length the model was trained with before scaling.
    pub n_ctx_orig: usize,
    /// YaRN: round the correction range outwards to whole pairs (ggml always does; Hugging Face
    /// configs may say `"truncate": false`, as gpt-oss's does).
    pub yarn_truncate: bool,
}

impl RopeParams {
    /// Plain RoPE with base `base`.
    pub fn plain(base: f32) -> Self {
        Self {
            base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 0,
            yarn_truncate: true,
        }
    }
}

/// Head geometry of an attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape<'a> {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads; query head `h` reads KV head `h / (n_head / n_head_kv)`.
    pub n_head_kv: usize,
    /// Dimension of a head.
    pub head_dim: usize,
    /// Score scale (usually 1/√head_dim).
    pub scale: f32,
    /// Sliding window: a query at position p sees keys at positions > p - window.
    pub window: Option<usize>,
    /// Soft-capping of scores (`cap * tanh(s / cap)`), Gemma 2 style.
    pub softcap: Option<f32>,
    /// Attention sinks (gpt-oss): one learned logit per query head, `[n_head]`, that joins each
    /// query's softmax as an extra key with no value, so that a head can attend to nothing.
    pub sinks: Option<&'a [f32]>,
}

#[cfg(test)]
impl AttentionShape<'static> {
    /// One head of two dimensions, score scale 1, no window, cap or sinks: the geometry the
    /// eviction policies' tests score with.
    pub(crate) fn tiny() -> Self {
        Self { n_head: 1, n_head_kv: 1, head_dim: 2, scale: 1.0, window: None, softcap: None, sinks: None }
    }
}

/// Whether a query at `qpos` sees a key at `kpos` (causal, inside the window if any).
#[inline]
pub fn visible(window: Option<usize>, qpos: u32, kpos: u32) -> bool {
    kpos <= qpos && window.is_none_or(|w| ((qpos - kpos) as usize) < w)
}
