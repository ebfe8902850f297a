//! Servers: a `ferrolm::engine::Engine` (continuous batching, chunked prefill, a prefix cache
//! shared by all slots), whose request events go straight from the engine thread to the caller
//! process through a waker (no thread per request).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ferrolm::engine::{
    BatchStrategy, Engine, EngineConfig, EngineHooks, Event, GenRequest, RequestHandle, SlotState,
    SubmitError, TickReport,
};
use futures_core::Stream;
use rustler::{Encoder, Env, LocalPid, NifResult, OwnedEnv, ResourceArc, Term};

use crate::model::ModelRes;
use crate::stream::{DoneInfo, Outbox, atom_map, done_msg, error_msg, token_msg};
use crate::{atoms, err, opts};

/// A running engine; dropping the last reference shuts it down.
pub(crate) struct ServerRes {
    engine: Engine,
}

#[rustler::resource_impl]
impl rustler::Resource for ServerRes {}

impl Drop for ServerRes {
    fn drop(&mut self) {
        self.engine.shutdown();
        self.engine.cancel_all();
    }
}

/// Starts an engine. `strategy_pid`: a process that answers `{:ferrolm_plan, ...}` for each
/// tick; `tick_pid`: a process that gets `{:ferrolm_tick, measurements}` after each tick.
#[rustler::nif(schedule = "DirtyCpu")]
fn server_start<'a>(
    env: Env<'a>,
    m: ResourceArc<ModelRes>,
    config: Term<'a>,
    strategy_pid: Option<LocalPid>,
    tick_pid: Option<LocalPid>,
) -> NifResult<Term<'a>> {
    let cfg = engine_config(config).map_err(err)?;
    let mut hooks = EngineHooks::default();
    let mut reply = None;
    if let Some(pid) = strategy_pid {
        let timeout = opts::get::<u64>(config, "strategy_timeout_ms").map_err(err)?.unwrap_or(100);
        let (s, r) = crate::strategy::bridge(pid, Duration::from_millis(timeout));
        hooks.strategy = Some(Box::new(s));
        reply = Some(r);
    }
    if let Some(pid) = tick_pid {
        let mut owned = OwnedEnv::new();
        hooks.on_tick = Some(Box::new(move |r: &TickReport| {
            let _ = owned.send_and_clear(&pid, |e| (atoms::ferrolm_tick(), tick_map(e, r)).encode(e));
        }));
    }
    let engine = Engine::start_with_hooks(m.model.clone(), cfg, hooks).map_err(err)?;
    Ok((atoms::ok(), ResourceArc::new(ServerRes { engine }), reply).encode(env))
}

fn engine_config(t: Term) -> Result<EngineConfig, String> {
    let mut c = EngineConfig::default();
    let usize_opt = |key: &str| opts::get::<u64>(t, key).map(|v| v.map(|n| n as usize));
    c.n_slots = usize_opt("n_parallel")?.unwrap_or(c.n_slots);
    c.n_ctx = usize_opt("n_ctx")?.unwrap_or(c.n_ctx);
    c.chunk_size = usize_opt("chunk_size")?.unwrap_or(c.chunk_size);
    c.max_queue = usize_opt("max_queue")?.unwrap_or(c.max_queue);
    c.prefix_cache_bytes = usize_opt("prefix_cache_bytes")?.unwrap_or(c.prefix_cache_bytes);
    if opts::get::<bool>(t, "cache_prompt")? == Some(false) {
        c.prefix_cache_bytes = 0;
    }
    if let Some(s) = opts::get::<String>(t, "batch_strategy")? {
        c.strategy = BatchStrategy::from_name(&s).ok_or(format!(
            "batch_strategy: unknown strategy {s:?} (decode-first, prefill-first, balanced)"
        ))?;
    }
    let (k, v, cache) = opts::kv_options(t)?;
    (c.type_k, c.type_v, c.cache) = (k.unwrap_or(c.type_k), v.unwrap_or(c.type_v), cache);
    Ok(c)
}

fn tick_map<'a>(e: Env<'a>, r: &TickReport) -> Term<'a> {
    atom_map(
        e,
        &[
            ("batch_tokens", r.batch_tokens.encode(e)),
            ("prompt_tokens", r.prompt_tokens.encode(e)),
            ("generated_tokens", r.generated_tokens.encode(e)),
            ("busy_slots", r.busy_slots.encode(e)),
            ("queue_depth", r.queue_depth.encode(e)),
            ("plan_us", (r.plan_time.as_secs_f64() * 1e6).encode(e)),
            ("duration_us", (r.run_time.as_secs_f64() * 1e6).encode(e)),
        ],
    )
}

/// Forwards a request's events to the caller, driven by the handle's waker on the engine thread.
struct Forward {
    outbox: Outbox,
    handle: Mutex<Option<RequestHandle>>,
}

impl Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.pump();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.pump();
    }
}

impl Forward {
    /// Sends every event queued; registers for the next one. Dropping the handle (at the end, or
    /// when the caller is gone) cancels the request.
    fn pump(self: &Arc<Self>) {
        let mut guard = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        let Some(handle) = guard.as_mut() else { return };
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        loop {
            match Pin::new(&mut *handle).poll_next(&mut cx) {
                Poll::Ready(Some(event)) => {
                    if !self.forward(event) {
                        *guard = None;
                        return;
                    }
                }
                Poll::Ready(None) => {
                    *guard = None;
                    return;
                }
                Poll::Pending => return,
            }
        }
    }

