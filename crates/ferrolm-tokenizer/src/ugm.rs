//! SentencePiece's unigram model (llama.cpp's `UGM` vocabularies, `tokenizer.ggml.model = "t5"`):
//! T5, XLM-RoBERTa and the models built on it (multilingual e5, bge-m3, nomic-embed v2).
//!
//! Encoding follows llama.cpp's `llm_tokenizer_ugm`:
//! 1. **Normalisation.** At each input position the longest user-defined token is kept as it
//!    is; otherwise the longest prefix in the precompiled charsmap (SentencePiece's NFKC-style
//!    rules, an XOR-compressed double array of byte transitions whose leaves point into a table
//!    of replacement strings) is replaced; otherwise one UTF-8 character is kept (an invalid byte
//!    becomes U+FFFD). Spaces become `▁` (escape), runs of them collapse to one
//!    (`remove_extra_whitespaces`), and one `▁` goes before the first non-space (space prefix).
//! 2. **Viterbi.** Over the normalised bytes, one character at a time, every vocabulary token
//!    that starts there (normal, user-defined and unused tokens, found by walking a byte trie)
//!    offers the best score so far plus its score (user-defined tokens score 0); a character no
//!    token covers is the unknown token at the lowest score minus 10. Scores are summed in f64,
//!    as SentencePiece does, and the best path is read backwards, runs of unknown tokens merged
//!    into one.

use std::collections::HashMap;

use super::TokenizerError;
use super::vocab::{Vocab, attr};

/// `▁`, which stands for a space in the vocabulary.
const ESCAPED_SPACE: &str = "\u{2581}";

/// Added below the lowest normal score for a character no token covers (llama.cpp's penalty).
const UNKNOWN_PENALTY: f64 = 10.0;

/// A byte trie of token texts: node 0 is the root.
#[derive(Clone, Debug, Default)]
struct Trie {
    /// `(node, byte)` → child node.
    edges: HashMap<(u32, u8), u32>,
    /// The token ending at each node, if any.
    values: Vec<Option<u32>>,
}

impl Trie {
    fn new() -> Self {
        Self { edges: HashMap::new(), values: vec![None] }
    }

    /// Adds `key` → `id` (a later key equal to an earlier one replaces it, as llama.cpp's does).
    fn insert(&mut self, key: &[u8], id: u32) {
        let mut node = 0u32;
        for &b in key {
            let next = self.values.len() as u32;
            node = *self.edges.entry((node, b)).or_insert_with(|| {
                self.values.push(None);
                next
            });
        }
        self.values[node as usize] = Some(id);
    }

    fn child(&self, node: u32, b: u8) -> Option<u32> {
        self.edges.get(&(node, b)).copied()
    }

    /// Length of the longest key that `text` starts with (0 when none).
    fn longest_prefix(&self, text: &[u8]) -> usize {
        let (mut node, mut best) = (0u32, 0);
        for (i, &b) in text.iter().enumerate() {
            match self.child(node, b) {
                Some(n) => node = n,
                None => break,
            }
            if self.values[node as usize].is_some() {
                best = i + 1;
            }
        }
        best
    }
}

/// SentencePiece's precompiled normalisation map: an XOR-compressed compact double array (XCDA)
/// over input bytes whose leaves index NUL-terminated replacement strings.
#[derive(Clone, Debug)]
struct Charsmap {
    /// Bit-packed nodes: BASE in bits 10–30 (shifted by 8 when bit 9 is set), LCHECK in bits
    /// 0–7 (and 31), LEAF in bit 8; a leaf's child holds a replacement's offset.
    nodes: Vec<u32>,
    /// Replacement strings, NUL-terminated, back to back.
    replacements: Vec<u8>,
}

impl Charsmap {
    /// Parses `tokenizer.ggml.precompiled_charsmap`: a little-endian u32 byte count, that many
    /// bytes of nodes, then the replacement strings.
    fn parse(blob: &[u8]) -> Result<Self, TokenizerError> {
        let bad = |m: &str| TokenizerError::InvalidVocab(format!("precompiled_charsmap: {m}"));
        let head: [u8; 4] =
            blob.get(..4).and_then(|h| h.try_into().ok()).ok_or_else(|| bad("shorter than its header"))?;
        let size = u32::from_le_bytes(head) as usize;
        let body = blob.get(4..4 + size).ok_or_else(|| bad("node table longer than the blob"))?;
        if !size.is_multiple_of(4) || size == 0 {
            return Err(bad("node table is not a whole number of nodes"));
        }
        let nodes = body.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Self { nodes, replacements: blob[4 + size..].to_vec() })
    }

    fn node(&self, i: u32) -> Option<u32> {
        self.nodes.get(i as usize).copied()
    }

    fn base(packed: u32) -> u32 {
        (packed >> 10) << ((packed & (1 << 9)) >> 6)
    }

    fn lcheck(packed: u32) -> u32 {
        packed & ((1 << 31) | 0xff)
    }

    fn leaf(packed: u32) -> bool {
        (packed >> 8) & 1 == 1
    }

    fn value(packed: u32) -> u32 {
        packed & ((1 << 31) - 1)
    }

    /// The replacement of the longest prefix of `input` the map knows, with that prefix's
    /// length; `None` when no prefix matches (or the map points outside itself).
    fn longest_match(&self, input: &[u8]) -> Option<(&[u8], usize)> {
        let mut index = Self::base(self.node(0)?);
        let mut best = None;
        for (i, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            index ^= u32::from(c);
            let packed = self.node(index)?;
            if Self::lcheck(packed) != u32::from(c) {
                break;
            }
            index ^= Self::base(packed);
            if Self::leaf(packed) {
                best = Some((Self::value(self.node(index)?) as usize, i + 1));
            }
        }
        let (offset, len) = best?;
        let rest = self.replacements.get(offset..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some((&rest[..end], len))
    }
}

