//! Constrained output with the real SmolLM2: sampled JSON always validates against its schema
//! (checked with the independent `jsonschema` crate), Lark and regex output always matches, the
//! mask never lets a forbidden token through, and bad grammars or tokens are errors.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolm::batch::Batch;
use ferrolm::constrain::{ConstrainError, Constraint, ConstraintSpec, TokenEnv};
use ferrolm::kv::KvCache;
use ferrolm::model::Model;
use ferrolm::sampling::{Sampler, SamplerParams};
use ferrolm::session::{FinishReason, GenerateParams, Session, SessionOptions};
use ferrolm::{Error, Result};
use serde_json::{Value, json};

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn load() -> Option<(Model, Arc<TokenEnv>)> {
    let path = common::require_model(SMOLLM2)?;
    let model = Model::load(path).unwrap();
    let env = TokenEnv::new(model.tokenizer()).unwrap();
    Some((model, env))
}

fn chat_prompt(model: &Model, user: &str) -> Vec<u32> {
    let text = format!(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    model.tokenizer().encode(&text, true, true).unwrap()
}

/// One constrained generation.
struct Output {
    tokens: Vec<u32>,
    text: String,
    /// Ended by an end-of-generation token or a complete grammar (not by the token limit).
    finished: bool,
    mask_times: Vec<Duration>,
}

/// Samples up to `max_tokens` tokens after `prompt` in sequence 0 of `kv` (cleared first), masking
/// each step's logits with `c`.
fn generate(
    model: &Model,
    kv: &mut KvCache,
    prompt: &[u32],
    c: &mut Constraint,
    params: SamplerParams,
    max_tokens: usize,
) -> Result<Output> {
    kv.remove_seq(0);
    let mut sampler = Sampler::new(params, model.tokenizer())?;
    let mut logits = model.forward(&Batch::from_prompt(0, 0, prompt), kv)?.last().unwrap().to_vec();
    let mut pos = prompt.len() as u32;
    let mut out = Output { tokens: Vec::new(), text: String::new(), finished: false, mask_times: Vec::new() };
    while out.tokens.len() < max_tokens {
        let t0 = Instant::now();
        c.mask_logits(&mut logits)?;
        out.mask_times.push(t0.elapsed());
        let tok = sampler.sample(&logits);
        c.accept(tok)?;
        if model.tokenizer().is_eog(tok) {
            out.finished = true;
            break;
        }
        out.tokens.push(tok);
        if c.is_finished() {
            out.finished = true;
            break;
        }
        let l = model.forward(&Batch::from_prompt(0, pos, &[tok]), kv)?;
        logits.clear();
        logits.extend_from_slice(l.last().unwrap());
        pos += 1;
    }
    out.text = model.tokenizer().decode(&out.tokens);
    Ok(out)
}

/// Sampling with temperature; `min_p` keeps masked (-inf) tokens out of the candidate list.
fn sampling(seed: u64) -> SamplerParams {
    let temperature = [0.8, 0.9, 1.0][seed as usize % 3];
    SamplerParams {
        temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.01,
        seed: Some(seed),
        ..SamplerParams::default()
    }
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}
        },
        "required": ["name", "age", "color", "tags"],
        "additionalProperties": false
    })
}

fn stats(times: &[Duration]) -> (Duration, Duration, Duration) {
    let mut t = times.to_vec();
    t.sort();
    let mean = t.iter().sum::<Duration>() / t.len().max(1) as u32;
    (mean, t[t.len() / 2], t[t.len() - 1])
}

