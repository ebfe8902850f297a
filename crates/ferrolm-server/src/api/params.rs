//! The request fields shared by `/v1/chat/completions` and `/v1/completions`: sampling (OpenAI's
//! names plus every sampler of the library under llama-server's names), stop strings, seed,
//! structured output, `n`, streaming and timeout, turned into [`GenerateParams`].
//!
//! A sampler field that is absent keeps the server's default ([`super::ServerConfig::sampler`],
//! which is the library's — llama.cpp's — defaults unless the command line changed them).

use std::time::Duration;

use ferrolm::constrain::ConstraintSpec;
use ferrolm::decoder::speculative::MAX_DRAFT;
use ferrolm::engine::{DraftSettings, GenRequest, PromptLookup};
use ferrolm::sampling::{SamplerParams, SamplerStep};
use ferrolm::session::GenerateParams;
use serde::Deserialize;
use serde_json::Value;

use super::backend::Backend;
use super::error::ApiError;
use super::json::{string_or_list, type_name};

/// Most choices per prompt.
pub(crate) const MAX_N: i64 = 16;
/// Most stop strings.
pub(crate) const MAX_STOP: usize = 16;
/// Most alternatives per token in log-probabilities.
pub(crate) const MAX_TOP_LOGPROBS: i64 = 20;

/// `stream_options`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub(crate) struct StreamOptions {
    /// Send a last chunk with the usage.
    pub include_usage: Option<bool>,
}

/// Fields every generation endpoint reads.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub(crate) struct CommonFields {
    pub model: Option<String>,
    pub n: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub stop: Option<Value>,
    pub seed: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub typical_p: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub repeat_last_n: Option<i64>,
    pub dry_multiplier: Option<f64>,
    pub dry_base: Option<f64>,
    pub dry_allowed_length: Option<i64>,
    pub dry_penalty_last_n: Option<i64>,
    pub dry_sequence_breakers: Option<Vec<String>>,
    pub xtc_probability: Option<f64>,
    pub xtc_threshold: Option<f64>,
    pub mirostat: Option<i64>,
    pub mirostat_tau: Option<f64>,
    pub mirostat_eta: Option<f64>,
    pub top_n_sigma: Option<f64>,
    pub dynatemp_range: Option<f64>,
    pub dynatemp_exponent: Option<f64>,
    pub min_keep: Option<i64>,
    pub samplers: Option<Value>,
    pub logit_bias: Option<Value>,
    pub ignore_eos: Option<bool>,
    pub grammar: Option<String>,
    pub json_schema: Option<Value>,
    pub response_format: Option<Value>,
    /// llama-server's: `false` runs the whole prompt, reusing no cached prefix.
    pub cache_prompt: Option<bool>,
    /// llama-server's name of `max_tokens` (-1: until the context is full); wins over it.
    pub n_predict: Option<i64>,
    /// llama-server's slot to run in (-1: any); the request waits for that slot.
    pub id_slot: Option<i64>,
    /// llama-server's request fields ferrolm does not implement: refused when they ask for
    /// something (see [`CommonFields::refuse_unsupported`]).
    pub timings_per_token: Option<bool>,
    pub return_progress: Option<bool>,
    pub post_sampling_probs: Option<bool>,
    pub verbose: Option<bool>,
    pub t_max_predict_ms: Option<i64>,
    pub t_max_prompt_ms: Option<i64>,
    pub n_keep: Option<i64>,
    pub n_discard: Option<i64>,
    pub n_indent: Option<i64>,
    pub lora: Option<Value>,
    pub timeout: Option<f64>,
    /// Speculative decoding by prompt lookup: `true`, or `{"max_ngram": N, "max_draft": M}`.
    pub prompt_lookup: Option<Value>,
    /// With the server's draft model: most tokens drafted per pass (0: no drafting).
    #[serde(rename = "speculative.n_max")]
    pub speculative_n_max: Option<i64>,
    /// With the server's draft model: fewest drafted tokens worth a pass.
    #[serde(rename = "speculative.n_min")]
    pub speculative_n_min: Option<i64>,
    /// With the server's draft model: the draft model's least probability of a drafted token.
    #[serde(rename = "speculative.p_min")]
    pub speculative_p_min: Option<f64>,
}

/// What the shared fields ask for.
#[derive(Clone, Debug)]
pub(crate) struct GenSpec {
    /// Sampling, stops and constraint (`max_tokens` is set by the endpoint).
    pub params: GenerateParams,
    /// Choices per prompt.
    pub n: usize,
    /// Answer as server-sent events.
    pub stream: bool,
    /// Streaming: end with a usage chunk.
    pub include_usage: bool,
    /// The request's timeout (the server's, or lower).
    pub timeout: Option<Duration>,
    /// The field the constraint came from (`response_format`, `grammar`, `json_schema`): the
    /// `param` of the error when it does not compile.
    pub constraint_param: Option<&'static str>,
    /// Speculative decoding by prompt lookup (`prompt_lookup`).
    pub lookup: Option<PromptLookup>,
    /// Speculative decoding with the server's draft model (`speculative.*`).
    pub draft: Option<DraftSettings>,
    /// `cache_prompt: false`: reuse no cached prefix.
    pub fresh_prompt: bool,
    /// `id_slot` (≥ 0): the slot to run in.
    pub slot: Option<usize>,
    /// Streaming: what to report as the request runs.
    pub live: LiveReports,
    /// `post_sampling_probs`: probabilities of the distribution the sampler drew from.
    pub post_sampling_probs: bool,
    /// `verbose`: add llama-server's `__verbose` object to the answer; `None`: the server's
    /// `--verbose` decides.
    pub verbose: Option<bool>,
}