/// What the unigram tokenizer needs beyond the vocabulary table.
#[derive(Clone, Debug)]
pub(crate) struct Ugm {
    charsmap: Option<Charsmap>,
    /// Normal, user-defined and unused tokens.
    tokens: Trie,
    /// User-defined tokens, kept out of normalisation.
    user_defined: Trie,
    unknown_score: f64,
    unk: u32,
    /// Spaces become `▁` (always for the vocabularies llama.cpp reads).
    escape_whitespaces: bool,
    /// A `▁` before the text's first non-space (`tokenizer.ggml.add_space_prefix`).
    add_space_prefix: bool,
    /// Runs of spaces collapse, and every word gets its `▁` (`remove_extra_whitespaces`).
    remove_extra_whitespaces: bool,
}

/// The best way found so far to tokenize the normalised input up to some position.
#[derive(Clone, Copy)]
struct Best {
    token: u32,
    /// Where that token starts.
    start: usize,
    score: f64,
}

impl Ugm {
    /// Builds the tokenizer from the vocabulary and the raw charsmap (`None` or empty: no
    /// normalisation map).
    pub(crate) fn new(
        vocab: &Vocab,
        charsmap: Option<&[u8]>,
        unk: Option<u32>,
        add_space_prefix: bool,
        remove_extra_whitespaces: bool,
    ) -> Result<Self, TokenizerError> {
        let unk = unk.ok_or_else(|| {
            TokenizerError::InvalidVocab("a unigram vocabulary needs an unknown token".into())
        })?;
        let charsmap = match charsmap {
            Some(b) if !b.is_empty() => Some(Charsmap::parse(b)?),
            _ => None,
        };
        let (mut tokens, mut user_defined) = (Trie::new(), Trie::new());
        let mut min_score = f32::MAX;
        for (id, text) in vocab.texts.iter().enumerate() {
            let a = vocab.attr(id as u32);
            if a & attr::NORMAL != 0 {
                min_score = min_score.min(vocab.scores[id]);
            }
            if a & (attr::NORMAL | attr::USER_DEFINED | attr::UNUSED) != 0 {
                tokens.insert(text.as_bytes(), id as u32);
            }
            if a & attr::USER_DEFINED != 0 {
                user_defined.insert(text.as_bytes(), id as u32);
            }
        }
        Ok(Self {
            charsmap,
            tokens,
            user_defined,
            unknown_score: f64::from(min_score) - UNKNOWN_PENALTY,
            unk,
            escape_whitespaces: true,
            add_space_prefix,
            remove_extra_whitespaces,
        })
    }

