//! Model weights, borrowed zero-copy from the file's memory map.
//!
//! Tensor names are the canonical GGUF names (`blk.N.attn_q.weight`, …); other formats map onto
//! them at load time. Quantization is a property of each [`Weight`], not of the model.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ops::Range;

use ferrolm_kernels::{GgmlType, quant};

use super::config::{Arch, ModelConfig, MoeConfig, QkNorm};
pub use super::delta_net::DeltaNetWeights;
use super::encoder::EncoderWeights;
pub use super::short_conv::ShortConvWeights;
use super::tensors::{TensorMap, TensorRef};
use crate::format::Storage;
use crate::ops::WeightBytes;
use crate::{Error, Result};

// Defined with the operators, below the model and the backends.
pub use crate::ops::Weight;

/// A file's memory map or an owned buffer holds the weights' bytes.
impl WeightBytes for Storage {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }

    fn release(&self, range: Range<usize>) {
        Storage::release(self, range);
    }
}

/// The weights of one transformer block.
#[derive(Debug)]
pub struct LayerWeights {
    /// RMSNorm before attention (or the layer's other token mixer). `[n_embd]`
    pub attn_norm: Vec<f32>,
    /// What mixes the tokens: attention, or a gated delta net (Qwen 3.5's recurrent layers).
    pub mixer: Mixer,
    /// Norm of the attention output before the residual add (Gemma 2/3). `[n_embd]`
    pub post_attn_norm: Option<Vec<f32>>,
    /// RMSNorm before the FFN. `[n_embd]`
    pub ffn_norm: Vec<f32>,
    /// The feed-forward network: one gated FFN, or a mixture of experts.
    pub ffn: Ffn,
    /// Norm of the FFN output before the residual add (Gemma 2/3). `[n_embd]`
    pub post_ffn_norm: Option<Vec<f32>>,
    /// The block's per-layer-embedding branch (Gemma 4).
    pub per_layer: Option<PerLayerBlock>,
    /// Multiplies the block's output (Gemma 4's `layer_output_scale`).
    pub out_scale: Option<f32>,
}

/// A block's token mixer.
#[derive(Debug)]
pub enum Mixer {
    /// Attention over the KV cache.
    Attention(Box<AttentionWeights>),
    /// A gated delta net (linear attention with a recurrent state).
    DeltaNet(Box<DeltaNetWeights>),
    /// A short gated convolution (LFM2).
    ShortConv(Box<ShortConvWeights>),
}

/// The weights of a block's attention.
#[derive(Debug)]
pub struct AttentionWeights {
    /// Query projection (Qwen 3.5: per head its queries, then as many output gates).
    /// `[q_dim, n_embd]` (`[2 q_dim, n_embd]` with gates)
    pub wq: Weight,
    /// Key projection (none in a layer that attends over another layer's keys, Gemma 4).
    /// `[kv_dim, n_embd]`
    pub wk: Option<Weight>,
    /// Value projection (none where `wk` is none, or where the keys are also the values: Gemma
    /// 4's `attention_k_eq_v`). `[kv_dim, n_embd]`
    pub wv: Option<Weight>,
    /// Query, key and value biases (Qwen 2). `[q_dim]`, `[kv_dim]`, `[kv_dim]`
    pub qkv_bias: Option<[Vec<f32>; 3]>,
    /// Attention output projection. `[n_embd, q_dim]`
    pub wo: Weight,
    /// Its bias (gpt-oss). `[n_embd]`
    pub wo_bias: Option<Vec<f32>>,
    /// Attention sink logits, one per query head (gpt-oss). `[n_head]`
    pub attn_sinks: Option<Vec<f32>>,
    /// Per-head query norm (Qwen 3, Gemma 3). `[head_dim]`
    pub q_norm: Option<Vec<f32>>,
    /// Per-head key norm (Qwen 3, Gemma 3). `[head_dim]`
    pub k_norm: Option<Vec<f32>>,
    /// Ones: the weightless RMSNorm of each value head (Gemma 4). `[head_dim]`
    pub v_norm: Option<Vec<f32>>,
}

impl AttentionWeights {
    /// Every matrix with its name's stem.
    fn matrices(&self) -> Vec<(String, &Weight)> {
        let attn = [("attn_q", Some(&self.wq)), ("attn_k", self.wk.as_ref()), ("attn_v", self.wv.as_ref())];
        let mut out: Vec<(String, &Weight)> =
            attn.into_iter().filter_map(|(n, w)| Some((n.to_string(), w?))).collect();
        out.push(("attn_output".to_string(), &self.wo));
        out
    }

    /// The norm weights and biases.
    fn constants(&self) -> impl Iterator<Item = &[f32]> {
        let v = [&self.q_norm, &self.k_norm, &self.wo_bias, &self.attn_sinks, &self.v_norm];
        v.into_iter().flatten().chain(self.qkv_bias.iter().flatten()).map(Vec::as_slice)
    }
}

impl Mixer {
    /// The attention weights, for an attention layer.
    pub fn attention(&self) -> Option<&AttentionWeights> {
        match self {
            Mixer::Attention(a) => Some(a),
            Mixer::DeltaNet(_) | Mixer::ShortConv(_) => None,
        }
    }
}

