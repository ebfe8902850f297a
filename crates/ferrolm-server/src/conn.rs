//! The connection layer: an accept loop over hyper's HTTP/1 connections with limits, so that
//! idle or half-sent connections cannot use up the process's file descriptors.
//!
//! - headers must arrive within [`ConnLimits::header_timeout`] (hyper closes the connection);
//! - a request body must arrive within [`ConnLimits::body_timeout`] of its headers (the handler
//!   gets a JSON 408);
//! - a connection with no request in flight is closed after [`ConnLimits::idle_timeout`];
//! - at most [`ConnLimits::max_connections`] are open (and [`ConnLimits::max_per_client`] per
//!   client address): a new connection over the cap closes the one idle the longest, and only
//!   when every one has a request in flight is the new one refused (503, JSON);
//! - hyper's own answers to requests it cannot parse get JSON bodies (`json_errors`).

mod json_errors;

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

use crate::api::ApiError;

/// Descriptors kept free for the model files, the log, the engine's threads and the like when
/// the connection cap is derived from the descriptor limit.
pub const FD_RESERVE: u64 = 64;

/// The limits of the connection layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Longest wait for a request's headers (from its first byte, or the connection's start).
    pub header_timeout: Duration,
    /// Longest wait for a request's body after its headers.
    pub body_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// Most open connections.
    pub max_connections: usize,
    /// Most open connections from one client address (0: only the global cap).
    pub max_per_client: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 512,
            max_per_client: 0,
        }
    }
}

/// The connection cap that keeps [`FD_RESERVE`] descriptors free under a soft limit of
/// `nofile` (at least 8, at most `wanted` when given).
pub fn derive_max_connections(nofile: u64, wanted: Option<usize>) -> usize {
    let room = usize::try_from(nofile.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX).max(8);
    wanted.map_or(room, |w| w.min(room))
}

/// Raises the soft file-descriptor limit to the hard limit; the soft limit in force after.
#[cfg(unix)]
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: `raised` is a valid rlimit that only raises the soft limit up to the hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        } else {
            tracing::warn!(err = %std::io::Error::last_os_error(), "cannot raise the descriptor limit");
        }
    }
    tracing::info!(before, soft = lim.rlim_cur, hard = lim.rlim_max, "open file descriptor limit");
    Ok(lim.rlim_cur)
}

/// Without `setrlimit`: no known limit.
#[cfg(not(unix))]
pub fn raise_fd_limit() -> std::io::Result<u64> {
    Ok(u64::MAX)
}

/// One open connection, as the accept loop sees it.
struct Conn {
    id: u64,
    client: IpAddr,
    /// Requests in flight (headers read, response body not yet sent).
    busy: AtomicUsize,
    /// When the last request ended, in milliseconds since the tracker's start.
    idle_since_ms: AtomicU64,
    /// Set to close the connection now.
    kill: Notify,
    killed: AtomicBool,
}

impl Conn {
    fn close(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.notify_one();
    }
}

/// Counts a request in flight until dropped.
struct BusyGuard {
    conn: Arc<Conn>,
    start: Instant,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.conn.idle_since_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Release);
        self.conn.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections.
struct Tracker {
    start: Instant,
    limits: ConnLimits,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
}

