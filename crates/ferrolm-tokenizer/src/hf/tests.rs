//! Hugging Face tokenizers built in the test: a hand-written SentencePiece-style BPE with byte
//! fallback (expected ids checked against the Python `tokenizers` library), and a byte-level BPE
//! trained with the crate's trainer.

use std::path::Path;

use serde_json::{Value, json};

use super::super::{TokenType, Tokenizer, TokenizerBackend, TokenizerError, TokenizerKind};

fn write_json(dir: &Path, name: &str, v: &Value) {
    std::fs::write(dir.join(name), v.to_string()).expect("write json");
}

fn added(id: usize, content: &str, special: bool) -> Value {
    json!({ "id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": special })
}

/// Pieces of the SentencePiece-style vocabulary after `<unk>`, `<s>`, `</s>` and the 256 bytes.
const SPM_PIECES: [&str; 18] = [
    "▁", "h", "e", "l", "o", "w", "r", "d", "ll", "▁h", "ell", "▁hell", "▁hello", "or", "▁w", "▁wor", "ld",
    "▁world",
];
const SPM_MERGES: [&str; 10] =
    ["l l", "▁ h", "e ll", "▁h ell", "▁hell o", "o r", "▁ w", "▁w or", "l d", "▁wor ld"];
/// Ids in the SentencePiece-style vocabulary.
const HELLO: u32 = 271;
const WORLD: u32 = 276;
const SPACE: u32 = 259;
const TURN: u32 = 277;
const TAG: u32 = 278;

/// A Llama-2-style `tokenizer.json`: Prepend/Replace normalizer, BPE with byte fallback,
/// a post-processor adding `<s>`, a special `<|turn|>` and a non-special `<tag>`.
fn spm_json(skip_id: Option<usize>) -> Value {
    let mut vocab = serde_json::Map::new();
    let mut next = 0;
    let mut push = |t: String| {
        if Some(next) == skip_id {
            next += 1;
        }
        vocab.insert(t, json!(next));
        next += 1;
    };
    for t in ["<unk>", "<s>", "</s>"] {
        push(t.to_string());
    }
    for b in 0..=255u8 {
        push(format!("<0x{b:02X}>"));
    }
    for p in SPM_PIECES {
        push(p.to_string());
    }
    let mut added_tokens = vec![added(0, "<unk>", true), added(1, "<s>", true), added(2, "</s>", true)];
    if skip_id.is_none() {
        added_tokens.push(added(TURN as usize, "<|turn|>", true));
        added_tokens.push(added(TAG as usize, "<tag>", false));
        added_tokens.push(added(TAG as usize + 1, "▁▁", false));
    }
    json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added_tokens,
        "normalizer": { "type": "Sequence", "normalizers": [
            { "type": "Prepend", "prepend": "▁" },
            { "type": "Replace", "pattern": { "String": " " }, "content": "▁" } ] },
        "pre_tokenizer": null,
        "post_processor": { "type": "TemplateProcessing",
            "single": [ { "SpecialToken": { "id": "<s>", "type_id": 0 } }, { "Sequence": { "id": "A", "type_id": 0 } } ],
            "pair": [ { "SpecialToken": { "id": "<s>", "type_id": 0 } }, { "Sequence": { "id": "A", "type_id": 0 } },
                      { "SpecialToken": { "id": "<s>", "type_id": 1 } }, { "Sequence": { "id": "B", "type_id": 1 } } ],
            "special_tokens": { "<s>": { "id": "<s>", "ids": [1], "tokens": ["<s>"] } } },
        "decoder": { "type": "Sequence", "decoders": [
            { "type": "Replace", "pattern": { "String": "▁" }, "content": " " },
            { "type": "ByteFallback" }, { "type": "Fuse" },
            { "type": "Strip", "content": " ", "start": 1, "stop": 0 } ] },
        "model": { "type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab, "merges": SPM_MERGES }
    })
}

fn spm_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_json(dir.path(), "tokenizer.json", &spm_json(None));
    dir
}

fn load(dir: &Path) -> Tokenizer {
    Tokenizer::from_hf_dir(dir).expect("tokenizer")
}