/// The acceptance test: through the `Session` API users call, with llama.cpp's default sampler
/// chain (top-k 40, top-p 0.95, min-p 0.05) at temperatures 0.8–1.0, 100 seeds.
#[test]
fn json_schema_sampled_100_of_100() {
    let Some((model, env)) = load() else { return };
    let schema = person_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let prompt = chat_prompt(&model, "Describe a fictional person as JSON with name, age, color and tags.");
    let mut session =
        Session::new(&model, SessionOptions { n_ctx: prompt.len() + 160, ..SessionOptions::default() })
            .unwrap();
    let mut failures = Vec::new();
    let mut n_tokens = 0;
    let t0 = Instant::now();
    for seed in 0..100u64 {
        let params = GenerateParams {
            max_tokens: Some(120),
            sampler: SamplerParams {
                temperature: [0.8, 0.9, 1.0][seed as usize % 3],
                seed: Some(seed),
                ..SamplerParams::default()
            },
            constraint: Some(ConstraintSpec::JsonSchema(schema.clone())),
            ..GenerateParams::default()
        };
        let out = session.generate_tokens(&prompt, &params).unwrap();
        n_tokens += out.tokens.len();
        if seed < 3 {
            eprintln!("seed {seed}: {}", out.text);
        }
        let finished = out.stats.finish == FinishReason::EndOfGeneration;
        let ok = finished && serde_json::from_str::<Value>(&out.text).is_ok_and(|v| validator.is_valid(&v));
        if !ok {
            failures.push(format!("seed {seed} ({:?}): {:?}", out.stats.finish, out.text));
        }
    }
    eprintln!("100 generations, {n_tokens} tokens in {:.1?} (vocabulary {})", t0.elapsed(), env.n_vocab());
    assert!(failures.is_empty(), "{} of 100 invalid:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn json_object_is_an_object() {
    let Some((model, env)) = load() else { return };
    let prompt = chat_prompt(&model, "Give a JSON object with the keys a and b.");
    let mut kv = model.new_kv_cache(prompt.len() + 200);
    for seed in 0..3 {
        let mut c = Constraint::new(&env, &ConstraintSpec::JsonObject).unwrap();
        let out = generate(&model, &mut kv, &prompt, &mut c, sampling(seed), 150).unwrap();
        // An unbounded object may hit the token limit; the text so far must then be a prefix.
        assert!(out.text.starts_with('{'), "{:?}", out.text);
        if out.finished {
            let v: Value = serde_json::from_str(&out.text).unwrap();
            assert!(v.is_object(), "{:?}", out.text);
        }
    }
}

#[test]
fn lark_grammar_output_parses() {
    let Some((model, env)) = load() else { return };
    let grammar = r#"
start: "Answer: " item ("; " item){0,2} "."
item: NAME "=" NUMBER
NAME: /[a-z]{1,8}/
NUMBER: /-?[0-9]{1,4}/
"#;
    let check =
        fancy_regex::Regex::new(r"^Answer: [a-z]{1,8}=-?[0-9]{1,4}(; [a-z]{1,8}=-?[0-9]{1,4}){0,2}\.$")
            .unwrap();
    let prompt = chat_prompt(&model, "List a few variables with their values.");
    let mut kv = model.new_kv_cache(prompt.len() + 80);
    for seed in 0..10 {
        let mut c = Constraint::new(&env, &ConstraintSpec::Lark(grammar.into())).unwrap();
        let out = generate(&model, &mut kv, &prompt, &mut c, sampling(seed), 60).unwrap();
        assert!(out.finished, "{:?}", out.text);
        assert!(check.is_match(&out.text).unwrap(), "seed {seed}: {:?}", out.text);
    }
}

#[test]
fn regex_output_matches() {
    let Some((model, env)) = load() else { return };
    let rx = r"(Mon|Tue|Wed) [0-9]{2}:[0-9]{2} (am|pm)";
    let check = fancy_regex::Regex::new(&format!("^(?:{rx})$")).unwrap();
    let prompt = chat_prompt(&model, "When shall we meet?");
    let mut kv = model.new_kv_cache(prompt.len() + 40);
    for seed in 0..10 {
        let mut c = Constraint::new(&env, &ConstraintSpec::Regex(rx.into())).unwrap();
        let out = generate(&model, &mut kv, &prompt, &mut c, sampling(seed), 30).unwrap();
        assert!(out.finished, "{:?}", out.text);
        assert!(check.is_match(&out.text).unwrap(), "seed {seed}: {:?}", out.text);
    }
}

fn assert_grammar_error(env: &Arc<TokenEnv>, spec: ConstraintSpec) {
    match Constraint::new(env, &spec) {
        Err(Error::Constrain(ConstrainError::Grammar(msg))) => assert!(!msg.is_empty()),
        other => panic!("{spec:?}: expected a grammar error, got {other:?}"),
    }
}

#[test]
fn malformed_specs_are_errors() {
    let Some((_model, env)) = load() else { return };
    assert_grammar_error(&env, ConstraintSpec::JsonSchema(json!({"type": "no-such-type"})));
    assert_grammar_error(
        &env,
        ConstraintSpec::JsonSchema(json!({"type": "string", "minLength": 5, "maxLength": 2})),
    );
    assert_grammar_error(&env, ConstraintSpec::JsonSchema(json!({"$ref": "#/$defs/missing"})));
    assert_grammar_error(&env, ConstraintSpec::Lark("start: (\"a\"".into()));
    assert_grammar_error(&env, ConstraintSpec::Lark("start: undefined_rule".into()));
    assert_grammar_error(&env, ConstraintSpec::Regex("[a-".into()));
}

/// The hardening issue's constraint mistakes: each used to compile, then fail at the first mask
/// (a 500 from the server, or an error event after a 200 when streamed).
#[test]
fn unmatchable_or_oversized_specs_fail_at_compile_time() {
    let Some((_model, env)) = load() else { return };
    let schema = |v: Value| ConstraintSpec::JsonSchema(v);
    // Recursion with no way out.
    assert_grammar_error(&env, schema(json!({"$ref": "#"})));
    assert_grammar_error(
        &env,
        schema(
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        ),
    );
    assert_grammar_error(&env, schema(json!({"type": "object", "allOf": [{"$ref": "#"}]})));
    assert_grammar_error(&env, ConstraintSpec::Lark("start: start".into()));
    // Past the parser's limits.
    assert_grammar_error(&env, ConstraintSpec::Lark("start: \"a\"{1000000000}".into()));
    // Past the size limit: refused before any parsing (this took over a second).
    let t0 = std::time::Instant::now();
    let big = format!("start: \"{}\"", "a".repeat(1 << 20));
    match Constraint::new(&env, &ConstraintSpec::Lark(big)) {
        Err(Error::Constrain(ConstrainError::Grammar(msg))) => assert!(msg.contains("limit"), "{msg}"),
        other => panic!("a 1 MiB grammar: {other:?}"),
    }
    eprintln!("1 MiB grammar refused in {:.1?}", t0.elapsed());
    // A grammar at the size limit still compiles.
    let n = ferrolm::constrain::MAX_SPEC_BYTES - 16;
    assert!(Constraint::new(&env, &ConstraintSpec::Lark(format!("start: \"{}\"", "a".repeat(n)))).is_ok());
}

/// Deep grammars and schemas, up to the size limit: each compiles or is a grammar error. They
/// used to overflow the caller's stack and abort the process (a chain of 3000 Lark rules did on
/// the main thread's 8 MiB; a server compiles on a tokio worker's 2 MiB, as here; the chain at
/// the size limit has some 1900 rules).
#[test]
fn deep_specs_do_not_overflow_the_callers_stack() {
    let Some((_model, env)) = load() else { return };
    let max = ferrolm::constrain::MAX_SPEC_BYTES;
    let mut chain = String::from("start: r0\n");
    let mut n = 0;
    while chain.len() + 40 < max {
        chain += &format!("r{n}: \"x\" r{}\n", n + 1);
        n += 1;
    }
    chain += &format!("r{n}: \"y\"\n");
    let depth = (max - 16) / 2;
    let parens = format!("start: {}\"a\"{}", "(".repeat(depth), ")".repeat(depth));
    let regex = format!("{}a{}", "(".repeat(depth), ")".repeat(depth));
    let mut schema = json!({"type": "integer"});
    while serde_json::to_string(&schema).unwrap().len() + 40 < max {
        schema = json!({"type": "array", "items": schema});
    }
    let mut defs = serde_json::Map::new();
    for i in 0..500 {
        defs.insert(
            format!("d{i}"),
            json!({"type": "array", "items": {"$ref": format!("#/$defs/d{}", i + 1)}}),
        );
    }
    defs.insert("d500".into(), json!({"type": "integer"}));
    let specs = [
        ConstraintSpec::Lark(chain),
        ConstraintSpec::Lark(parens),
        ConstraintSpec::Regex(regex),
        ConstraintSpec::JsonSchema(schema),
        ConstraintSpec::JsonSchema(json!({"$defs": defs, "$ref": "#/$defs/d0"})),
    ];
    let small_stack = std::thread::Builder::new().stack_size(2 << 20);
    let results = small_stack
        .spawn(move || specs.iter().map(|s| Constraint::new(&env, s).map(|_| ())).collect::<Vec<_>>())
        .unwrap()
        .join()
        .unwrap();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(()) | Err(Error::Constrain(ConstrainError::Grammar(_))) => {}
            Err(e) => panic!("spec {i}: {e}"),
        }
    }
}

