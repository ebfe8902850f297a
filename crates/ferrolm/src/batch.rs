//! [`Batch`]: the one input of every forward pass, and [`Logits`], its output. Generation on
//! top of them lives in [`crate::session`] (one user) and [`crate::engine`] (many users).

use crate::kv::SeqId;

/// One token of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    /// The sequence (conversation) the token belongs to.
    pub seq: SeqId,
    /// Its logical position in that sequence.
    pub pos: u32,
    /// The token id.
    pub token: u32,
    /// Whether the caller wants the logits after this token.
    pub logits: bool,
}

/// A list of `(seq, position, token, wants_logits)`. A prompt chunk, a single decode step and a
/// server tick mixing many sequences are all the same call.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    entries: Vec<BatchEntry>,
    /// Sequences whose tokens here are part of a longer prompt chunk: `(seq, chunk length)`.
    prompt_chunks: Vec<(SeqId, u32)>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token.
    pub fn push(&mut self, seq: SeqId, pos: u32, token: u32, logits: bool) {
        self.entries.push(BatchEntry { seq, pos, token, logits });
    }

    /// A run of tokens of one sequence starting at `start_pos`, with logits for the last only.
    pub fn from_prompt(seq: SeqId, start_pos: u32, tokens: &[u32]) -> Self {
        let mut b = Self::new();
        b.set_prompt(seq, start_pos, tokens);
        b
    }

    /// Replaces the contents by [`Batch::from_prompt`]'s, keeping the allocation.
    pub fn set_prompt(&mut self, seq: SeqId, start_pos: u32, tokens: &[u32]) {
        self.clear();
        for (i, &t) in tokens.iter().enumerate() {
            self.push(seq, start_pos + i as u32, t, i + 1 == tokens.len());
        }
    }

    /// The tokens.
    pub fn entries(&self) -> &[BatchEntry] {
        &self.entries
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes all tokens (and [`Batch::set_prompt_chunk`] declarations), keeping the allocation.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.prompt_chunks.clear();
    }

    /// Declares that `seq`'s tokens in this batch belong to a prompt chunk of `len` tokens (the
    /// rest of a chunk whose start came from a prefix cache, or a part of one split across
    /// batches). The forward pass then computes them exactly as if the whole chunk ran in one
    /// batch — attention picks its path by the chunk's length, not by the tokens present — so a
    /// prompt's results do not depend on how it was split or how much of it was cached.
    pub fn set_prompt_chunk(&mut self, seq: SeqId, len: u32) {
        match self.prompt_chunks.iter_mut().find(|(s, _)| *s == seq) {
            Some(c) => c.1 = len,
            None => self.prompt_chunks.push((seq, len)),
        }
    }

    /// The `(sequence, chunk length)` declarations of [`Batch::set_prompt_chunk`].
    pub fn prompt_chunks(&self) -> &[(SeqId, u32)] {
        &self.prompt_chunks
    }
}

/// Logits for the batch entries that asked for them.
#[derive(Clone, Debug, Default)]
pub struct Logits {
    n_vocab: usize,
    /// `[n_outputs, n_vocab]`
    data: Vec<f32>,
    /// Batch index of each output row.
    batch_index: Vec<usize>,
}

impl Logits {
    /// Resizes for `rows.len()` rows of `n_vocab` and records their batch indices, reusing the
    /// buffers; returns the data to fill. `[rows.len(), n_vocab]`
    pub(crate) fn reset(&mut self, n_vocab: usize, rows: &[usize]) -> &mut [f32] {
        self.n_vocab = n_vocab;
        self.batch_index.clear();
        self.batch_index.extend_from_slice(rows);
        self.data.resize(n_vocab * rows.len(), 0.0);
        &mut self.data
    }

    /// Moves the last row into `dst` (replacing its contents): a swap of buffers when it is the
    /// only row (a decode step), so that alternating two buffers allocates nothing.
    pub fn take_last_into(&mut self, dst: &mut Vec<f32>) {
        match self.len() {
            0 => dst.clear(),
            1 => std::mem::swap(&mut self.data, dst),
            n => {
                dst.clear();
                dst.extend_from_slice(&self.data[(n - 1) * self.n_vocab..]);
            }
        }
    }

    /// Vocabulary size (length of each row).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.batch_index.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.batch_index.is_empty()
    }

    /// Logits after the batch entry at `batch_idx`, if it asked for them.
    pub fn for_entry(&self, batch_idx: usize) -> Option<&[f32]> {
        let row = self.batch_index.iter().position(|&i| i == batch_idx)?;
        Some(self.row(row))
    }

    /// Row `i` of the output.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.n_vocab..(i + 1) * self.n_vocab]
    }

    /// The last row, taking the buffer without a copy when it is the only row (a decode step).
    pub fn into_last(mut self) -> Option<Vec<f32>> {
        match self.len() {
            0 => None,
            1 => Some(self.data),
            n => Some(self.data.split_off((n - 1) * self.n_vocab)),
        }
    }

    /// The last row (the usual case: logits after the last prompt token).
    pub fn last(&self) -> Option<&[f32]> {
        if self.is_empty() { None } else { Some(self.row(self.len() - 1)) }
    }
}
