//! A small safetensors writer, for tests and fixtures (no streaming: the file is built in memory).

use std::path::Path;

use super::{Res, SafetensorsError, StDtype};

/// One tensor to write: name, element type, shape (outermost first) and its raw little-endian bytes.
pub type StTensorData<'a> = (&'a str, StDtype, &'a [usize], &'a [u8]);

/// Builds a safetensors image of `tensors` in the given order, with a `__metadata__` map when
/// `metadata` is not empty. The header is padded with spaces to a multiple of 8 bytes, as the
/// reference writer does, so tensor data starts aligned.
///
/// Fails with [`SafetensorsError::InvalidTensor`] when a tensor's byte count does not match its
/// shape and type, or a name is repeated or is `__metadata__`.
pub fn safetensors_bytes(tensors: &[StTensorData<'_>], metadata: &[(&str, &str)]) -> Res<Vec<u8>> {
    let invalid = |name: &str, reason: String| SafetensorsError::InvalidTensor {
        path: "<safetensors writer>".into(),
        name: name.to_string(),
        reason,
    };
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let meta: serde_json::Map<String, serde_json::Value> =
            metadata.iter().map(|&(k, v)| (k.to_string(), serde_json::Value::from(v))).collect();
        header.insert(super::METADATA_KEY.to_string(), serde_json::Value::Object(meta));
    }
    let mut offset = 0usize;
    for &(name, dtype, shape, bytes) in tensors {
        let need = shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| invalid(name, format!("shape {shape:?} is too large")))?;
        if need != bytes.len() {
            return Err(invalid(
                name,
                format!("{} bytes given, shape {shape:?} of {dtype} needs {need}", bytes.len()),
            ));
        }
        if name == super::METADATA_KEY || header.contains_key(name) {
            return Err(invalid(name, "name repeated or reserved".into()));
        }
        let end = offset + bytes.len();
        let entry =
            serde_json::json!({ "dtype": dtype.name(), "shape": shape, "data_offsets": [offset, end] });
        header.insert(name.to_string(), entry);
        offset = end;
    }
    let mut json =
        serde_json::to_vec(&header).map_err(|e| invalid("", format!("cannot serialize the header: {e}")))?;
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + offset);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    for &(_, _, _, bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

/// Writes a safetensors file of `tensors` (with `__metadata__ = {"format": "pt"}` like PyTorch
/// exports); see [`safetensors_bytes`]. Meant for tests and fixtures, e.g. small Hugging Face
/// model folders built on the fly.
pub fn write_safetensors(path: impl AsRef<Path>, tensors: &[StTensorData<'_>]) -> Res<()> {
    let path = path.as_ref();
    let bytes = safetensors_bytes(tensors, &[("format", "pt")])?;
    std::fs::write(path, bytes).map_err(|source| SafetensorsError::Io { path: path.to_path_buf(), source })
}
