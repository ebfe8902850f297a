//! [`Sequence`]: one sequence of a KV cache and the forward protocol every caller shares.
//!
//! A forward pass over a sequence's tokens is always the same two steps: the sequence's
//! [`CacheManager`] makes room for the new tokens (evicting by its policy, or refusing when the
//! context is full), then the tokens go into the [`Batch`] at the sequence's next logical
//! positions. [`Sequence::feed`] is those two steps; `Session`, `Engine`, perplexity and
//! `ferrolm bench` all call it, then run the batch with [`Model::forward_into`].
//!
//! The state of one sequence is:
//! - its storage in the [`KvCache`] (keys and values per physical slot, logical positions), under
//!   its [`SeqId`];
//! - its [`CacheManager`]: the eviction policy and when it runs (budget, memory pressure);
//! - the buffers its policy asked the forward pass to fill (H2O's accumulated attention per slot,
//!   SnapKV's query log), kept beside its storage and set up by the manager
//!   ([`CacheManager::prepare_seq`]): the forward pass writes what a policy asked to observe and
//!   keeps nothing itself;
//! - every token run through the model for it, in order (token `i` has logical position `i`).
//!
//! [`Model::forward_into`]: crate::model::Model::forward_into

use crate::batch::Batch;
use crate::kv::{CacheManager, EvictionStats, KvCache, SeqCache, SeqId};
use crate::{Error, Result};

/// Which tokens of a [`Sequence::feed`] want the logits after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// None (a prompt chunk that is not the prompt's end).
    None,
    /// The last token's (a decode step, the end of a prompt).
    Last,
    /// Every token's (prompt log-probabilities, benchmarks of decode steps).
    All,
    /// The tokens' from this index in the fed tokens on (perplexity's scored part).
    From(usize),
}

impl Outputs {
    fn wants(self, i: usize, n: usize) -> bool {
        match self {
            Outputs::None => false,
            Outputs::Last => i + 1 == n,
            Outputs::All => true,
            Outputs::From(k) => i >= k,
        }
    }
}

/// One sequence of a [`KvCache`]: its id, its cache manager and the tokens it holds. See the
/// [module doc](self).
#[derive(Debug)]
pub struct Sequence {
    id: SeqId,
    manager: CacheManager,
    /// Every token run through the model, in order: token `i` has logical position `i`. Its keys
    /// and values are in the cache unless evicted.
    tokens: Vec<u32>,
}

impl Sequence {
    /// A new, empty sequence `id` in `kv` (any cache it had there is dropped), kept bounded by
    /// `manager`.
    pub fn new(kv: &mut KvCache, id: SeqId, manager: CacheManager) -> Self {
        let mut fresh = kv.new_seq();
        manager.prepare_seq(&mut fresh);
        kv.insert_seq(id, fresh);
        Self { id, manager, tokens: Vec::new() }
    }

    /// A sequence `id` in `kv` that starts with `prefix`: the first `n` tokens of `src`'s cache
    /// are copied (a prefix cache hit). Fails when `src` was made for another model or storage
    /// type, or holds fewer than `n` slots.
    pub fn from_prefix(
        kv: &mut KvCache,
        id: SeqId,
        manager: CacheManager,
        src: &SeqCache,
        prefix: &[u32],
    ) -> Result<Self> {
        let mut fresh = kv.new_seq();
        manager.prepare_seq(&mut fresh);
        fresh.copy_prefix_from(src, prefix.len())?;
        kv.insert_seq(id, fresh);
        Ok(Self { id, manager, tokens: prefix.to_vec() })
    }

    /// Replaces the sequence's cache by `cache` (made by [`KvCache::new_seq`] of `kv`, e.g. read
    /// back from a saved state) holding `tokens`. An [`Error::InvalidInput`] when the cache holds
    /// more slots than there are tokens.
    pub fn restore(&mut self, kv: &mut KvCache, mut cache: SeqCache, tokens: Vec<u32>) -> Result<()> {
        if cache.len() > tokens.len() || cache.positions().iter().any(|&p| p as usize >= tokens.len()) {
            return Err(Error::InvalidInput("the restored cache holds positions past its tokens".into()));
        }
        self.manager.prepare_seq(&mut cache);
        kv.insert_seq(self.id, cache);
        self.tokens = tokens;
        Ok(())
    }

