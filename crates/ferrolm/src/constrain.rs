//! Constrained output: the sampled text must match a JSON schema, a Lark grammar or a regex.
//!
//! Built on [llguidance](https://github.com/guidance-ai/llguidance): a [`TokenEnv`] holds the
//! vocabulary's token trie (once per model); a [`Constraint`] is one generation's parser state.
//! Each step masks the logits of the tokens the grammar forbids, the sampler picks a token among
//! the rest, and [`Constraint::accept`] advances the parser:
//!
//! ```no_run
//! use ferrolm::constrain::{Constraint, ConstraintSpec, TokenEnv};
//! # fn main() -> ferrolm::Result<()> {
//! # let model = ferrolm::model::Model::load("m.gguf")?;
//! # let mut logits = vec![0.0f32; model.tokenizer().n_vocab()];
//! # let mut sample = |l: &[f32]| ferrolm::sampling::argmax(l);
//! let env = TokenEnv::new(model.tokenizer())?;
//! let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}});
//! let mut c = Constraint::new(&env, &ConstraintSpec::JsonSchema(schema))?;
//! loop {
//!     c.mask_logits(&mut logits)?;
//!     let tok = sample(&logits);
//!     c.accept(tok)?;
//!     if model.tokenizer().is_eog(tok) || c.is_finished() {
//!         break;
//!     }
//!     // … run the model on `tok` and refill `logits` …
//! }
//! # Ok(())
//! # }
//! ```
//!
//! JSON schemas follow llguidance's supported subset (types, `properties`/`required`, `enum`,
//! `const`, `minLength`/`maxLength`, `pattern`, `minimum`/`maximum`, `items`/`minItems`/
//! `maxItems`, `anyOf`/`oneOf`/`allOf`, local `$ref`…). Unless the schema sets its own
//! `x-guidance` options, output uses fixed separators (`", "` and `": "`) and no other
//! whitespace, so a bounded schema gives bounded output. Lark grammars use llguidance's dialect
//! (`start: …`, `/regex/` terminals, `%json {…}`, special tokens as `<|name|>`).

mod env;
pub mod gbnf;
#[cfg(test)]
mod tests;

pub use env::TokenEnv;

use std::sync::Arc;

use llguidance::Matcher;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::SimpleVob;
use serde_json::{Value, json};

/// The largest constraint source accepted, in bytes (a Lark grammar or regex as given, a JSON
/// schema as serialized). Parsing the source is not fuelled, and the first token mask of a large
/// one is slow however llguidance's fuel is set: on a 2-core machine running ~9 times more work
/// than cores, a 128 KiB literal took 1.3-2.4 s to compile and a 100 KB schema 1.0 s. 32 KiB
/// bounds that to a quarter (tens of milliseconds on an idle core) and still holds hand-written
/// grammars and the tool and response schemas seen in practice.
pub const MAX_SPEC_BYTES: usize = 32 * 1024;

/// The largest count of a counted repetition (`x{n}`, `x{n,m}`) in a regex, a Lark grammar or a
/// schema's `pattern`. llguidance expands a repeated literal (`a{100000}` is a 100,000-byte
/// literal, whose lexer took seconds to build), so counts are bounded like the source's size.
/// A Lark string literal that spells such a count (`"{99999}"`) is refused too.
pub const MAX_REPEAT: u64 = 4096;

/// The stack of the thread that compiles a constraint. llguidance's grammar compiler recurses
/// once per nesting level (a chain of 3000 rules, 48 KB of Lark, overflowed 8 MiB); the deepest
/// grammar [`MAX_SPEC_BYTES`] allows fits in this (tested). It is reserved address space: only
/// the pages a compile touches are committed, and they are freed when the compile ends.
const COMPILE_STACK_BYTES: usize = 512 * 1024 * 1024;

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintSpec {
    /// A JSON value valid against this JSON schema.
    JsonSchema(Value),
    /// Any JSON object.
    JsonObject,
    /// A grammar in llguidance's Lark dialect (the start rule is `start`).
    Lark(String),
    /// A grammar in llama.cpp's GBNF (the start rule is `root`), translated to Lark
    /// ([`gbnf`]).
    Gbnf(String),
    /// Text matching this regex in full (Rust `regex` syntax).
    Regex(String),
}

impl ConstraintSpec {
    /// A grammar given as text, told apart as llama.cpp's `grammar` field is: GBNF (a rule
    /// `name ::= …` outside comments), unless it is llguidance's Lark (it starts with
    /// `%llguidance`, or defines no `::=` rule: `start: …`).
    pub fn grammar(text: &str) -> ConstraintSpec {
        let lark = text.trim_start().starts_with("%llguidance")
            || !text.lines().any(|l| l.split('#').next().unwrap_or("").contains("::="));
        if lark { ConstraintSpec::Lark(text.to_string()) } else { ConstraintSpec::Gbnf(text.to_string()) }
    }
}

