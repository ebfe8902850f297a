//! Routing, auth, CORS, body limit, the small endpoints, disconnects and shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use ferrolm::model::Pooling;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;

use super::super::ServerConfig;
use super::fake::{BOS, Fake, Mode};
use super::{Answer, app, app_with, config, get, post, send};

#[tokio::test]
async fn unknown_routes_and_wrong_methods_are_json() {
    let app = app(Arc::new(Fake::reply("x")));
    let v = get(&app, "/v2/nothing").await.assert_error(404, "invalid_request_error");
    assert_eq!(v["error"]["code"], "not_found");
    let a = get(&app, "/v1/chat/completions").await;
    assert_eq!(a.assert_error(405, "invalid_request_error")["error"]["code"], "method_not_allowed");
    assert!(a.headers.get("allow").is_some_and(|v| v.to_str().is_ok_and(|s| s.contains("POST"))));
    send(&app, Method::POST, "/health", Some("{}"), &[]).await.assert_error(405, "invalid_request_error");
}

#[tokio::test]
async fn metrics_under_llama_server_names_or_off() {
    let on = get(&app(Arc::new(Fake::reply("x"))), "/metrics").await;
    assert!(on.headers.contains_key("process-start-time-unix"));
    for line in ["# TYPE llamacpp:n_decode_total counter", "llamacpp:requests_processing 1"] {
        assert!(on.body.lines().any(|l| l == line), "no `{line}` in\n{}", on.body);
    }
    let off =
        app_with(Arc::new(Fake::reply("x")), ServerConfig { metrics: false, web_ui: false, ..config() });
    get(&off, "/metrics").await.assert_error(501, "not_supported_error");
    get(&off, "/").await.assert_error(404, "invalid_request_error");
    let slots = get(&off, "/slots").await.json();
    assert_eq!(slots[0]["is_processing"], true, "{slots}"); // the fake's one slot is busy
    assert!(slots[0]["n_ctx"].is_u64(), "{slots}");
}

#[tokio::test]
async fn cors_localhost_reflects_only_this_machine() {
    let cfg = ServerConfig { cors_origins: vec!["localhost".into(), "http://a.example".into()], ..config() };
    let app = app_with(Arc::new(Fake::reply("x")), cfg);
    let allowed = |origin: &'static str| {
        let app = app.clone();
        async move {
            let headers = [("origin", origin), ("access-control-request-method", "POST")];
            let a = send(&app, Method::OPTIONS, "/completions", None, &headers).await;
            assert!(a.status.is_success(), "{origin}: {}", a.status);
            a.headers.get("access-control-allow-origin").map(|v| v.to_str().unwrap_or("").to_string())
        }
    };
    for origin in [
        "http://localhost",
        "http://localhost:8080",
        "http://127.0.0.1:3000",
        "http://[::1]",
        "https://[::1]:3000",
        "http://a.example",
    ] {
        assert_eq!(allowed(origin).await.as_deref(), Some(origin));
    }
    for origin in [
        "http://evil.com",
        "http://notlocalhost",
        "http://localhost.evil.com",
        "http://localhost:80x",
        "ftp://localhost",
    ] {
        assert_eq!(allowed(origin).await, None, "{origin}");
    }
}

#[tokio::test]
async fn load_for_routers() {
    let app = app(Arc::new(Fake::reply("x")));
    let v = get(&app, "/get_load").await.json();
    assert_eq!(v, json!([{"dp_rank": 0, "num_reqs": 1, "num_waiting_reqs": 0, "num_tokens": 0}]));
}

