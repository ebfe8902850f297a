//! A format-independent table of named tensors.
//!
//! GGUF files and Hugging Face folders both end up here, under the canonical GGUF tensor names
//! (`token_embd.weight`, `blk.N.attn_q.weight`, …). A tensor borrows its bytes from a shared
//! [`Storage`] — a file's memory map when the bytes are used as stored, or an owned buffer when
//! loading had to transform them (quantized at load, a norm shifted by one, RoPE factors computed
//! from a config).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use ferrolm_kernels::{GgmlType, quant};

use crate::format::Storage;
use crate::format::gguf::GgufFile;
use crate::{Error, Result};

/// One tensor: its type, its GGUF-order dimensions (innermost first) and where its bytes are.
#[derive(Clone)]
pub struct TensorRef {
    /// The bytes the tensor lives in.
    pub storage: Arc<Storage>,
    /// Byte range within `storage`.
    pub range: Range<usize>,
    /// Element/block format.
    pub ty: GgmlType,
    /// Dimensions, innermost first (GGUF order): a `[rows, cols]` matrix is `[cols, rows]`.
    pub dims: Vec<u64>,
}

impl std::fmt::Debug for TensorRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorRef({} {:?}, {} bytes)", self.ty, self.dims, self.range.len())
    }
}

impl TensorRef {
    /// A tensor owning `bytes`.
    pub fn owned(ty: GgmlType, dims: Vec<u64>, bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        Self { storage: Arc::new(Storage::Owned(bytes)), range: 0..len, ty, dims }
    }

    /// An F32 tensor owning `values`.
    pub fn from_f32(dims: Vec<u64>, values: &[f32]) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::owned(GgmlType::F32, dims, bytes)
    }

    /// The tensor's bytes.
    pub fn data(&self) -> &[u8] {
        &self.storage.as_bytes()[self.range.clone()]
    }

    /// All elements as f32 (`name` for the error message).
    pub fn to_f32(&self, name: &str) -> Result<Vec<f32>> {
        let mut v = vec![0.0f32; self.n_elements() as usize];
        quant::dequantize_row(self.ty, self.data(), &mut v)
            .map_err(|e| Error::Config(format!("{name}: {e}")))?;
        Ok(v)
    }

    /// The rows `rows` of this 2-D tensor (GGUF dims `[cols, n_rows]`), in that order, as an
    /// owned tensor of the same type (`name` for the error message).
    pub fn gather_rows(&self, name: &str, rows: &[usize]) -> Result<TensorRef> {
        let [cols, n_rows] = self.dims[..] else {
            return Err(Error::Config(format!("{name}: {:?} is not a matrix", self.dims)));
        };
        let data = self.data();
        let row_bytes = usize::try_from(n_rows)
            .ok()
            .filter(|&n| n > 0 && data.len().is_multiple_of(n))
            .map(|n| data.len() / n)
            .ok_or_else(|| Error::Config(format!("{name}: {n_rows} rows in {} bytes", data.len())))?;
        let mut bytes = Vec::with_capacity(rows.len() * row_bytes);
        for &r in rows {
            if r as u64 >= n_rows {
                return Err(Error::Config(format!("{name}: row {r} of {n_rows}")));
            }
            bytes.extend_from_slice(&data[r * row_bytes..(r + 1) * row_bytes]);
        }
        Ok(Self::owned(self.ty, vec![cols, rows.len() as u64], bytes))
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Named tensors, in name order.
#[derive(Clone, Debug, Default)]
pub struct TensorMap {
    tensors: BTreeMap<String, TensorRef>,
}

impl TensorMap {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every tensor of a GGUF file, borrowed from its memory map.
    pub fn from_gguf(file: &GgufFile) -> Self {
        let mut map = Self::new();
        for info in file.tensors() {
            map.insert(
                info.name.clone(),
                TensorRef {
                    storage: file.storage().clone(),
                    range: file.tensor_range(info),
                    ty: info.ty,
                    dims: info.dims.clone(),
                },
            );
        }
        map
    }

    /// Adds or replaces a tensor.
    pub fn insert(&mut self, name: impl Into<String>, t: TensorRef) {
        self.tensors.insert(name.into(), t);
    }

    /// Removes a tensor.
    pub fn remove(&mut self, name: &str) -> Option<TensorRef> {
        self.tensors.remove(name)
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&TensorRef> {
        self.tensors.get(name)
    }

    /// Whether a tensor called `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// All tensors in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &TensorRef)> {
        self.tensors.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn gathered_rows_keep_their_bytes_and_out_of_range_rows_are_refused() {
        let t = TensorRef::from_f32(vec![2, 3], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
        let g = t.gather_rows("t", &[2, 0]).unwrap();
        assert_eq!(g.dims, [2, 2]);
        assert_eq!(g.to_f32("g").unwrap(), [20.0, 21.0, 0.0, 1.0]);
        assert!(t.gather_rows("t", &[3]).is_err());
        assert!(TensorRef::from_f32(vec![4], &[0.0; 4]).gather_rows("v", &[0]).is_err());
    }
}
