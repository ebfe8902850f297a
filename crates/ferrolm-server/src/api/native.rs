//! `POST /completion`: llama-server's own completion endpoint, in its shape.
//!
//! A request takes the shared fields ([`CommonFields`]: sampling under llama-server's names,
//! `stop`, `seed`, `grammar`, `cache_prompt`…) and `prompt` (a string, token ids, or an array of
//! those for several prompts), `n_predict` (-1: until the context is full; default the server's
//! `--n-predict`, else no limit), `n_probs`, `return_tokens` and `response_fields`.
//!
//! The answer is one object per prompt (an array for several): `content`, `tokens` (with
//! `return_tokens`), `stop_type` (`eos`, `word`, `limit`, `none`), `stopping_word`, `timings`,
//! `generation_settings`, the counts, and `completion_probabilities` with `n_probs`. Streamed,
//! each token is a `{"content", "tokens", "stop": false, …}` event, and the last event is the
//! whole object with `"stop": true` and empty `content`. `response_fields` (paths such as
//! `generation_settings/n_predict`) keeps only those fields, keyed by their paths.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::backend::Backend;
use super::completions::{PromptIn, prompts};
use super::error::ApiError;
use super::json::{fields, parse_object};
use super::params::{CommonFields, GenSpec, Vocab, top_logprobs};
use super::response::{Collected, Live, UsageSum, collect, submit_all};
use super::stream_session;
use super::{AppState, check_context, json_response};
use ferrolm::decoder::{FinishReason, TokenLogprob};
use ferrolm::engine::{Event, GenRequest, RequestHandle};
use ferrolm::sampling::SamplerParams;

/// The fields only `/completion` reads.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct NativeFields {
    prompt: Option<Value>,
    max_tokens: Option<i64>,
    n_probs: Option<i64>,
    return_tokens: Option<bool>,
    response_fields: Option<Vec<String>>,
}

/// A `/completion` request ready to run.
pub(crate) struct NativeJob {
    prompts: Vec<PromptIn>,
    spec: GenSpec,
    n_probs: Option<usize>,
    return_tokens: bool,
    response_fields: Vec<String>,
    model: String,
}

fn prepare(state: &AppState, v: &Value) -> Result<NativeJob, ApiError> {
    let f: NativeFields = fields(v)?;
    prepare_with(state, v, |_| prompts(state.backend.as_ref(), f.prompt.as_ref()))
}

/// A `/completion`-style request whose prompts `make_prompts` builds (given the most tokens the
/// request may generate, `None` for up to the context's end): the sampling fields, limits and
/// answer options of `/completion`.
pub(crate) fn prepare_with(
    state: &AppState,
    v: &Value,
    make_prompts: impl FnOnce(Option<usize>) -> Result<Vec<PromptIn>, ApiError>,
) -> Result<NativeJob, ApiError> {
    let backend = state.backend.as_ref();
    let common: CommonFields = fields(v)?;
    let f: NativeFields = fields(v)?;
    if common.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid_param("n", "`/completion` gives one completion per prompt (n = 1)"));
    }
    let mut spec =
        common.spec(&state.cfg.sampler, Vocab::of(backend), state.cfg.request_timeout(), state.cfg.draft)?;
    let asked = common.max_new_tokens(f.max_tokens, backend.n_ctx(), true)?;
    let max = state.cfg.generation_limit(asked, common.asks_server_default(), None);
    let prompts = make_prompts(max)?;
    for p in &prompts {
        check_context(backend, p.tokens.len(), max)?;
    }
    spec.params.max_tokens = max;
    let n_probs = top_logprobs("n_probs", f.n_probs)?.filter(|&k| k > 0);
    Ok(NativeJob {
        prompts,
        spec,
        n_probs,
        return_tokens: f.return_tokens.unwrap_or(false),
        response_fields: f.response_fields.unwrap_or_default(),
        model: state.cfg.answer_model(common.model),
    })
}

fn requests(job: &NativeJob) -> Vec<GenRequest> {
    job.prompts.iter().map(|p| job.spec.request(p.tokens.clone(), 0, job.n_probs)).collect()
}

/// llama-server's `stop_type`.
fn stop_type(finish: Option<FinishReason>) -> &'static str {
    match finish {
        Some(FinishReason::EndOfGeneration) => "eos",
        Some(FinishReason::StopString) => "word",
        Some(FinishReason::Length | FinishReason::ContextFull | FinishReason::Timeout) => "limit",
        Some(FinishReason::Cancelled) | None => "none",
    }
}

