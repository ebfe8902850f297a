//! Tokenizers read from GGUF metadata, reproducing llama.cpp's tokenization exactly, or from a
//! Hugging Face folder's `tokenizer.json` (run by the `tokenizers` crate, see
//! [`Tokenizer::from_hf_dir`]); both answer through the same [`Tokenizer`] API.
//!
//! The GGUF vocabulary kinds:
//! - [`TokenizerKind::Spm`] (`tokenizer.ggml.model = "llama"`): SentencePiece-style merging by
//!   score over characters, spaces escaped as `▁`, byte fallback through `<0xXX>` tokens.
//! - [`TokenizerKind::Bpe`] (`"gpt2"`): a pre-tokenizer chosen by `tokenizer.ggml.pre` splits
//!   the text into words, which are mapped through GPT-2's byte → character table and merged by rank.
//! - [`TokenizerKind::Wpm`] (`"bert"`): WordPiece.
//! - [`TokenizerKind::Ugm`] (`"t5"`): SentencePiece's unigram model with its precompiled
//!   normalisation map (T5, XLM-RoBERTa).
//!
//! Special tokens (control, user-defined, unknown) are split out of the text first, longest first;
//! control and unknown ones only when `parse_special` is set, user-defined ones always.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ferrolm_format::gguf::GgufFile;
//! use ferrolm_tokenizer::Tokenizer;
//! let gguf = GgufFile::open("model.gguf")?;
//! let tok = Tokenizer::from_gguf(&gguf)?;
//! let ids = tok.encode("Hello world", true, true)?;
//! let mut stream = tok.stream();
//! let mut text = String::new();
//! for &id in &ids {
//!     text += &stream.push(&tok, id);
//! }
//! text += &stream.flush();
//! # Ok(()) }
//! ```
//!
//! A Hugging Face folder works the same way:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ferrolm_tokenizer::Tokenizer;
//! let tok = Tokenizer::from_hf_dir("SmolLM2-135M-Instruct".as_ref())?;
//! let ids = tok.encode("Hello world", true, true)?;
//! assert_eq!(tok.decode(&ids), "Hello world");
//! println!("{:?}", tok.chat_template());
//! # Ok(()) }
//! ```
//!
//! Part of ferrolm, which re-exports this crate as `ferrolm::tokenizer`. Its only ferrolm
//! dependency is `ferrolm-format` (a GGUF file's metadata holds the vocabulary); it knows nothing
//! of models, sampling or backends.

mod bpe;
mod hf;
mod load;
mod merge;
mod pretok;
mod spm;
mod stream;
#[cfg(test)]
mod tests;
mod ugm;
mod unicode;
mod vocab;
mod wpm;

use std::collections::BTreeSet;

use ferrolm_format::gguf::GgufError;

pub use hf::HfVocabExport;
pub use pretok::PreType;
pub use stream::StreamDecoder;
pub use vocab::TokenType;

use vocab::{Vocab, attr};

/// Errors building or running a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The vocabulary in the model file is invalid.
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// A tokenizer metadata key is missing or has the wrong type.
    #[error("tokenizer metadata: {0}")]
    Metadata(#[from] GgufError),
    /// The file asks for a tokenizer (or pre-tokenizer) ferrolm does not implement.
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    /// A pre-tokenizer regex failed to compile or to run.
    #[error("pre-tokenizer regex: {0}")]
    Regex(String),
    /// The text needs a byte-fallback token the vocabulary lacks.
    #[error("the vocabulary has no token for byte 0x{0:02X}")]
    NoByteToken(u8),
    /// A tokenizer file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A Hugging Face tokenizer or configuration file is malformed.
    #[error("{}: {reason}", path.display())]
    Config {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The Hugging Face `tokenizers` library failed.
    #[error("Hugging Face tokenizer: {0}")]
    Hf(String),
}

/// Which algorithm a tokenizer runs. For a Hugging Face tokenizer, which of the two its token
/// texts follow: `Bpe` for byte-level vocabularies (GPT-2's byte → character mapping), `Spm` for
/// SentencePiece-style ones (`▁` for spaces, `<0xXX>` byte fallback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// SentencePiece-style (`tokenizer.ggml.model = "llama"`).
    Spm,
    /// Byte-level BPE (`tokenizer.ggml.model = "gpt2"`).
    Bpe,
    /// WordPiece (`tokenizer.ggml.model = "bert"`): BERT's normalisation and greedy longest
    /// pieces, word-initial pieces stored as `▁piece` (a Hugging Face `tokenizer.json`: `##`
    /// marks continuations instead).
    Wpm,
    /// SentencePiece unigram (`tokenizer.ggml.model = "t5"`): normalisation through the
    /// precompiled charsmap, then the best-scoring segmentation (T5, XLM-RoBERTa).
    Ugm,
}

