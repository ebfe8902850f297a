//! Contexts: one sequence's KV cache over a model (a `ferrolm::session::Session`), with blocking
//! generation on a dirty scheduler and streaming from a Rust thread.

use std::sync::{Arc, Mutex, MutexGuard};

use ferrolm::decoder::GenerateParams;
use ferrolm::model::Model;
use ferrolm::session::{GenerationStats, Session, StreamEvent};
use rustler::{Encoder, Env, LocalPid, NifResult, ResourceArc, Term};

use crate::model::ModelRes;
use crate::stream::{DoneInfo, Outbox, done_map, done_msg, error_msg, token_msg};
use crate::{atoms, err, opts};

/// A context. `session` borrows the model that `_model` keeps alive; fields drop in order, so
/// the session goes first.
pub(crate) struct ContextRes {
    session: Mutex<Session<'static>>,
    _model: Arc<Model>,
}

#[rustler::resource_impl]
impl rustler::Resource for ContextRes {}

impl ContextRes {
    fn lock(&self) -> MutexGuard<'_, Session<'static>> {
        // A panic during a generation leaves a session whose tokens are still consistent.
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A stream's control, returned to Elixir: closing it stops the generation.
pub(crate) struct StreamRes {
    pub(crate) outbox: Arc<Outbox>,
    cancel: Mutex<Option<ferrolm::session::CancelHandle>>,
}

#[rustler::resource_impl]
impl rustler::Resource for StreamRes {}

impl StreamRes {
    fn cancel(&self) {
        self.outbox.close();
        if let Some(c) = self.cancel.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            c.cancel();
        }
    }
}

impl Drop for StreamRes {
    fn drop(&mut self) {
        self.cancel();
    }
}

#[rustler::nif(schedule = "DirtyCpu")]
fn context_create<'a>(env: Env<'a>, m: ResourceArc<ModelRes>, options: Term<'a>) -> NifResult<Term<'a>> {
    let opts = opts::session_options(options).map_err(err)?;
    let model = m.model.clone();
    // SAFETY: the model lives in an `Arc` that the context holds (`_model`) for as long as the
    // session, which is declared first and so dropped first; the model never moves.
    let model_ref: &'static Model = unsafe { &*Arc::as_ptr(&model) };
    let session = Session::new(model_ref, opts).map_err(err)?;
    Ok((atoms::ok(), ResourceArc::new(ContextRes { session: Mutex::new(session), _model: model }))
        .encode(env))
}

fn done_info(stats: &GenerationStats) -> DoneInfo {
    DoneInfo {
        finish: Some(stats.finish),
        prompt_tokens: stats.n_prompt,
        cached_tokens: stats.n_cached,
        completion_tokens: stats.n_generated,
        queue_ms: 0.0,
        prompt_ms: stats.prompt_time.as_secs_f64() * 1e3,
        decode_ms: stats.decode_time.as_secs_f64() * 1e3,
    }
}

/// Generates from `tokens` (the whole prompt; the cached prefix is reused): `{:ok, text, ids, info}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn context_generate<'a>(
    env: Env<'a>,
    c: ResourceArc<ContextRes>,
    tokens: Vec<u32>,
    params: Term<'a>,
) -> NifResult<Term<'a>> {
    let params = opts::generate_params(params).map_err(err)?;
    let out = c.lock().generate_tokens(&tokens, &params).map_err(err)?;
    Ok((atoms::ok(), out.text, out.tokens, done_map(env, &done_info(&out.stats))).encode(env))
}

/// Starts a generation on a Rust thread that sends `{:ferrolm_stream, id, {:token, text}}` for
/// each piece of text, then `{..., {:done, rest, info}}` or `{..., {:error, message}}`.
#[rustler::nif]
fn context_stream(
    c: ResourceArc<ContextRes>,
    tokens: Vec<u32>,
    params: Term,
    pid: LocalPid,
    id: u64,
) -> NifResult<ResourceArc<StreamRes>> {
    let params = opts::generate_params(params).map_err(err)?;
    let res =
        ResourceArc::new(StreamRes { outbox: Arc::new(Outbox::new(pid, id)), cancel: Mutex::new(None) });
    let ctl = res.clone();
    std::thread::Builder::new()
        .name("ferrolm-stream".into())
        .spawn(move || {
            let outbox = ctl.outbox.clone();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_stream(&c, &ctl, &tokens, &params)
            }));
            let failure = match run {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some("the generation panicked".to_string()),
            };
            if let Some(e) = failure {
                outbox.send(error_msg(e));
            }
        })
        .map_err(|e| err(format!("cannot start a thread: {e}")))?;
    Ok(res)
}

fn run_stream(
    c: &ContextRes,
    ctl: &StreamRes,
    tokens: &[u32],
    params: &GenerateParams,
) -> Result<(), String> {
    let mut session = c.lock();
    *ctl.cancel.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.cancel_handle());
    if ctl.outbox.is_closed() {
        return Ok(());
    }
    let stream = session.stream_tokens(tokens, params).map_err(|e| e.to_string())?;
    for event in stream {
        let sent = match event.map_err(|e| e.to_string())? {
            StreamEvent::Token { text, .. } if text.is_empty() => !ctl.outbox.is_closed(),
            StreamEvent::Token { text, .. } => ctl.outbox.send(token_msg(text)),
            StreamEvent::Finished { text, stats, .. } => {
                ctl.outbox.send(done_msg(text, done_info(&stats)));
                return Ok(());
            }
        };
        if !sent {
            // Dropping the stream stops the generation.
            return Ok(());
        }
    }
    Ok(())
}

/// Stops a stream: no message of it is sent after this returns.
#[rustler::nif]
fn stream_cancel(s: ResourceArc<StreamRes>) -> rustler::Atom {
    s.cancel();
    atoms::ok()
}

/// Forgets every cached token.
#[rustler::nif(schedule = "DirtyCpu")]
fn context_clear(c: ResourceArc<ContextRes>) -> rustler::Atom {
    c.lock().reset();
    atoms::ok()
}

/// `%{n_ctx, n_tokens, kv_len, kv_bytes, tokens}` (waits for a running stream to stop).
#[rustler::nif(schedule = "DirtyCpu")]
fn context_info(env: Env, c: ResourceArc<ContextRes>) -> Term {
    let s = c.lock();
    let pairs: [(&str, Term); 5] = [
        ("n_ctx", s.n_ctx().encode(env)),
        ("n_tokens", s.tokens().len().encode(env)),
        ("kv_len", s.kv_len().encode(env)),
        ("kv_bytes", s.kv_memory_bytes().encode(env)),
        ("tokens", s.tokens().encode(env)),
    ];
    crate::stream::atom_map(env, &pairs)
}

/// The tokens of a rendered chat prompt.
#[rustler::nif(schedule = "DirtyCpu")]
fn chat_prompt_tokens<'a>(
    m: ResourceArc<ModelRes>,
    messages: Term<'a>,
    template: Option<String>,
    kwargs: Term<'a>,
) -> NifResult<(String, Vec<u32>)> {
    let prompt = crate::model::render_chat(&m.model, messages, template, kwargs).map_err(err)?;
    let tokens = crate::model::chat_tokens(&m.model, &prompt).map_err(err)?;
    Ok((prompt, tokens))
}
