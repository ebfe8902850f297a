//! Unit tests on small hand-built vocabularies.

use super::*;
use ferrolm_format::gguf::GgufFile;

/// A metadata value for the test GGUF writer.
enum V {
    Str(&'static str),
    U32(u32),
    Bool(bool),
    Strs(Vec<String>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// Writes a tensor-less GGUF v3 image with the given metadata.
fn gguf(kvs: &[(&str, V)]) -> GgufFile {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut out, k);
        match v {
            V::Str(s) => {
                out.extend(8u32.to_le_bytes());
                put_str(&mut out, s);
            }
            V::U32(x) => {
                out.extend(4u32.to_le_bytes());
                out.extend(x.to_le_bytes());
            }
            V::Bool(b) => {
                out.extend(7u32.to_le_bytes());
                out.push(*b as u8);
            }
            V::Strs(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for s in items {
                    put_str(&mut out, s);
                }
            }
            V::F32s(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(6u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for x in items {
                    out.extend(x.to_le_bytes());
                }
            }
            V::I32s(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(5u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for x in items {
                    out.extend(x.to_le_bytes());
                }
            }
        }
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    GgufFile::from_bytes(out).expect("test GGUF parses")
}

/// A tiny SentencePiece vocabulary: specials, all 256 byte tokens, a few pieces.
fn spm_parts() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into(), "<|im_end|>".into()];
    let mut types = vec![2, 3, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for (t, _) in [("▁", 0), ("h", 0), ("i", 0), ("▁h", 0), ("hi", 0), ("▁hi", 0), ("<tool>", 0)] {
        tokens.push(t.to_string());
        types.push(if t == "<tool>" { 4 } else { 1 });
    }
    let scores = (0..tokens.len()).map(|i| i as f32 * 0.01).collect();
    (tokens, scores, types)
}

fn spm_file(extra: Vec<(&'static str, V)>) -> GgufFile {
    let (tokens, scores, types) = spm_parts();
    let mut kvs = vec![
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(tokens)),
        ("tokenizer.ggml.scores", V::F32s(scores)),
        ("tokenizer.ggml.token_type", V::I32s(types)),
    ];
    kvs.extend(extra);
    gguf(&kvs)
}

fn id(tok: &Tokenizer, text: &str) -> u32 {
    tok.token_id(text).expect("token exists")
}

#[test]
fn spm_merges_and_byte_fallback() {
    let tok = Tokenizer::from_gguf(&spm_file(vec![])).expect("tokenizer");
    assert_eq!(tok.kind(), TokenizerKind::Spm);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(tok.add_bos() && !tok.add_eos());
    let ids = tok.encode("hi é", true, false).expect("encode");
    let byte = |b: u8| id(&tok, &format!("<0x{b:02X}>"));
    assert_eq!(ids, [1, id(&tok, "▁hi"), id(&tok, "▁"), byte(0xC3), byte(0xA9)]);
    assert_eq!(tok.decode(&ids), "<s> hi é");
    assert_eq!(tok.token_to_piece(byte(0xC3)), [0xC3]);
}

#[test]
fn stream_decoder_holds_split_character() {
    let tok = Tokenizer::from_gguf(&spm_file(vec![])).expect("tokenizer");
    let ids = tok.encode("hi é", false, false).expect("encode");
    let mut s = tok.stream();
    let pieces: Vec<String> = ids.iter().map(|&i| s.push(&tok, i)).collect();
    assert_eq!(pieces, [" hi", " ", "", "é"]);
    assert_eq!(s.flush(), "");
}

#[test]
fn special_tokens_partition() {
    let tok = Tokenizer::from_gguf(&spm_file(vec![])).expect("tokenizer");
    let end = id(&tok, "<|im_end|>");
    // Control tokens only with parse_special; user-defined ones always.
    let parsed = tok.encode("hi<|im_end|>", false, true).expect("encode");
    assert_eq!(parsed, [id(&tok, "▁hi"), end]);
    let plain = tok.encode("hi<|im_end|>", false, false).expect("encode");
    assert!(!plain.contains(&end));
    let tool = tok.encode("<tool>hi", false, false).expect("encode");
    assert_eq!(tool, [id(&tok, "<tool>"), id(&tok, "▁hi")]);
    assert!(tok.is_eog(end) && tok.is_eog(2) && !tok.is_eog(1));
    assert_eq!(tok.token_to_piece(end), b"<|im_end|>");
}

#[test]
fn add_space_prefix_flag() {
    let tok = Tokenizer::from_gguf(&spm_file(vec![("tokenizer.ggml.add_space_prefix", V::Bool(false))]))
        .expect("tokenizer");
    assert_eq!(tok.encode("hi", false, false).expect("encode"), [id(&tok, "hi")]);
}

#[test]
fn malformed_vocabularies_are_errors() {
    let (tokens, scores, types) = spm_parts();
    let short = gguf(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(tokens.clone())),
        ("tokenizer.ggml.scores", V::F32s(scores[1..].to_vec())),
    ]);
    assert!(matches!(Tokenizer::from_gguf(&short), Err(TokenizerError::InvalidVocab(_))));
    let bad_types = gguf(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(tokens.clone())),
        ("tokenizer.ggml.token_type", V::I32s(types[..3].to_vec())),
    ]);
    assert!(matches!(Tokenizer::from_gguf(&bad_types), Err(TokenizerError::InvalidVocab(_))));
    let bad_bos = spm_file(vec![("tokenizer.ggml.bos_token_id", V::U32(1_000_000))]);
    assert!(matches!(Tokenizer::from_gguf(&bad_bos), Err(TokenizerError::InvalidVocab(_))));
    let mut dup = tokens.clone();
    dup[5] = dup[6].clone();
    let dup = gguf(&[("tokenizer.ggml.model", V::Str("llama")), ("tokenizer.ggml.tokens", V::Strs(dup))]);
    assert!(matches!(Tokenizer::from_gguf(&dup), Err(TokenizerError::InvalidVocab(_))));
    let unknown =
        gguf(&[("tokenizer.ggml.model", V::Str("rwkv")), ("tokenizer.ggml.tokens", V::Strs(tokens))]);
    assert!(matches!(Tokenizer::from_gguf(&unknown), Err(TokenizerError::Unsupported(_))));
    let missing = gguf(&[("tokenizer.ggml.model", V::Str("llama"))]);
    assert!(matches!(Tokenizer::from_gguf(&missing), Err(TokenizerError::Metadata(_))));
}

