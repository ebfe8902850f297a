//! Saving a session's state to a file and loading it back ([`Session::save_state`],
//! [`Session::load_state`]; llama.cpp's `llama_state_seq_save_file` / `_load_file`).

use std::path::Path;

use super::{SEQ, Session};
use crate::kv::{decode_state, encode_state};
use crate::{Error, Result};

/// What [`Session::save_state`] or [`Session::load_state`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateIo {
    /// Tokens saved or restored.
    pub n_tokens: usize,
    /// Bytes written or read.
    pub n_bytes: usize,
}

impl Session<'_> {
    /// Writes the conversation (its tokens, its KV cache as stored and the logits after its last
    /// token) to `path`, so that [`Session::load_state`] on a session of the same model and KV
    /// types continues it exactly as this one would.
    pub fn save_state(&self, path: impl AsRef<Path>) -> Result<StateIo> {
        let bytes = self.state_bytes()?;
        std::fs::write(path.as_ref(), &bytes)
            .map_err(|e| Error::InvalidInput(format!("cannot write {}: {e}", path.as_ref().display())))?;
        Ok(StateIo { n_tokens: self.seq.len(), n_bytes: bytes.len() })
    }

    /// Replaces the conversation by one saved with [`Session::save_state`]. An
    /// [`Error::InvalidInput`] (and the session unchanged) when the file cannot be read, was
    /// saved for another model or KV type, or is truncated or corrupt.
    pub fn load_state(&mut self, path: impl AsRef<Path>) -> Result<StateIo> {
        let bytes = std::fs::read(path.as_ref())
            .map_err(|e| Error::InvalidInput(format!("cannot read {}: {e}", path.as_ref().display())))?;
        self.load_state_bytes(&bytes)?;
        Ok(StateIo { n_tokens: self.seq.len(), n_bytes: bytes.len() })
    }

    /// The state [`Session::save_state`] writes, as bytes.
    pub fn state_bytes(&self) -> Result<Vec<u8>> {
        let seq = self.kv.seq(SEQ).ok_or_else(|| Error::InvalidInput("the session has no cache".into()))?;
        encode_state(&self.model.state_identity(&self.kv), self.seq.tokens(), seq, &self.logits)
    }

    /// Loads a state from bytes of [`Session::state_bytes`] (see [`Session::load_state`]).
    pub fn load_state_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let state = decode_state(bytes, &self.model.state_identity(&self.kv), &self.kv)?;
        let n_vocab = self.model.config().n_vocab;
        if !(state.logits.is_empty() || state.logits.len() == n_vocab) {
            return Err(Error::InvalidInput(format!(
                "the saved logits have {} entries for a vocabulary of {n_vocab}",
                state.logits.len()
            )));
        }
        if state.tokens.iter().any(|&t| t as usize >= n_vocab) {
            return Err(Error::InvalidInput("the saved tokens are outside the vocabulary".into()));
        }
        self.seq.restore(&mut self.kv, state.cache, state.tokens)?;
        self.logits = state.logits;
        Ok(())
    }
}
