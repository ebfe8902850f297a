//! Hugging Face model folders: `config.json`, `tokenizer.json` and single or sharded
//! safetensors, memory-mapped.
//!
//! The folder is presented the way a GGUF file is: GGUF metadata translated from `config.json`
//! ([`config::translate`]) and a [`TensorMap`] under canonical GGUF names. Weights used as
//! stored (F32/F16/BF16 matrices) borrow the safetensors maps; the few tensors that need a
//! transformation get owned buffers: Gemma's norms (stored as `w`, used as `1 + w`) and RoPE
//! factors computed from the config. Q/K rows stay in Hugging Face order; the model runs them
//! with NeoX-style RoPE instead of permuting them as llama.cpp's converter does.

pub mod config;
mod gpt_oss;

use std::path::Path;

use crate::format::gguf::{GgufFile, MetaArray, MetaValue};
use crate::format::gguf_write::GgufWriter;
use crate::format::safetensors::SafetensorsSet;
use crate::model::config::Arch;
use crate::model::tensors::{TensorMap, TensorRef};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
pub use config::HfLayout;

/// A Hugging Face folder opened for inference or conversion.
pub struct HfModel {
    /// GGUF metadata equivalent to the folder's `config.json` (plus the chat template).
    pub metadata: GgufFile,
    /// Tensors under GGUF names.
    pub tensors: TensorMap,
    /// The tokenizer from `tokenizer.json`.
    pub tokenizer: Tokenizer,
    /// Layout facts from the config.
    pub layout: HfLayout,
}

impl std::fmt::Debug for HfModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfModel").field("layout", &self.layout).field("tensors", &self.tensors.len()).finish()
    }
}

/// The GGUF name of a Hugging Face tensor name, or `None` for tensors inference does not use.
fn gguf_name(arch: Arch, hf: &str) -> Option<String> {
    if arch == Arch::Bert {
        return bert_name(hf);
    }
    let hf = hf
        .strip_prefix("model.language_model.")
        .map(|r| format!("model.{r}"))
        .unwrap_or_else(|| hf.to_string());
    let fixed = match hf.as_str() {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        // LFM2's final norm, under llama.cpp's name for it.
        "model.embedding_norm.weight" => Some("token_embd_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        // Gemma 4's per-layer embeddings.
        "model.embed_tokens_per_layer.weight" => Some("per_layer_token_embd.weight"),
        "model.per_layer_model_projection.weight" => Some("per_layer_model_proj.weight"),
        "model.per_layer_projection_norm.weight" => Some("per_layer_proj_norm.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, name) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let fused = match name {
        "layer_scalar" => Some("layer_output_scale.weight"),
        // Qwen 3.5 MoE's experts: fused 3-D parameters without `.weight`, gate rows first.
        "mlp.experts.gate_up_proj" => Some("ffn_gate_up_exps.weight"),
        "mlp.experts.down_proj" => Some("ffn_down_exps.weight"),
        // Gemma 4's experts beside the dense MLP: the same, and its router's scales.
        "router.proj.weight" => Some("ffn_gate_inp.weight"),
        "router.scale" => Some("ffn_gate_inp.scale"),
        "router.per_expert_scale" => Some("ffn_down_exps.scale"),
        "experts.gate_up_proj" => Some("ffn_gate_up_exps.weight"),
        "experts.down_proj" => Some("ffn_down_exps.weight"),
        _ => None,
    };
    if let Some(g) = fused.or_else(|| delta_net_name(name)) {
        return Some(format!("blk.{layer}.{g}"));
    }
    let (stem, suffix) = name.rsplit_once('.')?;
    if let Some(g) = expert_name(stem) {
        return Some(format!("blk.{layer}.{g}.{suffix}"));
    }
    let gemma_sandwich = matches!(arch, Arch::Gemma2 | Arch::Gemma3 | Arch::Gemma4);
    let g = match stem {
        "input_layernorm" => "attn_norm",
        // Qwen 3.5's files name its pre-FFN norm so, as llama.cpp's converter does.
        "post_attention_layernorm" if gemma_sandwich || arch.is_qwen_hybrid() => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        "pre_feedforward_layernorm_2" => "pre_ffw_norm_2",
        "post_feedforward_layernorm_1" => "post_ffw_norm_1",
        "post_feedforward_layernorm_2" => "post_ffw_norm_2",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.qkv_proj" => "attn_qkv",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate_up_proj" => "ffn_up",
        // LFM2's norms, attention and MLP, and its short convolutions.
        "operator_norm" => "attn_norm",
        "ffn_norm" => "ffn_norm",
        "self_attn.q_layernorm" => "attn_q_norm",
        "self_attn.k_layernorm" => "attn_k_norm",
        "self_attn.out_proj" => "attn_output",
        "feed_forward.w1" => "ffn_gate",
        "feed_forward.w3" => "ffn_up",
        "feed_forward.w2" => "ffn_down",
        "conv.in_proj" => "shortconv.in_proj",
        "conv.conv" => "shortconv.conv",
        "conv.out_proj" => "shortconv.out_proj",
        "per_layer_input_gate" => "inp_gate",
        "per_layer_projection" => "proj",
        "post_per_layer_input_norm" => "post_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{g}.{suffix}"))
}

/// The GGUF name (after `blk.N.`) of a Qwen 3.5 gated delta net tensor of a layer.
fn delta_net_name(name: &str) -> Option<&'static str> {
    Some(match name.strip_prefix("linear_attn.")? {
        "in_proj_qkv.weight" => "attn_qkv.weight",
        // Qwen3-Next's fused projections, split as the loader reads them.
        "in_proj_qkvz.weight" => "ssm_in.weight",
        "in_proj_ba.weight" => "ssm_ba.weight",
        "in_proj_z.weight" => "attn_gate.weight",
        "in_proj_b.weight" => "ssm_beta.weight",
        "in_proj_a.weight" => "ssm_alpha.weight",
        "out_proj.weight" => "ssm_out.weight",
        "norm.weight" => "ssm_norm.weight",
        "conv1d.weight" => "ssm_conv1d.weight",
        "dt_bias" => "ssm_dt.bias",
        "A_log" => "ssm_a",
        _ => return None,
    })
}

