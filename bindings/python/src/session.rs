//! [`PySession`]: one conversation's KV cache (`ferrolm::session::Session`), generating in the
//! caller's thread with the GIL released around each forward pass.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use ferrolm::decoder::FinishReason;
use ferrolm::kv::{CacheOptions, KvType, PolicyKind};
use ferrolm::model::Model;
use ferrolm::session::{
    CancelHandle, GenerationStats, LogitsProcessor, Session, SessionOptions, StreamEvent, TokenStream,
};

use crate::errors::{Kind, new_err, to_py};
use crate::model::{Prompt, PyModel};
use crate::params::PyGenParams;

/// A generated token: its id and the text it makes final (possibly empty). The text held back
/// until the end (a possible stop string that did not complete) comes as a last `Token` whose
/// `id` is `None`.
#[pyclass(name = "Token", module = "ferrolm._ferrolm", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct PyToken {
    /// The token id (`None` for text held back until the end).
    pub id: Option<u32>,
    /// Text now final.
    pub text: String,
    /// Its log-probability, when asked for (`Engine.submit(logprobs=k)`).
    pub logprob: Option<f32>,
    /// The `k` most likely `(id, log-probability)` at this step, when asked for.
    pub top_logprobs: Option<Vec<(u32, f32)>>,
}

#[pymethods]
impl PyToken {
    fn __repr__(&self) -> String {
        format!("Token(id={:?}, text={:?})", self.id, self.text)
    }
}

impl PyToken {
    pub(crate) fn text_only(text: String) -> Self {
        Self { id: None, text, logprob: None, top_logprobs: None }
    }
}

/// How a generation ended, with its token counts and timings.
#[pyclass(name = "Finish", module = "ferrolm._ferrolm", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct PyFinish {
    /// `length`, `eog`, `stop`, `context`, `timeout` or `cancelled`.
    pub reason: &'static str,
    /// The OpenAI `finish_reason`: `length`, `stop`, `timeout` or `cancelled`.
    pub finish_reason: &'static str,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV was reused (session cache or prefix cache).
    pub cached_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Milliseconds spent on the prompt.
    pub prompt_ms: f64,
    /// Milliseconds spent generating.
    pub decode_ms: f64,
}

#[pymethods]
impl PyFinish {
    fn __repr__(&self) -> String {
        format!(
            "Finish(reason={:?}, prompt_tokens={}, cached_tokens={}, completion_tokens={})",
            self.reason, self.prompt_tokens, self.cached_tokens, self.completion_tokens
        )
    }
}

impl PyFinish {
    pub(crate) fn new(reason: FinishReason) -> Self {
        Self {
            reason: reason.as_str(),
            finish_reason: reason.openai_reason(),
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            prompt_ms: 0.0,
            decode_ms: 0.0,
        }
    }

    fn from_stats(s: &GenerationStats) -> Self {
        Self {
            prompt_tokens: s.n_prompt,
            cached_tokens: s.n_cached,
            completion_tokens: s.n_generated,
            prompt_ms: s.prompt_time.as_secs_f64() * 1e3,
            decode_ms: s.decode_time.as_secs_f64() * 1e3,
            ..Self::new(s.finish)
        }
    }
}

/// Stops a session's running generation from any thread: it ends with reason `cancelled`.
#[pyclass(name = "CancelHandle", module = "ferrolm._ferrolm", frozen)]
pub struct PyCancelHandle(CancelHandle);

#[pymethods]
impl PyCancelHandle {
    /// Asks the running generation to stop.
    fn cancel(&self) {
        self.0.cancel();
    }
}