#[tokio::test]
async fn api_key() {
    let cfg = ServerConfig { api_key: Some("s3cret".into()), ..config() };
    let app = app_with(Arc::new(Fake::reply("x")), cfg);
    assert_eq!(get(&app, "/health").await.json(), json!({"status": "ok"}));
    assert_eq!(get(&app, "/").await.status, 200);
    for path in ["/metrics", "/v1/models", "/slots", "/nope"] {
        let a = get(&app, path).await;
        assert_eq!(a.assert_error(401, "authentication_error")["error"]["code"], "invalid_api_key", "{path}");
    }
    let wrong = send(&app, Method::GET, "/metrics", None, &[("authorization", "Bearer s3creT")]).await;
    assert_eq!(wrong.status, 401);
    let ok = send(&app, Method::GET, "/metrics", None, &[("authorization", "Bearer s3cret")]).await;
    assert_eq!(ok.status, 200);
    // The scheme is case-insensitive (RFC 7235); the token is not.
    for value in ["BEARER s3cret", "bearer s3cret", "BeArEr   s3cret"] {
        let a = send(&app, Method::GET, "/metrics", None, &[("authorization", value)]).await;
        assert_eq!(a.status, 200, "{value}");
    }
    for value in ["Basic s3cret", "Bearers3cret", "Bearer ", "s3cret"] {
        let a = send(&app, Method::GET, "/metrics", None, &[("authorization", value)]).await;
        assert_eq!(a.status, 401, "{value}");
    }
    // Anthropic's header.
    assert_eq!(send(&app, Method::GET, "/metrics", None, &[("x-api-key", "s3cret")]).await.status, 200);
    assert_eq!(send(&app, Method::GET, "/metrics", None, &[("x-api-key", "s3creT")]).await.status, 401);
    let body = r#"{"messages": [{"role": "user", "content": "x"}]}"#;
    let a =
        send(&app, Method::POST, "/v1/chat/completions", Some(body), &[("authorization", "Bearer s3cret")])
            .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(post(&app, "/v1/chat/completions", body).await.status, 401);
}

/// Header `name` of an answer, as text.
fn header<'a>(a: &'a Answer, name: &str) -> Option<&'a str> {
    a.headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn cors() {
    let fake = Arc::new(Fake::reply("x"));
    // No origins: CORS off, and a preflight is the router's 405.
    let none = app(fake.clone());
    let a = send(&none, Method::GET, "/health", None, &[("origin", "http://a.example")]).await;
    assert!(a.headers.get("access-control-allow-origin").is_none());
    let pre = send(&none, Method::OPTIONS, "/completions", None, &[("origin", "http://a.example")]).await;
    assert_eq!(pre.status, 405);

    let cfg =
        ServerConfig { cors_origins: vec!["http://a.example".into()], api_key: Some("k".into()), ..config() };
    let app = app_with(fake.clone(), cfg);
    let a = send(&app, Method::GET, "/health", None, &[("origin", "http://a.example")]).await;
    assert_eq!(
        a.headers.get("access-control-allow-origin").map(|v| v.as_bytes()),
        Some(&b"http://a.example"[..])
    );
    let a = send(&app, Method::GET, "/health", None, &[("origin", "http://b.example")]).await;
    assert!(a.headers.get("access-control-allow-origin").is_none());
    // A preflight is answered without the API key.
    let pre = send(
        &app,
        Method::OPTIONS,
        "/v1/chat/completions",
        None,
        &[
            ("origin", "http://a.example"),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", "authorization,content-type"),
        ],
    )
    .await;
    assert!(pre.status.is_success(), "{}", pre.status);
    assert!(pre.headers.get("access-control-allow-methods").is_some());

    // `*` with credentials (llama-server's default) echoes the origin; without, it is `*`.
    let any = app_with(fake.clone(), ServerConfig { cors_origins: vec!["*".into()], ..config() });
    let a = send(&any, Method::GET, "/v1/models", None, &[("origin", "http://z.example")]).await;
    assert_eq!(header(&a, "access-control-allow-origin"), Some("http://z.example"));
    assert_eq!(header(&a, "access-control-allow-credentials"), Some("true"));
    let pre = send(
        &any,
        Method::OPTIONS,
        "/completions",
        None,
        &[("origin", "web.mydomain.fr"), ("access-control-request-method", "POST")],
    )
    .await;
    assert_eq!(pre.status, 200);
    assert_eq!(header(&pre, "access-control-allow-origin"), Some("web.mydomain.fr"));
    assert_eq!(header(&pre, "access-control-allow-methods"), Some("GET, POST, DELETE, OPTIONS"));
    assert_eq!(header(&pre, "access-control-allow-headers"), Some("*"));
    let cfg = ServerConfig { cors_origins: vec!["*".into()], cors_credentials: false, ..config() };
    let plain = app_with(fake, cfg);
    let a = send(&plain, Method::GET, "/v1/models", None, &[("origin", "http://z.example")]).await;
    assert_eq!(header(&a, "access-control-allow-origin"), Some("*"));
    assert_eq!(header(&a, "access-control-allow-credentials"), None);
    let pre = send(&plain, Method::OPTIONS, "/v1/models", None, &[("origin", "http://z.example")]).await;
    assert_eq!(header(&pre, "access-control-allow-credentials"), Some("false"));
    assert!(
        super::super::routes::router(super::super::AppState::new(
            Arc::new(Fake::reply("x")),
            Arc::new(ServerConfig { cors_origins: vec!["bad\norigin".into()], ..config() }),
            0,
        ))
        .is_err()
    );
}

