//! Sleeping on idle (`--sleep-idle-seconds`) over fake backends, with timers of a fraction of a
//! second: the model is released after idling, read-only endpoints neither wake it nor keep it
//! awake, a task loads it again and runs on it, a running request is never cut, and `/metrics`
//! repeats its last reading while the model sleeps.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;

use super::super::backend::{Backend, SharedBackend};
use super::super::multi::{self, BackendLoadFn, CatalogEntry, ModelTable};
use super::super::sleep::BackendReload;
use super::super::{AppState, ServerConfig, routes};
use super::fake::{Fake, Mode};
use super::{config, get, post};

/// A sleepy server over `first`, released after `idle`; each reload makes a fake replying
/// `again` (after `load_ms`), kept in the returned list.
fn server(first: Arc<Fake>, idle: Duration, load_ms: u64) -> (Router, Arc<Mutex<Vec<Arc<Fake>>>>) {
    let loads: Arc<Mutex<Vec<Arc<Fake>>>> = Arc::default();
    let made = loads.clone();
    let reload: BackendReload = Arc::new(move || {
        std::thread::sleep(Duration::from_millis(load_ms));
        let f = Arc::new(Fake::reply("again"));
        made.lock().expect("lock").push(f.clone());
        Ok(f as SharedBackend)
    });
    let cfg = ServerConfig { sleep_idle: Some(idle), ..config() };
    let state = AppState::sleepy(first, Some(reload), Arc::new(cfg), 0);
    (routes::router(state).expect("router"), loads)
}

async fn is_sleeping(app: &Router, path: &str) -> bool {
    let a = get(app, path).await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()["is_sleeping"].as_bool().expect("is_sleeping")
}

