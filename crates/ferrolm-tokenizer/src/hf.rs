//! Hugging Face tokenizers: a model folder's `tokenizer.json` run by the `tokenizers` crate, with
//! the special tokens and BOS/EOS rules of `tokenizer_config.json`, `generation_config.json` and
//! `config.json`.
//!
//! Encoding is Hugging Face's own (normalizer, pre-tokenizer, model, added tokens) with the
//! post-processor off: [`Tokenizer::encode`] adds BOS/EOS itself, once, per
//! [`Tokenizer::add_bos`]/[`Tokenizer::add_eos`]. Decoding follows the GGUF path: a token's piece
//! is its vocabulary text mapped to bytes (GPT-2 characters → bytes, or `▁` → space and `<0xXX>`
//! → the byte), so a model answers the same from its Hugging Face folder and from its GGUF
//! conversion. Hugging Face's decoder is not used: it would strip the leading space of
//! SentencePiece output, which [`Tokenizer::decode`] keeps like llama.cpp does.
//!
//! Token types mirror llama.cpp's converter: the model's unknown token is unknown, `special`
//! added tokens (and added tokens that look special, such as `<|...|>`) are control tokens, other
//! added tokens user-defined, `<0xXX>` tokens of a byte-fallback vocabulary byte tokens, ids no token
//! uses unused `[PAD<id>]` tokens, everything else normal.

mod export;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use super::load::detect_special_by_text;
use super::vocab::{TokenType, Vocab};
use super::{Algorithm, SpecialIds, Tokenizer, TokenizerError, TokenizerKind};

pub use export::HfVocabExport;

/// File names in a Hugging Face model folder.
const TOKENIZER_JSON: &str = "tokenizer.json";
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
const GENERATION_CONFIG: &str = "generation_config.json";
const MODEL_CONFIG: &str = "config.json";
const CHAT_TEMPLATE_JINJA: &str = "chat_template.jinja";
const CHAT_TEMPLATE_JSON: &str = "chat_template.json";

/// Ids beyond the number of tokens plus this many are rejected (holes are unused padding ids).
const MAX_ID_HOLES: usize = 1 << 16;

/// The Hugging Face side of a [`Tokenizer`].
#[derive(Clone)]
pub(super) struct HfAlgorithm {
    /// Splits every added token out of the text (special ones included).
    hf: tokenizers::Tokenizer,
    /// A copy that leaves `special` added tokens in the text (for `parse_special = false`), made
    /// on first use.
    literal: OnceLock<tokenizers::Tokenizer>,
    n_merges: usize,
}

impl HfAlgorithm {
    /// Number of merges of a BPE model.
    pub(super) fn n_merges(&self) -> usize {
        self.n_merges
    }

    /// Appends the tokens of `text` (no BOS/EOS).
    pub(super) fn encode_into(
        &self,
        text: &str,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let tk = if parse_special {
            &self.hf
        } else {
            self.literal.get_or_init(|| {
                let mut t = self.hf.clone();
                t.set_encode_special_tokens(true);
                t
            })
        };
        let enc = tk.encode_fast(text, false).map_err(|e| TokenizerError::Hf(e.to_string()))?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }

    /// The wrapped tokenizer.
    pub(super) fn inner(&self) -> &tokenizers::Tokenizer {
        &self.hf
    }
}

/// Reads an optional JSON file (`None` when it does not exist).
fn read_json_opt(path: &Path) -> Result<Option<Value>, TokenizerError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| TokenizerError::Config { path: path.to_path_buf(), reason: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TokenizerError::Io { path: path.to_path_buf(), source }),
    }
}

/// A token given as `"text"` or `{"content": "text", ...}`.
fn token_content(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(m) => m.get("content")?.as_str(),
        _ => None,
    }
}

/// An id given as an integer or a list of integers.
fn id_list(v: Option<&Value>) -> Vec<u64> {
    match v {
        Some(Value::Number(n)) => n.as_u64().into_iter().collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).collect(),
        _ => Vec::new(),
    }
}

/// The object nodes of a (possibly `Sequence`) normalizer / pre-tokenizer / decoder, flattened.
pub(super) fn flatten<'a>(node: &'a Value, list_key: &str, out: &mut Vec<&'a Value>) {
    match node.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            for n in node.get(list_key).and_then(Value::as_array).into_iter().flatten() {
                flatten(n, list_key, out);
            }
        }
        Some(_) => out.push(node),
        None => {}
    }
}

