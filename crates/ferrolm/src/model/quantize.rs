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

/// Whether a tensor is a weight matrix that quantization applies to: two dimensions (or three:
/// a mixture's experts), stored as floats, and not a router (`ffn_gate_inp*`, which llama.cpp
/// keeps as stored too: its few rows pick the experts). Norms, biases and RoPE factors (one
/// dimension) stay as they are.
fn is_quantizable(name: &str, t: &TensorRef) -> bool {
    matches!(t.dims.len(), 2 | 3)
        && matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        && !is_router(name)
}

/// Whether a tensor is a mixture's router (`ffn_gate_inp`, `ffn_gate_inp_shexp`): kept in
/// float, never quantized, as llama.cpp keeps it.
pub(crate) fn is_router(name: &str) -> bool {
    name.contains(".ffn_gate_inp")
}

/// What quantizing a set of tensors did to its weight matrices (two-dimensional tensors).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuantizeSummary {
    /// The type asked for.
    pub target: Option<GgmlType>,
    /// Float matrices written, per type, in first-seen order (the target and its fallbacks).
    pub written: Vec<(GgmlType, usize)>,
    /// Matrices written in a fallback type because their rows do not fit the target's blocks.
    pub n_fallback: usize,
    /// The distinct row lengths (in elements) of those fallback matrices, ascending.
    pub fallback_row_lengths: Vec<u64>,
    /// Matrices kept as stored because they are already quantized (not floats).
    pub n_kept: usize,
}

impl QuantizeSummary {
    /// An empty summary for a quantization to `target`.
    pub fn new(target: GgmlType) -> Self {
        Self { target: Some(target), ..Self::default() }
    }

    /// Counts a matrix stored as `stored`, `cols` elements a row, written as `written`
    /// (`None`: kept as stored because it is not a float matrix).
    pub fn record(&mut self, cols: u64, written: Option<GgmlType>) {
        let Some(ty) = written else {
            self.n_kept += 1;
            return;
        };
        match self.written.iter_mut().find(|(t, _)| *t == ty) {
            Some((_, n)) => *n += 1,
            None => self.written.push((ty, 1)),
        }
        if self.target.is_some_and(|t| t != ty) {
            self.n_fallback += 1;
            if let Err(i) = self.fallback_row_lengths.binary_search(&cols) {
                self.fallback_row_lengths.insert(i, cols);
            }
        }
    }

    /// Float matrices written (quantized or re-encoded), all types together.
    pub fn n_written(&self) -> usize {
        self.written.iter().map(|(_, n)| n).sum()
    }

    /// One line for a user: the types written, the fallbacks and why, the matrices kept.
    pub fn describe(&self) -> String {
        let target = self.target.map(|t| t.name().to_ascii_lowercase()).unwrap_or_default();
        let types: Vec<String> = self.written.iter().map(|(t, n)| format!("{n} {}", t.name())).collect();
        let mut line = format!(
            "{} of {} weight matrices written ({})",
            self.n_written(),
            self.n_written() + self.n_kept,
            if types.is_empty() { "none".into() } else { types.join(", ") }
        );
        if self.n_fallback > 0 {
            let block = self.target.map(|t| t.block_size()).unwrap_or(0);
            let lens: Vec<String> = self.fallback_row_lengths.iter().map(u64::to_string).collect();
            line.push_str(&format!(
                "; {} not as {target}: their rows ({} elements) are not a multiple of its {block}-element blocks",
                self.n_fallback,
                lens.join(", ")
            ));
        }
        if self.n_kept > 0 {
            line.push_str(&format!("; {} kept as stored (already quantized)", self.n_kept));
        }
        line
    }
}

/// Converts every float weight matrix of `tensors` to `target` (or its fallback, see
/// [`effective_type`]), row by row in parallel. Other tensors are kept, zero-copy.
pub fn quantize_tensors(tensors: &TensorMap, target: GgmlType) -> Result<TensorMap> {
    quantize_tensors_summarized(tensors, target).map(|(out, _)| out)
}

/// [`quantize_tensors`], also saying which types the weight matrices got and which were kept.
pub fn quantize_tensors_summarized(
    tensors: &TensorMap,
    target: GgmlType,
) -> Result<(TensorMap, QuantizeSummary)> {
    if !quant::supports_quantize(target) {
        return Err(Error::Config(format!("cannot quantize to {}", target.name())));
    }
    let mut out = TensorMap::new();
    let mut summary = QuantizeSummary::new(target);
    for (name, t) in tensors.iter() {
        if !is_quantizable(name, t) {
            if matches!(t.dims.len(), 2 | 3) {
                summary.record(t.dims[0], None);
            }
            out.insert(name, t.clone());
            continue;
        }
        let ty = effective_type(target, t.dims[0]);
        summary.record(t.dims[0], Some(ty));
        if ty == t.ty {
            out.insert(name, t.clone());
            continue;
        }
        out.insert(name, convert_matrix(name, t, ty)?);
    }
    Ok((out, summary))
}

/// Re-encodes a `[rows, cols]` matrix (or a stack of them: `[n, rows, cols]`) in block format
/// `ty`.
pub fn convert_matrix(name: &str, t: &TensorRef, ty: GgmlType) -> Result<TensorRef> {
    let bad = |e: String| Error::Config(format!("{name}: {e}"));
    let cols = t.dims[0] as usize;
    let rows = t.dims[1..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d as usize))
        .ok_or_else(|| bad("too large".into()))?;
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
    fn summary_counts_fallbacks_and_kept_matrices() {
        let vals: Vec<f32> = (0..96 * 2).map(|i| (i % 7) as f32 / 7.0).collect();
        let mut m = TensorMap::new();
        m.insert("a.weight", TensorRef::from_f32(vec![96, 2], &vals));
        let q = quantize_tensors(&m, GgmlType::Q8_0).expect("q8_0");
        let (_, s) = quantize_tensors_summarized(&q, GgmlType::Q4_K).expect("q4_k");
        // Already quantized: kept as stored, nothing written.
        assert_eq!((s.n_written(), s.n_kept, s.n_fallback), (0, 1, 0));
        assert!(s.describe().contains("1 kept as stored"), "{}", s.describe());
        let (_, s) = quantize_tensors_summarized(&m, GgmlType::Q4_K).expect("q4_k");
        assert_eq!(s.written, vec![(GgmlType::Q5_0, 1)]);
        assert_eq!((s.n_fallback, s.fallback_row_lengths.clone()), (1, vec![96]));
        assert!(
            s.describe().contains("(96 elements) are not a multiple of its 256-element"),
            "{}",
            s.describe()
        );
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