/// A block's per-layer-embedding branch (Gemma 4): `x += norm(proj(gelu(gate · x) ⊙ e_l))`,
/// `e_l` the layer's slice of the per-layer embeddings.
#[derive(Debug)]
pub struct PerLayerBlock {
    /// Gate projection. `[n_embd_per_layer, n_embd]`
    pub gate: Weight,
    /// Output projection. `[n_embd, n_embd_per_layer]`
    pub proj: Weight,
    /// RMSNorm of the output. `[n_embd]`
    pub post_norm: Vec<f32>,
}

/// The model-wide per-layer embeddings (Gemma 4): for each token, a table row plus a projection
/// of its embedding, one `n_embd_per_layer` slice per layer.
#[derive(Debug)]
pub struct PerLayerEmbeddings {
    /// Token table. `[n_vocab, n_layer * n_embd_per_layer]`
    pub tok_embd: Weight,
    /// Projection of the scaled token embedding. `[n_layer * n_embd_per_layer, n_embd]`
    pub model_proj: Weight,
    /// RMSNorm of each layer's slice of the projection. `[n_embd_per_layer]`
    pub proj_norm: Vec<f32>,
}

impl LayerWeights {
    /// Every matrix of the block with its name's stem (`attn_q`, `ffn_gate.3`, `inp_gate`, …).
    fn matrices(&self) -> Vec<(String, &Weight)> {
        let mut out = match &self.mixer {
            Mixer::Attention(a) => a.matrices(),
            Mixer::DeltaNet(d) => d.matrices(),
            Mixer::ShortConv(c) => c.matrices(),
        };
        out.extend(self.ffn.matrices());
        if let Some(p) = &self.per_layer {
            out.push(("inp_gate".to_string(), &p.gate));
            out.push(("proj".to_string(), &p.proj));
        }
        out
    }

    /// The block's norm weights and biases.
    pub fn constants(&self) -> impl Iterator<Item = &[f32]> {
        let norms = [
            Some(&self.attn_norm),
            Some(&self.ffn_norm),
            self.post_attn_norm.as_ref(),
            self.post_ffn_norm.as_ref(),
            self.per_layer.as_ref().map(|p| &p.post_norm),
        ];
        let mixer: Vec<&[f32]> = match &self.mixer {
            Mixer::Attention(a) => a.constants().collect(),
            // Their vectors are used on the host.
            Mixer::DeltaNet(_) | Mixer::ShortConv(_) => Vec::new(),
        };
        norms.into_iter().flatten().map(Vec::as_slice).chain(mixer).chain(self.ffn.constants())
    }
}

/// A gated feed-forward network's projections.
#[derive(Debug)]
pub struct FfnWeights {
    /// Gate projection. `[n_ff, n_embd]`
    pub gate: Weight,
    /// Up projection. `[n_ff, n_embd]`
    pub up: Weight,
    /// Down projection. `[n_embd, n_ff]`
    pub down: Weight,
}

impl FfnWeights {
    /// The three matrices named `ffn_{gate,up,down}{suffix}`.
    fn named(&self, suffix: &str) -> Vec<(String, &Weight)> {
        [("gate", &self.gate), ("up", &self.up), ("down", &self.down)]
            .into_iter()
            .map(|(n, w)| (format!("ffn_{n}{suffix}"), w))
            .collect()
    }
}

/// The biases of a gated FFN's projections (gpt-oss's experts).
#[derive(Debug)]
pub struct FfnBias {
    /// Added to the gate projection. `[n_ff]`
    pub gate: Vec<f32>,
    /// Added to the up projection. `[n_ff]`
    pub up: Vec<f32>,
    /// Added to the down projection. `[n_embd]`
    pub down: Vec<f32>,
}

/// The biases of a mixture-of-experts block (gpt-oss).
#[derive(Debug)]
pub struct MoeBiases {
    /// Added to the router's logits. `[n_expert]`
    pub router: Vec<f32>,
    /// Each expert's projection biases, in expert order.
    pub experts: Vec<FfnBias>,
}

/// The experts of a mixture-of-experts block ([`super::config::MoeConfig`]).
#[derive(Debug)]
pub struct MoeWeights {
    /// Router: one logit per expert. `[n_expert, n_embd]`
    pub router: Weight,
    /// The router's and the experts' biases (gpt-oss).
    pub biases: Option<Box<MoeBiases>>,
    /// The experts' FFNs, `[n_ff_expert, n_embd]` gates and ups, `[n_embd, n_ff_expert]` downs:
    /// row blocks of the file's 3-D tensors (or its per-expert matrices), zero-copy.
    pub experts: Vec<FfnWeights>,
    /// The FFN every token also goes through (Qwen 2 MoE). `[n_ff_shared, n_embd]` …
    pub shared: Option<FfnWeights>,
    /// The shared expert's gate: its output is scaled by `sigmoid(gate · x)`. `[1, n_embd]`
    pub shared_gate: Option<Weight>,
    /// Multiplies each expert's output (llama.cpp's `ffn_down_exps.scale`; Gemma 4's
    /// `per_expert_scale`). `[n_expert]`
    pub expert_scale: Option<Vec<f32>>,
}

