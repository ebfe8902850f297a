//! Unit tests of compile-time validation and end-of-generation tokens in grammars, on the
//! SmolLM2 tokenizer (read from the GGUF's metadata only: no weights are loaded). Together they
//! take about a second.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ConstrainError, Constraint, ConstraintSpec, MAX_SPEC_BYTES, TokenEnv};
use crate::decoder::{Decoder, FinishReason, GenerateParams, Step};
use crate::format::gguf::GgufFile;
use crate::tokenizer::Tokenizer;

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The SmolLM2 tokenizer and its token environment, built once for all tests; `None` (a notice)
/// when the model file is missing, a failure under `CI=true`.
pub(super) fn smol() -> Option<&'static (Tokenizer, Arc<TokenEnv>)> {
    static ENV: OnceLock<Option<(Tokenizer, Arc<TokenEnv>)>> = OnceLock::new();
    ENV.get_or_init(|| {
        let dir = match std::env::var_os("FERROLM_MODEL_DIR") {
            Some(d) if !d.is_empty() => std::path::PathBuf::from(d),
            _ => crate::hub::model_dir().unwrap_or_default(),
        };
        let path = dir.join(SMOLLM2);
        if !path.is_file() {
            let msg = format!("{} not found (set FERROLM_MODEL_DIR)", path.display());
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true" || v == "1"),
                "{msg}; CI=true requires it"
            );
            eprintln!("notice: skipping: {msg}");
            return None;
        }
        let gguf = GgufFile::open(&path).expect("open the GGUF");
        let tokenizer = Tokenizer::from_gguf(&gguf).expect("tokenizer");
        let env = TokenEnv::new(&tokenizer).expect("token env");
        Some((tokenizer, env))
    })
    .as_ref()
}

/// Compiles `spec`, returning the `Grammar` error's message (any other outcome fails the test)
/// and how long compiling took.
fn grammar_error(env: &Arc<TokenEnv>, spec: &ConstraintSpec) -> (String, Duration) {
    let t0 = Instant::now();
    let r = Constraint::new(env, spec);
    let dt = t0.elapsed();
    match r {
        Err(crate::Error::Constrain(ConstrainError::Grammar(m))) => (m, dt),
        Err(e) => panic!("{spec:?}: expected an invalid-constraint error, got {e}"),
        Ok(_) => panic!("{spec:?}: compiled"),
    }
}

fn schema(v: Value) -> ConstraintSpec {
    ConstraintSpec::JsonSchema(v)
}

/// The issue's reports: each of these compiled, then failed at sampling (a 500).
#[test]
fn unmatchable_constraints_fail_at_compile_time() {
    let Some((_, env)) = smol() else { return };
    let cases = [
        schema(json!({"$ref": "#"})),
        schema(
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        ),
        schema(json!({"type": "object", "allOf": [{"$ref": "#"}]})),
        schema(json!({"anyOf": [{"$ref": "#"}, {"$ref": "#"}]})),
        ConstraintSpec::Lark("start: start".into()),
        ConstraintSpec::Lark("start: a\na: a \"x\"".into()),
        ConstraintSpec::Lark("start: \"a\"{1000000000}".into()),
        ConstraintSpec::Lark("start: /a{1000000000}/".into()),
        ConstraintSpec::Regex("a{1000000000}".into()),
    ];
    for spec in &cases {
        let (msg, dt) = grammar_error(env, spec);
        eprintln!("{spec:?}: {msg} ({dt:.1?})");
        assert!(!msg.is_empty());
    }
}

/// A 1 MB literal is refused by its size, before llguidance parses it.
#[test]
fn a_one_megabyte_literal_is_refused_by_size() {
    let Some((_, env)) = smol() else { return };
    let lit = "a".repeat(1_000_000);
    for spec in [
        ConstraintSpec::Lark(format!("start: \"{lit}\"")),
        ConstraintSpec::Regex(lit.clone()),
        schema(json!({"const": lit})),
    ] {
        let (msg, dt) = grammar_error(env, &spec);
        eprintln!("1 MB literal refused in {dt:.1?}");
        assert!(msg.contains(&format!("the limit is {MAX_SPEC_BYTES} bytes")), "{msg}");
    }
}

