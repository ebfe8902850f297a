//! The multi-model server over fake backends: the catalog scan, routing by `model`, loading on
//! first use (once for concurrent requests), least-recently-used unloading, refusal while every
//! loaded model is busy, failed loads, and the model table in `/v1/models` and `/metrics`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request};
use tower::ServiceExt;

use super::super::multi::{self, BackendLoadFn, CatalogEntry, ModelTable};
use super::super::{ServerConfig, ServerError};
use super::fake::{Fake, Mode};
use super::{config, get, post, send};

fn entry(id: &str, bytes: u64) -> CatalogEntry {
    CatalogEntry { id: id.into(), path: format!("/models/{id}.gguf").into(), bytes }
}

/// A loader of fakes: `hang.gguf` hangs, `broken.gguf` fails, any other replies with its name;
/// counts its calls.
fn loader(calls: Arc<AtomicUsize>) -> BackendLoadFn {
    Arc::new(move |path: &Path| {
        calls.fetch_add(1, Ordering::SeqCst);
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        std::thread::sleep(std::time::Duration::from_millis(20));
        match stem.as_str() {
            "broken" => Err("not a GGUF file".to_string()),
            "hang" => Ok((Arc::new(Fake::new(Mode::Hang)) as _, None)),
            _ => Ok((Arc::new(Fake::reply(&stem)) as _, None)),
        }
    })
}

fn server(catalog: Vec<CatalogEntry>, max_loaded: usize, budget: Option<u64>) -> (Router, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let table = ModelTable {
        catalog,
        max_loaded,
        memory_budget: budget,
        load: loader(calls.clone()),
        autoload: true,
    };
    let (app, _) = multi::app(config(), table).expect("app");
    (app, calls)
}

