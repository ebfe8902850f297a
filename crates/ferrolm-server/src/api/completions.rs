//! `POST /v1/completions`: raw prompts (strings or token arrays, one or many), with `echo` and
//! the legacy `logprobs` format that lm-evaluation-harness reads.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::backend::Backend;
use super::error::ApiError;
use super::json::{fields, parse_object};
use super::params::{CommonFields, GenSpec, Vocab, top_logprobs};
pub(crate) use super::prompt::PromptIn;
use super::prompt::prompt_list;
use super::response::{LegacyLogprobs, UsageSum, collect, completion_body, new_id, submit_all, unix_now};
use super::stream::{StreamHead, StreamKind, sse_response};
use super::{AppState, check_context, json_response};
use ferrolm::engine::GenRequest;

/// Most prompts in one request.
pub(crate) const MAX_PROMPTS: usize = 1024;
/// OpenAI's default `max_tokens` for completions.
pub(crate) const DEFAULT_MAX_TOKENS: usize = 16;

/// Fields only completions read.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct CompletionFields {
    prompt: Option<Value>,
    max_tokens: Option<i64>,
    logprobs: Option<i64>,
    echo: Option<bool>,
    suffix: Option<String>,
    best_of: Option<i64>,
}

/// A completions request ready to run.
pub(crate) struct CompletionJob {
    pub prompts: Vec<PromptIn>,
    pub spec: GenSpec,
    /// Alternatives per token, when `logprobs` is asked.
    pub logprobs: Option<usize>,
    pub echo: bool,
    pub model: String,
    /// Add `__verbose` to a whole answer ([`GenSpec::verbose`]).
    pub verbose: bool,
}

/// `prompt`: one prompt or many, in any of llama-server's forms ([`super::prompt`]); each
/// must have tokens.
pub(crate) fn prompts(backend: &dyn Backend, v: Option<&Value>) -> Result<Vec<PromptIn>, ApiError> {
    let out = prompt_list(backend, "prompt", v, MAX_PROMPTS)?;
    if let Some(i) = out.iter().position(|p| p.tokens.is_empty()) {
        return Err(ApiError::invalid_param(format!("prompt[{i}]"), "the prompt has no tokens"));
    }
    Ok(out)
}

/// Validates a completions request and tokenizes its prompts.
pub(crate) fn prepare(state: &AppState, v: &Value) -> Result<CompletionJob, ApiError> {
    let backend = state.backend.as_ref();
    let common: CommonFields = fields(v)?;
    let f: CompletionFields = fields(v)?;
    let mut spec =
        common.spec(&state.cfg.sampler, Vocab::of(backend), state.cfg.request_timeout(), state.cfg.draft)?;
    if f.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param("suffix", "`suffix` (fill-in-the-middle) is not supported"));
    }
    if let Some(b) = f.best_of
        && b != 1
        && b != spec.n as i64
    {
        return Err(ApiError::invalid_param("best_of", "`best_of` other than 1 or `n` is not supported"));
    }
    let echo = f.echo.unwrap_or(false);
    let prompts = prompts(backend, f.prompt.as_ref())?;
    let asked = common.max_new_tokens(f.max_tokens, backend.n_ctx(), echo)?;
    let max = state
        .cfg
        .generation_limit(asked, common.asks_server_default(), Some(DEFAULT_MAX_TOKENS))
        .unwrap_or(DEFAULT_MAX_TOKENS);
    for p in &prompts {
        check_context(backend, p.tokens.len(), Some(max))?;
    }
    spec.params.max_tokens = Some(max);
    let logprobs = top_logprobs("logprobs", f.logprobs)?;
    let verbose = spec.verbose(state.cfg.verbose)?;
    Ok(CompletionJob { prompts, spec, logprobs, echo, model: state.cfg.answer_model(common.model), verbose })
}

/// The engine requests: `n` per prompt, consecutive.
fn requests(job: &CompletionJob) -> Vec<GenRequest> {
    job.prompts
        .iter()
        .flat_map(|p| {
            (0..job.spec.n).map(move |i| GenRequest {
                prompt_logprobs: job.echo && job.logprobs.is_some(),
                ..job.spec.request(p.tokens.clone(), i, job.logprobs)
            })
        })
        .collect()
}

/// The handler.
pub(crate) async fn handle(state: AppState, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let job = prepare(&state, &v)?;
    let rxs = submit_all(state.backend.as_ref(), requests(&job), job.spec.timeout, job.spec.constraint_param)
        .await?;
    let id = new_id("cmpl-");
    let created = unix_now();
    if job.spec.stream {
        let echo = job.prompts.iter().map(|p| job.echo.then(|| (p.text.clone(), p.tokens.clone()))).collect();
        let head = StreamHead {
            id,
            created,
            model: job.model,
            n: job.spec.n,
            include_usage: job.spec.include_usage,
            live: job.spec.live,
        };
        return Ok(sse_response(state.backend.clone(), head, StreamKind::Completion { echo }, rxs));
    }
    let results = futures_util::future::try_join_all(rxs.into_iter().map(collect)).await?;
    let backend = state.backend.as_ref();
    let mut usage = UsageSum::default();
    let mut choices = Vec::with_capacity(results.len());
    for (i, c) in results.iter().enumerate() {
        let prompt = &job.prompts[i / job.spec.n];
        usage.add(&c.usage, i % job.spec.n == 0);
        let text = if job.echo { format!("{}{}", prompt.text, c.text) } else { c.text.clone() };
        let logprobs = job.logprobs.map(|_| {
            let mut l = LegacyLogprobs::new(0);
            if job.echo {
                l.push_prompt(backend, &prompt.tokens, c.prompt_logprobs.as_deref());
            }
            for lp in &c.logprobs {
                l.push(backend, lp.id, Some(lp));
            }
            l.to_json()
        });
        choices.push(json!({
            "index": i,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": c.finish.map_or("stop", |f| f.openai_reason()),
        }));
    }
    let mut body = completion_body("text_completion", &id, created, &job.model, choices, &usage);
    if job.verbose {
        let prompt = &job.prompts[0].text;
        body["__verbose"] =
            super::native::result_object(&job.spec, job.logprobs, &job.model, prompt, &results[0]);
    }
    Ok(json_response(StatusCode::OK, &body))
}
