//! Sleeping on idle (llama-server's `--sleep-idle-seconds`): after a stretch with no task the
//! model is released (its engine, weights, KV cache and prefix cache), and the next task loads
//! it again, waiting for the load.
//!
//! [`Sleeper`] stands between the routes and the model's backend. Task routes pass through
//! [`gate`], which wakes the model when needed and counts the request (its response body
//! included) as in flight; the idle timer starts when the last one ends, so a running request is
//! never cut. The read-only routes (`/health`, `/props`, `/models`, `/metrics`, `/slots`,
//! `/get_load`, the page) skip the gate: they neither wake the model nor reset the timer, and
//! answer from what the sleeper kept (the model's sizes and template, the metrics taken on
//! entering sleep). A task arriving while the model is being released waits for the release,
//! then for the reload.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody as _};
use axum::extract::{self, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ferrolm::chat::ChatTemplate;
use ferrolm::engine::{
    EngineError, GenRequest, MetricsSnapshot, RequestHandle, SlotAction, SlotInfo, SlotOutcome, SubmitError,
};
use ferrolm::model::{Pooling, Relevance};
use futures_util::StreamExt;
use tokio::sync::Notify;

use super::backend::{Backend, BoxFuture, SharedBackend};
use super::error::ApiError;
use super::infill::FimTokens;

/// Loads the model again after a sleep (the backend of a fresh engine).
pub(crate) type BackendReload = Arc<dyn Fn() -> Result<SharedBackend, String> + Send + Sync>;

/// Where the model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Loaded: tasks run.
    Awake,
    /// Being released: tasks wait.
    Releasing,
    /// Released: the next task wakes it.
    Asleep,
    /// Being loaded again: tasks wait.
    Waking,
}

/// What the sleeper tracks, under one lock.
struct Inner {
    phase: Phase,
    /// The loaded backend (`None` unless awake).
    live: Option<SharedBackend>,
    /// Tasks in flight (their response bodies included).
    in_flight: usize,
    /// When the last task ended (or the model was loaded).
    idle_since: Instant,
    /// Tasks entered since the start.
    tasks: u64,
    /// Counters of the engines released so far, added to the live engine's.
    base: MetricsSnapshot,
    /// While not awake: the metrics on entering sleep and the resident memory then.
    frozen: Option<(MetricsSnapshot, Option<u64>)>,
    /// Reloads started, and the last one that failed with its error.
    wakes: u64,
    failed: Option<(u64, String)>,
    /// Shutting down: no more wakes.
    stopping: bool,
}

/// What the read-only routes need of the model, kept across sleeps.
struct Meta {
    n_ctx: usize,
    evicts: bool,
    n_vocab: usize,
    bos: Option<u32>,
    eog_ids: Vec<u32>,
    bos_eos: (String, String),
    fim: Option<FimTokens>,
    reranker: bool,
}

/// A backend that releases its model after `idle_after` without a task and loads it again on
/// the next one (see the module's documentation).
pub(crate) struct Sleeper {
    idle_after: Duration,
    reload: BackendReload,
    meta: Meta,
    template: Result<ChatTemplate, String>,
    started: Instant,
    state: Mutex<Inner>,
    /// Woken on each phase change (tasks waiting for a release or a load).
    changed: Notify,
    /// Wakes the idle timer (a task ended, a load ended, the server stops).
    kick: Arc<Notify>,
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        // The timer only holds a weak reference: let it see that the sleeper is gone.
        self.kick.notify_one();
    }
}

/// A task in flight: while it lives the model stays loaded; its end starts the idle timer.
pub(crate) struct TaskGuard {
    sleeper: Arc<Sleeper>,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let mut st = self.sleeper.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        if st.in_flight == 0 {
            st.idle_since = Instant::now();
        }
        drop(st);
        self.sleeper.kick.notify_one();
    }
}

/// What the idle timer does next.
enum Step {
    Stop,
    /// Wait for a kick, or at most this long.
    Wait(Option<Duration>),
    Release(SharedBackend),
}

