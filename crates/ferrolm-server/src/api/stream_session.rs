//! Resumable streams (llama-server's `X-Conversation-Id`): a streamed request carrying the
//! header becomes a *session* whose SSE bytes are kept, so that a client that went away (a
//! page reload) can replay them and follow the rest.
//!
//! - A session is created when the stream starts (`sse_response`); a new request with the same
//!   id replaces it and cancels the old generation. Without the header nothing is kept and a
//!   disconnect cancels the request as before.
//! - A producer task owns the engine receivers and appends every `data: …\n\n` event to the
//!   session; the client's body only reads the session, so dropping it does not stop the
//!   generation. The producer stops at the end of the stream or when the session is cancelled
//!   (`DELETE /v1/stream`); either way the session is then *done* and readers end.
//! - Offsets are bytes of the SSE text (as llama-server counts them); a session keeps at most
//!   [`MAX_BYTES`], dropping its oldest bytes beyond that (a read before them answers 400).
//! - Done sessions are kept [`TTL`] after they finish, and at most [`MAX_SESSIONS`] sessions in
//!   all: the oldest done ones go first; running ones are never evicted.
//! - In multi-model serving the front creates the session *loading* before the model loads
//!   (reads answer 503) and hands it to the model's server through a [`Ticket`].
//! - Lookups answer only for the ids asked (the exact id or `ID::model` variants).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::error::ApiError;
use super::json_response;
use super::response::unix_now;

/// How long a finished session stays readable.
pub(crate) const TTL: Duration = Duration::from_secs(300);
/// The most SSE bytes a session keeps (older bytes are dropped).
pub(crate) const MAX_BYTES: usize = 4 * 1024 * 1024;
/// The most sessions kept at once (finished ones are evicted first, oldest first).
pub(crate) const MAX_SESSIONS: usize = 256;
/// The longest conversation id accepted.
const MAX_ID_LEN: usize = 512;
/// A comment line sent to a reader after this long without bytes.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

tokio::task_local! {
    /// The session of the request being handled (set by [`conversation`]).
    pub(crate) static REQUEST_SESSION: Ticket;
}

/// How a request names its session.
#[derive(Clone)]
pub(crate) enum Ticket {
    /// The `X-Conversation-Id` header: the session is created when the stream starts.
    Id(String),
    /// A session the multi-model front created while the model loaded.
    Made(Arc<Session>),
}

struct State {
    buf: Vec<u8>,
    /// Bytes dropped from the front of `buf`.
    dropped: usize,
    loading: bool,
    done: bool,
    completed_at: Option<u64>,
    finished: Option<Instant>,
}

/// One conversation's stream.
pub(crate) struct Session {
    id: String,
    started_at: u64,
    state: Mutex<State>,
    /// Bumped on every change of `state`.
    wake: watch::Sender<()>,
    cancel: watch::Sender<bool>,
}

/// A read before the bytes the session still keeps.
pub(crate) struct OffsetLost;