impl Tracker {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Registers a new connection from `client`, closing the longest-idle one when a cap is
    /// reached; `None` when every connection in the way has a request in flight.
    fn admit(&self, client: IpAddr) -> Option<Arc<Conn>> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let per = self.limits.max_per_client;
        if per > 0 && conns.values().filter(|c| c.client == client).count() >= per {
            evict_idlest(&mut conns, |c| c.client == client)?;
        }
        if conns.len() >= self.limits.max_connections.max(1) {
            evict_idlest(&mut conns, |_| true)?;
        }
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            client,
            busy: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            kill: Notify::new(),
            killed: AtomicBool::new(false),
        });
        conns.insert(conn.id, conn.clone());
        Some(conn)
    }

    fn remove(&self, id: u64) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    fn len(&self) -> usize {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Closes (and forgets) the connection matching `pick` idle the longest; `None` if all are busy.
fn evict_idlest(conns: &mut HashMap<u64, Arc<Conn>>, pick: impl Fn(&Conn) -> bool) -> Option<()> {
    let victim = conns
        .values()
        .filter(|c| pick(c) && c.busy.load(Ordering::Acquire) == 0)
        .min_by_key(|c| c.idle_since_ms.load(Ordering::Acquire))?
        .clone();
    conns.remove(&victim.id);
    victim.close();
    tracing::debug!(client = %victim.client, "connection cap reached: closing the longest-idle connection");
    Some(())
}

/// The start of a [`BodyTimeout`]'s message (the HTTP layer answers 408 to it).
pub(crate) const BODY_TIMEOUT: &str = "request body timeout";

/// A request body that fails once `deadline` passes before its end.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

/// The error of a body not received in time.
#[derive(Debug, thiserror::Error)]
#[error("{BODY_TIMEOUT}: not received within {0:?} (see --body-timeout)")]
struct BodyTimeout(Duration);

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(f) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(f.map(|r| r.map_err(Into::into)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let e: Self::Error = Box::new(BodyTimeout(self.timeout));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `app` on `listeners` with `limits` until `shutdown` flips to true; then idle
/// connections are closed at once and busy ones after their response. Returns a receiver that
/// turns true once every connection is closed.
pub(crate) fn spawn_server(
    listeners: Vec<TcpListener>,
    app: Router,
    limits: ConnLimits,
    mut shutdown: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let tracker = Arc::new(Tracker {
        start: Instant::now(),
        limits,
        conns: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
    });
    let (done_tx, done_rx) = watch::channel(false);
    tokio::spawn(async move {
        let (conns_tx, _) = watch::channel(());
        loop {
            tokio::select! {
                _ = flipped(&mut shutdown) => break,
                r = accept_any(&listeners) => match r {
                    Ok((stream, peer)) => accept(stream, peer, &tracker, &app, &shutdown, &conns_tx),
                    Err(e) => {
                        // EMFILE and the like: wait instead of spinning.
                        tracing::warn!(err = %e, open = tracker.len(), "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        drop(listeners);
        // Every connection task holds a receiver: wait for the last one to end.
        conns_tx.closed().await;
        let _ = done_tx.send(true);
    });
    done_rx
}

/// The next connection on any of `listeners`.
async fn accept_any(listeners: &[TcpListener]) -> std::io::Result<(TcpStream, SocketAddr)> {
    if let [one] = listeners {
        return one.accept().await;
    }
    let accepts = listeners.iter().map(|l| Box::pin(l.accept()));
    futures_util::future::select_all(accepts).await.0
}

/// Completes once `rx` holds true (or its sender is gone).
pub(crate) async fn flipped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Admits a connection and spawns its task, or refuses it with a 503.
fn accept(
    stream: TcpStream,
    peer: SocketAddr,
    tracker: &Arc<Tracker>,
    app: &Router,
    shutdown: &watch::Receiver<bool>,
    conns: &watch::Sender<()>,
) {
    let _ = stream.set_nodelay(true);
    let Some(conn) = tracker.admit(peer.ip()) else {
        tracing::warn!(client = %peer, "every connection is busy: refusing a new one");
        tokio::spawn(refuse(stream));
        return;
    };
    let task = serve_conn(stream, conn, tracker.clone(), app.clone(), shutdown.clone(), conns.subscribe());
    tokio::spawn(task);
}

/// Answers 503 (JSON) and closes.
async fn refuse(mut stream: TcpStream) {
    let body = ApiError::busy("too many open connections, all busy: retry later", 1).body().to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), write).await;
}

/// Serves one connection until it ends, is closed for idleness or eviction, or the server
/// shuts down (then after its request in flight).
async fn serve_conn(
    stream: TcpStream,
    conn: Arc<Conn>,
    tracker: Arc<Tracker>,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    _alive: watch::Receiver<()>,
) {
    let limits = tracker.limits;
    let svc_conn = conn.clone();
    let svc_tracker = tracker.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let app = app.clone();
        svc_conn.busy.fetch_add(1, Ordering::AcqRel);
        let guard = BusyGuard { conn: svc_conn.clone(), start: svc_tracker.start };
        async move {
            let req = req.map(|inner| {
                let deadline = Box::pin(tokio::time::sleep(limits.body_timeout));
                Body::new(DeadlineBody { inner, deadline, timeout: limits.body_timeout })
            });
            let resp = app.oneshot(req).await.unwrap_or_else(|e| match e {});
            Ok::<_, std::convert::Infallible>(hold_until_sent(resp, guard))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true)
        // `Content-Type`, not `content-type`: names are case-insensitive, but some clients
        // (llama.cpp's server tests among them) look response headers up by their usual case.
        .title_case_headers(true)
        .max_headers(2 * crate::api::MAX_HEADERS);
    let http = builder.serve_connection(TokioIo::new(json_errors::JsonErrors::new(stream)), service);
    tokio::pin!(http);
    let mut closing = false;
    let idle_left = || {
        let since = conn.idle_since_ms.load(Ordering::Acquire);
        limits.idle_timeout.saturating_sub(Duration::from_millis(tracker.now_ms().saturating_sub(since)))
    };
    loop {
        tokio::select! {
            r = http.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(err = %e, "connection ended with an error");
                }
                break;
            }
            _ = conn.kill.notified() => break,
            _ = flipped(&mut shutdown), if !closing => {
                closing = true;
                if conn.busy.load(Ordering::Acquire) == 0 {
                    break;
                }
                http.as_mut().graceful_shutdown();
            }
            // While busy, look again an idle timeout later (so at most twice it after the end).
            _ = tokio::time::sleep(if conn.busy.load(Ordering::Acquire) > 0 {
                limits.idle_timeout
            } else {
                idle_left().max(Duration::from_millis(10))
            }) => {
                if conn.busy.load(Ordering::Acquire) == 0 && idle_left().is_zero() {
                    tracing::debug!(client = %conn.client, "closing an idle connection");
                    break;
                }
            }
        }
        if conn.killed.load(Ordering::Acquire) && conn.busy.load(Ordering::Acquire) == 0 {
            break;
        }
    }
    tracker.remove(conn.id);
}

/// The response, with `guard` released once its body is sent (or dropped).
fn hold_until_sent(resp: Response<Body>, guard: BusyGuard) -> Response<Body> {
    resp.map(|inner| Body::new(GuardedBody { inner, _guard: guard }))
}

/// A response body holding its connection's [`BusyGuard`].
struct GuardedBody {
    inner: Body,
    _guard: BusyGuard,
}

impl hyper::body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(max: usize, per: usize) -> Tracker {
        let limits = ConnLimits { max_connections: max, max_per_client: per, ..ConnLimits::default() };
        Tracker {
            start: Instant::now(),
            limits,
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }

    #[test]
    fn the_cap_closes_the_longest_idle_connection_and_refuses_only_when_all_are_busy() {
        let t = tracker(3, 0);
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        let c: Vec<_> = (0..3).map(|_| t.admit(ip).expect("room")).collect();
        c[0].idle_since_ms.store(50, Ordering::Release);
        c[1].idle_since_ms.store(10, Ordering::Release);
        c[2].idle_since_ms.store(30, Ordering::Release);
        let d = t.admit(ip).expect("evicts");
        assert!(c[1].killed.load(Ordering::Acquire), "the idlest went");
        assert!(!c[0].killed.load(Ordering::Acquire) && !c[2].killed.load(Ordering::Acquire));
        assert_eq!(t.len(), 3);
        for x in [&c[0], &c[2], &d] {
            x.busy.store(1, Ordering::Release);
        }
        assert!(t.admit(ip).is_none(), "all busy: refused");
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn the_per_client_cap_evicts_that_clients_connection() {
        let t = tracker(10, 2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().expect("a"), "10.0.0.2".parse().expect("b"));
        let other = t.admit(b).expect("b");
        other.idle_since_ms.store(0, Ordering::Release);
        let a1 = t.admit(a).expect("a1");
        let a2 = t.admit(a).expect("a2");
        a1.idle_since_ms.store(5, Ordering::Release);
        a2.idle_since_ms.store(7, Ordering::Release);
        t.admit(a).expect("a3 evicts a1");
        assert!(a1.killed.load(Ordering::Acquire));
        assert!(!other.killed.load(Ordering::Acquire), "another client's connection stays");
    }

    #[test]
    fn the_derived_cap_stays_below_the_descriptor_limit() {
        assert_eq!(derive_max_connections(256, None), 192);
        assert_eq!(derive_max_connections(256, Some(100)), 100);
        assert_eq!(derive_max_connections(256, Some(1000)), 192);
        assert_eq!(derive_max_connections(10, None), 8);
    }
}
