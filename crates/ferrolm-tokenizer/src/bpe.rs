//! Byte-level BPE (llama.cpp's `llm_tokenizer_bpe`): each pre-tokenized word, mapped through
//! GPT-2's byte → character table, starts as single characters; the adjacent pair with the lowest
//! merge rank is merged until no ranked pair is left.

use std::cmp::Reverse;
use std::collections::HashMap;

use super::TokenizerError;
use super::merge::merge;
use super::vocab::Vocab;

/// Merge ranks, keyed by interned halves.
#[derive(Clone)]
pub(crate) struct MergeRanks {
    intern: HashMap<String, u32>,
    ranks: HashMap<(u32, u32), u32>,
}

impl MergeRanks {
    /// Parses `tokenizer.ggml.merges` (`"left right"` per entry, rank = position).
    pub(crate) fn parse(merges: &[String]) -> Result<MergeRanks, TokenizerError> {
        let mut intern: HashMap<String, u32> = HashMap::with_capacity(merges.len());
        let mut ranks = HashMap::with_capacity(merges.len());
        let id_of = |s: &str, intern: &mut HashMap<String, u32>| -> u32 {
            if let Some(&id) = intern.get(s) {
                return id;
            }
            let id = intern.len() as u32;
            intern.insert(s.to_string(), id);
            id
        };
        for (rank, m) in merges.iter().enumerate() {
            // The separator is the first space after the first byte (a half may start with one).
            let pos = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
            let Some(pos) = pos else {
                return Err(TokenizerError::InvalidVocab(format!(
                    "merge {rank} ({m:?}) has no space separator"
                )));
            };
            let (a, b) = (&m[..pos], &m[pos + 1..]);
            if a.is_empty() || b.is_empty() {
                return Err(TokenizerError::InvalidVocab(format!("merge {rank} ({m:?}) has an empty half")));
            }
            let key = (id_of(a, &mut intern), id_of(b, &mut intern));
            ranks.entry(key).or_insert(rank as u32);
        }
        Ok(MergeRanks { intern, ranks })
    }

    /// Rank of merging `a` and `b`.
    fn rank(&self, a: &str, b: &str) -> Option<u32> {
        let a = *self.intern.get(a)?;
        let b = *self.intern.get(b)?;
        self.ranks.get(&(a, b)).copied()
    }

    /// Number of merges.
    pub(crate) fn len(&self) -> usize {
        self.ranks.len()
    }
}

/// Tokenizes one word of SentencePiece-style BPE (Gemma 4: raw UTF-8 symbols, spaces already
/// `▁`) and appends the ids to `out`: a word of newlines only is one token when the vocabulary
/// has it; a merged piece the vocabulary lacks becomes its bytes' `<0xXX>` tokens.
pub(crate) fn encode_word_raw(vocab: &Vocab, merges: &MergeRanks, word: &str, out: &mut Vec<u32>) {
    if word.is_empty() {
        return;
    }
    if word.bytes().all(|b| b == b'\n')
        && let Some(id) = vocab.id_of(word)
    {
        out.push(id);
        return;
    }
    for piece in merge(word, |a, b, _| merges.rank(a, b).map(Reverse)) {
        match vocab.id_of(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| vocab.id_of(&format!("<0x{b:02X}>")))),
        }
    }
}

/// Tokenizes one byte-encoded word and appends the ids to `out`.
pub(crate) fn encode_word(
    vocab: &Vocab,
    merges: &MergeRanks,
    word: &str,
    ignore_merges: bool,
    out: &mut Vec<u32>,
) {
    if word.is_empty() {
        return;
    }
    if ignore_merges && let Some(id) = vocab.id_of(word) {
        out.push(id);
        return;
    }
    for piece in merge(word, |a, b, _| merges.rank(a, b).map(Reverse)) {
        match vocab.id_of(piece) {
            Some(id) => out.push(id),
            None => {
                // llama.cpp looks each byte up as a one-byte string; only ASCII bytes can match.
                for &byte in piece.as_bytes() {
                    if byte.is_ascii() {
                        let one = [byte];
                        if let Some(id) = std::str::from_utf8(&one).ok().and_then(|s| vocab.id_of(s)) {
                            out.push(id);
                        }
                    }
                }
            }
        }
    }
}
