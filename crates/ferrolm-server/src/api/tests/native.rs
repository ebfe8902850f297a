//! `/completion`, llama-server's own endpoint.

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::ServerConfig;
use super::fake::Fake;
use super::{app, app_with, config, post};

#[tokio::test]
async fn answers_in_llama_servers_shape() {
    let fake = Arc::new(Fake::reply("hi\nthere"));
    let app = app(fake.clone());
    let a =
        post(&app, "/completion", r#"{"prompt": "Hello", "n_predict": 4, "return_tokens": true, "seed": 7}"#)
            .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["content"], "hi\nt");
    assert_eq!(v["tokens"], json!([104, 105, 10, 116]));
    assert_eq!((v["stop"].clone(), v["stop_type"].clone()), (json!(true), json!("limit")));
    assert_eq!((v["tokens_predicted"].clone(), v["has_new_line"].clone()), (json!(4), json!(true)));
    assert_eq!(v["tokens_evaluated"], fake.requests()[0].prompt.len());
    assert_eq!(v["timings"]["predicted_n"], 4);
    assert_eq!(v["generation_settings"]["n_predict"], 4);
    assert_eq!(v["generation_settings"]["seed"], 7);
    assert_eq!(
        (v["model"].clone(), v["id_slot"].clone(), v["truncated"].clone()),
        (json!("smol"), json!(0), json!(false))
    );
    assert_eq!(fake.requests()[0].params.max_tokens, Some(4));

    // The whole reply: the end-of-generation token; no tokens without return_tokens.
    let v = post(&app, "/completions", r#"{"prompt": "Hello"}"#).await.json();
    assert_eq!(
        (v["content"].clone(), v["stop_type"].clone(), v["tokens"].clone()),
        (json!("hi\nthere"), json!("eos"), json!([]))
    );
    // No n_predict: no limit (the context ends it).
    assert_eq!(fake.requests()[1].params.max_tokens, None);
}

#[tokio::test]
async fn several_prompts_response_fields_and_probs() {
    let fake = Arc::new(Fake::reply("ab"));
    let app = app(fake.clone());
    let v = post(&app, "/completion", r#"{"prompt": ["x", [1, 2]], "n_predict": 1}"#).await.json();
    let arr = v.as_array().expect("an array for several prompts");
    assert_eq!((arr.len(), arr[1]["index"].clone(), arr[1]["content"].clone()), (2, json!(1), json!("a")));

    let body = r#"{"prompt": "x", "n_predict": 2, "response_fields": ["content", "generation_settings/n_predict", "nope"]}"#;
    let v = post(&app, "/completion", body).await.json();
    assert_eq!(v, json!({"content": "ab", "generation_settings/n_predict": 2}));

    let v = post(&app, "/completion", r#"{"prompt": "x", "n_probs": 3}"#).await.json();
    let probs = v["completion_probabilities"].as_array().expect("probabilities");
    assert_eq!(probs.len(), 2);
    assert_eq!((probs[0]["id"].clone(), probs[0]["token"].clone()), (json!(97), json!("a")));
    assert_eq!(probs[0]["top_logprobs"].as_array().map(Vec::len), Some(3));
    assert_eq!(fake.requests()[3].logprobs, Some(3));
}

#[tokio::test]
async fn streams_a_chunk_per_token_then_the_whole_object() {
    let fake = Arc::new(Fake::reply("abc"));
    let app = app(fake.clone());
    let a = post(&app, "/completion", r#"{"prompt": "x", "stream": true, "n_predict": 2}"#).await;
    let chunks: Vec<Value> = a.events().iter().map(|e| serde_json::from_str(e).expect("JSON")).collect();
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    assert_eq!(chunks[0]["content"], "a");
    assert_eq!((chunks[0]["tokens"].clone(), chunks[0]["stop"].clone()), (json!([97]), json!(false)));
    let last = &chunks[2];
    assert_eq!(
        (last["stop"].clone(), last["stop_type"].clone(), last["content"].clone()),
        (json!(true), json!("limit"), json!(""))
    );
    assert_eq!(last["timings"]["predicted_n"], 2);
}

/// `return_progress` streams `prompt_progress` chunks while the prompt runs (the first at the
/// cached prefix, with no time yet); `timings_per_token` puts `timings` on every chunk.
#[tokio::test]
async fn streams_prompt_progress_and_timings_per_token() {
    let fake = Arc::new(Fake::reply("abc"));
    let app = app(fake.clone());
    let body = r#"{"prompt": "xyz", "stream": true, "n_predict": 2, "return_progress": true, "timings_per_token": true}"#;
    let chunks: Vec<Value> = post(&app, "/completion", body)
        .await
        .events()
        .iter()
        .map(|e| serde_json::from_str(e).expect("JSON"))
        .collect();
    // Two progress reports, two tokens, the final object.
    assert_eq!(chunks.len(), 5, "{chunks:?}");
    // The fake's prompt: BOS + 3 bytes, one of them cached.
    assert_eq!(chunks[0]["prompt_progress"], json!({"total": 4, "cache": 1, "processed": 1, "time_ms": 0.0}));
    assert_eq!(
        (chunks[0]["timings"]["prompt_n"].clone(), chunks[0]["timings"]["prompt_ms"].clone()),
        (json!(0), json!(0.0))
    );
    assert_eq!(chunks[1]["prompt_progress"]["processed"], 4);
    assert_eq!(chunks[1]["timings"]["prompt_n"], 3);
    assert_eq!(chunks[0]["content"], "");
    for (k, c) in chunks[2..4].iter().enumerate() {
        assert!(c.get("prompt_progress").is_none(), "{c}");
        assert_eq!(c["timings"]["predicted_n"], k + 1, "{c}");
    }
    // Without the flags: no reports, timings only at the end.
    let plain = r#"{"prompt": "xyz", "stream": true, "n_predict": 2}"#;
    let chunks: Vec<Value> = post(&app, "/completion", plain)
        .await
        .events()
        .iter()
        .map(|e| serde_json::from_str(e).expect("JSON"))
        .collect();
    assert_eq!(chunks.len(), 3);
    assert!(chunks[..2].iter().all(|c| c.get("timings").is_none() && c.get("prompt_progress").is_none()));
}

/// `--n-predict` is the default limit; a request's own limit wins over it, above or below (as
/// llama-server: "the per-request limit takes priority over the global one"), and
/// `n_predict: -1` asks for the default.
#[tokio::test]
async fn server_n_predict_is_the_default_a_request_limit_wins() {
    let fake = Arc::new(Fake::reply("abcdef"));
    let app = app_with(fake.clone(), ServerConfig { n_predict: Some(3), ..config() });
    post(&app, "/completion", r#"{"prompt": "x"}"#).await;
    post(&app, "/completion", r#"{"prompt": "x", "n_predict": 10}"#).await;
    post(&app, "/v1/completions", r#"{"prompt": "x", "max_tokens": 2}"#).await;
    post(&app, "/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "x"}], "n_predict": 5}"#)
        .await;
    post(&app, "/completion", r#"{"prompt": "x", "n_predict": -1}"#).await;
    post(&app, "/v1/completions", r#"{"prompt": "x"}"#).await;
    let max: Vec<Option<usize>> = fake.requests().iter().map(|r| r.params.max_tokens).collect();
    assert_eq!(max, vec![Some(3), Some(10), Some(2), Some(5), Some(3), Some(3)]);

    // Without --n-predict: -1 runs until the context is full, /v1/completions defaults to 16.
    let fake = Arc::new(Fake::reply("abcdef"));
    let plain = app_with(fake.clone(), config());
    post(&plain, "/completion", r#"{"prompt": "x", "n_predict": -1}"#).await;
    post(&plain, "/completion", r#"{"prompt": "x"}"#).await;
    post(&plain, "/v1/completions", r#"{"prompt": "x"}"#).await;
    let max: Vec<Option<usize>> = fake.requests().iter().map(|r| r.params.max_tokens).collect();
    assert_eq!(max[0], Some(fake.n_ctx));
    assert_eq!(max[1..], [None, Some(16)]);
}

#[tokio::test]
async fn cache_prompt_false_and_refused_fields() {
    let fake = Arc::new(Fake::reply("a"));
    let app = app(fake.clone());
    post(&app, "/completion", r#"{"prompt": "x", "cache_prompt": false}"#).await;
    assert!(fake.requests()[0].fresh_prompt);
    post(&app, "/completion", r#"{"prompt": "x", "id_slot": 1}"#).await;
    assert_eq!(fake.requests()[1].slot, Some(1));
    let e = post(&app, "/completion", r#"{"prompt": "x", "n": 2}"#)
        .await
        .assert_error(400, "invalid_request_error");
    assert_eq!(e["error"]["param"], "n");
}

/// `/infill`: llama-server's fill-in-the-middle prompt, answered like `/completion`; a model
/// without FIM tokens gets 501, a malformed `input_extra` 400.
#[tokio::test]
async fn infill_builds_the_fim_prompt() {
    let fim = crate::api::infill::FimTokens { pre: 258, suf: 259, mid: 257, rep: None, sep: Some(256) };
    let body = r#"{"input_prefix": "ab", "input_suffix": "c", "prompt": "d", "n_predict": 2,
        "input_extra": [{"filename": "f", "text": "x"}]}"#;
    let no_fim = Arc::new(Fake::reply("zz"));
    post(&app(no_fim), "/infill", body).await.assert_error(501, "not_supported_error");

    // A context beyond llama-server's 2048-token batch leaves room for the extra context.
    let fake = Arc::new(Fake { fim: Some(fim), n_ctx: 4096, ..Fake::reply("zz") });
    let app = app(fake.clone());
    let v = post(&app, "/infill", body).await.json();
    assert_eq!(v["content"], "zz");
    let b = |s: &str| s.bytes().map(u32::from).collect::<Vec<_>>();
    // [SEP]f\n x [SEP]filename\n, then the BOS the fake adds, [PRE]ab d [SUF]c [MID].
    let mut want = vec![256];
    want.extend(b("f\nx"));
    want.push(256);
    want.extend(b("filename\n"));
    want.push(256);
    want.extend([258, u32::from(b'a'), u32::from(b'b'), u32::from(b'd'), 259, u32::from(b'c'), 257]);
    assert_eq!(fake.requests()[0].prompt, want);
    for extra in [
        json!({}),
        json!({"filename": "ok"}),
        json!({"filename": 123}),
        json!({"filename": 123, "text": "abc"}),
        json!({"filename": 123, "text": 456}),
    ] {
        let body = json!({"input_extra": [extra], "input_prefix": "a", "input_suffix": "b"}).to_string();
        post(&app, "/infill", &body).await.assert_error(400, "invalid_request_error");
    }
    for bad in [
        r#"{"input_suffix": "b"}"#,
        r#"{"input_prefix": "a"}"#,
        r#"{"input_prefix": "a", "input_suffix": "b", "prompt": 3}"#,
    ] {
        post(&app, "/infill", bad).await.assert_error(400, "invalid_request_error");
    }
}

/// `logit_bias` keys may be texts (every token of the text gets the bias), in both the
/// object and the pair-list form; `false` bans.
#[tokio::test]
async fn logit_bias_keys_may_be_texts() {
    let fake = Arc::new(Fake::reply("x"));
    let app = app(fake.clone());
    let body = json!({"prompt": "a", "logit_bias": [["ab", -5], [7, false]]}).to_string();
    assert_eq!(post(&app, "/completion", &body).await.status.as_u16(), 200);
    let body = json!({"prompt": "a", "logit_bias": {"c": -1, "9": 2}}).to_string();
    assert_eq!(post(&app, "/completion", &body).await.status.as_u16(), 200);
    let biases: Vec<Vec<(u32, f32)>> =
        fake.requests.lock().expect("lock").iter().map(|r| r.params.sampler.logit_bias.clone()).collect();
    let mut object = biases[1].clone();
    object.sort_by_key(|b| b.0);
    assert_eq!(biases[0], vec![(97, -5.0), (98, -5.0), (7, f32::NEG_INFINITY)]);
    assert_eq!(object, vec![(9, 2.0), (99, -1.0)]);
    for bad in [r#"[["", 1]]"#, r#"[[1.5, 1]]"#, r#"{"a": "x"}"#, r#"[[999999, 1]]"#, r#"[["a"]]"#] {
        let body = format!(r#"{{"prompt": "a", "logit_bias": {bad}}}"#);
        let e = post(&app, "/completion", &body).await.assert_error(400, "invalid_request_error");
        assert_eq!(e["error"]["param"], "logit_bias", "{bad}");
    }
}

/// `post_sampling_probs` asks the engine for the drawn distribution and answers probabilities
/// (`prob`, `top_probs`) instead of log-probabilities.
#[tokio::test]
async fn post_sampling_probs_answer_probabilities() {
    let fake = Arc::new(Fake::reply("ab"));
    let app = app(fake.clone());
    let body = r#"{"prompt": "x", "n_probs": 2, "post_sampling_probs": true}"#;
    let v = post(&app, "/completion", body).await.json();
    assert!(fake.requests()[0].post_sampling_probs);
    let first = &v["completion_probabilities"][0];
    let p = first["prob"].as_f64().expect("prob");
    assert!(p > 0.0 && p <= 1.0, "{first}");
    assert!(
        first.get("logprob").is_none() && first["top_probs"].as_array().is_some_and(|t| !t.is_empty()),
        "{first}"
    );
    let v = post(&app, "/completion", r#"{"prompt": "x", "n_probs": 2}"#).await.json();
    assert!(v["completion_probabilities"][0]["logprob"].as_f64().is_some_and(|l| l <= 0.0));
    assert!(!fake.requests()[1].post_sampling_probs);
}

/// `ignore_eos` bans the end-of-generation tokens and the settings show it in llama-server's
/// shape (`{"bias": null, "token": id}` for a ban).
#[tokio::test]
async fn ignore_eos_shows_as_banned_eog_tokens() {
    let fake = Arc::new(Fake::reply("ab"));
    let app = app(fake.clone());
    let v = post(&app, "/completion", r#"{"prompt": "x", "ignore_eos": true, "logit_bias": [[5, 1.5]]}"#)
        .await
        .json();
    assert_eq!(
        v["generation_settings"]["logit_bias"],
        json!([{"bias": 1.5, "token": 5}, {"bias": null, "token": super::fake::EOS}])
    );
    let v = post(&app, "/completion", r#"{"prompt": "x"}"#).await.json();
    assert_eq!(v["generation_settings"]["logit_bias"], json!([]));
}
