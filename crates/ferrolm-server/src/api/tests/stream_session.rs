//! Resumable streams: `X-Conversation-Id` sessions, `GET`/`DELETE /v1/stream`, the lookup.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use ferrolm::decoder::FinishReason;
use ferrolm::engine::{Event, Usage};
use serde_json::Value;
use tower::ServiceExt;

use super::fake::{Fake, Mode};
use super::{app, get, post, send};

const CHAT: &str = r#"{"messages": [{"role": "user", "content": "x"}], "stream": true}"#;

/// A streamed chat request with the header.
async fn chat(app: &axum::Router, id: &str, body: &str) -> super::Answer {
    send(app, Method::POST, "/v1/chat/completions", Some(body), &[("X-Conversation-Id", id)]).await
}

fn stream_path(id: &str, from: usize) -> String {
    format!("/v1/stream?conv_id={id}&from={from}")
}

#[tokio::test]
async fn replay_from_zero_equals_what_the_client_got_and_from_n_the_suffix() {
    let app = app(Arc::new(Fake::reply("héllo")));
    let id = "conv-replay::org/model:Q8_0";
    let first = chat(&app, id, CHAT).await;
    assert_eq!(first.status, 200);
    assert!(first.body.ends_with("data: [DONE]\n\n"), "{}", first.body);
    let q = "conv-replay%3A%3Aorg%2Fmodel%3AQ8_0";
    let replay = get(&app, &stream_path(q, 0)).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.body, first.body);
    let n = first.body.find("data: ").expect("an event") + 10;
    let tail = get(&app, &stream_path(q, n)).await;
    assert_eq!(tail.body, first.body[n..]);
    // Without `from`: from the start; a bad one is a clear 400.
    assert_eq!(get(&app, &format!("/v1/stream?conv_id={q}")).await.body, first.body);
    get(&app, &format!("/v1/stream?conv_id={q}&from=x")).await.assert_error(400, "invalid_request_error");
    get(&app, "/v1/stream").await.assert_error(400, "invalid_request_error");
}

#[tokio::test]
async fn completions_stream_too() {
    let app = app(Arc::new(Fake::reply("abc")));
    let body = r#"{"prompt": "x", "stream": true}"#;
    let first =
        send(&app, Method::POST, "/v1/completions", Some(body), &[("X-Conversation-Id", "conv-cmpl")]).await;
    assert_eq!(get(&app, &stream_path("conv-cmpl", 0)).await.body, first.body);
    let body = r#"{"prompt": "x", "stream": true}"#;
    let first =
        send(&app, Method::POST, "/completion", Some(body), &[("X-Conversation-Id", "conv-native")]).await;
    assert!(first.body.contains("\"stop\":true"), "{}", first.body);
    assert_eq!(get(&app, &stream_path("conv-native", 0)).await.body, first.body);
}

/// Sends a held request a token and the end.
fn finish_held(fake: &Fake, text: &str) {
    let held = fake.held.lock().expect("lock");
    let tx = held.last().expect("a held request");
    tx.send(Event::Token { id: 1, text: text.to_string(), logprob: None });
    tx.send(Event::Done {
        text: String::new(),
        finish: FinishReason::EndOfGeneration,
        usage: Usage::default(),
        stop_word: None,
    });
}

