//! GGUF metadata values.

use std::fmt;

/// A typed array from the metadata section.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// An array of arrays (each may have its own element type).
    Array(Vec<MetaArray>),
}

impl MetaArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Name of the element type.
    pub fn elem_type_name(&self) -> &'static str {
        match self {
            MetaArray::U8(_) => "u8",
            MetaArray::I8(_) => "i8",
            MetaArray::U16(_) => "u16",
            MetaArray::I16(_) => "i16",
            MetaArray::U32(_) => "u32",
            MetaArray::I32(_) => "i32",
            MetaArray::F32(_) => "f32",
            MetaArray::Bool(_) => "bool",
            MetaArray::String(_) => "string",
            MetaArray::U64(_) => "u64",
            MetaArray::I64(_) => "i64",
            MetaArray::F64(_) => "f64",
            MetaArray::Array(_) => "array",
        }
    }

    /// Elements converted to `i64` when the array holds integers (any width).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match self {
            MetaArray::U8(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I8(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::U16(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I16(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::U32(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I32(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::U64(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I64(v) => v.clone(),
            MetaArray::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            _ => return None,
        })
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    /// Name of the value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::F32(_) => "f32",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::Array(_) => "array",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F64(_) => "f64",
        }
    }

    /// The value as an integer, whatever its integer width.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v as i128,
            MetaValue::I8(v) => v as i128,
            MetaValue::U16(v) => v as i128,
            MetaValue::I16(v) => v as i128,
            MetaValue::U32(v) => v as i128,
            MetaValue::I32(v) => v as i128,
            MetaValue::U64(v) => v as i128,
            MetaValue::I64(v) => v as i128,
            _ => return None,
        })
    }

    /// The value as a float (floats and integers).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            _ => self.as_i128().map(|v| v as f64),
        }
    }
}

impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::String(s) => write!(f, "{s:?}"),
            MetaValue::Bool(b) => write!(f, "{b}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
            MetaValue::Array(a) => write!(f, "[{}; {}]", a.elem_type_name(), a.len()),
            other => match other.as_i128() {
                Some(v) => write!(f, "{v}"),
                None => write!(f, "?"),
            },
        }
    }
}
