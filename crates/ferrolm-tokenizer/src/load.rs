//! Building a [`Tokenizer`] from GGUF metadata, with llama.cpp's defaults and fix-ups (special-token
//! defaults per model type, end-of-generation detection by token text, per-model strip attributes).

use std::collections::BTreeSet;

use ferrolm_format::gguf::{GgufFile, MetaArray};

use super::bpe::MergeRanks;
use super::pretok::{PreTokenizer, PreType};
use super::ugm::Ugm;
use super::vocab::{TokenType, Vocab, attr};
use super::wpm;
use super::{Algorithm, SpecialIds, Tokenizer, TokenizerError, TokenizerKind};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";

/// Texts llama.cpp takes as end-of-turn tokens when `eot_token_id` is missing.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Texts that end generation whatever the metadata says.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Accessor of one [`SpecialIds`] field.
type SlotFn = fn(&mut SpecialIds) -> &mut Option<u32>;

fn meta_err(e: ferrolm_format::gguf::GgufError) -> TokenizerError {
    TokenizerError::Metadata(e)
}

/// Reads scores (f32 or i32 array) for `n` tokens.
fn read_scores(gguf: &GgufFile, n: usize) -> Result<Vec<f32>, TokenizerError> {
    let Some(arr) = gguf.opt_array(KEY_SCORES).map_err(meta_err)? else {
        return Ok(vec![0.0; n]);
    };
    let scores: Vec<f32> = match arr {
        MetaArray::F32(v) => v.clone(),
        MetaArray::I32(v) => v.iter().map(|&x| x as f32).collect(),
        other => {
            return Err(TokenizerError::InvalidVocab(format!(
                "{KEY_SCORES} is an array of {}, expected f32 or i32",
                other.elem_type_name()
            )));
        }
    };
    if scores.len() != n {
        return Err(TokenizerError::InvalidVocab(format!(
            "{KEY_SCORES} has {} entries for {n} tokens",
            scores.len()
        )));
    }
    Ok(scores)
}

/// Reads token types for `n` tokens (all normal when the key is absent).
fn read_types(gguf: &GgufFile, n: usize) -> Result<Vec<TokenType>, TokenizerError> {
    let Some(arr) = gguf.opt_array(KEY_TYPES).map_err(meta_err)? else {
        return Ok(vec![TokenType::Normal; n]);
    };
    let Some(v) = arr.to_i64_vec() else {
        return Err(TokenizerError::InvalidVocab(format!(
            "{KEY_TYPES} is an array of {}, expected integers",
            arr.elem_type_name()
        )));
    };
    if v.len() != n {
        return Err(TokenizerError::InvalidVocab(format!(
            "{KEY_TYPES} has {} entries for {n} tokens",
            v.len()
        )));
    }
    Ok(v.into_iter().map(TokenType::from_gguf).collect())
}

