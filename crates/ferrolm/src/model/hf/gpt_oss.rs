//! gpt-oss's own tensors in a Hugging Face folder, turned into llama.cpp's GGUF layout.
//!
//! transformers keeps a layer's experts fused and input-major: `mlp.experts.gate_up_proj`
//! `[n_expert, n_embd, 2 * n_ff]` with each gate column followed by its up column, and
//! `mlp.experts.down_proj` `[n_expert, n_ff, n_embd]` (`x @ W`). The model reads output-major
//! matrices (`[n_ff, n_embd]` per expert), so these are transposed and de-interleaved once, at
//! load, into owned `ffn_{gate,up,down}_exps` tensors of the stored element type; the biases
//! are split the same way. The router and the attention sinks only change names. Checkpoints
//! whose experts are MXFP4 blocks (`*_blocks`, `*_scales`, as OpenAI ships gpt-oss) are refused
//! with an error that says how to convert them.

use crate::model::tensors::TensorRef;
use crate::{Error, Result};
use ferrolm_kernels::GgmlType;

/// A layer tensor of gpt-oss's own: `(layer, name within the layer)`, for the names this
/// module maps (the rest go through the common mapping).
pub(super) fn layer_tensor(hf: &str) -> Option<(usize, &str)> {
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, name) = rest.split_once('.')?;
    let ours = name.starts_with("mlp.") || name == "self_attn.sinks";
    ours.then(|| layer.parse().ok().map(|l| (l, name))).flatten()
}

/// The GGUF tensors of layer tensor `name` of `layer` (see [`layer_tensor`]).
pub(super) fn tensors((layer, name): (usize, &str), t: &TensorRef) -> Result<Vec<(String, TensorRef)>> {
    let blk = |s: &str| format!("blk.{layer}.{s}");
    let renamed = |s: &str| Ok(vec![(blk(s), t.clone())]);
    match name {
        "self_attn.sinks" => renamed("attn_sinks.weight"),
        "mlp.router.weight" => renamed("ffn_gate_inp.weight"),
        "mlp.router.bias" => renamed("ffn_gate_inp.bias"),
        "mlp.experts.down_proj_bias" => renamed("ffn_down_exps.bias"),
        "mlp.experts.down_proj" => {
            let [n_expert, n_ff, n_embd] = dims3(name, t)?;
            // dst[e][o][i] = src[e][i][o]
            let down = gather(t, [n_expert, n_embd, n_ff], |e, o, i| (e * n_ff + i) * n_embd + o)?;
            Ok(vec![(blk("ffn_down_exps.weight"), down)])
        }
        "mlp.experts.gate_up_proj" => {
            let [n_expert, n_embd, two_ff] = dims3(name, t)?;
            let ff = two_ff / 2;
            // gate[e][j][i] = src[e][i][2j], up[e][j][i] = src[e][i][2j + 1]
            let part =
                |k: usize| gather(t, [n_expert, ff, n_embd], |e, j, i| (e * n_embd + i) * two_ff + 2 * j + k);
            Ok(vec![(blk("ffn_gate_exps.weight"), part(0)?), (blk("ffn_up_exps.weight"), part(1)?)])
        }
        "mlp.experts.gate_up_proj_bias" => {
            let [two_ff, n_expert] = t.dims[..] else { return Err(shape_error(name, t)) };
            let (two_ff, n_expert) = (two_ff as usize, n_expert as usize);
            let ff = two_ff / 2;
            let part = |k: usize| gather(t, [1, n_expert, ff], |_, e, j| e * two_ff + 2 * j + k);
            let [gate, up] = [part(0)?, part(1)?].map(|mut b| {
                b.dims = vec![ff as u64, n_expert as u64];
                b
            });
            Ok(vec![(blk("ffn_gate_exps.bias"), gate), (blk("ffn_up_exps.bias"), up)])
        }
        n if n.ends_with("_blocks") || n.ends_with("_scales") => Err(Error::Config(format!(
            "model.layers.{layer}.{n}: this gpt-oss folder stores its experts as MXFP4 blocks, which \
             ferrolm does not read from a folder; convert it with llama.cpp's convert_hf_to_gguf.py \
             (it keeps MXFP4) and load the GGUF"
        ))),
        other => Err(Error::Config(format!("model.layers.{layer}.{other}: not a gpt-oss tensor"))),
    }
}

/// The three dimensions of a 3-D tensor, outermost first (`[n_expert, rows, cols]`).
fn dims3(name: &str, t: &TensorRef) -> Result<[usize; 3]> {
    match t.dims[..] {
        [c, r, e] if c % 2 == 0 || !name.ends_with("gate_up_proj") => {
            Ok([e as usize, r as usize, c as usize])
        }
        _ => Err(shape_error(name, t)),
    }
}

fn shape_error(name: &str, t: &TensorRef) -> Error {
    Error::Config(format!("gpt-oss tensor {name} has an unexpected shape {:?}", t.dims))
}

/// A new tensor of `t`'s element type and shape `[a, b, c]` (outermost first) whose element
/// `(x, y, z)` is `t`'s element `src(x, y, z)` (a flat index).
fn gather(
    t: &TensorRef,
    [a, b, c]: [usize; 3],
    src: impl Fn(usize, usize, usize) -> usize,
) -> Result<TensorRef> {
    let size = match t.ty {
        GgmlType::F32 => 4,
        GgmlType::F16 | GgmlType::BF16 => 2,
        other => {
            return Err(Error::Config(format!(
                "gpt-oss experts stored as {} cannot be rearranged",
                other.name()
            )));
        }
    };
    let data = t.data();
    let n: usize = t.dims.iter().product::<u64>() as usize;
    if data.len() != n * size || a * b * c > n {
        return Err(Error::Config(format!("gpt-oss tensor of shape {:?} has {} bytes", t.dims, data.len())));
    }
    let mut out = Vec::with_capacity(a * b * c * size);
    for x in 0..a {
        for y in 0..b {
            for z in 0..c {
                let i = src(x, y, z) * size;
                out.extend_from_slice(&data[i..i + size]);
            }
        }
    }
    let dims = if a == 1 { vec![c as u64, b as u64] } else { vec![c as u64, b as u64, a as u64] };
    Ok(TensorRef::owned(t.ty, dims, out))
}