impl Session {
    fn new(id: String, loading: bool) -> Session {
        let state =
            State { buf: Vec::new(), dropped: 0, loading, done: false, completed_at: None, finished: None };
        Session {
            id,
            started_at: unix_now(),
            state: Mutex::new(state),
            wake: watch::Sender::new(()),
            cancel: watch::Sender::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the model is still loading (nothing streamed yet).
    pub(crate) fn is_loading(&self) -> bool {
        self.lock().loading
    }

    /// The stream has started.
    pub(crate) fn go_live(&self) {
        self.lock().loading = false;
        self.wake.send_replace(());
    }

    /// Appends SSE bytes, dropping the oldest beyond [`MAX_BYTES`].
    pub(crate) fn append(&self, bytes: &[u8]) {
        let mut s = self.lock();
        s.buf.extend_from_slice(bytes);
        if s.buf.len() > MAX_BYTES {
            let excess = s.buf.len() - MAX_BYTES;
            s.buf.drain(..excess);
            s.dropped += excess;
        }
        drop(s);
        self.wake.send_replace(());
    }

    /// The stream ended: readers end once they have read everything.
    pub(crate) fn finish(&self) {
        let mut s = self.lock();
        s.done = true;
        s.loading = false;
        s.completed_at = Some(unix_now());
        s.finished = Some(Instant::now());
        drop(s);
        self.wake.send_replace(());
    }

    /// Stops the generation (the producer, or the request waiting for its model).
    pub(crate) fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    /// Resolves once the session is cancelled.
    pub(crate) async fn cancelled(&self) {
        let mut rx = self.cancel.subscribe();
        // The sender lives in `self`, so this only ends on cancellation.
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Resolves once the stream ended.
    pub(crate) async fn wait_done(&self) {
        let mut rx = self.wake.subscribe();
        loop {
            rx.borrow_and_update();
            if self.lock().done {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// The bytes from `offset` on, waiting for some; `None` once the stream ended and all was read.
    pub(crate) async fn read(&self, offset: usize) -> Result<Option<Vec<u8>>, OffsetLost> {
        let mut rx = self.wake.subscribe();
        loop {
            rx.borrow_and_update();
            {
                let s = self.lock();
                if offset < s.dropped {
                    return Err(OffsetLost);
                }
                let at = offset - s.dropped;
                if at < s.buf.len() {
                    return Ok(Some(s.buf[at..].to_vec()));
                }
                if s.done {
                    return Ok(None);
                }
            }
            if rx.changed().await.is_err() {
                return Ok(None);
            }
        }
    }

    fn summary(&self) -> Value {
        let s = self.lock();
        json!({
            "conversation_id": self.id,
            "is_done": s.done,
            "total_bytes": s.dropped + s.buf.len(),
            "started_at": self.started_at,
            "completed_at": s.completed_at,
        })
    }
}

static STORE: LazyLock<Mutex<HashMap<String, Arc<Session>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn store() -> MutexGuard<'static, HashMap<String, Arc<Session>>> {
    STORE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops expired sessions, then the oldest finished ones while there are too many.
fn sweep(map: &mut HashMap<String, Arc<Session>>) {
    map.retain(|_, s| s.lock().finished.is_none_or(|t| t.elapsed() < TTL));
    while map.len() >= MAX_SESSIONS {
        let oldest =
            map.iter().filter_map(|(k, s)| s.lock().finished.map(|t| (t, k.clone()))).min().map(|(_, k)| k);
        match oldest {
            Some(k) => map.remove(&k),
            None => break,
        };
    }
}

/// A new session for `id`, replacing (and cancelling) any earlier one.
pub(crate) fn create(id: &str, loading: bool) -> Arc<Session> {
    let s = Arc::new(Session::new(id.to_string(), loading));
    let mut map = store();
    sweep(&mut map);
    if let Some(old) = map.insert(id.to_string(), s.clone()) {
        old.cancel();
    }
    s
}

/// The live or recently finished session `id`.
pub(crate) fn get(id: &str) -> Option<Arc<Session>> {
    let mut map = store();
    sweep(&mut map);
    map.get(id).cloned()
}

/// Removes `s` from the store if it is still the session of its id.
pub(crate) fn evict(s: &Arc<Session>) {
    let mut map = store();
    if map.get(&s.id).is_some_and(|cur| Arc::ptr_eq(cur, s)) {
        map.remove(&s.id);
    }
}

/// Cancels and removes session `id`; whether there was one.
pub(crate) fn remove_and_cancel(id: &str) -> bool {
    let old = store().remove(id);
    old.map(|s| s.cancel()).is_some()
}

/// The `X-Conversation-Id` header: `None` when absent, 400 when unusable.
pub(crate) fn header_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("x-conversation-id") else { return Ok(None) };
    let id =
        v.to_str().map_err(|_| ApiError::invalid("X-Conversation-Id must be visible ASCII text"))?.trim();
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(ApiError::invalid(format!("X-Conversation-Id must have 1 to {MAX_ID_LEN} characters")));
    }
    Ok(Some(id.to_string()))
}

/// Middleware: runs the request with its [`Ticket`] (a front-made session, else the header).
pub(crate) async fn conversation(req: Request, next: Next) -> Response {
    let ticket = match req.extensions().get::<Ticket>() {
        Some(t) => Some(t.clone()),
        None => match header_id(req.headers()) {
            Ok(id) => id.map(Ticket::Id),
            Err(e) => return e.into_response(),
        },
    };
    match ticket {
        Some(t) => REQUEST_SESSION.scope(t, next.run(req)).await,
        None => next.run(req).await,
    }
}

/// The session of the request being handled, created (or taken over) now; `None` without one.
pub(crate) fn start_current() -> Option<Arc<Session>> {
    let ticket = REQUEST_SESSION.try_with(Ticket::clone).ok()?;
    Some(match ticket {
        Ticket::Id(id) => create(&id, false),
        Ticket::Made(s) => {
            s.go_live();
            s
        }
    })
}

/// Sends `events` (SSE `data` payloads) to `session` in a task of its own, which ends with the
/// stream or when the session is cancelled (dropping `events`, which cancels the generation).
pub(crate) fn produce(session: Arc<Session>, mut events: BoxStream<'static, String>) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                biased;
                _ = session.cancelled() => break,
                next = events.next() => match next {
                    Some(data) => session.append(format!("data: {data}\n\n").as_bytes()),
                    None => break,
                },
            }
        }
        drop(events);
        session.finish();
    });
}