/// Reads an optional special-token id; an id outside the vocabulary is an error.
fn read_id(gguf: &GgufFile, name: &str, n: usize) -> Result<Option<u32>, TokenizerError> {
    let key = format!("tokenizer.ggml.{name}");
    match gguf.opt_u64(&key).map_err(meta_err)? {
        None => Ok(None),
        Some(id) if (id as usize) < n && id <= u32::MAX as u64 => Ok(Some(id as u32)),
        Some(id) => {
            Err(TokenizerError::InvalidVocab(format!("{key} = {id} is outside the vocabulary of {n} tokens")))
        }
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.
    ///
    /// Supports `llama` (SentencePiece-style) and `gpt2` (byte-level BPE) vocabularies with the
    /// pre-tokenizers listed in [`PreType`]; other kinds give [`TokenizerError::Unsupported`].
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let model = gguf.get_str(KEY_MODEL).map_err(meta_err)?.to_string();
        let pre_name = gguf.opt_str(KEY_PRE).map_err(meta_err)?.map(str::to_string);

        let kind = match model.as_str() {
            "llama" => TokenizerKind::Spm,
            "gpt2" | "gemma4" => TokenizerKind::Bpe,
            "bert" => TokenizerKind::Wpm,
            "t5" => TokenizerKind::Ugm,
            other => {
                return Err(TokenizerError::Unsupported(format!(
                    "tokenizer model '{other}' (ferrolm implements 'llama', 'gpt2', 'gemma4', 'bert' and 't5')"
                )));
            }
        };

        let texts = gguf.get_str_array(KEY_TOKENS).map_err(meta_err)?.to_vec();
        let n = texts.len();
        let scores = read_scores(gguf, n)?;
        let types = read_types(gguf, n)?;
        let mut vocab = Vocab::new(texts, scores, types)?;

        // Defaults by model type, then the pre-tokenizer's, then the file's keys.
        let mut special = SpecialIds::default();
        let (mut add_bos, mut add_eos, mut add_space_prefix);
        let mut add_sep = false;
        // A unigram tokenizer is built last, from the final flags, ids and token attributes.
        let algorithm = match kind {
            TokenizerKind::Ugm => {
                // llama.cpp's defaults for T5-style vocabularies.
                (special.eos, special.unk, special.pad) = (Some(1), Some(2), Some(0));
                (add_bos, add_eos, add_space_prefix) = (false, true, true);
                None
            }
            TokenizerKind::Wpm => {
                // llama.cpp's defaults for BERT vocabularies ([CLS] 101, [UNK] 100, [SEP] 102…).
                special.bos = Some(101);
                special.unk = Some(100);
                special.sep = Some(102);
                special.pad = Some(0);
                special.mask = Some(103);
                (add_bos, add_eos, add_space_prefix, add_sep) = (true, false, false, true);
                let lowercase =
                    gguf.opt_bool("tokenizer.ggml.normalizer.lowercase").map_err(meta_err)?.unwrap_or(true);
                let strip_accents = gguf
                    .opt_bool("tokenizer.ggml.normalizer.strip_accents")
                    .map_err(meta_err)?
                    .unwrap_or(lowercase);
                let max_len = vocab.texts.iter().map(String::len).max().unwrap_or(0);
                Some(Algorithm::Wpm { norm: wpm::Normalizer { lowercase, strip_accents }, max_len })
            }
            TokenizerKind::Spm => {
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                add_bos = true;
                add_eos = false;
                add_space_prefix = true;
                Some(Algorithm::Spm)
            }
            TokenizerKind::Bpe => {
                special.bos = Some(11);
                special.eos = Some(11);
                add_bos = false;
                add_eos = false;
                add_space_prefix = false;
                // Gemma 4's vocabulary has no default ids, and its own pre-tokenizer whatever the
                // file's `pre` says (as llama.cpp decides).
                let name = if model == "gemma4" { "gemma4" } else { pre_name.as_deref().unwrap_or("") };
                if model == "gemma4" {
                    (special.bos, special.eos) = (None, None);
                }
                let info = PreType::from_name(name)
                    .ok_or_else(|| TokenizerError::Unsupported(format!("pre-tokenizer '{name}'")))?;
                if let Some(b) = info.add_bos {
                    add_bos = b;
                }
                if info.no_bos {
                    special.bos = None;
                }
                let merges = gguf.get_str_array(KEY_MERGES).map_err(meta_err)?;
                Some(Algorithm::Bpe {
                    pre: info.pre,
                    pretok: PreTokenizer::new(info.pre)?,
                    merges: MergeRanks::parse(merges)?,
                    ignore_merges: info.ignore_merges,
                })
            }
        };
        if let Some(v) = gguf.opt_bool("tokenizer.ggml.add_space_prefix").map_err(meta_err)? {
            add_space_prefix = v;
        }
        let remove_extra_whitespaces =
            gguf.opt_bool("tokenizer.ggml.remove_extra_whitespaces").map_err(meta_err)?.unwrap_or(false);

        // Default ids that fall outside the vocabulary are dropped (llama.cpp does the same).
        for id in [
            &mut special.bos,
            &mut special.eos,
            &mut special.unk,
            &mut special.sep,
            &mut special.pad,
            &mut special.mask,
        ] {
            if id.is_some_and(|i| i as usize >= n) {
                *id = None;
            }
        }
        // The deprecated FIM names come last and win, as in llama.cpp.
        let keys: [(&str, SlotFn); 17] = [
            ("bos_token_id", |s| &mut s.bos),
            ("eos_token_id", |s| &mut s.eos),
            ("eot_token_id", |s| &mut s.eot),
            ("eom_token_id", |s| &mut s.eom),
            ("unknown_token_id", |s| &mut s.unk),
            ("seperator_token_id", |s| &mut s.sep),
            ("padding_token_id", |s| &mut s.pad),
            ("mask_token_id", |s| &mut s.mask),
            ("fim_pre_token_id", |s| &mut s.fim_pre),
            ("fim_suf_token_id", |s| &mut s.fim_suf),
            ("fim_mid_token_id", |s| &mut s.fim_mid),
            ("fim_pad_token_id", |s| &mut s.fim_pad),
            ("fim_rep_token_id", |s| &mut s.fim_rep),
            ("fim_sep_token_id", |s| &mut s.fim_sep),
            ("prefix_token_id", |s| &mut s.fim_pre),
            ("suffix_token_id", |s| &mut s.fim_suf),
            ("middle_token_id", |s| &mut s.fim_mid),
        ];
        for (name, slot) in keys {
            if let Some(id) = read_id(gguf, name, n)? {
                *slot(&mut special) = Some(id);
            }
        }
        if let Some(v) = gguf.opt_bool("tokenizer.ggml.add_bos_token").map_err(meta_err)? {
            add_bos = v;
        }
        if let Some(v) = gguf.opt_bool("tokenizer.ggml.add_eos_token").map_err(meta_err)? {
            add_eos = v;
        }
        if let Some(v) = gguf.opt_bool("tokenizer.ggml.add_sep_token").map_err(meta_err)? {
            add_sep = v;
        }
        // llama.cpp forces a BOS for Gemma 4 whatever the file says.
        if matches!(algorithm, Some(Algorithm::Bpe { pre: PreType::Gemma4, .. })) {
            add_bos = true;
        }
        if add_bos && special.bos.is_none() {
            return Err(TokenizerError::InvalidVocab(
                "add_bos_token is true but there is no BOS token".into(),
            ));
        }
        if add_eos && special.eos.is_none() {
            return Err(TokenizerError::InvalidVocab(
                "add_eos_token is true but there is no EOS token".into(),
            ));
        }

        let eog = detect_special_by_text(&mut vocab, &mut special);
        let chat_template = gguf.opt_str("tokenizer.chat_template").map_err(meta_err)?.map(str::to_string);
        apply_model_attrs(gguf, &mut vocab, pre_name.as_deref())?;

        // Tokens split out of the text before tokenizing: longest first.
        let mut special_tokens: Vec<u32> = (0..n as u32)
            .filter(|&id| vocab.attr(id) & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .collect();
        special_tokens.sort_by(|&a, &b| {
            vocab.texts[b as usize].len().cmp(&vocab.texts[a as usize].len()).then(a.cmp(&b))
        });
        // The phi-3 rule marks every special token (applied after the list is built in llama.cpp).
        apply_phi3_attrs(gguf, &mut vocab, &special_tokens)?;
        let algorithm = match algorithm {
            Some(a) => a,
            None => {
                let charsmap = precompiled_charsmap(gguf)?;
                let (space, extra) = (add_space_prefix, remove_extra_whitespaces);
                Algorithm::Ugm(Box::new(Ugm::new(&vocab, charsmap.as_deref(), special.unk, space, extra)?))
            }
        };

        Ok(Tokenizer {
            kind,
            algorithm,
            vocab,
            special,
            eog,
            special_tokens,
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            remove_extra_whitespaces,
            pre_name,
            chat_template,
        })
    }
}

/// Finds EOT/EOM/FIM tokens by text, marks end-of-generation tokens control, and returns the
/// end-of-generation set.
pub(super) fn detect_special_by_text(vocab: &mut Vocab, special: &mut SpecialIds) -> BTreeSet<u32> {
    let groups: [(&mut Option<u32>, &[&str]); 8] = [
        (&mut special.eot, EOT_TEXTS),
        (&mut special.eom, &["<|eom_id|>"]),
        (&mut special.fim_pre, FIM_PRE_TEXTS),
        (&mut special.fim_suf, FIM_SUF_TEXTS),
        (&mut special.fim_mid, FIM_MID_TEXTS),
        (&mut special.fim_pad, FIM_PAD_TEXTS),
        (&mut special.fim_rep, FIM_REP_TEXTS),
        (&mut special.fim_sep, FIM_SEP_TEXTS),
    ];
    for (slot, texts) in groups {
        if slot.is_some() {
            continue;
        }
        // The lowest id among the known texts (llama.cpp takes whichever its hash map yields first).
        if let Some(id) = texts.iter().filter_map(|t| vocab.id_of(t)).min() {
            *slot = Some(id);
            vocab.attrs[id as usize] |= attr::CONTROL;
        }
    }
    // Control tokens whose text says "unused" are unused.
    for id in 0..vocab.len() {
        if vocab.attrs[id] & attr::CONTROL != 0 && vocab.texts[id].contains("unused") {
            vocab.attrs[id] |= attr::UNUSED;
        }
    }
    let mut eog = BTreeSet::new();
    eog.extend(special.fim_pad);
    eog.extend(special.fim_rep);
    eog.extend(special.fim_sep);
    let eog_text_ids: Vec<u32> = EOG_TEXTS.iter().filter_map(|t| vocab.id_of(t)).collect();
    for id in eog_text_ids {
        eog.insert(id);
        vocab.attrs[id as usize] |= attr::CONTROL;
    }
    // gpt-oss: these are always rendered.
    for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = vocab.id_of(t) {
            vocab.attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend(special.eos);
    eog.extend(special.eot);
    eog.extend(special.eom);
    // o200k_harmony / solar-open: "<|end|>" does not end generation there.
    let has =
        |t: &str, vocab: &Vocab, eog: &BTreeSet<u32>| vocab.id_of(t).is_some_and(|id| eog.contains(&id));
    let call = has("<|call|>", vocab, &eog) || has("<|calls|>", vocab, &eog);
    let end = has("<|end|>", vocab, &eog);
    if end
        && call
        && (has("<|return|>", vocab, &eog) || has("<|flush|>", vocab, &eog))
        && let Some(id) = vocab.id_of("<|end|>")
    {
        eog.remove(&id);
        vocab.attrs[id as usize] = attr::USER_DEFINED;
    }
    // gemma4 / paddleocr: "</s>" is not end of generation when "<|tool_response>" is.
    if has("<|tool_response>", vocab, &eog)
        && has("</s>", vocab, &eog)
        && let Some(id) = vocab.id_of("</s>")
    {
        eog.remove(&id);
        vocab.attrs[id as usize] = attr::NORMAL;
    }
    eog
}

/// Per-model strip attributes that do not depend on the special-token list.
fn apply_model_attrs(gguf: &GgufFile, vocab: &mut Vocab, pre: Option<&str>) -> Result<(), TokenizerError> {
    let arch = gguf.opt_str("general.architecture").map_err(meta_err)?.unwrap_or("");
    let name = gguf.opt_str("general.name").map_err(meta_err)?.unwrap_or("").to_lowercase();
    let pre = pre.unwrap_or("");
    let jina = ["jina-v2-de", "jina-v2-es", "jina-v2-code"].iter().any(|p| pre.contains(p))
        || ["nomic-bert-moe", "jina-bert-v3"].iter().any(|a| arch.contains(a));
    if jina {
        if let Some(id) = vocab.id_of("<mask>") {
            vocab.attrs[id as usize] |= attr::LSTRIP;
        }
    } else if !(name.contains("phi-3") || name.contains("phi3"))
        && name.contains("modern-bert")
        && let Some(id) = vocab.id_of("[MASK]")
    {
        vocab.attrs[id as usize] |= attr::LSTRIP;
    }
    Ok(())
}

/// Phi-3: every special token strips whitespace on its right, except `<unk>`, `<s>` and
/// `<|endoftext|>`; `</s>` too.
fn apply_phi3_attrs(
    gguf: &GgufFile,
    vocab: &mut Vocab,
    special_tokens: &[u32],
) -> Result<(), TokenizerError> {
    let arch = gguf.opt_str("general.architecture").map_err(meta_err)?.unwrap_or("");
    let pre = gguf.opt_str(KEY_PRE).map_err(meta_err)?.unwrap_or("");
    let name = gguf.opt_str("general.name").map_err(meta_err)?.unwrap_or("").to_lowercase();
    let jina = ["jina-v2-de", "jina-v2-es", "jina-v2-code"].iter().any(|p| pre.contains(p))
        || ["nomic-bert-moe", "jina-bert-v3"].iter().any(|a| arch.contains(a));
    if jina || !(name.contains("phi-3") || name.contains("phi3")) {
        return Ok(());
    }
    for &id in special_tokens {
        vocab.attrs[id as usize] |= attr::RSTRIP;
    }
    if let Some(id) = vocab.id_of("</s>") {
        vocab.attrs[id as usize] |= attr::RSTRIP;
    }
    for t in ["<unk>", "<s>", "<|endoftext|>"] {
        if let Some(id) = vocab.id_of(t) {
            vocab.attrs[id as usize] &= !attr::RSTRIP;
        }
    }
    Ok(())
}

/// `tokenizer.ggml.precompiled_charsmap` (a unigram vocabulary's normalisation map) as bytes.
fn precompiled_charsmap(gguf: &GgufFile) -> Result<Option<Vec<u8>>, TokenizerError> {
    const KEY: &str = "tokenizer.ggml.precompiled_charsmap";
    match gguf.opt_array(KEY).map_err(meta_err)? {
        None => Ok(None),
        Some(MetaArray::U8(v)) => Ok(Some(v.clone())),
        Some(MetaArray::I8(v)) => Ok(Some(v.iter().map(|&b| b as u8).collect())),
        Some(_) => Err(TokenizerError::InvalidVocab(format!("{KEY} must be an array of bytes"))),
    }
}