/// The settings a request runs with (llama-server's `generation_settings`; `/props` shows the
/// server's defaults this way).
pub(crate) fn generation_settings(spec: &GenSpec, n_probs: Option<usize>) -> Value {
    let p = &spec.params;
    let s: &SamplerParams = &p.sampler;
    // llama-server's shape; a ban (-inf) is null.
    let bias: Vec<Value> = s
        .logit_bias
        .iter()
        .map(|&(id, b)| json!({"bias": b.is_finite().then_some(b), "token": id}))
        .collect();
    json!({
        "n_predict": p.max_tokens.map_or(-1, |m| m as i64),
        // llama.cpp's LLAMA_DEFAULT_SEED stands for "a random seed".
        "seed": s.seed.unwrap_or(u64::from(u32::MAX)),
        "temperature": s.temperature,
        "dynatemp_range": s.dynatemp_range,
        "dynatemp_exponent": s.dynatemp_exponent,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "top_n_sigma": s.top_n_sigma,
        "xtc_probability": s.xtc_probability,
        "xtc_threshold": s.xtc_threshold,
        "typical_p": s.typical_p,
        "repeat_last_n": s.penalty_last_n,
        "repeat_penalty": s.repeat_penalty,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "dry_multiplier": s.dry_multiplier,
        "dry_base": s.dry_base,
        "dry_allowed_length": s.dry_allowed_length,
        "dry_penalty_last_n": s.dry_penalty_last_n,
        "dry_sequence_breakers": s.dry_sequence_breakers,
        "mirostat": s.mirostat,
        "mirostat_tau": s.mirostat_tau,
        "mirostat_eta": s.mirostat_eta,
        "min_keep": s.min_keep,
        "samplers": s.order.iter().map(|step| step.name()).collect::<Vec<_>>(),
        "logit_bias": bias,
        "stop": p.stop,
        "ignore_eos": p.ignore_eos,
        "stream": spec.stream,
        "n_probs": n_probs.unwrap_or(0),
        "cache_prompt": !spec.fresh_prompt,
        "speculative.n_max": spec.draft.map_or(0, |d| d.max_draft),
        "speculative.n_min": spec.draft.map_or(0, |d| d.min_draft),
        "speculative.p_min": spec.draft.map_or(0.0, |d| d.p_min),
    })
}

/// One token's `completion_probabilities` entry: the token and its best alternatives.
fn probs_entry(backend: &dyn Backend, lp: &TokenLogprob, post_sampling: bool) -> Value {
    // After sampling, llama-server gives probabilities (`prob`, `top_probs`).
    let (key, top_key) = if post_sampling { ("prob", "top_probs") } else { ("logprob", "top_logprobs") };
    let one = |id: u32, logprob: f32| {
        let bytes = backend.piece(id);
        let value = match (post_sampling, logprob.is_finite()) {
            (true, _) => logprob.exp(),
            (false, true) => logprob,
            (false, false) => -9999.0,
        };
        json!({"id": id, "token": String::from_utf8_lossy(&bytes), "bytes": bytes, key: value})
    };
    let mut v = one(lp.id, lp.logprob);
    v[top_key] = lp.top.iter().map(|&(id, l)| one(id, l)).collect();
    v
}

/// The final object of prompt `index` (`content` and `tokens` empty when streamed).
fn final_object(
    backend: &dyn Backend,
    job: &NativeJob,
    index: usize,
    c: &Collected,
    streamed: bool,
) -> Value {
    let mut v = result_object(&job.spec, job.n_probs, &job.model, &job.prompts[index].text, c);
    v["index"] = json!(index);
    if streamed {
        v["content"] = json!("");
    } else if job.return_tokens {
        v["tokens"] = json!(c.tokens);
    }
    if job.n_probs.is_some() && !streamed {
        v["completion_probabilities"] =
            c.logprobs.iter().map(|lp| probs_entry(backend, lp, job.spec.post_sampling_probs)).collect();
    }
    select_fields(v, &job.response_fields)
}

/// llama-server's native result of one generation from `prompt` (the text the model read):
/// `/completion`'s final object without its `index`, `tokens` and probabilities, and the
/// `__verbose` object of the OpenAI routes' answers.
pub(crate) fn result_object(
    spec: &GenSpec,
    n_probs: Option<usize>,
    model: &str,
    prompt: &str,
    c: &Collected,
) -> Value {
    let mut usage = UsageSum::default();
    usage.add(&c.usage, true);
    json!({
        "index": 0,
        "content": c.text,
        "tokens": [],
        "id_slot": c.usage.slot.map_or(-1, |s| s as i64),
        "stop": true,
        "model": model,
        "tokens_predicted": c.usage.completion_tokens,
        "tokens_evaluated": c.usage.prompt_tokens,
        "generation_settings": generation_settings(spec, n_probs),
        "prompt": prompt,
        "has_new_line": c.text.contains('\n'),
        // A prompt that does not fit is refused, never cut.
        "truncated": false,
        "stop_type": stop_type(c.finish),
        "stopping_word": c.stop_word.clone().unwrap_or_default(),
        "tokens_cached": c.usage.prompt_tokens + c.usage.completion_tokens,
        "timings": usage.timings_json(),
    })
}

