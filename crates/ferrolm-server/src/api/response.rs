//! Collecting a generation's events and the pieces of OpenAI responses built from them: ids,
//! `usage`, llama-server's `timings`, and log-probabilities in the chat and legacy formats.

use std::time::{Duration, Instant};

use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::{Map, Value, json};

use super::backend::{Backend, piece_text};
use super::error::ApiError;
use super::params::LiveReports;
use ferrolm::decoder::{FinishReason, TokenLogprob};
use ferrolm::engine::{Event, GenRequest, RequestHandle, SubmitError, Usage};

/// The build, in llama.cpp's `build_info` shape (`b<build>-<commit>`): the crate version and
/// the git commit built from. It is every response's `system_fingerprint` and `/props`'s
/// `build_info`.
pub(crate) fn fingerprint() -> String {
    format!("b{}-{}", env!("CARGO_PKG_VERSION"), env!("FERROLM_COMMIT"))
}

/// A response id: `prefix` and 24 random letters and digits.
pub(crate) fn new_id(prefix: &str) -> String {
    let r: String = rand::rng().sample_iter(&Alphanumeric).take(24).map(char::from).collect();
    format!("{prefix}{r}")
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One finished generation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Collected {
    /// All its text.
    pub text: String,
    /// Generated tokens' log-probabilities (when asked).
    pub logprobs: Vec<TokenLogprob>,
    /// Prompt tokens' log-probabilities (when asked).
    pub prompt_logprobs: Option<Vec<Option<TokenLogprob>>>,
    /// Why it ended.
    pub finish: Option<FinishReason>,
    /// Counts and timings.
    pub usage: Usage,
    /// The stop string that ended it, if one did.
    pub stop_word: Option<String>,
    /// The generated tokens.
    pub tokens: Vec<u32>,
}

/// Reads events until `Done`; an engine error, or a channel closed before `Done`, is an error.
pub(crate) async fn collect(mut rx: RequestHandle) -> Result<Collected, ApiError> {
    let mut out = Collected::default();
    while let Some(ev) = rx.next_event().await {
        match ev {
            Event::PromptLogprobs(p) => out.prompt_logprobs = Some(p),
            Event::Progress { .. } => {}
            Event::Token { id, text, logprob } => {
                out.tokens.push(id);
                out.text.push_str(&text);
                out.logprobs.extend(logprob);
            }
            Event::Done { text, finish, usage, stop_word } => {
                out.text.push_str(&text);
                out.finish = Some(finish);
                out.usage = usage;
                out.stop_word = stop_word;
                return Ok(out);
            }
            Event::Error(m) => return Err(ApiError::internal(m)),
            Event::Refused(e) => return Err(e.into()),
        }
    }
    Err(ApiError::internal("the engine stopped before the request finished"))
}

/// Queues every request. When the queue fills after some of them were accepted, waits for room
/// (the accepted ones run meanwhile) until `deadline`; the first one refused is the answer's
/// error (and the accepted ones are cancelled by dropping their handles). A constraint that does
/// not compile is the fault of the field `constraint_param` when one is given.
pub(crate) async fn submit_all(
    backend: &dyn Backend,
    reqs: Vec<GenRequest>,
    timeout: Option<Duration>,
    constraint_param: Option<&str>,
) -> Result<Vec<RequestHandle>, ApiError> {
    let start = Instant::now();
    let mut rxs = Vec::with_capacity(reqs.len());
    for req in reqs {
        loop {
            match backend.submit(req.clone()) {
                Ok(rx) => {
                    rxs.push(rx);
                    break;
                }
                Err(SubmitError::QueueFull { .. })
                    if !rxs.is_empty() && timeout.is_none_or(|t| start.elapsed() < t) =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(SubmitError::Constraint(m)) => {
                    return Err(match constraint_param {
                        Some(param) => ApiError::invalid_param(param, m),
                        None => ApiError::invalid(m),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(rxs)
}

/// The body of a non-streamed completion (`object`: `chat.completion` or `text_completion`).
pub(crate) fn completion_body(
    object: &str,
    id: &str,
    created: u64,
    model: &str,
    choices: Vec<Value>,
    usage: &UsageSum,
) -> Value {
    json!({
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint(),
        "choices": choices,
        "usage": usage.usage_json(),
        "timings": usage.timings_json(),
    })
}

/// Token counts of a whole response (timings: the slowest choice's).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct UsageSum(Usage);

impl UsageSum {
    /// Adds one choice; its prompt counts only when `new_prompt` (the `n` choices of one prompt
    /// share it).
    pub(crate) fn add(&mut self, u: &Usage, new_prompt: bool) {
        if new_prompt {
            self.0.prompt_tokens += u.prompt_tokens;
            self.0.cached_tokens += u.cached_tokens;
        }
        self.0.completion_tokens += u.completion_tokens;
        self.0.draft_tokens += u.draft_tokens;
        self.0.draft_accepted += u.draft_accepted;
        self.0.queue_ms = self.0.queue_ms.max(u.queue_ms);
        self.0.prompt_ms = self.0.prompt_ms.max(u.prompt_ms);
        self.0.decode_ms = self.0.decode_ms.max(u.decode_ms);
    }

    /// OpenAI's `usage`.
    pub(crate) fn usage_json(&self) -> Value {
        json!({
            "prompt_tokens": self.0.prompt_tokens,
            "completion_tokens": self.0.completion_tokens,
            "total_tokens": self.0.prompt_tokens + self.0.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.0.cached_tokens},
        })
    }

    /// llama-server's `timings`, with `draft_n` and `draft_n_accepted` when the request drafted.
    pub(crate) fn timings_json(&self) -> Value {
        let per_s = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        let per_token_ms = |n: usize, ms: f64| if n > 0 { ms / n as f64 } else { 0.0 };
        let prompt_n = self.0.prompt_tokens.saturating_sub(self.0.cached_tokens);
        let decode_steps = self.0.completion_tokens.saturating_sub(1);
        let mut t = json!({
            "queue_ms": self.0.queue_ms,
            "cache_n": self.0.cached_tokens,
            "prompt_n": prompt_n,
            "prompt_ms": self.0.prompt_ms,
            "prompt_per_second": per_s(prompt_n, self.0.prompt_ms),
            "prompt_per_token_ms": per_token_ms(prompt_n, self.0.prompt_ms),
            "predicted_n": self.0.completion_tokens,
            "predicted_ms": self.0.decode_ms,
            // The first token comes with the prompt's last pass: the generation time covers
            // the decode steps of the others.
            "predicted_per_second": per_s(decode_steps, self.0.decode_ms),
            "predicted_per_token_ms": per_token_ms(decode_steps, self.0.decode_ms),
        });
        if self.0.draft_tokens > 0 {
            t["draft_n"] = json!(self.0.draft_tokens);
            t["draft_n_accepted"] = json!(self.0.draft_accepted);
        }
        t
    }
}

/// One streamed request's live reports ([`LiveReports`]): what its [`Event::Progress`] events
/// become in the chunks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Live {
    asked: LiveReports,
    /// The latest progress: prompt tokens in, and the counts.
    latest: Option<(usize, Usage)>,
    /// The prompt position of the last `prompt_progress` sent.
    reported: Option<usize>,
    /// A token came: the prompt is in.
    generating: bool,
}

impl Live {
    pub(crate) fn new(asked: LiveReports) -> Self {
        Live { asked, ..Live::default() }
    }

    /// Takes a progress event; returns the `prompt_progress` object to send now, if any: while
    /// the prompt runs, when it has moved since the last one (the first one is the cached prefix).
    pub(crate) fn progress(&mut self, processed: usize, usage: Usage) -> Option<Value> {
        self.latest = Some((processed, usage));
        if !self.asked.progress || self.generating || self.reported.is_some_and(|r| processed <= r) {
            return None;
        }
        self.reported = Some(processed);
        Some(json!({
            "total": usage.prompt_tokens,
            "cache": usage.cached_tokens,
            "processed": processed,
            "time_ms": usage.prompt_ms,
        }))
    }

    /// A token came: the prompt is in (no more `prompt_progress`).
    pub(crate) fn token(&mut self) {
        self.generating = true;
    }

    /// Puts llama-server's `timings` as of the latest progress on chunk `v`, when they were
    /// asked (`timings_per_token`).
    pub(crate) fn annotate(&self, v: &mut Value) {
        if let Some(t) = self.timings() {
            v["timings"] = t;
        }
    }

    /// The `timings` as of the latest progress, when they were asked (the prompt counted as
    /// far as it has run).
    fn timings(&self) -> Option<Value> {
        let (processed, usage) = self.latest.filter(|_| self.asked.timings)?;
        let mut sum = UsageSum::default();
        sum.add(&Usage { prompt_tokens: processed, ..usage }, true);
        Some(sum.timings_json())
    }
}

/// One entry of chat `logprobs.content`: `{token, logprob, bytes, top_logprobs}`.
pub(crate) fn chat_logprob(backend: &dyn Backend, lp: &TokenLogprob) -> Value {
    let entry = |id: u32, logprob: f32| {
        let bytes = backend.piece(id);
        json!({
            "token": String::from_utf8_lossy(&bytes),
            "logprob": finite(logprob),
            "bytes": bytes,
        })
    };
    let mut v = entry(lp.id, lp.logprob);
    let top: Vec<Value> = lp.top.iter().map(|&(id, l)| entry(id, l)).collect();
    v["top_logprobs"] = Value::Array(top);
    v
}

/// A log-probability as JSON: `-inf` (an impossible token) becomes -9999 as OpenAI does.
fn finite(x: f32) -> Value {
    if x.is_finite() { json!(x) } else { json!(-9999.0) }
}

/// The legacy completions `logprobs`: `{tokens, token_logprobs, top_logprobs, text_offset}`,
/// for the prompt tokens (`echo`, the first one `null`) then the generated ones. `text_offset`
/// counts characters of the returned text from `offset0`.
pub(crate) struct LegacyLogprobs {
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
    offset: usize,
}

impl LegacyLogprobs {
    /// Empty, offsets starting at `offset0`.
    pub(crate) fn new(offset0: usize) -> LegacyLogprobs {
        LegacyLogprobs {
            tokens: Vec::new(),
            token_logprobs: Vec::new(),
            top_logprobs: Vec::new(),
            text_offset: Vec::new(),
            offset: offset0,
        }
    }

    /// Adds a token: its id and, when known, its log-probability.
    pub(crate) fn push(&mut self, backend: &dyn Backend, id: u32, lp: Option<&TokenLogprob>) {
        let text = piece_text(backend, id);
        self.text_offset.push(self.offset);
        self.offset += text.chars().count();
        self.tokens.push(Value::String(text));
        match lp {
            Some(lp) => {
                self.token_logprobs.push(finite(lp.logprob));
                let mut top = Map::new();
                for &(tid, l) in &lp.top {
                    top.entry(piece_text(backend, tid)).or_insert_with(|| finite(l));
                }
                self.top_logprobs.push(Value::Object(top));
            }
            None => {
                self.token_logprobs.push(Value::Null);
                self.top_logprobs.push(Value::Null);
            }
        }
    }

    /// Adds the prompt tokens with their log-probabilities (`None` for the first).
    pub(crate) fn push_prompt(
        &mut self,
        backend: &dyn Backend,
        prompt: &[u32],
        lps: Option<&[Option<TokenLogprob>]>,
    ) {
        for (i, &id) in prompt.iter().enumerate() {
            let lp = lps.and_then(|l| l.get(i)).and_then(Option::as_ref);
            self.push(backend, id, lp);
        }
    }

    /// The character offset after the last token.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// Whether no token was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The JSON object.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        })
    }
}
