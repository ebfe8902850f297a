//! Thousands of random and mutated bodies through every route: no panic, every answer a
//! success or an OpenAI-shaped error, and every streamed body well-framed.

use std::sync::Arc;

use axum::http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

use super::fake::Fake;
use super::{app, send};

/// Valid bodies to mutate.
fn seeds() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/chat/completions",
            json!({"model": "smol", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0.7, "n": 2, "seed": 1}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}], "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "w"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "1", "content": "r"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool_choice": "auto"}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "j"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}, "logit_bias": {"5": 1}, "stop": ["a", "b"], "samplers": ["top_k", "temperature"], "dry_multiplier": 0.5, "mirostat": 2}),
        ),
        ("/v1/completions", json!({"prompt": "hello", "max_tokens": 4, "echo": true, "logprobs": 2, "n": 2})),
        (
            "/v1/completions",
            json!({"prompt": [[1, 2], "x"], "stream": true, "echo": true, "logprobs": 1, "max_tokens": 1}),
        ),
        (
            "/v1/completions",
            json!({"prompt": [5, 6, 7], "max_tokens": 0, "echo": true, "top_k": 3, "min_p": 0.1, "grammar": "start: \"a\""}),
        ),
        ("/v1/embeddings", json!({"input": ["a", "b"], "encoding_format": "base64"})),
        ("/tokenize", json!({"content": "x<s>", "add_special": true, "with_pieces": true})),
        ("/detokenize", json!({"tokens": [1, 2, 256]})),
    ]
}

/// A random JSON value, `depth` levels at most.
fn random_value(rng: &mut StdRng, depth: u32) -> Value {
    match rng.random_range(0..if depth == 0 { 7 } else { 9 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.random()),
        2 => json!(rng.random_range(-3i64..300)),
        3 => json!([i64::MIN, i64::MAX, -1, 0, 1, 1 << 40, 17][rng.random_range(0..7)]),
        4 => json!([0.0, -0.5, 1.5, 1e300, -1e300, 2.0, f64::MIN_POSITIVE][rng.random_range(0..7)]),
        5 => json!(
            [
                "",
                "a",
                "none",
                "auto",
                "text",
                "json_object",
                "json_schema",
                "user",
                "{",
                "<tool_call>",
                "é",
                "\u{0}"
            ][rng.random_range(0..12)]
        ),
        6 => Value::String((0..rng.random_range(0..20)).map(|_| rng.random_range(' '..'~')).collect()),
        7 => Value::Array((0..rng.random_range(0..4)).map(|_| random_value(rng, depth - 1)).collect()),
        _ => {
            let keys = [
                "type",
                "text",
                "role",
                "content",
                "name",
                "function",
                "schema",
                "json_schema",
                "include_usage",
                "x",
            ];
            let mut m = Map::new();
            for _ in 0..rng.random_range(0..4) {
                m.insert(keys[rng.random_range(0..keys.len())].to_string(), random_value(rng, depth - 1));
            }
            Value::Object(m)
        }
    }
}

/// Replaces, removes or adds a random field somewhere in `v`.
fn mutate(rng: &mut StdRng, v: &mut Value, depth: u32) {
    match v {
        Value::Object(m) if !m.is_empty() && depth < 4 && (depth == 0 || rng.random_bool(0.6)) => {
            let i = rng.random_range(0..m.len());
            let key = m.keys().nth(i).cloned().unwrap_or_default();
            match rng.random_range(0..4) {
                0 => {
                    m.remove(&key);
                }
                1 => {
                    m.insert(key, random_value(rng, 2));
                }
                _ => {
                    if let Some(child) = m.get_mut(&key) {
                        mutate(rng, child, depth + 1);
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() && depth < 4 && rng.random_bool(0.6) => {
            let i = rng.random_range(0..a.len());
            if rng.random_bool(0.3) {
                a.remove(i);
            } else {
                mutate(rng, &mut a[i], depth + 1);
            }
        }
        _ => *v = random_value(rng, 2),
    }
}

/// Byte-level damage to a serialized body.
fn damage(rng: &mut StdRng, s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    match rng.random_range(0..3) {
        0 => b.truncate(rng.random_range(0..=b.len())),
        1 => {
            for _ in 0..rng.random_range(1..4) {
                if !b.is_empty() {
                    let i = rng.random_range(0..b.len());
                    b[i] = rng.random();
                }
            }
        }
        _ => {
            let i = rng.random_range(0..=b.len());
            b.splice(
                i..i,
                [b'[', b'{', b'"', b'}', b',', b'\\'][rng.random_range(0..6)..].iter().copied().take(2),
            );
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

#[tokio::test]
async fn random_and_mutated_bodies_never_break_the_server() {
    let fake = Arc::new(Fake::reply("ok <tool_call>{\"name\": \"f\"}</tool_call>"));
    let app = app(fake.clone());
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let seeds = seeds();
    let (mut ok, mut client_err) = (0, 0);
    for round in 0..3000 {
        let (path, base) = &seeds[round % seeds.len()];
        let mut v = base.clone();
        for _ in 0..rng.random_range(1..4) {
            mutate(&mut rng, &mut v, 0);
        }
        let body = match rng.random_range(0..10) {
            0 => damage(&mut rng, &v.to_string()),
            1 => random_value(&mut rng, 3).to_string(),
            _ => v.to_string(),
        };
        let a = send(&app, Method::POST, path, Some(&body), &[]).await;
        let is_sse =
            a.headers.get("content-type").is_some_and(|c| c.as_bytes().starts_with(b"text/event-stream"));
        if a.status.is_success() {
            ok += 1;
            if is_sse {
                let events = a.events();
                assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
                for e in &events[..events.len() - 1] {
                    assert!(serde_json::from_str::<Value>(e).is_ok(), "{body}: {e}");
                }
            } else {
                assert!(a.json().is_object(), "{body}");
            }
        } else {
            assert!(a.status.is_client_error(), "{body} gave {}: {}", a.status, a.body);
            client_err += 1;
            let e = a.json();
            assert!(
                e["error"]["message"].is_string() && e["error"]["type"].is_string(),
                "{body}: {}",
                a.body
            );
        }
    }
    // The mutations are mild enough that both kinds of answer happen often.
    assert!(ok > 300 && client_err > 300, "ok {ok}, errors {client_err}");
}