#[test]
fn spm_encode_matches_hugging_face() {
    let dir = spm_dir();
    let tok = load(dir.path());
    assert_eq!(tok.backend(), TokenizerBackend::HuggingFace);
    assert_eq!(tok.kind(), TokenizerKind::Spm);
    assert_eq!(tok.n_vocab(), 280);
    assert_eq!(tok.n_merges(), SPM_MERGES.len());
    assert_eq!((tok.bos(), tok.eos(), tok.special_ids().unk), (Some(1), None, Some(0)));
    // No tokenizer_config.json: BOS comes from the post-processor, and is added once.
    assert!(tok.add_bos() && !tok.add_eos());
    assert_eq!(tok.encode("hello world", true, true).expect("encode"), [1, HELLO, WORLD]);
    assert_eq!(tok.encode("hello world", false, true).expect("encode"), [HELLO, WORLD]);
    assert_eq!(tok.encode("", true, true).expect("encode"), [1]);
    assert_eq!(tok.encode(" hello  world", false, true).expect("encode"), [SPACE, HELLO, SPACE, WORLD]);
    // Byte fallback.
    let ids = tok.encode("hello é", false, true).expect("encode");
    assert_eq!(ids, [HELLO, SPACE, 198, 172]);
    assert_eq!(tok.token_type(198), Some(TokenType::Byte));
    assert_eq!(tok.token_to_piece(198), [0xC3]);
    assert_eq!(tok.token_to_piece(HELLO), b" hello");
    assert_eq!(tok.decode(&ids), " hello é");
    assert_eq!(tok.decode(&[1, HELLO]), "<s> hello");
    assert_eq!(tok.token_text(WORLD), Some("▁world"));
    assert_eq!(tok.token_id("▁world"), Some(WORLD));
    assert_eq!(tok.token_type(0), Some(TokenType::Unknown));
    assert_eq!(tok.token_type(HELLO), Some(TokenType::Normal));
}

#[test]
fn spm_special_and_added_tokens() {
    let dir = spm_dir();
    let tok = load(dir.path());
    assert_eq!(tok.token_type(TURN), Some(TokenType::Control));
    assert_eq!(tok.token_type(TAG), Some(TokenType::UserDefined));
    assert_eq!(tok.encode("hello<|turn|>world", false, true).expect("encode"), [HELLO, TURN, WORLD]);
    // Without parse_special the control token is text; the Python library gives these ids.
    let plain = tok.encode("hello<|turn|>world", false, false).expect("encode");
    assert_eq!(plain, [HELLO, 63, 127, 119, 120, 265, 113, 127, 65, 264, 272, 275]);
    assert_eq!(tok.decode(&plain), " hello<|turn|>world");
    // User-defined tokens are matched either way.
    assert_eq!(tok.encode("<tag>hello", false, false).expect("encode"), [TAG, HELLO]);
    assert_eq!(tok.encode("<tag>hello", false, true).expect("encode"), [TAG, HELLO]);
    assert_eq!(tok.token_to_piece(TURN), b"<|turn|>");
    // A user-defined "▁▁" stands for two spaces.
    assert_eq!(tok.token_text(TAG + 1), Some("  "));
    assert_eq!(tok.token_to_piece(TAG + 1), b"  ");
    // "</s>" ends generation (llama.cpp's end-of-generation texts apply).
    assert!(tok.is_eog(2) && !tok.is_eog(1));
}

#[test]
fn spm_stream_and_export() {
    let dir = spm_dir();
    let tok = load(dir.path());
    let ids = tok.encode("hello é€", false, true).expect("encode");
    let mut s = tok.stream();
    let text: Vec<String> = ids.iter().map(|&i| s.push(&tok, i)).collect();
    assert_eq!(text, [" hello", " ", "", "é", "", "", "€"]);
    assert!(!s.has_pending());

    let ex = tok.hf_vocab_export().expect("export");
    assert_eq!(ex.model, "llama");
    assert_eq!(ex.pre, None);
    assert!(ex.add_space_prefix);
    assert_eq!(ex.tokens.len(), 280);
    assert_eq!(ex.tokens[HELLO as usize], "▁hello");
    assert_eq!(ex.tokens[198], "<0xC3>");
    assert_eq!(ex.tokens[TAG as usize], "<tag>");
    assert_eq!(&ex.token_types[..4], [2, 3, 3, 6]);
    assert_eq!((ex.token_types[HELLO as usize], ex.token_types[TURN as usize]), (1, 3));
    assert_eq!(ex.token_types[TAG as usize], 4);
    assert_eq!((ex.tokens[TAG as usize + 1].as_str(), ex.token_types[TAG as usize + 1]), ("  ", 4));
    assert_eq!(ex.merges, SPM_MERGES);
    // "▁hello" comes from merge 4, "h" from no merge.
    assert_eq!(ex.scores[HELLO as usize], -4.0);
    assert_eq!(ex.scores[tok.token_id("h").expect("h") as usize], -11.0);
    let mut padded = ex.clone();
    padded.pad_to(282);
    assert_eq!(&padded.tokens[280..], ["[PAD280]", "[PAD281]"]);
    assert_eq!(&padded.token_types[280..], [5, 5]);
}

