//! `/v1/chat/completions`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::fake::{BOS, Fake, Mode, PLAIN};
use super::{app, detok, post};
use crate::api::ServerConfig;

#[tokio::test]
async fn renders_the_template_and_answers_a_chat_completion() {
    let fake = Arc::new(Fake::reply("Hi there"));
    let app = app(fake.clone());
    let a = post(
        &app,
        "/v1/chat/completions",
        r#"{"model": "smol", "messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "you"}]}],
            "max_tokens": 50, "temperature": 0.2, "user": "someone", "unknown_field": {"x": 1}}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert!(v["id"].as_str().is_some_and(|id| id.starts_with("chatcmpl-") && id.len() > 20));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "smol");
    assert!(v["created"].as_u64().is_some_and(|c| c > 1_600_000_000));
    assert!(v["system_fingerprint"].is_string());
    let c = &v["choices"][0];
    assert_eq!((c["index"].as_u64(), c["finish_reason"].as_str()), (Some(0), Some("stop")));
    assert_eq!(c["message"], json!({"role": "assistant", "content": "Hi there"}));
    assert!(c["logprobs"].is_null());
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let prompt = &reqs[0].prompt;
    // One BOS although the template writes `{{ bos_token }}` and the tokenizer adds one.
    assert_eq!(prompt[0], BOS);
    assert_ne!(prompt[1], BOS);
    assert_eq!(
        detok(&fake, prompt),
        "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello\nyou<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(reqs[0].params.max_tokens, Some(50));
    assert_eq!(reqs[0].params.sampler.temperature, 0.2);
    assert!(reqs[0].timeout.is_some());
    let u = &v["usage"];
    assert_eq!(u["prompt_tokens"].as_u64(), Some(prompt.len() as u64));
    assert_eq!(u["completion_tokens"], 8);
    assert_eq!(u["total_tokens"].as_u64(), Some(prompt.len() as u64 + 8));
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 1);
    let t = &v["timings"];
    for k in [
        "queue_ms",
        "prompt_n",
        "prompt_ms",
        "predicted_n",
        "predicted_ms",
        "predicted_per_second",
        "cache_n",
    ] {
        assert!(t[k].is_number(), "timings.{k}");
    }
    // 8 tokens in 4 ms: the 7 decode steps after the first token.
    assert_eq!(t["predicted_per_second"], 1750.0);
    assert_eq!(t["predicted_per_token_ms"], 4.0 / 7.0);
}

#[tokio::test]
async fn n_choices_with_seeds_and_logprobs() {
    let fake = Arc::new(Fake::reply("ab"));
    let app = app(fake.clone());
    let a = post(
        &app,
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "x"}], "n": 3, "seed": 5, "logprobs": true, "top_logprobs": 2}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["choices"].as_array().map(Vec::len), Some(3));
    let seeds: Vec<Option<u64>> = fake.requests().iter().map(|r| r.params.sampler.seed).collect();
    assert_eq!(seeds, vec![Some(5), Some(6), Some(7)]);
    assert!(fake.requests().iter().all(|r| r.logprobs == Some(2) && !r.prompt_logprobs));
    let lp = &v["choices"][1]["logprobs"]["content"];
    assert_eq!(lp.as_array().map(Vec::len), Some(2));
    assert_eq!(lp[0]["token"], "a");
    assert_eq!(lp[0]["logprob"], -0.5);
    assert_eq!(lp[0]["bytes"], json!([97]));
    assert_eq!(lp[0]["top_logprobs"].as_array().map(Vec::len), Some(2));
    assert_eq!(lp[0]["top_logprobs"][1], json!({"token": "b", "logprob": -2.0, "bytes": [98]}));
    // The prompt counts once, the completions of every choice.
    assert_eq!(v["usage"]["completion_tokens"], 6);
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(fake.requests()[0].prompt.len() as u64));
}

/// Chat with `return_progress` and `timings_per_token`: progress chunks are role deltas with
/// `prompt_progress`; the first chunk has no timings, every content chunk has them.
#[tokio::test]
async fn streams_prompt_progress_and_timings_per_token() {
    let fake = Arc::new(Fake::reply("ab"));
    let app = app(fake.clone());
    let a = post(
        &app,
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "x"}], "stream": true,
            "return_progress": true, "timings_per_token": true}"#,
    )
    .await;
    let chunks = a.chunks();
    assert!(chunks[0].get("timings").is_none() && chunks[0].get("prompt_progress").is_none());
    let progress: Vec<&Value> = chunks.iter().filter(|c| c.get("prompt_progress").is_some()).collect();
    assert_eq!(progress.len(), 2, "{chunks:?}");
    for p in &progress {
        assert_eq!(p["choices"][0]["delta"], json!({"role": "assistant", "content": null}));
        assert!(p["timings"]["prompt_n"].is_u64());
    }
    let content: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()))
        .collect();
    assert_eq!(content.len(), 2);
    assert!(content.iter().all(|c| c["timings"]["predicted_n"].is_u64()), "{content:?}");
}