impl GenSpec {
    /// Whether an OpenAI-shaped answer carries `__verbose` (the request's `verbose`, else the
    /// server's `--verbose`). Only whole answers carry it: a streamed request asking for it
    /// is refused.
    pub(crate) fn verbose(&self, server_default: bool) -> Result<bool, ApiError> {
        match (self.verbose, self.stream) {
            (Some(true), true) => Err(ApiError::invalid_param(
                "verbose",
                "`verbose` (the `__verbose` object) is given with whole answers, not streamed ones",
            )),
            (Some(v), _) => Ok(v),
            (None, stream) => Ok(server_default && !stream),
        }
    }
}

/// llama-server's live reports of a streamed request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveReports {
    /// `return_progress`: a `prompt_progress` chunk when the request starts and after each
    /// prompt chunk.
    pub progress: bool,
    /// `timings_per_token`: `timings` on every chunk, not only the last.
    pub timings: bool,
}

impl GenSpec {
    /// The engine request of choice `choice` for `prompt` (choice `i` of a seeded request uses
    /// seed + i), with `logprobs` alternatives per token when asked.
    pub(crate) fn request(&self, prompt: Vec<u32>, choice: usize, logprobs: Option<usize>) -> GenRequest {
        GenRequest {
            prompt,
            params: params_for_choice(&self.params, choice),
            logprobs,
            prompt_logprobs: false,
            timeout: self.timeout,
            lookup: self.lookup,
            draft: self.draft,
            fresh_prompt: self.fresh_prompt,
            slot: self.slot,
            progress: self.stream && (self.live.progress || self.live.timings),
            post_sampling_probs: self.post_sampling_probs,
        }
    }
}

/// `prompt_lookup`: `true` (3-grams, 8 drafted tokens), `false`, or an object with `max_ngram`
/// and `max_draft`.
fn prompt_lookup(v: Option<&Value>) -> Result<Option<PromptLookup>, ApiError> {
    let bad = |msg: String| ApiError::invalid_param("prompt_lookup", msg);
    let default = PromptLookup { max_ngram: 3, max_draft: 8 };
    let lookup = match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => default,
        Some(Value::Object(o)) => {
            let field = |k: &str, d: usize| match o.get(k) {
                None => Ok(d),
                Some(x) => x
                    .as_u64()
                    .map(|n| n as usize)
                    .ok_or_else(|| bad(format!("`prompt_lookup.{k}` must be a positive integer, not {x}"))),
            };
            if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "max_ngram" | "max_draft")) {
                return Err(bad(format!("`prompt_lookup` takes `max_ngram` and `max_draft`, not `{k}`")));
            }
            PromptLookup { max_ngram: field("max_ngram", 3)?, max_draft: field("max_draft", 8)? }
        }
        Some(x) => return Err(bad(format!("`prompt_lookup` must be a boolean or an object, not {x}"))),
    };
    lookup.validate().map_err(|e| bad(format!("`prompt_lookup`: {e}")))?;
    Ok(Some(lookup))
}

/// The draft settings of a request on a server with a draft model (`default`, `None` without
/// one, where the fields are read and unused, as llama-server does): `speculative.n_max` (0 turns
/// drafting off), `speculative.n_min` and `speculative.p_min` clamped into range as llama-server
/// clamps them (`n_max` to [`MAX_DRAFT`]). A request with prompt lookup does not use the draft
/// model.
fn draft_settings(
    default: Option<DraftSettings>,
    n_max: Option<i64>,
    n_min: Option<i64>,
    p_min: Option<f64>,
) -> Option<DraftSettings> {
    let d = default?;
    let max_draft = n_max.map_or(d.max_draft, |n| n.clamp(0, MAX_DRAFT as i64) as usize);
    if max_draft == 0 {
        return None;
    }
    let min_draft = n_min.map_or(d.min_draft, |n| n.max(0) as usize).min(max_draft);
    // JSON numbers are finite.
    let p_min = p_min.map_or(d.p_min, |p| p.clamp(0.0, 1.0) as f32);
    Some(DraftSettings { max_draft, min_draft, p_min })
}

/// A float field as `f32`, finite.
fn float(param: &str, v: Option<f64>, default: f32) -> Result<f32, ApiError> {
    match v {
        None => Ok(default),
        Some(x) if x.is_finite() && (x as f32).is_finite() => Ok(x as f32),
        Some(x) => Err(ApiError::invalid_param(param, format!("`{param}` must be a finite number, not {x}"))),
    }
}

