//! Safetensors reader: memory-mapped files, and the folder-level set of shards a Hugging Face model
//! ships (`model.safetensors`, or `model.safetensors.index.json` with its `model-0000i-of-0000n`
//! shards).
//!
//! A file is an 8-byte little-endian header length, a JSON header of that length, then the data
//! section. The header maps each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}`
//! (offsets relative to the data section) and may hold a `__metadata__` map of strings.
//!
//! Everything is checked before use: the header must lie inside the file and be valid JSON, each
//! tensor's byte count must equal its element count × element size (checked arithmetic), its range
//! must lie inside the data section, and no two tensors may overlap. Malformed input gives a
//! [`SafetensorsError`] naming the file, never a panic. Tensor data stays in the mapping:
//! [`StTensor::range`] is an absolute byte range of [`SafetensorsFile::storage`].
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ferrolm_format::safetensors::SafetensorsSet;
//! let set = SafetensorsSet::open_dir("SmolLM2-135M-Instruct")?;
//! if let Some((storage, t)) = set.tensor("model.embed_tokens.weight") {
//!     let bytes = &storage.as_bytes()[t.range.clone()];
//!     println!("{:?} {:?}: {} bytes", t.dtype, t.shape, bytes.len());
//! }
//! # Ok(()) }
//! ```

mod set;
#[cfg(test)]
mod tests;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrolm_kernels::GgmlType;

use crate::storage::Storage;

pub use set::{INDEX_FILE, SINGLE_FILE, SafetensorsSet};
pub use write::{StTensorData, safetensors_bytes, write_safetensors};

/// Headers larger than this are rejected (the reference implementation's limit).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// The name of the optional string map in the header.
const METADATA_KEY: &str = "__metadata__";

/// Errors reading safetensors files and folders.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// A file or folder could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file's header or tensor table is malformed.
    #[error("{}: invalid safetensors file: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor entry of the header is malformed.
    #[error("{}: tensor '{name}': {reason}", path.display())]
    InvalidTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// `model.safetensors.index.json` is malformed.
    #[error("{}: invalid safetensors index: {reason}", path.display())]
    InvalidIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The index lists a shard that is not in the folder.
    #[error("{}: shard '{shard}' listed in the index is missing", index.display())]
    MissingShard {
        /// The index file.
        index: PathBuf,
        /// The shard's file name as the index gives it.
        shard: String,
    },
    /// The index places a tensor in a shard that does not contain it.
    #[error("{}: tensor '{name}' listed in the index is not in this shard", shard.display())]
    TensorNotInShard {
        /// The shard file.
        shard: PathBuf,
        /// The tensor.
        name: String,
    },
    /// Two files of an unindexed folder hold a tensor of the same name.
    #[error("tensor '{name}' is in both {} and {}", first.display(), second.display())]
    DuplicateTensor {
        /// The tensor.
        name: String,
        /// The file read first.
        first: PathBuf,
        /// The other file.
        second: PathBuf,
    },
    /// The folder has no safetensors weights.
    #[error("{}: no model.safetensors, model.safetensors.index.json or *.safetensors file", dir.display())]
    NoWeights {
        /// The folder.
        dir: PathBuf,
    },
}

type Res<T> = Result<T, SafetensorsError>;

/// Element types of safetensors tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum StDtype {
    /// Boolean, one byte.
    BOOL,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// 8-bit float, 5 exponent bits and 2 mantissa bits.
    F8_E5M2,
    /// 8-bit float, 4 exponent bits and 3 mantissa bits.
    F8_E4M3,
    /// 8-bit power-of-two scale (exponent only).
    F8_E8M0,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE single precision.
    F32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE double precision.
    F64,
}

impl StDtype {
    /// Every type, for lookups by name.
    const ALL: [StDtype; 16] = [
        StDtype::BOOL,
        StDtype::U8,
        StDtype::I8,
        StDtype::F8_E5M2,
        StDtype::F8_E4M3,
        StDtype::F8_E8M0,
        StDtype::I16,
        StDtype::U16,
        StDtype::F16,
        StDtype::BF16,
        StDtype::I32,
        StDtype::U32,
        StDtype::F32,
        StDtype::I64,
        StDtype::U64,
        StDtype::F64,
    ];