/// The tensor as llama.cpp's converter writes a Qwen 3.5 delta net's `A_log` (`-exp(A_log)`)
/// and its or LFM2's convolution (`[channels, 1, kernel]` squeezed to `[channels, kernel]`);
/// others as they are.
fn recurrent_tensor(name: &str, t: TensorRef) -> Result<TensorRef> {
    if name.ends_with(".ssm_a") {
        let v: Vec<f32> = t.to_f32(name)?.iter().map(|a| -a.exp()).collect();
        return Ok(TensorRef::from_f32(t.dims.clone(), &v));
    }
    let conv = name.ends_with(".ssm_conv1d.weight") || name.ends_with(".shortconv.conv.weight");
    if conv && t.dims.len() == 3 && t.dims[1] == 1 {
        let dims = vec![t.dims[0], t.dims[2]];
        return Ok(TensorRef { dims, ..t });
    }
    Ok(t)
}

/// The GGUF stem of a mixture-of-experts tensor stem of a layer: routers, per-expert
/// projections (`mlp.experts.3.gate_proj` → `ffn_gate.3`, Mixtral's `w1`/`w3`/`w2` too),
/// Granite MoE's 3-D fused experts and the shared experts (Qwen 2 MoE's; Granite's, whose fused
/// `[2 * ff, n_embd]` gate-up matrix the loader splits like Phi-3's).
/// The prompt template llama.cpp's converter gives Qwen 3 rerankers
/// (`tokenizer.chat_template.rerank`).
const QWEN3_RERANK_TEMPLATE: &str = "<|im_start|>system\nJudge whether the Document meets the \
requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" \
or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant \
passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n\
<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// Whether a Qwen 3 folder is a reranker, by llama.cpp's converter's rule: a README heading
/// `# Qwen3-Reranker`, "qwen3-reranker" in the folder's name or `_name_or_path`, or a
/// sequence-classification architecture.
fn is_qwen3_reranker(dir: &Path, json: &serde_json::Value) -> bool {
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default().to_lowercase();
    if readme.contains("# qwen3-reranker") {
        return true;
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let hint = json["_name_or_path"].as_str().unwrap_or_default().to_lowercase();
    let arch = json["architectures"][0].as_str().unwrap_or_default().to_lowercase();
    name.contains("qwen3-reranker")
        || hint.contains("qwen3-reranker")
        || arch.contains("sequenceclassification")
}

/// Makes a Qwen 3 reranker folder what llama.cpp's converter makes of it: rank pooling, the labels
/// "yes" and "no", the rerank template, and a classifier head `cls.output` of the LM head's
/// "yes" and "no" rows.
fn qwen3_reranker(
    kv: &mut Vec<(String, MetaValue)>,
    tensors: &mut TensorMap,
    tokenizer: &Tokenizer,
    layout: &HfLayout,
) -> Result<()> {
    let head_name = if layout.tied { "token_embd.weight" } else { "output.weight" };
    let head = tensors.get(head_name).ok_or_else(|| Error::MissingTensor(head_name.into()))?.clone();
    let d = head.dims.first().copied().unwrap_or(0);
    let row_bytes = (d as usize) * head.ty.type_size() / head.ty.block_size();
    let mut rows = Vec::with_capacity(2 * d as usize);
    for label in ["yes", "no"] {
        let id = tokenizer.token_id(label).ok_or_else(|| {
            Error::Config(format!("a Qwen3 reranker folder whose vocabulary has no '{label}' token"))
        })? as usize;
        let start = head.range.start + id * row_bytes;
        let row = TensorRef { range: start..start + row_bytes, dims: vec![d], ..head.clone() };
        rows.extend(row.to_f32(head_name)?);
    }
    tensors.insert("cls.output.weight", TensorRef::from_f32(vec![d, 2], &rows));
    let a = layout.arch.name();
    kv.push((format!("{a}.pooling_type"), MetaValue::U32(4)));
    let labels = MetaArray::String(vec!["yes".into(), "no".into()]);
    kv.push((format!("{a}.classifier.output_labels"), MetaValue::Array(labels)));
    kv.push(("tokenizer.chat_template.rerank".into(), MetaValue::String(QWEN3_RERANK_TEMPLATE.into())));
    Ok(())
}

/// The GGUF name of a `BertModel` tensor (the pooler and the masked-LM head are not used).
fn bert_name(hf: &str) -> Option<String> {
    let hf = hf.strip_prefix("bert.").unwrap_or(hf);
    let fixed = match hf {
        "embeddings.word_embeddings.weight" => Some("token_embd.weight"),
        "embeddings.position_embeddings.weight" => Some("position_embd.weight"),
        "embeddings.token_type_embeddings.weight" => Some("token_types.weight"),
        "embeddings.LayerNorm.weight" => Some("token_embd_norm.weight"),
        "embeddings.LayerNorm.bias" => Some("token_embd_norm.bias"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let (layer, name) = hf.strip_prefix("encoder.layer.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (stem, suffix) = name.rsplit_once('.')?;
    let g = match stem {
        "attention.self.query" => "attn_q",
        "attention.self.key" => "attn_k",
        "attention.self.value" => "attn_v",
        "attention.output.dense" => "attn_output",
        "attention.output.LayerNorm" => "attn_output_norm",
        "intermediate.dense" => "ffn_up",
        "output.dense" => "ffn_down",
        "output.LayerNorm" => "layer_output_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{g}.{suffix}"))
}

fn expert_name(stem: &str) -> Option<String> {
    let fixed = match stem {
        "mlp.gate" | "block_sparse_moe.gate" => Some("ffn_gate_inp"),
        "mlp.shared_expert_gate" => Some("ffn_gate_inp_shexp"),
        "mlp.shared_expert.gate_proj" => Some("ffn_gate_shexp"),
        "mlp.shared_expert.up_proj" => Some("ffn_up_shexp"),
        "mlp.shared_expert.down_proj" => Some("ffn_down_shexp"),
        // Granite MoE: each expert's gate and up rows fused (gate first), one 3-D tensor a layer.
        "block_sparse_moe.router.layer" => Some("ffn_gate_inp"),
        "block_sparse_moe.input_linear" => Some("ffn_gate_up_exps"),
        "block_sparse_moe.output_linear" => Some("ffn_down_exps"),
        "shared_mlp.input_linear" => Some("ffn_up_shexp"),
        "shared_mlp.output_linear" => Some("ffn_down_shexp"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest =
        stem.strip_prefix("mlp.experts.").or_else(|| stem.strip_prefix("block_sparse_moe.experts."))?;
    let (e, proj) = rest.split_once('.')?;
    let e: usize = e.parse().ok()?;
    let g = match proj {
        "gate_proj" | "w1" => "ffn_gate",
        "up_proj" | "w3" => "ffn_up",
        "down_proj" | "w2" => "ffn_down",
        _ => return None,
    };
    Some(format!("{g}.{e}"))
}

/// The safetensors tensor `hf_name` as stored (dims in GGUF order), `None` if the set lacks it.
fn tensor_ref(set: &SafetensorsSet, hf_name: &str) -> Result<Option<TensorRef>> {
    let Some((storage, st)) = set.tensor(hf_name) else { return Ok(None) };
    let ty = st.dtype.to_ggml().ok_or_else(|| Error::UnsupportedTensorType {
        name: hf_name.to_string(),
        ty: format!("{:?} (safetensors)", st.dtype),
    })?;
    let dims: Vec<u64> = st.shape.iter().rev().map(|&d| d as u64).collect();
    Ok(Some(TensorRef { storage: storage.clone(), range: st.range.clone(), ty, dims }))
}

/// Adds one to a norm weight (Gemma stores `w` and computes `x̂ · (1 + w)`), as an F32 tensor.
fn shifted_norm(name: &str, t: &TensorRef) -> Result<TensorRef> {
    let mut v = t.to_f32(name)?;
    v.iter_mut().for_each(|x| *x += 1.0);
    Ok(TensorRef::from_f32(t.dims.clone(), &v))
}

impl HfModel {
    /// Opens a Hugging Face model folder.
    pub fn open(dir: &Path) -> Result<Self> {
        let io = |path: &Path, source| Error::Io { path: path.to_path_buf(), source };
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| io(&cfg_path, e))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::Config(format!("config.json: {e}")))?;
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (mut kv, layout) = config::translate(&json, &name)?;

        if let Some(code) = config::sentence_transformers_pooling(dir) {
            kv.push((format!("{}.pooling_type", layout.arch.name()), MetaValue::U32(code)));
        }
        let tokenizer = Tokenizer::from_hf_dir(dir)?;
        if let Some(t) = tokenizer.chat_template() {
            kv.push(("tokenizer.chat_template".into(), MetaValue::String(t.to_string())));
        }
        let mut tensors = Self::map_tensors(dir, &layout)?;
        if layout.arch == Arch::Qwen3 && is_qwen3_reranker(dir, &json) {
            qwen3_reranker(&mut kv, &mut tensors, &tokenizer, &layout)?;
        }
        let mut w = GgufWriter::new();
        for (k, v) in kv {
            w.add(k, v).map_err(|e| Error::Config(format!("config.json: {e}")))?;
        }
        let metadata = GgufFile::from_bytes(w.to_bytes())?;
        Ok(Self { metadata, tensors, tokenizer, layout })
    }

    fn map_tensors(dir: &Path, layout: &HfLayout) -> Result<TensorMap> {
        let set = SafetensorsSet::open_dir(dir)?;
        let mut map = TensorMap::new();
        for hf_name in set.names() {
            if layout.arch == Arch::GptOss
                && let Some(layer) = gpt_oss::layer_tensor(hf_name)
            {
                let Some(t) = tensor_ref(&set, hf_name)? else { continue };
                for (name, t) in gpt_oss::tensors(layer, &t)? {
                    map.insert(name, t);
                }
                continue;
            }
            let Some(name) = gguf_name(layout.arch, hf_name) else {
                tracing::debug!(tensor = hf_name, "ignoring tensor inference does not use");
                continue;
            };
            if name == "output.weight" && layout.tied {
                continue;
            }
            let Some(t) = tensor_ref(&set, hf_name)? else { continue };
            // Gemma 4 stores its norms as the multipliers themselves; Qwen 3.5 its own as Gemma
            // does, but for the delta nets' gated norm.
            let shifted = match layout.arch {
                Arch::Gemma4 => false,
                a if a.is_qwen_hybrid() => !name.ends_with("ssm_norm.weight"),
                a => a.is_gemma(),
            };
            let t = if shifted && name.ends_with("norm.weight") { shifted_norm(&name, &t)? } else { t };
            let recurrent = layout.arch.is_qwen_hybrid() || layout.arch == Arch::Lfm2;
            let t = if recurrent { recurrent_tensor(&name, t)? } else { t };
            map.insert(name, t);
        }
        if !layout.tied && !map.contains("output.weight") {
            return Err(Error::MissingTensor(
                "lm_head.weight (config.json says tie_word_embeddings is false)".into(),
            ));
        }
        let half = |v: &[f32]| vec![v.len() as u64];
        if let Some(f) = &layout.rope_freqs {
            map.insert("rope_freqs.weight", TensorRef::from_f32(half(f), f));
        }
        if let Some((long, short)) = &layout.longrope {
            map.insert("rope_factors_long.weight", TensorRef::from_f32(half(long), long));
            map.insert("rope_factors_short.weight", TensorRef::from_f32(half(short), short));
        }
        Ok(map)
    }
}

/// Rows of a Q or K projection reordered from Hugging Face's RoPE layout (dimension `i` paired
/// with `i + d/2`) to GGUF llama's (adjacent pairs), as llama.cpp's converter permutes them.
/// `data` holds `rows` rows of `row_bytes` bytes; `n_head` heads of `rows / n_head` rows each.
pub fn permute_qk_rows(data: &[u8], rows: usize, row_bytes: usize, n_head: usize) -> Vec<u8> {
    let hd = rows / n_head.max(1);
    let half = hd / 2;
    let mut out = vec![0u8; data.len()];
    for h in 0..n_head {
        for j in 0..half {
            for s in 0..2 {
                let src = h * hd + s * half + j;
                let dst = h * hd + 2 * j + s;
                out[dst * row_bytes..(dst + 1) * row_bytes]
                    .copy_from_slice(&data[src * row_bytes..(src + 1) * row_bytes]);
            }
        }
    }
    out
}