/// An SSE response reading `session` from byte `from` to its end.
pub(crate) fn reader_response(session: Arc<Session>, from: usize) -> Response {
    let body = stream::unfold((session, from, false), |(s, off, over)| async move {
        if over {
            return None;
        }
        match tokio::time::timeout(KEEP_ALIVE, s.read(off)).await {
            Err(_) => Some((Ok::<Bytes, std::io::Error>(Bytes::from_static(b":\n\n")), (s, off, false))),
            Ok(Ok(Some(b))) => {
                let n = off + b.len();
                Some((Ok(Bytes::from(b)), (s, n, false)))
            }
            Ok(Ok(None)) => None,
            Ok(Err(OffsetLost)) => {
                let e = ApiError::invalid("stream offset lost, please restart");
                Some((Ok(Bytes::from(format!("data: {}\n\n", e.body()))), (s, off, true)))
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|e| ApiError::internal(e.to_string()).into_response())
}

/// `conv_id` of a query, 400 when missing.
fn query_id(q: &HashMap<String, String>) -> Result<&str, ApiError> {
    q.get("conv_id")
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::invalid_param("conv_id", "missing conv_id query parameter"))
}

/// `GET /v1/stream?conv_id=ID&from=N`: the session's SSE bytes from byte `N` (default 0), then
/// the live tail; 404 for an unknown id, 503 while its model loads.
pub(crate) async fn get_stream(Query(q): Query<HashMap<String, String>>) -> Result<Response, ApiError> {
    let id = query_id(&q)?;
    let from = match q.get("from").map(|s| s.trim()).filter(|s| !s.is_empty()) {
        Some(s) => {
            s.parse::<usize>().map_err(|_| ApiError::invalid_param("from", "invalid 'from' offset"))?
        }
        None => 0,
    };
    let session =
        get(id).ok_or_else(|| ApiError::with_status(StatusCode::NOT_FOUND, "stream not found or expired"))?;
    if session.is_loading() {
        return Err(ApiError::busy("the stream's model is loading, retry later", 1));
    }
    if from < session.lock().dropped {
        return Err(ApiError::invalid_param("from", "stream offset lost, please restart"));
    }
    Ok(reader_response(session, from))
}

/// `DELETE /v1/stream?conv_id=ID`: cancels the generation and forgets the session (204, also
/// when there was none, as llama-server answers).
pub(crate) async fn delete_stream(Query(q): Query<HashMap<String, String>>) -> Result<Response, ApiError> {
    let id = query_id(&q)?;
    remove_and_cancel(id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/streams/lookup` with `{"conversation_ids": [...]}`: the sessions of those ids
/// (exact, or `ID::model`), never others.
pub(crate) async fn lookup(body: Bytes) -> Result<Response, ApiError> {
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("invalid body: {e}")))?;
    let ids = v
        .get("conversation_ids")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid_param("conversation_ids", "conversation_ids must be an array"))?;
    let mut asked = Vec::new();
    for id in ids {
        let id = id.as_str().ok_or_else(|| {
            ApiError::invalid_param("conversation_ids", "conversation_ids must hold strings")
        })?;
        if !id.is_empty() {
            asked.push(id.to_string());
        }
    }
    let sessions: Vec<Arc<Session>> = {
        let mut map = store();
        sweep(&mut map);
        let mut out: Vec<Arc<Session>> = map
            .values()
            .filter(|s| {
                asked
                    .iter()
                    .any(|a| s.id == *a || s.id.strip_prefix(a.as_str()).is_some_and(|r| r.starts_with("::")))
            })
            .cloned()
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    };
    let arr: Vec<Value> = sessions.iter().map(|s| s.summary()).collect();
    Ok(json_response(StatusCode::OK, &Value::Array(arr)))
}