/// Where a tokenizer comes from and what runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerBackend {
    /// A GGUF vocabulary, tokenized by ferrolm's llama.cpp-compatible code.
    Gguf,
    /// A Hugging Face `tokenizer.json`, tokenized by the `tokenizers` crate.
    HuggingFace,
}

/// Ids of the special tokens (each optional).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn.
    pub eot: Option<u32>,
    /// End of message.
    pub eom: Option<u32>,
    /// Unknown.
    pub unk: Option<u32>,
    /// Separator.
    pub sep: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Mask.
    pub mask: Option<u32>,
    /// Fill-in-the-middle prefix.
    pub fim_pre: Option<u32>,
    /// Fill-in-the-middle suffix.
    pub fim_suf: Option<u32>,
    /// Fill-in-the-middle middle.
    pub fim_mid: Option<u32>,
    /// Fill-in-the-middle padding.
    pub fim_pad: Option<u32>,
    /// Fill-in-the-middle repository marker.
    pub fim_rep: Option<u32>,
    /// Fill-in-the-middle file separator.
    pub fim_sep: Option<u32>,
}

/// Algorithm-specific state.
#[derive(Clone)]
enum Algorithm {
    Spm,
    Bpe {
        pre: PreType,
        pretok: pretok::PreTokenizer,
        merges: bpe::MergeRanks,
        ignore_merges: bool,
    },
    /// WordPiece, with BERT's normalisation switches and the longest token's length in bytes.
    Wpm {
        norm: wpm::Normalizer,
        max_len: usize,
    },
    /// SentencePiece unigram.
    Ugm(Box<ugm::Ugm>),
    /// A Hugging Face tokenizer; the vocabulary table mirrors its tokens for the shared accessors.
    Hf(Box<hf::HfAlgorithm>),
}

/// A tokenizer built from a GGUF vocabulary or a Hugging Face `tokenizer.json`.
#[derive(Clone)]
pub struct Tokenizer {
    kind: TokenizerKind,
    algorithm: Algorithm,
    vocab: Vocab,
    special: SpecialIds,
    eog: BTreeSet<u32>,
    /// Control, user-defined and unknown tokens, longest text first.
    special_tokens: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    /// Append the separator after the text (WordPiece: `[CLS] text [SEP]`).
    add_sep: bool,
    add_space_prefix: bool,
    remove_extra_whitespaces: bool,
    pre_name: Option<String>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("backend", &self.backend())
            .field("kind", &self.kind)
            .field("pre", &self.pre_name)
            .field("n_vocab", &self.n_vocab())
            .field("special", &self.special)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

/// A piece of the input after special tokens were split out.
enum Fragment {
    Text(usize, usize),
    Token(u32),
}

/// `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

impl Tokenizer {
    /// Which algorithm this tokenizer runs.
    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    /// Whether this is a GGUF or a Hugging Face tokenizer.
    pub fn backend(&self) -> TokenizerBackend {
        match &self.algorithm {
            Algorithm::Hf(_) => TokenizerBackend::HuggingFace,
            Algorithm::Spm | Algorithm::Bpe { .. } | Algorithm::Wpm { .. } | Algorithm::Ugm(_) => {
                TokenizerBackend::Gguf
            }
        }
    }

    /// The BPE pre-tokenizer (`None` for SentencePiece and Hugging Face vocabularies).
    pub fn pre_type(&self) -> Option<PreType> {
        match &self.algorithm {
            Algorithm::Spm | Algorithm::Wpm { .. } | Algorithm::Ugm(_) | Algorithm::Hf(_) => None,
            Algorithm::Bpe { pre, .. } => Some(*pre),
        }
    }

