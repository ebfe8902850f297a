//! SentencePiece-style BPE (llama.cpp's `llm_tokenizer_spm`): start from single characters, merge
//! the adjacent pair whose concatenation is the highest-scoring vocabulary entry until no pair is
//! in the vocabulary, then emit tokens, falling back to `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::TokenizerError;
use super::vocab::Vocab;

/// A run of the text: `len` bytes from `start`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Highest score first; on ties the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

/// Tokenizes one fragment (already space-escaped) and appends the ids to `out`.
pub(crate) fn encode(vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        symbols.push(Symbol {
            start,
            len,
            prev: i.checked_sub(1),
            next: if start + len == text.len() { None } else { Some(i + 1) },
        });
    }
    if symbols.is_empty() {
        return Ok(());
    }
    let mut queue = BinaryHeap::new();
    let try_add =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: Option<usize>, right: Option<usize>| {
            let (Some(l), Some(r)) = (left, right) else {
                return;
            };
            let (ls, rs) = (symbols[l], symbols[r]);
            let piece = &text[ls.start..ls.start + ls.len + rs.len];
            if let Some(id) = vocab.id_of(piece) {
                queue.push(Bigram { left: l, right: r, score: vocab.score(id), size: piece.len() });
            }
        };
    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, Some(i - 1), Some(i));
    }
    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        symbols[b.left].len += r.len;
        symbols[b.right].len = 0;
        symbols[b.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(b.left);
        }
        try_add(&symbols, &mut queue, symbols[b.left].prev, Some(b.left));
        try_add(&symbols, &mut queue, Some(b.left), symbols[b.left].next);
    }
    let mut cur = Some(0);
    while let Some(i) = cur {
        let s = symbols[i];
        let piece = &text[s.start..s.start + s.len];
        match vocab.id_of(piece) {
            Some(id) => out.push(id),
            None => {
                for &byte in piece.as_bytes() {
                    out.push(vocab.byte_token(byte)?);
                }
            }
        }
        cur = s.next;
    }
    Ok(())
}