impl MoeWeights {
    /// The router's and the experts' biases.
    fn biases(&self) -> Vec<&[f32]> {
        let Some(b) = &self.biases else { return Vec::new() };
        let experts = b.experts.iter().flat_map(|b| [&b.gate, &b.up, &b.down]);
        std::iter::once(&b.router).chain(experts).map(Vec::as_slice).collect()
    }

    /// Every matrix with its name's stem (`ffn_gate_inp`, `ffn_gate_exps.3` for expert 3, …).
    fn matrices(&self) -> Vec<(String, &Weight)> {
        let mut out = vec![("ffn_gate_inp".to_string(), &self.router)];
        for (e, f) in self.experts.iter().enumerate() {
            out.extend(f.named(&format!("_exps.{e}")));
        }
        if let Some(f) = &self.shared {
            out.extend(f.named("_shexp"));
        }
        out.extend(self.shared_gate.iter().map(|w| ("ffn_gate_inp_shexp".to_string(), w)));
        out
    }
}

/// Gemma 4's feed-forward with experts: a dense MLP and a mixture of experts side by side on the
/// residual stream `x`, `post_norm_1(mlp(ffn_norm(x))) + post_norm_2(experts(pre_norm_2(x)))`,
/// the experts routed on `rms_norm(x) · router_norm`.
#[derive(Debug)]
pub struct DenseAndMoe {
    /// The dense MLP (its input norm is the block's `ffn_norm`).
    pub dense: FfnWeights,
    /// RMSNorm of the dense MLP's output (`post_ffw_norm_1`). `[n_embd]`
    pub dense_post_norm: Vec<f32>,
    /// The experts.
    pub moe: MoeWeights,
    /// RMSNorm of the experts' input (`pre_ffw_norm_2`). `[n_embd]`
    pub moe_pre_norm: Vec<f32>,
    /// RMSNorm of the experts' output (`post_ffw_norm_2`). `[n_embd]`
    pub moe_post_norm: Vec<f32>,
    /// The router's input norm: `ffn_gate_inp.scale / sqrt(n_embd)`. `[n_embd]`
    pub router_norm: Vec<f32>,
}

/// A block's feed-forward network.
#[derive(Debug)]
pub enum Ffn {
    /// One gated FFN.
    Dense(FfnWeights),
    /// A mixture of experts.
    Moe(MoeWeights),
    /// A dense MLP and a mixture of experts side by side (Gemma 4).
    DenseAndMoe(Box<DenseAndMoe>),
}

impl Ffn {
    /// Every matrix with its name's stem (`ffn_gate`, `ffn_gate_exps.3` for expert 3, …).
    fn matrices(&self) -> Vec<(String, &Weight)> {
        match self {
            Ffn::Dense(f) => f.named(""),
            Ffn::Moe(m) => m.matrices(),
            Ffn::DenseAndMoe(p) => {
                let mut out = p.dense.named("");
                out.extend(p.moe.matrices());
                out
            }
        }
    }

    /// The norm weights and biases of the feed-forward network beyond the block's `ffn_norm`.
    fn constants(&self) -> Vec<&[f32]> {
        match self {
            Ffn::Dense(_) => Vec::new(),
            Ffn::Moe(m) => m.biases(),
            Ffn::DenseAndMoe(p) => {
                let norms = [&p.dense_post_norm, &p.moe_pre_norm, &p.moe_post_norm, &p.router_norm];
                norms.into_iter().map(Vec::as_slice).chain(p.moe.biases()).collect()
            }
        }
    }
}

/// Per-pair RoPE frequency factors (`θ / f_i`), `[rope_dims / 2]` each.
#[derive(Debug, Default)]
pub struct RopeFactors {
    /// Used at every context length (Llama 3 scaling: `rope_freqs.weight`).
    pub always: Option<Vec<f32>>,
    /// LongRoPE factors for contexts beyond the original length (`rope_factors_long.weight`).
    pub long: Option<Vec<f32>>,
    /// LongRoPE factors within the original length (`rope_factors_short.weight`).
    pub short: Option<Vec<f32>>,
}

impl RopeFactors {
    /// The factors to use for a context of `n_ctx` tokens per sequence (llama.cpp's choice).
    pub fn for_context(&self, n_ctx: usize, n_ctx_orig: usize) -> Option<&[f32]> {
        if let Some(f) = &self.always {
            return Some(f);
        }
        if n_ctx > n_ctx_orig { self.long.as_deref() } else { self.short.as_deref() }
    }
}