/// Whether a node is `Replace` of the string `from` by `to`.
pub(super) fn is_replace(node: &Value, from: &str, to: &str) -> bool {
    node["type"] == "Replace" && node["pattern"]["String"] == from && node["content"] == to
}

/// Which GGUF vocabulary kind the token texts follow, from the decoder (then the pre-tokenizer
/// and normalizer when the decoder says nothing).
fn detect_kind(raw: &Value) -> Option<TokenizerKind> {
    let mut nodes = Vec::new();
    flatten(&raw["decoder"], "decoders", &mut nodes);
    let mut pre = Vec::new();
    flatten(&raw["pre_tokenizer"], "pretokenizers", &mut pre);
    let mut norm = Vec::new();
    flatten(&raw["normalizer"], "normalizers", &mut norm);
    let has = |nodes: &[&Value], t: &str| nodes.iter().any(|n| n["type"] == t);
    if raw["model"]["type"] == "WordPiece" {
        return Some(TokenizerKind::Wpm);
    }
    if has(&nodes, "ByteLevel") {
        return Some(TokenizerKind::Bpe);
    }
    if has(&nodes, "Metaspace")
        || has(&nodes, "ByteFallback")
        || nodes.iter().any(|n| is_replace(n, "▁", " "))
    {
        return Some(TokenizerKind::Spm);
    }
    if has(&pre, "ByteLevel") {
        return Some(TokenizerKind::Bpe);
    }
    if has(&pre, "Metaspace") || norm.iter().any(|n| is_replace(n, " ", "▁")) {
        return Some(TokenizerKind::Spm);
    }
    None
}

/// Added tokens llama.cpp's converter marks as control even when they are not `special`.
pub(super) fn looks_special(text: &str) -> bool {
    matches!(text, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (text.starts_with("<|") && text.ends_with("|>"))
        || (text.starts_with("<｜") && text.ends_with("｜>"))
        || (text.starts_with("<unused") && text.ends_with('>'))
}

/// Whether a text is a `<0xXX>` byte-fallback token.
fn is_byte_token(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 6 && text.starts_with("<0x") && b[5] == b'>' && b[3..5].iter().all(u8::is_ascii_hexdigit)
}

/// The vocabulary table of a Hugging Face tokenizer: texts in id order, holes filled, and in a
/// SentencePiece-style vocabulary `▁` of user-defined tokens turned into spaces (they stand for
/// raw text, which Hugging Face's decoder would give; llama.cpp's converter does the same).
fn build_vocab(
    hf: &tokenizers::Tokenizer,
    raw: &Value,
    kind: TokenizerKind,
    path: &Path,
) -> Result<Vocab, TokenizerError> {
    let map = hf.get_vocab(true);
    let n = map.values().max().map_or(0, |&m| m as usize + 1);
    if n > map.len() + MAX_ID_HOLES {
        return Err(TokenizerError::Config {
            path: path.to_path_buf(),
            reason: format!("token id {} is far beyond the {} tokens", n - 1, map.len()),
        });
    }
    let mut texts: Vec<Option<String>> = vec![None; n];
    for (text, id) in map {
        texts[id as usize] = Some(text);
    }
    let added = hf.get_added_tokens_decoder();
    let byte_fallback = raw["model"]["byte_fallback"].as_bool().unwrap_or(false);
    let unk = raw["model"]["unk_token"].as_str();
    let mut types = Vec::with_capacity(n);
    for (id, text) in texts.iter().enumerate() {
        types.push(match (text, added.get(&(id as u32))) {
            (None, _) => TokenType::Unused,
            (Some(t), _) if Some(t.as_str()) == unk => TokenType::Unknown,
            (Some(_), Some(a)) if a.special || looks_special(&a.content) => TokenType::Control,
            (Some(_), Some(_)) => TokenType::UserDefined,
            (Some(t), None) if byte_fallback && is_byte_token(t) => TokenType::Byte,
            (Some(_), None) => TokenType::Normal,
        });
    }
    let mut used: std::collections::HashSet<String> = texts.iter().flatten().cloned().collect();
    let texts = texts
        .into_iter()
        .enumerate()
        .map(|(id, t)| match t {
            Some(t)
                if kind == TokenizerKind::Spm && types[id] == TokenType::UserDefined && t.contains('▁') =>
            {
                let spaced = t.replace('▁', " ");
                if used.insert(spaced.clone()) { spaced } else { t }
            }
            Some(t) => t,
            None => {
                let mut pad = format!("[PAD{id}]");
                while used.contains(&pad) {
                    pad.push('#');
                }
                used.insert(pad.clone());
                pad
            }
        })
        .collect();
    Vocab::new(texts, vec![0.0; n], types)
}

/// The chat template of a folder: `chat_template.jinja`, `chat_template.json`, then
/// `tokenizer_config.json` (a string, or a list of `{name, template}` where `default` wins).
fn read_chat_template(dir: &Path, config: Option<&Value>) -> Result<Option<String>, TokenizerError> {
    let jinja = dir.join(CHAT_TEMPLATE_JINJA);
    match std::fs::read_to_string(&jinja) {
        Ok(s) => return Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(TokenizerError::Io { path: jinja, source }),
    }
    let from_value = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Array(list) => {
                let named = |name: &str| list.iter().find(|t| t["name"] == name);
                named("default").or_else(|| list.first())?["template"].as_str().map(str::to_string)
            }
            _ => None,
        }
    };
    if let Some(v) = read_json_opt(&dir.join(CHAT_TEMPLATE_JSON))?
        && let Some(t) = from_value(&v["chat_template"])
    {
        return Ok(Some(t));
    }
    Ok(config.and_then(|c| from_value(&c["chat_template"])))
}