#[tokio::test]
async fn body_limit() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app_with(fake.clone(), ServerConfig { max_body_bytes: 100, ..config() });
    let big = format!(r#"{{"prompt": "{}"}}"#, "a".repeat(200));
    let a = post(&app, "/v1/completions", &big).await;
    assert_eq!(a.assert_error(413, "invalid_request_error")["error"]["code"], "request_too_large");
    // With a Content-Length over the limit, refused before reading: still an OpenAI error.
    let len = big.len().to_string();
    let a = send(&app, Method::POST, "/v1/completions", Some(&big), &[("content-length", &len)]).await;
    assert_eq!(a.assert_error(413, "invalid_request_error")["error"]["code"], "request_too_large");
    // Without a Content-Length (chunked): the limit holds while reading.
    let chunks: Vec<Result<String, std::io::Error>> =
        vec![Ok(big[..60].to_string()), Ok(big[60..].to_string())];
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/completions")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(v["error"]["code"], "request_too_large");
    assert!(fake.requests().is_empty());
    assert_eq!(post(&app, "/v1/completions", r#"{"prompt": "a"}"#).await.status, 200);
}

#[tokio::test]
async fn small_endpoints() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let v = get(&app, "/v1/models").await.json();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> =
        v["data"].as_array().expect("data").iter().filter_map(|m| m["id"].as_str()).collect();
    // One model, as llama-server lists it; its other names in `aliases`.
    assert_eq!(ids, vec!["smol"]);
    assert_eq!(v["data"][0]["aliases"], json!(["alias"]));
    assert_eq!(v["data"][0]["tags"], json!([]));
    assert_eq!(v["data"][0]["object"], "model");
    assert_eq!(get(&app, "/v1/models/alias").await.json()["id"], "alias");
    get(&app, "/v1/models/gpt-4").await.assert_error(404, "invalid_request_error");

    let a = get(&app, "/metrics").await;
    assert!(
        a.headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/plain; version=0.0.4"))
    );
    assert!(a.body.contains("# TYPE ferrolm_requests_total counter\nferrolm_requests_total 3\n"));
    assert!(a.body.contains("ferrolm_kv_usage_ratio 0\n"));
    let s = get(&app, "/slots").await.json();
    assert_eq!(s[0]["state"], "generating");
    assert_eq!(s[0]["n_kv"], 7);
    let page = get(&app, "/").await;
    assert!(page.headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/html")));
    assert!(page.body.contains("<"));

    let t = post(&app, "/tokenize", r#"{"content": "hi<s>"}"#).await.json();
    assert_eq!(t, json!({"tokens": [104, 105, 256]}));
    let t =
        post(&app, "/tokenize", r#"{"content": "é", "add_special": true, "with_pieces": true}"#).await.json();
    assert_eq!(
        t,
        json!({"tokens": [{"id": 256, "piece": "<s>"}, {"id": 195, "piece": [195]}, {"id": 169, "piece": [169]}]})
    );
    assert_eq!(
        post(&app, "/detokenize", r#"{"tokens": [104, 195, 169]}"#).await.json(),
        json!({"content": "hé"})
    );
    post(&app, "/detokenize", r#"{"tokens": [100000]}"#).await.assert_error(400, "invalid_request_error");
    post(&app, "/detokenize", r#"{"tokens": "x"}"#).await.assert_error(400, "invalid_request_error");
    post(&app, "/tokenize", r#"{"text": "x"}"#).await.assert_error(400, "invalid_request_error");
}

#[tokio::test]
async fn embeddings() {
    let fake = Arc::new(Fake::reply("x"));
    let cfg = ServerConfig { embeddings_pooling: Some(ferrolm::model::Pooling::Last), ..config() };
    let app = app_with(fake.clone(), cfg);
    let v = post(&app, "/v1/embeddings", r#"{"input": ["ab", "c"], "model": "smol"}"#).await.json();
    assert_eq!(v["object"], "list");
    // The fake embeds a sequence as [its length, 1]; with the BOS "ab" has 3 tokens.
    assert_eq!(v["data"][0], json!({"object": "embedding", "index": 0, "embedding": [3.0, 1.0]}));
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["usage"], json!({"prompt_tokens": 5, "total_tokens": 5}));
    let calls = fake.embed_calls.lock().expect("lock").clone();
    assert_eq!(calls[0], (vec![vec![BOS, 97, 98], vec![BOS, 99]], Some(ferrolm::model::Pooling::Last), true));
    let v = post(
        &app,
        "/v1/embeddings",
        r#"{"input": [104, 105], "encoding_format": "base64", "normalize": false}"#,
    )
    .await
    .json();
    // [2.0, 1.0] as little-endian f32.
    assert_eq!(v["data"][0]["embedding"], "AAAAQAAAgD8=");
    // Token ids are embedded as given.
    assert_eq!(
        fake.embed_calls.lock().expect("lock")[1],
        (vec![vec![104, 105]], Some(ferrolm::model::Pooling::Last), false)
    );
    for bad in [
        r#"{}"#,
        r#"{"input": []}"#,
        r#"{"input": 3}"#,
        r#"{"input": [[]]}"#,
        r#"{"input": "a", "encoding_format": "hex"}"#,
        r#"{"input": "a", "dimensions": 8}"#,
    ] {
        post(&app, "/v1/embeddings", bad).await.assert_error(400, "invalid_request_error");
    }
    // Any model name is served, answered under the model's id.
    let v = post(&app, "/v1/embeddings", r#"{"input": "a", "model": "other"}"#).await.json();
    assert_eq!(v["model"], "smol");
}

/// `/v1/rerank` in llama-server's shape (and TEI's), best first; a model that cannot rerank
/// answers 501.
#[tokio::test]
async fn rerank() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app_with(fake.clone(), config());
    let body = r#"{"query": "q", "documents": ["aaaa", "a", "aa"]}"#;
    let v = post(&app, "/v1/rerank", body).await.assert_error(501, "not_supported_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("cannot rerank")), "{v}");
    fake.reranker.store(true, Ordering::Relaxed);
    let v = post(&app, "/v1/rerank", body).await.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "smol");
    let order: Vec<i64> = v["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["index"].as_i64().expect("index"))
        .collect();
    assert_eq!(order, [1, 2, 0], "best first");
    assert_eq!(v["results"][0], json!({"index": 1, "relevance_score": 0.5}));
    // (1 + 4) + (1 + 1) + (1 + 2) tokens.
    assert_eq!(v["usage"], json!({"prompt_tokens": 10, "total_tokens": 10}));
    for path in ["/rerank", "/reranking", "/v1/reranking"] {
        let v = post(
            &app,
            path,
            r#"{"query": "q", "documents": ["aa", {"text": "a"}], "top_n": 1, "return_documents": true}"#,
        )
        .await
        .json();
        assert_eq!(
            v["results"],
            json!([{"index": 1, "relevance_score": 0.5, "document": {"text": "a"}}]),
            "{path}"
        );
    }
    // Hugging Face TEI: `texts` in, a bare list with `score` out.
    let v =
        post(&app, "/rerank", r#"{"query": "q", "texts": ["aaa", "a"], "return_text": true}"#).await.json();
    assert_eq!(
        v,
        json!([{"index": 1, "score": 0.5, "text": "a"}, {"index": 0, "score": 0.25, "text": "aaa"}])
    );
    for bad in [
        r#"{"documents": ["a"]}"#,
        r#"{"query": 3, "documents": ["a"]}"#,
        r#"{"query": "q"}"#,
        r#"{"query": "q", "documents": []}"#,
        r#"{"query": "q", "documents": "a"}"#,
        r#"{"query": "q", "documents": [1]}"#,
        r#"{"query": "q", "documents": ["a"], "top_n": 0}"#,
    ] {
        post(&app, "/v1/rerank", bad).await.assert_error(400, "invalid_request_error");
    }
    let long = json!({"query": "q", "documents": ["a".repeat(600)]}).to_string();
    let v = post(&app, "/v1/rerank", &long).await.assert_error(400, "invalid_request_error");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
}

/// llama-server's input forms: mixed token/string arrays, `prompt_string` and text-part
/// objects; media parts and unknown parts are refused.
#[tokio::test]
async fn embeddings_take_every_prompt_form() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app_with(fake.clone(), config());
    let input = json!([
        "hello world",
        {"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]},
        {"prompt_string": "hello world"},
        [104, "i", 33],
        ["a", 98],
    ]);
    let v = post(&app, "/v1/embeddings", &json!({"input": input}).to_string()).await.json();
    assert_eq!(v["data"].as_array().map(Vec::len), Some(5), "{v}");
    let calls = fake.embed_calls.lock().expect("lock").clone();
    let hello: Vec<u32> = std::iter::once(BOS).chain("hello world".bytes().map(u32::from)).collect();
    // A string inside a token array is tokenized in place; only a first one gets the BOS.
    let want = vec![hello.clone(), hello.clone(), hello, vec![104, 105, 33], vec![BOS, 97, 98]];
    assert_eq!(calls[0].0, want);
    // One array holding a number is one mixed prompt.
    let v = post(&app, "/v1/embeddings", r#"{"input": [12, "ab", 13]}"#).await.json();
    assert_eq!(v["data"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(fake.embed_calls.lock().expect("lock")[1].0, vec![vec![12, 97, 98, 13]]);
    for bad in [
        r#"{"input": {"content": "string"}}"#,
        r#"{"input": {"content": [{"type": "unknown"}]}}"#,
        r#"{"input": {"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}}"#,
        r#"{"input": {"prompt_string": "a", "multimodal_data": ["AAAA"]}}"#,
        r#"{"input": {"other": 1}}"#,
        r#"{"input": [1, {"prompt_string": "a"}]}"#,
        r#"{"input": [1, 999999]}"#,
    ] {
        post(&app, "/v1/embeddings", bad).await.assert_error(400, "invalid_request_error");
    }
    assert_eq!(fake.embed_calls.lock().expect("lock").len(), 2, "a refused input reached the engine");
}

/// llama-server's own `/embeddings`: a list of vectors per input, one per token without
/// pooling (which `/v1/embeddings` refuses).
#[tokio::test]
async fn native_embeddings_and_no_pooling() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app_with(fake.clone(), ServerConfig { embeddings_pooling: Some(Pooling::Mean), ..config() });
    let v = post(&app, "/embeddings", r#"{"input": ["ab", "c"]}"#).await.json();
    assert_eq!(v, json!([{"index": 0, "embedding": [[3.0, 1.0]]}, {"index": 1, "embedding": [[2.0, 1.0]]}]));
    let v = post(&app, "/embeddings", r#"{"content": "ab"}"#).await.json();
    assert_eq!(v[0]["embedding"], json!([[3.0, 1.0]]));
    let app = app_with(fake.clone(), ServerConfig { embeddings_pooling: Some(Pooling::None), ..config() });
    let v = post(&app, "/embeddings", r#"{"input": "ab"}"#).await.json();
    assert_eq!(v, json!([{"index": 0, "embedding": [[0.0, 1.0], [1.0, 1.0], [2.0, 1.0]]}]));
    post(&app, "/v1/embeddings", r#"{"input": "ab"}"#).await.assert_error(400, "invalid_request_error");
}

/// An embeddings input longer than the context is refused before it reaches the engine.
#[tokio::test]
async fn embeddings_longer_than_the_context_are_refused() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app_with(fake.clone(), config());
    // The fake tokenizer gives one token per byte, plus the BOS; n_ctx is 512.
    let fits = json!({"input": "a".repeat(511)}).to_string();
    assert_eq!(post(&app, "/v1/embeddings", &fits).await.status.as_u16(), 200);
    let long = json!({"input": ["ok", "a".repeat(512)]}).to_string();
    let v = post(&app, "/v1/embeddings", &long).await.assert_error(400, "invalid_request_error");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("input[1]")), "{v}");
    assert_eq!(fake.embed_calls.lock().expect("lock").len(), 1, "the long input reached the engine");
}

/// Dropping the response (the client went away) drops the engine receivers.
#[tokio::test]
async fn disconnect_drops_the_receivers() {
    let fake = Arc::new(Fake::new(Mode::Hang));
    let app = app(fake.clone());
    let body = r#"{"messages": [{"role": "user", "content": "x"}], "stream": true, "n": 2}"#;
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .body(Body::from(body))
        .expect("req");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    assert_eq!(resp.status(), 200);
    let closed = || fake.held.lock().expect("lock").iter().map(|tx| tx.is_closed()).collect::<Vec<_>>();
    assert_eq!(closed(), [false, false]);
    drop(resp);
    assert_eq!(closed(), [true, true], "the stream owned the handles");

    // Not streaming: the handler future owns them.
    let body = r#"{"prompt": "x"}"#;
    let req =
        Request::builder().method(Method::POST).uri("/v1/completions").body(Body::from(body)).expect("req");
    let task = tokio::spawn(app.clone().oneshot(req));
    for _ in 0..100 {
        if fake.held.lock().expect("lock").len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let closed = || fake.held.lock().expect("lock")[2].is_closed();
    assert!(!closed());
    task.abort();
    let _ = task.await;
    assert!(closed());
}

/// A real socket: the address is printed, requests are served, and shutdown drains then cancels.
#[tokio::test]
async fn serves_and_shuts_down_gracefully() {
    let fake = Arc::new(Fake::new(Mode::Hang));
    fake.idle.store(false, Ordering::SeqCst);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let cfg = ServerConfig { shutdown_timeout: Duration::from_millis(200), ..config() };
    let server = tokio::spawn(super::super::run(vec![listener], fake.clone(), cfg, async move {
        let _ = stop_rx.await;
    }));
    let mut health = tokio::net::TcpStream::connect(addr).await.expect("connect");
    health.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.expect("write");
    let out = super::read_answer(&mut health, 30).await;
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with(r#"{"status":"ok"}"#), "{out}");

    // A request that never ends on its own…
    let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body = r#"{"prompt": "x"}"#;
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    slow.write_all(req.as_bytes()).await.expect("write");
    for _ in 0..200 {
        if !fake.held.lock().expect("lock").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(fake.held.lock().expect("lock").len(), 1);
    let _ = stop_tx.send(());
    // …is cancelled after the shutdown timeout, and answered.
    let out = super::read_answer(&mut slow, 5).await;
    assert!(out.contains("\"finish_reason\":\"cancelled\""), "{out}");
    let r = tokio::time::timeout(Duration::from_secs(10), server).await.expect("server ends").expect("join");
    assert!(r.is_ok());
    assert!(fake.shut_down.load(Ordering::SeqCst));
    assert!(fake.cancelled_all.load(Ordering::SeqCst));
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "no longer listening");
}

/// On a real connection, a client that hangs up cancels its request (streaming or not): hyper
/// drops the handler (or the body), and with it the engine receiver.
#[tokio::test]
async fn hanging_up_a_socket_cancels_the_request() {
    let fake = Arc::new(Fake::new(Mode::Hang));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server =
        tokio::spawn(super::super::run(vec![listener], fake.clone(), config(), std::future::pending()));
    for (i, body) in [r#"{"prompt": "x"}"#, r#"{"prompt": "x", "stream": true}"#].iter().enumerate() {
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(req.as_bytes()).await.expect("write");
        let mut tx = None;
        for _ in 0..400 {
            tx = fake.held.lock().expect("lock").get(i).cloned();
            if tx.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let tx = tx.expect("the request reached the engine");
        assert!(!tx.is_closed());
        drop(conn);
        let mut closed = false;
        for _ in 0..400 {
            if tx.is_closed() {
                closed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(closed, "request {i}: the receiver outlived the connection");
    }
    server.abort();
}

/// Regression: a too-long target or too many header bytes got hyper's 414/431 with an empty
/// body; they are JSON errors now.
#[tokio::test]
async fn too_long_uri_and_headers_are_json() {
    let app = super::app(Arc::new(Fake::reply("x")));
    let long = format!("/health?{}", "a".repeat(super::super::routes::MAX_URI_BYTES));
    let v = get(&app, &long).await.assert_error(414, "invalid_request_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("request target")), "{v}");
    let big = "b".repeat(super::super::routes::MAX_HEADER_BYTES);
    let a = send(&app, Method::GET, "/health", None, &[("x-big", big.as_str())]).await;
    a.assert_error(431, "invalid_request_error");
    assert_eq!(get(&app, "/health?x=1").await.status, 200);
}

#[tokio::test]
async fn props_and_apply_template() {
    let fake = Arc::new(Fake::reply("x"));
    let cfg = ServerConfig { n_predict: Some(64), model_path: Some("m.gguf".into()), ..config() };
    let app = app_with(fake.clone(), cfg);
    let v = get(&app, "/props").await.json();
    assert_eq!(v["model_path"], "m.gguf");
    assert_eq!(v["default_generation_settings"]["params"]["n_predict"], 64);
    assert_eq!(v["default_generation_settings"]["params"]["seed"], 4294967295u64);
    assert!(v["default_generation_settings"]["n_ctx"].as_u64().is_some_and(|n| n > 0));
    assert!(v["chat_template"].as_str().is_some_and(|t| t.contains("messages")));
    assert!(v["total_slots"].as_u64().is_some());

    let body = r#"{"messages": [{"role": "user", "content": "Hi there"}]}"#;
    let a = post(&app, "/apply-template", body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let prompt = a.json()["prompt"].as_str().expect("prompt").to_string();
    assert!(prompt.contains("Hi there"), "{prompt}");
    // Nothing ran.
    assert!(fake.requests().is_empty());
    post(&app, "/apply-template", r#"{"messages": 3}"#).await.assert_error(400, "invalid_request_error");
}

/// `--no-slots`: `GET /slots` is a 501.
#[tokio::test]
async fn no_slots_turns_the_slots_endpoint_off() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app_with(fake, ServerConfig { slots: false, ..config() });
    let r = get(&app, "/slots").await;
    assert_eq!(r.status, 501, "{}", r.body);
    r.assert_error(501, "not_supported_error");
}