/// All weights of a model.
#[derive(Debug)]
pub struct ModelWeights {
    /// Token embeddings. `[n_vocab, n_embd]`
    pub token_embd: Weight,
    /// Transformer blocks.
    pub layers: Vec<LayerWeights>,
    /// Per-layer embeddings (Gemma 4).
    pub per_layer: Option<PerLayerEmbeddings>,
    /// Final RMSNorm. `[n_embd]`
    pub output_norm: Vec<f32>,
    /// LM head (the embedding table itself when tied). `[n_vocab, n_embd]`
    pub output: Weight,
    /// RoPE frequency factors, when the model has them.
    pub rope_factors: RopeFactors,
    /// A classifier head over the pooled hidden state (`cls.output`: a reranker's "yes"/"no"
    /// rows, or a cross-encoder's score row), with its bias if any. `[n_labels, n_embd]`,
    /// `[n_labels]`
    pub cls_out: Option<(Weight, Option<Vec<f32>>)>,
    /// A cross-encoder's dense layer before the classifier (`cls`, followed by tanh: BERT and
    /// XLM-RoBERTa sequence classification), with its bias if any. `[n_embd, n_embd]`, `[n_embd]`
    pub cls: Option<(Weight, Option<Vec<f32>>)>,
    /// An encoder's blocks ([`ModelConfig::arch`] is an encoder): then `layers` is empty,
    /// `output_norm` too, and `output` is unused.
    pub encoder: Option<EncoderWeights>,
}

impl ModelWeights {
    /// The small float vectors every pass reads (norm weights, biases): what a GPU backend may
    /// keep on its device ([`crate::backend::Backend::begin_pass`]).
    pub fn constants(&self) -> impl Iterator<Item = &[f32]> {
        std::iter::once(self.output_norm.as_slice())
            .chain(self.per_layer.iter().map(|p| p.proj_norm.as_slice()))
            .chain(self.layers.iter().flat_map(LayerWeights::constants))
    }

    /// Every weight matrix with its GGUF name.
    pub fn matrices(&self) -> Vec<(String, &Weight)> {
        let mut out = vec![("token_embd.weight".to_string(), &self.token_embd)];
        if let Some(p) = &self.per_layer {
            out.push(("per_layer_token_embd.weight".to_string(), &p.tok_embd));
            out.push(("per_layer_model_proj.weight".to_string(), &p.model_proj));
        }
        for (i, l) in self.layers.iter().enumerate() {
            out.extend(l.matrices().into_iter().map(|(n, w)| (format!("blk.{i}.{n}.weight"), w)));
        }
        if let Some(e) = &self.encoder {
            out.extend(e.matrices());
            return out;
        }
        out.push(("output.weight".to_string(), &self.output));
        out
    }

    /// Every matrix the forward pass multiplies by (the token embeddings are only looked up,
    /// unless tied: then they are the LM head): the weights a backend prepares
    /// ([`crate::backend::Backend::prepare_weights`]).
    pub fn matmul_weights(&self) -> Vec<&Weight> {
        let mut ws: Vec<&Weight> = Vec::new();
        if let Some(p) = &self.per_layer {
            ws.push(&p.model_proj);
        }
        for l in &self.layers {
            ws.extend(l.matrices().into_iter().map(|(_, w)| w));
        }
        if let Some(e) = &self.encoder {
            ws.extend(e.matrices().into_iter().map(|(_, w)| w));
            return ws;
        }
        ws.push(&self.output);
        ws
    }
}

/// Binds tensors by name, remembering which ones were bound.
pub(super) struct Loader<'a> {
    pub(super) tensors: &'a TensorMap,
    used: RefCell<BTreeSet<String>>,
}

