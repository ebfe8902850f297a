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
    let thinking = r#"{"max_tokens": 5, "thinking": {"type": "sometimes"}, "messages": [{"role": "user", "content": "x"}]}"#;
    assert_eq!(
        post(&app, "/v1/messages", thinking).await.assert_error(400, "invalid_request_error")["error"]["param"],
        "thinking.type"
    );
    let role = r#"{"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}"#;
    post(&app, "/v1/messages", role).await.assert_error(400, "invalid_request_error");
}

/// A thinking model's template (Qwen 3's way: `<think>` in the template).
const THINKING: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{% if not enable_thinking %}<think></think>{% endif %}";

#[tokio::test]
async fn reasoning_is_a_thinking_block_plain_and_streamed() {
    let fake = Arc::new(Fake::reply("<think>I add.</think>\n\n4").with_template(THINKING));
    let app = app(fake.clone());
    let ask = |extra: &str| {
        format!(r#"{{"max_tokens": 99, "messages": [{{"role": "user", "content": "2+2?"}}]{extra}}}"#)
    };
    let v = post(&app, "/v1/messages", &ask("")).await.json();
    assert_eq!(
        v["content"],
        json!([{"type": "thinking", "thinking": "I add.", "signature": ""}, {"type": "text", "text": "4"}])
    );
    // Streamed (one byte a token, the tags in pieces): a thinking block with thinking_delta
    // events and an empty signature, closed before the text block opens.
    let events = post(&app, "/v1/messages", &ask(r#", "stream": true"#)).await.named_events();
    let blocks: Vec<(String, Value)> = events
        .iter()
        .filter(|(e, _)| e.starts_with("content_block"))
        .map(|(e, d)| (e.clone(), d["index"].clone()))
        .collect();
    let (first, last) = (&blocks[0], &blocks[blocks.len() - 1]);
    assert_eq!(
        (first.0.as_str(), &first.1, last.0.as_str(), &last.1),
        ("content_block_start", &json!(0), "content_block_stop", &json!(1))
    );
    let start = events.iter().find(|(e, _)| e == "content_block_start").expect("start");
    assert_eq!(start.1["content_block"]["type"], "thinking");
    let deltas = |kind: &str, key: &str| -> String {
        events
            .iter()
            .filter(|(_, d)| d["delta"]["type"] == kind)
            .filter_map(|(_, d)| d["delta"][key].as_str())
            .collect()
    };
    assert_eq!(
        (deltas("thinking_delta", "thinking"), deltas("text_delta", "text")),
        ("I add.".into(), "4".into())
    );
    let order: Vec<String> = events
        .iter()
        .filter(|(e, _)| e.starts_with("content_block"))
        .map(|(e, d)| format!("{e}:{}:{}", d["index"], d["delta"]["type"].as_str().unwrap_or("")))
        .collect();
    let sig = order.iter().position(|o| o == "content_block_delta:0:signature_delta").expect("signature");
    assert_eq!(order[sig + 1], "content_block_stop:0:", "{order:?}");
    assert_eq!(order[sig + 2], "content_block_start:1:", "{order:?}");
    // reasoning_format none: the reasoning stays in the text, tags and all.
    let v = post(&app, "/v1/messages", &ask(r#", "reasoning_format": "none""#)).await.json();
    assert_eq!(v["content"], json!([{"type": "text", "text": "<think>I add.</think>\n\n4"}]));
    let events = post(&app, "/v1/messages", &ask(r#", "reasoning_format": "none", "stream": true"#))
        .await
        .named_events();
    assert!(events.iter().all(|(_, d)| d["content_block"]["type"] != "thinking"));
    // thinking disabled reaches the template as enable_thinking false; an assistant's thinking
    // block is its reasoning_content.
    let body = r#"{"max_tokens": 9, "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Hm.", "signature": "s"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": "c"}]}"#;
    assert_eq!(post(&app, "/v1/messages", body).await.status, 200);
    let prompt = detok(&fake, &fake.requests().last().expect("request").prompt);
    assert!(
        prompt.contains("<think>Hm.</think>b") && prompt.ends_with("assistant\n<think></think>"),
        "{prompt:?}"
    );
}

#[tokio::test]
async fn gpt_oss_reasoning_and_tool_use() {
    let reply = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}";
    let mut fake = Fake::reply(reply).with_template(super::chat::GPT_OSS);
    fake.n_ctx = 8192;
    let app = app(Arc::new(fake));
    let tools = r#"[{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]"#;
    let body = |extra: &str| {
        format!(
            r#"{{"max_tokens": 999, "tools": {tools}, "messages": [{{"role": "user", "content": "w?"}}]{extra}}}"#
        )
    };
    let v = post(&app, "/v1/messages", &body("")).await.json();
    let kinds: Vec<&str> =
        v["content"].as_array().expect("blocks").iter().filter_map(|b| b["type"].as_str()).collect();
    assert_eq!(kinds, ["thinking", "tool_use"], "{v}");
    assert_eq!(
        (v["content"][0]["thinking"].as_str(), v["stop_reason"].as_str()),
        (Some("Need weather."), Some("tool_use"))
    );
    assert_eq!(v["content"][1]["input"], json!({"city": "Oslo"}));
    let events = post(&app, "/v1/messages", &body(r#", "stream": true"#)).await.named_events();
    let starts: Vec<(Value, Value)> = events
        .iter()
        .filter(|(e, _)| e == "content_block_start")
        .map(|(_, d)| (d["index"].clone(), d["content_block"]["type"].clone()))
        .collect();
    assert_eq!(starts, [(json!(0), json!("thinking")), (json!(1), json!("tool_use"))]);
    assert!(events.iter().all(|(_, d)| d["delta"]["type"] != "text_delta"), "no markup as text");
}
