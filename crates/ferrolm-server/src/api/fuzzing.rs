//! Entry point for the `cargo fuzz` target `http_request` (`fuzz/`): a request body through the
//! real router and its validation, without a model. Not a stable API.
//!
//! The backend is a stand-in: a byte-level tokenizer, a ChatML template, a queue that refuses
//! every generation (so a request that passes validation ends in a 503, never in a forward
//! pass) and embeddings of zeros. Nothing here changes the server: it only calls the router.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use ferrolm::chat::ChatTemplate;
use ferrolm::engine::{EngineError, GenRequest, MetricsSnapshot, RequestHandle, SlotInfo, SubmitError};
use ferrolm::model::Pooling;
use tower::ServiceExt as _;

use super::backend::{Backend, BoxFuture};
use super::{AppState, ServerConfig, routes};

/// The routes [`request`] accepts.
pub const ROUTES: [&str; 3] = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{% if tools %}{{ tools | tojson }}{% endif %}";

/// The stand-in backend.
struct Stub {
    template: ChatTemplate,
}

impl Backend for Stub {
    fn n_ctx(&self) -> usize {
        256
    }
    fn evicts(&self) -> bool {
        false
    }
    fn n_vocab(&self) -> usize {
        257
    }
    fn bos(&self) -> Option<u32> {
        Some(256)
    }
    fn bos_eos_text(&self) -> (String, String) {
        ("<s>".into(), "</s>".into())
    }
    fn tokenize(&self, text: &str, add_special: bool, _parse_special: bool) -> Result<Vec<u32>, String> {
        Ok(add_special.then_some(256).into_iter().chain(text.bytes().map(u32::from)).collect())
    }
    fn piece(&self, id: u32) -> Vec<u8> {
        u8::try_from(id).map(|b| vec![b]).unwrap_or_else(|_| b"<s>".to_vec())
    }
    fn chat_template(&self) -> Result<&ChatTemplate, String> {
        Ok(&self.template)
    }
    fn submit(&self, _req: GenRequest) -> Result<RequestHandle, SubmitError> {
        Err(SubmitError::ShuttingDown)
    }
    fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
        _pooling: Option<Pooling>,
        _normalize: bool,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EngineError>> {
        Box::pin(async move { Ok(inputs.iter().map(|_| vec![0.0; 4]).collect()) })
    }
    fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot::default()
    }
    fn slots(&self) -> Vec<SlotInfo> {
        Vec::new()
    }
    fn shutdown(&self) {}
    fn cancel_all(&self) {}
    fn wait_idle(&self, _timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }
}

/// One current-thread runtime and one router for every call.
static RIG: LazyLock<(tokio::runtime::Runtime, axum::Router)> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let template = ChatTemplate::new(CHATML).expect("the stand-in template compiles");
    let cfg = ServerConfig { model_id: "m".into(), ..ServerConfig::default() };
    let state = AppState::new(Arc::new(Stub { template }), Arc::new(cfg), 0);
    (rt, routes::router(state).expect("router"))
});

/// POSTs `body` to `route` (one of [`ROUTES`]) and returns the status and the response body.
/// Panics (the fuzzer's crash) when the server answers 500, or an error that is not JSON.
pub fn request(route: &str, body: &[u8]) -> (StatusCode, Vec<u8>) {
    let (rt, router) = &*RIG;
    let req = Request::builder()
        .method(Method::POST)
        .uri(route)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("request");
    let (status, bytes) = rt.block_on(async {
        let res = router.clone().oneshot(req).await.expect("the router is infallible");
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await.expect("response body");
        (status, bytes.to_vec())
    });
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{route}: {}", String::from_utf8_lossy(&bytes));
    if !status.is_success() {
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("an error body is JSON");
        assert!(v["error"]["message"].is_string(), "{route}: not an OpenAI error: {v}");
    }
    (status, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_and_invalid_bodies_answer_without_a_model() {
        let (s, _) = request(ROUTES[0], br#"{"messages":[{"role":"user","content":"hi"}]}"#);
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "validation passed, the stub queue refused");
        let (s, b) = request(ROUTES[1], br#"{"prompt":{}}"#);
        assert_eq!(s, StatusCode::BAD_REQUEST, "{}", String::from_utf8_lossy(&b));
        let (s, b) = request(ROUTES[2], br#"{"input":["a","b"]}"#);
        assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
        let (s, _) = request(ROUTES[2], b"{\"input\":");
        assert_eq!(s, StatusCode::BAD_REQUEST);
    }
}