impl Sleeper {
    /// Wraps the loaded `first` backend; after `idle_after` without a task its model is
    /// released, and `reload` loads it again. Starts the idle timer (on the current Tokio
    /// runtime).
    pub(crate) fn start(first: SharedBackend, idle_after: Duration, reload: BackendReload) -> Arc<Sleeper> {
        let meta = Meta {
            n_ctx: first.n_ctx(),
            evicts: first.evicts(),
            n_vocab: first.n_vocab(),
            bos: first.bos(),
            eog_ids: first.eog_ids(),
            bos_eos: first.bos_eos_text(),
            fim: first.fim_tokens(),
            reranker: first.is_reranker(),
        };
        // The template is compiled again from its source, so that it outlives the model.
        let template = first.chat_template().and_then(|t| {
            ChatTemplate::new(t.source()).map_err(|e| format!("the chat template cannot be used: {e}"))
        });
        let now = Instant::now();
        let sleeper = Arc::new(Sleeper {
            idle_after,
            reload,
            meta,
            template,
            started: now,
            state: Mutex::new(Inner {
                phase: Phase::Awake,
                live: Some(first),
                in_flight: 0,
                idle_since: now,
                tasks: 0,
                base: MetricsSnapshot::default(),
                frozen: None,
                wakes: 0,
                failed: None,
                stopping: false,
            }),
            changed: Notify::new(),
            kick: Arc::new(Notify::new()),
        });
        tokio::spawn(idle_timer(Arc::downgrade(&sleeper), sleeper.kick.clone()));
        sleeper
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the model is released, or being released or loaded again.
    pub(crate) fn sleeping(&self) -> bool {
        self.lock().phase != Phase::Awake
    }

    /// Tasks entered since the start.
    pub(crate) fn tasks(&self) -> u64 {
        self.lock().tasks
    }

    /// While sleeping: the metrics taken on entering sleep, and the resident memory then.
    pub(crate) fn frozen_metrics(&self) -> Option<(MetricsSnapshot, Option<u64>)> {
        let st = self.lock();
        if st.phase == Phase::Awake { None } else { st.frozen.clone() }
    }

    fn live(&self) -> Option<SharedBackend> {
        self.lock().live.clone()
    }

    /// Enters a task: waits for the model (loading it again when it sleeps) and counts the task
    /// in flight until the guard drops.
    pub(crate) async fn enter(self: &Arc<Self>) -> Result<TaskGuard, ApiError> {
        let mut waiting_on: Option<u64> = None;
        loop {
            // Created before looking, so that a change after the look still wakes us.
            let changed = self.changed.notified();
            {
                let mut st = self.lock();
                if let (Some(w), Some((failed, e))) = (waiting_on, &st.failed)
                    && w == *failed
                {
                    return Err(ApiError::internal(format!(
                        "cannot load the model again after sleeping: {e}"
                    )));
                }
                if st.stopping {
                    return Err(ApiError::busy("the server is shutting down", 1));
                }
                match st.phase {
                    Phase::Awake => {
                        st.in_flight += 1;
                        st.tasks += 1;
                        return Ok(TaskGuard { sleeper: self.clone() });
                    }
                    Phase::Asleep => {
                        st.phase = Phase::Waking;
                        st.wakes += 1;
                        waiting_on = Some(st.wakes);
                        tokio::spawn(wake(self.clone(), st.wakes));
                    }
                    Phase::Waking => waiting_on = Some(st.wakes),
                    Phase::Releasing => {}
                }
            }
            changed.await;
        }
    }

    /// The timer's next step; releasing takes the backend out and freezes the metrics.
    fn next_step(&self) -> Step {
        let mut st = self.lock();
        if st.stopping {
            return Step::Stop;
        }
        if st.phase != Phase::Awake || st.in_flight > 0 {
            return Step::Wait(None);
        }
        let idle = st.idle_since.elapsed();
        if idle < self.idle_after {
            return Step::Wait(Some(self.idle_after - idle));
        }
        let Some(live) = st.live.take() else { return Step::Wait(None) };
        st.phase = Phase::Releasing;
        let m = combine(&st.base, live.metrics(), self.started.elapsed());
        st.base = m.clone();
        st.frozen = Some((m, ferrolm::sysmem::resident().map(|(rss, _)| rss)));
        Step::Release(live)
    }

    /// Releases the model (its engine ends once the last handle is dropped).
    fn release(&self, live: SharedBackend) {
        let idle = self.lock().idle_since.elapsed();
        live.shutdown();
        drop(live);
        self.lock().phase = Phase::Asleep;
        self.changed.notify_waiters();
        tracing::info!(idle_s = idle.as_secs_f64(), "sleeping: model released after idling");
    }
}

/// Loads the model again (wake number `n`) and lets the waiting tasks in.
async fn wake(me: Arc<Sleeper>, n: u64) {
    tracing::info!("waking up: loading the model again");
    let t0 = Instant::now();
    let reload = me.reload.clone();
    let loaded = tokio::task::spawn_blocking(move || reload()).await.unwrap_or_else(|e| Err(e.to_string()));
    let mut st = me.lock();
    match loaded {
        Ok(b) => {
            if st.stopping {
                b.shutdown();
            }
            st.live = Some(b);
            st.phase = Phase::Awake;
            st.frozen = None;
            st.idle_since = Instant::now();
            tracing::info!(ms = t0.elapsed().as_millis() as u64, "awake: model loaded again");
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot load the model again after sleeping");
            st.phase = Phase::Asleep;
            st.failed = Some((n, e));
        }
    }
    drop(st);
    me.changed.notify_waiters();
    me.kick.notify_one();
}

/// Releases the model once it has been idle long enough; ends with the sleeper or on shutdown.
async fn idle_timer(sleeper: Weak<Sleeper>, kick: Arc<Notify>) {
    loop {
        let step = match sleeper.upgrade() {
            Some(me) => match me.next_step() {
                Step::Release(live) => {
                    // Dropping an engine may wait for its thread: off the async workers.
                    let _ = tokio::task::spawn_blocking(move || me.release(live)).await;
                    continue;
                }
                step => step,
            },
            None => return,
        };
        match step {
            Step::Stop | Step::Release(_) => return,
            Step::Wait(Some(d)) => {
                let _ = tokio::time::timeout(d, kick.notified()).await;
            }
            Step::Wait(None) => kick.notified().await,
        }
    }
}

/// The live engine's metrics with the released engines' counters added.
fn combine(base: &MetricsSnapshot, live: MetricsSnapshot, uptime: Duration) -> MetricsSnapshot {
    MetricsSnapshot {
        requests_total: base.requests_total + live.requests_total,
        requests_finished: base.requests_finished + live.requests_finished,
        requests_cancelled: base.requests_cancelled + live.requests_cancelled,
        requests_failed: base.requests_failed + live.requests_failed,
        requests_rejected: base.requests_rejected + live.requests_rejected,
        prompt_tokens_total: base.prompt_tokens_total + live.prompt_tokens_total,
        cached_tokens_total: base.cached_tokens_total + live.cached_tokens_total,
        generated_tokens_total: base.generated_tokens_total + live.generated_tokens_total,
        forward_passes_total: base.forward_passes_total + live.forward_passes_total,
        prefix_cache_hits: base.prefix_cache_hits + live.prefix_cache_hits,
        prefix_cache_lookups: base.prefix_cache_lookups + live.prefix_cache_lookups,
        prompt_seconds_total: base.prompt_seconds_total + live.prompt_seconds_total,
        generation_seconds_total: base.generation_seconds_total + live.generation_seconds_total,
        draft_tokens_total: base.draft_tokens_total + live.draft_tokens_total,
        draft_accepted_total: base.draft_accepted_total + live.draft_accepted_total,
        draft_passes_total: base.draft_passes_total + live.draft_passes_total,
        busy_slots_per_pass_total: base.busy_slots_per_pass_total + live.busy_slots_per_pass_total,
        request_tokens_max: base.request_tokens_max.max(live.request_tokens_max),
        uptime_seconds: uptime.as_secs_f64(),
        ..live
    }
}

/// The layer of the task routes: wakes the model when it sleeps and keeps it loaded while the
/// request (its response body included) runs.
pub(crate) async fn gate(
    extract::State(sleeper): extract::State<Arc<Sleeper>>,
    req: Request,
    next: Next,
) -> Response {
    let guard = match sleeper.enter().await {
        Ok(g) => g,
        Err(e) => return e.into_response(),
    };
    let resp = next.run(req).await;
    if resp.body().size_hint().exact().is_some() {
        // A whole answer: the task is done.
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _in_flight = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

impl Backend for Sleeper {
    fn n_ctx(&self) -> usize {
        self.meta.n_ctx
    }

    fn evicts(&self) -> bool {
        self.meta.evicts
    }

    fn n_vocab(&self) -> usize {
        self.meta.n_vocab
    }

    fn bos(&self) -> Option<u32> {
        self.meta.bos
    }

    fn eog_ids(&self) -> Vec<u32> {
        self.meta.eog_ids.clone()
    }

    fn bos_eos_text(&self) -> (String, String) {
        self.meta.bos_eos.clone()
    }

    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>, String> {
        match self.live() {
            Some(b) => b.tokenize(text, add_special, parse_special),
            None => Err("the model is asleep".into()),
        }
    }

    fn piece(&self, id: u32) -> Vec<u8> {
        self.live().map(|b| b.piece(id)).unwrap_or_default()
    }

    fn chat_template(&self) -> Result<&ChatTemplate, String> {
        self.template.as_ref().map_err(Clone::clone)
    }

    fn submit(&self, req: GenRequest) -> Result<RequestHandle, SubmitError> {
        self.live().ok_or(SubmitError::ShuttingDown)?.submit(req)
    }

    fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
        pooling: Option<Pooling>,
        normalize: bool,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EngineError>> {
        let live = self.live();
        Box::pin(async move { live.ok_or(EngineError::Stopped)?.embed(inputs, pooling, normalize).await })
    }

    fn fim_tokens(&self) -> Option<FimTokens> {
        self.meta.fim
    }

    fn is_reranker(&self) -> bool {
        self.meta.reranker
    }

    fn rerank(
        &self,
        query: String,
        documents: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Relevance>, EngineError>> {
        let live = self.live();
        Box::pin(async move { live.ok_or(EngineError::Stopped)?.rerank(query, documents).await })
    }

    fn slot_action(
        &self,
        slot: usize,
        action: SlotAction,
    ) -> BoxFuture<'_, Result<SlotOutcome, EngineError>> {
        let live = self.live();
        Box::pin(async move { live.ok_or(EngineError::Stopped)?.slot_action(slot, action).await })
    }

    fn metrics(&self) -> MetricsSnapshot {
        let (base, live, frozen) = {
            let st = self.lock();
            (st.base.clone(), st.live.clone(), st.frozen.clone())
        };
        match (live, frozen) {
            (Some(b), _) => combine(&base, b.metrics(), self.started.elapsed()),
            (None, Some((m, _))) => m,
            (None, None) => base,
        }
    }

    /// While asleep: every slot idle and empty (the model holds nothing).
    fn slots(&self) -> Vec<SlotInfo> {
        if let Some(b) = self.live() {
            return b.slots();
        }
        (0..self.metrics().slots_total).map(|id| SlotInfo::idle(id, 0)).collect()
    }

    fn shutdown(&self) {
        let live = {
            let mut st = self.lock();
            st.stopping = true;
            st.live.clone()
        };
        if let Some(b) = live {
            b.shutdown();
        }
        self.changed.notify_waiters();
        self.kick.notify_one();
    }

    fn cancel_all(&self) {
        if let Some(b) = self.live() {
            b.cancel_all();
        }
    }

    fn wait_idle(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        let live = self.live();
        Box::pin(async move {
            match live {
                Some(b) => b.wait_idle(timeout).await,
                None => true,
            }
        })
    }

    fn is_sleeping(&self) -> bool {
        self.sleeping()
    }
}
