//! The merge loop shared by both BPE flavours: start from single characters and repeatedly merge
//! the adjacent pair with the highest priority (a lowest merge rank for byte-level BPE, a highest
//! vocabulary score for SentencePiece), leftmost first on ties, until no pair qualifies.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A run of the text: `len` bytes from `start`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbols `left` and `right`, `size` bytes together when pushed.
struct Bigram<P> {
    left: usize,
    right: usize,
    priority: P,
    size: usize,
}

impl<P: Ord> PartialEq for Bigram<P> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<P: Ord> Eq for Bigram<P> {}
impl<P: Ord> PartialOrd for Bigram<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P: Ord> Ord for Bigram<P> {
    /// Highest priority first (the heap is a max-heap); on ties the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.cmp(&other.priority).then_with(|| other.left.cmp(&self.left))
    }
}

/// An `f32` score ordered by `total_cmp`, as a merge priority.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Score(pub f32);

impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Merges the characters of `text` and returns the final pieces in order. `priority(left,
/// right, joined)` says whether two adjacent pieces may merge and how urgently (higher first).
pub(crate) fn merge<P: Ord>(text: &str, priority: impl Fn(&str, &str, &str) -> Option<P>) -> Vec<&str> {
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
        return Vec::new();
    }
    let mut queue = BinaryHeap::new();
    let try_add =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram<P>>, left: Option<usize>, right: Option<usize>| {
            let (Some(l), Some(r)) = (left, right) else {
                return;
            };
            let (ls, rs) = (symbols[l], symbols[r]);
            let a = &text[ls.start..ls.start + ls.len];
            let b = &text[rs.start..rs.start + rs.len];
            let joined = &text[ls.start..rs.start + rs.len];
            if let Some(priority) = priority(a, b, joined) {
                queue.push(Bigram { left: l, right: r, priority, size: joined.len() });
            }
        };
    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, Some(i - 1), Some(i));
    }
    while let Some(bg) = queue.pop() {
        let (l, r) = (symbols[bg.left], symbols[bg.right]);
        // Stale: one side was merged away or grew since the pair was pushed.
        if l.len == 0 || r.len == 0 || l.len + r.len != bg.size || l.next != Some(bg.right) {
            continue;
        }
        symbols[bg.left].len += r.len;
        symbols[bg.right].len = 0;
        symbols[bg.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(bg.left);
        }
        try_add(&symbols, &mut queue, symbols[bg.left].prev, Some(bg.left));
        try_add(&symbols, &mut queue, Some(bg.left), symbols[bg.left].next);
    }
    let mut pieces = Vec::new();
    let mut cur = Some(0);
    while let Some(i) = cur {
        let s = symbols[i];
        pieces.push(&text[s.start..s.start + s.len]);
        cur = s.next;
    }
    pieces
}
