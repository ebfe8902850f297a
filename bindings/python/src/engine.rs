//! [`PyEngine`]: many concurrent requests on one model (`ferrolm::engine::Engine`: continuous
//! batching, shared prefix cache), and [`PyRequest`], one request's tokens as a blocking
//! iterator (GIL released while waiting) or polled from asyncio (`ferrolm.aio`).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_core::Stream;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use ferrolm::engine::{BatchStrategy, Engine, EngineConfig, Event, GenRequest, RequestHandle, Usage};
use ferrolm::kv::{CacheOptions, KvType, PolicyKind};

use crate::errors::{Kind, engine_to_py, new_err, submit_to_py};
use crate::model::{Prompt, PyModel};
use crate::params::PyGenParams;
use crate::session::{PyFinish, PyToken};

/// Many requests on one model in one process: `n_slots` sequences batched together each tick
/// (continuous batching, chunked prefill), a prefix cache shared by all of them, a bounded
/// queue. Submit from any thread; each request is a `Request`.
#[pyclass(name = "Engine", module = "ferrolm._ferrolm", frozen)]
pub struct PyEngine {
    engine: Engine,
}

fn kv_type(name: &str) -> PyResult<KvType> {
    KvType::from_name(name).ok_or_else(|| {
        new_err(Kind::Invalid, format!("unknown KV cache type '{name}' (f32, f16, q8_0, q4_0)"))
    })
}

