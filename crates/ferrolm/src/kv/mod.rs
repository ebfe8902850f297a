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

use std::collections::BTreeMap;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::{Error, Result};

pub use manager::{CacheManager, CacheOptions, EvictionEvent, EvictionReason, EvictionStats};
pub use monitor::{FixedMonitor, ProcMonitor, SystemMonitor};
pub use policy::{EvictionPolicy, PolicyKind, make_policy};
pub use query_log::QueryLog;

/// Storage type of cached keys or values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// 32-bit floats: exact, twice the memory of f16.
    F32,
    /// 16-bit floats (llama.cpp's default).
    #[default]
    F16,
}

impl KvType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }

    /// Parses `f32` / `f16`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            _ => None,
        }
    }
}

/// Rows of one layer's keys or values in their storage type. `[len, kv_dim]`
#[derive(Debug, Clone)]
enum Rows {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Rows {
    /// Empty rows with room for `reserve` values. The reservation is address space only until
    /// written (the allocator maps large blocks lazily), and it keeps appending a token from
    /// ever reallocating.
    fn new(ty: KvType, reserve: usize) -> Self {
        match ty {
            KvType::F32 => Rows::F32(Vec::with_capacity(reserve)),
            KvType::F16 => Rows::F16(Vec::with_capacity(reserve)),
        }
    }

    fn resize(&mut self, n: usize) {
        match self {
            Rows::F32(v) => v.resize(n, 0.0),
            Rows::F16(v) => v.resize(n, f16::ZERO),
        }
    }

    fn truncate(&mut self, n: usize) {
        match self {
            Rows::F32(v) => v.truncate(n),
            Rows::F16(v) => v.truncate(n),
        }
    }

    fn shrink_to_fit(&mut self) {
        match self {
            Rows::F32(v) => v.shrink_to_fit(),
            Rows::F16(v) => v.shrink_to_fit(),
        }
    }

    fn copy_within(&mut self, src: std::ops::Range<usize>, dst: usize) {
        match self {
            Rows::F32(v) => v.copy_within(src, dst),
            Rows::F16(v) => v.copy_within(src, dst),
        }
    }

    fn write(&mut self, at: usize, x: &[f32]) {
        match self {
            Rows::F32(v) => v[at..at + x.len()].copy_from_slice(x),
            Rows::F16(v) => v[at..at + x.len()].convert_from_f32_slice(x),
        }
    }

    fn read(&self, at: usize, out: &mut [f32]) {
        match self {
            Rows::F32(v) => out.copy_from_slice(&v[at..at + out.len()]),
            Rows::F16(v) => v[at..at + out.len()].convert_to_f32_slice(out),
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
        }
    }

    /// The rows as f32, if that is their storage type (no conversion needed).
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self.rows {
            Rows::F32(v) => Some(v),
            Rows::F16(_) => None,
        }
    }

    /// The rows as f16, if that is their storage type.
    pub fn as_f16(&self) -> Option<&'a [f16]> {
        match self.rows {
            Rows::F16(v) => Some(v),
            Rows::F32(_) => None,
        }
    }
}

/// Identifies one sequence (one conversation) in a batch and in the cache.
pub type SeqId = u32;

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
        }
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

    /// The recent queries, mutable (the forward pass records into it).
    pub fn query_log_mut(&mut self) -> Option<&mut QueryLog> {
        self.queries.as_mut()
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
        if let Some(q) = &mut self.queries {
            q.forget_from(pos);
        }
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

    /// Writes the key and value rows of `slot` in `layer`.
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        self.k[layer].write(slot * self.kv_dim, k);
        self.v[layer].write(slot * self.kv_dim, v);
    }

    /// Drops every slot from `n` on (e.g. to rewind a conversation).
    pub fn truncate(&mut self, n: usize) {
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
        self.truncate(w);
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

    /// Reserves a slot in sequence `id` for a token at logical position `pos`.
    pub fn push_slot(&mut self, id: SeqId, pos: u32) -> Result<usize> {
        self.seq_mut(id).push_slot(pos)
    }

    /// Forgets a sequence.
    pub fn remove_seq(&mut self, id: SeqId) {
        self.seqs.remove(&id);
    }

    /// Forgets every sequence.
    pub fn clear(&mut self) {
        self.seqs.clear();
    }

    /// Bytes held by cached keys and values.
    pub fn memory_bytes(&self) -> usize {
        let per_token = self.kv_dim * self.n_layer * (self.types.0.size() + self.types.1.size());
        self.seqs.values().map(|s| s.len() * per_token).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