#[tokio::test]
async fn streams_sse_chunks() {
    let fake = Arc::new(Fake::reply("Hé!"));
    let app = app(fake.clone());
    let a = post(
        &app,
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "x"}], "stream": true, "n": 2,
            "stream_options": {"include_usage": true}, "logprobs": true}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let chunks = a.chunks();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert!(c["id"].as_str().is_some_and(|i| i.starts_with("chatcmpl-")));
        assert_eq!(c["id"], chunks[0]["id"]);
        assert!(c.get("usage").is_some(), "include_usage: every chunk has `usage`");
    }
    for i in 0..2u64 {
        let mine: Vec<&Value> =
            chunks.iter().filter(|c| c["choices"][0]["index"].as_u64() == Some(i)).collect();
        assert_eq!(mine[0]["choices"][0]["delta"]["role"], "assistant");
        let text: String = mine
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect::<Vec<_>>()
            .concat();
        assert_eq!(text, "Hé!");
        // No empty content chunk besides the role chunk (the 'é' bytes come as one piece).
        assert!(mine[1..].iter().all(|c| c["choices"][0]["delta"]["content"] != ""));
        let last = mine.last().expect("chunks");
        assert_eq!(last["choices"][0]["finish_reason"], "stop");
        let lps: usize =
            mine.iter().filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array()).map(Vec::len).sum();
        assert_eq!(lps, 4, "every token's logprob, held-back ones included");
    }
    let usage = chunks.last().expect("usage chunk");
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["timings"]["predicted_n"].is_u64(), "the timings ride on the last chunk: {usage}");
    assert_eq!(usage["usage"]["completion_tokens"], 8);
    // Without include_usage: no usage chunk, no `usage` fields.
    let a = post(
        &app,
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "x"}], "stream": true}"#,
    )
    .await;
    let chunks = a.chunks();
    assert!(
        chunks
            .iter()
            .all(|c| c.get("usage").is_none() && c["choices"].as_array().is_some_and(|v| v.len() == 1))
    );
    assert!(chunks.last().is_some_and(|c| c["timings"]["predicted_n"] == 4));
}

pub(super) const TOOLS: &str =
    r#"[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]"#;

#[tokio::test]
async fn tool_calls_are_parsed() {
    let reply =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let fake = Arc::new(Fake::reply(reply));
    let app = app(fake.clone());
    let body = format!(
        r#"{{"messages": [{{"role": "user", "content": "weather?"}},
            {{"role": "assistant", "content": null, "tool_calls": [{{"id": "c1", "type": "function", "function": {{"name": "get_weather", "arguments": "{{\"city\": \"Rome\"}}"}}}}]}},
            {{"role": "tool", "tool_call_id": "c1", "content": "sunny"}}],
            "tools": {TOOLS}}}"#
    );
    let a = post(&app, "/v1/chat/completions", &body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls");
    assert!(c["message"]["content"].is_null());
    let call = &c["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().is_some_and(|i| i.starts_with("call_")));
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().expect("string")).expect("json");
    assert_eq!(args, json!({"city": "Paris"}));
    // The template saw the tools and the earlier call with parsed arguments.
    let prompt = detok(&fake, &fake.requests()[0].prompt);
    assert!(prompt.contains("Tools: [{\"type\": \"function\""), "{prompt}");
    assert!(prompt.contains("\"arguments\": {\"city\": \"Rome\"}"), "{prompt}");

    // Streaming: the call comes as a delta; no content chunk shows the markup.
    let stream_body =
        format!(r#"{{"messages": [{{"role": "user", "content": "w"}}], "tools": {TOOLS}, "stream": true}}"#);
    let chunks = post(&app, "/v1/chat/completions", &stream_body).await.chunks();
    assert!(
        chunks
            .iter()
            .all(|c| !c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| t.contains("tool_call")))
    );
    let call =
        chunks.iter().find_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0)).expect("tool call delta");
    assert_eq!((call["index"].as_u64(), call["function"]["name"].as_str()), (Some(0), Some("get_weather")));
    assert_eq!(chunks.last().expect("chunk")["choices"][0]["finish_reason"], "tool_calls");

    // tool_choice none: no tools, the reply is text.
    let none = format!(
        r#"{{"messages": [{{"role": "user", "content": "w"}}], "tools": {TOOLS}, "tool_choice": "none"}}"#
    );
    let v = post(&app, "/v1/chat/completions", &none).await.json();
    assert_eq!(v["choices"][0]["message"]["content"], reply);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

