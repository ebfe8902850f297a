//! GGUF reader (versions 2 and 3): header, metadata, tensor table, memory-mapped tensor data.
//!
//! Every count and length in the file is checked against the bytes that remain before anything
//! is allocated, so a hostile file cannot make the reader allocate absurd memory, and every
//! tensor's data range is checked to lie inside the file and not to overlap another tensor.
//! As llama.cpp's reader requires, the tensors tile the data section: in offset order each one
//! starts where the one before ends, padded to the alignment (a gap means the table does not
//! describe the data, e.g. a tensor re-typed to a smaller type).
//! Tensor data is exposed as zero-copy byte slices of the mapping.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use ferrolm_kernels::GgmlType;

use crate::storage::Storage;

mod value;

pub use value::{MetaArray, MetaValue};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML tensors have at most this many dimensions.
pub const MAX_DIMS: usize = 4;
/// Nested arrays deeper than this are rejected.
pub(crate) const MAX_ARRAY_DEPTH: usize = 8;
/// Upper bound on what one container preallocates from a count read from the file. Counts are
/// checked against the bytes that remain, but an element in memory can be several times larger
/// than its smallest encoding (a 56-byte metadata entry for 13 bytes on disk), so trusting a
/// count fully would let a corrupt multi-gigabyte file ask for tens of gigabytes up front.
/// Beyond this, containers grow only as elements are actually parsed.
const MAX_PREALLOC_BYTES: usize = 1 << 20;

/// A capacity for `n` elements of `T` announced by the file, capped at [`MAX_PREALLOC_BYTES`].
fn cautious_capacity<T>(n: u64) -> usize {
    let cap = MAX_PREALLOC_BYTES / std::mem::size_of::<T>().max(1);
    n.min(cap as u64) as usize
}

/// Errors reading a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file (magic bytes {0:02x?}, expected \"GGUF\")")]
    BadMagic([u8; 4]),
    /// A version this reader does not know.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends before a value it announces.
    #[error("file truncated: {what} at offset {offset} needs {needed} bytes, {available} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Byte offset of the read.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A count (metadata entries, tensors, array elements) cannot fit in the file.
    #[error("{what} count {count} at offset {offset} is impossible for a file of this size")]
    AbsurdCount {
        /// What is being counted.
        what: &'static str,
        /// The count found.
        count: u64,
        /// Byte offset of the count.
        offset: u64,
    },
    /// A metadata value type id that GGUF does not define.
    #[error("unknown metadata value type {ty} for key '{key}'")]
    UnknownValueType {
        /// The key being read.
        key: String,
        /// The type id.
        ty: u32,
    },
    /// Arrays nested too deeply.
    #[error("metadata key '{0}': arrays nested too deeply")]
    TooDeep(String),
    /// A string is not valid UTF-8.
    #[error("invalid UTF-8 in {what} at offset {offset}")]
    BadUtf8 {
        /// What was being read.
        what: &'static str,
        /// Byte offset of the string.
        offset: u64,
    },
    /// Two metadata entries or two tensors share a name.
    #[error("duplicate {what} '{name}'")]
    Duplicate {
        /// "metadata key" or "tensor".
        what: &'static str,
        /// The name.
        name: String,
    },
    /// `general.alignment` is zero, not a power of two, or not an integer.
    #[error("invalid general.alignment {0}: it must be a power of two no larger than 2^30")]
    BadAlignment(String),
    /// A tensor's dimension count or dimensions are invalid.
    #[error("tensor '{name}': invalid shape {dims:?}")]
    BadShape {
        /// Tensor name.
        name: String,
        /// Dimensions found.
        dims: Vec<u64>,
    },
    /// A tensor type id that GGML does not define.
    #[error("tensor '{name}' has unknown type id {id}")]
    UnknownTensorType {
        /// Tensor name.
        name: String,
        /// The type id.
        id: u32,
    },
    /// The first dimension is not a whole number of blocks of the tensor's type.
    #[error("tensor '{name}': row of {ne0} elements is not a multiple of the {ty} block size {block}")]
    NotBlockAligned {
        /// Tensor name.
        name: String,
        /// Its type.
        ty: GgmlType,
        /// First dimension.
        ne0: u64,
        /// Block size of the type.
        block: usize,
    },
    /// A tensor's offset is not a multiple of the alignment.
    #[error("tensor '{name}': data offset {offset} is not aligned to {alignment}")]
    Misaligned {
        /// Tensor name.
        name: String,
        /// Offset relative to the data section.
        offset: u64,
        /// Required alignment.
        alignment: u64,
    },
    /// A tensor's data runs past the end of the file.
    #[error("tensor '{name}': data [{start}, {end}) runs past the end of the file ({file_len} bytes)")]
    DataOutOfBounds {
        /// Tensor name.
        name: String,
        /// Absolute start offset.
        start: u64,
        /// Absolute end offset.
        end: u64,
        /// File size.
        file_len: u64,
    },
    /// Two tensors' data ranges overlap.
    #[error("tensors '{a}' and '{b}' overlap in the data section")]
    Overlap {
        /// First tensor.
        a: String,
        /// Second tensor.
        b: String,
    },
    /// A tensor does not start where the one before it (in offset order) ends, padded to the
    /// alignment.
    #[error(
        "tensor '{name}': data offset {offset}, expected {expected} (where the tensor before it \
         ends, padded to the alignment): the tensor table does not describe the data section"
    )]
    Gap {
        /// Tensor name.
        name: String,
        /// Its offset.
        offset: u64,
        /// Where it should start.
        expected: u64,
    },
    /// A metadata key has a different type than the caller asked for.
    #[error("metadata key '{key}' has type {actual}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller wanted.
        expected: &'static str,
        /// What the file has.
        actual: &'static str,
    },
    /// A metadata key the caller needs is absent.
    #[error("metadata key '{0}' is missing")]
    MissingKey(String),
}

