//! `/tools` and `/cors-proxy` over HTTP, on a router with every built-in tool.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::*;

async fn app() -> Router {
    let cfg = ServerToolsConfig { tools: vec!["all".into()], ..Default::default() };
    let tools = ServerTools::start(&cfg).await.expect("start").expect("tools");
    routes(Some(tools), false)
}

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app.clone().oneshot(req).await.expect("response");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

fn post(body: Value, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::post("/tools").header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body.to_string())).expect("request")
}

#[tokio::test]
async fn lists_and_calls_tools() {
    let app = app().await;
    let (status, body) = send(&app, Request::get("/tools").body(Body::empty()).expect("req")).await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_str(&body).expect("json");
    let names: Vec<&str> =
        list.as_array().expect("array").iter().map(|t| t["tool"].as_str().expect("name")).collect();
    assert_eq!(names, builtin_tool_names());
    assert_eq!(list[3]["permissions"]["write"], true);
    assert_eq!(list[0]["definition"]["function"]["name"], "read_file");

    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path().to_str().expect("utf8");
    let w = json!({"tool": "write_file", "params": {"path": "sub/a.txt", "content": "hi\n", "cwd": "/nope"}});
    let (status, body) = send(&app, post(w, &[("x-tool-cwd", cwd)])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(std::fs::read_to_string(dir.path().join("sub/a.txt")).expect("read"), "hi\n");
    let cmd = json!({"tool": "exec_shell_command", "params": {"command": "cat sub/a.txt"}});
    let (_, body) = send(&app, post(cmd, &[("x-tool-cwd", cwd)])).await;
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["plain_text_response"], "hi\n\n[exit code: 0]");
}

#[tokio::test]
async fn request_errors() {
    let app = app().await;
    let (status, body) = send(&app, post(json!({"tool": "nope"}), &[])).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = send(&app, post(json!({"tool": "read_file", "params": {}}), &[])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) =
        send(&app, post(json!({"tool": "read_file", "stream": true, "params": {"path": "x"}}), &[])).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let exec =
        json!({"tool": "exec_shell_command", "params": {"command": "touch /tmp/ferrolm_should_not_exist"}});
    for (runtime, expect) in [
        ("fake:x", "unknown tool runtime"),
        ("ssh:-oProxyCommand=x", "invalid ssh target"),
        ("docker-container:--privileged", "invalid container id"),
        ("podman-container:abc123", "not supported"),
    ] {
        let (status, body) = send(&app, post(exec.clone(), &[("x-tool-runtime", runtime)])).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains(expect), "{runtime}: {body}");
    }
    assert!(!std::path::Path::new("/tmp/ferrolm_should_not_exist").exists());
}

#[tokio::test]
async fn streams_a_command() {
    let app = app().await;
    let req =
        post(json!({"tool": "exec_shell_command", "stream": true, "params": {"command": "echo hello"}}), &[]);
    let (status, body) = send(&app, req).await;
    assert_eq!(status, StatusCode::OK);
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("event"))
        .collect();
    assert_eq!(events.last(), Some(&json!({"done": true})));
    let text: String = events.iter().filter_map(|e| e["chunk"].as_str()).collect();
    assert_eq!(text, "hello\n\n[exit code: 0]");
}

#[tokio::test]
async fn disabled_features_are_403() {
    let app = routes(None, false);
    for path in ["/tools", "/cors-proxy?url=http://127.0.0.1:1/"] {
        let (status, body) = send(&app, Request::get(path).body(Body::empty()).expect("req")).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(body.contains("feature_disabled"));
    }
    assert!(ServerToolsConfig { tools: vec!["rm_rf".into()], ..Default::default() }.check().is_err());
}
