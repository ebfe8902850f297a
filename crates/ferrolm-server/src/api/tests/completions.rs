//! `/v1/completions`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::ServerConfig;
use super::fake::{BOS, Fake};
use super::{app, app_with, config, post};

#[tokio::test]
async fn string_prompts_and_shapes() {
    let fake = Arc::new(Fake::reply("world"));
    let app = app(fake.clone());
    let a =
        post(&app, "/v1/completions", r#"{"model": "smol", "prompt": "Hello <s>", "max_tokens": 3}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert!(v["id"].as_str().is_some_and(|i| i.starts_with("cmpl-")));
    assert_eq!(v["object"], "text_completion");
    assert_eq!(
        v["choices"][0],
        json!({"index": 0, "text": "wor", "logprobs": null, "finish_reason": "length"})
    );
    // BOS added, special text parsed.
    let p = &fake.requests()[0].prompt;
    assert_eq!((p[0], p.last().copied(), p.len()), (BOS, Some(BOS), 8));
    assert_eq!(v["usage"]["prompt_tokens"], 8);
    assert_eq!(v["usage"]["completion_tokens"], 3);

    // Default max_tokens is OpenAI's 16.
    post(&app, "/v1/completions", r#"{"prompt": "a"}"#).await;
    assert_eq!(fake.requests()[1].params.max_tokens, Some(16));
}

#[tokio::test]
async fn many_prompts_token_prompts_and_n() {
    let fake = Arc::new(Fake::reply("z"));
    let app = app(fake.clone());
    let a = post(&app, "/v1/completions", r#"{"prompt": ["a", "bb", [1, 2, 3]], "n": 2, "seed": 10}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    let idx: Vec<u64> =
        v["choices"].as_array().expect("choices").iter().filter_map(|c| c["index"].as_u64()).collect();
    assert_eq!(idx, vec![0, 1, 2, 3, 4, 5]);
    let reqs = fake.requests();
    let prompts: Vec<&[u32]> = reqs.iter().map(|r| r.prompt.as_slice()).collect();
    assert_eq!(prompts[0], &[BOS, 97]);
    assert_eq!(prompts[2], &[BOS, 98, 98]);
    // A token prompt is taken as it is (no BOS added).
    assert_eq!(prompts[4], &[1, 2, 3]);
    assert_eq!(prompts[5], &[1, 2, 3]);
    let seeds: Vec<Option<u64>> = reqs.iter().map(|r| r.params.sampler.seed).collect();
    assert_eq!(seeds, vec![Some(10), Some(11), Some(10), Some(11), Some(10), Some(11)]);
    // Each prompt counted once: 2 + 3 + 3 tokens.
    assert_eq!(v["usage"]["prompt_tokens"], 8);
    assert_eq!(v["usage"]["completion_tokens"], 6);

    let a = post(&app, "/v1/completions", r#"{"prompt": [[5], [6, 7]]}"#).await;
    assert_eq!(a.json()["choices"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn echo_with_logprobs_is_the_legacy_format() {
    let fake = Arc::new(Fake::reply("xy"));
    let app = app(fake.clone());
    // lm-evaluation-harness's loglikelihood request: token prompts, echo, logprobs, max_tokens 1.
    let a = post(
        &app,
        "/v1/completions",
        r#"{"prompt": [[97, 98, 99]], "echo": true, "logprobs": 1, "max_tokens": 1, "temperature": 0}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    let c = &v["choices"][0];
    assert_eq!(c["text"], "abcx");
    let lp = &c["logprobs"];
    assert_eq!(lp["tokens"], json!(["a", "b", "c", "x"]));
    assert_eq!(lp["token_logprobs"], json!([null, -0.5, -0.5, -0.5]));
    assert!(lp["top_logprobs"][0].is_null());
    assert_eq!(lp["top_logprobs"][1], json!({"a": -1.0}));
    assert_eq!(lp["text_offset"], json!([0, 1, 2, 3]));
    let r = &fake.requests()[0];
    assert!(r.prompt_logprobs);
    assert_eq!(r.logprobs, Some(1));
    assert_eq!(r.params.sampler.temperature, 0.0);

    // max_tokens 0 is allowed with echo: the prompt alone.
    let a =
        post(&app, "/v1/completions", r#"{"prompt": "hi", "echo": true, "logprobs": 0, "max_tokens": 0}"#)
            .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let c = &a.json()["choices"][0];
    assert_eq!(c["text"], "hi");
    assert_eq!(c["logprobs"]["tokens"], json!(["<s>", "h", "i"]));
    assert_eq!(c["logprobs"]["top_logprobs"][1], json!({}));
    // ...not without it.
    post(&app, "/v1/completions", r#"{"prompt": "hi", "max_tokens": 0}"#)
        .await
        .assert_error(400, "invalid_request_error");
    // Logprobs without echo: generated tokens only.
    let c = post(&app, "/v1/completions", r#"{"prompt": "hi", "logprobs": 2}"#).await.json()["choices"][0]
        .clone();
    assert_eq!(c["logprobs"]["tokens"], json!(["x", "y"]));
    assert_eq!(c["logprobs"]["top_logprobs"][0], json!({"a": -1.0, "b": -2.0}));
}

#[tokio::test]
async fn streaming_with_echo() {
    let fake = Arc::new(Fake::reply("yz"));
    let app = app(fake.clone());
    let a = post(
        &app,
        "/v1/completions",
        r#"{"prompt": "ab", "echo": true, "stream": true, "logprobs": 1, "stream_options": {"include_usage": true}}"#,
    )
    .await;
    let chunks = a.chunks();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let text: String =
        chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(text, "abyz");
    let tokens: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(tokens, vec![json!("<s>"), json!("a"), json!("b"), json!("y"), json!("z")]);
    let fin: Vec<&Value> = chunks.iter().filter(|c| !c["choices"][0]["finish_reason"].is_null()).collect();
    assert_eq!(fin.len(), 1);
    assert_eq!(chunks.last().expect("usage")["usage"]["completion_tokens"], 2);
}

#[tokio::test]
async fn bad_prompts() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    for (body, param) in [
        (r#"{}"#, "prompt"),
        (r#"{"prompt": 5}"#, "prompt"),
        (r#"{"prompt": []}"#, "prompt"),
        (r#"{"prompt": [1, 99999]}"#, "prompt"),
        (r#"{"prompt": [-1]}"#, "prompt"),
        (r#"{"prompt": ["a", {"x": 1}]}"#, "prompt[1]"),
        (r#"{"prompt": [[1], [2, null]]}"#, "prompt[1][1]"),
        (r#"{"prompt": [1, {"prompt_string": "a"}]}"#, "prompt[1]"),
        (r#"{"prompt": "a", "logprobs": 21}"#, "logprobs"),
        (r#"{"prompt": "a", "logprobs": true}"#, "logprobs"),
        (r#"{"prompt": "a", "suffix": "b"}"#, "suffix"),
        (r#"{"prompt": "a", "best_of": 3}"#, "best_of"),
        (r#"{"prompt": "a", "n": 0}"#, "n"),
        (r#"{"prompt": "a", "echo": "yes"}"#, "echo"),
    ] {
        let a = post(&app, "/v1/completions", body).await;
        assert_eq!(a.assert_error(400, "invalid_request_error")["error"]["param"], param, "{body}");
    }
    let long = format!(r#"{{"prompt": [{}]}}"#, vec!["1"; 512].join(","));
    let a = post(&app, "/v1/completions", &long).await;
    assert_eq!(a.assert_error(400, "exceed_context_size_error")["error"]["code"], "context_length_exceeded");
    // Exactly the context with max_tokens 0 fits.
    let fits = format!(r#"{{"prompt": [{}], "echo": true, "max_tokens": 0}}"#, vec!["1"; 512].join(","));
    assert_eq!(post(&app, "/v1/completions", &fits).await.status, 200);
}

/// With a draft model, requests speculate with it unless they ask for prompt lookup or set
/// `speculative.n_max` to 0, take llama-server's `speculative.*` overrides, and report
/// `draft_n`/`draft_n_accepted` in `timings`; without one those fields change nothing.
#[tokio::test]
async fn a_draft_model_speculates_per_request() {
    use ferrolm::engine::{DraftSettings, PromptLookup};
    let server = DraftSettings { max_draft: 8, min_draft: 0, p_min: 0.75 };
    let fake = Arc::new(Fake::reply("ok"));
    let with_draft = app_with(fake.clone(), ServerConfig { draft: Some(server), ..config() });
    let bodies = [
        r#"{"prompt": "x"}"#,
        r#"{"prompt": "x", "speculative.n_max": 4, "speculative.n_min": 1, "speculative.p_min": 0.5}"#,
        r#"{"prompt": "x", "speculative.n_max": 0}"#,
        r#"{"prompt": "x", "prompt_lookup": true}"#,
    ];
    let mut timings = Vec::new();
    for body in bodies {
        let a = post(&with_draft, "/v1/completions", body).await;
        assert_eq!(a.status, 200, "{}", a.body);
        timings.push(a.json()["timings"].clone());
    }
    let r = fake.requests();
    assert_eq!(r[0].draft, Some(server));
    assert_eq!(r[1].draft, Some(DraftSettings { max_draft: 4, min_draft: 1, p_min: 0.5 }));
    assert_eq!((r[2].draft, r[2].lookup), (None, None));
    assert_eq!((r[3].draft, r[3].lookup), (None, Some(PromptLookup { max_ngram: 3, max_draft: 8 })));
    assert_eq!((&timings[0]["draft_n"], &timings[0]["draft_n_accepted"]), (&json!(3), &json!(2)));
    assert!(timings[2].get("draft_n").is_none(), "{}", timings[2]);

    let fake = Arc::new(Fake::reply("ok"));
    let a = post(&app(fake.clone()), "/v1/completions", bodies[1]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(fake.requests()[0].draft, None);
    assert!(a.json()["timings"].get("draft_n").is_none());
}
