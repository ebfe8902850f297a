//! A constraint that does not compile is a 400 naming the field it came from, before any
//! stream starts (the engine compiles it when the request is submitted).

use std::sync::Arc;

use serde_json::{Value, json};

use super::fake::Fake;
use super::{app, post};

/// Each constraint field with a value the fake engine refuses to compile.
fn bad_constraints() -> [(&'static str, Value); 4] {
    let unmatchable = json!({"$ref": "#"});
    [
        ("grammar", json!({"grammar": "start: bad"})),
        ("json_schema", json!({"json_schema": unmatchable})),
        ("response_format", json!({"response_format": {"type": "json_object", "schema": unmatchable}})),
        (
            "response_format",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": unmatchable}}}),
        ),
    ]
}

#[tokio::test]
async fn constraints_that_do_not_compile_are_400s_naming_their_field() {
    let fake = Arc::new(Fake::reply("ok"));
    let app = app(fake.clone());
    let endpoints = [
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}]})),
        ("/v1/completions", json!({"prompt": "hi"})),
    ];
    for (path, base) in &endpoints {
        for (param, fields) in bad_constraints() {
            for stream in [false, true] {
                let mut body = base.clone();
                for (k, v) in fields.as_object().expect("object") {
                    body[k] = v.clone();
                }
                body["stream"] = json!(stream);
                let a = post(&app, path, &body.to_string()).await;
                // Streamed or not: a JSON error, never a 200 with an error event.
                let err = a.assert_error(400, "invalid_request_error");
                assert_eq!(err["error"]["param"], param, "{path} {body}");
                assert!(a.headers.get("content-type").is_some_and(|v| v == "application/json"), "{path}");
                assert!(err["error"]["message"].as_str().is_some_and(|m| m.contains("invalid constraint")));
            }
        }
    }
    assert!(fake.requests().is_empty(), "no refused request reached the engine");
    // The same fields with constraints that compile are accepted.
    let a = post(&app, "/v1/completions", r#"{"prompt": "hi", "grammar": "start: \"ok\"", "stream": true}"#)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.chunks().last().expect("a chunk")["choices"][0]["finish_reason"], "stop");
}
