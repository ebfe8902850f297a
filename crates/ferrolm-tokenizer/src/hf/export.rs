//! The `tokenizer.ggml.*` values a GGUF converter writes for a Hugging Face tokenizer.

use serde_json::Value;

use super::super::vocab::TokenType;
use super::super::{Tokenizer, TokenizerError, TokenizerKind};
use super::flatten;

/// Llama 3's pre-tokenizer regex as `tokenizer.json` spells it.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's pre-tokenizer regex as `tokenizer.json` spells it.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A Hugging Face tokenizer's vocabulary as GGUF metadata stores it, in id order.
///
/// Special ids, `add_bos`/`add_eos` and the chat template come from the [`Tokenizer`] itself
/// ([`Tokenizer::special_ids`], [`Tokenizer::add_bos`], [`Tokenizer::chat_template`]).
#[derive(Clone, Debug, PartialEq)]
pub struct HfVocabExport {
    /// `tokenizer.ggml.model`: `"gpt2"` for byte-level BPE, `"llama"` for SentencePiece-style
    /// BPE (`▁` for spaces, usually with `<0xXX>` byte fallback).
    pub model: &'static str,
    /// A guess at `tokenizer.ggml.pre` for `"gpt2"` vocabularies, from the pre-tokenizer's
    /// structure and regex (`"gpt-2"`, `"smollm"`, `"llama-bpe"`, `"qwen2"`); `None` when it is
    /// not one of those (llama.cpp identifies it by hashing sample tokenizations instead).
    pub pre: Option<&'static str>,
    /// `tokenizer.ggml.tokens`: the vocabulary strings as `tokenizer.json` has them (byte-level
    /// characters, or `▁` pieces), added tokens' content, and `[PAD<id>]` for ids no token uses.
    /// In SentencePiece-style vocabularies, user-defined (non-special added) tokens have `▁`
    /// replaced by spaces, as llama.cpp's converter does, since they are matched in raw text.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: normal 1, unknown 2, control 3, user-defined 4, unused 5, byte 6.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.scores`: `-rank` of the first merge producing the token, so that
    /// llama.cpp's score-driven SentencePiece merging follows the BPE merge order; tokens no merge
    /// produces score below every merge, `0` for control, user-defined, byte and unused tokens.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.merges`, as `"left right"` strings in rank order.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.add_space_prefix`: whether the normalizer or pre-tokenizer prepends `▁`
    /// (only meaningful for `"llama"`).
    pub add_space_prefix: bool,
}

/// The GGUF integer of a token type.
fn gguf_type(t: TokenType) -> i32 {
    match t {
        TokenType::Undefined => 0,
        TokenType::Normal => 1,
        TokenType::Unknown => 2,
        TokenType::Control => 3,
        TokenType::UserDefined => 4,
        TokenType::Unused => 5,
        TokenType::Byte => 6,
    }
}

/// Whether the normalizer or pre-tokenizer puts `▁` before the text.
fn detects_space_prefix(raw: &Value) -> bool {
    let mut norm = Vec::new();
    flatten(&raw["normalizer"], "normalizers", &mut norm);
    if norm.iter().any(|n| n["type"] == "Prepend" && n["prepend"] == "▁") {
        return true;
    }
    let mut pre = Vec::new();
    flatten(&raw["pre_tokenizer"], "pretokenizers", &mut pre);
    pre.iter().any(|n| {
        n["type"] == "Metaspace"
            && match n.get("prepend_scheme").and_then(Value::as_str) {
                Some(scheme) => scheme != "never",
                None => n["add_prefix_space"].as_bool().unwrap_or(true),
            }
    })
}

/// Guesses llama.cpp's pre-tokenizer name of a byte-level vocabulary.
fn guess_pre(raw: &Value) -> Option<&'static str> {
    let mut pre = Vec::new();
    flatten(&raw["pre_tokenizer"], "pretokenizers", &mut pre);
    let byte_level = |n: &Value, regex: bool| {
        n["type"] == "ByteLevel" && n["use_regex"].as_bool().unwrap_or(true) == regex
    };
    let split = |n: &Value, pattern: &str| n["type"] == "Split" && n["pattern"]["Regex"] == pattern;
    match pre.as_slice() {
        [b] if byte_level(b, true) => Some("gpt-2"),
        [d, b] if d["type"] == "Digits" && d["individual_digits"] == true && byte_level(b, true) => {
            Some("smollm")
        }
        [s, b] if split(s, LLAMA3_REGEX) && byte_level(b, false) => Some("llama-bpe"),
        [s, b] if split(s, QWEN2_REGEX) && byte_level(b, false) => Some("qwen2"),
        _ => None,
    }
}