    /// The name the header uses (`"F32"`, `"BF16"`, …).
    pub fn name(self) -> &'static str {
        match self {
            StDtype::BOOL => "BOOL",
            StDtype::U8 => "U8",
            StDtype::I8 => "I8",
            StDtype::F8_E5M2 => "F8_E5M2",
            StDtype::F8_E4M3 => "F8_E4M3",
            StDtype::F8_E8M0 => "F8_E8M0",
            StDtype::I16 => "I16",
            StDtype::U16 => "U16",
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::I32 => "I32",
            StDtype::U32 => "U32",
            StDtype::F32 => "F32",
            StDtype::I64 => "I64",
            StDtype::U64 => "U64",
            StDtype::F64 => "F64",
        }
    }

    /// The type a header name stands for.
    pub fn from_name(name: &str) -> Option<StDtype> {
        StDtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            StDtype::BOOL | StDtype::U8 | StDtype::I8 => 1,
            StDtype::F8_E5M2 | StDtype::F8_E4M3 | StDtype::F8_E8M0 => 1,
            StDtype::I16 | StDtype::U16 | StDtype::F16 | StDtype::BF16 => 2,
            StDtype::I32 | StDtype::U32 | StDtype::F32 => 4,
            StDtype::I64 | StDtype::U64 | StDtype::F64 => 8,
        }
    }

    /// The GGML type with the same element layout, for the float types the kernels compute with
    /// (F32, F16, BF16); `None` for the others.
    pub fn to_ggml(self) -> Option<GgmlType> {
        match self {
            StDtype::F32 => Some(GgmlType::F32),
            StDtype::F16 => Some(GgmlType::F16),
            StDtype::BF16 => Some(GgmlType::BF16),
            _ => None,
        }
    }
}

impl std::fmt::Display for StDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StTensor {
    /// Name in the header.
    pub name: String,
    /// Element type.
    pub dtype: StDtype,
    /// Dimensions, outermost first (PyTorch order; the reverse of GGUF's).
    pub shape: Vec<usize>,
    /// Absolute byte range of the data in the file's storage.
    pub range: Range<usize>,
}

impl StTensor {
    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        // The product was checked not to overflow when the header was read.
        self.shape.iter().product()
    }
}

/// A parsed safetensors file whose tensor data stays in the (usually memory-mapped) storage.
pub struct SafetensorsFile {
    storage: Arc<Storage>,
    path: PathBuf,
    /// Tensors in data order.
    tensors: Vec<StTensor>,
    by_name: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
    data_start: usize,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

/// A header entry as the JSON gives it, before validation.
#[derive(serde::Deserialize)]
struct RawTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

impl SafetensorsFile {
    /// Maps a file read-only and parses its header.
    pub fn open(path: impl AsRef<Path>) -> Res<SafetensorsFile> {
        let path = path.as_ref();
        let storage =
            Storage::map(path).map_err(|source| SafetensorsError::Io { path: path.to_path_buf(), source })?;
        Self::parse(Arc::new(storage), path.to_path_buf())
    }

    /// Parses a file held in memory; `path` only names it in errors.
    pub fn from_bytes(bytes: Vec<u8>, path: impl Into<PathBuf>) -> Res<SafetensorsFile> {
        Self::parse(Arc::new(Storage::Owned(bytes)), path.into())
    }

    fn parse(storage: Arc<Storage>, path: PathBuf) -> Res<SafetensorsFile> {
        let bytes = storage.as_bytes();
        let invalid = |reason: String| SafetensorsError::Invalid { path: path.clone(), reason };
        let Some((len_bytes, rest)) = bytes.split_first_chunk::<8>() else {
            return Err(invalid(format!("{} bytes is too short for the 8-byte header length", bytes.len())));
        };
        let header_len = u64::from_le_bytes(*len_bytes);
        if header_len > MAX_HEADER_LEN {
            return Err(invalid(format!("header length {header_len} exceeds the limit of {MAX_HEADER_LEN}")));
        }
        if header_len > rest.len() as u64 {
            return Err(invalid(format!(
                "header length {header_len} exceeds the {} bytes after the length",
                rest.len()
            )));
        }
        // Both fit in usize: header_len <= rest.len().
        let header_len = header_len as usize;
        let header = &rest[..header_len];
        let data_start = 8 + header_len;
        let data_len = rest.len() - header_len;

        let entries: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header)
            .map_err(|e| invalid(format!("header is not a JSON object: {e}")))?;