/// BOS/EOS the post-processor adds around a sequence: `(prefix, suffix)`.
fn probe_post_processor(hf: &tokenizers::Tokenizer) -> Result<(Vec<u32>, Vec<u32>), TokenizerError> {
    let enc = |special| {
        hf.encode_fast("a", special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Hf(e.to_string()))
    };
    let (with, without) = (enc(true)?, enc(false)?);
    if with.len() >= without.len() {
        for i in 0..=with.len() - without.len() {
            if with[i..i + without.len()] == without[..] {
                return Ok((with[..i].to_vec(), with[i + without.len()..].to_vec()));
            }
        }
    }
    Ok((Vec::new(), Vec::new()))
}

impl Tokenizer {
    /// Builds the tokenizer of a Hugging Face model folder.
    ///
    /// Reads `tokenizer.json` (required), `tokenizer_config.json` (`bos_token`, `eos_token`,
    /// `unk_token`, `pad_token` as strings or `{"content": ...}` objects, `add_bos_token`,
    /// `add_eos_token`, `chat_template`), `generation_config.json` (`bos_token_id`,
    /// `eos_token_id` as an integer or a list; every listed EOS ends generation) and `config.json`
    /// (the same ids, as a last resort), plus `chat_template.jinja` / `chat_template.json`.
    ///
    /// Whether BOS/EOS are added: `add_bos_token`/`add_eos_token` when the config gives them, else
    /// whatever `tokenizer.json`'s post-processor adds. End-of-generation tokens are EOS, the
    /// generation config's EOS ids, and llama.cpp's end-of-turn texts (`<|im_end|>`, `<|eot_id|>`…).
    pub fn from_hf_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        let json_path = dir.join(TOKENIZER_JSON);
        let bytes = std::fs::read(&json_path)
            .map_err(|source| TokenizerError::Io { path: json_path.clone(), source })?;
        let config_err =
            |path: &Path, reason: String| TokenizerError::Config { path: path.to_path_buf(), reason };
        let raw: Value = serde_json::from_slice(&bytes).map_err(|e| config_err(&json_path, e.to_string()))?;
        let mut hf =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| config_err(&json_path, e.to_string()))?;
        drop(bytes);
        // Some files set truncation or padding; neither belongs in an inference tokenizer.
        hf.with_truncation(None).map_err(|e| TokenizerError::Hf(e.to_string()))?;
        hf.with_padding(None);

        let kind = detect_kind(&raw).ok_or_else(|| {
            TokenizerError::Unsupported(format!(
                "{}: decoder {} is neither byte-level nor SentencePiece-style, nor a WordPiece model",
                json_path.display(),
                raw["decoder"]["type"]
            ))
        })?;
        let n_merges = raw["model"]["merges"].as_array().map_or(0, Vec::len);
        let mut vocab = build_vocab(&hf, &raw, kind, &json_path)?;
        let n = vocab.len();

        let tok_config_path = dir.join(TOKENIZER_CONFIG);
        let tok_config = read_json_opt(&tok_config_path)?;
        let gen_config = read_json_opt(&dir.join(GENERATION_CONFIG))?;
        let model_config = read_json_opt(&dir.join(MODEL_CONFIG))?;
        let chat_template = read_chat_template(dir, tok_config.as_ref())?;

        // A token named in tokenizer_config.json.
        let named = |key: &str| -> Option<u32> {
            let text = token_content(tok_config.as_ref()?.get(key)?)?;
            let id = vocab.id_of(text);
            if id.is_none() {
                tracing::warn!(key, text, "tokenizer_config.json names a token the vocabulary lacks");
            }
            id
        };
        // Ids from generation_config.json then config.json, inside the vocabulary.
        let ids = |key: &str| -> Vec<u32> {
            [&gen_config, &model_config]
                .into_iter()
                .flat_map(|c| id_list(c.as_ref().and_then(|c| c.get(key))))
                .filter(|&id| (id as usize) < n)
                .map(|id| id as u32)
                .collect()
        };
        let mut special = SpecialIds {
            bos: named("bos_token").or_else(|| ids("bos_token_id").first().copied()),
            eos: named("eos_token").or_else(|| ids("eos_token_id").first().copied()),
            unk: named("unk_token")
                .or_else(|| raw["model"]["unk_token"].as_str().and_then(|t| vocab.id_of(t))),
            pad: named("pad_token").or_else(|| ids("pad_token_id").first().copied()),
            sep: named("sep_token"),
            mask: named("mask_token"),
            ..SpecialIds::default()
        };

        let (prefix, suffix) = probe_post_processor(&hf)?;
        if special.bos.is_none() && prefix.len() == 1 {
            special.bos = prefix.first().copied();
        }
        let flag = |key: &str| tok_config.as_ref().and_then(|c| c.get(key)).and_then(Value::as_bool);
        let add_bos =
            flag("add_bos_token").unwrap_or(special.bos.is_some() && prefix.first() == special.bos.as_ref());
        let add_eos =
            flag("add_eos_token").unwrap_or(special.eos.is_some() && suffix.last() == special.eos.as_ref());
        // BERT's post-processor closes a text with [SEP] (not an EOS).
        let add_sep = !add_eos && special.sep.is_some() && suffix.last() == special.sep.as_ref();
        if add_bos && special.bos.is_none() {
            return Err(config_err(
                &tok_config_path,
                "add_bos_token is true but there is no BOS token".into(),
            ));
        }
        if add_eos && special.eos.is_none() {
            return Err(config_err(
                &tok_config_path,
                "add_eos_token is true but there is no EOS token".into(),
            ));
        }

        let mut eog = detect_special_by_text(&mut vocab, &mut special);
        eog.extend(ids("eos_token_id"));

        Ok(Tokenizer {
            kind,
            algorithm: Algorithm::Hf(Box::new(HfAlgorithm { hf, literal: OnceLock::new(), n_merges })),
            vocab,
            special,
            eog,
            special_tokens: Vec::new(),
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix: false,
            remove_extra_whitespaces: false,
            pre_name: None,
            chat_template,
        })
    }

    /// What a GGUF converter needs to write this Hugging Face tokenizer's vocabulary; an error
    /// for GGUF tokenizers and for models other than BPE.
    pub fn hf_vocab_export(&self) -> Result<HfVocabExport, TokenizerError> {
        let Algorithm::Hf(h) = &self.algorithm else {
            return Err(TokenizerError::Unsupported("not a Hugging Face tokenizer".into()));
        };
        HfVocabExport::new(self, h.inner())
    }
}