/// A count field (non-negative integer).
fn count(param: &str, v: Option<i64>, default: usize) -> Result<usize, ApiError> {
    match v {
        None => Ok(default),
        Some(x) => usize::try_from(x)
            .map_err(|_| ApiError::invalid_param(param, format!("`{param}` must not be negative, not {x}"))),
    }
}

/// A history length: -1 (all), 0 (off) or positive.
fn last_n(param: &str, v: Option<i64>, default: i32) -> Result<i32, ApiError> {
    match v {
        None => Ok(default),
        Some(x) => i32::try_from(x).ok().filter(|&x| x >= -1).ok_or_else(|| {
            ApiError::invalid_param(
                param,
                format!("`{param}` must be -1 (all), 0 (off) or positive, not {x}"),
            )
        }),
    }
}

/// `samplers`: an array of names, or one string of `;`-separated names or one-letter codes.
fn sampler_order(v: &Value) -> Result<Vec<SamplerStep>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("samplers", m);
    match v {
        Value::String(s) => SamplerStep::parse_order(s).map_err(|e| bad(e.to_string())),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                let name = i.as_str().ok_or_else(|| bad("`samplers` must be an array of names".into()))?;
                SamplerStep::from_name(name).ok_or_else(|| {
                    bad(format!(
                        "unknown sampler '{name}' (known: penalties, dry, top_n_sigma, top_k, typ_p, top_p, \
                         min_p, xtc, temperature)"
                    ))
                })
            })
            .collect(),
        other => {
            Err(bad(format!("`samplers` must be an array of names or a string, not {}", type_name(other))))
        }
    }
}

/// The vocabulary as request parsing sees it: its size, and plain tokenization (no BOS, no
/// special tokens) for `logit_bias` keyed by text.
#[derive(Clone, Copy)]
pub(crate) struct Vocab<'a> {
    n: usize,
    backend: Option<&'a dyn Backend>,
}

impl<'a> Vocab<'a> {
    /// The served model's vocabulary.
    pub(crate) fn of(backend: &'a dyn Backend) -> Self {
        Vocab { n: backend.n_vocab(), backend: Some(backend) }
    }

    /// A vocabulary of `n` ids without a tokenizer (text keys are refused).
    #[cfg(test)]
    pub(crate) fn sized(n: usize) -> Self {
        Vocab { n, backend: None }
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String> {
        match self.backend {
            Some(b) => b.tokenize(text, false, false),
            None => Err("no tokenizer".into()),
        }
    }
}

/// `logit_bias`, as llama-server reads it: `{"KEY": bias}` (OpenAI) or `[[KEY, bias], …]`, a
/// key being a token id, or a text whose every token gets the bias. A bias of `false` bans.
fn logit_bias(v: &Value, vocab: Vocab<'_>) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("logit_bias", m);
    let value = |key: &str, b: &Value| -> Result<f32, ApiError> {
        match b {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            Value::Number(n) => n
                .as_f64()
                .map(|x| x as f32)
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(format!("`logit_bias` for {key:?} must be a finite number, not {n}"))),
            other => Err(bad(format!(
                "`logit_bias` for {key:?} must be a number (or false to ban it), not {}",
                type_name(other)
            ))),
        }
    };
    let id = |id: u64| -> Result<u32, ApiError> {
        u32::try_from(id).ok().filter(|&i| (i as usize) < vocab.n).ok_or_else(|| {
            bad(format!("`logit_bias`: token id {id} is outside the vocabulary (0..{})", vocab.n))
        })
    };
    let text = |key: &str| -> Result<Vec<u32>, ApiError> {
        let ids = vocab.tokenize(key).map_err(|e| bad(format!("`logit_bias` key {key:?}: {e}")))?;
        if ids.is_empty() {
            return Err(bad(format!("`logit_bias` key {key:?} has no tokens")));
        }
        Ok(ids)
    };
    let mut out = Vec::new();
    let mut add = |ids: Vec<u32>, bias: f32| out.extend(ids.into_iter().map(|i| (i, bias)));
    match v {
        Value::Null => {}
        Value::Object(map) => {
            for (key, b) in map {
                let ids = match key.trim().parse::<u64>() {
                    Ok(n) => vec![id(n)?],
                    Err(_) => text(key)?,
                };
                add(ids, value(key, b)?);
            }
        }
        Value::Array(items) => {
            for pair in items {
                let (ids, key) = match pair.as_array().map(Vec::as_slice) {
                    Some([Value::Number(n), _]) => {
                        let n =
                            n.as_u64().ok_or_else(|| bad(format!("`logit_bias`: {n} is not a token id")))?;
                        (vec![id(n)?], n.to_string())
                    }
                    Some([Value::String(k), _]) => (text(k)?, k.clone()),
                    _ => {
                        return Err(bad(
                            "`logit_bias` as an array holds [token id or text, bias] pairs".into()
                        ));
                    }
                };
                add(ids, value(&key, &pair[1])?);
            }
        }
        other => return Err(bad(format!("`logit_bias` must be an object, not {}", type_name(other)))),
    }
    Ok(out)
}

