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

/// llama-server's live reports on a Responses stream: `response.in_progress` events with
/// `prompt_progress`, `timings` on every text delta, and the last event's `timings`.
#[tokio::test]
async fn streams_prompt_progress_and_timings_per_token() {
    let fake = Arc::new(Fake::reply("ab"));
    let app = app(fake.clone());
    let body = r#"{"input": "x", "stream": true, "return_progress": true, "timings_per_token": true}"#;
    let events = post(&app, "/v1/responses", body).await.named_events();
    let progress: Vec<&Value> =
        events.iter().map(|(_, d)| d).filter(|d| d.get("prompt_progress").is_some()).collect();
    assert_eq!(progress.len(), 2, "{events:?}");
    for p in &progress {
        assert_eq!(p["type"], "response.in_progress");
        assert!(p["prompt_progress"]["total"].as_u64() > Some(0) && p["timings"]["prompt_n"].is_u64());
    }
    let deltas: Vec<&Value> =
        events.iter().filter(|(e, _)| e == "response.output_text.delta").map(|(_, d)| d).collect();
    assert!(!deltas.is_empty() && deltas.iter().all(|d| d["timings"]["predicted_n"].is_u64()), "{deltas:?}");
    let (name, done) = events.last().expect("events");
    assert_eq!(name, "response.completed");
    assert!(done["timings"]["predicted_per_second"].is_number(), "{done}");
    // Without them: no progress events, no per-delta timings.
    let plain = post(&app, "/v1/responses", r#"{"input": "x", "stream": true}"#).await.named_events();
    assert!(plain.iter().all(|(_, d)| d.get("prompt_progress").is_none()));
    assert!(
        plain
            .iter()
            .filter(|(e, _)| e == "response.output_text.delta")
            .all(|(_, d)| d.get("timings").is_none())
    );
}

#[tokio::test]
async fn reasoning_is_a_reasoning_item_plain_and_streamed() {
    let template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let fake = Arc::new(Fake::reply("<think>I add.</think>\n\n4").with_template(template));
    let app = app(fake.clone());
    let v = post(&app, "/v1/responses", r#"{"input": "2+2?"}"#).await.json();
    let out = v["output"].as_array().expect("output");
    assert_eq!(out.len(), 2, "{v}");
    assert_eq!(
        (out[0]["type"].clone(), out[0]["summary"].clone(), out[0]["content"].clone()),
        (json!("reasoning"), json!([]), json!([{"type": "reasoning_text", "text": "I add."}]))
    );
    assert!(out[0]["id"].as_str().is_some_and(|i| i.starts_with("rs_")));
    assert_eq!(
        (out[1]["type"].as_str(), out[1]["content"][0]["text"].as_str()),
        (Some("message"), Some("4"))
    );

    // Streamed: the reasoning item (output 0) is done before the message (output 1) starts.
    let events = post(&app, "/v1/responses", r#"{"input": "2+2?", "stream": true}"#).await.named_events();
    let text = |kind: &str| -> String {
        events.iter().filter(|(e, _)| e == kind).filter_map(|(_, d)| d["delta"].as_str()).collect()
    };
    assert_eq!(
        (text("response.reasoning_text.delta"), text("response.output_text.delta")),
        ("I add.".into(), "4".into())
    );
    let items: Vec<(String, Value, Value)> = events
        .iter()
        .filter(|(e, _)| e.starts_with("response.output_item"))
        .map(|(e, d)| (e.clone(), d["output_index"].clone(), d["item"]["type"].clone()))
        .collect();
    let item = |e: &str, i: usize, t: &str| (format!("response.output_item.{e}"), json!(i), json!(t));
    assert_eq!(
        items,
        [
            item("added", 0, "reasoning"),
            item("done", 0, "reasoning"),
            item("added", 1, "message"),
            item("done", 1, "message")
        ]
    );
    let done = events.iter().find(|(e, _)| e == "response.reasoning_text.done").expect("reasoning done");
    assert_eq!(done.1["text"], "I add.");
    let completed = &events.last().expect("events").1["response"]["output"];
    assert_eq!(
        (completed[0]["content"][0]["text"].as_str(), completed[1]["content"][0]["text"].as_str()),
        (Some("I add."), Some("4"))
    );
    let seq: Vec<u64> = events.iter().filter_map(|(_, d)| d["sequence_number"].as_u64()).collect();
    assert_eq!(seq, (0..events.len() as u64).collect::<Vec<_>>());

    // reasoning_format none: all text.
    let v = post(&app, "/v1/responses", r#"{"input": "2+2?", "reasoning_format": "none"}"#).await.json();
    assert_eq!(v["output"][0]["content"][0]["text"], "<think>I add.</think>\n\n4");
    let events = post(&app, "/v1/responses", r#"{"input": "x", "reasoning_format": "none", "stream": true}"#)
        .await
        .named_events();
    assert!(events.iter().all(|(e, _)| !e.contains("reasoning")));
    // A reasoning input item is the next assistant message's reasoning_content.
    let body = r#"{"input": [{"role": "user", "content": "a"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Hm."}]},
        {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}"#;
    assert_eq!(post(&app, "/v1/responses", body).await.status, 200);
    let prompt = detok(&fake, &fake.requests().last().expect("request").prompt);
    assert!(prompt.contains("<think>Hm.</think>b"), "{prompt:?}");
}

#[tokio::test]
async fn gpt_oss_reasoning_and_function_calls() {
    let reply = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}";
    let mut fake = Fake::reply(reply).with_template(super::chat::GPT_OSS);
    fake.n_ctx = 8192;
    let app = app(Arc::new(fake));
    let tools = r#"[{"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]"#;
    let v = post(&app, "/v1/responses", &format!(r#"{{"tools": {tools}, "input": "w?"}}"#)).await.json();
    let kinds: Vec<&str> =
        v["output"].as_array().expect("output").iter().filter_map(|i| i["type"].as_str()).collect();
    assert_eq!(kinds, ["reasoning", "function_call"], "{v}");
    assert_eq!(v["output"][1]["arguments"], "{\"city\": \"Oslo\"}");
    let events =
        post(&app, "/v1/responses", &format!(r#"{{"tools": {tools}, "stream": true, "input": "w?"}}"#))
            .await
            .named_events();
    let out = &events.last().expect("events").1["response"]["output"];
    assert_eq!(
        (out[0]["type"].as_str(), out[1]["type"].as_str()),
        (Some("reasoning"), Some("function_call"))
    );
    assert!(events.iter().all(|(e, _)| e != "response.output_text.delta"), "no markup as text");
}

#[tokio::test]
async fn input_tokens_counts_the_prompt_the_request_would_run() {
    let fake = Arc::new(Fake::reply("ok"));
    let app = app(fake.clone());
    let body = r#"{"input": "Hello world", "instructions": "Be brief."}"#;
    let v = post(&app, "/v1/responses/input_tokens", body).await.json();
    assert_eq!(v["object"], "response.input_tokens", "{v}");
    let n = v["input_tokens"].as_u64().expect("input_tokens");
    post(&app, "/v1/responses", body).await.json();
    assert_eq!(Some(n), fake.requests().first().map(|r| r.prompt.len() as u64), "the same prompt is run");
    post(&app, "/responses/input_tokens", r#"{"input": 7}"#).await.assert_error(400, "invalid_request_error");
}
