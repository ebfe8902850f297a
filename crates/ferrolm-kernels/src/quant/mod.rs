//! Block formats (filled in by the block-format work).

use crate::GgmlType;

/// Whether a type has a dequantizer and dot product here.
pub fn supports(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32)
}