/// Errors of constrained generation.
#[derive(Debug, thiserror::Error)]
pub enum ConstrainError {
    /// The schema, grammar or regex is malformed or unsupported.
    #[error("invalid constraint: {0}")]
    Grammar(String),
    /// The sampled token is not one the grammar allows next.
    #[error("token {token} ({text:?}) is not allowed here: {reason}")]
    TokenNotAllowed {
        /// The token id.
        token: u32,
        /// Its text (lossy UTF-8).
        text: String,
        /// Why.
        reason: String,
    },
    /// The logits do not cover the vocabulary.
    #[error("{len} logits for a vocabulary of {n_vocab} tokens")]
    LogitsLength {
        /// Number of logits given.
        len: usize,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// The tokenizer has no end-of-generation token, so no grammar could end.
    #[error("the tokenizer has no end-of-generation token")]
    NoEndOfGeneration,
    /// The matcher failed while computing a mask or advancing (e.g. a grammar too complex).
    #[error("constraint matcher: {0}")]
    Matcher(String),
}

/// Default JSON output options (see the module documentation).
fn json_defaults() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

/// llguidance's grammar for a spec.
fn top_level_grammar(spec: &ConstraintSpec) -> TopLevelGrammar {
    match spec {
        ConstraintSpec::JsonSchema(schema) => {
            let mut schema = schema.clone();
            if let Some(obj) = schema.as_object_mut() {
                obj.entry("x-guidance").or_insert_with(json_defaults);
            }
            TopLevelGrammar::from_json_schema(schema)
        }
        ConstraintSpec::JsonObject => {
            TopLevelGrammar::from_json_schema(json!({"type": "object", "x-guidance": json_defaults()}))
        }
        ConstraintSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        // Translated before compiling (see `Constraint::new`); a GBNF spec never gets here.
        ConstraintSpec::Gbnf(g) => TopLevelGrammar::from_lark(g.clone()),
        ConstraintSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
    }
}

/// A matcher failure as the library's error.
fn matcher_err(e: impl std::fmt::Display) -> crate::Error {
    ConstrainError::Matcher(e.to_string()).into()
}

/// The size of `spec`'s source in bytes.
fn spec_bytes(spec: &ConstraintSpec) -> usize {
    match spec {
        ConstraintSpec::JsonSchema(v) => serde_json::to_string(v).map_or(usize::MAX, |s| s.len()),
        ConstraintSpec::JsonObject => 0,
        ConstraintSpec::Lark(s) | ConstraintSpec::Gbnf(s) | ConstraintSpec::Regex(s) => s.len(),
    }
}

/// The largest counted-repetition count in a regex or grammar source (0 when none); counts after
/// a backslash (`\{5}`) are literal text and not counted.
fn max_repeat_count(src: &str) -> u64 {
    let mut max = 0u64;
    for (i, _) in src.match_indices('{') {
        if src[..i].ends_with('\\') {
            continue;
        }
        let Some((body, _)) = src[i + 1..].split_once('}') else { continue };
        let parts: Vec<&str> = body.split(',').map(str::trim).collect();
        let is_count = |t: &&str| t.bytes().all(|c| c.is_ascii_digit());
        if body.trim().is_empty() || parts.len() > 2 || !parts.iter().all(is_count) {
            continue;
        }
        for p in parts.iter().filter(|p| !p.is_empty()) {
            // More digits than a u64 holds is a count over any limit.
            max = max.max(p.parse::<u64>().unwrap_or(u64::MAX));
        }
    }
    max
}

/// Every `pattern` of a JSON schema (and `patternProperties`' keys), for [`max_repeat_count`].
fn schema_patterns<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                match (k.as_str(), x) {
                    ("pattern", Value::String(p)) => out.push(p),
                    ("patternProperties", Value::Object(props)) => {
                        out.extend(props.keys().map(String::as_str))
                    }
                    _ => {}
                }
                schema_patterns(x, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|x| schema_patterns(x, out)),
        _ => {}
    }
}

