//! Messages to a caller process, with a cancel that is synchronous with sending: once
//! [`Outbox::close`] returns, no message of that stream is sent any more, so the caller can
//! flush its mailbox of the stream's messages and be sure none arrives later.

use std::sync::Mutex;

use ferrolm::decoder::FinishReason;
use rustler::{Encoder, Env, LocalPid, OwnedEnv, Term};

use crate::atoms;

/// The sending side of one stream: `{:ferrolm_stream, id, payload}` messages to `pid`.
pub(crate) struct Outbox {
    pid: LocalPid,
    id: u64,
    /// `Some` while open; the environment messages are built in.
    env: Mutex<Option<OwnedEnv>>,
}

impl Outbox {
    pub(crate) fn new(pid: LocalPid, id: u64) -> Self {
        Self { pid, id, env: Mutex::new(Some(OwnedEnv::new())) }
    }

    /// Sends one message unless the stream is closed; `false` when closed or the caller is gone
    /// (the stream then closes). Only from threads the VM does not manage (the engine thread,
    /// stream threads): rustler refuses owned-environment sends from scheduler threads.
    pub(crate) fn send<F>(&self, payload: F) -> bool
    where
        F: for<'a> FnOnce(Env<'a>) -> Term<'a>,
    {
        let mut guard = self.env.lock().unwrap_or_else(|e| e.into_inner());
        let Some(env) = guard.as_mut() else { return false };
        let id = self.id;
        let sent = env.send_and_clear(&self.pid, |e| (atoms::ferrolm_stream(), id, payload(e)).encode(e));
        if sent.is_err() {
            *guard = None;
        }
        sent.is_ok()
    }

    /// Closes the stream: no message is sent after this returns.
    pub(crate) fn close(&self) {
        *self.env.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether the stream was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.env.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}

/// `{:token, text}`.
pub(crate) fn token_msg(text: String) -> impl for<'a> FnOnce(Env<'a>) -> Term<'a> {
    move |e| (atoms::token(), text).encode(e)
}

/// `{:error, message}`.
pub(crate) fn error_msg(msg: String) -> impl for<'a> FnOnce(Env<'a>) -> Term<'a> {
    move |e| (atoms::error(), msg).encode(e)
}

/// The counts of a finished generation.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DoneInfo {
    pub(crate) finish: Option<FinishReason>,
    pub(crate) prompt_tokens: usize,
    pub(crate) cached_tokens: usize,
    pub(crate) completion_tokens: usize,
    pub(crate) queue_ms: f64,
    pub(crate) prompt_ms: f64,
    pub(crate) decode_ms: f64,
}

/// `{:done, rest_text, %{finish_reason: ..., prompt_tokens: ..., ...}}`.
pub(crate) fn done_msg(rest: String, d: DoneInfo) -> impl for<'a> FnOnce(Env<'a>) -> Term<'a> {
    move |e| (atoms::done(), rest, done_map(e, &d)).encode(e)
}

pub(crate) fn done_map<'a>(e: Env<'a>, d: &DoneInfo) -> Term<'a> {
    let finish = d.finish.map(|f| f.as_str()).unwrap_or("stop");
    let pairs: [(&str, Term<'a>); 7] = [
        ("finish_reason", finish.encode(e)),
        ("prompt_tokens", d.prompt_tokens.encode(e)),
        ("cached_tokens", d.cached_tokens.encode(e)),
        ("completion_tokens", d.completion_tokens.encode(e)),
        ("queue_ms", d.queue_ms.encode(e)),
        ("prompt_ms", d.prompt_ms.encode(e)),
        ("decode_ms", d.decode_ms.encode(e)),
    ];
    atom_map(e, &pairs)
}

/// A map with atom keys.
pub(crate) fn atom_map<'a>(e: Env<'a>, pairs: &[(&str, Term<'a>)]) -> Term<'a> {
    let mut map = rustler::types::map::map_new(e);
    for (k, v) in pairs {
        if let Ok(a) = rustler::types::atom::Atom::from_str(e, k) {
            map = map.map_put(a.encode(e), *v).unwrap_or(map);
        }
    }
    map
}
