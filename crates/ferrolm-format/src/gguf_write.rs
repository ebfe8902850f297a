//! GGUF writer: builds a version 2 or 3 GGUF image from metadata and tensors.
//!
//! The writer produces files that [`GgufFile`] reads back unchanged, laid
//! out the way llama.cpp and the Python `gguf` package lay them out: header, metadata in insertion
//! order, tensor table in insertion order, padding to the alignment, then each tensor's data at
//! an aligned offset, zero-padded to the alignment (a file without tensors is not padded).
//!
//! Everything is validated as it is added, so [`GgufWriter::to_bytes`] cannot fail: tensor
//! shapes and data sizes must match their type, names must be unique, `general.alignment` must be
//! a power of two, and nested arrays must not be deeper than the reader accepts.
//!
//! ```
//! use ferrolm_format::GgmlType;
//! use ferrolm_format::gguf::{GgufFile, MetaValue};
//! use ferrolm_format::gguf_write::GgufWriter;
//!
//! let mut w = GgufWriter::new();
//! w.add("general.architecture", MetaValue::String("llama".into()))?;
//! w.add_tensor("token_embd.weight", &[4, 2], GgmlType::F32, vec![0u8; 32])?;
//! let file = GgufFile::from_bytes(w.to_bytes())?;
//! assert_eq!(file.architecture()?, "llama");
//! assert_eq!(file.tensors()[0].dims, [4, 2]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

use ferrolm_kernels::GgmlType;

use super::gguf::{DEFAULT_ALIGNMENT, GGUF_MAGIC, GgufFile, MAX_ARRAY_DEPTH, MAX_DIMS, MetaArray, MetaValue};

/// Errors building a GGUF image.
#[derive(Debug, thiserror::Error)]
pub enum GgufWriteError {
    /// Only versions 2 and 3 can be written.
    #[error("cannot write GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// `general.alignment` is not an integer power of two in `1..=2^30`.
    #[error("invalid general.alignment {0} (must be an integer power of two)")]
    BadAlignment(String),
    /// An array value nests arrays deeper than readers accept.
    #[error("metadata key '{0}': arrays nested too deeply")]
    TooDeep(String),
    /// A tensor with this name was already added.
    #[error("duplicate tensor '{0}'")]
    DuplicateTensor(String),
    /// A tensor's dimensions are invalid: not 1 to 4 of them, a zero, an overflowing product, or a
    /// first dimension that is not a whole number of blocks of the type.
    #[error("tensor '{name}': invalid shape {dims:?} for type {ty}")]
    BadShape {
        /// Tensor name.
        name: String,
        /// The dimensions given.
        dims: Vec<u64>,
        /// The tensor type.
        ty: GgmlType,
    },
    /// A tensor's data does not have the size its shape and type imply.
    #[error("tensor '{name}': {actual} bytes of data given, its shape and type need {expected}")]
    DataSize {
        /// Tensor name.
        name: String,
        /// Bytes the shape needs.
        expected: u64,
        /// Bytes given.
        actual: u64,
    },
    /// Writing the file failed.
    #[error("cannot write {path}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

type Res<T> = std::result::Result<T, GgufWriteError>;

/// A tensor waiting to be written.
#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Builds a GGUF image in memory.
///
/// Metadata keys and tensors are written in the order they were first added; adding a key again
/// replaces its value in place.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty GGUF version 3 image.
    pub fn new() -> Self {
        Self { version: 3, metadata: Vec::new(), tensors: Vec::new() }
    }

    /// An empty image of the given version (2 or 3; the two share one layout).
    pub fn with_version(version: u32) -> Res<Self> {
        if version != 2 && version != 3 {
            return Err(GgufWriteError::UnsupportedVersion(version));
        }
        Ok(Self { version, ..Self::new() })
    }

