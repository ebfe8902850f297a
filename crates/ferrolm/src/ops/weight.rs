//! A weight matrix as stored, and the product a matmul makes with it.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use ferrolm_kernels::{GgmlType, quant};

/// Where a weight's bytes live: a file's memory map, a buffer in memory.
pub(crate) trait WeightBytes: Send + Sync {
    /// All bytes.
    fn bytes(&self) -> &[u8];

    /// Tells the storage that bytes `range` will not be read soon (a backend keeps its own copy
    /// of them): a memory map may drop their pages, which a later read brings back unchanged.
    fn release(&self, _range: Range<usize>) {}
}

impl WeightBytes for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// What a backend derives from a weight once and keeps with it (see [`Weight::backend_data`]).
type BackendData = Arc<OnceLock<Box<dyn Any + Send + Sync>>>;

/// A 2-D weight matrix `[rows, cols]` (GGUF dims `[cols, rows]`), rows stored contiguously in
/// its block format.
///
/// Cloning shares the bytes (and the backend's data). A backend that needs another layout (the
/// CPU's row-interleaved copy for its packed kernels) keeps it in the weight's one slot for
/// backend data, filled once ([`Weight::backend_data`]).
#[derive(Clone)]
pub struct Weight {
    storage: Arc<dyn WeightBytes>,
    range: Range<usize>,
    /// Block format of the rows.
    pub ty: GgmlType,
    /// Output features (number of rows).
    pub rows: usize,
    /// Input features (elements per row).
    pub cols: usize,
    row_bytes: usize,
    /// Filled by the backend that multiplies by this weight, at most once.
    backend_data: BackendData,
}

impl std::fmt::Debug for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Weight({} [{} x {}])", self.ty, self.rows, self.cols)
    }
}

impl Weight {
    /// The weight whose `rows` rows of `cols` elements of type `ty` are bytes `range` of
    /// `storage`; `None` when the range does not hold exactly that many rows (or the type has
    /// no row size for `cols`).
    pub(crate) fn new(
        storage: Arc<dyn WeightBytes>,
        range: Range<usize>,
        ty: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Option<Weight> {
        let row_bytes = ty.row_bytes(cols as u64)? as usize;
        if row_bytes.checked_mul(rows) != Some(range.len()) || range.end > storage.bytes().len() {
            return None;
        }
        Some(Weight { storage, range, ty, rows, cols, row_bytes, backend_data: Arc::default() })
    }

    /// A weight over bytes held in memory (tests, backend comparisons).
    pub(crate) fn owned(ty: GgmlType, rows: usize, cols: usize, bytes: Vec<u8>) -> Weight {
        let row_bytes = ty.row_bytes(cols as u64).map_or(0, |b| b as usize);
        assert_eq!(bytes.len(), rows * row_bytes, "weight bytes");
        let range = 0..bytes.len();
        Weight { storage: Arc::new(bytes), range, ty, rows, cols, row_bytes, backend_data: Arc::default() }
    }

    /// All rows' bytes.
    pub fn data(&self) -> &[u8] {
        &self.storage.bytes()[self.range.clone()]
    }

    /// The bytes of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> &[u8] {
        let start = self.range.start + r * self.row_bytes;
        &self.storage.bytes()[start..start + self.row_bytes]
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Rows `start..start + rows` as a weight of their own, sharing the bytes (not the backend
    /// data: that is per weight).
    pub fn row_block(&self, start: usize, rows: usize) -> Weight {
        let begin = self.range.start + start * self.row_bytes;
        Weight {
            storage: self.storage.clone(),
            range: begin..begin + rows * self.row_bytes,
            ty: self.ty,
            rows,
            cols: self.cols,
            row_bytes: self.row_bytes,
            backend_data: Arc::default(),
        }
    }

    /// Dequantizes row `r` into `out` (`cols` elements).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        // Lengths were validated at load time, so this cannot fail.
        let res = quant::dequantize_row(self.ty, self.row(r), &mut out[..self.cols]);
        debug_assert!(res.is_ok());
    }

    /// Tells the storage that the first `rows` rows will not be read soon, because a backend
    /// keeps its own copy of them: a memory map lets the system drop their pages (rows still
    /// read from the map, such as tied embeddings, come back on demand, unchanged).
    pub fn release_rows(&self, rows: usize) {
        let rows = rows.min(self.rows);
        self.storage.release(self.range.start..self.range.start + rows * self.row_bytes);
    }

    /// The data a backend keeps with this weight (the CPU backend's repacked rows), made by
    /// `init` on the first call and kept, shared by the weight's clones. A weight has one such
    /// slot: `None` when it already holds data of another type than `T`.
    #[inline]
    pub fn backend_data<T: Any + Send + Sync>(&self, init: impl FnOnce(&Weight) -> T) -> Option<&T> {
        self.backend_data.get_or_init(|| Box::new(init(self))).downcast_ref()
    }

    /// Has every backend use the rows as stored (a low-memory load): the backend-data slot is
    /// filled with a marker, so that no backend keeps a copy in another layout (the CPU then
    /// multiplies with its kernels for the stored blocks). No effect once a copy was made.
    pub fn keep_as_stored(&self) {
        let _ = self.backend_data(|_| AsStored);
    }

    /// Whether a backend keeps data of its own with this weight (such as the CPU's repacked
    /// rows), as opposed to nothing yet or [`Weight::keep_as_stored`]'s marker.
    pub fn has_backend_copy(&self) -> bool {
        self.backend_data.get().is_some_and(|d| !d.is::<AsStored>())
    }
}

/// What [`Weight::keep_as_stored`] puts in a weight's backend-data slot.
struct AsStored;

/// One matrix of a multi-matrix product and where its product goes. `out`: `[n_tok, w.rows]`.
pub struct MatmulJob<'a> {
    /// The weight.
    pub w: &'a Weight,
    /// The product.
    pub out: &'a mut [f32],
}
