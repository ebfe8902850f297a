//! The KV cache, owned by the engine (not by the model).
//!
//! Each sequence has its own cache: per layer a key and a value row per *physical slot*, and per
//! slot the *logical position* of the token stored there. Logical positions drive RoPE and the
//! attention mask and grow by one per token forever; physical slots are where the rows live and
//! shrink when tokens are evicted. Keys are stored already rotated and are never re-rotated.

mod manager;
mod monitor;
mod policy;
mod query_log;
mod state;
mod stats;

use std::collections::BTreeMap;

use ferrolm_kernels::quant::kv::KvBlocks;
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::{Error, Result};

pub use manager::{CacheManager, CacheOptions, EvictionEvent, EvictionReason, EvictionStats};
pub use monitor::{FixedMonitor, ProcMonitor, SystemMonitor};
pub use policy::{EvictionPolicy, PolicyKind, make_policy};
pub use query_log::QueryLog;
pub use state::{
    SeqState, StateIdentity, VERSION as STATE_VERSION, decode as decode_state, encode as encode_state, fnv1a,
};
pub use stats::attention_mass;

/// Storage type of cached keys or values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// 32-bit floats: exact, twice the memory of f16.
    F32,
    /// 16-bit floats (llama.cpp's default).
    #[default]
    F16,
    /// GGML's Q8_0 blocks: 32 values as signed bytes with an f16 scale (34 bytes per 32 values).
    Q8_0,
    /// GGML's Q4_0 blocks: 32 values as 4-bit integers with an f16 scale (18 bytes per 32
    /// values).
    Q4_0,
}

impl KvType {
    /// Every type, in order of decreasing size.
    pub const ALL: [KvType; 4] = [KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0];

    /// llama.cpp's name of the type (`f32`, `f16`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// Parses a name of [`KvType::name`] (any case).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Values per block: 32 for the block formats, 1 for floats. A row (and each head of it)
    /// must be a whole number of blocks.
    pub fn block_size(self) -> usize {
        match self.blocks() {
            Some(_) => KvBlocks::BLOCK,
            None => 1,
        }
    }

    /// Bytes of a row of `n` values (exact when `n` is a whole number of blocks; a partial block
    /// counts as a whole one).
    pub fn row_bytes(self, n: usize) -> usize {
        match self {
            KvType::F32 => 4 * n,
            KvType::F16 => 2 * n,
            KvType::Q8_0 | KvType::Q4_0 => self.blocks().map_or(0, |b| b.row_bytes(n)),
        }
    }

    /// Checks that rows of `n` values (a head, a whole key row) are a whole number of blocks of
    /// this type: an [`Error::InvalidInput`] otherwise.
    pub fn check_width(self, n: usize) -> Result<()> {
        if n.is_multiple_of(self.block_size()) {
            return Ok(());
        }
        Err(Error::InvalidInput(format!(
            "the {self} KV cache type stores blocks of {} values, which do not divide rows of {n}",
            self.block_size()
        )))
    }

    /// The block format of a quantized type.
    pub(crate) fn blocks(self) -> Option<KvBlocks> {
        match self {
            KvType::Q8_0 => Some(KvBlocks::Q8_0),
            KvType::Q4_0 => Some(KvBlocks::Q4_0),
            KvType::F32 | KvType::F16 => None,
        }
    }
}

/// The Walsh–Hadamard rotations a quantized cache's rows go through (llama.cpp's `attn_rot`):
/// a few large coordinates of a key (Qwen 2's key biases) would otherwise take a 32-value
/// block's scale and round every other value of the block to nothing; rotated, each chunk's
/// energy is spread over all its values. Attention is unchanged in exact arithmetic:
/// `(Hq)·(Hk) = q·k` and `Σ pᵢ·Hvᵢ = H·Σ pᵢ·vᵢ`, `H` orthonormal and its own inverse
/// ([`ferrolm_kernels::rows::hadamard`]).
///
/// With a quantized key type, queries and keys are rotated (after RoPE) in chunks of the
/// largest power of two that divides the head size; with a quantized value type, values are
/// rotated in chunks of 64 before they are stored and each attention output is rotated back.
/// Neither applies to a head size that is not a multiple of 64, nor to float types. llama.cpp
/// decides over the head size shared by all layers of a cache (none when they differ); ferrolm
/// over each layer's own, which is the same for every model it runs (Gemma 4's two head sizes
/// sit in llama.cpp's two caches, one for sliding-window layers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvRotation {
    /// Chunk size of the query and key rotation.
    pub k: Option<usize>,
    /// Chunk size of the value rotation (undone on the attention output).
    pub v: Option<usize>,
}