    /// A writer holding a copy of everything in `file` (metadata, tensors and their data), to
    /// be modified and written out again.
    pub fn from_file(file: &GgufFile) -> Res<Self> {
        let mut w = Self::with_version(file.version())?;
        for (k, v) in file.metadata() {
            w.add(k.clone(), v.clone())?;
        }
        for t in file.tensors() {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, file.tensor_data(t).to_vec())?;
        }
        Ok(w)
    }

    /// Sets a metadata key (replacing its value if it is already present).
    ///
    /// Fails when the key is `general.alignment` and the value is not a valid alignment, or when
    /// the value nests arrays too deeply.
    pub fn add(&mut self, key: impl Into<String>, value: MetaValue) -> Res<&mut Self> {
        let key = key.into();
        if key == "general.alignment" {
            alignment_of(&value)?;
        }
        if let MetaValue::Array(a) = &value
            && array_depth(a) > MAX_ARRAY_DEPTH
        {
            return Err(GgufWriteError::TooDeep(key));
        }
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        Ok(self)
    }

    /// Removes a metadata key; returns its value if it was present.
    pub fn remove(&mut self, key: &str) -> Option<MetaValue> {
        let i = self.metadata.iter().position(|(k, _)| k == key)?;
        Some(self.metadata.remove(i).1)
    }

    /// The metadata added so far, in write order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// Adds a tensor. `dims` are innermost first (GGML order: a matrix of `rows` rows of `cols`
    /// elements is `[cols, rows]`); `data` is the raw encoded bytes and must be exactly as long
    /// as the shape and type require.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Res<&mut Self> {
        let name = name.into();
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufWriteError::DuplicateTensor(name));
        }
        let bad = || GgufWriteError::BadShape { name: name.clone(), dims: dims.to_vec(), ty };
        if dims.is_empty() || dims.len() > MAX_DIMS || dims.contains(&0) {
            return Err(bad());
        }
        let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if n.is_none_or(|n| n > i64::MAX as u64) {
            return Err(bad());
        }
        let rows: u64 = dims[1..].iter().product();
        let expected = ty.row_bytes(dims[0]).and_then(|r| r.checked_mul(rows)).ok_or_else(bad)?;
        if expected != data.len() as u64 {
            return Err(GgufWriteError::DataSize { name, expected, actual: data.len() as u64 });
        }
        self.tensors.push(PendingTensor { name, dims: dims.to_vec(), ty, data });
        Ok(self)
    }

    /// The alignment the image will use: `general.alignment` if set, else 32.
    pub fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| alignment_of(v).ok())
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Encodes the image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment() as usize;
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&value_type(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += t.data.len().next_multiple_of(align);
        }
        // Like llama.cpp, a file without tensors (a vocab-only file) ends right after the
        // header, without padding.
        if !self.tensors.is_empty() {
            out.resize(out.len().next_multiple_of(align), 0);
        }
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(out.len().next_multiple_of(align), 0);
        }
        out
    }

    /// Encodes the image and writes it to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Res<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes())
            .map_err(|source| GgufWriteError::Io { path: path.display().to_string(), source })
    }
}

/// The alignment a `general.alignment` value asks for, if valid (same rule as the reader).
fn alignment_of(v: &MetaValue) -> Res<u64> {
    match v.as_i128() {
        Some(a) if a > 0 && a <= (1 << 30) && (a as u64).is_power_of_two() => Ok(a as u64),
        _ => Err(GgufWriteError::BadAlignment(v.to_string())),
    }
}

/// Array nesting depth: 1 for a flat array.
fn array_depth(a: &MetaArray) -> usize {
    match a {
        MetaArray::Array(v) => 1 + v.iter().map(array_depth).max().unwrap_or(0),
        _ => 1,
    }
}

/// GGUF value type id of a value.
fn value_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