    /// The sequence's id in its cache.
    pub fn id(&self) -> SeqId {
        self.id
    }

    /// Every token run through the model for this sequence, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Number of tokens run through the model (the next token's logical position).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token was run yet.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Tokens whose keys and values are cached now (fewer than [`Sequence::len`] once some were
    /// evicted).
    pub fn kv_len(&self, kv: &KvCache) -> usize {
        kv.seq(self.id).map_or(0, SeqCache::len)
    }

    /// The cache manager.
    pub fn manager(&self) -> &CacheManager {
        &self.manager
    }

    /// Evictions so far.
    pub fn eviction_stats(&self) -> EvictionStats {
        self.manager.stats()
    }

    /// Whether no further token fits: the cache is at its limit and the policy never evicts.
    pub fn is_full(&self, kv: &KvCache) -> bool {
        !self.manager.evicts() && self.kv_len(kv) >= self.manager.limit()
    }

    /// Checks that `prompt` can run in this sequence: not empty, ids inside the vocabulary of
    /// `n_vocab`, and not longer than the context when the cache does not evict.
    pub fn check_prompt(&self, prompt: &[u32], n_vocab: usize) -> Result<()> {
        check_prompt(prompt, n_vocab, self.manager.evicts(), self.manager.limit())
    }

    /// Most tokens one forward pass may add for this sequence.
    pub fn max_chunk(&self, in_prompt: bool) -> usize {
        self.manager.max_chunk(in_prompt)
    }

    /// The forward protocol: makes room for `tokens` (evicting by the policy; an error when the
    /// context is full) and appends them to `batch` at this sequence's next positions, asking
    /// for the logits `outputs` names. The tokens count as run from now on: if the forward pass
    /// then fails, call [`Sequence::truncate`] back to the length before. `in_prompt`: the
    /// tokens are part of a prompt (call [`Sequence::end_prompt`] after its last chunk).
    pub fn feed(
        &mut self,
        kv: &mut KvCache,
        batch: &mut Batch,
        tokens: &[u32],
        in_prompt: bool,
        outputs: Outputs,
    ) -> Result<()> {
        self.manager.make_room(kv.seq_mut(self.id), tokens.len(), in_prompt)?;
        let start = self.tokens.len();
        for (i, &t) in tokens.iter().enumerate() {
            batch.push(self.id, (start + i) as u32, t, outputs.wants(i, tokens.len()));
        }
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// The prompt is in: a policy that compresses prompts (SnapKV) shrinks the cache now.
    pub fn end_prompt(&mut self, kv: &mut KvCache) {
        self.manager.end_prompt(kv.seq_mut(self.id));
    }

    /// Drops the tokens after the first `n` (and their cache slots).
    pub fn truncate(&mut self, kv: &mut KvCache, n: usize) {
        if n < self.tokens.len() {
            kv.seq_mut(self.id).truncate_positions(n as u32);
            self.tokens.truncate(n);
        }
    }

    /// Forgets every token; the cache of the sequence is emptied.
    pub fn clear(&mut self, kv: &mut KvCache) {
        kv.seq_mut(self.id).truncate_positions(0);
        self.tokens.clear();
    }

    /// Takes the sequence's cache out of `kv` (leaving an empty one) with its tokens: what a
    /// prefix cache keeps of a finished request.
    pub fn take_cache(mut self, kv: &mut KvCache) -> (Option<SeqCache>, Vec<u32>) {
        let old = kv.take_seq(self.id);
        kv.insert_seq(self.id, kv.new_seq());
        (old, std::mem::take(&mut self.tokens))
    }
}

/// The checks of [`Sequence::check_prompt`], for callers that have no sequence yet (a queue).
pub fn check_prompt(prompt: &[u32], n_vocab: usize, evicts: bool, limit: usize) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::InvalidInput("the prompt is empty".into()));
    }
    if !evicts && prompt.len() > limit {
        return Err(Error::InvalidInput(format!(
            "the prompt has {} tokens, more than the context size of {limit}",
            prompt.len()
        )));
    }
    if let Some(&t) = prompt.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(Error::InvalidInput(format!("token id {t} is outside the vocabulary ({n_vocab})")));
    }
    Ok(())
}
