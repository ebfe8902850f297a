//! The KV cache, owned by the engine (not by the model).
//!
//! Each sequence has its own cache: per layer a key and a value row per *physical slot*, and per
//! slot the *logical position* of the token stored there. Logical positions drive RoPE and the
//! attention mask and grow by one per token forever; physical slots are where the rows live and
//! shrink when tokens are evicted. Keys are stored already rotated and are never re-rotated.

use std::collections::BTreeMap;

use crate::{Error, Result};

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
    k: Vec<Vec<f32>>,
    /// Values per layer. `[n_layer][len, n_head_kv * head_dim]`
    v: Vec<Vec<f32>>,
}

impl SeqCache {
    fn new(n_layer: usize, kv_dim: usize, capacity: usize) -> Self {
        Self {
            kv_dim,
            capacity,
            positions: Vec::new(),
            k: vec![Vec::new(); n_layer],
            v: vec![Vec::new(); n_layer],
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
    pub fn keys(&self, layer: usize) -> &[f32] {
        &self.k[layer]
    }

    /// Values of a layer. `[len, kv_dim]`
    pub fn values(&self, layer: usize) -> &[f32] {
        &self.v[layer]
    }

    /// Appends a slot for a token at logical position `pos`; its rows are zero until written.
    fn push_slot(&mut self, pos: u32) -> Result<usize> {
        if self.positions.len() >= self.capacity {
            return Err(Error::InvalidInput(format!("context is full ({} tokens)", self.capacity)));
        }
        let slot = self.positions.len();
        self.positions.push(pos);
        for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
            layer.resize((slot + 1) * self.kv_dim, 0.0);
        }
        Ok(slot)
    }

    /// Writes the key and value rows of `slot` in `layer`.
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let r = slot * self.kv_dim..(slot + 1) * self.kv_dim;
        self.k[layer][r.clone()].copy_from_slice(k);
        self.v[layer][r].copy_from_slice(v);
    }

    /// Drops every slot from `n` on (e.g. to rewind a conversation).
    pub fn truncate(&mut self, n: usize) {
        self.positions.truncate(n);
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
    seqs: BTreeMap<SeqId, SeqCache>,
}

impl KvCache {
    /// An empty cache for a model with `n_layer` layers of `kv_dim`-wide keys, holding at most
    /// `capacity` tokens per sequence. Memory grows with use, up to the capacity.
    pub fn new(n_layer: usize, kv_dim: usize, capacity: usize) -> Self {
        Self { n_layer, kv_dim, capacity, seqs: BTreeMap::new() }
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
        let (n, d, c) = (self.n_layer, self.kv_dim, self.capacity);
        self.seqs.entry(id).or_insert_with(|| SeqCache::new(n, d, c))
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
        self.seqs.values().map(|s| s.len() * self.kv_dim * 2 * self.n_layer * 4).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_positions_are_separate() {
        let mut kv = KvCache::new(1, 2, 8);
        for p in 0..5 {
            let s = kv.push_slot(0, p).expect("slot");
            kv.seq_mut(0).write(0, s, &[p as f32, 0.0], &[0.0, p as f32]);
        }
        kv.seq_mut(0).remove_slots(&[1, 2]);
        let s = kv.seq(0).expect("seq");
        assert_eq!(s.positions(), &[0, 3, 4]);
        assert_eq!(s.keys(0), &[0.0, 0.0, 3.0, 0.0, 4.0, 0.0]);
        assert_eq!(s.next_position(), 5);
        let slot = kv.push_slot(0, 5).expect("slot");
        assert_eq!(slot, 3);
    }

    #[test]
    fn capacity_is_enforced() {
        let mut kv = KvCache::new(1, 1, 2);
        kv.push_slot(3, 0).expect("slot");
        kv.push_slot(3, 1).expect("slot");
        assert!(kv.push_slot(3, 2).is_err());
        assert!(kv.push_slot(4, 0).is_ok());
    }
}