    /// The chat template (Jinja source): GGUF `tokenizer.chat_template`, or for a Hugging Face
    /// folder `chat_template.jinja`, `chat_template.json` or `tokenizer_config.json`'s
    /// `chat_template`.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Number of tokens in the vocabulary (for a Hugging Face tokenizer: its highest id + 1, added
    /// tokens included; ids no token uses read as unused `[PAD<id>]` tokens).
    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }

    /// Number of BPE merges (0 for SentencePiece and WordPiece vocabularies).
    pub fn n_merges(&self) -> usize {
        match &self.algorithm {
            Algorithm::Spm | Algorithm::Wpm { .. } | Algorithm::Ugm(_) => 0,
            Algorithm::Bpe { merges, .. } => merges.len(),
            Algorithm::Hf(h) => h.n_merges(),
        }
    }

    /// The beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.special.bos
    }

    /// The end-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.special.eos
    }

    /// All special token ids.
    pub fn special_ids(&self) -> &SpecialIds {
        &self.special
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether `encode(.., add_special = true, ..)` appends the separator (WordPiece).
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }

    /// Whether SentencePiece text gets a leading space (`tokenizer.ggml.add_space_prefix`).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// `tokenizer.ggml.remove_extra_whitespaces` (llama.cpp applies it to unigram vocabularies only).
    pub fn remove_extra_whitespaces(&self) -> bool {
        self.remove_extra_whitespaces
    }

    /// Whether a token ends generation (EOS, EOT, EOM and llama.cpp's known end-of-turn texts).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.eog.iter().copied()
    }

    /// The vocabulary text of a token.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The id of a vocabulary text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id_of(text)
    }

    /// The type of a token.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.vocab.types.get(id as usize).copied()
    }

    /// The score of a token.
    pub fn token_score(&self, id: u32) -> Option<f32> {
        self.vocab.scores.get(id as usize).copied()
    }

    /// Splits special tokens out of the text (llama.cpp's `tokenizer_st_partition`).
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = vec![Fragment::Text(0, text.len())];
        if text.is_empty() {
            return Vec::new();
        }
        for &id in &self.special_tokens {
            let a = self.vocab.attr(id);
            if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            let needle = self.vocab.texts[id as usize].as_str();
            // Cheap skip: nothing to do when no text fragment contains the token.
            if !frags.iter().any(|f| matches!(*f, Fragment::Text(s, e) if text[s..e].contains(needle))) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(start, end) = f else {
                    next.push(f);
                    continue;
                };
                let mut pos = start;
                while let Some(rel) = text[pos..end].find(needle) {
                    let m = pos + rel;
                    let mut left_end = m;
                    if a & attr::LSTRIP != 0 {
                        while left_end > pos && is_c_space(text.as_bytes()[left_end - 1]) {
                            left_end -= 1;
                        }
                    }
                    if left_end > pos {
                        next.push(Fragment::Text(pos, left_end));
                    }
                    next.push(Fragment::Token(id));
                    pos = m + needle.len();
                    if a & attr::RSTRIP != 0 {
                        while pos < end && is_c_space(text.as_bytes()[pos]) {
                            pos += 1;
                        }
                    }
                }
                if pos < end {
                    next.push(Fragment::Text(pos, end));
                }
            }
            frags = next;
        }
        frags
    }

    /// Tokenizes text like llama.cpp's `llama_tokenize`.
    ///
    /// `add_special` adds BOS/EOS as the model asks ([`Tokenizer::add_bos`], [`Tokenizer::add_eos`]);
    /// `parse_special` lets control tokens written in the text (e.g. `<|im_start|>`) become those
    /// tokens instead of being tokenized as plain text.
    ///
    /// A Hugging Face tokenizer runs with its post-processor off (BOS/EOS are added here, once) and
    /// treats its `special` added tokens as control tokens, its other added tokens as user-defined
    /// ones (always matched).
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let frags = match &self.algorithm {
            Algorithm::Hf(_) => Vec::new(),
            Algorithm::Spm | Algorithm::Bpe { .. } | Algorithm::Wpm { .. } | Algorithm::Ugm(_) => {
                self.partition(text, parse_special)
            }
        };
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.special.bos);
        }
        match &self.algorithm {
            Algorithm::Hf(h) => h.encode_into(text, parse_special, &mut out)?,
            Algorithm::Spm => {
                let mut prev_special = true;
                let mut buf = String::new();
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push('▁');
                            }
                            for c in text[s..e].chars() {
                                if c == ' ' { buf.push('▁') } else { buf.push(c) }
                            }
                            spm::encode(&self.vocab, &buf, &mut out)?;
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Algorithm::Ugm(u) => {
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => u.encode(&self.vocab, &text[s..e], &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Algorithm::Wpm { norm, max_len } => {
                let unk = self.special.unk.ok_or_else(|| {
                    TokenizerError::InvalidVocab("a WordPiece vocabulary needs an unknown token".into())
                })?;
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => {
                            wpm::encode(&self.vocab, *norm, *max_len, unk, &text[s..e], &mut out)
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Algorithm::Bpe { pre: PreType::Gemma4, pretok, merges, .. } => {
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => {
                            let escaped = text[s..e].replace(' ', "▁");
                            for word in pretok.split(&escaped)? {
                                bpe::encode_word_raw(&self.vocab, merges, word, &mut out);
                            }
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Algorithm::Bpe { pretok, merges, ignore_merges, .. } => {
                let table = byte_chars();
                let mut encoded = String::new();
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => {
                            for word in pretok.split(&text[s..e])? {
                                encoded.clear();
                                for &b in word.as_bytes() {
                                    encoded.push(table[b as usize]);
                                }
                                bpe::encode_word(&self.vocab, merges, &encoded, *ignore_merges, &mut out);
                            }
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.special.eos);
        }
        if add_special && self.add_sep {
            out.extend(self.special.sep);
        }
        Ok(out)
    }

    /// The bytes a token stands for, as llama.cpp's `token_to_piece` with `special = true` gives
    /// them: control/user-defined/unknown tokens render their text, byte tokens their byte, normal
    /// tokens their text with `▁` → space (SentencePiece) or GPT-2 characters → bytes (BPE).
    /// Unused and undefined tokens (and ids outside the vocabulary) give nothing.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        let Some(text) = self.vocab.texts.get(id as usize) else {
            return Vec::new();
        };
        let a = self.vocab.attr(id);
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            return text.as_bytes().to_vec();
        }
        if a & attr::NORMAL != 0 {
            return match self.kind {
                TokenizerKind::Spm | TokenizerKind::Ugm => text.replace('▁', " ").into_bytes(),
                TokenizerKind::Bpe
                    if matches!(self.algorithm, Algorithm::Bpe { pre: PreType::Gemma4, .. }) =>
                {
                    text.replace('▁', " ").into_bytes()
                }
                TokenizerKind::Bpe => decode_gpt2_text(text),
                // A Hugging Face WordPiece vocabulary marks continuations with `##`; a GGUF one
                // marks word starts with `▁`.
                TokenizerKind::Wpm if matches!(self.algorithm, Algorithm::Hf(_)) => {
                    match text.strip_prefix("##") {
                        Some(rest) => rest.as_bytes().to_vec(),
                        None => format!(" {text}").into_bytes(),
                    }
                }
                TokenizerKind::Wpm => text.replace('▁', " ").into_bytes(),
            };
        }
        if a & attr::BYTE != 0 {
            return text
                .get(3..5)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .map(|b| vec![b])
                .unwrap_or_default();
        }
        Vec::new()
    }

    /// Concatenates the pieces of `ids` and converts them to text (invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(self.token_to_piece(id));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A streaming decoder: feed it tokens, get back only complete UTF-8 text.
    pub fn stream(&self) -> StreamDecoder {
        StreamDecoder::new()
    }
}

/// GPT-2's byte → character table.
fn byte_chars() -> &'static [char; 256] {
    static TABLE: std::sync::OnceLock<[char; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(unicode::byte_to_char_table)
}

/// Maps a BPE token's characters back to bytes; characters outside GPT-2's table render as
/// `[UNK_BYTE_0x…]` the way llama.cpp writes them.
fn decode_gpt2_text(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match unicode::char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}
