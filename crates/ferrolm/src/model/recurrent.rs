//! The per-sequence state of recurrent layers (gated delta nets, short convolutions), kept in
//! [`RecurrentState`] beside the attention layers' keys and values: for each recurrent layer one
//! buffer, which the layer's own module lays out.
//!
//! A state is valid for exactly the tokens it has taken. [`begin`] checks before a pass that
//! each sequence's first new token continues its state (or starts one at position 0) and marks
//! the states in use; [`end`] records where each stands after the pass. A pass that fails in
//! between leaves the marks, so the caller's truncation back to the old length drops the
//! half-updated states ([`crate::kv::SeqCache::truncate_positions`]).

use crate::batch::BatchEntry;
use crate::kv::{KvCache, RecurrentState, SeqId};
use crate::{Error, Result};

/// Marks a state in use by a pass: no position continues it until [`end`] sets its next one.
const IN_PASS: u32 = u32::MAX;

/// Checks that each sequence of the batch continues its recurrent state (a sequence whose first
/// new token has position 0 gets a zero state) and marks the states in use. An
/// [`Error::InvalidInput`] for a sequence that lost its state (it must start again from 0).
pub(crate) fn begin(
    (n_layers, state_len): (usize, usize),
    entries: &[BatchEntry],
    kv: &mut KvCache,
) -> Result<()> {
    let mut seen: Vec<SeqId> = Vec::new(); // a batch holds few sequences
    for e in entries {
        if seen.contains(&e.seq) {
            continue; // not the sequence's first token in the batch
        }
        seen.push(e.seq);
        let state = kv.seq_mut(e.seq).recurrent_mut();
        match state {
            Some(s) if s.next == e.pos => s.next = IN_PASS,
            None if e.pos == 0 => {
                let layers = vec![vec![0.0; state_len]; n_layers];
                *state = Some(RecurrentState { next: IN_PASS, layers });
            }
            _ => {
                let at = state.as_ref().map_or("no state".to_string(), |s| format!("a state at {}", s.next));
                return Err(Error::InvalidInput(format!(
                    "sequence {} has {at} and cannot continue at position {}: a model with \
                     recurrent layers cannot drop tokens, the sequence must start again from 0",
                    e.seq, e.pos
                )));
            }
        }
    }
    Ok(())
}

/// Records where each sequence of the batch stands after the pass: one past its last token.
pub(crate) fn end(entries: &[BatchEntry], kv: &mut KvCache) {
    for e in entries {
        if let Some(s) = kv.seq_mut(e.seq).recurrent_mut() {
            s.next = if s.next == IN_PASS { e.pos + 1 } else { s.next.max(e.pos + 1) };
        }
    }
}

/// Layer `ordinal`'s state of sequence `seq`.
pub(super) fn layer_state(kv: &mut KvCache, seq: SeqId, ordinal: usize) -> Result<&mut [f32]> {
    kv.seq_mut(seq)
        .recurrent_mut()
        .as_mut()
        .and_then(|s| s.layers.get_mut(ordinal))
        .map(Vec::as_mut_slice)
        .ok_or_else(|| Error::InvalidInput(format!("sequence {seq} has no recurrent state")))
}

/// One token's causal depthwise convolution of `x` (`[channels]`) with the history `hist`
/// (`[K - 1, channels]`, oldest first, then advanced by `x`) and the taps `taps`
/// (`[channels, K]`, oldest input first), into `out`.
pub(super) fn causal_conv(taps: &[f32], k: usize, hist: &mut [f32], x: &[f32], out: &mut [f32]) {
    let channels = x.len();
    for (c, o) in out.iter_mut().enumerate() {
        let taps = &taps[c * k..(c + 1) * k];
        let past: f32 = (0..k - 1).map(|j| taps[j] * hist[j * channels + c]).sum();
        *o = past + taps[k - 1] * x[c];
    }
    hist.copy_within(channels.., 0);
    hist[(k - 2) * channels..].copy_from_slice(x);
}