impl KvRotation {
    /// The rotations of a cache of these `(key, value)` types for heads of `head_dim` values.
    pub fn new((type_k, type_v): (KvType, KvType), head_dim: usize) -> Self {
        let fits = head_dim > 0 && head_dim.is_multiple_of(64);
        Self {
            k: (fits && type_k.blocks().is_some()).then(|| 1 << head_dim.trailing_zeros()),
            v: (fits && type_v.blocks().is_some()).then_some(64),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Rows of one layer's keys or values in their storage type. `[len, kv_dim]`
///
/// The methods take element indices and lengths; for the block formats they are whole numbers of
/// blocks (the cache only uses multiples of `kv_dim`, which it checks is one).
#[derive(Debug, Clone)]
enum Rows {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// GGML blocks, `ty.row_bytes(kv_dim)` bytes per row.
    Blocks(KvBlocks, Vec<u8>),
}

impl Rows {
    /// Empty rows with room for `reserve` values. The reservation is address space only until
    /// written (the allocator maps large blocks lazily), and it keeps appending a token from
    /// ever reallocating.
    fn new(ty: KvType, reserve: usize) -> Self {
        match (ty, ty.blocks()) {
            (_, Some(b)) => Rows::Blocks(b, Vec::with_capacity(b.row_bytes(reserve))),
            (KvType::F32, None) => Rows::F32(Vec::with_capacity(reserve)),
            (_, None) => Rows::F16(Vec::with_capacity(reserve)),
        }
    }

    fn resize(&mut self, n: usize) {
        match self {
            Rows::F32(v) => v.resize(n, 0.0),
            Rows::F16(v) => v.resize(n, f16::ZERO),
            // All-zero blocks: scale 0, so every value is 0.
            Rows::Blocks(b, v) => v.resize(b.row_bytes(n), 0),
        }
    }

    fn truncate(&mut self, n: usize) {
        match self {
            Rows::F32(v) => v.truncate(n),
            Rows::F16(v) => v.truncate(n),
            Rows::Blocks(b, v) => v.truncate(b.row_bytes(n)),
        }
    }

    fn shrink_to_fit(&mut self) {
        match self {
            Rows::F32(v) => v.shrink_to_fit(),
            Rows::F16(v) => v.shrink_to_fit(),
            Rows::Blocks(_, v) => v.shrink_to_fit(),
        }
    }

    fn copy_within(&mut self, src: std::ops::Range<usize>, dst: usize) {
        match self {
            Rows::F32(v) => v.copy_within(src, dst),
            Rows::F16(v) => v.copy_within(src, dst),
            Rows::Blocks(b, v) => {
                v.copy_within(b.row_bytes(src.start)..b.row_bytes(src.end), b.row_bytes(dst))
            }
        }
    }

    /// Whether both hold the same storage type.
    fn same_type(&self, other: &Rows) -> bool {
        match (self, other) {
            (Rows::F32(_), Rows::F32(_)) | (Rows::F16(_), Rows::F16(_)) => true,
            (Rows::Blocks(a, _), Rows::Blocks(b, _)) => a == b,
            _ => false,
        }
    }

    /// Appends the first `n` values of `src` (of the same type).
    fn extend_from(&mut self, src: &Rows, n: usize) {
        match (self, src) {
            (Rows::F32(d), Rows::F32(s)) => d.extend_from_slice(&s[..n]),
            (Rows::F16(d), Rows::F16(s)) => d.extend_from_slice(&s[..n]),
            (Rows::Blocks(b, d), Rows::Blocks(_, s)) => d.extend_from_slice(&s[..b.row_bytes(n)]),
            _ => debug_assert!(false, "Rows::extend_from: different types"),
        }
    }

    fn write(&mut self, at: usize, x: &[f32]) {
        match self {
            Rows::F32(v) => v[at..at + x.len()].copy_from_slice(x),
            Rows::F16(v) => v[at..at + x.len()].convert_from_f32_slice(x),
            Rows::Blocks(b, v) => b.quantize_row(x, &mut v[b.row_bytes(at)..b.row_bytes(at + x.len())]),
        }
    }

    fn read(&self, at: usize, out: &mut [f32]) {
        match self {
            Rows::F32(v) => out.copy_from_slice(&v[at..at + out.len()]),
            Rows::F16(v) => v[at..at + out.len()].convert_to_f32_slice(out),
            Rows::Blocks(b, v) => b.dequantize_row(&v[b.row_bytes(at)..b.row_bytes(at + out.len())], out),
        }
    }
}

/// Read access to one layer's cached rows, converting to f32 as needed.
#[derive(Clone, Copy, Debug)]
pub struct RowsView<'a> {
    rows: &'a Rows,
}

impl<'a> RowsView<'a> {
    /// Copies `out.len()` elements starting at element `at` into `out` as f32.
    ///
    /// # Panics
    /// If the range reaches past the rows, or, for a block format, `at` or `out.len()` is not a
    /// whole number of blocks.
    #[inline]
    pub fn read(&self, at: usize, out: &mut [f32]) {
        self.rows.read(at, out);
    }

    /// All rows as f32: borrowed when that is the storage type, converted once otherwise.
    pub fn to_f32(self) -> std::borrow::Cow<'a, [f32]> {
        match self.rows {
            Rows::F32(v) => std::borrow::Cow::Borrowed(v),
            Rows::F16(v) => {
                let mut out = vec![0.0f32; v.len()];
                v.convert_to_f32_slice(&mut out);
                std::borrow::Cow::Owned(out)
            }
            Rows::Blocks(b, v) => {
                let mut out = vec![0.0f32; v.len() / b.block_bytes() * KvBlocks::BLOCK];
                b.dequantize_row(v, &mut out);
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// The rows as f32, if that is their storage type (no conversion needed).
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self.rows {
            Rows::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The rows as f16, if that is their storage type.
    pub fn as_f16(&self) -> Option<&'a [f16]> {
        match self.rows {
            Rows::F16(v) => Some(v),
            _ => None,
        }
    }

    /// The rows' GGML blocks (`ty.row_bytes(kv_dim)` bytes per row), if stored in a block format
    /// (`q8_0`, `q4_0`).
    pub fn as_blocks(&self) -> Option<(KvType, &'a [u8])> {
        match self.rows {
            Rows::Blocks(KvBlocks::Q8_0, v) => Some((KvType::Q8_0, v)),
            Rows::Blocks(KvBlocks::Q4_0, v) => Some((KvType::Q4_0, v)),
            _ => None,
        }
    }

    /// The rows as stored, for the attention kernels.
    pub(crate) fn stored(&self) -> Stored<'a> {
        match self.rows {
            Rows::F32(v) => Stored::F32(v),
            Rows::F16(v) => Stored::F16(v),
            Rows::Blocks(b, v) => Stored::Blocks(*b, v),
        }
    }
}

/// One layer's rows in their storage type. `[len, kv_dim]`
pub(crate) enum Stored<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    /// `ty.row_bytes(kv_dim)` bytes per row.
    Blocks(KvBlocks, &'a [u8]),
}

/// Identifies one sequence (one conversation) in a batch and in the cache.
pub type SeqId = u32;

/// What a sequence's tokens left in a model's recurrent layers (Qwen 3.5's gated delta nets).
/// Unlike keys and values it cannot be cut back: dropping any of the tokens it holds loses it,
/// and the sequence can then only start again from position 0.
#[derive(Debug, Clone, PartialEq)]
pub struct RecurrentState {
    /// Logical position of the next token it can take.
    pub next: u32,
    /// One buffer per recurrent layer, in the model's layout. `[n_recurrent][state_len]`
    pub layers: Vec<Vec<f32>>,
}

impl RecurrentState {
    /// Bytes its buffers hold.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.len() * std::mem::size_of::<f32>()).sum()
    }
}

/// The cache of one sequence.
#[derive(Debug, Clone)]
pub struct SeqCache {
    kv_dim: usize,
    capacity: usize,
    /// Logical position of the token in each slot. `[len]`
    positions: Vec<u32>,
    /// Keys per layer. `[n_layer][len, n_head_kv * head_dim]`
    k: Vec<Rows>,
    /// Values per layer. `[n_layer][len, n_head_kv * head_dim]`
    v: Vec<Rows>,
    /// Attention score of each slot, kept by eviction policies (H2O's accumulated attention,
    /// SnapKV's observation-window score). `[len]`
    scores: Vec<f32>,
    /// Whether the forward pass adds each query's attention to `scores` (H2O).
    track_attention: bool,
    /// The last queries run through the model (SnapKV's observation window), when enabled.
    queries: Option<QueryLog>,
    /// The recurrent layers' state after the sequence's tokens (hybrid models only).
    recurrent: Option<RecurrentState>,
}

impl SeqCache {
    fn new(n_layer: usize, kv_dim: usize, capacity: usize, types: (KvType, KvType)) -> Self {
        Self {
            kv_dim,
            capacity,
            positions: Vec::with_capacity(capacity),
            k: (0..n_layer).map(|_| Rows::new(types.0, capacity * kv_dim)).collect(),
            v: (0..n_layer).map(|_| Rows::new(types.1, capacity * kv_dim)).collect(),
            scores: Vec::with_capacity(capacity),
            track_attention: false,
            queries: None,
            recurrent: None,
        }
    }

    /// The recurrent layers' state, if the sequence has one.
    pub fn recurrent(&self) -> Option<&RecurrentState> {
        self.recurrent.as_ref()
    }

    /// The recurrent layers' state, for the forward pass to start, advance or drop.
    pub fn recurrent_mut(&mut self) -> &mut Option<RecurrentState> {
        &mut self.recurrent
    }

    /// Attention score of each slot (see [`EvictionPolicy`]). `[len]`
    pub fn scores(&self) -> &[f32] {
        &self.scores
    }

    /// Mutable attention scores. `[len]`
    pub fn scores_mut(&mut self) -> &mut [f32] {
        &mut self.scores
    }

    /// Whether the forward pass should add each query's attention probabilities to
    /// [`SeqCache::scores`].
    pub fn tracks_attention(&self) -> bool {
        self.track_attention
    }

    /// Asks the forward pass to accumulate attention into [`SeqCache::scores`] (or stops it).
    pub fn set_track_attention(&mut self, on: bool) {
        self.track_attention = on;
    }

    /// Keeps the last `window` queries of every layer (`q_dim` wide) as they are computed, or
    /// stops keeping them (`window == 0`).
    pub fn set_query_log(&mut self, window: usize, n_layer: usize, q_dim: usize) {
        self.queries = (window > 0).then(|| QueryLog::new(window, n_layer, q_dim));
    }

    /// The recent queries, when kept.
    pub fn query_log(&self) -> Option<&QueryLog> {
        self.queries.as_ref()
    }

    /// The recent queries, mutable.
    pub fn query_log_mut(&mut self) -> Option<&mut QueryLog> {
        self.queries.as_mut()
    }

    /// What the forward pass reports of each query it computes (`q`: `[q_dim]`, the token at
    /// logical position `pos` in `layer`): kept when the policy asked for a query log (SnapKV's
    /// observation window), ignored otherwise.
    pub fn observe_query(&mut self, layer: usize, pos: u32, q: &[f32]) {
        if let Some(log) = &mut self.queries {
            log.record(layer, pos, q);
        }
    }

    /// What the forward pass reports of one layer's attention when the policy tracks attention
    /// ([`SeqCache::tracks_attention`]): `mass` (`[n_head, len]`), the attention the pass's
    /// queries gave each slot in one of `n_layer` layers. H2O's accumulated attention adds it to
    /// [`SeqCache::scores`], averaged over heads and layers.
    pub fn observe_attention(&mut self, mass: &[f32], n_head: usize, n_layer: usize) {
        if !self.track_attention {
            return;
        }
        let w = 1.0 / (n_head * n_layer) as f32;
        for head in mass.chunks_exact(self.scores.len().max(1)) {
            self.scores.iter_mut().zip(head).for_each(|(s, m)| *s += m * w);
        }
    }

    /// Number of layers.
    pub fn n_layer(&self) -> usize {
        self.k.len()
    }

    /// Drops every slot whose logical position is `pos` or later (slots hold increasing
    /// positions when tokens are appended in order, as a session does).
    pub fn truncate_positions(&mut self, pos: u32) {
        let keep = self.positions.iter().take_while(|&&p| p < pos).count();
        self.truncate(keep);
        if self.recurrent.as_ref().is_some_and(|r| r.next > pos) {
            self.recurrent = None;
        }
        if let Some(q) = &mut self.queries {
            q.forget_from(pos);
        }
    }

    /// Number of leading slots that hold positions `0, 1, 2, …` in order: the prefix of the
    /// sequence that no eviction has touched, which another sequence with the same first tokens
    /// can reuse as is.
    pub fn contiguous_prefix(&self) -> usize {
        self.positions.iter().enumerate().take_while(|&(i, &p)| p as usize == i).count()
    }

    /// Replaces this sequence's contents by the first `n` slots of `src` (keys, values,
    /// positions, scores and recurrent state), keeping this cache's capacity and its tracking
    /// settings. An [`Error::InvalidInput`] when the two were made for different models or
    /// storage types, when `src` holds fewer than `n` slots or `n` exceeds this cache's
    /// capacity, or when `src` has a recurrent state that is not the one after exactly those `n`
    /// tokens (it cannot be cut back).
    pub fn copy_prefix_from(&mut self, src: &SeqCache, n: usize) -> Result<()> {
        let same_shape = self.kv_dim == src.kv_dim
            && self.k.len() == src.k.len()
            && self.k.iter().zip(&src.k).all(|(a, b)| a.same_type(b))
            && self.v.iter().zip(&src.v).all(|(a, b)| a.same_type(b));
        if !same_shape {
            return Err(Error::InvalidInput(
                "cannot copy between caches of different shapes or types".into(),
            ));
        }
        if n > src.len() || n > self.capacity {
            return Err(Error::InvalidInput(format!(
                "cannot copy {n} slots (source has {}, capacity {})",
                src.len(),
                self.capacity
            )));
        }
        if src.recurrent.as_ref().is_some_and(|r| r.next as usize != n || src.contiguous_prefix() < n) {
            return Err(Error::InvalidInput(format!(
                "cannot copy {n} slots: the source's recurrent state is not the one after them"
            )));
        }
        self.truncate(0);
        if let Some(q) = &mut self.queries {
            q.forget_from(0);
        }
        self.recurrent = src.recurrent.clone();
        self.positions.extend_from_slice(&src.positions[..n]);
        self.scores.extend_from_slice(&src.scores[..n]);
        let d = self.kv_dim;
        for (dst, s) in self.k.iter_mut().zip(&src.k).chain(self.v.iter_mut().zip(&src.v)) {
            dst.extend_from(s, n * d);
        }
        Ok(())
    }

    /// Returns memory held beyond the occupied slots to the allocator (after an eviction under
    /// memory pressure; appending afterwards grows the rows again).
    pub fn shrink_to_fit(&mut self) {
        self.positions.shrink_to_fit();
        self.scores.shrink_to_fit();
        for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
            layer.shrink_to_fit();
        }
    }

    /// Number of occupied slots.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether no token is cached.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Maximum number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Logical position of each slot.
    pub fn positions(&self) -> &[u32] {
        &self.positions
    }

    /// The logical position the next token should take (one past the largest cached).
    pub fn next_position(&self) -> u32 {
        self.positions.iter().max().map_or(0, |p| p + 1)
    }

    /// Keys of a layer. `[len, kv_dim]`
    pub fn keys(&self, layer: usize) -> RowsView<'_> {
        RowsView { rows: &self.k[layer] }
    }