/// `response_fields`: only the given paths (`a/b` reads `v["a"]["b"]`), keyed by their paths;
/// everything when none is given. A path that is not there is left out.
fn select_fields(v: Value, paths: &[String]) -> Value {
    if paths.is_empty() {
        return v;
    }
    let mut out = Map::new();
    for path in paths {
        let found = path.split('/').try_fold(&v, |node, key| node.get(key));
        if let Some(x) = found {
            out.insert(path.clone(), x.clone());
        }
    }
    Value::Object(out)
}

/// The handler.
pub(crate) async fn handle(state: AppState, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let job = prepare(&state, &v)?;
    run(state, job).await
}

/// Runs a prepared job and answers it (streamed or whole).
pub(crate) async fn run(state: AppState, job: NativeJob) -> Result<Response, ApiError> {
    let rxs = submit_all(state.backend.as_ref(), requests(&job), job.spec.timeout, job.spec.constraint_param)
        .await?;
    if job.spec.stream {
        return Ok(stream_response(state, job, rxs));
    }
    let results = futures_util::future::try_join_all(rxs.into_iter().map(collect)).await?;
    let backend = state.backend.as_ref();
    let mut objects: Vec<Value> =
        results.iter().enumerate().map(|(i, c)| final_object(backend, &job, i, c, false)).collect();
    let body = if objects.len() == 1 { objects.remove(0) } else { Value::Array(objects) };
    Ok(json_response(StatusCode::OK, &body))
}

/// A streamed partial result (a token's, or a progress report's with no token).
fn partial(i: usize, text: &str, tokens: &[u32], n_predicted: usize, n_prompt: usize) -> Value {
    json!({
        "index": i,
        "content": text,
        "tokens": tokens,
        "stop": false,
        "tokens_predicted": n_predicted,
        "tokens_evaluated": n_prompt,
    })
}

/// The streamed answer: an event per token, then each prompt's final object. An engine error
/// ends the stream with an `{"error": …}` event.
fn stream_response(state: AppState, job: NativeJob, rxs: Vec<RequestHandle>) -> Response {
    let n = rxs.len();
    let events = stream::select_all(
        rxs.into_iter().enumerate().map(|(i, rx)| StreamExt::map(rx, move |ev| (i, ev)).boxed()),
    );
    // Per prompt: what its stream has produced so far, and its live reports.
    let progress: Vec<(Collected, Live)> =
        (0..n).map(|_| (Collected::default(), Live::new(job.spec.live))).collect();
    let init = (events, progress, job, state, false);
    let body = stream::unfold(init, |(mut events, mut progress, job, state, ended)| async move {
        if ended {
            return None;
        }
        let (i, ev) = events.next().await?;
        let backend = state.backend.as_ref();
        let (p, live) = &mut progress[i];
        let (data, end) = match ev {
            Event::PromptLogprobs(_) => (None, false),
            Event::Progress { processed, usage } => match live.progress(processed, usage) {
                Some(report) => {
                    let mut v = partial(i, "", &[], p.tokens.len(), usage.prompt_tokens);
                    v["prompt_progress"] = report;
                    live.annotate(&mut v);
                    (Some(v), false)
                }
                None => (None, false),
            },
            Event::Token { id, text, logprob } => {
                live.token();
                p.tokens.push(id);
                p.text.push_str(&text);
                let mut v = partial(i, &text, &[id], p.tokens.len(), job.prompts[i].tokens.len());
                live.annotate(&mut v);
                if let Some(lp) = &logprob {
                    v["completion_probabilities"] =
                        json!([probs_entry(backend, lp, job.spec.post_sampling_probs)]);
                }
                (Some(v), false)
            }
            Event::Done { text, finish, usage, stop_word } => {
                p.text.push_str(&text);
                p.finish = Some(finish);
                p.usage = usage;
                p.stop_word = stop_word;
                let mut last = final_object(backend, &job, i, p, true);
                if !text.is_empty() && last.get("content").is_some() {
                    last["content"] = json!(text);
                }
                (Some(last), false)
            }
            Event::Error(m) => (Some(ApiError::internal(m).body()), true),
            Event::Refused(e) => (Some(ApiError::from(e).body()), true),
        };
        let item = data.map(|d| d.to_string());
        Some((item, (events, progress, job, state, end)))
    })
    .filter_map(|x| async move { x });
    // A resumable stream (`X-Conversation-Id`): the generation outlives the client.
    if let Some(session) = stream_session::start_current() {
        stream_session::produce(session.clone(), body.boxed());
        return stream_session::reader_response(session, 0);
    }
    let body = body.map(|d| Ok::<sse::Event, Infallible>(sse::Event::default().data(d)));
    Sse::new(body).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}