#[test]
fn config_files_set_bos_eos_and_template() {
    let dir = spm_dir();
    let d = dir.path();
    write_json(
        d,
        "tokenizer_config.json",
        &json!({ "add_bos_token": false, "add_eos_token": true,
                 "bos_token": { "content": "<s>", "lstrip": false }, "eos_token": "<|turn|>",
                 "chat_template": [ { "name": "tool_use", "template": "T" }, { "name": "default", "template": "D" } ] }),
    );
    write_json(d, "generation_config.json", &json!({ "bos_token_id": 1, "eos_token_id": [2, TURN, 100000] }));
    let tok = load(d);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(TURN)));
    // The config overrides the post-processor: no BOS, EOS appended once.
    assert!(!tok.add_bos() && tok.add_eos());
    assert_eq!(tok.encode("hello", true, true).expect("encode"), [HELLO, TURN]);
    assert!(tok.is_eog(TURN) && tok.is_eog(2));
    assert_eq!(tok.eog_ids().collect::<Vec<_>>(), [2, TURN]);
    assert_eq!(tok.chat_template(), Some("D"));

    // chat_template.jinja wins over tokenizer_config.json.
    std::fs::write(d.join("chat_template.jinja"), "{{ messages }}").expect("write");
    assert_eq!(load(d).chat_template(), Some("{{ messages }}"));

    // A plain string template, and EOS from generation_config.json alone.
    std::fs::remove_file(d.join("chat_template.jinja")).expect("rm");
    write_json(d, "tokenizer_config.json", &json!({ "chat_template": "S", "add_bos_token": true }));
    write_json(d, "generation_config.json", &json!({ "eos_token_id": TURN }));
    let tok = load(d);
    assert_eq!((tok.chat_template(), tok.eos(), tok.add_bos()), (Some("S"), Some(TURN), true));
    assert_eq!(tok.encode("hello", true, true).expect("encode"), [1, HELLO]);
}

#[test]
fn hf_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let e = Tokenizer::from_hf_dir(d).expect_err("no tokenizer.json");
    assert!(matches!(&e, TokenizerError::Io { path, .. } if path.ends_with("tokenizer.json")), "{e}");
    std::fs::write(d.join("tokenizer.json"), "{ nope").expect("write");
    assert!(matches!(Tokenizer::from_hf_dir(d), Err(TokenizerError::Config { .. })));
    write_json(d, "tokenizer.json", &json!({ "model": { "type": "BPE" } }));
    assert!(matches!(Tokenizer::from_hf_dir(d), Err(TokenizerError::Config { .. })));

    write_json(d, "tokenizer.json", &spm_json(None));
    std::fs::write(d.join("tokenizer_config.json"), "[").expect("write");
    let e = Tokenizer::from_hf_dir(d).expect_err("bad config");
    assert!(
        matches!(&e, TokenizerError::Config { path, .. } if path.ends_with("tokenizer_config.json")),
        "{e}"
    );
    write_json(d, "tokenizer_config.json", &json!({ "add_eos_token": true }));
    assert!(matches!(Tokenizer::from_hf_dir(d), Err(TokenizerError::Config { .. })));
    std::fs::remove_file(d.join("tokenizer_config.json")).expect("rm");

    // A WordPiece-style decoder is not supported.
    let mut wp = spm_json(None);
    wp["decoder"] = json!({ "type": "WordPiece", "prefix": "##", "cleanup": true });
    wp["normalizer"] = Value::Null;
    write_json(d, "tokenizer.json", &wp);
    assert!(matches!(Tokenizer::from_hf_dir(d), Err(TokenizerError::Unsupported(_))));
}

#[test]
fn ids_without_tokens_are_unused_pads() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_json(dir.path(), "tokenizer.json", &spm_json(Some(200)));
    let tok = load(dir.path());
    assert_eq!(tok.n_vocab(), 278);
    assert_eq!(tok.token_text(200), Some("[PAD200]"));
    assert_eq!(tok.token_type(200), Some(TokenType::Unused));
    assert_eq!(tok.token_to_piece(200), b"");
    assert_eq!(tok.encode("hello", false, true).expect("encode"), [HELLO + 1]);
}

