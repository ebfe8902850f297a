//! Tests of the HTTP layer against a scripted backend (no model, no engine).

mod anthropic;
mod chat;
mod completions;
mod conn;
mod constraint;
mod fake;
mod fuzz;
mod harmony;
mod misc;
mod multi;
mod native;
mod responses;
mod sleep;
mod slots;
mod stream_session;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use super::{AppState, ServerConfig, routes};
use fake::Fake;

/// Everything the server sends on `s` until it closes, waiting at most `secs` seconds.
pub(crate) async fn read_answer(s: &mut tokio::net::TcpStream, secs: u64) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(secs), s.read_to_string(&mut out))
        .await
        .expect("answered in time")
        .expect("read");
    out
}

/// A router over `fake` with `cfg`.
pub(crate) fn app_with(fake: Arc<Fake>, cfg: ServerConfig) -> Router {
    let state = AppState::new(fake, Arc::new(cfg), 1_700_000_000);
    routes::router(state).expect("router")
}

/// A router over `fake` with the default configuration (model id `smol`, alias `alias`).
pub(crate) fn app(fake: Arc<Fake>) -> Router {
    app_with(fake, config())
}

pub(crate) fn config() -> ServerConfig {
    ServerConfig { model_id: "smol".into(), aliases: vec!["alias".into()], ..ServerConfig::default() }
}

/// A response, read whole.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of an SSE body.
    pub(crate) fn events(&self) -> Vec<String> {
        assert!(
            self.headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream")),
            "not SSE: {:?}",
            self.headers
        );
        // Every event is `data: <payload>\n\n`.
        assert!(self.body.ends_with("\n\n"), "{:?}", self.body);
        self.body
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data line: {e:?}")).to_string())
            .collect()
    }

    /// The `(event, data)` pairs of an SSE body of named events (Anthropic's, the Responses
    /// API's).
    pub(crate) fn named_events(&self) -> Vec<(String, Value)> {
        self.body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let field = |name: &str| {
                    e.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .unwrap_or_else(|| panic!("no {name} in {e:?}"))
                };
                (field("event: ").to_string(), serde_json::from_str(field("data: ")).expect("JSON data"))
            })
            .collect()
    }

    /// The SSE payloads as JSON (all but the final `[DONE]`, which must be there).
    pub(crate) fn chunks(&self) -> Vec<Value> {
        let mut events = self.events();
        assert_eq!(events.pop().as_deref(), Some("[DONE]"));
        events.iter().map(|e| serde_json::from_str(e).expect("JSON chunk")).collect()
    }

    /// A 200 answer's JSON body.
    pub(crate) fn assert_ok(&self) -> Value {
        assert_eq!(self.status.as_u16(), 200, "{}", self.body);
        self.json()
    }

    /// An OpenAI error of this status and type.
    pub(crate) fn assert_error(&self, status: u16, kind: &str) -> Value {
        assert_eq!(self.status.as_u16(), status, "{}", self.body);
        let v = self.json();
        assert_eq!(v["error"]["type"], kind, "{}", self.body);
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        v
    }
}

/// Sends one request.
pub(crate) async fn send(
    app: &Router,
    method: Method,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Answer {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string()))).expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    Answer { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
}

pub(crate) async fn post(app: &Router, path: &str, body: &str) -> Answer {
    send(app, Method::POST, path, Some(body), &[]).await
}

pub(crate) async fn get(app: &Router, path: &str) -> Answer {
    send(app, Method::GET, path, None, &[]).await
}

/// The text of tokens under the fake tokenizer.
pub(crate) fn detok(fake: &Fake, tokens: &[u32]) -> String {
    use super::backend::Backend;
    let bytes: Vec<u8> = tokens.iter().flat_map(|&t| fake.piece(t)).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
