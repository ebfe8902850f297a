//! Quantizing float weights at load time (or for `ferrolm convert`).

use ferrolm_kernels::{GgmlType, quant};
use rayon::prelude::*;

use super::tensors::{TensorMap, TensorRef};
use crate::{Error, Result};

/// The block formats weights can be quantized to at load time.
pub const LOAD_QUANT_TYPES: [GgmlType; 4] = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::F16];

/// The type a `[rows, cols]` float matrix gets when `target` is asked for: `target` if rows of
/// `cols` elements fit its blocks, else the nearest format that fits (as llama.cpp falls back
/// for tensors whose rows are not a multiple of 256).
pub fn effective_type(target: GgmlType, cols: u64) -> GgmlType {
    let fits = |t: GgmlType| cols.is_multiple_of(t.block_size() as u64);
    let chain: &[GgmlType] = match target {
        GgmlType::Q4_K => &[GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::F16],
        GgmlType::Q4_0 => &[GgmlType::Q4_0, GgmlType::F16],
        GgmlType::Q8_0 => &[GgmlType::Q8_0, GgmlType::F16],
        _ => &[target, GgmlType::F16],
    };
    chain.iter().copied().find(|&t| fits(t)).unwrap_or(GgmlType::F32)
}

/// Whether a tensor is a weight matrix that quantization applies to: two dimensions, stored as
/// floats. Norms, biases and RoPE factors (one dimension) stay as they are.
fn is_quantizable(t: &TensorRef) -> bool {
    t.dims.len() == 2 && matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Converts every float weight matrix of `tensors` to `target` (or its fallback, see
/// [`effective_type`]), row by row in parallel. Other tensors are kept, zero-copy.
pub fn quantize_tensors(tensors: &TensorMap, target: GgmlType) -> Result<TensorMap> {
    if !quant::supports_quantize(target) {
        return Err(Error::Config(format!("cannot quantize to {}", target.name())));
    }
    let mut out = TensorMap::new();
    for (name, t) in tensors.iter() {
        if !is_quantizable(t) {
            out.insert(name, t.clone());
            continue;
        }
        let ty = effective_type(target, t.dims[0]);
        if ty == t.ty {
            out.insert(name, t.clone());
            continue;
        }
        out.insert(name, convert_matrix(name, t, ty)?);
    }
    Ok(out)
}

/// Re-encodes a `[rows, cols]` matrix in block format `ty`.
pub fn convert_matrix(name: &str, t: &TensorRef, ty: GgmlType) -> Result<TensorRef> {
    let bad = |e: String| Error::Config(format!("{name}: {e}"));
    let (cols, rows) = (t.dims[0] as usize, t.dims[1] as usize);
    let src_rb = t.ty.row_bytes(cols as u64).ok_or_else(|| bad("bad row length".into()))? as usize;
    let dst_rb =
        ty.row_bytes(cols as u64).ok_or_else(|| bad(format!("rows of {cols} do not fit {ty}")))? as usize;
    if src_rb * rows != t.data().len() {
        return Err(bad("size does not match its shape".into()));
    }
    let mut bytes = vec![0u8; dst_rb * rows];
    bytes.par_chunks_mut(dst_rb).zip(t.data().par_chunks(src_rb)).try_for_each_init(
        || vec![0.0f32; cols],
        |buf, (dst, src)| -> Result<()> {
            quant::dequantize_row(t.ty, src, buf).map_err(|e| bad(e.to_string()))?;
            quant::quantize_row(ty, buf, dst).map_err(|e| bad(e.to_string()))
        },
    )?;
    Ok(TensorRef::owned(ty, t.dims.clone(), bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_follows_row_length() {
        assert_eq!(effective_type(GgmlType::Q4_K, 512), GgmlType::Q4_K);
        assert_eq!(effective_type(GgmlType::Q4_K, 96), GgmlType::Q5_0);
        assert_eq!(effective_type(GgmlType::Q4_0, 48), GgmlType::F16);
        assert_eq!(effective_type(GgmlType::Q8_0, 64), GgmlType::Q8_0);
    }

    #[test]
    fn quantizes_matrices_and_keeps_vectors() {
        let vals: Vec<f32> = (0..64 * 4).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let mut m = TensorMap::new();
        m.insert("blk.0.attn_q.weight", TensorRef::from_f32(vec![64, 4], &vals));
        m.insert("blk.0.attn_norm.weight", TensorRef::from_f32(vec![64], &vals[..64]));
        let q = quantize_tensors(&m, GgmlType::Q8_0).expect("quantize");
        let w = q.get("blk.0.attn_q.weight").expect("weight");
        assert_eq!(w.ty, GgmlType::Q8_0);
        assert_eq!(q.get("blk.0.attn_norm.weight").expect("norm").ty, GgmlType::F32);
        let mut row = vec![0.0; 64];
        quant::dequantize_row(w.ty, &w.data()[34 * 2..34 * 4], &mut row).expect("dequantize");
        for (a, b) in row.iter().zip(&vals[64..128]) {
            assert!((a - b).abs() < 0.01, "{a} vs {b}");
        }
    }
}