/// The session and its running generation, which borrows it.
///
/// `Session` borrows its model and `TokenStream` borrows its session; here the model is kept
/// alive by `model` and the session is boxed at a fixed address, so both borrows are given the
/// `'static` lifetime. They are never handed out: `stream` is dropped before the session is
/// reached in any other way (see [`Core::session`]) and before the session is freed (`Drop`).
struct Core {
    /// The running generation, borrowing `*session`. Declared first: dropped first.
    stream: Option<TokenStream<'static, 'static>>,
    /// Bumped by every new generation: an old iterator finds it changed.
    stream_id: u64,
    /// Owned (from `Box::into_raw`); freed in `Drop`.
    session: NonNull<Session<'static>>,
    /// Keeps the model that `*session` borrows alive. Dropped last.
    model: Arc<Model>,
}

// SAFETY: `Core` owns the session behind `session` exclusively (no other pointer to it escapes),
// so sending a `Core` sends a `Session` and a `TokenStream`, which are `Send` (checked below).
unsafe impl Send for Core {}

// SAFETY: as for `Send`: sharing a `Core` shares a `Session` and a `TokenStream`, which are
// `Sync` (checked below); the session is reached only through `&mut Core`.
unsafe impl Sync for Core {}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Session<'static>>();
    send_sync::<TokenStream<'static, 'static>>();
};

impl Core {
    fn new(model: Arc<Model>, opts: SessionOptions) -> ferrolm::Result<Self> {
        // SAFETY: the model lives in an `Arc` that `Core` holds until after the session is freed.
        let model_ref: &'static Model = unsafe { &*Arc::as_ptr(&model) };
        let session = Box::new(Session::new(model_ref, opts)?);
        let session = NonNull::from(Box::leak(session));
        Ok(Self { stream: None, stream_id: 0, session, model })
    }

    /// The session, after ending the running generation (which borrows it).
    fn session(&mut self) -> &mut Session<'static> {
        self.stream = None;
        // SAFETY: `session` is valid until `Drop`, and with `stream` dropped nothing else borrows it.
        unsafe { self.session.as_mut() }
    }

    /// Starts a generation (prefilling the prompt) and returns its id.
    fn start(&mut self, prompt: &[u32], params: &ferrolm::decoder::GenerateParams) -> ferrolm::Result<u64> {
        self.session();
        // SAFETY: as in `session`; the `'static` borrow is stored in `stream` only, which is
        // dropped before the session is used otherwise or freed.
        let session: &'static mut Session<'static> = unsafe { &mut *self.session.as_ptr() };
        self.stream = Some(session.stream_tokens(prompt, params)?);
        self.stream_id += 1;
        Ok(self.stream_id)
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.stream = None;
        // SAFETY: `session` came from `Box::leak` in `Core::new` and is freed only here.
        drop(unsafe { Box::from_raw(self.session.as_ptr()) });
    }
}

/// What one step of a session's generation gave.
enum Next {
    Token(PyToken),
    End,
}

/// One conversation with a model: a KV cache that keeps the tokens of the last call, so a
/// prompt that extends it prefills only the new tokens.
#[pyclass(name = "Session", module = "ferrolm._ferrolm")]
pub struct PySession {
    core: Core,
    cancel: CancelHandle,
    /// How the last generation ended.
    finish: Option<PyFinish>,
    /// The running generation's stopping criterion: `fn(context ids, logits bytes) -> bool`.
    stop_hook: Option<Py<PyAny>>,
    /// The exception a logits processor raised inside the running generation.
    hook_error: Arc<Mutex<Option<PyErr>>>,
}

/// The hooks and reports one generation asks for (`Session.stream`/`generate` keywords).
struct Hooks {
    logits_processor: Option<Py<PyAny>>,
    stopping_criteria: Option<Py<PyAny>>,
    logprobs: Option<usize>,
}

/// The logits as the bytes of native `float32`s, for a Python hook.
fn logits_bytes<'py>(py: Python<'py>, logits: &[f32]) -> Bound<'py, PyByteArray> {
    let bytes: Vec<u8> = logits.iter().flat_map(|x| x.to_ne_bytes()).collect();
    PyByteArray::new(py, &bytes)
}