    /// Values of a layer. `[len, kv_dim]`
    pub fn values(&self, layer: usize) -> RowsView<'_> {
        RowsView { rows: &self.v[layer] }
    }

    /// Appends a slot for a token at logical position `pos`; its rows are zero until written.
    fn push_slot(&mut self, pos: u32) -> Result<usize> {
        if self.positions.len() >= self.capacity {
            return Err(Error::InvalidInput(format!("context is full ({} tokens)", self.capacity)));
        }
        let slot = self.positions.len();
        self.positions.push(pos);
        self.scores.push(0.0);
        for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
            layer.resize((slot + 1) * self.kv_dim);
        }
        Ok(slot)
    }

    /// Writes the key and value rows of `slot` in `layer` (quantized to the storage type).
    ///
    /// # Panics
    /// If `k` or `v` is not `kv_dim` values long, or `slot` is not occupied.
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        assert!(
            k.len() == self.kv_dim && v.len() == self.kv_dim,
            "SeqCache::write: rows are not kv_dim wide"
        );
        self.k[layer].write(slot * self.kv_dim, k);
        self.v[layer].write(slot * self.kv_dim, v);
    }

    /// The key and value rows of `slots` in `layer` when the cache stores f16 (for a backend
    /// to write them), else `None`. `[slots.len(), kv_dim]` each
    pub fn rows_f16_mut(
        &mut self,
        layer: usize,
        slots: std::ops::Range<usize>,
    ) -> Option<(&mut [f16], &mut [f16])> {
        let r = slots.start * self.kv_dim..slots.end * self.kv_dim;
        match (&mut self.k[layer], &mut self.v[layer]) {
            (Rows::F16(k), Rows::F16(v)) if r.end <= k.len() && r.end <= v.len() => {
                Some((&mut k[r.clone()], &mut v[r]))
            }
            _ => None,
        }
    }

    /// Drops every slot from `n` on (e.g. to rewind a conversation); a recurrent state that
    /// holds any of their tokens is lost.
    pub fn truncate(&mut self, n: usize) {
        if let (Some(r), Some(&p)) = (&self.recurrent, self.positions.get(n))
            && r.next > p
        {
            self.recurrent = None;
        }
        self.drop_slots_from(n);
    }

    /// Drops the slots from `n` on, leaving the recurrent state alone (compaction).
    fn drop_slots_from(&mut self, n: usize) {
        self.positions.truncate(n);
        self.scores.truncate(n);
        for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
            layer.truncate(n * self.kv_dim);
        }
    }

    /// Removes the given slots (sorted or not), compacting the rest in order. Positions of the
    /// remaining tokens are unchanged, so their keys stay valid without re-rotation.
    pub fn remove_slots(&mut self, slots: &[usize]) {
        let mut drop = vec![false; self.len()];
        for &s in slots {
            if s < drop.len() {
                drop[s] = true;
            }
        }
        let d = self.kv_dim;
        let mut w = 0;
        for (r, &dropped) in drop.iter().enumerate() {
            if dropped {
                continue;
            }
            if w != r {
                self.positions[w] = self.positions[r];
                self.scores[w] = self.scores[r];
                for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
                    layer.copy_within(r * d..(r + 1) * d, w * d);
                }
            }
            w += 1;
        }
        // Evicted keys and values leave the recurrent state as it is: it still holds every token.
        self.drop_slots_from(w);
    }
}