/// Refuses a source over [`MAX_SPEC_BYTES`] or with a repetition count over [`MAX_REPEAT`]:
/// llguidance's parsing of them is not fuelled.
fn check_size(spec: &ConstraintSpec) -> crate::Result<()> {
    let bytes = spec_bytes(spec);
    if bytes > MAX_SPEC_BYTES {
        let msg = format!("it is {bytes} bytes long; the limit is {MAX_SPEC_BYTES} bytes");
        return Err(ConstrainError::Grammar(msg).into());
    }
    let count = match spec {
        ConstraintSpec::Lark(s) | ConstraintSpec::Regex(s) => max_repeat_count(s),
        ConstraintSpec::JsonSchema(v) => {
            let mut patterns = Vec::new();
            schema_patterns(v, &mut patterns);
            patterns.iter().map(|p| max_repeat_count(p)).max().unwrap_or(0)
        }
        // The GBNF parser applies llama.cpp's own limit (2000).
        ConstraintSpec::JsonObject | ConstraintSpec::Gbnf(_) => 0,
    };
    if count > MAX_REPEAT {
        let msg = format!("a repetition count of {count} is over the limit of {MAX_REPEAT}");
        return Err(ConstrainError::Grammar(msg).into());
    }
    Ok(())
}

/// A compile-time failure of the matcher as the library's error, in words a user can act on.
fn compile_err(e: impl std::fmt::Display) -> crate::Error {
    let e = e.to_string();
    let e = e.trim_end_matches("\n<non-verbose/>").trim_end();
    let msg = if e.contains("NoExtensionBias") {
        "it matches no text: a rule that can only refer to itself (such as `start: start`, or a \
         schema whose $ref loops back with no alternative) never produces a finite string"
            .to_string()
    } else {
        format!("it cannot be matched within the parser's limits: {e}")
    };
    ConstrainError::Grammar(msg).into()
}

/// Runs one step on a copy of `matcher`: consumes the first allowed token that is not
/// end-of-generation and computes the next mask. Some grammars fail only there (a repetition
/// count of a billion runs out of Earley items computing the forced tokens after the first one).
fn probe_first_step(matcher: &Matcher, mask: &SimpleVob, env: &TokenEnv) -> crate::Result<()> {
    let Some(tok) = mask.iter().find(|&t| (t as usize) < env.n_vocab() && !env.is_eog(t)) else {
        return Ok(());
    };
    let mut copy = matcher.deep_clone();
    copy.consume_token(tok).map_err(compile_err)?;
    if !copy.is_stopped() {
        copy.compute_mask().map_err(compile_err)?;
    }
    match copy.get_error() {
        Some(e) => Err(compile_err(e)),
        None => Ok(()),
    }
}

/// One constrained generation's state.
pub struct Constraint {
    env: Arc<TokenEnv>,
    matcher: Matcher,
    /// The mask computed at compile time, used by the first [`Constraint::mask_logits`].
    first_mask: Option<SimpleVob>,
    /// An end-of-generation token was accepted.
    ended: bool,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("ended", &self.ended)
            .field("stop_reason", &self.matcher.stop_reason())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// Compiles `spec` for the vocabulary of `env` and computes the first token mask, so that
    /// everything that can fail before the first token fails here: a malformed, too large
    /// ([`MAX_SPEC_BYTES`], [`MAX_REPEAT`]) or unmatchable schema, grammar or regex (left recursion with no way
    /// out, repetitions past the parser's limits) is a [`ConstrainError::Grammar`].
    ///
    /// The compile runs on a thread of its own with a 512 MiB stack (address space): the grammar
    /// compiler recurses once per nesting level, and a deep grammar on the caller's stack (2 MiB
    /// on a tokio worker) aborted the whole process with a stack overflow.
    pub fn new(env: &Arc<TokenEnv>, spec: &ConstraintSpec) -> crate::Result<Constraint> {
        check_size(spec)?;
        let translated;
        let spec = match spec {
            ConstraintSpec::Gbnf(src) => {
                translated = ConstraintSpec::Lark(gbnf::to_lark(src, env.eog_ids())?);
                &translated
            }
            other => other,
        };
        std::thread::scope(|s| {
            let compiler = std::thread::Builder::new()
                .name("ferrolm-constrain".into())
                .stack_size(COMPILE_STACK_BYTES)
                .spawn_scoped(s, move || Constraint::compile(env, spec))
                .map_err(|e| ConstrainError::Matcher(format!("starting the grammar compiler: {e}")))?;
            compiler.join().unwrap_or_else(|_| {
                Err(ConstrainError::Grammar("the grammar compiler failed on it".into()).into())
            })
        })
    }