        let mut metadata = BTreeMap::new();
        let mut tensors = Vec::with_capacity(entries.len());
        for (name, value) in entries {
            if name == METADATA_KEY {
                metadata =
                    parse_metadata(value).map_err(|reason| invalid(format!("{METADATA_KEY}: {reason}")))?;
                continue;
            }
            let tensor = parse_tensor(&name, value, data_start, data_len).map_err(|reason| {
                SafetensorsError::InvalidTensor { path: path.clone(), name: name.clone(), reason }
            })?;
            tensors.push(tensor);
        }

        // Data order; empty tensors first at equal offsets so they never count as overlapping.
        tensors.sort_by_key(|t| (t.range.start, t.range.end));
        let mut prev: Option<&StTensor> = None;
        for t in tensors.iter().filter(|t| !t.range.is_empty()) {
            if let Some(p) = prev
                && t.range.start < p.range.end
            {
                return Err(invalid(format!("tensors '{}' and '{}' overlap", p.name, t.name)));
            }
            prev = Some(t);
        }
        let by_name = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(SafetensorsFile { storage, path, tensors, by_name, metadata, data_start })
    }

    /// The file's path (the name given to [`SafetensorsFile::from_bytes`] for in-memory files).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes the tensor ranges index.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&StTensor> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// All tensors, in data order.
    pub fn tensors(&self) -> &[StTensor] {
        &self.tensors
    }

    /// Tensor names, in data order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.tensors.iter().map(|t| t.name.as_str())
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the file has no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The header's `__metadata__` strings (empty when absent).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Absolute offset of the data section.
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// A tensor's bytes.
    pub fn data(&self, tensor: &StTensor) -> &[u8] {
        // Ranges of this file's tensors were checked; a foreign tensor gives an empty slice.
        self.storage.as_bytes().get(tensor.range.clone()).unwrap_or_default()
    }
}

/// Reads `__metadata__`: an object of strings.
fn parse_metadata(value: serde_json::Value) -> Result<BTreeMap<String, String>, String> {
    let serde_json::Value::Object(map) = value else {
        return Err("expected an object of strings".into());
    };
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => Err(format!("value of '{k}' is {other}, expected a string")),
        })
        .collect()
}

/// Validates one tensor entry against the data section `[data_start, data_start + data_len)`.
fn parse_tensor(
    name: &str,
    value: serde_json::Value,
    data_start: usize,
    data_len: usize,
) -> Result<StTensor, String> {
    let raw: RawTensor = serde_json::from_value(value).map_err(|e| format!("malformed entry: {e}"))?;
    let dtype = StDtype::from_name(&raw.dtype).ok_or_else(|| format!("unknown dtype '{}'", raw.dtype))?;
    let shape = raw
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} is too large")))
        .collect::<Result<Vec<usize>, String>>()?;
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} has too many elements"))?;
    let nbytes =
        numel.checked_mul(dtype.size()).ok_or_else(|| format!("shape {shape:?} of {dtype} is too large"))?;
    let (begin, end) = raw.data_offsets;
    if begin > end {
        return Err(format!("data_offsets [{begin}, {end}] are reversed"));
    }
    if end > data_len as u64 {
        return Err(format!("data_offsets [{begin}, {end}] run past the data section of {data_len} bytes"));
    }
    // Both offsets fit in usize: end <= data_len.
    let (begin, end) = (begin as usize, end as usize);
    if end - begin != nbytes {
        return Err(format!(
            "data_offsets [{begin}, {end}] hold {} bytes, but shape {shape:?} of {dtype} needs {nbytes}",
            end - begin
        ));
    }
    // data_start + end <= file length, so neither sum overflows.
    Ok(StTensor { name: name.to_string(), dtype, shape, range: data_start + begin..data_start + end })
}