#[pymethods]
impl PyEngine {
    /// Starts the engine thread on `model`.
    #[new]
    #[pyo3(signature = (
        model, *, n_slots=4, n_ctx=4096, chunk_size=512, strategy="decode-first", max_queue=64,
        type_k="f16", type_v="f16", prefix_cache_mb=1024, policy="none", window=256, kv_budget=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &PyModel,
        n_slots: usize,
        n_ctx: usize,
        chunk_size: usize,
        strategy: &str,
        max_queue: usize,
        type_k: &str,
        type_v: &str,
        prefix_cache_mb: usize,
        policy: &str,
        window: usize,
        kv_budget: Option<usize>,
    ) -> PyResult<Self> {
        let strategy = BatchStrategy::from_name(strategy).ok_or_else(|| {
            new_err(
                Kind::Invalid,
                format!("unknown strategy '{strategy}' (decode-first, prefill-first, balanced)"),
            )
        })?;
        let policy = PolicyKind::from_name(policy)
            .ok_or_else(|| new_err(Kind::Invalid, format!("unknown eviction policy '{policy}'")))?;
        let config = EngineConfig {
            n_slots,
            n_ctx,
            chunk_size,
            strategy,
            max_queue,
            type_k: kv_type(type_k)?,
            type_v: kv_type(type_v)?,
            cache: CacheOptions { policy, window, kv_budget, ..Default::default() },
            prefix_cache_bytes: prefix_cache_mb << 20,
            embed_pooling: None,
            draft_model: None,
        };
        let model = model.inner().clone();
        let engine = py.allow_threads(|| Engine::start(model, config)).map_err(engine_to_py)?;
        Ok(Self { engine })
    }

    /// Queues a request: `prompt` is text (tokenized with BOS, special tokens parsed) or token
    /// ids. `logprobs=k` reports each token's log-probability and `k` alternatives; `timeout`
    /// (seconds) cancels it when it runs longer. Raises `EngineBusyError` when the queue is full.
    #[pyo3(signature = (prompt, params, *, logprobs=None, timeout=None))]
    fn submit(
        &self,
        py: Python<'_>,
        prompt: Prompt,
        params: &PyGenParams,
        logprobs: Option<usize>,
        timeout: Option<f64>,
    ) -> PyResult<PyRequest> {
        let prompt = prompt.tokens(self.engine.model())?;
        let timeout = match timeout {
            Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => {
                return Err(new_err(
                    Kind::Invalid,
                    format!("timeout must be a positive number of seconds, not {t}"),
                ));
            }
            None => None,
        };
        let req = GenRequest {
            prompt,
            params: params.params.clone(),
            logprobs,
            prompt_logprobs: false,
            timeout,
            lookup: None,
            draft: None,
            fresh_prompt: false,
            slot: None,
            progress: false,
            post_sampling_probs: false,
        };
        // Submitting compiles the request's constraint, which may take a while.
        let handle = py.allow_threads(|| self.engine.submit(req)).map_err(submit_to_py)?;
        Ok(PyRequest { handle: Some(handle), finish: None, tail: None })
    }

    /// Embeds `texts` on the engine thread (between ticks): one vector per text.
    #[pyo3(signature = (texts, *, pooling=None, normalize=true))]
    fn embed(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        pooling: Option<&str>,
        normalize: bool,
    ) -> PyResult<Vec<Vec<f32>>> {
        let pooling = pooling.map(crate::model::parse_pooling).transpose()?;
        py.allow_threads(|| self.engine.embed(texts, pooling, normalize)).map_err(engine_to_py)
    }

    /// The engine's counters (requests, tokens, slots, KV and prefix-cache use) as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.engine.metrics();
        let d = PyDict::new(py);
        d.set_item("requests_total", m.requests_total)?;
        d.set_item("requests_finished", m.requests_finished)?;
        d.set_item("requests_cancelled", m.requests_cancelled)?;
        d.set_item("requests_failed", m.requests_failed)?;
        d.set_item("requests_rejected", m.requests_rejected)?;
        d.set_item("prompt_tokens_total", m.prompt_tokens_total)?;
        d.set_item("cached_tokens_total", m.cached_tokens_total)?;
        d.set_item("generated_tokens_total", m.generated_tokens_total)?;
        d.set_item("forward_passes_total", m.forward_passes_total)?;
        d.set_item("queue_depth", m.queue_depth)?;
        d.set_item("slots_busy", m.slots_busy)?;
        d.set_item("slots_total", m.slots_total)?;
        d.set_item("kv_tokens", m.kv_tokens)?;
        d.set_item("kv_bytes", m.kv_bytes)?;
        d.set_item("prefix_cache_entries", m.prefix_cache_entries)?;
        d.set_item("prefix_cache_tokens", m.prefix_cache_tokens)?;
        Ok(d)
    }

    /// Requests queued or running now.
    fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }

    /// Waits (GIL released) until no request is queued or running, at most `timeout` seconds;
    /// whether it is idle.
    #[pyo3(signature = (timeout=10.0))]
    fn wait_idle(&self, py: Python<'_>, timeout: f64) -> bool {
        let t = Duration::from_secs_f64(timeout.max(0.0));
        py.allow_threads(|| self.engine.wait_idle(t))
    }

    /// Cancels every queued and running request.
    fn cancel_all(&self) {
        self.engine.cancel_all();
    }

    /// Stops accepting requests (running ones go on).
    fn shutdown(&self) {
        self.engine.shutdown();
    }
}

/// Calls a Python callable when the request has a new event (asyncio: it schedules the waiting
/// task's wake-up with `loop.call_soon_threadsafe`).
struct PyWaker(Py<PyAny>);

impl Wake for PyWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        Python::with_gil(|py| {
            if let Err(e) = self.0.call0(py) {
                // The event loop may be closed; the awaiting task is gone then.
                e.print(py);
            }
        });
    }
}

/// One submitted request: iterate it for `Token`s (blocking, GIL released while waiting), or
/// use `ferrolm.Engine`'s `async for`. Cancelling (or dropping) it frees its slot on the
/// engine's next tick.
#[pyclass(name = "Request", module = "ferrolm._ferrolm")]
pub struct PyRequest {
    /// `None` once finished or cancelled.
    handle: Option<RequestHandle>,
    finish: Option<PyFinish>,
    /// Held-back text of the `Done` event, returned before the end.
    tail: Option<String>,
}