fn chat(model: &str) -> String {
    format!(r#"{{"model": "{model}", "messages": [{{"role": "user", "content": "hi"}}]}}"#)
}

async fn answer(app: &Router, model: &str) -> String {
    let a = post(app, "/v1/chat/completions", &chat(model)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["model"], model, "{v}");
    v["choices"][0]["message"]["content"].as_str().expect("content").to_string()
}

fn statuses(app_models: &serde_json::Value) -> Vec<(String, String)> {
    app_models["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|m| (m["id"].as_str().unwrap_or("").into(), m["status"]["value"].as_str().unwrap_or("").into()))
        .collect()
}

#[tokio::test]
async fn requests_go_to_the_model_they_name() {
    let (app, calls) = server(vec![entry("one", 10), entry("two", 10)], 4, None);
    let models = get(&app, "/v1/models").await.json();
    assert_eq!(statuses(&models), [("one".into(), "unloaded".into()), ("two".into(), "unloaded".into())]);
    assert_eq!(answer(&app, "one").await, "one");
    assert_eq!(answer(&app, "two").await, "two");
    assert_eq!(answer(&app, "one").await, "one");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "each model is loaded once");
    let models = get(&app, "/v1/models").await.json();
    assert_eq!(statuses(&models), [("one".into(), "loaded".into()), ("two".into(), "loaded".into())]);
    // GET routes name the model in the query.
    assert_eq!(get(&app, "/props?model=two").await.json()["model_alias"], "two");
    assert_eq!(get(&app, "/v1/models/two").await.json()["status"]["value"], "loaded");
    let v =
        post(&app, "/v1/chat/completions", &chat("three")).await.assert_error(404, "invalid_request_error");
    assert_eq!(v["error"]["code"], "model_not_found");
    let no_model = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let v = post(&app, "/v1/chat/completions", no_model).await.assert_error(400, "invalid_request_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("one, two")), "{v}");
}

#[tokio::test]
async fn one_model_needs_no_name() {
    let (app, _) = server(vec![entry("only", 10)], 1, None);
    let body = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let v = post(&app, "/v1/chat/completions", body).await.json();
    assert_eq!(v["choices"][0]["message"]["content"], "only", "{v}");
}

#[tokio::test]
async fn concurrent_requests_share_one_load() {
    let (app, calls) = server(vec![entry("one", 10)], 1, None);
    let all = futures_util::future::join_all((0..6).map(|_| answer(&app, "one"))).await;
    assert!(all.iter().all(|a| a == "one"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn least_recently_used_idle_model_is_unloaded() {
    let (app, calls) = server(vec![entry("a", 10), entry("b", 10), entry("c", 10)], 2, None);
    answer(&app, "a").await;
    answer(&app, "b").await;
    answer(&app, "a").await; // b is now the least recently used
    answer(&app, "c").await;
    let models = get(&app, "/v1/models").await.json();
    assert_eq!(
        statuses(&models),
        [("a".into(), "loaded".into()), ("b".into(), "unloaded".into()), ("c".into(), "loaded".into())]
    );
    answer(&app, "b").await; // loads again, unloading a
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let text = get(&app, "/metrics").await.body;
    for line in [
        "ferrolm_models_available 3",
        "ferrolm_models_loaded 2",
        "ferrolm_model_loads_total 4",
        "ferrolm_model_unloads_total 2",
        "ferrolm_model_loaded{model=\"b\"} 1",
        "ferrolm_requests_total{model=\"c\"} 3",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
    }
}

#[tokio::test]
async fn the_memory_budget_unloads_too() {
    let (app, _) = server(vec![entry("a", 60), entry("b", 60), entry("huge", 200)], 4, Some(100));
    answer(&app, "a").await;
    answer(&app, "b").await;
    let models = get(&app, "/v1/models").await.json();
    assert_eq!(statuses(&models)[0], ("a".into(), "unloaded".into()));
    let v = post(&app, "/v1/chat/completions", &chat("huge")).await.assert_error(507, "server_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("--models-memory")), "{v}");
}

/// Starts a streamed request to the `hang` model and returns its response (the stream stays
/// open, keeping the model busy, until it is dropped).
async fn hold(app: &Router) -> axum::response::Response {
    let body = r#"{"model": "hang", "stream": true, "messages": [{"role": "user", "content": "hi"}]}"#;
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    let stream = app.clone().oneshot(req).await.expect("infallible");
    assert_eq!(stream.status(), 200);
    stream
}

#[tokio::test]
async fn a_busy_model_is_not_unloaded_and_requests_wait_in_line() {
    let (app, _) = server(vec![entry("hang", 10), entry("b", 10), entry("c", 10)], 1, None);
    let stream = hold(&app).await;
    let unload = send(&app, Method::POST, "/models/unload", Some(r#"{"model": "hang"}"#), &[]).await;
    assert_eq!(unload.status, 503);
    let waiting_b = tokio::spawn({
        let app = app.clone();
        async move { (answer(&app, "b").await, std::time::Instant::now()) }
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let waiting_c = tokio::spawn({
        let app = app.clone();
        async move { (answer(&app, "c").await, std::time::Instant::now()) }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!waiting_b.is_finished() && !waiting_c.is_finished(), "they wait while the model is busy");
    assert_eq!(get(&app, "/v1/models/hang").await.json()["status"]["value"], "loaded");
    drop(stream); // the client goes away: the model is idle, the first in line gets its place
    let (b, c) = (waiting_b.await.expect("b"), waiting_c.await.expect("c"));
    assert_eq!((b.0.as_str(), c.0.as_str()), ("b", "c"));
    assert!(b.1 <= c.1, "first come, first served");
}

#[tokio::test]
async fn waiting_ends_at_the_request_timeout() {
    let calls = Arc::new(AtomicUsize::new(0));
    let table = ModelTable {
        catalog: vec![entry("hang", 10), entry("b", 10)],
        max_loaded: 1,
        memory_budget: None,
        load: loader(calls),
        autoload: true,
    };
    let cfg = ServerConfig { timeout: std::time::Duration::from_millis(100), ..config() };
    let (app, _) = multi::app(cfg, table).expect("app");
    let _stream = hold(&app).await;
    let a = post(&app, "/v1/chat/completions", &chat("b")).await;
    let v = a.assert_error(503, "server_error");
    assert!(a.headers.contains_key("retry-after"), "{v}");
}

#[tokio::test]
async fn load_and_unload_endpoints_and_failed_loads() {
    let (app, calls) = server(vec![entry("a", 10), entry("broken", 10)], 2, None);
    let v = post(&app, "/models/load", r#"{"model": "a"}"#).await.json();
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(get(&app, "/v1/models/a").await.json()["status"]["value"], "loaded");
    let v = post(&app, "/models/unload", r#"{"model": "a"}"#).await.json();
    assert_eq!((v["success"].as_bool(), v["was_loaded"].as_bool()), (Some(true), Some(true)), "{v}");
    assert_eq!(get(&app, "/v1/models/a").await.json()["status"]["value"], "unloaded");
    let v = post(&app, "/v1/chat/completions", &chat("broken")).await.assert_error(500, "server_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("not a GGUF file")), "{v}");
    // A failed load is not remembered: the next request tries again.
    post(&app, "/v1/chat/completions", &chat("broken")).await.assert_error(500, "server_error");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert!(get(&app, "/metrics").await.body.contains("ferrolm_model_load_failures_total 2"));
    post(&app, "/models/load", r#"{"model": "nope"}"#).await.assert_error(404, "invalid_request_error");
    post(&app, "/models/load", "{}").await.assert_error(400, "invalid_request_error");
}

#[tokio::test]
async fn without_autoload_models_load_only_when_asked() {
    let calls = Arc::new(AtomicUsize::new(0));
    let table = ModelTable {
        catalog: vec![entry("a", 1), entry("b", 1)],
        max_loaded: 2,
        memory_budget: None,
        load: loader(calls),
        autoload: false,
    };
    let (app, _) = multi::app(config(), table).expect("app");
    let v = post(&app, "/v1/chat/completions", &chat("a")).await.assert_error(400, "invalid_request_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("/models/load")), "{v}");
    assert_eq!(post(&app, "/models/load", r#"{"model": "a"}"#).await.status, 200);
    assert_eq!(answer(&app, "a").await, "a");
    let props = get(&app, "/props").await.json();
    assert_eq!(
        (props["role"].as_str(), props["max_instances"].as_u64()),
        (Some("router"), Some(2)),
        "{props}"
    );
    assert_eq!(props["models_autoload"], false);
    assert_eq!(get(&app, "/props?model=a").await.json()["model_alias"], "a");
}

#[test]
fn a_preset_names_its_models() {
    let dir = std::env::temp_dir().join(format!("ferrolm-models-preset-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("small.gguf"), [0u8; 7]).expect("write");
    let ini = dir.join("models.ini");
    let text = "; models\n[org/repo:Q8_0]\nmodel = small.gguf\n\n[other]\nm = small.gguf\n";
    std::fs::write(&ini, text).expect("write");
    let got = multi::read_models_preset(&ini).expect("preset");
    let summary: Vec<_> =
        got.iter().map(|e| (e.id.as_str(), e.bytes, e.path == dir.join("small.gguf"))).collect();
    assert_eq!(summary, [("org/repo:Q8_0", 7, true), ("other", 7, true)]);
    for (bad, why) in [
        ("[a]\nctx-size = 4096\n", "ctx-size"),
        ("[a]\n", "no `model"),
        ("model = small.gguf\n", "before any [section]"),
        ("[a]\nmodel = missing.gguf\n", "missing.gguf"),
        ("", "no [model] section"),
    ] {
        std::fs::write(&ini, bad).expect("write");
        let err = multi::read_models_preset(&ini).expect_err(bad).to_string();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn the_catalog_is_the_folders_gguf_files_and_model_folders() {
    let dir = std::env::temp_dir().join(format!("ferrolm-models-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("hf-model")).expect("mkdir");
    std::fs::create_dir_all(dir.join("not-a-model")).expect("mkdir");
    let write = |name: &str, n: usize| std::fs::write(dir.join(name), vec![0u8; n]).expect("write");
    write("small.gguf", 10);
    write("big-00001-of-00002.gguf", 100);
    write("big-00002-of-00002.gguf", 50);
    write("notes.txt", 5);
    write("hf-model/config.json", 2);
    write("hf-model/model.safetensors", 30);
    let got = multi::scan_models_dir(&dir).expect("scan");
    let summary: Vec<_> = got.iter().map(|e| (e.id.as_str(), e.bytes)).collect();
    assert_eq!(summary, [("big", 150), ("hf-model", 30), ("small", 10)]);
    assert!(got[0].path.ends_with("big-00001-of-00002.gguf"));
    write("hf-model.gguf", 1);
    let err = multi::scan_models_dir(&dir).expect_err("two models named hf-model");
    assert!(matches!(&err, ServerError::Config(m) if m.contains("hf-model")), "{err}");
    std::fs::remove_dir_all(&dir).expect("clean up");
    std::fs::create_dir_all(&dir).expect("mkdir");
    assert!(multi::scan_models_dir(&dir).is_err(), "an empty folder");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[tokio::test]
async fn the_api_key_covers_the_model_table() {
    let calls = Arc::new(AtomicUsize::new(0));
    let table = ModelTable {
        catalog: vec![entry("a", 1)],
        max_loaded: 1,
        memory_budget: None,
        load: loader(calls),
        autoload: true,
    };
    let cfg = ServerConfig { api_key: Some("k".into()), ..config() };
    let (app, _) = multi::app(cfg, table).expect("app");
    assert_eq!(get(&app, "/health").await.status, 200);
    for path in ["/v1/models", "/metrics"] {
        assert_eq!(get(&app, path).await.status, 401, "{path}");
    }
    assert_eq!(post(&app, "/v1/chat/completions", &chat("a")).await.status, 401);
    let ok = send(&app, Method::GET, "/v1/models", None, &[("authorization", "Bearer k")]).await;
    assert_eq!(ok.status, 200);
}