/// Waits (at most 5 s) until `/props` says the model sleeps, scraping the read-only endpoints
/// meanwhile (which must not keep it awake).
async fn wait_for_sleep(app: &Router) {
    let end = Instant::now() + Duration::from_secs(5);
    while !is_sleeping(app, "/props").await {
        assert!(Instant::now() < end, "the model did not go to sleep");
        for path in ["/health", "/metrics", "/v1/models", "/slots", "/get_load"] {
            assert_eq!(get(app, path).await.status, 200, "{path}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn chat() -> &'static str {
    r#"{"messages": [{"role": "user", "content": "hi"}]}"#
}

#[tokio::test]
async fn sleeps_after_idling_and_a_task_wakes_it() {
    let first = Arc::new(Fake::reply("first"));
    let (app, loads) = server(first.clone(), Duration::from_millis(200), 0);
    assert!(!is_sleeping(&app, "/props").await);
    let a = post(&app, "/v1/chat/completions", chat()).await;
    assert_eq!(a.json()["choices"][0]["message"]["content"], "first");

    wait_for_sleep(&app).await;
    assert!(first.shut_down.load(Ordering::SeqCst), "the model was released");
    // The read-only endpoints answer from what was kept, and leave the model asleep.
    let models = get(&app, "/v1/models").await.json();
    assert_eq!(models["data"][0]["id"], "smol");
    assert_eq!(models["data"][0]["meta"]["n_ctx"], 512);
    let props = get(&app, "/props").await.json();
    assert_eq!(props["default_generation_settings"]["n_ctx"], 512);
    assert!(props["chat_template"].as_str().is_some_and(|t| t.contains("im_start")));
    let slots = get(&app, "/slots").await.json();
    assert_eq!(slots.as_array().map(Vec::len), Some(2), "{slots}");
    assert_eq!(slots[0]["is_processing"], false);
    assert!(is_sleeping(&app, "/props").await);
    assert!(loads.lock().expect("lock").is_empty(), "nothing was loaded again");

    // A task loads the model again, then runs on it.
    let a = post(&app, "/v1/chat/completions", chat()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["choices"][0]["message"]["content"], "again");
    assert!(!is_sleeping(&app, "/props").await);
    assert_eq!(loads.lock().expect("lock").len(), 1);

    // And it sleeps again.
    wait_for_sleep(&app).await;
    assert!(loads.lock().expect("lock")[0].shut_down.load(Ordering::SeqCst));
}

#[tokio::test]
async fn token_counting_wakes_the_model() {
    let (app, loads) = server(Arc::new(Fake::reply("x")), Duration::from_millis(150), 0);
    let calls: [(&str, &str); 5] = [
        ("/tokenize", r#"{"content": "Hello"}"#),
        ("/chat/completions/input_tokens", chat()),
        ("/v1/responses/input_tokens", r#"{"input": "Hello world"}"#),
        ("/v1/messages/count_tokens", r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#),
        ("/detokenize", r#"{"tokens": [104, 105]}"#),
    ];
    for (n, (path, body)) in calls.into_iter().enumerate() {
        wait_for_sleep(&app).await;
        let a = post(&app, path, body).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        assert!(!is_sleeping(&app, "/props").await, "{path} woke the model");
        assert_eq!(loads.lock().expect("lock").len(), n + 1, "{path}");
    }
    let text = post(&app, "/detokenize", r#"{"tokens": [104, 105]}"#).await.json();
    assert_eq!(text["content"], "hi", "the reloaded model detokenizes");
}

#[tokio::test]
async fn a_running_request_is_not_cut() {
    let first = Arc::new(Fake::new(Mode::Hang));
    let (app, _) = server(first.clone(), Duration::from_millis(100), 0);
    let streaming = r#"{"stream": true, "messages": [{"role": "user", "content": "hi"}]}"#;
    let running = tokio::spawn({
        let app = app.clone();
        async move { post(&app, "/v1/chat/completions", streaming).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!is_sleeping(&app, "/props").await, "asleep with a request running");
    assert!(!first.shut_down.load(Ordering::SeqCst));
    assert_eq!(first.held.lock().expect("lock").len(), 1);
    // The request ends (its stream included); then the idle time counts.
    first.cancel_all();
    let a = tokio::time::timeout(Duration::from_secs(5), running).await.expect("ended").expect("task");
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("[DONE]"), "{}", a.body);
    wait_for_sleep(&app).await;
}

#[tokio::test]
async fn concurrent_tasks_share_one_reload() {
    let (app, loads) = server(Arc::new(Fake::reply("x")), Duration::from_millis(100), 150);
    wait_for_sleep(&app).await;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { post(&app, "/v1/chat/completions", chat()).await })
        })
        .collect();
    // The model is loading: the read-only endpoints still answer, and say it sleeps.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(is_sleeping(&app, "/props").await);
    for t in tasks {
        let a = t.await.expect("task");
        assert_eq!(a.json()["choices"][0]["message"]["content"], "again");
    }
    assert_eq!(loads.lock().expect("lock").len(), 1, "one load for all");
}

#[tokio::test]
async fn a_failed_reload_is_an_error_and_the_next_task_tries_again() {
    let tries = Arc::new(AtomicUsize::new(0));
    let counted = tries.clone();
    let reload: BackendReload = Arc::new(move || {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            Err("the file is gone".to_string())
        } else {
            Ok(Arc::new(Fake::reply("back")) as SharedBackend)
        }
    });
    let cfg = ServerConfig { sleep_idle: Some(Duration::from_millis(100)), ..config() };
    let state = AppState::sleepy(Arc::new(Fake::reply("x")), Some(reload), Arc::new(cfg), 0);
    let app = routes::router(state).expect("router");
    wait_for_sleep(&app).await;
    let a = post(&app, "/v1/chat/completions", chat()).await;
    let e = a.assert_error(500, "server_error");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("the file is gone")), "{e}");
    assert!(is_sleeping(&app, "/props").await);
    let a = post(&app, "/v1/chat/completions", chat()).await;
    assert_eq!(a.json()["choices"][0]["message"]["content"], "back");
}

fn metric(text: &str, name: &str) -> f64 {
    let line =
        text.lines().find(|l| l.split(' ').next() == Some(name)).unwrap_or_else(|| panic!("no {name}"));
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("value")
}

#[tokio::test]
async fn metrics_while_asleep_repeat_the_last_scrape_and_counters_go_on() {
    let (app, _) = server(Arc::new(Fake::reply("x")), Duration::from_millis(200), 0);
    let awake = get(&app, "/metrics").await.body;
    assert_eq!(metric(&awake, "ferrolm_requests_total"), 3.0);
    let end = Instant::now() + Duration::from_secs(5);
    while !is_sleeping(&app, "/props").await {
        assert!(Instant::now() < end, "the model did not go to sleep");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asleep = get(&app, "/metrics").await;
    assert_eq!(asleep.status, 200);
    assert_eq!(asleep.body, awake, "the last reading, uptime and memory included");
    assert!(is_sleeping(&app, "/props").await);
    // Awake again: the released engine's counters are kept (3) and the new one's added (3).
    post(&app, "/tokenize", r#"{"content": "a"}"#).await;
    assert_eq!(metric(&get(&app, "/metrics").await.body, "ferrolm_requests_total"), 6.0);
}

#[tokio::test]
async fn a_multi_model_server_puts_idle_models_to_sleep() {
    let loads = Arc::new(AtomicUsize::new(0));
    let counted = loads.clone();
    let load: BackendLoadFn = Arc::new(move |path: &Path| {
        counted.fetch_add(1, Ordering::SeqCst);
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        Ok((Arc::new(Fake::reply(stem)) as SharedBackend, None))
    });
    let entry = CatalogEntry { id: "one".into(), path: "/models/one.gguf".into(), bytes: 10 };
    let table = ModelTable { catalog: vec![entry], max_loaded: 2, memory_budget: None, load, autoload: true };
    let cfg = ServerConfig { sleep_idle: Some(Duration::from_millis(150)), ..config() };
    let (app, _) = multi::app(cfg, table).expect("app");
    let ask = r#"{"model": "one", "messages": [{"role": "user", "content": "hi"}]}"#;
    assert_eq!(
        post(&app, "/v1/chat/completions", ask).await.json()["choices"][0]["message"]["content"],
        "one"
    );
    let end = Instant::now() + Duration::from_secs(5);
    while !is_sleeping(&app, "/props?model=one").await {
        assert!(Instant::now() < end, "the model did not go to sleep");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let models = get(&app, "/v1/models").await.json();
    assert_eq!(models["data"][0]["status"]["value"], "sleeping", "{models}");
    let text = get(&app, "/metrics").await.body;
    assert!(text.contains("ferrolm_model_sleeping{model=\"one\"} 1"), "{text}");
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    // A task wakes it: loaded again, by the same loader.
    assert_eq!(
        post(&app, "/v1/chat/completions", ask).await.json()["choices"][0]["message"]["content"],
        "one"
    );
    assert_eq!(loads.load(Ordering::SeqCst), 2);
    assert!(!is_sleeping(&app, "/props?model=one").await);
    assert_eq!(get(&app, "/v1/models").await.json()["data"][0]["status"]["value"], "loaded");
}