/// Calls a Python logits processor `fn(context ids, logits bytes) -> bytes` (native float32s)
/// and copies what it returns over `logits`.
fn call_processor(py: Python<'_>, hook: &Py<PyAny>, context: &[u32], logits: &mut [f32]) -> PyResult<()> {
    let out = hook.call1(py, (context.to_vec(), logits_bytes(py, logits)))?;
    let out = out.downcast_bound::<PyBytes>(py)?.as_bytes();
    if out.len() != 4 * logits.len() {
        return Err(new_err(
            Kind::Invalid,
            format!("the logits processor returned {} scores for {} tokens", out.len() / 4, logits.len()),
        ));
    }
    for (dst, src) in logits.iter_mut().zip(out.chunks_exact(4)) {
        *dst = f32::from_ne_bytes([src[0], src[1], src[2], src[3]]);
    }
    Ok(())
}

/// A core logits processor calling `hook` with the GIL; an exception it raises is kept in `slot`
/// and ends the generation.
fn python_processor(hook: Py<PyAny>, slot: Arc<Mutex<Option<PyErr>>>) -> LogitsProcessor {
    Box::new(move |context, logits| {
        Python::with_gil(|py| call_processor(py, &hook, context, logits)).map_err(|e| {
            let msg = format!("the logits processor failed: {e}");
            if let Ok(mut slot) = slot.lock() {
                *slot = Some(e);
            }
            ferrolm::Error::InvalidInput(msg)
        })
    })
}

fn kv_type(name: &str) -> PyResult<KvType> {
    KvType::from_name(name).ok_or_else(|| {
        new_err(Kind::Invalid, format!("unknown KV cache type '{name}' (f32, f16, q8_0, q4_0)"))
    })
}

impl PySession {
    /// Runs one step of generation `id` with the GIL released.
    fn next(&mut self, py: Python<'_>, id: u64) -> PyResult<Next> {
        if id != self.core.stream_id {
            return Err(new_err(
                Kind::Error,
                "this generation was ended by a later call on the same session",
            ));
        }
        let Some(stream) = self.core.stream.as_mut() else {
            return Ok(Next::End);
        };
        if let Err(e) = py.check_signals() {
            // Ctrl-C: end the generation; the session keeps what it ran and stays usable.
            self.core.stream = None;
            self.finish = Some(PyFinish::new(FinishReason::Cancelled));
            return Err(e);
        }
        match py.allow_threads(|| stream.next()) {
            Some(Ok(StreamEvent::Token { id, text })) => {
                let lp = stream.last_logprob();
                let token = PyToken {
                    id: Some(id),
                    text,
                    logprob: lp.map(|l| l.logprob),
                    top_logprobs: lp.map(|l| l.top.clone()),
                };
                if let Some(hook) = &self.stop_hook {
                    let stop = hook.call1(py, (stream.context().to_vec(), logits_bytes(py, stream.logits())));
                    match stop.and_then(|v| v.is_truthy(py)) {
                        Ok(true) => stream.finish_after_token(FinishReason::StopString),
                        Ok(false) => {}
                        Err(e) => {
                            self.core.stream = None;
                            return Err(e);
                        }
                    }
                }
                Ok(Next::Token(token))
            }
            Some(Ok(StreamEvent::Finished { text, stats, .. })) => {
                self.core.stream = None;
                self.stop_hook = None;
                self.finish = Some(PyFinish::from_stats(&stats));
                Ok(if text.is_empty() { Next::End } else { Next::Token(PyToken::text_only(text)) })
            }
            Some(Err(e)) => {
                self.core.stream = None;
                let raised = self.hook_error.lock().ok().and_then(|mut slot| slot.take());
                Err(raised.unwrap_or_else(|| to_py(e)))
            }
            None => {
                self.core.stream = None;
                Ok(Next::End)
            }
        }
    }