impl HfVocabExport {
    /// Reads the export out of a Hugging Face tokenizer and its [`Tokenizer`] mirror.
    pub(crate) fn new(tok: &Tokenizer, hf: &tokenizers::Tokenizer) -> Result<HfVocabExport, TokenizerError> {
        let path = super::serialized_path();
        let json = hf.to_string(false).map_err(|e| TokenizerError::Hf(e.to_string()))?;
        let raw: Value = serde_json::from_str(&json)
            .map_err(|e| TokenizerError::Config { path: path.clone(), reason: e.to_string() })?;
        if tok.kind == TokenizerKind::Wpm {
            return Ok(Self::wordpiece(tok));
        }
        if raw["model"]["type"] != "BPE" {
            return Err(TokenizerError::Unsupported(format!(
                "GGUF export of a {} model (only BPE is exported)",
                raw["model"]["type"]
            )));
        }
        let pairs = super::merge_pairs(&raw["model"]["merges"], &path)?;
        let ranks = super::merge_ranks(&pairs);
        let merges: Vec<String> = pairs.iter().map(|(a, b)| format!("{a} {b}")).collect();
        let unreachable = -(merges.len() as f32) - 1.0;

        let vocab = &tok.vocab;
        let mut tokens = Vec::with_capacity(vocab.len());
        let mut token_types = Vec::with_capacity(vocab.len());
        let mut scores = Vec::with_capacity(vocab.len());
        for (text, &ty) in vocab.texts.iter().zip(&vocab.types) {
            tokens.push(text.clone());
            token_types.push(gguf_type(ty));
            scores.push(match ty {
                TokenType::Normal | TokenType::Unknown => {
                    ranks.get(text).map_or(unreachable, |&r| -(r as f32))
                }
                _ => 0.0,
            });
        }
        let (model, pre) = match tok.kind {
            TokenizerKind::Bpe => ("gpt2", guess_pre(&raw)),
            TokenizerKind::Spm | TokenizerKind::Wpm | TokenizerKind::Ugm => ("llama", None),
        };
        Ok(HfVocabExport {
            model,
            pre,
            tokens,
            token_types,
            scores,
            merges,
            add_space_prefix: tok.kind == TokenizerKind::Spm && detects_space_prefix(&raw),
        })
    }

    /// A WordPiece vocabulary the way llama.cpp's converter writes it (`"bert"`): word-initial
    /// pieces get a `▁` ("phantom space"), `##` continuations lose their `##`, control and unknown
    /// tokens stay as they are.
    fn wordpiece(tok: &Tokenizer) -> HfVocabExport {
        let vocab = &tok.vocab;
        let tokens = vocab
            .texts
            .iter()
            .zip(&vocab.types)
            .map(|(t, ty)| match ty {
                TokenType::Normal => t.strip_prefix("##").map_or_else(|| format!("▁{t}"), str::to_string),
                _ => t.clone(),
            })
            .collect();
        HfVocabExport {
            model: "bert",
            pre: None,
            tokens,
            token_types: vocab.types.iter().map(|&ty| gguf_type(ty)).collect(),
            scores: vec![0.0; vocab.len()],
            merges: Vec::new(),
            add_space_prefix: false,
        }
    }

    /// Appends unused `[PAD<id>]` tokens up to `n` entries (a model's embedding often has more rows
    /// than the tokenizer has tokens); does nothing when there are already `n` or more.
    pub fn pad_to(&mut self, n: usize) {
        for id in self.tokens.len()..n {
            let mut pad = format!("[PAD{id}]");
            while self.tokens.contains(&pad) {
                pad.push('#');
            }
            self.tokens.push(pad);
            self.token_types.push(gguf_type(TokenType::Unused));
            self.scores.push(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::is_replace;
    use super::*;

    #[test]
    fn pre_tokenizer_guesses() {
        let seq = |nodes: Value| serde_json::json!({ "pre_tokenizer": { "type": "Sequence", "pretokenizers": nodes } });
        let bl = |regex: bool| serde_json::json!({ "type": "ByteLevel", "add_prefix_space": false, "use_regex": regex });
        let split = |p: &str| serde_json::json!({ "type": "Split", "pattern": { "Regex": p }, "behavior": "Isolated" });
        assert_eq!(guess_pre(&serde_json::json!({ "pre_tokenizer": bl(true) })), Some("gpt-2"));
        let digits = serde_json::json!({ "type": "Digits", "individual_digits": true });
        assert_eq!(guess_pre(&seq(serde_json::json!([digits, bl(true)]))), Some("smollm"));
        assert_eq!(guess_pre(&seq(serde_json::json!([split(LLAMA3_REGEX), bl(false)]))), Some("llama-bpe"));
        assert_eq!(guess_pre(&seq(serde_json::json!([split(QWEN2_REGEX), bl(false)]))), Some("qwen2"));
        assert_eq!(guess_pre(&seq(serde_json::json!([split("x"), bl(false)]))), None);
        assert_eq!(guess_pre(&serde_json::json!({})), None);
    }

    #[test]
    fn space_prefix_detection() {
        let prepend = serde_json::json!({ "normalizer": { "type": "Sequence", "normalizers": [
            { "type": "Prepend", "prepend": "▁" },
            { "type": "Replace", "pattern": { "String": " " }, "content": "▁" } ] } });
        assert!(detects_space_prefix(&prepend));
        assert!(is_replace(&prepend["normalizer"]["normalizers"][1], " ", "▁"));
        let meta = |scheme: &str| serde_json::json!({ "pre_tokenizer": { "type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme } });
        assert!(detects_space_prefix(&meta("first")));
        assert!(!detects_space_prefix(&meta("never")));
        assert!(!detects_space_prefix(&serde_json::json!({ "normalizer": { "type": "NFC" } })));
    }
}
