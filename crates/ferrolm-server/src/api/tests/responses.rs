//! `/v1/responses` (OpenAI's Responses API).

use std::sync::Arc;

use serde_json::{Value, json};

use super::fake::Fake;
use super::{app, detok, post};

#[tokio::test]
async fn a_response_with_text() {
    let fake = Arc::new(Fake::reply("Hello!"));
    let app = app(fake.clone());
    let body = r#"{"model": "gpt-4.1", "instructions": "Be kind.", "max_output_tokens": 20,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]}]}"#;
    let a = post(&app, "/v1/responses", body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(
        (v["object"].clone(), v["status"].clone(), v["model"].clone()),
        (json!("response"), json!("completed"), json!("smol"))
    );
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(
        v["output"][0]["content"][0],
        json!({"type": "output_text", "text": "Hello!", "annotations": []})
    );
    assert_eq!(v["usage"]["output_tokens"], 6);
    let prompt = detok(&fake, &fake.requests()[0].prompt);
    assert!(prompt.contains("Be kind.") && prompt.contains("Say hello"), "{prompt}");
    assert_eq!(fake.requests()[0].params.max_tokens, Some(20));

    let v = post(&app, "/v1/responses", r#"{"input": "hi", "max_output_tokens": 2}"#).await.json();
    assert_eq!(
        (v["status"].clone(), v["incomplete_details"]["reason"].clone()),
        (json!("incomplete"), json!("max_output_tokens"))
    );
}

#[tokio::test]
async fn function_calls_in_and_out() {
    let reply =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let fake = Arc::new(Fake::reply(reply));
    let app = app(fake.clone());
    let tools = r#"[{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]"#;
    let body = format!(
        r#"{{"tools": {tools}, "input": [
            {{"role": "user", "content": "weather?"}},
            {{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{{\"city\": \"Rome\"}}"}},
            {{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}}]}}"#
    );
    let v = post(&app, "/v1/responses", &body).await.json();
    let call =
        v["output"].as_array().and_then(|o| o.iter().find(|i| i["type"] == "function_call")).expect("call");
    assert_eq!(call["name"], "get_weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().expect("string")).expect("json");
    assert_eq!(args, json!({"city": "Paris"}));
    let prompt = detok(&fake, &fake.requests()[0].prompt);
    assert!(prompt.contains("\"city\": \"Rome\"") && prompt.contains("sunny"), "{prompt}");

    let stream = format!(r#"{{"tools": {tools}, "stream": true, "input": "w"}}"#);
    let events = post(&app, "/v1/responses", &stream).await.named_events();
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        (names.first(), names.last()),
        (Some(&"response.created"), Some(&"response.completed")),
        "{names:?}"
    );
    assert!(names.contains(&"response.function_call_arguments.done"), "{names:?}");
    assert!(!names.contains(&"response.output_text.delta"), "no markup shown as text: {names:?}");
    let seq: Vec<u64> = events.iter().filter_map(|(_, d)| d["sequence_number"].as_u64()).collect();
    assert_eq!(seq, (0..events.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn streamed_text_and_refusals() {
    let fake = Arc::new(Fake::reply("abc"));
    let app = app(fake.clone());
    let events = post(&app, "/v1/responses", r#"{"input": "x", "stream": true}"#).await.named_events();
    let text: String = events
        .iter()
        .filter(|(e, _)| e == "response.output_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(text, "abc");
    let done = &events.last().expect("events").1;
    assert_eq!(done["response"]["output"][0]["content"][0]["text"], "abc");

    for (body, param) in [
        (r#"{"input": "x", "previous_response_id": "resp_1"}"#, "previous_response_id"),
        (r#"{"input": "x", "store": true}"#, "store"),
        (r#"{"input": "x", "tools": [{"type": "web_search"}]}"#, "tools[0].type"),
        (
            r#"{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}"#,
            "input[0].content[0]",
        ),
        (r#"{"model": "m"}"#, "input"),
    ] {
        let e = post(&app, "/v1/responses", body).await.assert_error(400, "invalid_request_error");
        assert_eq!(e["error"]["param"], param, "{body}");
    }
}
