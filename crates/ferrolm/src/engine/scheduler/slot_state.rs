//! llama-server's slot actions on the engine thread: save a slot's cached conversation to
//! bytes, restore one (into the prefix cache, where the next request with the same prefix
//! reuses it) and erase one. An action on a busy slot waits until its request ends, as
//! llama-server defers it.

use super::Worker;
use crate::engine::{EngineError, SlotAction, SlotOutcome};
use crate::kv::{decode_state, encode_state};

/// A slot action waiting for the engine thread (or for its slot to be free).
pub(crate) struct SlotJob {
    pub(crate) slot: usize,
    pub(crate) action: SlotAction,
    pub(crate) tx: std::sync::mpsc::Sender<Result<SlotOutcome, EngineError>>,
}

impl Worker {
    /// Takes a slot action: runs it now, or keeps it until its slot is free.
    pub(super) fn accept_slot_job(&mut self, job: SlotJob) {
        if job.slot >= self.slots.len() {
            let _ = job.tx.send(Err(EngineError::InvalidSlot(job.slot)));
            return;
        }
        self.slot_jobs.push(job);
        self.run_slot_jobs();
    }

    /// Runs the waiting slot actions whose slot is free (between ticks).
    pub(super) fn run_slot_jobs(&mut self) {
        let jobs = std::mem::take(&mut self.slot_jobs);
        for job in jobs {
            if self.slots[job.slot].is_some() {
                self.slot_jobs.push(job);
                continue;
            }
            let t0 = std::time::Instant::now();
            let result = match job.action {
                SlotAction::Save => self.save_slot(job.slot),
                SlotAction::Restore(bytes) => self.restore_slot(job.slot, &bytes),
                SlotAction::Erase => Ok(self.erase_slot(job.slot)),
            };
            tracing::debug!(
                slot = job.slot,
                ms = t0.elapsed().as_millis() as u64,
                ok = result.is_ok(),
                "slot action"
            );
            let _ = job.tx.send(result);
        }
    }

    /// The state of what slot `i`'s last request left in the prefix cache (as much of it as is
    /// still there).
    fn save_slot(&mut self, i: usize) -> Result<SlotOutcome, EngineError> {
        let tokens = self.slot_tokens[i].clone();
        let mut seq = self.kv.new_seq();
        let n = match self.prefix.lookup(&tokens) {
            Some((cached, n)) => {
                seq.copy_prefix_from(cached, n)?;
                n
            }
            None => 0,
        };
        let id = self.model.state_identity(&self.kv);
        let bytes = encode_state(&id, &tokens[..n], &seq, &[])?;
        Ok(SlotOutcome::Saved { n_tokens: n, bytes })
    }

    /// Puts a saved state into the prefix cache as slot `i`'s conversation.
    fn restore_slot(&mut self, i: usize, bytes: &[u8]) -> Result<SlotOutcome, EngineError> {
        let id = self.model.state_identity(&self.kv);
        let state = decode_state(bytes, &id, &self.kv)?;
        let n_vocab = self.model.config().n_vocab;
        if state.tokens.iter().any(|&t| t as usize >= n_vocab) {
            return Err(
                crate::Error::InvalidInput("the saved tokens are outside the vocabulary".into()).into()
            );
        }
        let n_restored = state.tokens.len();
        let mut cache = state.cache;
        let valid = cache.contiguous_prefix().min(n_restored);
        self.erase_slot(i);
        if valid == 0 {
            return Ok(SlotOutcome::Restored { n_tokens: n_restored });
        }
        if self.config.prefix_cache_bytes == 0 {
            return Err(EngineError::Config(
                "restoring a slot needs the prefix cache (it is disabled)".into(),
            ));
        }
        cache.truncate(valid);
        let tokens = state.tokens[..valid].to_vec();
        self.prefix.insert(tokens.clone(), cache, valid * self.kv.bytes_per_token());
        if self.prefix.peek_len(&tokens) < valid {
            return Err(EngineError::Config(format!(
                "the restored {valid} tokens do not fit in the prefix cache's budget of {} bytes",
                self.prefix.budget()
            )));
        }
        self.slot_tokens[i] = tokens;
        self.releaser.freed();
        Ok(SlotOutcome::Restored { n_tokens: n_restored })
    }

    /// Forgets slot `i`'s conversation: its entry leaves the prefix cache. Returns the number
    /// of tokens it held.
    fn erase_slot(&mut self, i: usize) -> SlotOutcome {
        let tokens = std::mem::take(&mut self.slot_tokens[i]);
        if !tokens.is_empty() {
            drop(self.prefix.remove(&tokens));
            self.releaser.freed();
        }
        SlotOutcome::Erased { n_tokens: tokens.len() }
    }
}