/// A byte-level BPE trained on a few sentences, saved as a Qwen-style folder.
fn byte_level_dir() -> tempfile::TempDir {
    use tokenizers::models::TrainerWrapper;
    use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

    let specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
    let mut trainer = TrainerWrapper::BpeTrainer(
        BpeTrainerBuilder::new()
            .vocab_size(400)
            .min_frequency(1)
            .show_progress(false)
            .special_tokens(specials.iter().map(|s| AddedToken::from(*s, true)).collect())
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build(),
    );
    let mut hf = HfTokenizer::new(BPE::default());
    hf.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    hf.with_decoder(Some(ByteLevel::default()));
    let corpus = [
        "The quick brown fox jumps over the lazy dog.",
        "Hello world! Hello there, world.",
        "Numbers 12345 and symbols #@! are here.",
        "Ünïcödé text: naïve café, 日本語, emoji 🦀.",
    ];
    hf.train(&mut trainer, corpus.iter()).expect("train");
    hf.add_tokens(&[AddedToken::from("<think>", false)]);
    let dir = tempfile::tempdir().expect("tempdir");
    hf.save(dir.path().join("tokenizer.json"), false).expect("save");
    write_json(
        dir.path(),
        "tokenizer_config.json",
        &json!({ "bos_token": null, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                 "chat_template": "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}" }),
    );
    write_json(dir.path(), "generation_config.json", &json!({ "bos_token_id": 0, "eos_token_id": [2, 0] }));
    dir
}

#[test]
fn byte_level_round_trip() {
    let dir = byte_level_dir();
    let tok = load(dir.path());
    assert_eq!(tok.kind(), TokenizerKind::Bpe);
    let [eot, start, end, think] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"]
        .map(|t| tok.token_id(t).expect("special token"));
    assert_eq!((eot, start, end), (0, 1, 2));
    assert_eq!((tok.bos(), tok.eos(), tok.special_ids().pad), (Some(0), Some(end), Some(eot)));
    assert!(!tok.add_bos() && !tok.add_eos());
    assert!(tok.is_eog(end) && tok.is_eog(eot) && !tok.is_eog(start));
    assert_eq!(tok.token_type(think), Some(TokenType::UserDefined));
    assert_eq!(tok.token_type(start), Some(TokenType::Control));
    assert!(tok.chat_template().is_some_and(|t| t.contains("<|im_start|>")));

    for text in [
        "Hello world!",
        "  leading spaces and trailing  ",
        "line\nbreaks\r\n\ttabs",
        "naïve café 日本語 🦀🦀 — unseen ✓ ∑",
        "12345 67890",
        "",
    ] {
        let ids = tok.encode(text, true, false).expect("encode");
        assert_eq!(tok.decode(&ids), text, "{ids:?}");
        // Streaming gives the same text, never half a character.
        let mut s = tok.stream();
        let mut streamed = String::new();
        for &id in &ids {
            streamed += &s.push(&tok, id);
        }
        assert!(!s.has_pending());
        assert_eq!(streamed + &s.flush(), text);
    }
    let ids = tok.encode("<|im_start|>Hello<|im_end|><think>", false, true).expect("encode");
    assert_eq!(ids.first(), Some(&start));
    assert!(ids.contains(&end) && ids.last() == Some(&think));
    assert_eq!(tok.decode(&ids), "<|im_start|>Hello<|im_end|><think>");
    let plain = tok.encode("<|im_start|>Hello", false, false).expect("encode");
    assert!(!plain.contains(&start));
    assert_eq!(tok.decode(&plain), "<|im_start|>Hello");
    let space_hello = tok.encode(" Hello", false, false).expect("encode");
    assert_eq!(tok.token_to_piece(space_hello[0]).first(), Some(&b' '));

    let ex = tok.hf_vocab_export().expect("export");
    assert_eq!((ex.model, ex.pre, ex.add_space_prefix), ("gpt2", Some("gpt-2"), false));
    assert_eq!(ex.merges.len(), tok.n_merges());
    assert!(ex.merges.iter().all(|m| m.split(' ').count() == 2));
    assert_eq!(ex.tokens.len(), tok.n_vocab());
    assert_eq!((ex.token_types[0], ex.token_types[think as usize]), (3, 4));
    assert_eq!(ex.tokens[think as usize], "<think>");
    // The byte-level alphabet is normal tokens with their GPT-2 characters.
    let g = tok.token_id("Ġ").expect("Ġ");
    assert_eq!((ex.tokens[g as usize].as_str(), ex.token_types[g as usize]), ("Ġ", 1));
}

#[test]
fn debug_and_thread_safety() {
    let dir = byte_level_dir();
    let tok = load(dir.path());
    assert!(format!("{tok:?}").contains("HuggingFace"));
    fn check<T: Send + Sync>(_: &T) {}
    check(&tok);
}
