//! JSON bodies on hyper's own error answers.
//!
//! hyper answers a request it cannot parse before the service sees it: a malformed method,
//! header, URI or version gets 400, a header section over its limits 431, a URI over its limit
//! 414, each with an empty body (then it closes the connection). [`JsonErrors`] wraps the socket
//! and recognises such an answer on its way out: a head of one of those statuses with
//! `content-length: 0` and no `content-type`, written at the start of a response. It sends the
//! same status with the server's JSON error body instead. Every answer the service makes has a
//! `content-type` (or a body), so none of them is touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::api::ApiError;

/// A socket whose outgoing automatic error answers get JSON bodies.
pub(crate) struct JsonErrors<S> {
    inner: S,
    /// A rewritten answer still to send (from `sent`).
    pending: Vec<u8>,
    sent: usize,
}

impl<S> JsonErrors<S> {
    pub(crate) fn new(inner: S) -> Self {
        JsonErrors { inner, pending: Vec::new(), sent: 0 }
    }
}

/// The answer to send instead of `buf` when `buf` starts with one of hyper's automatic error
/// heads; `None` for anything else.
pub(crate) fn rewrite(buf: &[u8]) -> Option<Vec<u8>> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let (code, message) = match rest.get(..4)? {
        b"400 " => {
            (StatusCode::BAD_REQUEST, "malformed HTTP request: its method, a header, the URI or the version")
        }
        b"414 " => (StatusCode::URI_TOO_LONG, "the request URI is too long"),
        b"431 " => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request's header section is too large (too many header lines or bytes)",
        ),
        _ => return None,
    };
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let empty = head.lines().any(|l| l.trim() == "content-length: 0");
    if !empty || head.lines().any(|l| l.starts_with("content-type:")) || buf.len() != end + 4 {
        return None;
    }
    let body = ApiError::with_status(code, message).body().to_string();
    let reason = code.canonical_reason().unwrap_or("");
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        code.as_u16(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

impl<S: AsyncWrite + Unpin> JsonErrors<S> {
    /// Sends what is left of a rewritten answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.pending.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Sends `out` in place of the `n` bytes hyper wrote, and reports those as written.
    fn answer_instead(&mut self, cx: &mut Context<'_>, out: Vec<u8>, n: usize) -> Poll<io::Result<usize>> {
        tracing::debug!("answering a malformed request with a JSON error");
        self.pending = out;
        ready!(self.poll_pending(cx))?;
        Poll::Ready(Ok(n))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(out) = rewrite(buf) {
            return self.answer_instead(cx, out, buf.len());
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        // hyper writes a head without a body as one slice.
        if let [only] = bufs
            && let Some(out) = rewrite(only)
        {
            return self.answer_instead(cx, out, only.len());
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(out: &[u8]) -> (String, serde_json::Value) {
        let s = String::from_utf8(out.to_vec()).expect("utf-8");
        let (head, body) = s.split_once("\r\n\r\n").expect("a head");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.parse().ok())
            .expect("content-length");
        assert_eq!(len, body.len());
        (head.to_string(), serde_json::from_str(body).expect("a JSON body"))
    }

    #[test]
    fn automatic_error_heads_get_json_bodies() {
        for (code, line) in [
            (400, "400 Bad Request"),
            (414, "414 URI Too Long"),
            (431, "431 Request Header Fields Too Large"),
        ] {
            let head = format!(
                "HTTP/1.1 {line}\r\ncontent-length: 0\r\ndate: Thu, 26 Nov 2026 00:00:00 GMT\r\n\r\n"
            );
            let out = rewrite(head.as_bytes()).expect("rewritten");
            let (h, v) = parts(&out);
            assert!(h.starts_with(&format!("HTTP/1.1 {line}\r\n")), "{h}");
            assert!(h.contains("content-type: application/json") && h.contains("connection: close"));
            assert_eq!(v["error"]["type"], "invalid_request_error");
            assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{code}: {v}");
        }
    }

    #[test]
    fn answers_of_the_service_are_left_alone() {
        let json = "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        let with_body = "HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}";
        let chunked = "HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked\r\n\r\n";
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        let other = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
        let partial = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n";
        for s in [json, with_body, chunked, ok, other, partial, "", "HTTP/1.1 4"] {
            assert_eq!(rewrite(s.as_bytes()), None, "{s:?}");
        }
    }
}