/// `response_format`: text, `json_object` (optionally with `schema`), or `json_schema`.
fn response_format(v: &Value) -> Result<Option<ConstraintSpec>, ApiError> {
    let bad = |m: &str| ApiError::invalid_param("response_format", m.to_string());
    let Value::Object(map) = v else {
        return match v {
            Value::Null => Ok(None),
            _ => Err(bad("`response_format` must be an object such as {\"type\": \"json_object\"}")),
        };
    };
    let schema_of = |s: &Value| -> Result<ConstraintSpec, ApiError> {
        match s {
            Value::Object(_) | Value::Bool(true) => Ok(ConstraintSpec::JsonSchema(s.clone())),
            _ => Err(bad("the JSON schema must be an object")),
        }
    };
    match map.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => match map.get("schema") {
            None | Some(Value::Null) => Ok(Some(ConstraintSpec::JsonObject)),
            Some(s) => schema_of(s).map(Some),
        },
        Some("json_schema") => {
            let js = map.get("json_schema").ok_or_else(|| bad("`json_schema` is missing"))?;
            match js.get("schema").or_else(|| map.get("schema")) {
                None | Some(Value::Null) => Err(ApiError::invalid_param(
                    "response_format.json_schema.schema",
                    "`response_format.json_schema.schema` is required with type json_schema \
                     (use type json_object for any JSON object)",
                )),
                Some(s) => schema_of(s).map(Some),
            }
        }
        Some(other) => Err(bad(&format!(
            "unknown response_format type '{other}' (use text, json_object or json_schema)"
        ))),
        None => Err(bad("`response_format.type` is missing")),
    }
}

