//! WordPiece (`tokenizer.ggml.model = "bert"`), as llama.cpp's WPM tokenizer runs it.
//!
//! The text is normalised and split into words, then each word is covered greedily by the
//! longest vocabulary pieces:
//!
//! - **Normalisation** (BERT's "basic tokenizer"): with `strip_accents`, the text is decomposed
//!   (NFD) and combining marks (`\p{M}`) are dropped; NUL, U+FFFD and control characters are
//!   dropped; with `lowercase`, every character is lowercased (simple case mapping).
//! - **Words**: whitespace ends a word; a punctuation character, an ASCII symbol or a CJK ideograph
//!   is a word of its own.
//! - **Pieces**: the converter stores a word-initial piece as `▁piece` and a continuation (`##x`
//!   in `vocab.txt`) as `x`, so a word is matched as `▁word`, longest prefix first, then the rest
//!   from where the match ended. A word with any position no piece matches becomes one `[UNK]`.
//!
//! llama.cpp's `lowercase` defaults to true and `strip_accents` to `lowercase`; the GGUF keys
//! `tokenizer.ggml.normalizer.lowercase` / `.strip_accents` override them.

use unicode_normalization_alignments::UnicodeNormalization as _;

use super::unicode::{Flags, flags, is_whitespace};
use super::vocab::Vocab;

/// BERT's normalisation switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Normalizer {
    /// Lowercase every character.
    pub lowercase: bool,
    /// Decompose and drop combining marks.
    pub strip_accents: bool,
}

/// Appends the pieces of `text` (no special tokens in it) to `out`.
pub(crate) fn encode(
    vocab: &Vocab,
    norm: Normalizer,
    max_len: usize,
    unk: u32,
    text: &str,
    out: &mut Vec<u32>,
) {
    let mut word1 = String::new();
    for word in words(text, norm) {
        word1.clear();
        word1.push('▁');
        word1.push_str(&word);
        encode_word(vocab, max_len, unk, &word1, out);
    }
}

/// Greedy longest-match of one `▁word` (byte positions, as llama.cpp slices it).
fn encode_word(vocab: &Vocab, max_len: usize, unk: u32, word1: &str, out: &mut Vec<u32>) {
    let start = out.len();
    let n = word1.len();
    let mut i = 0;
    while i < n {
        let found = (i + 1..=n.min(i + max_len + 1))
            .rev()
            .filter(|&j| word1.is_char_boundary(i) && word1.is_char_boundary(j))
            .find_map(|j| vocab.id_of(&word1[i..j]).map(|id| (id, j)));
        match found {
            Some((id, j)) => {
                out.push(id);
                i = j;
            }
            None => {
                out.truncate(start);
                break;
            }
        }
    }
    if out.len() == start {
        out.push(unk);
    }
}

/// The normalised words of `text`.
fn words(text: &str, norm: Normalizer) -> Vec<String> {
    let chars: Box<dyn Iterator<Item = char>> =
        if norm.strip_accents { Box::new(text.nfd().map(|(c, _)| c)) } else { Box::new(text.chars()) };
    let mut words = vec![String::new()];
    for c in chars {
        let cp = u32::from(c);
        if is_whitespace(cp) {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        let f = flags(cp).category();
        if cp == 0 || cp == 0xFFFD || f & Flags::CONTROL != 0 {
            continue;
        }
        if norm.strip_accents && f & Flags::MARK != 0 {
            continue;
        }
        let c = if norm.lowercase { lower(c) } else { c };
        let alone = f & Flags::PUNCTUATION != 0 || (cp < 0x7F && f & Flags::SYMBOL != 0) || is_cjk(cp);
        let last = words.last_mut().expect("words is never empty");
        if alone {
            if !last.is_empty() {
                words.push(String::new());
            }
            let last = words.last_mut().expect("words is never empty");
            last.push(c);
            words.push(String::new());
        } else {
            last.push(c);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// Simple lowercase mapping (one character to one character, as llama.cpp's table maps them).
fn lower(c: char) -> char {
    let mut l = c.to_lowercase();
    match (l.next(), l.next()) {
        (Some(one), None) => one,
        // A multi-character lowercase (U+0130 → "i̇"): its simple mapping is the first character.
        (Some(first), Some(_)) => first,
        _ => c,
    }
}

/// CJK ideographs, each a word of its own (the ranges of BERT's `_is_chinese_char`, with the
/// 0x2B920 start that Hugging Face's Rust code and llama.cpp use).
fn is_cjk(cp: u32) -> bool {
    matches!(cp,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASIC: Normalizer = Normalizer { lowercase: true, strip_accents: true };

    #[test]
    fn words_split_at_spaces_punctuation_and_ideographs() {
        assert_eq!(words("Hello, World!", BASIC), ["hello", ",", "world", "!"]);
        assert_eq!(words("  a\tb\n", BASIC), ["a", "b"]);
        assert_eq!(words("東京x", BASIC), ["東", "京", "x"]);
        // ASCII symbols stand alone; others (here U+00A9) join their word.
        assert_eq!(words("a+b ©c", BASIC), ["a", "+", "b", "©c"]);
    }

    #[test]
    fn accents_are_stripped_only_when_asked() {
        assert_eq!(words("Café NAÏVE", BASIC), ["cafe", "naive"]);
        let keep = Normalizer { lowercase: false, strip_accents: false };
        assert_eq!(words("Café", keep), ["Café"]);
    }
}
