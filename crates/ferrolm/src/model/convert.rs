//! `ferrolm convert`: a Hugging Face folder to a GGUF file that llama.cpp can read.
//!
//! The metadata is the one the model runs with here (translated from `config.json`, see
//! [`hf::config`](super::hf::config)), plus the tokenizer exported from `tokenizer.json`. Weight
//! matrices are written in the requested type (with llama.cpp's fallbacks for rows that do not
//! fit its blocks); vectors (norms, biases, RoPE factors) as F32. For the llama architecture the
//! Q and K rows are permuted to GGUF's RoPE layout, as llama.cpp's converter does.

use std::path::Path;

use ferrolm_kernels::{GgmlType, quant};

use super::config::Arch;
use super::hf::{HfModel, permute_qk_rows};
use super::quantize::{QuantizeSummary, convert_matrix, effective_type, is_router};
use super::tensors::TensorRef;
use crate::format::gguf::{MetaArray, MetaValue};
use crate::format::gguf_write::GgufWriter;
use crate::{Error, Result};

/// Output types `ferrolm convert` writes.
pub const CONVERT_TYPES: [GgmlType; 6] =
    [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K];

/// What a conversion wrote.
#[derive(Clone, Debug)]
pub struct ConvertReport {
    /// Tensors written.
    pub n_tensors: usize,
    /// Size of the GGUF file in bytes.
    pub bytes: u64,
    /// How many tensors were written in each type.
    pub types: Vec<(GgmlType, usize)>,
    /// What happened to the weight matrices: the types used, and which fell back from the
    /// requested type (and why).
    pub matrices: QuantizeSummary,
}

/// llama.cpp's `general.file_type` for an output type (`LLAMA_FTYPE_*`).
fn file_type(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q8_0 => 7,
        GgmlType::Q4_K => 15, // Q4_K_M
        GgmlType::BF16 => 32,
        _ => 0,
    }
}