/// Constraints that ask for a lot but are well-formed compile (their output is cut by
/// `max_tokens`), and their masks stay computable for a few steps.
#[test]
fn huge_counts_that_can_be_matched_compile() {
    let Some((tok, env)) = smol() else { return };
    for spec in [
        schema(json!({"type": "array", "items": {"type": "integer"}, "minItems": 1_000_000_000})),
        schema(json!({"type": "string", "maxLength": 1_000_000_000})),
    ] {
        let t0 = Instant::now();
        let mut c = Constraint::new(env, &spec).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
        eprintln!("{spec:?} compiled in {:.1?}", t0.elapsed());
        for _ in 0..4 {
            let mut logits = vec![0.0f32; tok.n_vocab()];
            c.mask_logits(&mut logits).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            let Some(t) = (0..logits.len()).find(|&i| logits[i] == 0.0 && !env.is_eog(i as u32)) else {
                break;
            };
            c.accept(t as u32).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
        }
    }
}

/// A source at the size limit still compiles.
#[test]
fn a_grammar_at_the_size_limit_compiles() {
    let Some((_, env)) = smol() else { return };
    let lit = "ab ".repeat((MAX_SPEC_BYTES - 16) / 3);
    let t0 = Instant::now();
    Constraint::new(env, &ConstraintSpec::Lark(format!("start: \"{lit}\""))).expect("compiles");
    eprintln!("{} byte literal compiled in {:.1?}", lit.len(), t0.elapsed());
    let props: serde_json::Map<String, Value> =
        (0..500).map(|i| (format!("field_{i}"), json!({"type": "integer", "minimum": 0}))).collect();
    let big = json!({"type": "object", "properties": props, "required": ["field_0"]});
    assert!(serde_json::to_string(&big).expect("json").len() <= MAX_SPEC_BYTES);
    let t0 = Instant::now();
    Constraint::new(env, &schema(big)).expect("compiles");
    eprintln!("500-property schema compiled in {:.1?}", t0.elapsed());
}

/// Runs a decoder over uniform logits (greedy: the lowest allowed id) until it ends.
fn decode(tok: &Tokenizer, env: &Arc<TokenEnv>, grammar: &str) -> (String, FinishReason) {
    let c = Constraint::new(env, &ConstraintSpec::Lark(grammar.into())).expect("compiles");
    let mut d = Decoder::with_constraint(tok, &GenerateParams::greedy(16), Some(c)).expect("decoder");
    let logits = vec![0.0f32; tok.n_vocab()];
    let mut text = String::new();
    for _ in 0..16 {
        match d.step(tok, &logits).expect("step") {
            Step::Continue(s) => text += &s.text,
            Step::Last(s, f) => return (text + &s.text + &d.finish(), f),
            Step::End(f) => return (text + &d.finish(), f),
        }
    }
    panic!("{grammar}: no end after 16 tokens ({text:?})");
}

/// A grammar that names an end-of-generation token lets the model emit it, and the generation
/// ends there (finish reason `stop`), without the token's text.
#[test]
fn grammars_naming_an_end_of_generation_token_end_there() {
    let Some((tok, env)) = smol() else { return };
    let im_end = tok.encode("<|im_end|>", false, true).expect("encode");
    assert!(im_end.len() == 1 && env.is_eog(im_end[0]), "{im_end:?}");
    for (grammar, want) in [
        ("start: <|im_end|>", ""),
        ("start: \"Hi\" <|im_end|>", "Hi"),
        ("start: (\"a\" | \"b\") <|im_end|>", "a"),
        ("start: \"x\" | <|im_end|>", ""),
    ] {
        let (text, finish) = decode(tok, env, grammar);
        assert_eq!((text.as_str(), finish), (want, FinishReason::EndOfGeneration), "{grammar}");
        assert_eq!(finish.openai_reason(), "stop");
    }
}

/// Counted repetitions over the limit are refused before llguidance sees them (it expands
/// `a{100000}` into a 100 KB literal, seconds of work); escaped braces and JSON are not counts.
#[test]
fn repetition_counts_are_bounded() {
    use super::max_repeat_count;
    assert_eq!(max_repeat_count("a{3}b{2,7}c{5,}"), 7);
    assert_eq!(max_repeat_count("start: \"a\"{1000000000}"), 1_000_000_000);
    assert_eq!(max_repeat_count("x{99999999999999999999999}"), u64::MAX);
    assert_eq!(max_repeat_count(r#"\{123456} {a} {} {1,2,3} %json {"x": 1}"#), 0);
    let Some((_, env)) = smol() else { return };
    for spec in [
        ConstraintSpec::Lark("start: /a{100000}/".into()),
        ConstraintSpec::Regex("(ab){5,4097}".into()),
        schema(json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a{100000}$"}}})),
    ] {
        let (msg, _) = grammar_error(env, &spec);
        assert!(msg.contains(&format!("over the limit of {}", super::MAX_REPEAT)), "{msg}");
    }
    Constraint::new(env, &ConstraintSpec::Regex("[a-z]{1,4096}".into())).expect("at the limit");
}