/// A grammar may name an end-of-generation token: it is allowed where the grammar puts it, and
/// accepting it ends the generation.
#[test]
fn grammars_may_name_the_end_of_generation_token() {
    let Some((model, env)) = load() else { return };
    let im_end = model.tokenizer().encode("<|im_end|>", false, true).unwrap();
    assert_eq!(im_end.len(), 1, "{im_end:?}");
    let eog = im_end[0];
    assert!(env.is_eog(eog));
    let mut c = Constraint::new(&env, &ConstraintSpec::Lark("start: <|im_end|>".into())).unwrap();
    assert_eq!(allowed(&mut c, model.tokenizer().n_vocab()), vec![eog]);
    if let Err(e) = c.accept(eog) {
        panic!("{e}");
    }
    assert!(c.is_finished());
    let mut c = Constraint::new(&env, &ConstraintSpec::Lark("start: \"yes\" <|im_end|>".into())).unwrap();
    let yes = model.tokenizer().encode("yes", false, false).unwrap();
    for &t in &yes {
        assert!(c.accept(eog).is_err(), "too early");
        c.accept(t).unwrap();
    }
    assert!(allowed(&mut c, model.tokenizer().n_vocab()).contains(&eog));
    c.accept(eog).unwrap();
    assert!(c.is_finished());
}