/// The KV cache of every sequence the engine is running.
#[derive(Debug, Clone)]
pub struct KvCache {
    n_layer: usize,
    kv_dim: usize,
    capacity: usize,
    types: (KvType, KvType),
    seqs: BTreeMap<SeqId, SeqCache>,
}

impl KvCache {
    /// An empty cache for a model with `n_layer` layers of `kv_dim`-wide keys, holding at most
    /// `capacity` tokens per sequence, with keys and values stored as `type_k` and `type_v`.
    /// Memory grows with use, up to the capacity.
    ///
    /// A block type (`q8_0`, `q4_0`) needs `kv_dim` to be a whole number of its blocks, and
    /// attention needs each head to be one: [`crate::model::Model::new_kv_cache_typed`] checks
    /// both up front; here [`KvCache::push_slot`] refuses a `kv_dim` that is not.
    pub fn new(n_layer: usize, kv_dim: usize, capacity: usize, type_k: KvType, type_v: KvType) -> Self {
        Self { n_layer, kv_dim, capacity, types: (type_k, type_v), seqs: BTreeMap::new() }
    }

    /// Storage types of keys and values.
    pub fn types(&self) -> (KvType, KvType) {
        self.types
    }

    /// Number of layers.
    pub fn n_layer(&self) -> usize {
        self.n_layer
    }