    fn begin(&mut self, py: Python<'_>, prompt: Prompt, params: &PyGenParams, hooks: Hooks) -> PyResult<u64> {
        let tokens = prompt.tokens(&self.core.model)?;
        self.finish = None;
        let core = &mut self.core;
        let id = py.allow_threads(|| core.start(&tokens, &params.params)).map_err(to_py)?;
        self.stop_hook = hooks.stopping_criteria;
        if let Some(stream) = self.core.stream.as_mut() {
            stream.set_logprobs(hooks.logprobs);
            stream.set_logits_processor(
                hooks.logits_processor.map(|hook| python_processor(hook, self.hook_error.clone())),
            );
        }
        Ok(id)
    }
}

#[pymethods]
impl PySession {
    /// A session on `model` with an `n_ctx`-token context. `policy` (`none`, `sliding`, `h2o`,
    /// `snapkv`, …), `window`, `protected_prefix` and `kv_budget` set KV-cache eviction.
    #[new]
    #[pyo3(signature = (
        model, *, n_ctx=4096, n_batch=512, type_k="f16", type_v="f16", policy="none", window=256,
        protected_prefix=4, kv_budget=None, memory_threshold_mb=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &PyModel,
        n_ctx: usize,
        n_batch: usize,
        type_k: &str,
        type_v: &str,
        policy: &str,
        window: usize,
        protected_prefix: usize,
        kv_budget: Option<usize>,
        memory_threshold_mb: Option<u64>,
    ) -> PyResult<Self> {
        let policy = PolicyKind::from_name(policy)
            .ok_or_else(|| new_err(Kind::Invalid, format!("unknown eviction policy '{policy}'")))?;
        let cache = CacheOptions {
            policy,
            window,
            protected_prefix,
            kv_budget,
            memory_threshold_mb,
            ..Default::default()
        };
        let opts =
            SessionOptions { n_ctx, n_batch, type_k: kv_type(type_k)?, type_v: kv_type(type_v)?, cache };
        let model = model.inner().clone();
        let core = py.allow_threads(|| Core::new(model, opts)).map_err(to_py)?;
        // SAFETY: `core.session` is valid (just made) and not borrowed by a stream.
        let cancel = unsafe { core.session.as_ref() }.cancel_handle();
        Ok(Self { core, cancel, finish: None, stop_hook: None, hook_error: Arc::default() })
    }

    /// The context size.
    #[getter]
    fn n_ctx(&mut self) -> usize {
        self.core.session().n_ctx()
    }

    /// The tokens the cache holds (prompt and generated so far). Ends a running generation.
    #[getter]
    fn tokens(&mut self) -> Vec<u32> {
        self.core.session().tokens().to_vec()
    }

    /// Tokens whose keys and values are cached (fewer than `tokens` after evictions).
    #[getter]
    fn kv_len(&mut self) -> usize {
        self.core.session().kv_len()
    }

    /// Bytes of KV cache in use.
    #[getter]
    fn kv_memory_bytes(&mut self) -> usize {
        self.core.session().kv_memory_bytes()
    }

    /// How the last generation ended (`None` while one runs or before the first).
    #[getter]
    fn last_finish(&self) -> Option<PyFinish> {
        self.finish.clone()
    }

    /// Forgets the cache: the next prompt is prefilled from scratch.
    fn reset(&mut self) {
        self.core.session().reset();
    }

    /// A handle that stops this session's running generation from any thread (the session
    /// itself is busy while it generates).
    fn cancel_handle(&self) -> PyCancelHandle {
        PyCancelHandle(self.cancel.clone())
    }

    /// Makes the cache hold exactly `prompt` (text or token ids), reusing its longest cached
    /// prefix, with the logits after it ready for the next generation.
    fn prefill(&mut self, py: Python<'_>, prompt: Prompt) -> PyResult<()> {
        let tokens = prompt.tokens(&self.core.model)?;
        let session = self.core.session();
        py.allow_threads(|| session.prefill(&tokens)).map(drop).map_err(to_py)
    }

    /// Starts a generation of a reply to the whole `prompt` (text or token ids): the longest
    /// cached prefix is reused, the rest prefilled now. Returns an iterator of `Token`s; a later
    /// call on this session ends it.
    ///
    /// `logits_processor(ids, scores)` is called before each token is sampled with the context's
    /// token ids (a list) and the logits (a `bytearray` of native float32s) and returns the
    /// logits to sample from (`bytes` of as many native float32s); `stopping_criteria(ids,
    /// scores)` is called after each token (ids without it, the logits it was sampled from) and
    /// ends the generation (reason `stop`) when it returns true. `logprobs=k` fills each
    /// token's `logprob` and `k` best `top_logprobs`.
    #[pyo3(signature = (prompt, params, *, logits_processor=None, stopping_criteria=None, logprobs=None))]
    fn stream(
        slf: &Bound<'_, Self>,
        prompt: Prompt,
        params: &PyGenParams,
        logits_processor: Option<Py<PyAny>>,
        stopping_criteria: Option<Py<PyAny>>,
        logprobs: Option<usize>,
    ) -> PyResult<PyStream> {
        let hooks = Hooks { logits_processor, stopping_criteria, logprobs };
        let id = slf.borrow_mut().begin(slf.py(), prompt, params, hooks)?;
        Ok(PyStream { session: slf.clone().unbind(), id })
    }

    /// Generates a whole reply: `(text, token ids, Finish)`. Ctrl-C stops it (the session stays
    /// usable). The keywords are those of `stream`.
    #[pyo3(signature = (prompt, params, *, logits_processor=None, stopping_criteria=None))]
    fn generate(
        &mut self,
        py: Python<'_>,
        prompt: Prompt,
        params: &PyGenParams,
        logits_processor: Option<Py<PyAny>>,
        stopping_criteria: Option<Py<PyAny>>,
    ) -> PyResult<(String, Vec<u32>, PyFinish)> {
        let hooks = Hooks { logits_processor, stopping_criteria, logprobs: None };
        let id = self.begin(py, prompt, params, hooks)?;
        let (mut text, mut tokens) = (String::new(), Vec::new());
        while let Next::Token(t) = self.next(py, id)? {
            text.push_str(&t.text);
            tokens.extend(t.id);
        }
        let finish = self
            .finish
            .clone()
            .ok_or_else(|| new_err(Kind::Error, "the generation ended without a result"))?;
        Ok((text, tokens, finish))
    }

    fn __repr__(&mut self) -> String {
        let s = self.core.session();
        format!("Session(n_ctx={}, n_tokens={})", s.n_ctx(), s.tokens().len())
    }
}