fn bpe_file(merges: Vec<String>, pre: &'static str) -> GgufFile {
    let table = unicode::byte_to_char_table();
    let mut tokens: Vec<String> = table.iter().map(|c| c.to_string()).collect();
    tokens.extend(["Ġh", "Ġhi", "hi", "<|endoftext|>"].map(String::from));
    gguf(&[
        ("tokenizer.ggml.model", V::Str("gpt2")),
        ("tokenizer.ggml.pre", V::Str(pre)),
        ("tokenizer.ggml.tokens", V::Strs(tokens)),
        ("tokenizer.ggml.merges", V::Strs(merges)),
        ("tokenizer.ggml.eos_token_id", V::U32(259)),
    ])
}

#[test]
fn bpe_merges_by_rank() {
    let merges = vec!["Ġ h".to_string(), "Ġh i".into(), "h i".into()];
    let tok = Tokenizer::from_gguf(&bpe_file(merges, "gpt-2")).expect("tokenizer");
    assert_eq!(tok.kind(), TokenizerKind::Bpe);
    assert_eq!(tok.pre_type(), Some(PreType::Gpt2));
    let ids = tok.encode("hi hi!", false, false).expect("encode");
    assert_eq!(ids, [id(&tok, "hi"), id(&tok, "Ġhi"), id(&tok, "!")]);
    assert_eq!(tok.decode(&ids), "hi hi!");
    assert_eq!(tok.token_to_piece(id(&tok, "Ġ")), b" ");
    // "<|endoftext|>" is end-of-generation (by text, and as EOS).
    assert!(tok.is_eog(259));
    let euro = tok.encode("€", false, false).expect("encode");
    assert_eq!(euro.len(), 3);
    let mut s = tok.stream();
    assert_eq!(s.push(&tok, euro[0]), "");
    assert_eq!(s.push(&tok, euro[1]), "");
    assert_eq!(s.push(&tok, euro[2]), "€");
}

#[test]
fn bad_merges_and_pre_tokenizers_are_errors() {
    let bad = Tokenizer::from_gguf(&bpe_file(vec!["nospace".into()], "gpt-2"));
    assert!(matches!(bad, Err(TokenizerError::InvalidVocab(_))));
    let pre = Tokenizer::from_gguf(&bpe_file(vec![], "no-such-pre"));
    assert!(matches!(pre, Err(TokenizerError::Unsupported(_))));
}

#[test]
fn tokenizer_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Tokenizer>();
    check::<StreamDecoder>();
}

#[test]
fn gguf_chat_template_and_backend() {
    let tok = Tokenizer::from_gguf(&spm_file(vec![("tokenizer.chat_template", V::Str("{{ x }}"))]))
        .expect("tokenizer");
    assert_eq!(tok.chat_template(), Some("{{ x }}"));
    assert_eq!(tok.backend(), TokenizerBackend::Gguf);
    assert!(matches!(tok.hf_vocab_export(), Err(TokenizerError::Unsupported(_))));
    let tok = Tokenizer::from_gguf(&spm_file(vec![])).expect("tokenizer");
    assert_eq!(tok.chat_template(), None);
}