type Res<T> = std::result::Result<T, GgufError>;

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost (contiguous) first, as GGML stores them: a weight matrix of
    /// `out` rows by `in` columns is `[in, out]`.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Length of the contiguous first dimension.
    pub fn ne0(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows (product of all dimensions but the first).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// A parsed GGUF file with its bytes (memory-mapped or owned).
pub struct GgufFile {
    storage: Arc<Storage>,
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses a GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Res<Self> {
        let path = path.as_ref();
        let storage = Storage::map(path)
            .map_err(|source| GgufError::Io { path: path.display().to_string(), source })?;
        Self::parse(Arc::new(storage))
    }

    /// Parses a GGUF image held in memory (tests, fuzzing, embedded models).
    pub fn from_bytes(bytes: Vec<u8>) -> Res<Self> {
        Self::parse(Arc::new(Storage::Owned(bytes)))
    }

    fn parse(storage: Arc<Storage>) -> Res<Self> {
        let bytes = storage.as_bytes();
        let mut r = Reader { buf: bytes, pos: 0 };
        let magic = r.take(4, "magic")?;
        let magic: [u8; 4] = [magic[0], magic[1], magic[2], magic[3]];
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic(magic));
        }
        let version = r.u32("version")?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let count_off = r.pos as u64;
        let n_tensors = r.u64("tensor count")?;
        let kv_off = r.pos as u64;
        let n_kv = r.u64("metadata count")?;
        // A metadata entry takes at least 13 bytes (key length, value type, one byte of value);
        // a tensor entry at least 32 (name length, n_dims, one dim, type, offset).
        let remaining = r.remaining();
        if n_kv > remaining / 13 {
            return Err(GgufError::AbsurdCount { what: "metadata", count: n_kv, offset: kv_off });
        }
        if n_tensors > remaining / 32 {
            return Err(GgufError::AbsurdCount { what: "tensor", count: n_tensors, offset: count_off });
        }

        let mut metadata = Vec::with_capacity(cautious_capacity::<(String, MetaValue)>(n_kv));
        let mut index = HashMap::with_capacity(cautious_capacity::<(String, usize)>(n_kv));
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let ty = r.u32("metadata value type")?;
            let value = r.value(&key, ty, 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::Duplicate { what: "metadata key", name: key });
            }
            metadata.push((key, value));
        }

        let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_i128() {
                Some(a) if a > 0 && a <= (1 << 30) && (a as u64).is_power_of_two() => a as u64,
                Some(a) => return Err(GgufError::BadAlignment(a.to_string())),
                None => return Err(GgufError::BadAlignment(format!("{v} ({})", v.type_name()))),
            },
        };

        let mut tensors = Vec::with_capacity(cautious_capacity::<TensorInfo>(n_tensors));
        let mut tensor_index = HashMap::with_capacity(cautious_capacity::<(String, usize)>(n_tensors));
        for _ in 0..n_tensors {
            let info = r.tensor_info(alignment)?;
            if tensor_index.insert(info.name.clone(), tensors.len()).is_some() {
                return Err(GgufError::Duplicate { what: "tensor", name: info.name });
            }
            tensors.push(info);
        }

        let header_end = r.pos as u64;
        let data_offset = header_end.div_ceil(alignment) * alignment;
        let file_len = bytes.len() as u64;
        // Check every tensor lies inside the file, then that no two overlap.
        for t in &tensors {
            let start = data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(t.size));
            match (start, end) {
                (Some(_), Some(e)) if e <= file_len => {}
                _ => {
                    return Err(GgufError::DataOutOfBounds {
                        name: t.name.clone(),
                        start: start.unwrap_or(u64::MAX),
                        end: end.unwrap_or(u64::MAX),
                        file_len,
                    });
                }
            }
        }
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| tensors[i].offset);
        for w in order.windows(2) {
            let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
            if a.offset + a.size > b.offset && a.size > 0 && b.size > 0 {
                return Err(GgufError::Overlap { a: a.name.clone(), b: b.name.clone() });
            }
        }
        let mut expected = 0u64;
        for &i in &order {
            let t = &tensors[i];
            if t.offset != expected {
                return Err(GgufError::Gap { name: t.name.clone(), offset: t.offset, expected });
            }
            // Inside the file (checked above), so no overflow.
            expected = t.offset + t.size.next_multiple_of(alignment);
        }
        // llama.cpp ignores bytes after the last tensor; so do we, loudly: they are what a last
        // tensor re-typed to a smaller type leaves behind.
        let data_end = data_offset.saturating_add(expected);
        if !tensors.is_empty() && file_len > data_end {
            tracing::warn!(
                bytes = file_len - data_end,
                "the file has bytes after its last tensor that no tensor describes (ignored, as \
                 llama.cpp does); a tensor's type or shape may be wrong"
            );
        }

        Ok(Self { storage, version, metadata, index, tensors, tensor_index, alignment, data_offset })
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Total file size in bytes.
    pub fn file_size(&self) -> u64 {
        self.storage.as_bytes().len() as u64
    }

    /// All metadata entries in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The tensor table in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Looks a tensor up by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of a tensor's data (zero-copy into the mapping). The range of every tensor
    /// of this file was checked at parse time; a `TensorInfo` from another file that does not fit
    /// gives an empty slice rather than a panic.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        self.storage.as_bytes().get(self.tensor_range(info)).unwrap_or(&[])
    }

    /// The bytes behind the file, shared so weights can borrow tensor data without copies.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// Absolute byte range of a tensor's data in [`GgufFile::storage`].
    pub fn tensor_range(&self, info: &TensorInfo) -> std::ops::Range<usize> {
        let start = self.data_offset.saturating_add(info.offset) as usize;
        start..start.saturating_add(info.size as usize)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Res<&str> {
        self.get_str("general.architecture")
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Res<&str> {
        match self.get(key) {
            Some(MetaValue::String(s)) => Ok(s),
            Some(v) => Err(wrong(key, "string", v)),
            None => Err(GgufError::MissingKey(key.to_string())),
        }
    }

    /// An optional string value.
    pub fn opt_str(&self, key: &str) -> Res<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_str(key).map(Some),
        }
    }

    /// An unsigned integer value of any width that fits `u64`.
    pub fn get_u64(&self, key: &str) -> Res<u64> {
        let v = self.get(key).ok_or_else(|| GgufError::MissingKey(key.to_string()))?;
        match v.as_i128() {
            Some(i) if i >= 0 && i <= u64::MAX as i128 => Ok(i as u64),
            _ => Err(wrong(key, "unsigned integer", v)),
        }
    }

    /// An optional unsigned integer value.
    pub fn opt_u64(&self, key: &str) -> Res<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_u64(key).map(Some),
        }
    }

    /// A float value (f32, f64, or an integer).
    pub fn get_f32(&self, key: &str) -> Res<f32> {
        let v = self.get(key).ok_or_else(|| GgufError::MissingKey(key.to_string()))?;
        v.as_f64().map(|x| x as f32).ok_or_else(|| wrong(key, "float", v))
    }

    /// An optional float value.
    pub fn opt_f32(&self, key: &str) -> Res<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_f32(key).map(Some),
        }
    }

    /// An optional bool value.
    pub fn opt_bool(&self, key: &str) -> Res<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong(key, "bool", v)),
        }
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Res<&MetaArray> {
        match self.get(key) {
            Some(MetaValue::Array(a)) => Ok(a),
            Some(v) => Err(wrong(key, "array", v)),
            None => Err(GgufError::MissingKey(key.to_string())),
        }
    }

    /// An optional array value.
    pub fn opt_array(&self, key: &str) -> Res<Option<&MetaArray>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_array(key).map(Some),
        }
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Res<&[String]> {
        match self.get_array(key)? {
            MetaArray::String(v) => Ok(v),
            _ => {
                Err(GgufError::WrongType { key: key.to_string(), expected: "string array", actual: "array" })
            }
        }
    }
}

