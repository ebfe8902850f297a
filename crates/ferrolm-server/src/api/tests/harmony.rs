//! gpt-oss's tool calls (the harmony format) in `/v1/chat/completions`, plain and streamed, and
//! the prompt of a conversation that holds them.

use std::sync::Arc;

use serde_json::{Value, json};

use super::chat::GPT_OSS;
use super::fake::Fake;
use super::{app, post};

/// A tool as gpt-oss's template needs it (with a description).
const TOOLS: &str = r#"[{"type": "function", "function": {"name": "get_weather", "description": "The weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]"#;

/// A gpt-oss model replying `reply`, with room for the template's long prompt.
fn gpt_oss(reply: &str) -> Arc<Fake> {
    let mut fake = Fake::reply(reply).with_template(GPT_OSS);
    fake.n_ctx = 8192;
    Arc::new(fake)
}

/// A request offering `get_weather`, with `extra` fields.
fn ask(extra: &str) -> String {
    format!(r#"{{"messages": [{{"role": "user", "content": "Weather in Oslo?"}}], "tools": {TOOLS}{extra}}}"#)
}

/// The calls of a message as (name, parsed arguments).
fn calls(m: &Value) -> Vec<(String, Value)> {
    m["tool_calls"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    let args = c["function"]["arguments"].as_str().and_then(|a| serde_json::from_str(a).ok());
                    (c["function"]["name"].as_str().unwrap_or("").to_string(), args.unwrap_or(Value::Null))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The streamed deltas of choice 0: reasoning, content, and the calls of the tool-call delta.
fn streamed(chunks: &[Value]) -> (String, String, Vec<(String, Value)>) {
    let text =
        |k: &str| -> String { chunks.iter().filter_map(|c| c["choices"][0]["delta"][k].as_str()).collect() };
    let delta = chunks.iter().find(|c| c["choices"][0]["delta"].get("tool_calls").is_some());
    let calls = delta.map(|c| calls(&c["choices"][0]["delta"])).unwrap_or_default();
    (text("reasoning_content"), text("content"), calls)
}

#[tokio::test]
async fn gpt_oss_tool_calls_plain_and_streamed() {
    let weather = ("get_weather".to_string(), json!({"city": "Oslo"}));
    // Recipient after the channel, with a constraint; recipient in the role part without
    // `<|constrain|>`; a first message that is the call; two calls with analysis between.
    let replies = [
        (
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}",
            Some("Need weather."),
            vec![weather.clone()],
        ),
        (
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}",
            Some("Need weather."),
            vec![weather.clone()],
        ),
        (
            " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}",
            None,
            vec![weather.clone()],
        ),
        (
            "<|channel|>analysis<|message|>Two.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|><|start|>assistant<|channel|>analysis<|message|> And Rome.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"city\": \"Rome\"}",
            Some("Two. And Rome."),
            vec![weather.clone(), ("get_weather".to_string(), json!({"city": "Rome"}))],
        ),
    ];
    for (reply, reasoning, want) in replies {
        let app = app(gpt_oss(reply));
        let a = post(&app, "/v1/chat/completions", &ask("")).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let c = &a.json()["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{reply}");
        let m = &c["message"];
        assert!(m["content"].is_null(), "{reply}: {m}");
        assert_eq!(m["reasoning_content"].as_str(), reasoning, "{reply}");
        assert_eq!(calls(m), want, "{reply}");
        // Streamed one byte a token, so every marker arrives in pieces: the reasoning's deltas,
        // no content, the calls in one delta, finish_reason tool_calls.
        let chunks = post(&app, "/v1/chat/completions", &ask(r#", "stream": true"#)).await.chunks();
        let (r, content, streamed_calls) = streamed(&chunks);
        assert_eq!((r.as_str(), content.as_str()), (reasoning.unwrap_or(""), ""), "{reply}");
        assert_eq!(streamed_calls, want, "{reply}");
        let last = chunks.iter().rev().find(|c| !c["choices"][0]["finish_reason"].is_null()).expect("finish");
        assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    }
}

#[tokio::test]
async fn gpt_oss_preambles_broken_calls_and_no_tools_stay_content() {
    // A preamble before the call is the content beside it.
    let reply = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}";
    let app1 = app(gpt_oss(reply));
    let m = post(&app1, "/v1/chat/completions", &ask("")).await.json()["choices"][0]["message"].clone();
    assert_eq!(
        (m["content"].as_str(), calls(&m)),
        (Some("Checking."), vec![("get_weather".into(), json!({}))])
    );
    let (_, content, c) =
        streamed(&post(&app1, "/v1/chat/completions", &ask(r#", "stream": true"#)).await.chunks());
    assert_eq!((content.as_str(), c.len()), ("Checking.", 1));
    // Arguments cut off (not JSON): no call, the message stays as written, streamed or not.
    let cut = "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"city\": \"Os";
    let app2 = app(gpt_oss(&format!("<|channel|>analysis<|message|>a<|end|>{cut}")));
    let c = post(&app2, "/v1/chat/completions", &ask("")).await.json()["choices"][0].clone();
    assert_eq!((c["message"]["content"].as_str(), c["finish_reason"].as_str()), (Some(cut), Some("stop")));
    let (_, content, calls) =
        streamed(&post(&app2, "/v1/chat/completions", &ask(r#", "stream": true"#)).await.chunks());
    assert_eq!((content.as_str(), calls.len()), (cut, 0));
    // Without tools the call is not parsed.
    let plain = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let m = post(&app2, "/v1/chat/completions", plain).await.json()["choices"][0]["message"].clone();
    assert_eq!((m["content"].as_str(), m.get("tool_calls")), (Some(cut), None));
}

#[tokio::test]
async fn gpt_oss_tool_conversations_render_one_call_per_message() {
    let app = app(gpt_oss("x"));
    // Two calls in one assistant message (as a parallel-call API client sends them back), the
    // results in another order: each call is its own message, followed by its result.
    let body = format!(
        r#"{{"tools": {TOOLS}, "messages": [{{"role": "user", "content": "Oslo and Rome?"}},
            {{"role": "assistant", "content": null, "reasoning_content": "Both.", "tool_calls": [
                {{"id": "c1", "type": "function", "function": {{"name": "get_weather", "arguments": "{{\"city\": \"Oslo\"}}"}}}},
                {{"id": "c2", "type": "function", "function": {{"name": "get_weather", "arguments": "{{\"city\": \"Rome\"}}"}}}}]}},
            {{"role": "tool", "tool_call_id": "c2", "content": "sunny"}},
            {{"role": "tool", "tool_call_id": "c1", "content": "rain"}}]}}"#
    );
    let a = post(&app, "/apply-template", &body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let prompt = a.json()["prompt"].as_str().unwrap_or("").to_string();
    let want = concat!(
        "<|start|>user<|message|>Oslo and Rome?<|end|>",
        "<|start|>assistant<|channel|>analysis<|message|>Both.<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}<|call|>",
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"rain\"<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Rome\"}<|call|>",
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|>",
        "<|start|>assistant",
    );
    assert!(prompt.ends_with(want), "{prompt:?}");
    assert!(prompt.contains("namespace functions"), "the tools are shown: {prompt:?}");
}