impl Loader<'_> {
    fn get(&self, name: &str) -> Result<&TensorRef> {
        let t = self.tensors.get(name).ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        if !quant::supports(t.ty) {
            return Err(Error::UnsupportedTensorType { name: name.to_string(), ty: t.ty.name().to_string() });
        }
        self.used.borrow_mut().insert(name.to_string());
        Ok(t)
    }

    /// Marks every tensor of blocks `blocks` as bound without binding it (multi-token-prediction
    /// blocks, which ferrolm does not run).
    fn skip_blocks(&self, blocks: Range<usize>) {
        let mut used = self.used.borrow_mut();
        for (name, _) in self.tensors.iter() {
            let block =
                name.strip_prefix("blk.").and_then(|r| r.split_once('.')).and_then(|(b, _)| b.parse().ok());
            if block.is_some_and(|b: usize| blocks.contains(&b)) {
                used.insert(name.to_string());
            }
        }
    }

    /// Fails on the first tensor of the table that nothing bound. llama.cpp refuses such files
    /// too ("wrong number of tensors; expected N, got M"): a stray tensor means the file's
    /// metadata and its tensors disagree (a wrong `block_count`, a foreign architecture), and
    /// running with the metadata's reading would silently ignore weights the model was trained
    /// with.
    fn check_all_used(&self) -> Result<()> {
        let used = self.used.borrow();
        let mut unused = self.tensors.iter().map(|(n, _)| n).filter(|n| !used.contains(*n));
        match unused.next() {
            None => Ok(()),
            Some(first) => Err(Error::Config(format!(
                "wrong number of tensors: {} of {} are not used by this configuration (first: '{first}'); \
                 the metadata (block_count, architecture) does not match the tensors",
                unused.count() + 1,
                self.tensors.len()
            ))),
        }
    }

    pub(super) fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let t = self.get(name)?;
        let shape_err = || Error::TensorShape {
            name: name.to_string(),
            actual: t.dims.clone(),
            expected: vec![cols as u64, rows as u64],
        };
        if t.dims != [cols as u64, rows as u64] {
            return Err(shape_err());
        }
        Weight::new(t.storage.clone(), t.range.clone(), t.ty, rows, cols).ok_or_else(shape_err)
    }

    /// The rows `pick` of the matrix `name` (`[rows, cols]`), in that order, copied.
    pub(super) fn matrix_rows(&self, name: &str, rows: usize, cols: usize, pick: &[usize]) -> Result<Weight> {
        self.matrix(name, rows, cols)?; // checks the shape
        let t = self.get(name)?.gather_rows(name, pick)?;
        let len = t.range.len();
        Weight::new(t.storage, 0..len, t.ty, pick.len(), cols)
            .ok_or_else(|| Error::Config(format!("{name}: rows {pick:?} do not form a matrix")))
    }

    /// The `n` matrices `[rows, cols]` of a 3-D tensor (GGUF dims `[cols, rows, n]`), zero-copy.
    pub(super) fn matrices3(&self, name: &str, n: usize, rows: usize, cols: usize) -> Result<Vec<Weight>> {
        let t = self.get(name)?;
        let shape_err = || Error::TensorShape {
            name: name.to_string(),
            actual: t.dims.clone(),
            expected: vec![cols as u64, rows as u64, n as u64],
        };
        if t.dims != [cols as u64, rows as u64, n as u64] {
            return Err(shape_err());
        }
        let all =
            Weight::new(t.storage.clone(), t.range.clone(), t.ty, n * rows, cols).ok_or_else(shape_err)?;
        Ok((0..n).map(|e| all.row_block(e * rows, rows)).collect())
    }

    /// A one-row matrix stored as a vector `[cols]` or a matrix `[1, cols]` (Qwen 2 MoE's
    /// shared-expert gate: the converter writes the first, a Hugging Face folder the second).
    fn row(&self, name: &str, cols: usize) -> Result<Weight> {
        let t = self.get(name)?;
        let shape_err = || Error::TensorShape {
            name: name.to_string(),
            actual: t.dims.clone(),
            expected: vec![cols as u64],
        };
        if t.dims != [cols as u64] && t.dims != [cols as u64, 1] {
            return Err(shape_err());
        }
        Weight::new(t.storage.clone(), t.range.clone(), t.ty, 1, cols).ok_or_else(shape_err)
    }

    /// Consecutive row blocks of a fused matrix (`[sum(parts), cols]`), zero-copy.
    pub(super) fn split_rows<const N: usize>(
        &self,
        name: &str,
        parts: [usize; N],
        cols: usize,
    ) -> Result<[Weight; N]> {
        let fused = self.matrix(name, parts.iter().sum(), cols)?;
        let mut start = 0;
        Ok(parts.map(|rows| {
            let w = fused.row_block(start, rows);
            start += rows;
            w
        }))
    }

    /// A norm weight or a bias: it must be stored as a float type (F32, F16, BF16), as llama.cpp
    /// and every converter write them (a quantized one is a corrupt or mislabelled file), and
    /// every value must be finite.
    pub(super) fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let t = self.get(name)?;
        if t.dims != [n as u64] {
            return Err(Error::TensorShape {
                name: name.to_string(),
                actual: t.dims.clone(),
                expected: vec![n as u64],
            });
        }
        self.float_values(name, t)
    }

    /// A norm weight's or bias's values: F32, F16 or BF16, every one finite.
    fn float_values(&self, name: &str, t: &TensorRef) -> Result<Vec<f32>> {
        if !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            return Err(Error::Config(format!(
                "tensor '{name}' is {}: a norm weight or bias must be F32, F16 or BF16",
                t.ty.name()
            )));
        }
        let v = t.to_f32(name)?;
        // A NaN or infinite scale would turn every activation it touches into NaN.
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::Config(format!(
                "tensor '{name}' has a non-finite value ({}) at index {i}",
                v[i]
            )));
        }
        Ok(v)
    }

    /// A float tensor of `n` rows of `width` values (GGUF dims `[width, n]`), as one vector.
    pub(super) fn vectors(&self, name: &str, n: usize, width: usize) -> Result<Vec<f32>> {
        let t = self.get(name)?;
        if t.dims != [width as u64, n as u64] {
            return Err(Error::TensorShape {
                name: name.to_string(),
                actual: t.dims.clone(),
                expected: vec![width as u64, n as u64],
            });
        }
        self.float_values(name, t)
    }

    /// An optional classifier layer `{name}.weight` over `d` inputs (`rows` outputs, or as many
    /// as the file has when `None`) and its optional bias.
    fn head(&self, name: &str, d: usize, rows: Option<usize>) -> Result<Option<(Weight, Option<Vec<f32>>)>> {
        let wname = format!("{name}.weight");
        let Some(t) = self.tensors.get(&wname) else { return Ok(None) };
        let n = match (t.dims.as_slice(), rows) {
            ([c, r], None) if *c == d as u64 => *r as usize,
            (_, Some(r)) => r,
            _ => {
                return Err(Error::TensorShape {
                    name: wname,
                    actual: t.dims.clone(),
                    expected: vec![d as u64, 2],
                });
            }
        };
        let w = self.matrix(&wname, n, d)?;
        Ok(Some((w, self.opt_vector(&format!("{name}.bias"), n)?)))
    }

    pub(super) fn opt_vector(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>> {
        if self.tensors.contains(name) { self.vector(name, n).map(Some) } else { Ok(None) }
    }

    /// A dense gated FFN `ffn_{gate,up,down}{suffix}` of inner size `ff`; without a gate
    /// matrix, `ffn_up` holds gate and up (Phi-3: `[2 * ff, n_embd]`, gate rows first).
    fn dense(&self, layer: usize, suffix: &str, d: usize, ff: usize) -> Result<FfnWeights> {
        let n = |s: &str| format!("blk.{layer}.{s}{suffix}.weight");
        let [gate, up] = if self.tensors.contains(&n("ffn_gate")) {
            [self.matrix(&n("ffn_gate"), ff, d)?, self.matrix(&n("ffn_up"), ff, d)?]
        } else {
            self.split_rows(&n("ffn_up"), [ff, ff], d)?
        };
        Ok(FfnWeights { gate, up, down: self.matrix(&n("ffn_down"), d, ff)? })
    }

    /// The weights of block `i`: its token mixer (attention or a gated delta net), norms, the
    /// feed-forward network and Gemma 4's per-layer branch.
    fn layer(&self, i: usize, cfg: &ModelConfig) -> Result<LayerWeights> {
        let d = cfg.n_embd;
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let (post_attn_norm, post_ffn_norm) = if cfg.post_norms {
            (Some(self.vector(&n("post_attention_norm"), d)?), Some(self.vector(&n("post_ffw_norm"), d)?))
        } else if cfg.arch == Arch::GptOss || cfg.arch.is_qwen_hybrid() {
            (None, None) // their `post_attention_norm` is the FFN's input norm (below)
        } else {
            (self.opt_vector(&n("post_attention_norm"), d)?, self.opt_vector(&n("post_ffw_norm"), d)?)
        };
        let mixer = match (&cfg.delta_net, &cfg.short_conv) {
            (Some(dn), _) if dn.layers[i] => {
                Mixer::DeltaNet(Box::new(DeltaNetWeights::load(self, i, d, dn)?))
            }
            (_, Some(sc)) if sc.layers[i] => {
                Mixer::ShortConv(Box::new(ShortConvWeights::load(self, i, d, sc)?))
            }
            _ => Mixer::Attention(Box::new(self.attention(i, cfg)?)),
        };
        // gpt-oss's and Qwen 3.5's files name the pre-FFN norm after the attention.
        let ffn_norm = match cfg.arch {
            Arch::GptOss if !self.tensors.contains(&n("ffn_norm")) => "post_attention_norm",
            a if a.is_qwen_hybrid() => "post_attention_norm",
            _ => "ffn_norm",
        };
        Ok(LayerWeights {
            attn_norm: self.vector(&n("attn_norm"), d)?,
            mixer,
            post_attn_norm,
            ffn_norm: self.vector(&n(ffn_norm), d)?,
            ffn: self.ffn(i, cfg)?,
            post_ffn_norm,
            per_layer: self.per_layer_block(i, cfg)?,
            out_scale: self.out_scale(i)?,
        })
    }

    /// The attention weights of block `i`: per-layer head sizes, KV-shared layers without keys
    /// and values, keys as values, biases, norms, sinks, Qwen 3.5's gated queries.
    fn attention(&self, i: usize, cfg: &ModelConfig) -> Result<AttentionWeights> {
        let d = cfg.n_embd;
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        // Gemma 4's sliding layers have narrower heads than its global ones, and its global
        // ones may have fewer key/value heads.
        let hd = cfg.layer_head_dim(i);
        let (q, kv) = (cfg.n_head * hd, cfg.layer_n_head_kv(i) * hd);
        let q_rows = if cfg.attn_output_gate { 2 * q } else { q };
        // A layer attending over another layer's keys has no key or value weights.
        let own_kv = cfg.kv_source.get(i) == Some(&i);
        let (q_norm, k_norm) = match cfg.qk_norm {
            Some(QkNorm::PerHead) => (
                Some(self.vector(&n("attn_q_norm"), hd)?),
                if own_kv { Some(self.vector(&n("attn_k_norm"), hd)?) } else { None },
            ),
            Some(QkNorm::Whole) => {
                (Some(self.vector(&n("attn_q_norm"), q)?), Some(self.vector(&n("attn_k_norm"), kv)?))
            }
            None => (None, None),
        };
        let (wq, wk, wv) = if self.tensors.contains(&n("attn_qkv")) {
            let [wq, wk, wv] = self.split_rows(&n("attn_qkv"), [q_rows, kv, kv], d)?;
            (wq, Some(wk), Some(wv))
        } else if own_kv {
            // Gemma 4's global layers may use their keys as values.
            let wv = if cfg.arch == Arch::Gemma4 && !self.tensors.contains(&n("attn_v")) {
                None
            } else {
                Some(self.matrix(&n("attn_v"), kv, d)?)
            };
            (self.matrix(&n("attn_q"), q_rows, d)?, Some(self.matrix(&n("attn_k"), kv, d)?), wv)
        } else {
            (self.matrix(&n("attn_q"), q_rows, d)?, None, None)
        };
        let qkv_bias = if cfg.qkv_bias {
            let b = |s: &str| format!("blk.{i}.{s}.bias");
            Some([
                self.vector(&b("attn_q"), q)?,
                self.vector(&b("attn_k"), kv)?,
                self.vector(&b("attn_v"), kv)?,
            ])
        } else {
            None
        };
        Ok(AttentionWeights {
            wq,
            wk,
            wv,
            qkv_bias,
            wo: self.matrix(&n("attn_output"), d, q)?,
            wo_bias: if cfg.attn_out_bias {
                Some(self.vector(&format!("blk.{i}.attn_output.bias"), d)?)
            } else {
                None
            },
            attn_sinks: if cfg.attn_sinks { Some(self.vector(&n("attn_sinks"), cfg.n_head)?) } else { None },
            q_norm,
            k_norm,
            v_norm: cfg.v_norm.then(|| vec![1.0; hd]),
        })
    }

    /// Layer `layer`'s per-layer-embedding branch, when the model has per-layer embeddings.
    fn per_layer_block(&self, layer: usize, cfg: &ModelConfig) -> Result<Option<PerLayerBlock>> {
        let (d, p) = (cfg.n_embd, cfg.n_embd_per_layer);
        if p == 0 {
            return Ok(None);
        }
        let n = |s: &str| format!("blk.{layer}.{s}.weight");
        Ok(Some(PerLayerBlock {
            gate: self.matrix(&n("inp_gate"), p, d)?,
            proj: self.matrix(&n("proj"), d, p)?,
            post_norm: self.vector(&n("post_norm"), d)?,
        }))
    }

    /// The model's per-layer embeddings, when it has them.
    fn per_layer_embeddings(&self, cfg: &ModelConfig) -> Result<Option<PerLayerEmbeddings>> {
        let (d, p) = (cfg.n_embd, cfg.n_embd_per_layer);
        if p == 0 {
            return Ok(None);
        }
        let width = cfg.n_layer * p;
        Ok(Some(PerLayerEmbeddings {
            tok_embd: self.matrix("per_layer_token_embd.weight", cfg.n_vocab, width)?,
            model_proj: self.matrix("per_layer_model_proj.weight", width, d)?,
            proj_norm: self.vector("per_layer_proj_norm.weight", p)?,
        }))
    }

    /// Layer `layer`'s output scale (`layer_output_scale.weight`, one value), if the file has one.
    fn out_scale(&self, layer: usize) -> Result<Option<f32>> {
        Ok(self.opt_vector(&format!("blk.{layer}.layer_output_scale.weight"), 1)?.map(|v| v[0]))
    }

    /// Layer `layer`'s feed-forward network: dense, or the experts `cfg.moe` describes.
    fn ffn(&self, layer: usize, cfg: &ModelConfig) -> Result<Ffn> {
        let d = cfg.n_embd;
        let n = |s: &str| format!("blk.{layer}.{s}.weight");
        let dense = || self.dense(layer, "", d, cfg.layer_n_ff(layer));
        let Some(m) = &cfg.moe else {
            return Ok(Ffn::Dense(dense()?));
        };
        if cfg.moe_beside_dense() {
            // A Gemma 4 block without a router is dense only, as llama.cpp reads it.
            if !self.tensors.contains(&n("ffn_gate_inp")) {
                return Ok(Ffn::Dense(dense()?));
            }
            let mut router_norm = self.vector(&format!("blk.{layer}.ffn_gate_inp.scale"), d)?;
            let inv_sqrt_d = (d as f32).sqrt().recip();
            router_norm.iter_mut().for_each(|w| *w *= inv_sqrt_d);
            return Ok(Ffn::DenseAndMoe(Box::new(DenseAndMoe {
                dense: dense()?,
                dense_post_norm: self.vector(&n("post_ffw_norm_1"), d)?,
                moe: self.moe(layer, m, d)?,
                moe_pre_norm: self.vector(&n("pre_ffw_norm_2"), d)?,
                moe_post_norm: self.vector(&n("post_ffw_norm_2"), d)?,
                router_norm,
            })));
        }
        Ok(Ffn::Moe(self.moe(layer, m, d)?))
    }

    /// Layer `layer`'s experts, router and shared expert as `m` describes them.
    fn moe(&self, layer: usize, m: &MoeConfig, d: usize) -> Result<MoeWeights> {
        let n = |s: &str| format!("blk.{layer}.{s}.weight");
        let router = self.matrix(&n("ffn_gate_inp"), m.n_expert, d)?;
        let experts = self.experts(layer, m.n_expert, d, m.n_ff_expert)?;
        let shared = match m.n_ff_shared {
            Some(ff) => Some(self.dense(layer, "_shexp", d, ff)?),
            None => None,
        };
        let shared_gate = match self.tensors.contains(&n("ffn_gate_inp_shexp")) {
            true => Some(self.row(&n("ffn_gate_inp_shexp"), d)?),
            false => None,
        };
        let biases = if m.biases {
            let router = self.vector(&format!("blk.{layer}.ffn_gate_inp.bias"), m.n_expert)?;
            let experts = self.expert_biases(layer, m.n_expert, d, m.n_ff_expert)?;
            Some(Box::new(MoeBiases { router, experts }))
        } else {
            None
        };
        let expert_scale = self.opt_vector(&format!("blk.{layer}.ffn_down_exps.scale"), m.n_expert)?;
        Ok(MoeWeights { router, biases, experts, shared, shared_gate, expert_scale })
    }

    /// Every expert's gate, up and down biases from the `[n_ff, n_expert]` and
    /// `[n_embd, n_expert]` tensors of a layer (llama.cpp's `ffn_*_exps.bias`).
    fn expert_biases(&self, layer: usize, n_expert: usize, d: usize, ff: usize) -> Result<Vec<FfnBias>> {
        let rows = |s: &str, width: usize| -> Result<Vec<Vec<f32>>> {
            let name = format!("blk.{layer}.{s}.bias");
            let all = self.vectors(&name, n_expert, width)?;
            Ok(all.chunks_exact(width).map(<[f32]>::to_vec).collect())
        };
        let (gates, ups, downs) =
            (rows("ffn_gate_exps", ff)?, rows("ffn_up_exps", ff)?, rows("ffn_down_exps", d)?);
        Ok(gates
            .into_iter()
            .zip(ups)
            .zip(downs)
            .map(|((gate, up), down)| FfnBias { gate, up, down })
            .collect())
    }

    /// The experts of a layer in any of the layouts llama.cpp reads: 3-D `ffn_{gate,up,down}_exps`,
    /// 3-D `ffn_gate_up_exps` (each expert's gate rows, then its up rows) with `ffn_down_exps`,
    /// or one matrix per expert (`ffn_gate.{e}`, as older Mixtral files and Hugging Face folders
    /// store them).
    fn experts(&self, layer: usize, n_expert: usize, d: usize, ff: usize) -> Result<Vec<FfnWeights>> {
        let n = |s: &str| format!("blk.{layer}.{s}.weight");
        if self.tensors.contains(&n("ffn_gate.0")) {
            return (0..n_expert).map(|e| self.dense(layer, &format!(".{e}"), d, ff)).collect();
        }
        let (gates, ups) = if self.tensors.contains(&n("ffn_gate_up_exps")) {
            let both = self.matrices3(&n("ffn_gate_up_exps"), n_expert, 2 * ff, d)?;
            both.iter().map(|w| (w.row_block(0, ff), w.row_block(ff, ff))).unzip()
        } else {
            (
                self.matrices3(&n("ffn_gate_exps"), n_expert, ff, d)?,
                self.matrices3(&n("ffn_up_exps"), n_expert, ff, d)?,
            )
        };
        let downs = self.matrices3(&n("ffn_down_exps"), n_expert, d, ff)?;
        Ok(gates
            .into_iter()
            .zip(ups)
            .zip(downs)
            .map(|((gate, up), down)| FfnWeights { gate, up, down })
            .collect())
    }
}