/// Reads a merges list (`["a b", ...]` or `[["a", "b"], ...]`) as pairs.
pub(super) fn merge_pairs(merges: &Value, path: &Path) -> Result<Vec<(String, String)>, TokenizerError> {
    let bad = |i: usize| TokenizerError::Config {
        path: path.to_path_buf(),
        reason: format!("merge {i} is malformed"),
    };
    let Some(list) = merges.as_array() else {
        return Ok(Vec::new());
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| match m {
            Value::String(s) => {
                s.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).ok_or_else(|| bad(i))
            }
            Value::Array(pair) => match pair.as_slice() {
                [Value::String(a), Value::String(b)] => Ok((a.clone(), b.clone())),
                _ => Err(bad(i)),
            },
            _ => Err(bad(i)),
        })
        .collect()
}

/// The rank of the first merge producing each token text.
pub(super) fn merge_ranks(merges: &[(String, String)]) -> HashMap<String, usize> {
    let mut ranks = HashMap::with_capacity(merges.len());
    for (rank, (a, b)) in merges.iter().enumerate() {
        ranks.entry(format!("{a}{b}")).or_insert(rank);
    }
    ranks
}

/// A path naming the in-memory serialization in errors.
pub(super) fn serialized_path() -> PathBuf {
    PathBuf::from("<tokenizer.json>")
}
