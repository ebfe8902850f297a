//! Model weights, borrowed zero-copy from the file's memory map.
//!
//! Tensor names are the canonical GGUF names (`blk.N.attn_q.weight`, …); other formats map onto
//! them at load time. Quantization is a property of each [`Weight`], not of the model.

use std::ops::Range;
use std::sync::Arc;

use ferrolm_kernels::{GgmlType, quant};

use super::config::ModelConfig;
use crate::format::Storage;
use crate::format::gguf::GgufFile;
use crate::{Error, Result};

/// A 2-D weight matrix `[rows, cols]` (GGUF dims `[cols, rows]`), rows stored contiguously in
/// its block format.
#[derive(Clone)]
pub struct Weight {
    storage: Arc<Storage>,
    range: Range<usize>,
    /// Block format of the rows.
    pub ty: GgmlType,
    /// Output features (number of rows).
    pub rows: usize,
    /// Input features (elements per row).
    pub cols: usize,
    row_bytes: usize,
}

impl std::fmt::Debug for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Weight({} [{} x {}])", self.ty, self.rows, self.cols)
    }
}

impl Weight {
    /// All rows' bytes.
    pub fn data(&self) -> &[u8] {
        &self.storage.as_bytes()[self.range.clone()]
    }

    /// The bytes of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> &[u8] {
        let start = self.range.start + r * self.row_bytes;
        &self.storage.as_bytes()[start..start + self.row_bytes]
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Dequantizes row `r` into `out` (`cols` elements).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        // Lengths were validated at load time, so this cannot fail.
        let res = quant::dequantize_row(self.ty, self.row(r), &mut out[..self.cols]);
        debug_assert!(res.is_ok());
    }
}

/// The weights of one transformer block.
#[derive(Debug)]
pub struct LayerWeights {
    /// RMSNorm before attention. `[n_embd]`
    pub attn_norm: Vec<f32>,
    /// Query projection. `[q_dim, n_embd]`
    pub wq: Weight,
    /// Key projection. `[kv_dim, n_embd]`
    pub wk: Weight,
    /// Value projection. `[kv_dim, n_embd]`
    pub wv: Weight,
    /// Attention output projection. `[n_embd, q_dim]`
    pub wo: Weight,
    /// Per-head query norm (Gemma 3). `[head_dim]`
    pub q_norm: Option<Vec<f32>>,
    /// Per-head key norm (Gemma 3). `[head_dim]`
    pub k_norm: Option<Vec<f32>>,
    /// Norm of the attention output before the residual add (Gemma). `[n_embd]`
    pub post_attn_norm: Option<Vec<f32>>,
    /// RMSNorm before the FFN. `[n_embd]`
    pub ffn_norm: Vec<f32>,
    /// FFN gate projection. `[n_ff, n_embd]`
    pub w_gate: Weight,
    /// FFN up projection. `[n_ff, n_embd]`
    pub w_up: Weight,
    /// FFN down projection. `[n_embd, n_ff]`
    pub w_down: Weight,
    /// Norm of the FFN output before the residual add (Gemma). `[n_embd]`
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// All weights of a model.
#[derive(Debug)]
pub struct ModelWeights {
    /// Token embeddings. `[n_vocab, n_embd]`
    pub token_embd: Weight,
    /// Transformer blocks.
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm. `[n_embd]`
    pub output_norm: Vec<f32>,
    /// LM head (the embedding table itself when tied). `[n_vocab, n_embd]`
    pub output: Weight,
}

struct Loader<'a> {
    file: &'a GgufFile,
}

impl Loader<'_> {
    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let info = self.file.tensor(name).ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        if info.dims != [cols as u64, rows as u64] {
            return Err(Error::TensorShape {
                name: name.to_string(),
                actual: info.dims.clone(),
                expected: vec![cols as u64, rows as u64],
            });
        }
        if !quant::supports(info.ty) {
            return Err(Error::UnsupportedTensorType {
                name: name.to_string(),
                ty: info.ty.name().to_string(),
            });
        }
        let row_bytes = info.ty.row_bytes(cols as u64).ok_or_else(|| Error::TensorShape {
            name: name.to_string(),
            actual: info.dims.clone(),
            expected: vec![cols as u64, rows as u64],
        })? as usize;
        Ok(Weight {
            storage: self.file.storage().clone(),
            range: self.file.tensor_range(info),
            ty: info.ty,
            rows,
            cols,
            row_bytes,
        })
    }

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let w = self.matrix_1d(name, n)?;
        let mut out = vec![0.0; n];
        quant::dequantize_row(w.ty, w.data(), &mut out).map_err(|e| Error::Config(format!("{name}: {e}")))?;
        Ok(out)
    }

    fn opt_vector(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>> {
        if self.file.tensor(name).is_none() { Ok(None) } else { self.vector(name, n).map(Some) }
    }

    fn matrix_1d(&self, name: &str, n: usize) -> Result<Weight> {
        let info = self.file.tensor(name).ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        if info.dims != [n as u64] {
            return Err(Error::TensorShape {
                name: name.to_string(),
                actual: info.dims.clone(),
                expected: vec![n as u64],
            });
        }
        if !quant::supports(info.ty) {
            return Err(Error::UnsupportedTensorType {
                name: name.to_string(),
                ty: info.ty.name().to_string(),
            });
        }
        Ok(Weight {
            storage: self.file.storage().clone(),
            range: self.file.tensor_range(info),
            ty: info.ty,
            rows: 1,
            cols: n,
            row_bytes: info.size as usize,
        })
    }
}

impl ModelWeights {
    /// Binds every tensor the configuration needs, checking names, shapes and types.
    pub fn from_gguf(file: &GgufFile, cfg: &ModelConfig) -> Result<Self> {
        let l = Loader { file };
        let (d, q, kv, ff, hd) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff, cfg.head_dim);
        let token_embd = l.matrix("token_embd.weight", cfg.n_vocab, d)?;
        let output = if file.tensor("output.weight").is_some() {
            l.matrix("output.weight", cfg.n_vocab, d)?
        } else {
            token_embd.clone()
        };
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let (q_norm, k_norm) = if cfg.qk_norm {
                (Some(l.vector(&n("attn_q_norm"), hd)?), Some(l.vector(&n("attn_k_norm"), hd)?))
            } else {
                (None, None)
            };
            let (post_attn_norm, post_ffn_norm) = if cfg.post_norms {
                (Some(l.vector(&n("post_attention_norm"), d)?), Some(l.vector(&n("post_ffw_norm"), d)?))
            } else {
                (l.opt_vector(&n("post_attention_norm"), d)?, l.opt_vector(&n("post_ffw_norm"), d)?)
            };
            layers.push(LayerWeights {
                attn_norm: l.vector(&n("attn_norm"), d)?,
                wq: l.matrix(&n("attn_q"), q, d)?,
                wk: l.matrix(&n("attn_k"), kv, d)?,
                wv: l.matrix(&n("attn_v"), kv, d)?,
                wo: l.matrix(&n("attn_output"), d, q)?,
                q_norm,
                k_norm,
                post_attn_norm,
                ffn_norm: l.vector(&n("ffn_norm"), d)?,
                w_gate: l.matrix(&n("ffn_gate"), ff, d)?,
                w_up: l.matrix(&n("ffn_up"), ff, d)?,
                w_down: l.matrix(&n("ffn_down"), d, ff)?,
                post_ffn_norm,
            });
        }
        Ok(Self { token_embd, layers, output_norm: l.vector("output_norm.weight", d)?, output })
    }
}