/// A running generation of a `Session`: iterate it for `Token`s; `finish` tells how it ended.
#[pyclass(name = "SessionStream", module = "ferrolm._ferrolm")]
pub struct PyStream {
    session: Py<PySession>,
    id: u64,
}

#[pymethods]
impl PyStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyToken>> {
        let mut session = self
            .session
            .bind(py)
            .try_borrow_mut()
            .map_err(|_| new_err(Kind::Error, "the session is busy in another thread"))?;
        match session.next(py, self.id)? {
            Next::Token(t) => Ok(Some(t)),
            Next::End => Ok(None),
        }
    }

    /// How the generation ended (`None` until it has).
    #[getter]
    fn finish(&self, py: Python<'_>) -> Option<PyFinish> {
        let session = self.session.bind(py).borrow();
        if session.core.stream_id == self.id && session.core.stream.is_none() {
            session.finish.clone()
        } else {
            None
        }
    }

    /// Ends the generation now (the session keeps the tokens it ran).
    fn close(&self, py: Python<'_>) {
        if let Ok(mut session) = self.session.bind(py).try_borrow_mut()
            && session.core.stream_id == self.id
            && session.core.stream.is_some()
        {
            session.core.stream = None;
            session.finish = Some(PyFinish::new(FinishReason::Cancelled));
        }
    }
}