impl CommonFields {
    /// Refuses the llama-server fields ferrolm accepts but does not implement, when they ask
    /// for something other than their default: a field we read must work or fail loudly.
    pub(crate) fn refuse_unsupported(&self) -> Result<(), ApiError> {
        let refuse = |field: &str, why: &str| {
            Err(ApiError::invalid_param(field, format!("`{field}` is not supported by ferrolm: {why}")))
        };
        let limits = [
            ("t_max_predict_ms", self.t_max_predict_ms, "use `timeout` (seconds) for the whole request"),
            ("t_max_prompt_ms", self.t_max_prompt_ms, "use `timeout` (seconds) for the whole request"),
            ("n_discard", self.n_discard, "the context is never shifted; a full context ends the request"),
            ("n_indent", self.n_indent, "no indentation limit"),
        ];
        if let Some((f, _, why)) = limits.iter().find(|(_, v, _)| v.is_some_and(|x| x > 0)) {
            return refuse(f, why);
        }
        if self.n_keep.is_some_and(|k| k != 0 && k != -1) {
            return refuse("n_keep", "the context is never shifted; a full context ends the request");
        }
        match &self.lora {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Array(a)) if a.is_empty() => Ok(()),
            Some(_) => refuse("lora", "LoRA adapters are not loaded"),
        }
    }

    /// `n_predict: -1`: the server's default limit (`--n-predict`), as llama-server reads it.
    pub(crate) fn asks_server_default(&self) -> bool {
        self.n_predict == Some(-1)
    }

    /// The most tokens to generate: `n_predict` (llama-server's; -1 or absent: `max_tokens`),
    /// else `max_tokens` (OpenAI's), checked against the context; `None` when neither is given.
    pub(crate) fn max_new_tokens(
        &self,
        max_tokens_field: Option<i64>,
        n_ctx: usize,
        allow_zero: bool,
    ) -> Result<Option<usize>, ApiError> {
        match self.n_predict {
            Some(n) if n < -1 => Err(ApiError::invalid_param(
                "n_predict",
                format!("`n_predict` must be -1 (no limit) or at least 0, not {n}"),
            )),
            Some(-1) => Ok(Some(n_ctx)),
            Some(n) => max_tokens("n_predict", Some(n.min(n_ctx as i64)), n_ctx, true),
            None => max_tokens("max_tokens", max_tokens_field, n_ctx, allow_zero),
        }
    }

    /// The sampler: the server's defaults with the request's fields over them.
    pub(crate) fn sampler(
        &self,
        defaults: &SamplerParams,
        vocab: Vocab<'_>,
    ) -> Result<SamplerParams, ApiError> {
        let d = defaults;
        let mut p = SamplerParams {
            temperature: float("temperature", self.temperature, d.temperature)?,
            dynatemp_range: float("dynatemp_range", self.dynatemp_range, d.dynatemp_range)?,
            dynatemp_exponent: float("dynatemp_exponent", self.dynatemp_exponent, d.dynatemp_exponent)?,
            // llama.cpp: top_k <= 0 is off.
            top_k: self.top_k.map_or(d.top_k, |k| usize::try_from(k.max(0)).unwrap_or(usize::MAX)),
            top_p: float("top_p", self.top_p, d.top_p)?,
            min_p: float("min_p", self.min_p, d.min_p)?,
            typical_p: float("typical_p", self.typical_p, d.typical_p)?,
            top_n_sigma: float("top_n_sigma", self.top_n_sigma, d.top_n_sigma)?,
            xtc_probability: float("xtc_probability", self.xtc_probability, d.xtc_probability)?,
            xtc_threshold: float("xtc_threshold", self.xtc_threshold, d.xtc_threshold)?,
            penalty_last_n: last_n("repeat_last_n", self.repeat_last_n, d.penalty_last_n)?,
            repeat_penalty: float("repeat_penalty", self.repeat_penalty, d.repeat_penalty)?,
            frequency_penalty: float("frequency_penalty", self.frequency_penalty, d.frequency_penalty)?,
            presence_penalty: float("presence_penalty", self.presence_penalty, d.presence_penalty)?,
            dry_multiplier: float("dry_multiplier", self.dry_multiplier, d.dry_multiplier)?,
            dry_base: float("dry_base", self.dry_base, d.dry_base)?,
            dry_allowed_length: count("dry_allowed_length", self.dry_allowed_length, d.dry_allowed_length)?,
            dry_penalty_last_n: last_n("dry_penalty_last_n", self.dry_penalty_last_n, d.dry_penalty_last_n)?,
            dry_sequence_breakers: self
                .dry_sequence_breakers
                .clone()
                .unwrap_or_else(|| d.dry_sequence_breakers.clone()),
            mirostat: match self.mirostat {
                None => d.mirostat,
                Some(m @ 0..=2) => m as u8,
                Some(m) => {
                    return Err(ApiError::invalid_param(
                        "mirostat",
                        format!("`mirostat` must be 0 (off), 1 or 2, not {m}"),
                    ));
                }
            },
            mirostat_tau: float("mirostat_tau", self.mirostat_tau, d.mirostat_tau)?,
            mirostat_eta: float("mirostat_eta", self.mirostat_eta, d.mirostat_eta)?,
            logit_bias: d.logit_bias.clone(),
            min_keep: count("min_keep", self.min_keep, d.min_keep)?,
            order: match &self.samplers {
                None | Some(Value::Null) => d.order.clone(),
                Some(v) => sampler_order(v)?,
            },
            seed: match self.seed {
                None | Some(-1) => d.seed,
                Some(s) => Some(s as u64),
            },
        };
        if let Some(v) = &self.logit_bias {
            p.logit_bias.extend(logit_bias(v, vocab)?);
        }
        // As llama-server: `ignore_eos` bans the end-of-generation tokens (the generation runs
        // to its limit without writing them), and shows so in the settings.
        if self.ignore_eos == Some(true)
            && let Some(b) = vocab.backend
        {
            p.logit_bias.extend(b.eog_ids().into_iter().map(|id| (id, f32::NEG_INFINITY)));
        }
        p.validate().map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(p)
    }

    /// Stop strings (empty ones dropped).
    pub(crate) fn stops(&self) -> Result<Vec<String>, ApiError> {
        let mut stops = match &self.stop {
            None => Vec::new(),
            Some(v) => string_or_list("stop", v)?,
        };
        stops.retain(|s| !s.is_empty());
        if stops.len() > MAX_STOP {
            return Err(ApiError::invalid_param(
                "stop",
                format!("at most {MAX_STOP} stop strings, not {}", stops.len()),
            ));
        }
        Ok(stops)
    }

    /// The output constraint: `response_format`, `grammar` (GBNF, or llguidance's Lark:
    /// [`ConstraintSpec::grammar`]) or `json_schema`, at most one,
    /// with the name of the field it came from.
    pub(crate) fn constraint(&self) -> Result<Option<(&'static str, ConstraintSpec)>, ApiError> {
        let mut specs = Vec::new();
        if let Some(v) = &self.response_format
            && let Some(s) = response_format(v)?
        {
            specs.push(("response_format", s));
        }
        if let Some(g) = &self.grammar
            && !g.trim().is_empty()
        {
            specs.push(("grammar", ConstraintSpec::grammar(g)));
        }
        match &self.json_schema {
            None | Some(Value::Null) => {}
            Some(s @ (Value::Object(_) | Value::Bool(true))) => {
                specs.push(("json_schema", ConstraintSpec::JsonSchema(s.clone())))
            }
            Some(_) => return Err(ApiError::invalid_param("json_schema", "`json_schema` must be an object")),
        }
        if specs.len() > 1 {
            let names: Vec<&str> = specs.iter().map(|(n, _)| *n).collect();
            return Err(ApiError::invalid(format!(
                "give at most one of response_format (json), grammar and json_schema, not {}",
                names.join(" and ")
            )));
        }
        Ok(specs.pop())
    }

    /// Everything but `max_tokens`.
    pub(crate) fn spec(
        &self,
        defaults: &SamplerParams,
        vocab: Vocab<'_>,
        server_timeout: Option<Duration>,
        server_draft: Option<DraftSettings>,
    ) -> Result<GenSpec, ApiError> {
        let n = self.n.unwrap_or(1);
        if !(1..=MAX_N).contains(&n) {
            return Err(ApiError::invalid_param("n", format!("`n` must be between 1 and {MAX_N}, not {n}")));
        }
        let timeout = match self.timeout {
            None => server_timeout,
            Some(t) if t.is_finite() && t > 0.0 && t < 1e9 => {
                let t = Duration::from_secs_f64(t);
                Some(server_timeout.map_or(t, |s| s.min(t)))
            }
            Some(t) => {
                return Err(ApiError::invalid_param(
                    "timeout",
                    format!("`timeout` must be a positive number of seconds, not {t}"),
                ));
            }
        };
        self.refuse_unsupported()?;
        let (constraint_param, constraint) = self.constraint()?.unzip();
        let lookup = prompt_lookup(self.prompt_lookup.as_ref())?;
        let (n_max, n_min, p_min) = (self.speculative_n_max, self.speculative_n_min, self.speculative_p_min);
        let draft = draft_settings(server_draft.filter(|_| lookup.is_none()), n_max, n_min, p_min);
        let params = GenerateParams {
            max_tokens: None,
            sampler: self.sampler(defaults, vocab)?,
            stop: self.stops()?,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            constraint,
            reasoning_budget: None,
        };
        Ok(GenSpec {
            params,
            n: n as usize,
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
            timeout,
            constraint_param,
            lookup,
            draft,
            fresh_prompt: self.cache_prompt == Some(false),
            slot: self.id_slot.and_then(|s| usize::try_from(s).ok()),
            live: LiveReports {
                progress: self.return_progress.unwrap_or(false),
                timings: self.timings_per_token.unwrap_or(false),
            },
            post_sampling_probs: self.post_sampling_probs.unwrap_or(false),
            verbose: self.verbose,
        })
    }
}