    /// Width of one key or value row.
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }

    /// Slots per sequence.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A sequence's cache, if it has one.
    pub fn seq(&self, id: SeqId) -> Option<&SeqCache> {
        self.seqs.get(&id)
    }

    /// A sequence's cache, created empty on first use.
    pub fn seq_mut(&mut self, id: SeqId) -> &mut SeqCache {
        let (n, d, c, t) = (self.n_layer, self.kv_dim, self.capacity, self.types);
        self.seqs.entry(id).or_insert_with(|| SeqCache::new(n, d, c, t))
    }

    /// Reserves a slot in sequence `id` for a token at logical position `pos`. An
    /// [`Error::InvalidInput`] when the sequence's context is full, or when `kv_dim` is not a
    /// whole number of blocks of a storage type.
    pub fn push_slot(&mut self, id: SeqId, pos: u32) -> Result<usize> {
        self.types.0.check_width(self.kv_dim)?;
        self.types.1.check_width(self.kv_dim)?;
        self.seq_mut(id).push_slot(pos)
    }

    /// Every sequence's cache, by id.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (SeqId, &mut SeqCache)> {
        self.seqs.iter_mut().map(|(&id, s)| (id, s))
    }

    /// Takes a sequence's cache out (to keep it elsewhere, e.g. in a prefix cache).
    pub fn take_seq(&mut self, id: SeqId) -> Option<SeqCache> {
        self.seqs.remove(&id)
    }

    /// Puts a sequence's cache in place of whatever sequence `id` held. It must come from a
    /// cache of the same model and types ([`KvCache::new_seq`]).
    pub fn insert_seq(&mut self, id: SeqId, seq: SeqCache) {
        self.seqs.insert(id, seq);
    }

    /// A new, empty sequence cache with this cache's shape, types and capacity, not yet part of
    /// it.
    pub fn new_seq(&self) -> SeqCache {
        SeqCache::new(self.n_layer, self.kv_dim, self.capacity, self.types)
    }

    /// Forgets a sequence.
    pub fn remove_seq(&mut self, id: SeqId) {
        self.seqs.remove(&id);
    }

    /// Forgets every sequence.
    pub fn clear(&mut self) {
        self.seqs.clear();
    }

    /// Bytes one cached token takes: its key and value rows in every layer.
    pub fn bytes_per_token(&self) -> usize {
        self.n_layer * (self.types.0.row_bytes(self.kv_dim) + self.types.1.row_bytes(self.kv_dim))
    }

    /// Bytes held by cached keys and values.
    pub fn memory_bytes(&self) -> usize {
        self.seqs.values().map(|s| s.len() * self.bytes_per_token()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_types_rotate_as_llama_cpp_does() {
        use KvType::*;
        let rot = |k, v, hd| KvRotation::new((k, v), hd);
        // Float caches never rotate.
        assert_eq!(rot(F16, F16, 128), KvRotation::default());
        assert_eq!(rot(F32, F16, 64), KvRotation::default());
        // Keys: the largest power of two dividing the head size; values: 64.
        assert_eq!(rot(Q8_0, Q8_0, 64), KvRotation { k: Some(64), v: Some(64) });
        assert_eq!(rot(Q4_0, F16, 128), KvRotation { k: Some(128), v: None });
        assert_eq!(rot(F16, Q4_0, 256), KvRotation { k: None, v: Some(64) });
        assert_eq!(rot(Q8_0, Q8_0, 192), KvRotation { k: Some(64), v: Some(64) });
        assert_eq!(rot(Q8_0, Q8_0, 512), KvRotation { k: Some(512), v: Some(64) });
        // A head size that is not a multiple of 64 is stored unrotated.
        assert_eq!(rot(Q8_0, Q8_0, 96), KvRotation::default());
        assert_eq!(rot(Q8_0, Q8_0, 32), KvRotation::default());
    }

    #[test]
    fn slots_and_positions_are_separate() {
        let mut kv = KvCache::new(1, 2, 8, KvType::F32, KvType::F16);
        for p in 0..5 {
            let s = kv.push_slot(0, p).expect("slot");
            kv.seq_mut(0).write(0, s, &[p as f32, 0.0], &[0.0, p as f32]);
        }
        kv.seq_mut(0).remove_slots(&[1, 2]);
        let s = kv.seq(0).expect("seq");
        assert_eq!(s.positions(), &[0, 3, 4]);
        assert_eq!(s.keys(0).as_f32(), Some(&[0.0, 0.0, 3.0, 0.0, 4.0, 0.0][..]));
        let mut v = [0.0; 6];
        s.values(0).read(0, &mut v);
        assert_eq!(v, [0.0, 0.0, 0.0, 3.0, 0.0, 4.0]);
        assert_eq!(s.next_position(), 5);
        let slot = kv.push_slot(0, 5).expect("slot");
        assert_eq!(slot, 3);
    }

    #[test]
    fn capacity_is_enforced() {
        let mut kv = KvCache::new(1, 1, 2, KvType::F16, KvType::F16);
        kv.push_slot(3, 0).expect("slot");
        kv.push_slot(3, 1).expect("slot");
        assert!(kv.push_slot(3, 2).is_err());
        assert!(kv.push_slot(4, 0).is_ok());
    }

    #[test]
    fn type_names_round_trip() {
        for t in KvType::ALL {
            assert_eq!(KvType::from_name(t.name()), Some(t));
            assert_eq!(t.to_string(), t.name());
        }
        assert_eq!(KvType::from_name("Q8_0"), Some(KvType::Q8_0));
        assert_eq!(KvType::from_name("q4_1"), None);
    }

    #[test]
    fn memory_is_counted_in_blocks() {
        for (k, v, row) in [
            (KvType::F32, KvType::F32, 2 * 256),
            (KvType::F16, KvType::F16, 2 * 128),
            (KvType::Q8_0, KvType::Q8_0, 2 * 68),
            (KvType::Q4_0, KvType::Q4_0, 2 * 36),
            (KvType::Q8_0, KvType::F16, 68 + 128),
        ] {
            let mut kv = KvCache::new(3, 64, 8, k, v);
            assert_eq!(kv.bytes_per_token(), 3 * row, "{k} {v}");
            for p in 0..5 {
                kv.push_slot(1, p).expect("slot");
            }
            kv.push_slot(2, 0).expect("slot");
            assert_eq!(kv.memory_bytes(), 6 * 3 * row, "{k} {v}");
        }
    }

    #[test]
    fn block_types_need_whole_blocks() {
        assert!(KvType::Q8_0.check_width(64).is_ok());
        assert!(matches!(KvType::Q4_0.check_width(80), Err(Error::InvalidInput(_))));
        assert!(KvType::F16.check_width(80).is_ok());
        let mut kv = KvCache::new(1, 48, 8, KvType::F16, KvType::Q4_0);
        assert!(matches!(kv.push_slot(0, 0), Err(Error::InvalidInput(_))));
        assert_eq!(kv.memory_bytes(), 0);
        let mut kv = KvCache::new(1, 48, 8, KvType::F16, KvType::F32);
        assert!(kv.push_slot(0, 0).is_ok());
    }

    #[test]
    fn quantized_rows_survive_removal_and_truncation() {
        let d = 64;
        for ty in [KvType::Q8_0, KvType::Q4_0] {
            let mut kv = KvCache::new(2, d, 16, ty, ty);
            let row = |p: u32, layer: usize, v: bool| -> Vec<f32> {
                (0..d)
                    .map(|i| {
                        ((i as f32 + 1.0) * (p as f32 + 2.0) * if v { -0.01 } else { 0.013 }).sin()
                            + layer as f32
                    })
                    .collect()
            };
            let mut want: Vec<[Vec<f32>; 4]> = Vec::new();
            for p in 0..9 {
                let s = kv.push_slot(0, p).expect("slot");
                for layer in 0..2 {
                    kv.seq_mut(0).write(layer, s, &row(p, layer, false), &row(p, layer, true));
                }
                // What each row reads back as right after writing (the quantized values).
                let seq = kv.seq(0).expect("seq");
                let mut got: [Vec<f32>; 4] = std::array::from_fn(|_| vec![0.0; d]);
                for layer in 0..2 {
                    seq.keys(layer).read(s * d, &mut got[2 * layer]);
                    seq.values(layer).read(s * d, &mut got[2 * layer + 1]);
                    let err = got[2 * layer].iter().zip(row(p, layer, false)).map(|(a, b)| (a - b).abs());
                    let tol = if ty == KvType::Q8_0 { 0.02 } else { 0.2 };
                    assert!(err.fold(0.0, f32::max) < tol, "{ty}: row {p} layer {layer}");
                }
                want.push(got);
            }
            kv.seq_mut(0).remove_slots(&[0, 4, 5, 8]);
            kv.seq_mut(0).truncate(4);
            let seq = kv.seq(0).expect("seq");
            assert_eq!(seq.positions(), &[1, 2, 3, 6]);
            for (slot, &p) in seq.positions().iter().enumerate() {
                for layer in 0..2 {
                    let mut k = vec![0.0; d];
                    let mut v = vec![0.0; d];
                    seq.keys(layer).read(slot * d, &mut k);
                    seq.values(layer).read(slot * d, &mut v);
                    assert_eq!(k, want[p as usize][2 * layer], "{ty}: keys of slot {slot}");
                    assert_eq!(v, want[p as usize][2 * layer + 1], "{ty}: values of slot {slot}");
                }
            }
            let all = seq.values(1).to_f32();
            assert_eq!(all.len(), 4 * d);
            assert_eq!(&all[3 * d..], &want[6][3][..]);
            assert_eq!(seq.keys(0).as_blocks().map(|(t, b)| (t, b.len())), Some((ty, 4 * ty.row_bytes(d))));
            assert!(seq.keys(0).as_f32().is_none() && seq.keys(0).as_f16().is_none());
            assert_eq!(kv.memory_bytes(), 4 * 2 * 2 * ty.row_bytes(d));
        }
    }
}