impl ModelWeights {
    /// Binds every tensor the configuration needs, checking names, shapes and types.
    ///
    /// Fused projections (`attn_qkv`, and Phi-3's `ffn_up` holding gate and up) are split into
    /// row blocks without copying.
    pub fn from_tensors(tensors: &TensorMap, cfg: &ModelConfig) -> Result<Self> {
        let l = Loader { tensors, used: RefCell::new(BTreeSet::new()) };
        let d = cfg.n_embd;
        let token_embd = l.matrix("token_embd.weight", cfg.n_vocab, d)?;
        if cfg.arch.is_encoder() {
            let encoder = EncoderWeights::load(&l, cfg)?;
            let (cls, cls_out) = (l.head("cls", d, Some(d))?, l.head("cls.output", d, None)?);
            l.check_all_used()?;
            return Ok(Self {
                output: token_embd.clone(),
                token_embd,
                layers: Vec::new(),
                per_layer: None,
                output_norm: Vec::new(),
                rope_factors: RopeFactors::default(),
                cls_out,
                cls,
                encoder: Some(encoder),
            });
        }
        let output = if tensors.contains("output.weight") {
            l.matrix("output.weight", cfg.n_vocab, d)?
        } else {
            token_embd.clone()
        };
        let layers = (0..cfg.n_layer).map(|i| l.layer(i, cfg)).collect::<Result<Vec<_>>>()?;
        l.skip_blocks(cfg.n_layer..cfg.n_layer + cfg.n_nextn_layers);
        let per_layer = l.per_layer_embeddings(cfg)?;
        let half = cfg.rope_dims / 2;
        let rope_factors = RopeFactors {
            always: l.opt_vector("rope_freqs.weight", half)?,
            long: l.opt_vector("rope_factors_long.weight", half)?,
            short: l.opt_vector("rope_factors_short.weight", half)?,
        };
        // LFM2's final norm has llama.cpp's name of an embedding norm.
        let output_norm_name =
            if cfg.arch == Arch::Lfm2 { "token_embd_norm.weight" } else { "output_norm.weight" };
        let output_norm = l.vector(output_norm_name, d)?;
        let cls_out = l.head("cls.output", d, None)?;
        l.check_all_used()?;
        Ok(Self {
            token_embd,
            layers,
            per_layer,
            output_norm,
            output,
            rope_factors,
            cls_out,
            cls: None,
            encoder: None,
        })
    }
}