/// Tools on a template without tool syntax: the generic format (the tools in a system
/// instruction, the answer constrained to a call or a response, read back).
#[tokio::test]
async fn tools_on_a_template_without_them_use_the_generic_format() {
    let call = r#"{"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}"#;
    let fake = Arc::new(Fake::reply(call).with_template(PLAIN));
    let app = app(fake.clone());
    let body = format!(r#"{{"messages": [{{"role": "user", "content": "w"}}], "tools": {TOOLS}}}"#);
    let v = post(&app, "/v1/chat/completions", &body).await.json();
    let calls = &v["choices"][0]["message"]["tool_calls"];
    assert_eq!(calls[0]["function"]["name"], "get_weather", "{v}");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"city":"Oslo"}"#);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let req = &fake.requests()[0];
    let prompt = detok(&fake, &req.prompt);
    assert!(
        prompt.starts_with("<s>[system] You can call the tools below.") && prompt.contains("get_weather"),
        "{prompt}"
    );
    assert!(prompt.ends_with("[user] w\n[assistant] "), "{prompt}");
    match &req.params.constraint {
        Some(ferrolm::constrain::ConstraintSpec::JsonSchema(s)) => assert!(s["anyOf"].is_array(), "{s}"),
        other => panic!("no schema: {other:?}"),
    }
    // A response is the content; streamed, the same.
    let fake = Arc::new(Fake::reply(r#"{"response": "Sunny."}"#).with_template(PLAIN));
    let app = super::app(fake.clone());
    let v = post(&app, "/v1/chat/completions", &body).await.json();
    assert_eq!(v["choices"][0]["message"], json!({"role": "assistant", "content": "Sunny."}));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let stream =
        format!(r#"{{"messages": [{{"role": "user", "content": "w"}}], "tools": {TOOLS}, "stream": true}}"#);
    let text: String = post(&app, "/v1/chat/completions", &stream)
        .await
        .chunks()
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "Sunny.");
    // A required call drops the response branch; another constraint cannot join in.
    let required = format!(
        r#"{{"messages": [{{"role": "user", "content": "w"}}], "tools": {TOOLS}, "tool_choice": "required"}}"#
    );
    post(&app, "/v1/chat/completions", &required).await.json();
    match &fake.requests().last().expect("request").params.constraint {
        Some(ferrolm::constrain::ConstraintSpec::JsonSchema(s)) => {
            assert_eq!(s["required"], json!(["tool_call"]))
        }
        other => panic!("no schema: {other:?}"),
    }
    let both = format!(
        r#"{{"messages": [{{"role": "user", "content": "w"}}], "tools": {TOOLS}, "response_format": {{"type": "json_object"}}}}"#
    );
    post(&app, "/v1/chat/completions", &both).await.assert_error(400, "invalid_request_error");
    // Without tools the plain template renders as it is.
    let fake = Arc::new(Fake::reply("x").with_template(PLAIN));
    let a = post(
        &super::app(fake.clone()),
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "w"}]}"#,
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(detok(&fake, &fake.requests()[0].prompt), "<s>[user] w\n[assistant] ");
    // No template at all.
    let mut f = Fake::reply("x");
    f.template = Err("the model has no chat template: use /v1/completions".into());
    let app = super::app(Arc::new(f));
    post(&app, "/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "w"}]}"#)
        .await
        .assert_error(400, "invalid_request_error");
}

/// An empty `messages` renders the template without messages (its generation prompt alone), as
/// llama-server does; Anthropic's `/v1/messages` too.
#[tokio::test]
async fn empty_messages_render_the_generation_prompt() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let a = post(&app, "/v1/chat/completions", r#"{"messages": []}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["choices"][0]["message"]["content"], "x");
    let a = post(&app, "/v1/messages", r#"{"max_tokens": 5, "messages": []}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["type"], "message");
    let prompts: Vec<String> = fake.requests().iter().map(|r| detok(&fake, &r.prompt)).collect();
    assert_eq!(prompts, vec!["<s><|im_start|>assistant\n".to_string(); 2]);
}

#[tokio::test]
async fn bad_requests_get_400s() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let cases = [
        (r#"{}"#, Some("messages")),
        (r#"{"messages": "hi"}"#, Some("messages")),
        (r#"{"messages": [{"content": "x"}]}"#, Some("messages[0].role")),
        (r#"{"messages": [{"role": "wizard", "content": "x"}]}"#, Some("messages[0].role")),
        (r#"{"messages": [{"role": "user"}]}"#, Some("messages[0].content")),
        (
            r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}"#,
            Some("messages[0].content"),
        ),
        (r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}"#, Some("max_tokens")),
        (r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}"#, Some("max_tokens")),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}"#,
            Some("max_completion_tokens"),
        ),
        (r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}"#, Some("max_tokens")),
        (r#"{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}"#, Some("top_logprobs")),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21}"#,
            Some("top_logprobs"),
        ),
        (r#"{"messages": [{"role": "user", "content": "x"}], "grammar": "start: bad"}"#, Some("grammar")),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}"#,
            Some("tools[0]"),
        ),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": 5}"#,
            Some("tool_choice"),
        ),
        (r#"{"messages": [{"role": "user", "content": "x"}], "temperature": null, "top_p": 2}"#, None),
        (r#"{"messages": [{"role": "user", "content": "x"}, ]}"#, None),
        ("[]", None),
        ("", None),
    ];
    for (body, param) in cases {
        let a = post(&app, "/v1/chat/completions", body).await;
        let v = a.assert_error(400, "invalid_request_error");
        if let Some(p) = param {
            assert_eq!(v["error"]["param"], p, "{body}: {}", a.body);
        }
    }
    assert!(fake.requests().is_empty(), "nothing invalid reaches the engine");
}

#[tokio::test]
async fn model_names_context_and_engine_errors() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let msg = r#""messages": [{"role": "user", "content": "x"}]"#;
    // As llama-server: the one model answers to any name, and the answer names it by its id.
    let a = post(&app, "/v1/chat/completions", &format!(r#"{{"model": "gpt-4o", {msg}}}"#)).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["model"], "smol");
    let a = post(&app, "/v1/chat/completions", &format!(r#"{{"model": "alias", {msg}}}"#)).await;
    assert_eq!(a.json()["model"], "alias");

    let long = "y".repeat(600);
    let a = post(
        &app,
        "/v1/chat/completions",
        &format!(r#"{{"messages": [{{"role": "user", "content": "{long}"}}]}}"#),
    )
    .await;
    let e = a.assert_error(400, "exceed_context_size_error");
    assert_eq!(e["error"]["code"], "context_length_exceeded");
    assert!(e["error"]["n_prompt_tokens"].as_u64().is_some_and(|n| n > 512), "{e}");
    assert_eq!(e["error"]["n_ctx"], 512);

    *fake.mode.lock().expect("lock") = Mode::Fail("constraint exploded".into());
    let a = post(&app, "/v1/chat/completions", &format!("{{{msg}}}")).await;
    assert!(
        a.assert_error(500, "server_error")["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("exploded"))
    );
    // Streaming: the error comes as an event, then [DONE].
    let a = post(&app, "/v1/chat/completions", &format!(r#"{{{msg}, "stream": true}}"#)).await;
    let chunks = a.chunks();
    assert!(chunks.last().is_some_and(|c| c["error"]["message"] == "constraint exploded"));

    *fake.mode.lock().expect("lock") = Mode::QueueFullAfter(0);
    let a = post(&app, "/v1/chat/completions", &format!("{{{msg}}}")).await;
    a.assert_error(503, "server_error");
    assert_eq!(a.headers.get("retry-after").map(|v| v.as_bytes()), Some(&b"2"[..]));
    *fake.mode.lock().expect("lock") = Mode::ShuttingDown;
    let a = post(&app, "/v1/chat/completions", &format!(r#"{{{msg}, "stream": true}}"#)).await;
    a.assert_error(503, "server_error");

    // Refused while queued (SIGTERM): a 503 at once; streamed, an error event with the same code.
    *fake.mode.lock().expect("lock") = Mode::RefusedInQueue;
    let a = post(&app, "/v1/chat/completions", &format!("{{{msg}}}")).await;
    assert_eq!(a.assert_error(503, "server_error")["error"]["code"], "shutting_down");
    let a = post(&app, "/v1/chat/completions", &format!(r#"{{{msg}, "stream": true}}"#)).await;
    let chunks = a.chunks();
    assert!(chunks.last().is_some_and(|c| c["error"]["code"] == "shutting_down"), "{chunks:?}");
}

#[tokio::test]
async fn structured_output_and_sampler_extras_reach_the_engine() {
    let fake = Arc::new(Fake::reply("{}"));
    let app = app(fake.clone());
    let a = post(
        &app,
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}, "strict": true}},
            "top_k": 5, "min_p": 0.2, "mirostat": 1, "samplers": "top_k;temp", "ignore_eos": true, "stop": "END",
            "logit_bias": {"65": -100}, "timeout": 3, "cache_prompt": false,
            "prompt_lookup": {"max_ngram": 2, "max_draft": 5}}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let r = &fake.requests()[0];
    assert_eq!(
        r.params.constraint,
        Some(ferrolm::constrain::ConstraintSpec::JsonSchema(json!({"type": "object"})))
    );
    assert_eq!((r.params.sampler.top_k, r.params.sampler.min_p, r.params.sampler.mirostat), (5, 0.2, 1));
    // `ignore_eos` bans the end-of-generation tokens, as llama-server does.
    assert_eq!(r.params.sampler.logit_bias, vec![(65, -100.0), (super::fake::EOS, f32::NEG_INFINITY)]);
    assert!(r.params.ignore_eos);
    assert_eq!(r.params.stop, vec!["END"]);
    assert_eq!(r.timeout, Some(std::time::Duration::from_secs(3)));
    assert_eq!(r.lookup, Some(ferrolm::engine::PromptLookup { max_ngram: 2, max_draft: 5 }));
}

/// Regression: these were accepted with 200 (the model saw a broken conversation or no
/// constraint); each is a 400 naming the field.
#[tokio::test]
async fn malformed_tool_messages_and_schemaless_json_schema_are_400() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let call = |args: &str| {
        format!(
            r#"{{"messages": [{{"role": "user", "content": "w"}},
            {{"role": "assistant", "content": null, "tool_calls": [{{"id": "c1", "type": "function", "function": {{"name": "get_weather", "arguments": {args}}}}}]}},
            {{"role": "tool", "tool_call_id": "c1", "content": "sunny"}}]}}"#
        )
    };
    let cases = [
        (
            r#"{"messages": [{"role": "user", "content": "w"}, {"role": "tool", "content": "sunny"}]}"#.to_string(),
            "messages[1].tool_call_id",
        ),
        (call(r#""not json""#), "messages[1].tool_calls"),
        (call(r#""[1, 2]""#), "messages[1].tool_calls"),
        (call("3"), "messages[1].tool_calls"),
        (
            r#"{"messages": [{"role": "user", "content": "w"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}"#.to_string(),
            "response_format.json_schema.schema",
        ),
    ];
    for (body, param) in &cases {
        let v = post(&app, "/v1/chat/completions", body).await.assert_error(400, "invalid_request_error");
        assert_eq!(v["error"]["param"], *param, "{body}");
    }
    assert!(fake.requests().is_empty(), "nothing reached the engine");
    // The valid forms still pass: arguments as JSON text or as an object.
    for args in [r#""{\"city\": \"Rome\"}""#, r#"{"city": "Rome"}"#] {
        assert_eq!(post(&app, "/v1/chat/completions", &call(args)).await.status, 200, "{args}");
    }
}

/// A ChatML template that opens a thinking block unless `enable_thinking` is false (QwQ's and
/// DeepSeek R1's templates force it open).
const THINKING: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
    {% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is not defined or enable_thinking %}<think>\n{% endif %}{% endif %}";

#[tokio::test]
async fn reasoning_goes_to_reasoning_content_plain_and_streamed() {
    let fake = Arc::new(Fake::reply("I add.</think>\n\n4").with_template(THINKING));
    let app = app(fake.clone());
    let chat = |extra: &str| format!(r#"{{"messages": [{{"role": "user", "content": "2+2?"}}]{extra}}}"#);
    let a = post(&app, "/v1/chat/completions", &chat("")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let m = &a.json()["choices"][0]["message"];
    assert_eq!((m["reasoning_content"].as_str(), m["content"].as_str()), (Some("I add."), Some("4")));
    // Streamed: the same split, reasoning first, whatever the token boundaries.
    let a = post(&app, "/v1/chat/completions", &chat(r#", "stream": true"#)).await;
    let chunks = a.chunks();
    let field = |k: &str| -> String {
        chunks.iter().filter_map(|c| c["choices"][0]["delta"][k].as_str()).collect::<Vec<_>>().concat()
    };
    assert_eq!((field("reasoning_content"), field("content")), ("I add.".to_string(), "4".to_string()));
    // reasoning_format "none" leaves it in the content.
    let a = post(&app, "/v1/chat/completions", &chat(r#", "reasoning_format": "none""#)).await;
    let m = &a.json()["choices"][0]["message"];
    assert!(m.get("reasoning_content").is_none());
    assert_eq!(m["content"], "I add.</think>\n\n4");
    let a = post(&app, "/v1/chat/completions", &chat(r#", "reasoning_format": "bogus""#)).await;
    a.assert_error(400, "invalid_request_error");
}

#[tokio::test]
async fn thinking_off_closes_the_block_the_template_opens() {
    let fake = Arc::new(Fake::reply("4").with_template(THINKING));
    let msgs = r#"{"messages": [{"role": "user", "content": "2+2?"}]}"#;
    // The request's enable_thinking: false renders without the block.
    let app = app(fake.clone());
    let body = r#"{"messages": [{"role": "user", "content": "2+2?"}], "chat_template_kwargs": {"enable_thinking": false}}"#;
    let p = post(&app, "/apply-template", body).await.json();
    assert!(p["prompt"].as_str().is_some_and(|t| t.ends_with("<|im_start|>assistant\n")), "{p}");
    // --reasoning off, with a template that opens the block regardless: closed, as llama.cpp does.
    let forced = "{% for m in messages %}{{ m.content }}{% endfor %}<|Assistant|>{{ '<think>\\n' }}";
    let off = Arc::new(Fake::reply("4").with_template(forced));
    let app = super::app_with(off, ServerConfig { reasoning: Some(false), ..super::config() });
    let p = post(&app, "/apply-template", msgs).await.json();
    assert_eq!(p["prompt"], "2+2?<|Assistant|><think>\n</think>");
    let a = post(&app, "/v1/chat/completions", msgs).await.json();
    assert_eq!(a["choices"][0]["message"]["content"], "4");
}

/// gpt-oss's chat template (the "harmony" format), as llama.cpp ships it.
pub(super) const GPT_OSS: &str = include_str!("../../../../ferrolm-chat/testdata/openai-gpt-oss-120b.jinja");

/// A gpt-oss reply: an analysis message, then the final answer (`<|return|>` ends the
/// generation and is not text).
pub(super) const HARMONY_REPLY: &str =
    "<|channel|>analysis<|message|>I add.<|end|><|start|>assistant<|channel|>final<|message|>2+2 = 4";

#[tokio::test]
async fn gpt_oss_analysis_goes_to_reasoning_content_plain_and_streamed() {
    let fake = Arc::new(Fake::reply(HARMONY_REPLY).with_template(GPT_OSS));
    let app = app(fake.clone());
    let chat = |extra: &str| format!(r#"{{"messages": [{{"role": "user", "content": "2+2?"}}]{extra}}}"#);
    let a = post(&app, "/v1/chat/completions", &chat("")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let m = &a.json()["choices"][0]["message"];
    assert_eq!((m["reasoning_content"].as_str(), m["content"].as_str()), (Some("I add."), Some("2+2 = 4")));
    let prompt = detok(&fake, &fake.requests()[0].prompt);
    assert!(prompt.ends_with("<|start|>user<|message|>2+2?<|end|><|start|>assistant"), "{prompt:?}");
    // Streamed (one byte a token, so the markers arrive in pieces): the reasoning's deltas, then
    // the answer's.
    let chunks = post(&app, "/v1/chat/completions", &chat(r#", "stream": true"#)).await.chunks();
    let deltas: Vec<(&str, &str)> = chunks
        .iter()
        .flat_map(|c| {
            let d = &c["choices"][0]["delta"];
            ["reasoning_content", "content"].into_iter().filter_map(move |k| Some((k, d[k].as_str()?)))
        })
        .filter(|(_, t)| !t.is_empty())
        .collect();
    let first_content = deltas.iter().position(|(k, _)| *k == "content").unwrap_or(deltas.len());
    assert!(deltas[..first_content].iter().all(|(k, _)| *k == "reasoning_content"), "{deltas:?}");
    assert!(deltas[first_content..].iter().all(|(k, _)| *k == "content"), "{deltas:?}");
    let field = |k: &str| deltas.iter().filter(|(f, _)| *f == k).map(|(_, t)| *t).collect::<String>();
    assert_eq!((field("reasoning_content"), field("content")), ("I add.".to_string(), "2+2 = 4".to_string()));
    // reasoning_format "none", as llama.cpp: the analysis stays in the content as written, the
    // answer's markers go.
    let a = post(&app, "/v1/chat/completions", &chat(r#", "reasoning_format": "none""#)).await;
    let m = &a.json()["choices"][0]["message"];
    assert!(m.get("reasoning_content").is_none());
    assert_eq!(m["content"], "<|channel|>analysis<|message|>I add.<|end|>2+2 = 4");
    let chunks = post(&app, "/v1/chat/completions", &chat(r#", "reasoning_format": "none", "stream": true"#))
        .await
        .chunks();
    let content: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(content, "<|channel|>analysis<|message|>I add.<|end|>2+2 = 4");
    assert!(chunks.iter().all(|c| c["choices"][0]["delta"].get("reasoning_content").is_none()));
}

#[tokio::test]
async fn gpt_oss_answers_without_analysis_and_keeps_what_it_does_not_parse() {
    let body = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let reply = |text: &str| Arc::new(Fake::reply(text).with_template(GPT_OSS));
    let a = post(&app(reply("<|channel|>final<|message|>Hello!")), "/v1/chat/completions", body).await;
    let m = &a.json()["choices"][0]["message"];
    assert_eq!(m, &json!({"role": "assistant", "content": "Hello!"}));
    // A harmony tool call (not parsed): the reasoning is split off, the call stays as written.
    let call = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}";
    let fake = reply(&format!("<|channel|>analysis<|message|>Call f.<|end|>{call}"));
    let a = post(&app(fake), "/v1/chat/completions", body).await;
    let m = &a.json()["choices"][0]["message"];
    assert_eq!((m["reasoning_content"].as_str(), m["content"].as_str()), (Some("Call f."), Some(call)));
}

#[tokio::test]
async fn gpt_oss_prompts_show_reasoning_as_llama_cpp_renders_it() {
    let fake = Arc::new(Fake::reply("x").with_template(GPT_OSS));
    let app = app(fake);
    let prompt = |body: &str| {
        let app = app.clone();
        let body = body.to_string();
        async move {
            post(&app, "/apply-template", &body).await.json()["prompt"].as_str().unwrap_or("").to_string()
        }
    };
    let user = r#"{"role": "user", "content": "2+2?"}"#;
    // enable_thinking false cannot turn gpt-oss's reasoning off: the prompt stays.
    let on = prompt(&format!(r#"{{"messages": [{user}]}}"#)).await;
    let off =
        prompt(&format!(r#"{{"messages": [{user}], "chat_template_kwargs": {{"enable_thinking": false}}}}"#))
            .await;
    assert!(on.ends_with("<|start|>assistant") && on == off, "{on:?}");
    // A prefill continues the answer, after the message's reasoning (`reasoning_content`).
    let prefill = format!(
        r#"{{"messages": [{user}, {{"role": "assistant", "content": "It is", "reasoning_content": "Easy."}}]}}"#
    );
    let p = prompt(&prefill).await;
    assert!(
        p.ends_with("<|start|>assistant<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is"),
        "{p:?}"
    );
    // A tool-call turn's reasoning renders as its analysis message (the template reads
    // `thinking` and refuses content beside it).
    let history = format!(
        r#"{{"messages": [{user}, {{"role": "assistant", "content": "Let me call f.", "reasoning_content": "Need f.",
            "tool_calls": [{{"id": "c1", "type": "function", "function": {{"name": "f", "arguments": "{{}}"}}}}]}},
            {{"role": "tool", "tool_call_id": "c1", "content": "4"}}]}}"#
    );
    let p = prompt(&history).await;
    assert!(
        p.ends_with(
            "<|start|>assistant<|channel|>analysis<|message|>Need f.<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|><|start|>functions.f to=assistant<|channel|>commentary<|message|>\"4\"<|end|><|start|>assistant"
        ),
        "{p:?}"
    );
}

#[tokio::test]
async fn templates_see_today_as_llama_cpp_gives_it() {
    let fake = Arc::new(Fake::reply("x").with_template("{{ date_string }}|{{ datetime }}"));
    let p = post(&app(fake), "/apply-template", r#"{"messages": [{"role": "user", "content": "hi"}]}"#)
        .await
        .json();
    let today = ferrolm::chat::CalendarDate::today_utc();
    assert_eq!(p["prompt"], format!("{}|{}", today.format("%d %b %Y"), today.format("%b %d %Y")));
}

/// FireFunction v2's template adds `functions` to a string: the tools as JSON text, or empty.
#[tokio::test]
async fn templates_see_the_tools_as_functions_text() {
    let fake = Arc::new(Fake::reply("x").with_template("{{ 'tools:' + functions }}"));
    let app = app(fake);
    let p =
        post(&app, "/apply-template", r#"{"messages": [{"role": "user", "content": "hi"}]}"#).await.json();
    assert_eq!(p["prompt"], "tools:");
    let body = r#"{"messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}"#;
    let p = post(&app, "/apply-template", body).await.json();
    let text = p["prompt"].as_str().unwrap_or("");
    let listed: Value = serde_json::from_str(text.trim_start_matches("tools:")).unwrap_or(Value::Null);
    assert_eq!(listed[0]["function"]["name"], "f", "{text}");
}

#[tokio::test]
async fn input_tokens_counts_the_rendered_prompt() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let body = r#"{"messages": [{"role": "user", "content": "hello there"}]}"#;
    let prompt =
        post(&app, "/apply-template", body).await.json()["prompt"].as_str().unwrap_or("").to_string();
    let n = post(&app, "/chat/completions/input_tokens", body).await.json()["input_tokens"].as_u64();
    let expected = super::super::backend::encode_prompt(fake.as_ref(), &prompt).map(|t| t.len() as u64).ok();
    assert!(expected.is_some_and(|e| e > 0));
    assert_eq!(n, expected);
    assert_eq!(fake.requests().len(), 0, "nothing runs");
    post(&app, "/v1/chat/completions/input_tokens", "{}").await.assert_error(400, "invalid_request_error");
}

#[tokio::test]
async fn vertex_ai_predictions_run_each_instance() {
    let app = app(Arc::new(Fake::reply("hi")));
    let inst = r#"{"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "x"}]}"#;
    let v = post(&app, "/predict", &format!(r#"{{"instances": [{inst}, {inst}]}}"#)).await.json();
    let predictions = v["predictions"].as_array().expect("predictions");
    assert_eq!(predictions.len(), 2);
    for p in predictions {
        assert_eq!(p["choices"][0]["message"]["content"], "hi", "{p}");
    }
    for bad in [
        r#"{"instances": []}"#,
        r#"{"instances": [{"messages": []}]}"#,
        r#"{"instances": [{"@requestFormat": "chatCompletions", "stream": true, "messages": [{"role": "user", "content": "x"}]}]}"#,
    ] {
        post(&app, "/predict", bad).await.assert_error(400, "invalid_request_error");
    }
}

/// Assistant prefill and `continue_final_message`, as llama-server renders them: the last
/// assistant message is continued (not closed), text parts joined by blank lines; conflicting
/// or ambiguous requests are refused.
#[tokio::test]
async fn a_final_assistant_message_is_continued() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let render = |extra: &str, last: &str| {
        format!(r#"{{"messages": [{{"role": "user", "content": "hi"}}, {last}]{extra}}}"#)
    };
    let prompt = |v: Value| v["prompt"].as_str().expect("prompt").to_string();
    let prefill = prompt(
        post(&app, "/apply-template", &render("", r#"{"role": "assistant", "content": "Whi"}"#)).await.json(),
    );
    assert!(prefill.ends_with("<|im_start|>assistant\nWhi"), "{prefill:?}");
    let parts = r#"{"role": "assistant", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]}"#;
    let joined = prompt(post(&app, "/apply-template", &render("", parts)).await.json());
    assert!(joined.ends_with("<|im_start|>assistant\nWh\n\nill"), "{joined:?}");
    let explicit = render(
        r#", "add_generation_prompt": false, "continue_final_message": true"#,
        r#"{"role": "assistant", "content": "Whi"}"#,
    );
    assert_eq!(prompt(post(&app, "/apply-template", &explicit).await.json()), prefill);
    // No generation prompt: the prompt ends with the user's turn.
    let bare = render(r#", "add_generation_prompt": false"#, r#"{"role": "user", "content": "more"}"#);
    assert!(prompt(post(&app, "/apply-template", &bare).await.json()).ends_with("more<|im_end|>\n"));
    for bad in [
        render(r#", "continue_final_message": true"#, r#"{"role": "assistant", "content": "Whi"}"#),
        r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]}"#.to_string(),
        render("", r#"{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}"#),
        render(r#", "continue_final_message": "yes""#, r#"{"role": "assistant", "content": "Whi"}"#),
    ] {
        post(&app, "/v1/chat/completions", &bad).await.assert_error(400, "invalid_request_error");
    }
    // The generation starts from the continued text.
    let v = post(&app, "/v1/chat/completions", &render("", r#"{"role": "assistant", "content": "Whi"}"#))
        .await
        .json();
    assert_eq!(v["choices"][0]["message"]["content"], "x");
}

/// A template that opens the reasoning in the prompt (Qwen 3's thinking models do).
const OPENS_THINKING: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";

#[tokio::test]
async fn a_reasoning_budget_reaches_the_decoder_on_a_thinking_template_only() {
    use ferrolm::decoder::ReasoningBudget;
    let budget_of = |fake: &Fake| fake.requests().last().expect("a request").params.reasoning_budget.clone();
    let chat = |extra: &str| {
        format!(r#"{{"max_tokens": 4, "messages": [{{"role": "user", "content": "Hi"}}]{extra}}}"#)
    };
    let fake = Arc::new(Fake::reply("ok").with_template(OPENS_THINKING));
    let app = app(fake.clone());
    post(&app, "/v1/chat/completions", &chat(r#", "reasoning_budget_tokens": 5"#)).await.assert_ok();
    let expected = ReasoningBudget {
        open: "<think>".into(),
        close: "</think>".into(),
        natural_close: "</think>".into(),
        opened: true,
        tokens: 5,
        message: String::new(),
    };
    assert_eq!(budget_of(&fake), Some(expected.clone()));
    let extra = r#", "thinking_budget_tokens": 0, "reasoning_budget_message": "Enough."#;
    post(&app, "/v1/chat/completions", &chat(&format!("{extra}\""))).await.assert_ok();
    let zero = ReasoningBudget { tokens: 0, message: "Enough.".into(), ..expected.clone() };
    assert_eq!(budget_of(&fake), Some(zero));
    post(&app, "/v1/chat/completions", &chat(r#", "reasoning_budget_tokens": -1"#)).await.assert_ok();
    assert_eq!(budget_of(&fake), None, "-1 takes the server's default: no limit");
    let v = post(&app, "/v1/chat/completions", &chat(r#", "reasoning_budget_tokens": -2"#))
        .await
        .assert_error(400, "invalid_request_error");
    assert_eq!(v["error"]["param"], "reasoning_budget_tokens");
    // Anthropic's thinking budget is the same limit.
    let body = r#"{"max_tokens": 9, "thinking": {"type": "enabled", "budget_tokens": 7},
        "messages": [{"role": "user", "content": "a"}]}"#;
    post(&app, "/v1/messages", body).await.assert_ok();
    assert_eq!(budget_of(&fake).map(|b| b.tokens), Some(7));

    // The server's --reasoning-budget and message apply to requests that do not say.
    let cfg = ServerConfig {
        reasoning_budget: Some(2),
        reasoning_budget_message: "Stop.".into(),
        ..super::config()
    };
    let fake = Arc::new(Fake::reply("ok").with_template(OPENS_THINKING));
    let with_default = super::app_with(fake.clone(), cfg);
    post(&with_default, "/v1/chat/completions", &chat("")).await.assert_ok();
    assert_eq!(budget_of(&fake), Some(ReasoningBudget { tokens: 2, message: "Stop.".into(), ..expected }));

    // A template without thinking tags has nothing to limit.
    let fake = Arc::new(Fake::reply("ok"));
    let plain = super::app(fake.clone());
    post(&plain, "/v1/chat/completions", &chat(r#", "reasoning_budget_tokens": 5"#)).await.assert_ok();
    assert_eq!(budget_of(&fake), None);
}

#[tokio::test]
async fn verbose_answers_carry_the_native_result() {
    let fake = Arc::new(Fake::reply("Hi there"));
    let app = app(fake.clone());
    let chat = |extra: &str| {
        format!(
            r#"{{"max_tokens": 5, "messages": [{{"role": "system", "content": "Book"}}, {{"role": "user", "content": "Hello"}}]{extra}}}"#
        )
    };
    let v = post(&app, "/v1/chat/completions", &chat(r#", "verbose": true"#)).await.assert_ok();
    let verbose = &v["__verbose"];
    let prompt = detok(&fake, &fake.requests()[0].prompt);
    assert_eq!(verbose["prompt"], json!(prompt), "the rendered prompt");
    assert_eq!(verbose["content"], v["choices"][0]["message"]["content"]);
    assert_eq!(verbose["tokens_evaluated"], v["usage"]["prompt_tokens"]);
    assert_eq!(verbose["tokens_predicted"], v["usage"]["completion_tokens"]);
    assert_eq!(verbose["generation_settings"]["n_predict"], 5, "{verbose}");
    for off in ["", r#", "verbose": false"#] {
        let v = post(&app, "/v1/chat/completions", &chat(off)).await.assert_ok();
        assert!(v.get("__verbose").is_none(), "{v}");
    }
    let e = post(&app, "/v1/chat/completions", &chat(r#", "verbose": true, "stream": true"#))
        .await
        .assert_error(400, "invalid_request_error");
    assert_eq!(e["error"]["param"], "verbose");
    let v = post(&app, "/v1/completions", r#"{"prompt": "Once", "max_tokens": 3, "verbose": true}"#)
        .await
        .assert_ok();
    assert_eq!(v["__verbose"]["prompt"], "Once");

    // --verbose: on unless the request says otherwise; streamed answers go without it.
    let cfg = ServerConfig { verbose: true, ..super::config() };
    let verbose_app = super::app_with(fake.clone(), cfg);
    let v = post(&verbose_app, "/v1/chat/completions", &chat("")).await.assert_ok();
    assert!(v["__verbose"]["prompt"].as_str().is_some_and(|p| p.contains("Book")), "{v}");
    let v = post(&verbose_app, "/v1/chat/completions", &chat(r#", "verbose": false"#)).await.assert_ok();
    assert!(v.get("__verbose").is_none());
    let a = post(&verbose_app, "/v1/chat/completions", &chat(r#", "stream": true"#)).await;
    assert!(a.chunks().iter().all(|c| c.get("__verbose").is_none()));
}