fn finish_of(finish: ferrolm::decoder::FinishReason, usage: &Usage) -> PyFinish {
    PyFinish {
        prompt_tokens: usage.prompt_tokens,
        cached_tokens: usage.cached_tokens,
        completion_tokens: usage.completion_tokens,
        prompt_ms: usage.prompt_ms,
        decode_ms: usage.decode_ms,
        ..PyFinish::new(finish)
    }
}

impl PyRequest {
    /// Turns an event into a token (`Ok(None)`: read the next event).
    fn on_event(&mut self, event: Option<Event>) -> PyResult<Option<PyToken>> {
        match event {
            Some(Event::Token { id, text, logprob }) => Ok(Some(PyToken {
                id: Some(id),
                text,
                logprob: logprob.as_ref().map(|l| l.logprob),
                top_logprobs: logprob.map(|l| l.top),
            })),
            Some(Event::PromptLogprobs(_) | Event::Progress { .. }) => Ok(None),
            Some(Event::Done { text, finish, usage, .. }) => {
                self.handle = None;
                self.finish = Some(finish_of(finish, &usage));
                self.tail = Some(text);
                Ok(None)
            }
            Some(Event::Error(msg)) => {
                self.handle = None;
                Err(new_err(Kind::Error, msg))
            }
            Some(Event::Refused(e)) => {
                self.handle = None;
                Err(submit_to_py(e))
            }
            None => {
                self.handle = None;
                if self.finish.is_none() {
                    return Err(new_err(Kind::Error, "the engine stopped before the request finished"));
                }
                Ok(None)
            }
        }
    }

    /// The held-back text as a last token, once.
    fn take_tail(&mut self) -> Option<PyToken> {
        self.tail.take().filter(|t| !t.is_empty()).map(PyToken::text_only)
    }
}

#[pymethods]
impl PyRequest {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next token, waiting for it with the GIL released (Ctrl-C cancels the request).
    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyToken>> {
        loop {
            let Some(handle) = self.handle.as_mut() else {
                return Ok(self.take_tail());
            };
            let event = match py.allow_threads(|| handle.recv_timeout(Duration::from_millis(50))) {
                Ok(event) => event,
                Err(()) => {
                    if let Err(e) = py.check_signals() {
                        self.cancel();
                        return Err(e);
                    }
                    continue;
                }
            };
            if let Some(t) = self.on_event(event)? {
                return Ok(Some(t));
            }
        }
    }

    /// For asyncio: `(True, token)` when a token is ready, `(True, None)` at the end, or
    /// `(False, None)` when nothing is ready yet; then `wake` (a callable) is called from the
    /// engine thread once there is.
    fn poll(&mut self, wake: Py<PyAny>) -> PyResult<(bool, Option<PyToken>)> {
        let waker = Waker::from(Arc::new(PyWaker(wake)));
        let mut cx = Context::from_waker(&waker);
        loop {
            let Some(handle) = self.handle.as_mut() else {
                return Ok((true, self.take_tail()));
            };
            let event = match Pin::new(handle).poll_next(&mut cx) {
                Poll::Ready(event) => event,
                Poll::Pending => return Ok((false, None)),
            };
            if let Some(t) = self.on_event(event)? {
                return Ok((true, Some(t)));
            }
        }
    }

    /// Cancels the request: its slot is freed on the engine's next tick.
    fn cancel(&mut self) {
        if self.handle.take().is_some() {
            self.finish = Some(PyFinish::new(ferrolm::decoder::FinishReason::Cancelled));
            self.tail = None;
        }
    }

    /// Whether every token was read (or the request was cancelled).
    #[getter]
    fn done(&self) -> bool {
        self.handle.is_none() && self.tail.is_none()
    }

    /// How it ended (`None` while running).
    #[getter]
    fn finish(&self) -> Option<PyFinish> {
        self.finish.clone()
    }
}