    /// [`Constraint::new`]'s work, on the compiler thread.
    fn compile(env: &Arc<TokenEnv>, spec: &ConstraintSpec) -> crate::Result<Constraint> {
        let parser = env
            .factory()
            .create_parser(top_level_grammar(spec))
            .map_err(|e| ConstrainError::Grammar(e.to_string()))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ConstrainError::Grammar(e).into());
        }
        let first_mask = matcher.compute_mask().map_err(compile_err)?;
        probe_first_step(&matcher, &first_mask, env)?;
        if first_mask.is_zero() && !matcher.is_accepting().map_err(compile_err)? {
            return Err(compile_err("NoExtensionBias"));
        }
        Ok(Constraint { env: Arc::clone(env), matcher, first_mask: Some(first_mask), ended: false })
    }

    /// Sets the logits of tokens the grammar forbids next to -inf (end-of-generation tokens are
    /// allowed exactly when the grammar may stop). Logits past the vocabulary (padding) are
    /// always masked.
    pub fn mask_logits(&mut self, logits: &mut [f32]) -> crate::Result<()> {
        let n_vocab = self.env.n_vocab();
        if logits.len() < n_vocab {
            return Err(ConstrainError::LogitsLength { len: logits.len(), n_vocab }.into());
        }
        let (vocab, pad) = logits.split_at_mut(n_vocab);
        pad.fill(f32::NEG_INFINITY);
        if self.is_finished() {
            // Only end-of-generation may follow; their logits stay as they are.
            let eog: Vec<(u32, f32)> =
                self.env.eog_ids().iter().map(|&id| (id, vocab[id as usize])).collect();
            vocab.fill(f32::NEG_INFINITY);
            for (id, l) in eog {
                vocab[id as usize] = l;
            }
            return Ok(());
        }
        let mask = match self.first_mask.take() {
            Some(m) => m,
            None => self.matcher.compute_mask().map_err(matcher_err)?,
        };
        for (words, chunk) in mask.as_slice().iter().zip(vocab.chunks_mut(32)) {
            if *words == u32::MAX {
                continue;
            }
            for (bit, l) in chunk.iter_mut().enumerate() {
                if words & (1 << bit) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        // The mask may be shorter than the vocabulary only if the trie was; never leave a gap.
        let covered = mask.as_slice().len() * 32;
        if covered < n_vocab {
            vocab[covered..].fill(f32::NEG_INFINITY);
        }
        Ok(())
    }

    /// Advances past a sampled token (error if the token was not allowed; the state is then
    /// unchanged). Accepting an end-of-generation token when the grammar may stop ends it.
    pub fn accept(&mut self, token: u32) -> crate::Result<()> {
        let env = &self.env;
        let not_allowed = |reason: &str| -> crate::Error {
            ConstrainError::TokenNotAllowed { token, text: env.token_text(token), reason: reason.to_string() }
                .into()
        };
        if token as usize >= self.env.n_vocab() {
            return Err(not_allowed("outside the vocabulary"));
        }
        if self.ended {
            return Err(not_allowed("generation already ended"));
        }
        // A token accepted by anything but the first mask makes that mask stale.
        self.first_mask = None;
        if self.env.is_eog(token) {
            if self.is_finished() {
                self.ended = true;
                return Ok(());
            }
            // A grammar may name an end-of-generation token itself (`start: "yes" <|im_end|>`):
            // then it is a token of the grammar, and it ends the generation all the same.
            if !self.matcher.is_stopped()
                && self.matcher.compute_mask().map_err(matcher_err)?.is_allowed(token)
            {
                self.matcher.consume_token(token).map_err(matcher_err)?;
                self.ended = true;
                return Ok(());
            }
            let accepting = self.matcher.is_accepting().map_err(matcher_err)?;
            if !accepting {
                return Err(not_allowed("the grammar is not complete"));
            }
            self.matcher.consume_token(token).map_err(matcher_err)?;
            self.ended = true;
            return Ok(());
        }
        if self.is_finished() {
            return Err(not_allowed("the grammar is complete; only end-of-generation may follow"));
        }
        let n = self.matcher.validate_tokens(&[token]).map_err(matcher_err)?;
        if n == 0 {
            return Err(not_allowed("the grammar forbids it"));
        }
        self.matcher.consume_token(token).map_err(matcher_err)
    }

    /// True when the grammar is complete and only end-of-generation may follow (generation should
    /// stop), or an end-of-generation token was accepted.
    pub fn is_finished(&self) -> bool {
        self.ended || (self.matcher.is_stopped() && self.matcher.stop_reason().is_ok())
    }
}

// The contract with sessions: environments are shared across threads, constraints move between them.
const _: () = {
    const fn send<T: Send>() {}
    const fn send_sync<T: Send + Sync>() {}
    send::<Constraint>();
    send_sync::<TokenEnv>();
};