fn wrong(key: &str, expected: &'static str, v: &MetaValue) -> GgufError {
    GgufError::WrongType { key: key.to_string(), expected, actual: v.type_name() }
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

macro_rules! read_le {
    ($name:ident, $t:ty) => {
        fn $name(&mut self, what: &'static str) -> Res<$t> {
            let b = self.take(std::mem::size_of::<$t>(), what)?;
            let mut a = [0u8; std::mem::size_of::<$t>()];
            a.copy_from_slice(b);
            Ok(<$t>::from_le_bytes(a))
        }
    };
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: usize, what: &'static str) -> Res<&'a [u8]> {
        if n as u64 > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos as u64,
                needed: n as u64,
                available: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    read_le!(u8, u8);
    read_le!(i8, i8);
    read_le!(u16, u16);
    read_le!(i16, i16);
    read_le!(u32, u32);
    read_le!(i32, i32);
    read_le!(u64, u64);
    read_le!(i64, i64);
    read_le!(f32, f32);
    read_le!(f64, f64);

    fn bool(&mut self, what: &'static str) -> Res<bool> {
        Ok(self.u8(what)? != 0)
    }

    fn string(&mut self, what: &'static str) -> Res<String> {
        let off = self.pos as u64;
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(GgufError::Truncated { what, offset: off, needed: len, available: self.remaining() });
        }
        let b = self.take(len as usize, what)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(GgufError::BadUtf8 { what, offset: off }),
        }
    }

    /// Reads `n` elements of fixed `size` bytes after checking they fit.
    fn vec<T>(
        &mut self,
        key: &str,
        n: u64,
        size: u64,
        mut f: impl FnMut(&mut Self) -> Res<T>,
    ) -> Res<Vec<T>> {
        let _ = key;
        if n.checked_mul(size).is_none_or(|b| b > self.remaining()) {
            return Err(GgufError::AbsurdCount { what: "array element", count: n, offset: self.pos as u64 });
        }
        let mut v = Vec::with_capacity(cautious_capacity::<T>(n));
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }

    fn array(&mut self, key: &str, depth: usize) -> Res<MetaArray> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::TooDeep(key.to_string()));
        }
        let ty = self.u32("array element type")?;
        let n = self.u64("array length")?;
        let w = "array element";
        Ok(match ty {
            0 => MetaArray::U8(self.vec(key, n, 1, |r| r.u8(w))?),
            1 => MetaArray::I8(self.vec(key, n, 1, |r| r.i8(w))?),
            2 => MetaArray::U16(self.vec(key, n, 2, |r| r.u16(w))?),
            3 => MetaArray::I16(self.vec(key, n, 2, |r| r.i16(w))?),
            4 => MetaArray::U32(self.vec(key, n, 4, |r| r.u32(w))?),
            5 => MetaArray::I32(self.vec(key, n, 4, |r| r.i32(w))?),
            6 => MetaArray::F32(self.vec(key, n, 4, |r| r.f32(w))?),
            7 => MetaArray::Bool(self.vec(key, n, 1, |r| r.bool(w))?),
            // Each string needs at least its 8-byte length.
            8 => MetaArray::String(self.vec(key, n, 8, |r| r.string("array string"))?),
            // Each nested array needs at least its type and length (12 bytes).
            9 => MetaArray::Array(self.vec(key, n, 12, |r| r.array(key, depth + 1))?),
            10 => MetaArray::U64(self.vec(key, n, 8, |r| r.u64(w))?),
            11 => MetaArray::I64(self.vec(key, n, 8, |r| r.i64(w))?),
            12 => MetaArray::F64(self.vec(key, n, 8, |r| r.f64(w))?),
            other => return Err(GgufError::UnknownValueType { key: key.to_string(), ty: other }),
        })
    }

    fn value(&mut self, key: &str, ty: u32, depth: usize) -> Res<MetaValue> {
        let w = "metadata value";
        Ok(match ty {
            0 => MetaValue::U8(self.u8(w)?),
            1 => MetaValue::I8(self.i8(w)?),
            2 => MetaValue::U16(self.u16(w)?),
            3 => MetaValue::I16(self.i16(w)?),
            4 => MetaValue::U32(self.u32(w)?),
            5 => MetaValue::I32(self.i32(w)?),
            6 => MetaValue::F32(self.f32(w)?),
            7 => MetaValue::Bool(self.bool(w)?),
            8 => MetaValue::String(self.string("metadata string")?),
            9 => MetaValue::Array(self.array(key, depth)?),
            10 => MetaValue::U64(self.u64(w)?),
            11 => MetaValue::I64(self.i64(w)?),
            12 => MetaValue::F64(self.f64(w)?),
            other => return Err(GgufError::UnknownValueType { key: key.to_string(), ty: other }),
        })
    }

    fn tensor_info(&mut self, alignment: u64) -> Res<TensorInfo> {
        let name = self.string("tensor name")?;
        let n_dims = self.u32("tensor dimension count")?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(GgufError::BadShape { name, dims: vec![n_dims as u64] });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64("tensor dimension")?);
        }
        // Dimensions must be positive and their product must fit comfortably (GGML uses i64).
        let n_elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if dims.contains(&0) || n_elements.is_none_or(|n| n > i64::MAX as u64) {
            return Err(GgufError::BadShape { name, dims });
        }
        let id = self.u32("tensor type")?;
        let ty =
            GgmlType::from_id(id).ok_or_else(|| GgufError::UnknownTensorType { name: name.clone(), id })?;
        let offset = self.u64("tensor offset")?;
        if offset % alignment != 0 {
            return Err(GgufError::Misaligned { name, offset, alignment });
        }
        if dims[0] % ty.block_size() as u64 != 0 {
            return Err(GgufError::NotBlockAligned { name, ty, ne0: dims[0], block: ty.block_size() });
        }
        // A whole number of blocks whose byte size overflows is a shape error, not a block one.
        let row = ty
            .row_bytes(dims[0])
            .ok_or_else(|| GgufError::BadShape { name: name.clone(), dims: dims.clone() })?;
        let rows: u64 = dims[1..].iter().product();
        let size = row
            .checked_mul(rows)
            .ok_or_else(|| GgufError::BadShape { name: name.clone(), dims: dims.clone() })?;
        Ok(TensorInfo { name, dims, ty, offset, size })
    }
}