/// `max_tokens`: 0..=`n_ctx` (0 only where `allow_zero`).
pub(crate) fn max_tokens(
    param: &str,
    v: Option<i64>,
    n_ctx: usize,
    allow_zero: bool,
) -> Result<Option<usize>, ApiError> {
    let Some(m) = v else { return Ok(None) };
    let lo = if allow_zero { 0 } else { 1 };
    if m < lo || m > n_ctx as i64 {
        return Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be between {lo} and the context size {n_ctx}, not {m}"),
        ));
    }
    Ok(Some(m as usize))
}

/// `top_logprobs` / completions' `logprobs`: 0..=20.
pub(crate) fn top_logprobs(param: &str, v: Option<i64>) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(k @ 0..=MAX_TOP_LOGPROBS) => Ok(Some(k as usize)),
        Some(k) => Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be between 0 and {MAX_TOP_LOGPROBS}, not {k}"),
        )),
    }
}

/// The sampler of choice `i` of `n`: with a seed, choice `i` uses `seed + i`.
pub(crate) fn params_for_choice(params: &GenerateParams, i: usize) -> GenerateParams {
    let mut p = params.clone();
    p.sampler.seed = p.sampler.seed.map(|s| s.wrapping_add(i as u64));
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn common(v: Value) -> Result<CommonFields, ApiError> {
        super::super::json::fields(&v)
    }

    fn spec(v: Value) -> Result<GenSpec, ApiError> {
        common(v)?.spec(&SamplerParams::default(), Vocab::sized(100), Some(Duration::from_secs(600)), None)
    }

    #[test]
    fn absent_fields_keep_the_defaults() {
        let s = spec(json!({})).expect("empty");
        assert_eq!(s.params.sampler, SamplerParams::default());
        assert_eq!((s.n, s.stream, s.include_usage), (1, false, false));
        assert_eq!(s.timeout, Some(Duration::from_secs(600)));
    }

    #[test]
    fn every_field_reaches_the_sampler() {
        let s = spec(json!({
            "temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.1, "typical_p": 0.8,
            "frequency_penalty": -0.2, "presence_penalty": 0.4, "repeat_penalty": 1.1, "repeat_last_n": -1,
            "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": 128,
            "dry_sequence_breakers": ["\n", "###"], "xtc_probability": 0.3, "xtc_threshold": 0.2,
            "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2, "top_n_sigma": 1.5,
            "dynatemp_range": 0.25, "dynatemp_exponent": 1.5, "min_keep": 2, "samplers": ["top_k", "temperature"],
            "logit_bias": {"15": -100, "3": false}, "seed": 123, "stop": ["a", "", "b"], "ignore_eos": true,
            "n": 3, "stream": true, "stream_options": {"include_usage": true}, "timeout": 5, "cache_prompt": true,
        }))
        .expect("all fields");
        let p = &s.params.sampler;
        assert_eq!((p.temperature, p.top_k, p.top_p, p.min_p, p.typical_p), (0.5, 7, 0.9, 0.1, 0.8));
        assert_eq!(
            (p.frequency_penalty, p.presence_penalty, p.repeat_penalty, p.penalty_last_n),
            (-0.2, 0.4, 1.1, -1)
        );
        assert_eq!(
            (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n),
            (0.8, 2.0, 3, 128)
        );
        assert_eq!(p.dry_sequence_breakers, vec!["\n", "###"]);
        assert_eq!((p.xtc_probability, p.xtc_threshold, p.top_n_sigma), (0.3, 0.2, 1.5));
        assert_eq!((p.mirostat, p.mirostat_tau, p.mirostat_eta), (2, 4.0, 0.2));
        assert_eq!((p.dynatemp_range, p.dynatemp_exponent, p.min_keep), (0.25, 1.5, 2));
        assert_eq!(p.order, vec![SamplerStep::TopK, SamplerStep::Temperature]);
        assert_eq!(p.logit_bias, vec![(15, -100.0), (3, f32::NEG_INFINITY)]);
        assert_eq!(p.seed, Some(123));
        assert_eq!(s.params.stop, vec!["a", "b"]);
        assert!(s.params.ignore_eos);
        assert_eq!((s.n, s.stream, s.include_usage), (3, true, true));
        assert_eq!(s.timeout, Some(Duration::from_secs(5)));
        assert_eq!(params_for_choice(&s.params, 2).sampler.seed, Some(125));
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        for bad in [
            json!({"n": 0}),
            json!({"n": 17}),
            json!({"top_p": 1.5}),
            json!({"temperature": "hot"}),
            json!({"temperature": 1e300}),
            json!({"repeat_last_n": -2}),
            json!({"mirostat": 3}),
            json!({"min_keep": -1}),
            json!({"logit_bias": {"abc": 1}}),
            json!({"logit_bias": {"100": 1}}),
            json!({"logit_bias": {"5": "x"}}),
            json!({"logit_bias": 5}),
            json!({"samplers": ["bogus"]}),
            json!({"samplers": 3}),
            json!({"stop": 3}),
            json!({"stop": vec!["a"; 17]}),
            json!({"timeout": 0}),
            json!({"timeout": -1}),
            json!({"response_format": {"type": "xml"}}),
            json!({"response_format": {"type": "json_object"}, "grammar": "start: \"a\""}),
            json!({"json_schema": 3}),
            json!({"dry_sequence_breakers": [""]}),
            json!({"repeat_penalty": 0}),
        ] {
            assert!(spec(bad.clone()).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn constraints_and_odd_forms() {
        let c = |v| common(v).expect("fields").constraint().expect("ok").map(|(_, s)| s);
        assert_eq!(c(json!({"response_format": {"type": "text"}})), None);
        assert_eq!(c(json!({"response_format": {"type": "json_object"}})), Some(ConstraintSpec::JsonObject));
        let schema = json!({"type": "object"});
        assert_eq!(
            c(
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}})
            ),
            Some(ConstraintSpec::JsonSchema(schema.clone()))
        );
        assert_eq!(
            c(json!({"json_schema": schema})),
            Some(ConstraintSpec::JsonSchema(json!({"type": "object"})))
        );
        assert_eq!(c(json!({"grammar": "start: \"a\""})), Some(ConstraintSpec::Lark("start: \"a\"".into())));
        assert_eq!(
            c(json!({"grammar": "root ::= \"a\""})),
            Some(ConstraintSpec::Gbnf("root ::= \"a\"".into()))
        );
        let s = spec(
            json!({"samplers": "top_k;temp", "logit_bias": [[5, 1.5]], "stop": "x", "seed": -1, "top_k": -1}),
        )
        .expect("string forms");
        assert_eq!(s.params.sampler.order, vec![SamplerStep::TopK, SamplerStep::Temperature]);
        assert_eq!(s.params.sampler.logit_bias, vec![(5, 1.5)]);
        assert_eq!(s.params.stop, vec!["x"]);
        assert_eq!((s.params.sampler.seed, s.params.sampler.top_k), (None, 0));
        // A request timeout above the server's is capped.
        assert_eq!(spec(json!({"timeout": 10000})).expect("t").timeout, Some(Duration::from_secs(600)));
    }

    #[test]
    fn model_and_counts() {
        let limit = |v: Value, max: Option<i64>| common(v).expect("f").max_new_tokens(max, 10, false);
        assert_eq!(limit(json!({}), None).expect("ok"), None);
        assert_eq!(limit(json!({}), Some(4)).expect("ok"), Some(4));
        // n_predict wins over max_tokens; -1 is the whole context; above it is capped to it.
        assert_eq!(limit(json!({"n_predict": 3}), Some(4)).expect("ok"), Some(3));
        assert_eq!(limit(json!({"n_predict": -1}), Some(4)).expect("ok"), Some(10));
        assert_eq!(limit(json!({"n_predict": 99}), None).expect("ok"), Some(10));
        assert_eq!(limit(json!({"n_predict": 0}), None).expect("ok"), Some(0));
        assert_eq!(
            limit(json!({"n_predict": -2}), None).expect_err("bad").param.as_deref(),
            Some("n_predict")
        );
        assert_eq!(max_tokens("max_tokens", Some(5), 10, false).expect("ok"), Some(5));
        assert!(max_tokens("max_tokens", Some(0), 10, false).is_err());
        assert_eq!(max_tokens("max_tokens", Some(0), 10, true).expect("ok"), Some(0));
        assert!(max_tokens("max_tokens", Some(11), 10, true).is_err());
        assert!(max_tokens("max_tokens", Some(-1), 10, true).is_err());
        assert!(top_logprobs("top_logprobs", Some(21)).is_err());
        assert_eq!(top_logprobs("top_logprobs", Some(0)).expect("ok"), Some(0));
    }

    #[test]
    fn a_server_draft_model_is_used_unless_lookup_or_n_max_0() {
        let server = DraftSettings { max_draft: 8, min_draft: 0, p_min: 0.75 };
        let draft = |v: Value, d: Option<DraftSettings>| {
            common(v)
                .expect("fields")
                .spec(&SamplerParams::default(), Vocab::sized(100), None, d)
                .expect("ok")
                .draft
        };
        assert_eq!(draft(json!({}), Some(server)), Some(server));
        // Without a draft model the fields are read and unused.
        assert_eq!(draft(json!({"speculative.n_max": 4}), None), None);
        assert_eq!(draft(json!({"speculative.n_max": 0}), Some(server)), None);
        assert_eq!(draft(json!({"prompt_lookup": true}), Some(server)), None);
        let set = json!({"speculative.n_max": 4, "speculative.n_min": 2, "speculative.p_min": 0.5});
        assert_eq!(draft(set, Some(server)), Some(DraftSettings { max_draft: 4, min_draft: 2, p_min: 0.5 }));
        // Clamped as llama-server clamps: n_max to MAX_DRAFT, n_min to n_max, p_min to [0, 1].
        let wild = json!({"speculative.n_max": 99, "speculative.n_min": 50, "speculative.p_min": 2.5});
        let got = draft(wild, Some(server));
        assert_eq!(got, Some(DraftSettings { max_draft: MAX_DRAFT, min_draft: MAX_DRAFT, p_min: 1.0 }));
        let low = json!({"speculative.n_min": -3, "speculative.p_min": -1});
        assert_eq!(draft(low, Some(server)), Some(DraftSettings { max_draft: 8, min_draft: 0, p_min: 0.0 }));
        let err = common(json!({"speculative.n_max": "lots"})).expect_err("not a number");
        assert_eq!(err.param.as_deref(), Some("speculative.n_max"));
    }

    #[test]
    fn llama_server_fields_work_or_are_refused_by_name() {
        assert!(!spec(json!({})).expect("ok").fresh_prompt);
        assert!(!spec(json!({"cache_prompt": true})).expect("ok").fresh_prompt);
        assert!(spec(json!({"cache_prompt": false})).expect("ok").fresh_prompt);
        assert_eq!(spec(json!({"id_slot": 1})).expect("ok").slot, Some(1));
        assert_eq!(spec(json!({"id_slot": -1})).expect("ok").slot, None);
        // Their defaults ask for nothing.
        let defaults = json!({"id_slot": -1, "timings_per_token": false, "return_progress": false,
            "post_sampling_probs": false, "t_max_predict_ms": 0, "n_keep": 0, "n_discard": 0,
            "n_indent": 0, "lora": []});
        spec(defaults).expect("defaults are accepted");
        let live =
            spec(json!({"timings_per_token": true, "return_progress": true, "stream": true})).expect("ok");
        assert_eq!(live.live, LiveReports { progress: true, timings: true });
        assert!(live.request(vec![1], 0, None).progress, "the engine is asked for progress events");
        let whole = spec(json!({"timings_per_token": true})).expect("ok");
        assert!(!whole.request(vec![1], 0, None).progress, "a whole answer reports nothing live");
        assert!(
            spec(json!({"post_sampling_probs": true}))
                .expect("ok")
                .request(vec![1], 0, Some(3))
                .post_sampling_probs
        );
        for (field, v) in [
            ("t_max_predict_ms", json!(500)),
            ("t_max_prompt_ms", json!(500)),
            ("n_keep", json!(8)),
            ("n_discard", json!(4)),
            ("n_indent", json!(2)),
            ("lora", json!([{"id": 0, "scale": 1.0}])),
        ] {
            let mut body = json!({});
            body[field] = v;
            let err = spec(body).expect_err(field);
            assert_eq!(err.param.as_deref(), Some(field));
            assert!(err.message.contains("not supported"), "{}", err.message);
        }
    }

    #[test]
    fn prompt_lookup_is_a_flag_or_its_settings() {
        assert_eq!(spec(json!({})).expect("ok").lookup, None);
        assert_eq!(spec(json!({"prompt_lookup": false})).expect("ok").lookup, None);
        let on = spec(json!({"prompt_lookup": true})).expect("ok").lookup;
        assert_eq!(on, Some(PromptLookup { max_ngram: 3, max_draft: 8 }));
        let set = spec(json!({"prompt_lookup": {"max_draft": 4}})).expect("ok").lookup;
        assert_eq!(set, Some(PromptLookup { max_ngram: 3, max_draft: 4 }));
        for bad in [
            json!({"prompt_lookup": 1}),
            json!({"prompt_lookup": {"max_draft": 0}}),
            json!({"prompt_lookup": {"max_draft": 16}}),
            json!({"prompt_lookup": {"max_ngram": -1}}),
            json!({"prompt_lookup": {"ngram": 2}}),
        ] {
            let err = spec(bad.clone()).expect_err("refused");
            assert_eq!(err.param.as_deref(), Some("prompt_lookup"), "{bad}");
        }
    }
}