    /// The normalised form of one prefix of `input`: `(replacement, bytes of input consumed)`.
    fn normalize_prefix<'a>(&'a self, input: &'a [u8]) -> (&'a [u8], usize) {
        let user = self.user_defined.longest_prefix(input);
        if user > 0 {
            return (&input[..user], user);
        }
        if let Some(m) = self.charsmap.as_ref().and_then(|c| c.longest_match(input)) {
            return m;
        }
        match utf8_len(input) {
            Some(n) => (&input[..n], n),
            None => ("\u{FFFD}".as_bytes(), 1),
        }
    }

    /// The whole text normalised (see the module documentation).
    fn normalize(&self, text: &str) -> Vec<u8> {
        let space: &[u8] = if self.escape_whitespaces { ESCAPED_SPACE.as_bytes() } else { b" " };
        let mut out = Vec::with_capacity(text.len() * 3);
        let (mut prepended, mut in_word) = (false, false);
        let input = text.as_bytes();
        let mut pos = 0;
        while pos < input.len() {
            let (piece, used) = self.normalize_prefix(&input[pos..]);
            for &c in piece {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (self.add_space_prefix && !prepended) || self.remove_extra_whitespaces {
                            out.extend_from_slice(space);
                            prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !self.remove_extra_whitespaces {
                        out.extend_from_slice(space);
                    }
                }
            }
            pos += used;
        }
        out
    }

    /// Appends the tokens of `text` (one fragment between special tokens) to `out`.
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let norm = self.normalize(text);
        if norm.is_empty() {
            return;
        }
        let n = norm.len();
        let mut best = vec![Best { token: self.unk, start: 0, score: f64::MIN }; n + 1];
        best[0].score = 0.0;
        let mut pos = 0;
        while pos < n {
            let char_len = utf8_len(&norm[pos..]).unwrap_or(1).min(n - pos);
            let here = best[pos].score;
            let mut covered = false;
            let mut node = 0u32;
            for (end, &b) in norm.iter().enumerate().skip(pos) {
                let Some(next) = self.tokens.child(node, b) else { break };
                node = next;
                let Some(id) = self.tokens.values[node as usize] else { continue };
                if end + 1 - pos == char_len {
                    covered = true;
                }
                let score = if vocab.attr(id) & attr::USER_DEFINED != 0 {
                    0.0
                } else {
                    f64::from(vocab.scores[id as usize])
                };
                let cand = here + score;
                if cand > best[end + 1].score {
                    best[end + 1] = Best { token: id, start: pos, score: cand };
                }
            }
            if !covered {
                let cand = here + self.unknown_score;
                if cand > best[pos + char_len].score {
                    best[pos + char_len] = Best { token: self.unk, start: pos, score: cand };
                }
            }
            pos += char_len;
        }
        let first = out.len();
        let (mut at, mut prev_unknown) = (n, false);
        loop {
            let b = best[at];
            let unknown = b.token == self.unk;
            if !(prev_unknown && unknown) {
                out.push(b.token);
            }
            if b.start == 0 {
                break;
            }
            prev_unknown = unknown;
            at = b.start;
        }
        out[first..].reverse();
    }
}

/// Length of the UTF-8 character `bytes` starts with, `None` for an invalid sequence (as
/// llama.cpp's `unicode_cpt_from_utf8` rejects it).
fn utf8_len(bytes: &[u8]) -> Option<usize> {
    let n = match *bytes.first()? {
        b if b < 0x80 => 1,
        b if b & 0xE0 == 0xC0 => 2,
        b if b & 0xF0 == 0xE0 => 3,
        b if b & 0xF8 == 0xF0 => 4,
        _ => return None,
    };
    let tail = bytes.get(1..n)?;
    tail.iter().all(|&b| b & 0xC0 == 0x80).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::TokenType;

    fn vocab(tokens: &[(&str, f32, TokenType)]) -> Vocab {
        Vocab::new(
            tokens.iter().map(|t| t.0.to_string()).collect(),
            tokens.iter().map(|t| t.1).collect(),
            tokens.iter().map(|t| t.2).collect(),
        )
        .expect("vocab")
    }

    #[test]
    fn viterbi_takes_the_best_scoring_path_and_merges_unknown_runs() {
        use TokenType::*;
        let v = vocab(&[
            ("<unk>", 0.0, Unknown),
            ("▁ab", -1.0, Normal),
            ("▁a", -1.0, Normal),
            ("b", -1.0, Normal),
            ("c", -5.0, Normal),
            ("<x>", 0.0, UserDefined),
        ]);
        let u = Ugm::new(&v, None, Some(0), true, false).expect("ugm");
        let enc = |t: &str| {
            let mut out = Vec::new();
            u.encode(&v, t, &mut out);
            out
        };
        // "▁ab" (-1) beats "▁a" + "b" (-2).
        assert_eq!(enc("ab"), [1]);
        // "c" exists, "zz" does not: one unknown for both z's.
        assert_eq!(enc("abczz"), [1, 4, 0]);
        // A user-defined token scores 0 and is never normalised.
        assert_eq!(enc("ab<x>"), [1, 5]);
        // Spaces: each becomes ▁ (no merging without remove_extra_whitespaces).
        assert_eq!(enc("a b"), [2, 0, 3]);
        assert_eq!(enc("   "), [0], "three ▁ no token covers: one unknown");
    }

    #[test]
    fn utf8_lengths_and_invalid_bytes() {
        assert_eq!(utf8_len("é".as_bytes()), Some(2));
        assert_eq!(utf8_len("東".as_bytes()), Some(3));
        assert_eq!(utf8_len("🦙".as_bytes()), Some(4));
        assert_eq!(utf8_len(&[0xE6, 0x41]), None);
        assert_eq!(utf8_len(&[0x80]), None);
    }

    #[test]
    fn a_truncated_charsmap_is_an_error() {
        assert!(Charsmap::parse(&[1, 0]).is_err());
        assert!(Charsmap::parse(&[8, 0, 0, 0, 1, 2, 3]).is_err());
        assert!(Charsmap::parse(&[3, 0, 0, 0, 1, 2, 3]).is_err());
    }
}