#[tokio::test]
async fn the_generation_survives_a_disconnect_and_replays_whole() {
    let fake = Arc::new(Fake::new(Mode::Hang));
    let app = app(fake.clone());
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("X-Conversation-Id", "conv-survive")
        .body(Body::from(CHAT))
        .expect("req");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    assert_eq!(resp.status(), 200);
    drop(resp);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!fake.held.lock().expect("lock")[0].is_closed(), "the disconnect cancelled the request");
    // Running: the lookup says so.
    let v = post(&app, "/v1/streams/lookup", r#"{"conversation_ids": ["conv-survive"]}"#).await.assert_ok();
    assert_eq!(v[0]["is_done"], false, "{v}");
    finish_held(&fake, "resumed");
    let replay = get(&app, &stream_path("conv-survive", 0)).await;
    let chunks = replay.chunks();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "resumed");
    assert_eq!(chunks.last().expect("chunks")["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn a_reader_follows_the_live_tail() {
    let fake = Arc::new(Fake::new(Mode::Hang));
    let app = app(fake.clone());
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("X-Conversation-Id", "conv-tail")
        .body(Body::from(CHAT))
        .expect("req");
    drop(app.clone().oneshot(req).await.expect("infallible"));
    let reader = tokio::spawn({
        let app = app.clone();
        async move { get(&app, &stream_path("conv-tail", 0)).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!reader.is_finished());
    finish_held(&fake, "tail");
    let replay = tokio::time::timeout(Duration::from_secs(5), reader).await.expect("in time").expect("join");
    assert!(replay.body.contains("\"content\":\"tail\""), "{}", replay.body);
    assert!(replay.body.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn delete_cancels_a_running_generation_then_404() {
    let fake = Arc::new(Fake::new(Mode::Hang));
    let app = app(fake.clone());
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("X-Conversation-Id", "conv-delete")
        .body(Body::from(CHAT))
        .expect("req");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let gone = send(&app, Method::DELETE, "/v1/stream?conv_id=conv-delete", None, &[]).await;
    assert_eq!(gone.status, 204);
    // The client's stream ends and the engine request is dropped.
    let _ended =
        tokio::time::timeout(Duration::from_secs(5), axum::body::to_bytes(resp.into_body(), usize::MAX))
            .await
            .expect("ended")
            .expect("body");
    for _ in 0..100 {
        if fake.held.lock().expect("lock")[0].is_closed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(fake.held.lock().expect("lock")[0].is_closed(), "the generation was not cancelled");
    get(&app, &stream_path("conv-delete", 0)).await.assert_error(404, "invalid_request_error");
}

#[tokio::test]
async fn unknown_ids_are_404() {
    let app = app(Arc::new(Fake::reply("x")));
    get(&app, &stream_path("conv-never-seen", 0)).await.assert_error(404, "invalid_request_error");
}

#[tokio::test]
async fn lookup_answers_only_the_ids_asked() {
    let app = app(Arc::new(Fake::reply("hi")));
    chat(&app, "conv-look-a", CHAT).await;
    chat(&app, "conv-look-a::org/m", CHAT).await;
    chat(&app, "conv-look-b", CHAT).await;
    let v = post(&app, "/v1/streams/lookup", r#"{"conversation_ids": ["conv-look-a", "conv-look-z"]}"#)
        .await
        .assert_ok();
    let ids: Vec<&str> =
        v.as_array().expect("array").iter().filter_map(|s| s["conversation_id"].as_str()).collect();
    assert_eq!(ids, ["conv-look-a", "conv-look-a::org/m"]);
    assert_eq!(v[0]["is_done"], true);
    assert!(v[0]["total_bytes"].as_u64().is_some_and(|n| n > 0));
    let none = post(&app, "/v1/streams/lookup", r#"{"conversation_ids": []}"#).await.assert_ok();
    assert_eq!(none, Value::Array(Vec::new()));
    post(&app, "/v1/streams/lookup", r#"{"conversation_ids": "conv-look-a"}"#)
        .await
        .assert_error(400, "invalid_request_error");
    post(&app, "/v1/streams/lookup", "{").await.assert_error(400, "invalid_request_error");
}

#[tokio::test]
async fn without_the_header_nothing_is_kept() {
    let fake = Arc::new(Fake::new(Mode::Hang));
    let app = app(fake.clone());
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .body(Body::from(CHAT))
        .expect("req");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    drop(resp);
    assert!(fake.held.lock().expect("lock")[0].is_closed(), "the disconnect cancels without a session");
    // A non-streamed request with the header keeps nothing either.
    let fake = Arc::new(Fake::reply("hi"));
    let app = super::app(fake);
    let body = r#"{"messages": [{"role": "user", "content": "x"}]}"#;
    chat(&app, "conv-not-streamed", body).await.assert_ok();
    get(&app, &stream_path("conv-not-streamed", 0)).await.assert_error(404, "invalid_request_error");
}

#[tokio::test]
async fn a_new_request_replaces_the_session() {
    let app = app(Arc::new(Fake::reply("one")));
    chat(&app, "conv-replace", CHAT).await;
    let app2 = super::app(Arc::new(Fake::reply("two")));
    let second = chat(&app2, "conv-replace", CHAT).await;
    let replay = get(&app, &stream_path("conv-replace", 0)).await;
    assert_eq!(replay.body, second.body);
}

#[tokio::test]
async fn the_stream_routes_need_the_api_key() {
    let cfg = super::ServerConfig { api_key: Some("k".into()), ..super::config() };
    let app = super::app_with(Arc::new(Fake::reply("x")), cfg);
    get(&app, &stream_path("conv-auth", 0)).await.assert_error(401, "authentication_error");
    let del = send(&app, Method::DELETE, "/v1/stream?conv_id=conv-auth", None, &[]).await;
    assert_eq!(del.status, 401);
}

/// A multi-model server whose one model (`org/slow`) loads when `release` sends.
fn slow_server() -> (axum::Router, std::sync::mpsc::Sender<()>) {
    use super::super::multi::{self, CatalogEntry, ModelTable};
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    let load: multi::BackendLoadFn = Arc::new(move |_: &std::path::Path| {
        let _ = gate.lock().map_err(|e| e.to_string())?.recv_timeout(Duration::from_secs(10));
        Ok((Arc::new(Fake::reply("loaded")) as _, None))
    });
    let entry = CatalogEntry { id: "org/slow".into(), path: "/models/slow.gguf".into(), bytes: 1 };
    let table = ModelTable { catalog: vec![entry], max_loaded: 1, memory_budget: None, load, autoload: true };
    let (app, _) = multi::app(super::config(), table).expect("app");
    (app, release)
}

const SLOW_CHAT: &str =
    r#"{"model": "org/slow", "messages": [{"role": "user", "content": "x"}], "stream": true}"#;
const SLOW_ID: &str = "conv-multi%3A%3Aorg%2Fslow";

/// Polls `GET /v1/stream` until it answers something other than 404.
async fn first_known(app: &axum::Router, id: &str) -> super::Answer {
    for _ in 0..200 {
        let a = get(app, &stream_path(id, 0)).await;
        if a.status != 404 {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the session never appeared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_model_loading_answers_503_and_delete_cancels_the_parked_request() {
    let (app, release) = slow_server();
    let post = tokio::spawn({
        let app = app.clone();
        async move { chat(&app, "conv-multi::org/slow", SLOW_CHAT).await }
    });
    first_known(&app, SLOW_ID).await.assert_error(503, "server_error");
    let gone = send(&app, Method::DELETE, &format!("/v1/stream?conv_id={SLOW_ID}"), None, &[]).await;
    assert_eq!(gone.status, 204);
    let answer = tokio::time::timeout(Duration::from_secs(5), post).await.expect("in time").expect("join");
    let v = answer.assert_error(400, "invalid_request_error");
    assert!(v.to_string().contains("cancelled"), "{v}");
    get(&app, &stream_path(SLOW_ID, 0)).await.assert_error(404, "invalid_request_error");
    drop(release);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_model_stream_survives_a_disconnect_during_the_load() {
    let (app, release) = slow_server();
    let id = "conv-multi-reload::org/slow";
    let post = tokio::spawn({
        let app = app.clone();
        async move { chat(&app, id, SLOW_CHAT).await }
    });
    let q = "conv-multi-reload%3A%3Aorg%2Fslow";
    first_known(&app, q).await.assert_error(503, "server_error");
    post.abort();
    let _ = post.await;
    release.send(()).expect("the loader waits");
    for _ in 0..200 {
        let a = get(&app, &stream_path(q, 0)).await;
        if a.status == 200 {
            let text: String =
                a.chunks().iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
            assert_eq!(text, "loaded");
            return;
        }
        assert_eq!(a.status, 503, "{}", a.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the stream never became readable");
}
