//! The vocabulary table: token texts, scores, attributes, and the text → id map.

use std::collections::HashMap;

use super::TokenizerError;

/// Token attribute bits (llama.cpp's `llama_token_attr`, a subset).
pub(crate) mod attr {
    pub const NORMAL: u16 = 1 << 0;
    pub const UNKNOWN: u16 = 1 << 1;
    pub const CONTROL: u16 = 1 << 2;
    pub const USER_DEFINED: u16 = 1 << 3;
    pub const UNUSED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const LSTRIP: u16 = 1 << 6;
    pub const RSTRIP: u16 = 1 << 7;
}

/// The kind of a vocabulary entry (`tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    /// Type 0 or an unknown value.
    Undefined,
    /// Type 1: an ordinary piece of text.
    Normal,
    /// Type 2: the unknown token.
    Unknown,
    /// Type 3: a control token (BOS, EOS, turn markers…), matched in text only with special parsing.
    Control,
    /// Type 4: a user-defined token, always matched in text.
    UserDefined,
    /// Type 5: unused.
    Unused,
    /// Type 6: a byte-fallback token `<0xXX>`.
    Byte,
}

impl TokenType {
    /// From the GGUF integer.
    pub(crate) fn from_gguf(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }

    /// The attribute bits of the type.
    pub(crate) fn attr(self) -> u16 {
        match self {
            TokenType::Undefined => 0,
            TokenType::Normal => attr::NORMAL,
            TokenType::Unknown => attr::UNKNOWN,
            TokenType::Control => attr::CONTROL,
            TokenType::UserDefined => attr::USER_DEFINED,
            TokenType::Unused => attr::UNUSED,
            TokenType::Byte => attr::BYTE,
        }
    }
}

/// Token table.
#[derive(Clone)]
pub(crate) struct Vocab {
    pub texts: Vec<String>,
    pub scores: Vec<f32>,
    pub types: Vec<TokenType>,
    pub attrs: Vec<u16>,
    map: HashMap<String, u32>,
    /// `<0xXX>` (or the one-byte string) for every byte, where the vocabulary has it.
    byte_tokens: [Option<u32>; 256],
}

impl Vocab {
    /// Builds the table; empty texts become `[EMPTY_i]` like llama.cpp, duplicates are an error.
    pub(crate) fn new(
        mut texts: Vec<String>,
        scores: Vec<f32>,
        types: Vec<TokenType>,
    ) -> Result<Vocab, TokenizerError> {
        let n = texts.len();
        if n == 0 {
            return Err(TokenizerError::InvalidVocab("the vocabulary is empty".into()));
        }
        if n > u32::MAX as usize / 2 {
            return Err(TokenizerError::InvalidVocab(format!("{n} tokens is too many")));
        }
        let mut map = HashMap::with_capacity(n);
        for (i, t) in texts.iter_mut().enumerate() {
            if t.is_empty() {
                *t = format!("[EMPTY_{i}]");
            }
            if let Some(prev) = map.insert(t.clone(), i as u32) {
                return Err(TokenizerError::InvalidVocab(format!(
                    "duplicate token {t:?} (ids {prev} and {i})"
                )));
            }
        }
        let attrs = types.iter().map(|t| t.attr()).collect();
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = map.get(&hex).copied().or_else(|| {
                let one = [b as u8];
                std::str::from_utf8(&one).ok().and_then(|s| map.get(s).copied())
            });
        }
        Ok(Vocab { texts, scores, types, attrs, map, byte_tokens })
    }

    /// Number of tokens.
    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// Id of a text.
    pub(crate) fn id_of(&self, text: &str) -> Option<u32> {
        self.map.get(text).copied()
    }

    /// Score of a token.
    pub(crate) fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    /// Attribute bits of a token (0 when out of range).
    pub(crate) fn attr(&self, id: u32) -> u16 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }

    /// The byte-fallback token of a byte.
    pub(crate) fn byte_token(&self, byte: u8) -> Result<u32, TokenizerError> {
        self.byte_tokens[byte as usize].ok_or(TokenizerError::NoByteToken(byte))
    }
}