    /// Sends one event; whether more may follow.
    fn forward(&self, event: Event) -> bool {
        match event {
            Event::Token { text, .. } if text.is_empty() => !self.outbox.is_closed(),
            Event::Token { text, .. } => self.outbox.send(token_msg(text)),
            Event::Done { text, finish, usage, .. } => {
                let info = DoneInfo {
                    finish: Some(finish),
                    prompt_tokens: usage.prompt_tokens,
                    cached_tokens: usage.cached_tokens,
                    completion_tokens: usage.completion_tokens,
                    queue_ms: usage.queue_ms,
                    prompt_ms: usage.prompt_ms,
                    decode_ms: usage.decode_ms,
                };
                self.outbox.send(done_msg(text, info));
                false
            }
            Event::Error(e) => {
                self.outbox.send(error_msg(e));
                false
            }
            Event::Refused(e) => {
                self.outbox.send(error_msg(e.to_string()));
                false
            }
            Event::PromptLogprobs(_) | Event::Progress { .. } => true,
        }
    }

    fn cancel(&self) {
        self.outbox.close();
        // Dropping the handle cancels the request; its slot is freed on the next tick.
        drop(self.handle.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

/// A submitted request's control.
pub(crate) struct RequestRes {
    fwd: Arc<Forward>,
}

#[rustler::resource_impl]
impl rustler::Resource for RequestRes {}

impl Drop for RequestRes {
    fn drop(&mut self) {
        self.fwd.cancel();
    }
}

/// Queues a request for `tokens`; its events go to `pid` as `{:ferrolm_stream, id, ...}`.
#[rustler::nif]
fn server_submit<'a>(
    env: Env<'a>,
    s: ResourceArc<ServerRes>,
    tokens: Vec<u32>,
    params: Term<'a>,
    pid: LocalPid,
    id: u64,
) -> NifResult<Term<'a>> {
    let params = opts::generate_params(params).map_err(err)?;
    let handle = match s.engine.submit(GenRequest { prompt: tokens, params, ..GenRequest::default() }) {
        Ok(h) => h,
        Err(SubmitError::QueueFull { .. }) => return Ok((atoms::error(), atoms::queue_full()).encode(env)),
        Err(e) => return Err(err(e)),
    };
    let fwd = Arc::new(Forward { outbox: Outbox::new(pid, id), handle: Mutex::new(Some(handle)) });
    // The first poll registers the waker; it may find events to send already, and a scheduler
    // thread may not send from an owned environment: poll from a short-lived thread.
    let first = fwd.clone();
    std::thread::Builder::new()
        .name("ferrolm-submit".into())
        .spawn(move || first.pump())
        .map_err(|e| err(format!("cannot start a thread: {e}")))?;
    Ok((atoms::ok(), ResourceArc::new(RequestRes { fwd })).encode(env))
}

/// Cancels a request: no message of it is sent after this returns.
#[rustler::nif]
fn request_cancel(r: ResourceArc<RequestRes>) -> rustler::Atom {
    r.fwd.cancel();
    atoms::ok()
}

/// The engine's counters and slots.
#[rustler::nif]
fn server_stats(env: Env, s: ResourceArc<ServerRes>) -> Term {
    let m = s.engine.metrics();
    let slots = s.engine.slots();
    let active = slots.iter().filter(|s| s.state != SlotState::Idle).count();
    let slot_maps: Vec<Term> = slots
        .iter()
        .map(|s| {
            let state = match s.state {
                SlotState::Idle => "idle",
                SlotState::Prefill => "prefill",
                SlotState::Generating => "generating",
            };
            atom_map(
                env,
                &[
                    ("id", s.id.encode(env)),
                    ("state", state.encode(env)),
                    ("n_prompt", s.n_prompt.encode(env)),
                    ("n_cached", s.n_cached.encode(env)),
                    ("n_generated", s.n_generated.encode(env)),
                    ("n_kv", s.n_kv.encode(env)),
                ],
            )
        })
        .collect();
    atom_map(
        env,
        &[
            ("n_parallel", m.slots_total.encode(env)),
            ("active_slots", active.encode(env)),
            ("idle_slots", (slots.len() - active).encode(env)),
            ("queue_depth", m.queue_depth.encode(env)),
            ("requests_total", m.requests_total.encode(env)),
            ("requests_finished", m.requests_finished.encode(env)),
            ("requests_cancelled", m.requests_cancelled.encode(env)),
            ("prompt_tokens_total", m.prompt_tokens_total.encode(env)),
            ("cached_tokens_total", m.cached_tokens_total.encode(env)),
            ("generated_tokens_total", m.generated_tokens_total.encode(env)),
            ("forward_passes_total", m.forward_passes_total.encode(env)),
            ("generation_tokens_per_second", m.generation_tokens_per_second.encode(env)),
            ("prompt_tokens_per_second", m.prompt_tokens_per_second.encode(env)),
            ("kv_tokens", m.kv_tokens.encode(env)),
            ("prefix_cache_entries", m.prefix_cache_entries.encode(env)),
            ("prefix_cache_hits", m.prefix_cache_hits.encode(env)),
            ("slots", slot_maps.encode(env)),
        ],
    )
}
