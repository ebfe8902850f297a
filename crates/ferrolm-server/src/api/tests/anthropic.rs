//! `/v1/messages` and `/v1/messages/count_tokens` (Anthropic's Messages API).

use std::sync::Arc;

use serde_json::{Value, json};

use super::fake::Fake;
use super::{app, detok, post};

#[tokio::test]
async fn a_message_in_and_a_message_out() {
    let fake = Arc::new(Fake::reply("Hello!"));
    let app = app(fake.clone());
    let body = r#"{"model": "claude-x", "max_tokens": 50, "system": "Be kind.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}],
        "stop_sequences": ["STOP"], "temperature": 0.2}"#;
    let a = post(&app, "/v1/messages", body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(
        (v["type"].clone(), v["role"].clone(), v["model"].clone()),
        (json!("message"), json!("assistant"), json!("smol"))
    );
    assert!(v["id"].as_str().is_some_and(|i| i.starts_with("msg_")));
    assert_eq!(v["content"], json!([{"type": "text", "text": "Hello!"}]));
    assert_eq!((v["stop_reason"].clone(), v["stop_sequence"].clone()), (json!("end_turn"), Value::Null));
    assert_eq!(v["usage"]["output_tokens"], 6);
    assert_eq!(v["usage"]["input_tokens"], fake.requests()[0].prompt.len());
    assert!(v.get("timings").is_none());
    let req = &fake.requests()[0];
    assert_eq!((req.params.max_tokens, req.params.stop.clone()), (Some(50), vec!["STOP".to_string()]));
    assert_eq!(req.params.sampler.temperature, 0.2);
    let prompt = detok(&fake, &req.prompt);
    assert!(prompt.contains("Be kind.") && prompt.contains("Say hello"), "{prompt}");

    let v =
        post(&app, "/v1/messages", r#"{"max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}"#)
            .await
            .json();
    assert_eq!(v["stop_reason"], "max_tokens");
}

#[tokio::test]
async fn tool_use_round_trip() {
    let reply =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let fake = Arc::new(Fake::reply(reply));
    let app = app(fake.clone());
    let tools = r#"[{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]"#;
    let body = format!(
        r#"{{"max_tokens": 100, "tools": {tools}, "messages": [
            {{"role": "user", "content": "weather?"}},
            {{"role": "assistant", "content": [{{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {{"city": "Rome"}}}}]}},
            {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}}]}}]}}"#
    );
    let v = post(&app, "/v1/messages", &body).await.json();
    assert_eq!(v["stop_reason"], "tool_use");
    let block =
        v["content"].as_array().and_then(|c| c.iter().find(|b| b["type"] == "tool_use")).expect("tool_use");
    assert_eq!(
        (block["name"].clone(), block["input"].clone()),
        (json!("get_weather"), json!({"city": "Paris"}))
    );
    let prompt = detok(&fake, &fake.requests()[0].prompt);
    assert!(prompt.contains("\"city\": \"Rome\"") && prompt.contains("sunny"), "{prompt}");

    // Streamed: the call is a tool_use block with one input_json_delta.
    let stream_body = format!(
        r#"{{"max_tokens": 100, "tools": {tools}, "stream": true, "messages": [{{"role": "user", "content": "w"}}]}}"#
    );
    let events = post(&app, "/v1/messages", &stream_body).await.named_events();
    let start = events
        .iter()
        .find(|(e, d)| e == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .expect("tool block");
    assert_eq!(start.1["content_block"]["name"], "get_weather");
    let delta = events.iter().find(|(_, d)| d["delta"]["type"] == "input_json_delta").expect("input delta");
    let input: Value =
        serde_json::from_str(delta.1["delta"]["partial_json"].as_str().expect("json text")).expect("json");
    assert_eq!(input, json!({"city": "Paris"}));
    let md = events.iter().find(|(e, _)| e == "message_delta").expect("message_delta");
    assert_eq!(md.1["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn streams_anthropic_events() {
    let fake = Arc::new(Fake::reply("abc"));
    let app = app(fake.clone());
    let a = post(
        &app,
        "/v1/messages",
        r#"{"max_tokens": 9, "stream": true, "messages": [{"role": "user", "content": "x"}]}"#,
    )
    .await;
    let events = a.named_events();
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    for want in ["content_block_start", "content_block_delta", "content_block_stop", "message_delta"] {
        assert!(names.contains(&want), "{names:?}");
    }
    let text: String = events.iter().filter_map(|(_, d)| d["delta"]["text"].as_str()).collect();
    assert_eq!(text, "abc");
    let md = &events.iter().find(|(e, _)| e == "message_delta").expect("delta").1;
    assert_eq!(
        (md["delta"]["stop_reason"].clone(), md["usage"]["output_tokens"].clone()),
        (json!("end_turn"), json!(3))
    );
}

#[tokio::test]
async fn count_tokens_and_refusals() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let body = r#"{"model": "m", "messages": [{"role": "user", "content": "Hello there"}]}"#;
    let v = post(&app, "/v1/messages/count_tokens", body).await.json();
    assert!(v["input_tokens"].as_u64().is_some_and(|n| n > 10), "{v}");
    assert!(fake.requests().is_empty(), "counting runs nothing");

    let image =
        r#"{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}"#;
    let e = post(&app, "/v1/messages", image).await.assert_error(400, "invalid_request_error");
    assert_eq!(e["error"]["param"], "messages[0].content[0]");
    let thinking = r#"{"max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": 10}, "messages": [{"role": "user", "content": "x"}]}"#;
    assert_eq!(
        post(&app, "/v1/messages", thinking).await.assert_error(400, "invalid_request_error")["error"]["param"],
        "thinking"
    );
    let role = r#"{"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}"#;
    post(&app, "/v1/messages", role).await.assert_error(400, "invalid_request_error");
}