/// GGUF value type id of an array's elements.
fn elem_type(a: &MetaArray) -> u32 {
    match a {
        MetaArray::U8(_) => 0,
        MetaArray::I8(_) => 1,
        MetaArray::U16(_) => 2,
        MetaArray::I16(_) => 3,
        MetaArray::U32(_) => 4,
        MetaArray::I32(_) => 5,
        MetaArray::F32(_) => 6,
        MetaArray::Bool(_) => 7,
        MetaArray::String(_) => 8,
        MetaArray::Array(_) => 9,
        MetaArray::U64(_) => 10,
        MetaArray::I64(_) => 11,
        MetaArray::F64(_) => 12,
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(a) => put_array(out, a),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// An array: element type, length, elements (nested arrays carry their own type and length).
fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    out.extend_from_slice(&elem_type(a).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! le {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        MetaArray::U8(v) => out.extend_from_slice(v),
        MetaArray::I8(v) => le!(v),
        MetaArray::U16(v) => le!(v),
        MetaArray::I16(v) => le!(v),
        MetaArray::U32(v) => le!(v),
        MetaArray::I32(v) => le!(v),
        MetaArray::F32(v) => le!(v),
        MetaArray::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        MetaArray::String(v) => {
            for s in v {
                put_str(out, s);
            }
        }
        MetaArray::Array(v) => {
            for inner in v {
                put_array(out, inner);
            }
        }
        MetaArray::U64(v) => le!(v),
        MetaArray::I64(v) => le!(v),
        MetaArray::F64(v) => le!(v),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::gguf::GgufError;

    /// A writer with one value of every type, nested arrays included, and a few tensors.
    fn sample() -> GgufWriter {
        let mut w = GgufWriter::new();
        w.add("general.architecture", MetaValue::String("llama".into())).unwrap();
        w.add("general.name", MetaValue::String("ünïcode ✓".into())).unwrap();
        w.add("t.u8", MetaValue::U8(200)).unwrap();
        w.add("t.i8", MetaValue::I8(-100)).unwrap();
        w.add("t.u16", MetaValue::U16(60_000)).unwrap();
        w.add("t.i16", MetaValue::I16(-30_000)).unwrap();
        w.add("t.u32", MetaValue::U32(4_000_000_000)).unwrap();
        w.add("t.i32", MetaValue::I32(-2_000_000_000)).unwrap();
        w.add("t.f32", MetaValue::F32(1.5e-5)).unwrap();
        w.add("t.bool", MetaValue::Bool(true)).unwrap();
        w.add("t.u64", MetaValue::U64(u64::MAX)).unwrap();
        w.add("t.i64", MetaValue::I64(i64::MIN)).unwrap();
        w.add("t.f64", MetaValue::F64(std::f64::consts::PI)).unwrap();
        w.add("t.empty_str", MetaValue::String(String::new())).unwrap();
        let arrays = [
            MetaArray::U8(vec![0, 1, 255]),
            MetaArray::I8(vec![-128, 127]),
            MetaArray::U16(vec![1, 65535]),
            MetaArray::I16(vec![-1, 2]),
            MetaArray::U32(vec![7; 5]),
            MetaArray::I32(vec![-7, 0, 7]),
            MetaArray::F32(vec![0.5, -0.25, f32::INFINITY]),
            MetaArray::Bool(vec![true, false, true]),
            MetaArray::String(vec!["a".into(), String::new(), "<|im_start|>".into()]),
            MetaArray::U64(vec![u64::MAX, 0]),
            MetaArray::I64(vec![i64::MIN, i64::MAX]),
            MetaArray::F64(vec![1e300, -0.0]),
            MetaArray::U32(vec![]),
            MetaArray::Array(vec![]),
            MetaArray::Array(vec![
                MetaArray::I32(vec![1, 2, 3]),
                MetaArray::String(vec!["x".into()]),
                MetaArray::Array(vec![MetaArray::F32(vec![1.0]), MetaArray::Array(vec![])]),
            ]),
        ];
        for (i, a) in arrays.into_iter().enumerate() {
            w.add(format!("t.arr.{i}"), MetaValue::Array(a)).unwrap();
        }
        let f32s: Vec<u8> = (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        w.add_tensor("a.weight", &[4, 2], GgmlType::F32, f32s).unwrap();
        w.add_tensor("b.weight", &[64, 3], GgmlType::Q8_0, (0..6 * 34).map(|i| i as u8).collect()).unwrap();
        w.add_tensor("c.bias", &[3], GgmlType::F16, vec![1, 2, 3, 4, 5, 6]).unwrap();
        w.add_tensor("d.weight", &[256, 1, 1, 2], GgmlType::Q4_K, vec![9; 2 * 144]).unwrap();
        w
    }

    fn check_round_trip(w: &GgufWriter) -> GgufFile {
        let bytes = w.to_bytes();
        let f = GgufFile::from_bytes(bytes.clone()).unwrap();
        assert_eq!(f.metadata(), w.metadata());
        assert_eq!(f.tensors().len(), w.tensors.len());
        let align = w.alignment();
        assert_eq!(f.alignment(), align);
        assert_eq!(f.data_offset() % align, 0);
        for (t, p) in f.tensors().iter().zip(&w.tensors) {
            assert_eq!(t.name, p.name);
            assert_eq!(t.dims, p.dims);
            assert_eq!(t.ty, p.ty);
            assert_eq!(t.offset % align, 0);
            assert_eq!(f.tensor_data(t), &p.data[..]);
            assert_eq!(f.tensor(&p.name), Some(t));
        }
        if !w.tensors.is_empty() {
            assert_eq!(bytes.len() as u64 % align, 0);
        }
        // Reading and writing again gives the same bytes.
        assert_eq!(GgufWriter::from_file(&f).unwrap().to_bytes(), bytes);
        f
    }

    #[test]
    fn round_trip_every_type_v3() {
        let f = check_round_trip(&sample());
        assert_eq!(f.version(), 3);
        assert_eq!(f.get_str("general.name").unwrap(), "ünïcode ✓");
        assert_eq!(f.get_u64("t.u64").unwrap(), u64::MAX);
    }

    #[test]
    fn round_trip_v2() {
        let mut w = sample();
        w.version = 2;
        assert_eq!(check_round_trip(&w).version(), 2);
        assert!(matches!(GgufWriter::with_version(1), Err(GgufWriteError::UnsupportedVersion(1))));
        assert!(GgufWriter::with_version(2).is_ok());
    }

    #[test]
    fn round_trip_custom_alignment() {
        for align in [1u32, 8, 64, 4096] {
            let mut w = sample();
            w.add("general.alignment", MetaValue::U32(align)).unwrap();
            check_round_trip(&w);
        }
    }

    #[test]
    fn empty_file() {
        let w = GgufWriter::new();
        let bytes = w.to_bytes();
        assert_eq!(bytes.len(), 24);
        let f = check_round_trip(&w);
        assert!(f.metadata().is_empty() && f.tensors().is_empty());
    }

    #[test]
    fn replacing_a_key_keeps_its_position() {
        let mut w = GgufWriter::new();
        w.add("a", MetaValue::U8(1)).unwrap().add("b", MetaValue::U8(2)).unwrap();
        w.add("a", MetaValue::U8(3)).unwrap();
        assert_eq!(w.metadata(), [("a".into(), MetaValue::U8(3)), ("b".into(), MetaValue::U8(2))]);
        assert_eq!(w.remove("a"), Some(MetaValue::U8(3)));
        assert_eq!(w.remove("a"), None);
        check_round_trip(&w);
    }

    #[test]
    fn rejects_invalid_input() {
        let mut w = GgufWriter::new();
        for bad in [MetaValue::U32(0), MetaValue::U32(3), MetaValue::I64(-32), MetaValue::F32(32.0)] {
            assert!(matches!(w.add("general.alignment", bad), Err(GgufWriteError::BadAlignment(_))));
        }
        let mut deep = MetaArray::U8(vec![1]);
        for _ in 0..MAX_ARRAY_DEPTH {
            deep = MetaArray::Array(vec![deep]);
        }
        assert!(matches!(w.add("deep", MetaValue::Array(deep)), Err(GgufWriteError::TooDeep(_))));
        let bad_shapes: [&[u64]; 5] = [&[], &[1, 1, 1, 1, 1], &[4, 0], &[u64::MAX, 2], &[33]];
        for dims in bad_shapes {
            let r = w.add_tensor("t", dims, GgmlType::Q8_0, vec![]);
            assert!(matches!(r, Err(GgufWriteError::BadShape { .. })), "{dims:?}");
        }
        let r = w.add_tensor("t", &[2], GgmlType::F32, vec![0; 7]);
        assert!(matches!(r, Err(GgufWriteError::DataSize { expected: 8, actual: 7, .. })));
        w.add_tensor("t", &[2], GgmlType::F32, vec![0; 8]).unwrap();
        let r = w.add_tensor("t", &[2], GgmlType::F32, vec![0; 8]);
        assert!(matches!(r, Err(GgufWriteError::DuplicateTensor(_))));
        check_round_trip(&w);
    }

    #[test]
    fn deepest_accepted_nesting_reads_back() {
        let mut deep = MetaArray::U8(vec![1]);
        for _ in 1..MAX_ARRAY_DEPTH {
            deep = MetaArray::Array(vec![deep]);
        }
        let mut w = GgufWriter::new();
        w.add("deep", MetaValue::Array(deep)).unwrap();
        check_round_trip(&w);
    }

    #[test]
    fn write_to_disk_and_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        let w = sample();
        w.write(&path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.metadata(), w.metadata());
        assert!(matches!(GgufFile::open(dir.path().join("missing.gguf")), Err(GgufError::Io { .. })));
        let e = w.write(dir.path().join("no/such/dir.gguf")).unwrap_err();
        assert!(e.to_string().contains("cannot write"));
    }
}