/// Ids of the tokens whose logits survive the mask.
fn allowed(c: &mut Constraint, len: usize) -> Vec<u32> {
    let mut logits = vec![0.5f32; len];
    c.mask_logits(&mut logits).unwrap();
    for &l in &logits {
        assert!(l == 0.5 || l == f32::NEG_INFINITY);
    }
    (0..len as u32).filter(|&i| logits[i as usize] == 0.5).collect()
}

#[test]
fn mask_lets_no_forbidden_token_through() {
    let Some((model, env)) = load() else { return };
    let tk = model.tokenizer();
    let n = env.n_vocab();
    let eog: Vec<u32> = tk.eog_ids().collect();
    assert!(eog.len() >= 2, "SmolLM2 has <|im_end|> and <|endoftext|>: {eog:?}");
    let digits_only = |ids: &[u32], max_len: usize| {
        for &id in ids {
            let p = tk.token_to_piece(id);
            assert!(!p.is_empty() && p.len() <= max_len, "token {id} {p:?}");
            assert!(p.iter().all(u8::is_ascii_digit), "token {id} {p:?}");
        }
    };
    let one_digit: Vec<u32> =
        (0..n as u32).filter(|&i| matches!(&tk.token_to_piece(i)[..], [b'0'..=b'9'])).collect();
    assert_eq!(one_digit.len(), 10);

    let mut c = Constraint::new(&env, &ConstraintSpec::Regex("[0-9]{3}".into())).unwrap();
    // Padding past the vocabulary is masked too.
    let ids = allowed(&mut c, n + 7);
    digits_only(&ids, 3);
    assert!(one_digit.iter().all(|d| ids.contains(d)), "every digit is allowed");
    c.accept(one_digit[1]).unwrap();
    c.accept(one_digit[2]).unwrap();
    let ids = allowed(&mut c, n);
    assert_eq!(ids, one_digit, "one more digit, nothing else");
    assert!(!c.is_finished());
    c.accept(one_digit[3]).unwrap();
    assert!(c.is_finished());
    assert_eq!(allowed(&mut c, n), eog, "only end-of-generation after a complete match");

    // `[0-9]{1,3}` may stop after one digit: every EOG token is allowed then, and accepting any ends it.
    for &end in &eog {
        let mut c = Constraint::new(&env, &ConstraintSpec::Regex("[0-9]{1,3}".into())).unwrap();
        c.accept(one_digit[7]).unwrap();
        let ids = allowed(&mut c, n);
        assert!(eog.iter().all(|e| ids.contains(e)), "all EOG tokens allowed: {eog:?}");
        let text: Vec<u32> = ids.iter().copied().filter(|i| !eog.contains(i)).collect();
        digits_only(&text, 2);
        c.accept(end).unwrap();
        assert!(c.is_finished());
    }

    // Too few logits is an error.
    let mut short = vec![0.0f32; n - 1];
    assert!(matches!(c.mask_logits(&mut short), Err(Error::Constrain(ConstrainError::LogitsLength { .. }))));
}