fn tokenizer_metadata(w: &mut GgufWriter, hf: &HfModel) -> Result<()> {
    let meta = |e: crate::format::gguf_write::GgufWriteError| Error::Config(format!("tokenizer: {e}"));
    let export = hf.tokenizer.hf_vocab_export()?;
    let is_bpe = export.model == "gpt2";
    // Gemma 4's SentencePiece-style BPE is its own model to llama.cpp (merges, scores, BOS; no
    // pre-tokenizer name), as llama.cpp's converter writes it.
    let gemma4 = hf.layout.arch == Arch::Gemma4;
    let model = if gemma4 { "gemma4" } else { export.model };
    w.add("tokenizer.ggml.model", MetaValue::String(model.into())).map_err(meta)?;
    if !gemma4 {
        let pre = export.pre.unwrap_or_else(|| {
            tracing::warn!("unrecognised BPE pre-tokenizer: writing 'default'");
            "default"
        });
        w.add("tokenizer.ggml.pre", MetaValue::String(pre.into())).map_err(meta)?;
    }
    w.add("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::String(export.tokens.clone())))
        .map_err(meta)?;
    if !is_bpe {
        w.add("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(export.scores.clone())))
            .map_err(meta)?;
    }
    w.add("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(export.token_types.clone())))
        .map_err(meta)?;
    if !export.merges.is_empty() {
        w.add("tokenizer.ggml.merges", MetaValue::Array(MetaArray::String(export.merges.clone())))
            .map_err(meta)?;
    }
    let tok = &hf.tokenizer;
    if let Some(id) = tok.bos() {
        w.add("tokenizer.ggml.bos_token_id", MetaValue::U32(id)).map_err(meta)?;
    }
    if let Some(id) = tok.eos() {
        w.add("tokenizer.ggml.eos_token_id", MetaValue::U32(id)).map_err(meta)?;
    }
    w.add("tokenizer.ggml.add_bos_token", MetaValue::Bool(tok.add_bos())).map_err(meta)?;
    w.add("tokenizer.ggml.add_eos_token", MetaValue::Bool(tok.add_eos())).map_err(meta)?;
    if !is_bpe {
        w.add("tokenizer.ggml.add_space_prefix", MetaValue::Bool(export.add_space_prefix)).map_err(meta)?;
    }
    Ok(())
}

/// Converts the Hugging Face folder `dir` into the GGUF file `out`, with weight matrices in
/// `outtype` (one of [`CONVERT_TYPES`]). `progress(done, total)` is called per tensor.
pub fn convert_hf_to_gguf(
    dir: &Path,
    out: &Path,
    outtype: GgmlType,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ConvertReport> {
    if !CONVERT_TYPES.contains(&outtype) {
        return Err(Error::Config(format!("cannot convert to {}", outtype.name())));
    }
    if outtype != GgmlType::F32 && !quant::supports_quantize(outtype) {
        return Err(Error::Config(format!("no quantizer for {}", outtype.name())));
    }
    let hf = HfModel::open(dir)?;
    let layout = &hf.layout;
    let mut w = GgufWriter::new();
    let meta = |e: crate::format::gguf_write::GgufWriteError| Error::Config(format!("metadata: {e}"));
    for (k, v) in hf.metadata.metadata() {
        if k.ends_with(".ssm.v_heads_grouped") {
            continue; // how ferrolm reads the folder; the file gets llama.cpp's order (below)
        }
        w.add(k.clone(), v.clone()).map_err(meta)?;
    }
    w.add("general.file_type", MetaValue::U32(file_type(outtype))).map_err(meta)?;
    if !matches!(outtype, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        w.add("general.quantization_version", MetaValue::U32(2)).map_err(meta)?;
    }
    tokenizer_metadata(&mut w, &hf)?;

    let total = hf.tensors.len();
    let mut types: Vec<(GgmlType, usize)> = Vec::new();
    let mut matrices = QuantizeSummary::new(outtype);
    let mut n_written = 0;
    // llama.cpp's converter reorders Qwen 3.5's value heads, not Qwen3-Next's.
    let v_heads = if layout.arch == Arch::Qwen3Next { None } else { qwen35_heads(&hf) };
    for (i, (name, t)) in hf.tensors.iter().enumerate() {
        progress(i + 1, total);
        let out = match expert_part(name) {
            // Experts are written as llama.cpp's 3-D `ffn_*_exps` tensors, when the first is met.
            Some((_, _, e)) if e > 0 => continue,
            Some((layer, proj, _)) => {
                let merged = format!("blk.{layer}.{proj}_exps.weight");
                vec![(merged, merge_experts(&hf, layer, proj, outtype, &mut matrices)?)]
            }
            None => {
                let t = gguf_layout(layout, name, t);
                let t = match v_heads {
                    Some(h) => tiled_v_heads(name, &t, h)?,
                    None => t,
                };
                split_gate_up(&hf, name, convert_one(name, &t, outtype, &mut matrices)?)
            }
        };
        for (name, t) in out {
            match types.iter_mut().find(|(ty, _)| *ty == t.ty) {
                Some((_, n)) => *n += 1,
                None => types.push((t.ty, 1)),
            }
            w.add_tensor(&name, &t.dims, t.ty, t.data().to_vec())
                .map_err(|e| Error::Config(format!("{name}: {e}")))?;
            n_written += 1;
        }
    }
    w.write(out).map_err(|e| Error::Config(format!("writing {}: {e}", out.display())))?;
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertReport { n_tensors: n_written, bytes, types, matrices })
}

/// A Qwen 3.5 folder's delta net heads, when it has more value heads than key heads (which
/// llama.cpp's files store in another order): key heads, value heads, key and value head sizes.
fn qwen35_heads(hf: &HfModel) -> Option<DeltaHeads> {
    let get = |k: &str| {
        hf.metadata.metadata().iter().find(|(n, _)| n.ends_with(k)).and_then(|(_, v)| match v {
            MetaValue::U32(v) => Some(*v as usize),
            _ => None,
        })
    };
    let (nk, nv) = (get(".ssm.group_count")?, get(".ssm.time_step_rank")?);
    let (dk, dv) = (get(".ssm.state_size")?, get(".ssm.inner_size")? / nv.max(1));
    (nk > 0 && nv > nk).then_some(DeltaHeads { nk, nv, dk, dv })
}

/// Qwen 3.5's delta net heads (see [`qwen35_heads`]).
#[derive(Clone, Copy)]
struct DeltaHeads {
    nk: usize,
    nv: usize,
    dk: usize,
    dv: usize,
}

/// A Qwen 3.5 delta net tensor with its value heads in llama.cpp's order: the folder groups
/// them by key head (`g · r + i`, `r = nv / nk`), llama.cpp's converter tiles them (`i · nk +
/// g`), so that value head `h` uses key head `h % nk`. Other tensors as they are.
fn tiled_v_heads(name: &str, t: &TensorRef, h: DeltaHeads) -> Result<TensorRef> {
    let stem = name.split('.').nth(2).unwrap_or_default();
    let es = t.ty.type_size();
    if t.ty.block_size() != 1 {
        return Err(Error::Config(format!("{name}: {} cannot have its heads reordered", t.ty.name())));
    }
    let cols = t.dims.first().copied().unwrap_or(1) as usize * es; // bytes of one row
    let qk_rows = 2 * h.nk * h.dk;
    // (bytes each reordering applies to separately, offset of the value heads in them, bytes of one head)
    let (chunk, offset, unit) = match stem {
        "attn_qkv" | "ssm_conv1d" => (t.data().len(), qk_rows * cols, h.dv * cols),
        "attn_gate" => (t.data().len(), 0, h.dv * cols),
        "ssm_beta" | "ssm_alpha" => (t.data().len(), 0, cols),
        "ssm_a" | "ssm_dt" => (t.data().len(), 0, es),
        "ssm_out" => (cols, 0, h.dv * es),
        _ => return Ok(t.clone()),
    };
    let r = h.nv / h.nk;
    let mut out = t.data().to_vec();
    for (dst, src) in out.chunks_exact_mut(chunk).zip(t.data().chunks_exact(chunk)) {
        for j in 0..h.nv {
            let old = (j % h.nk) * r + j / h.nk;
            let (d0, s0) = (offset + j * unit, offset + old * unit);
            dst[d0..d0 + unit].copy_from_slice(&src[s0..s0 + unit]);
        }
    }
    Ok(TensorRef::owned(t.ty, t.dims.clone(), out))
}

/// A tensor as GGUF stores it: for the architectures whose GGUF RoPE pairs adjacent dimensions
/// (llama, SmolLM 3, Granite) the Q and K rows are permuted, as llama.cpp's converter does.
fn gguf_layout(layout: &super::hf::HfLayout, name: &str, t: &TensorRef) -> TensorRef {
    let interleaved = matches!(layout.arch, Arch::Llama | Arch::SmolLM3 | Arch::Granite | Arch::GraniteMoe);
    if !(interleaved && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight"))) {
        return t.clone();
    }
    let heads = if name.ends_with("attn_q.weight") { layout.n_head } else { layout.n_head_kv };
    let rows = t.dims.get(1).copied().unwrap_or(1) as usize;
    let rb = t.data().len() / rows.max(1);
    TensorRef::owned(t.ty, t.dims.clone(), permute_qk_rows(t.data(), rows, rb, heads))
}

/// One tensor in the output type: vectors and routers (`ffn_gate_inp*`, which llama.cpp's
/// converter writes as F32 and never quantizes) as F32, matrices in `outtype` or its fallback.
fn convert_one(
    name: &str,
    t: &TensorRef,
    outtype: GgmlType,
    matrices: &mut QuantizeSummary,
) -> Result<TensorRef> {
    let router = is_router(name);
    let target = if t.dims.len() == 1 || router { GgmlType::F32 } else { effective_type(outtype, t.dims[0]) };
    if matches!(t.dims.len(), 2 | 3) && !router {
        matrices.record(t.dims[0], Some(target));
    }
    if t.ty == target {
        Ok(t.clone())
    } else if t.dims.len() == 1 || router {
        Ok(TensorRef::from_f32(t.dims.clone(), &t.to_f32(name)?))
    } else {
        convert_matrix(name, t, target)
    }
}

/// `(layer, "ffn_gate" | "ffn_up" | "ffn_down", expert)` of a per-expert tensor name
/// (`blk.3.ffn_up.7.weight`).
fn expert_part(name: &str) -> Option<(usize, &str, usize)> {
    let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
    let (layer, rest) = rest.split_once('.')?;
    let (proj, e) = rest.split_once('.')?;
    if !matches!(proj, "ffn_gate" | "ffn_up" | "ffn_down") {
        return None;
    }
    Some((layer.parse().ok()?, proj, e.parse().ok()?))
}

/// The experts' `proj` matrices of `layer`, each in the output type, as one 3-D tensor
/// `[n_expert, rows, cols]` (GGUF dims `[cols, rows, n_expert]`).
fn merge_experts(
    hf: &HfModel,
    layer: usize,
    proj: &str,
    outtype: GgmlType,
    matrices: &mut QuantizeSummary,
) -> Result<TensorRef> {
    let mut bytes = Vec::new();
    let mut first: Option<(GgmlType, Vec<u64>)> = None;
    let mut n = 0u64;
    while let Some(t) = hf.tensors.get(&format!("blk.{layer}.{proj}.{n}.weight")) {
        let name = format!("blk.{layer}.{proj}.{n}.weight");
        let t = convert_one(&name, t, outtype, matrices)?;
        match &first {
            None => first = Some((t.ty, t.dims.clone())),
            Some((ty, dims)) if *ty != t.ty || *dims != t.dims => {
                return Err(Error::Config(format!("{name}: experts of one layer differ in shape or type")));
            }
            Some(_) => {}
        }
        bytes.extend_from_slice(t.data());
        n += 1;
    }
    let Some((ty, mut dims)) = first else {
        return Err(Error::MissingTensor(format!("blk.{layer}.{proj}.0.weight")));
    };
    dims.push(n);
    Ok(TensorRef::owned(ty, dims, bytes))
}

/// A fused gate-up tensor split the way llama.cpp's loader wants it: Granite MoE's experts
/// (`ffn_gate_up_exps`, `[n_expert, 2 * ff, n_embd]`, each expert's gate rows first) into
/// `ffn_gate_exps` and `ffn_up_exps`, and a shared expert's `ffn_up_shexp` of `2 * ff` rows
/// (when there is no `ffn_gate_shexp`) into gate and up. Any other tensor is kept whole.
/// (Phi-3's dense fused `ffn_up` stays fused: llama.cpp reads it so.)
fn split_gate_up(hf: &HfModel, name: &str, t: TensorRef) -> Vec<(String, TensorRef)> {
    let shared_fused = name.ends_with(".ffn_up_shexp.weight")
        && !hf.tensors.contains(&name.replace(".ffn_up_shexp.", ".ffn_gate_shexp."));
    let (stem, gate, up) = if name.ends_with(".ffn_gate_up_exps.weight") {
        (".ffn_gate_up_exps.", ".ffn_gate_exps.", ".ffn_up_exps.")
    } else if shared_fused {
        (".ffn_up_shexp.", ".ffn_gate_shexp.", ".ffn_up_shexp.")
    } else {
        return vec![(name.to_string(), t)];
    };
    // dims [cols, 2 * ff] or [cols, 2 * ff, n]: blocks of 2 * ff rows, gate half first.
    let rows = t.dims.get(1).copied().unwrap_or(0) as usize;
    let blocks = t.dims.get(2).copied().unwrap_or(1) as usize;
    let block_bytes = t.data().len() / blocks.max(1);
    let half = block_bytes / 2;
    let mut dims = t.dims.clone();
    dims[1] = (rows / 2) as u64;
    let part = |first: bool| {
        let bytes: Vec<u8> = t
            .data()
            .chunks_exact(block_bytes)
            .flat_map(|b| if first { &b[..half] } else { &b[half..] })
            .copied()
            .collect();
        TensorRef::owned(t.ty, dims.clone(), bytes)
    };
    vec![(name.replace(stem, gate), part(true)), (name.replace(stem, up), part(false))]
}