#[test]
fn forbidden_tokens_are_rejected_and_leave_the_state_unchanged() {
    let Some((model, env)) = load() else { return };
    let tk = model.tokenizer();
    let single = |s: &str| {
        let ids = tk.encode(s, false, false).unwrap();
        assert_eq!(ids.len(), 1, "{s:?} is one token");
        ids[0]
    };
    let mut c = Constraint::new(&env, &ConstraintSpec::JsonSchema(json!({"type": "boolean"}))).unwrap();
    let not_allowed =
        |r: Result<()>| matches!(r, Err(Error::Constrain(ConstrainError::TokenNotAllowed { .. })));
    assert!(not_allowed(c.accept(single("hello"))));
    let im_end = tk.token_id("<|im_end|>").unwrap();
    assert!(not_allowed(c.accept(im_end)), "EOG before the value is complete");
    assert!(not_allowed(c.accept(env.n_vocab() as u32)), "outside the vocabulary");
    // The rejections left the parser where it was.
    c.accept(single("true")).unwrap();
    assert!(c.is_finished());
    assert!(not_allowed(c.accept(single("true"))), "nothing but EOG after a complete value");
    c.accept(im_end).unwrap();
    assert!(not_allowed(c.accept(im_end)), "generation already ended");

    // A control token is never produced as text by a text grammar.
    let im_start = tk.token_id("<|im_start|>").unwrap();
    let mut c = Constraint::new(&env, &ConstraintSpec::Regex(".{0,20}".into())).unwrap();
    assert!(!allowed(&mut c, env.n_vocab()).contains(&im_start));
    assert!(not_allowed(c.accept(im_start)));
}

#[test]
fn smollm2_tokenizes_canonically() {
    let Some((_model, env)) = load() else { return };
    assert!(env.canonical_tokenization());
}

/// A SentencePiece vocabulary (262k tokens, several EOG tokens) works too.
#[test]
fn gemma3_regex_output_matches() {
    let Some(path) = common::require_model("gemma-3-270m-q4_k_m.gguf") else { return };
    let model = Model::load(path).unwrap();
    let t0 = Instant::now();
    let env = TokenEnv::new(model.tokenizer()).unwrap();
    eprintln!("gemma-3 TokenEnv::new ({} tokens): {:.1?}", env.n_vocab(), t0.elapsed());
    let rx = r"[A-Z][a-z]{2,9} (is|was) [0-9]{1,3}";
    let check = fancy_regex::Regex::new(&format!("^(?:{rx})$")).unwrap();
    let text = "<start_of_turn>user\nName a person and their age.<end_of_turn>\n<start_of_turn>model\n";
    let prompt = model.tokenizer().encode(text, true, true).unwrap();
    let mut kv = model.new_kv_cache(prompt.len() + 30);
    for seed in 0..3 {
        let mut c = Constraint::new(&env, &ConstraintSpec::Regex(rx.into())).unwrap();
        let out = generate(&model, &mut kv, &prompt, &mut c, sampling(seed), 24).unwrap();
        let (mean, _, max) = stats(&out.mask_times);
        eprintln!("gemma-3 seed {seed}: {:?}; mask mean {mean:.2?}, max {max:.2?}", out.text);
        assert!(out.finished, "{:?}", out.text);
        assert!(check.is_match(&out.text).unwrap(), "seed {seed}: {:?}", out.text);
    }
}

#[test]
#[ignore = "timing report: cargo test --test constrained -- --ignored --nocapture"]
fn mask_timing_report() {
    let Some((model, env)) = load() else { return };
    let t0 = Instant::now();
    let _ = TokenEnv::new(model.tokenizer()).unwrap();
    eprintln!("TokenEnv::new: {:.1?}", t0.elapsed());
    let t0 = Instant::now();
    let mut c = Constraint::new(&env, &ConstraintSpec::JsonSchema(person_schema())).unwrap();
    eprintln!("Constraint::new (schema): {:.2?}", t0.elapsed());
    let prompt = chat_prompt(&model, "Describe a fictional person as JSON.");
    let mut kv = model.new_kv_cache(prompt.len() + 160);
    let out = generate(&model, &mut kv, &prompt, &mut c, sampling(7), 120).unwrap();
    let (mean, median, max) = stats(&out.mask_times);
    eprintln!("{} masks: mean {mean:.2?}, median {median:.2?}, max {max:.2?}", out.mask_times.len());
}
