//! The `Session` API on the real SmolLM2 model: greedy output as llama.cpp's, KV reuse across
//! calls, streaming that can be dropped or cancelled, stop strings, reproducible sampling, and
//! embeddings.
#![allow(clippy::unwrap_used)]

mod common;

use common::Reference;
use ferrolm::model::{Model, Pooling};
use ferrolm::sampling::SamplerParams;
use ferrolm::session::{FinishReason, GenerateParams, Session, SessionOptions, StreamEvent};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn load() -> Option<Model> {
    let path = common::require_model(SMOL)?;
    Some(Model::load(path).unwrap())
}

fn opts(n_ctx: usize) -> SessionOptions {
    SessionOptions { n_ctx, ..SessionOptions::default() }
}

#[test]
fn greedy_generation_matches_llama_cpp() {
    let Some(model) = load() else { return };
    let dir = common::fixtures_dir().join("reference/SmolLM2-135M-Instruct.Q4_1");
    for name in ["capital", "story", "code"] {
        let r: Reference =
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap())
                .unwrap();
        // Compare up to the first near-tie, where 8-bit activations may pick the other token.
        let n = r.steps.iter().position(|s| s.top[0].1 - s.top[1].1 < 0.5).unwrap_or(r.steps.len());
        let mut session = Session::new(&model, opts(1024)).unwrap();
        let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(n) };
        let out = session.generate_tokens(&r.prompt_tokens, &params).unwrap();
        let want: Vec<u32> = r.steps[..n].iter().map(|s| s.token).collect();
        assert_eq!(out.tokens, want, "{name}");
        assert_eq!(out.stats.finish, FinishReason::Length);
        assert_eq!(out.text, model.tokenizer().decode(&want), "{name}");
    }
}

#[test]
fn a_longer_prompt_prefills_only_its_new_tokens() {
    let Some(model) = load() else { return };
    let mut session = Session::new(&model, opts(512)).unwrap();
    let first = "The three primary colors are";
    let out = session.generate(first, &GenerateParams::greedy(12)).unwrap();
    let n_first = session.tokenize_prompt(first).unwrap().len();
    assert_eq!(out.stats.n_cached, 0);
    assert_eq!(out.stats.n_prefilled, n_first);
    // The cache holds the prompt and every generated token but the last (never run).
    assert_eq!(session.tokens().len(), n_first + out.tokens.len() - 1);

    let held = session.tokens().to_vec();
    let second = format!("{first}{} And the secondary colors are", out.text);
    let tokens2 = session.tokenize_prompt(&second).unwrap();
    let shared = held.iter().zip(&tokens2).take_while(|(a, b)| a == b).count();
    assert!(shared >= n_first, "the second prompt should extend the first");
    let out2 = session.generate(&second, &GenerateParams::greedy(4)).unwrap();
    assert_eq!(out2.stats.n_cached, shared);
    assert_eq!(out2.stats.n_prefilled, tokens2.len() - shared);

    // Same answer as a fresh session that prefills everything.
    let mut fresh = Session::new(&model, opts(512)).unwrap();
    let out3 = fresh.generate(&second, &GenerateParams::greedy(4)).unwrap();
    assert_eq!(out3.stats.n_prefilled, tokens2.len());
    assert_eq!(out2.tokens, out3.tokens);
}

#[test]
fn repeating_a_prompt_reuses_all_but_its_last_token() {
    let Some(model) = load() else { return };
    let mut session = Session::new(&model, opts(256)).unwrap();
    let a = session.generate("Once upon a time", &GenerateParams::greedy(8)).unwrap();
    let b = session.generate("Once upon a time", &GenerateParams::greedy(8)).unwrap();
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(b.stats.n_prefilled, 1);
    assert_eq!(b.stats.n_cached, b.stats.n_prompt - 1);
}

#[test]
fn dropping_a_stream_frees_the_session() {
    let Some(model) = load() else { return };
    let prompt = "Once upon a time, in a small village by the sea,";
    let mut session = Session::new(&model, opts(256)).unwrap();
    {
        let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(100) };
        let mut stream = session.stream(prompt, &params).unwrap();
        for _ in 0..5 {
            assert!(matches!(stream.next(), Some(Ok(StreamEvent::Token { .. }))));
        }
    } // dropped mid-generation
    let n_prompt = session.tokenize_prompt(prompt).unwrap().len();
    assert_eq!(session.tokens().len(), n_prompt + 4, "four sampled tokens were run through the model");
    let again = session.generate(prompt, &GenerateParams::greedy(10)).unwrap();
    assert_eq!(again.stats.n_prefilled, 1, "the prompt stays cached");
    let mut fresh = Session::new(&model, opts(256)).unwrap();
    let want = fresh.generate(prompt, &GenerateParams::greedy(10)).unwrap();
    assert_eq!(again.tokens, want.tokens);
    assert_eq!(again.text, want.text);
}

#[test]
fn cancel_from_another_thread_stops_the_stream() {
    let Some(model) = load() else { return };
    let mut session = Session::new(&model, opts(256)).unwrap();
    let handle = session.cancel_handle();
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(200) };
    let mut stream = session.stream("Count: one, two, three,", &params).unwrap();
    assert!(matches!(stream.next(), Some(Ok(StreamEvent::Token { .. }))));
    std::thread::spawn(move || handle.cancel()).join().unwrap();
    match stream.next() {
        Some(Ok(StreamEvent::Finished { reason, stats, .. })) => {
            assert_eq!(reason, FinishReason::Cancelled);
            assert_eq!(stats.n_generated, 1);
        }
        other => panic!("expected a cancelled finish, got {other:?}"),
    }
    assert!(stream.next().is_none());
    drop(stream);
    // The next generation starts with the flag cleared.
    let out = session.generate("Hello", &GenerateParams::greedy(3)).unwrap();
    assert_eq!(out.stats.finish, FinishReason::Length);
}

#[test]
fn stop_strings_end_generation_and_are_not_returned() {
    let Some(model) = load() else { return };
    let mut session = Session::new(&model, opts(256)).unwrap();
    let prompt = "Count: one, two, three,";
    let free = session.generate(prompt, &GenerateParams::greedy(24)).unwrap();
    // Stop at the second comma of the continuation, wherever the tokens split it.
    let second_comma = free.text.match_indices(',').nth(1).map(|(i, _)| i).expect("two commas");
    let stop = GenerateParams { stop: vec![",".into()], ..GenerateParams::greedy(24) };
    let first_comma = free.text.find(',').unwrap();
    let out = session.generate(prompt, &stop).unwrap();
    assert_eq!(out.stats.finish, FinishReason::StopString);
    assert_eq!(out.text, free.text[..first_comma]);
    let two = GenerateParams { stop: vec![free.text[first_comma..=second_comma].to_string()], ..stop };
    let out = session.generate(prompt, &two).unwrap();
    assert_eq!(out.text, free.text[..first_comma]);

    // Streamed pieces never show any part of the stop string.
    let mut shown = String::new();
    for ev in session.stream(prompt, &two).unwrap() {
        match ev.unwrap() {
            StreamEvent::Token { text, .. } => shown.push_str(&text),
            StreamEvent::Finished { text, reason, .. } => {
                shown.push_str(&text);
                assert_eq!(reason, FinishReason::StopString);
            }
        }
    }
    assert_eq!(shown, free.text[..first_comma]);
}

#[test]
fn seeded_sampling_is_the_same_across_runs_and_thread_counts() {
    let Some(model) = load() else { return };
    let params = GenerateParams {
        max_tokens: Some(40),
        sampler: SamplerParams { temperature: 1.0, seed: Some(1234), ..SamplerParams::default() },
        ignore_eos: true,
        ..GenerateParams::default()
    };
    let run = |threads: usize| {
        ferrolm::threads::set_num_threads(threads).unwrap();
        let mut session = Session::new(&model, opts(256)).unwrap();
        session.generate("My favourite animal is", &params).unwrap().tokens
    };
    let a = run(1);
    assert_eq!(a.len(), 40);
    assert_eq!(a, run(2));
    assert_eq!(a, run(3));
    assert_eq!(a, run(2));
    let other_seed = GenerateParams {
        sampler: SamplerParams { seed: Some(99), ..params.sampler.clone() },
        ..params.clone()
    };
    let mut session = Session::new(&model, opts(256)).unwrap();
    let b = session.generate("My favourite animal is", &other_seed).unwrap().tokens;
    assert_ne!(a, b, "another seed should give another text");
}

#[test]
fn limits_are_reported() {
    let Some(model) = load() else { return };
    let mut session = Session::new(&model, opts(16)).unwrap();
    let zero = session.generate("Hi", &GenerateParams::greedy(0)).unwrap();
    assert_eq!((zero.stats.finish, zero.tokens.len()), (FinishReason::Length, 0));
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(100) };
    let full = session.generate("Hi there", &params).unwrap();
    assert_eq!(full.stats.finish, FinishReason::ContextFull);
    assert_eq!(session.tokens().len(), 16);
    let long = "word ".repeat(40);
    assert!(session.generate(&long, &params).is_err(), "a prompt longer than the context is an error");
    let empty = session.tokenize_prompt("").unwrap();
    assert_eq!(session.generate("", &params).is_err(), empty.is_empty());
}

#[test]
fn embeddings_are_pooled_normalised_and_independent_of_batching() {
    let Some(model) = load() else { return };
    let texts =
        ["The cat sat on the mat.", "A kitten rested on the rug.", "Stock markets fell sharply today."];
    let d = model.config().n_embd;
    for pooling in [Pooling::Mean, Pooling::Cls, Pooling::Last] {
        let all = model.embed(&texts, pooling, true).unwrap();
        assert_eq!(all.len(), 3);
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(all[i].len(), d);
            let norm: f32 = all[i].iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{pooling:?} norm {norm}");
            let alone = model.embed(&[t], pooling, true).unwrap();
            let diff = alone[0].iter().zip(&all[i]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(diff < 1e-4, "{pooling:?} text {i}: batched differs from alone by {diff}");
        }
    }
    // The mean of raw hidden states is their mean: check against CLS/last on a one-token text.
    let one = model.embed(&["Hello"], Pooling::Mean, false).unwrap();
    let n_tok = model.tokenizer().encode("Hello", true, false).unwrap().len();
    if n_tok == 1 {
        let last = model.embed(&["Hello"], Pooling::Last, false).unwrap();
        assert_eq!(one, last);
    }
    let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let m = model.embed(&texts, Pooling::Mean, true).unwrap();
    assert!(cos(&m[0], &m[1]) > cos(&m[0], &m[2]), "similar sentences should be closer");
    let empty = model.tokenizer().encode("", true, false).unwrap();
    assert_eq!(model.embed(&[""], Pooling::Mean, true).is_err(), empty.is_empty());
}

#[test]
fn a_second_chat_turn_prefills_only_its_new_tokens() {
    use ferrolm::chat::Message;
    use ferrolm::session::ChatSession;
    let Some(model) = load() else { return };
    let mut chat = ChatSession::new(&model, opts(1024)).unwrap();
    chat.push(Message::system("You are a helpful assistant."));
    let params = GenerateParams::greedy(40);
    let first = chat.send("What is the capital of France?", &params).unwrap();
    assert_eq!(first.stats.n_cached, 0);
    assert!(!first.text.is_empty());
    let held = chat.session().tokens().len();

    let second = chat.send("And of Italy?", &params).unwrap();
    // The new tokens are what the template adds after the cached ones: the end of the first
    // reply's turn and the new user turn with the generation prompt.
    let prompt2 = chat.session().tokenize_prompt(&{
        let mut c = ChatSession::new(&model, opts(1024)).unwrap();
        for m in &chat.messages()[..4] {
            c.push(m.clone());
        }
        c.prompt().unwrap()
    });
    assert_eq!(second.stats.n_cached, held, "every cached token is reused");
    assert_eq!(second.stats.n_prefilled, second.stats.n_prompt - held);
    let new_turn = model
        .tokenizer()
        .encode("<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n", false, true)
        .unwrap();
    assert!(
        second.stats.n_prefilled <= new_turn.len() + 1,
        "{} new tokens prefilled",
        second.stats.n_prefilled
    );
    assert_eq!(chat.messages().len(), 5);
    assert_eq!(chat.messages()[2].role, "assistant");
    assert!(prompt2.unwrap().len() >= second.stats.n_prompt - 1);

    // The reply equals what a fresh session gives for the same conversation.
    let mut fresh = ChatSession::new(&model, opts(1024)).unwrap();
    for m in &chat.messages()[..4] {
        fresh.push(m.clone());
    }
    let mut stream = fresh.reply_stream(&params).unwrap();
    let mut text = String::new();
    for ev in &mut stream {
        match ev.unwrap() {
            StreamEvent::Token { text: t, .. } => text.push_str(&t),
            StreamEvent::Finished { text: t, stats, .. } => {
                text.push_str(&t);
                assert_eq!(stats.n_cached, 0);
            }
        }
    }
    drop(stream);
    assert_eq!(text, second.text);

    chat.reset(true);
    assert_eq!(chat.messages().len(), 1);
    assert!(chat.session().tokens().is_empty());
}

#[test]
fn a_logits_processor_changes_what_is_sampled_and_can_end_the_step() {
    use ferrolm::decoder::{Decoder, Step};
    let Some(model) = load() else { return };
    let tok = model.tokenizer();
    let n_vocab = model.config().n_vocab;
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(4) };
    let mut logits = vec![0.0f32; n_vocab];
    logits[7] = 5.0;
    // Without a processor: the argmax; with one: what it leaves, while the log-probabilities
    // stay those of the raw logits.
    let mut plain = Decoder::new(&model, &params).unwrap();
    let Step::Continue(s) = plain.step(tok, &logits).unwrap() else { panic!("no token") };
    assert_eq!(s.id, 7);
    let mut hooked = Decoder::new(&model, &params).unwrap().with_logprobs(Some(1));
    let mut calls = 0;
    let mut only_42 = |l: &mut [f32]| -> ferrolm::Result<()> {
        calls += 1;
        l.iter_mut().enumerate().for_each(|(i, x)| *x = if i == 42 { 0.0 } else { f32::NEG_INFINITY });
        Ok(())
    };
    let Step::Continue(s) = hooked.step_with(tok, &logits, &mut only_42).unwrap() else { panic!("no token") };
    assert_eq!((s.id, calls), (42, 1));
    assert_eq!(s.logprob.unwrap().top[0].0, 7);
    assert_eq!(logits[7], 5.0, "the caller's logits are not changed");
    let mut failing = |_: &mut [f32]| -> ferrolm::Result<()> {
        Err(ferrolm::Error::InvalidInput("processor failed".into()))
    };
    assert!(hooked.step_with(tok, &logits, &mut failing).is_err());

    // On a session's stream: the processor sees the context, and a caller can end the stream.
    let mut session = Session::new(&model, opts(256)).unwrap();
    let prompt = session.tokenize_prompt("The capital of France is").unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let mut stream = session.stream_tokens(&prompt, &GenerateParams::greedy(10)).unwrap();
    stream.set_logprobs(Some(2));
    stream.set_logits_processor(Some(Box::new(move |ctx: &[u32], l: &mut [f32]| -> ferrolm::Result<()> {
        seen2.lock().unwrap().push(ctx.len());
        l.iter_mut().enumerate().for_each(|(i, x)| *x = if i == 42 { 0.0 } else { f32::NEG_INFINITY });
        Ok(())
    })));
    let mut ids = Vec::new();
    while let Some(ev) = stream.next() {
        match ev.unwrap() {
            StreamEvent::Token { id, .. } => {
                assert_eq!(stream.last_logprob().unwrap().top.len(), 2);
                assert_eq!(stream.logits().len(), n_vocab);
                ids.push(id);
                if ids.len() == 3 {
                    stream.finish_after_token(FinishReason::StopString);
                }
            }
            StreamEvent::Finished { reason, .. } => assert_eq!(reason, FinishReason::StopString),
        }
    }
    drop(stream);
    assert_eq!(ids, vec![42, 42, 42]);
    let n = prompt.len();
    assert_eq!(*seen.lock().unwrap(), vec![n, n + 1, n + 2]);
    assert_eq!(session.tokens().len(), n + 2, "the last token is not run");
}

/// Saving a session's state and loading it into a fresh session continues the conversation
/// bit for bit: the same greedy tokens and, after them, the same cache and logits bytes. With
/// both f16 and quantized (q8_0) caches. A file of another KV type and a truncated one are
/// refused, leaving the session as it was.
#[test]
fn a_restored_state_continues_bit_identically() {
    let Some(model) = load() else { return };
    let dir = std::env::temp_dir().join(format!("ferrolm-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(12) };
    for ty in [ferrolm::kv::KvType::F16, ferrolm::kv::KvType::Q8_0] {
        let o = SessionOptions { type_k: ty, type_v: ty, ..opts(256) };
        let mut a = Session::new(&model, o.clone()).unwrap();
        let prompt = a.tokenize_prompt("Once upon a time, in a quiet village by the sea,").unwrap();
        a.prefill(&prompt).unwrap();
        let file = dir.join(format!("{ty}.bin"));
        let saved = a.save_state(&file).unwrap();
        assert_eq!(saved.n_tokens, prompt.len());
        let want = a.generate_tokens(&prompt, &params).unwrap();

        let mut b = Session::new(&model, o.clone()).unwrap();
        let loaded = b.load_state(&file).unwrap();
        assert_eq!((loaded.n_tokens, loaded.n_bytes), (saved.n_tokens, saved.n_bytes));
        assert_eq!(b.tokens(), &prompt[..]);
        let got = b.generate_tokens(&prompt, &params).unwrap();
        assert_eq!(got.stats.n_cached, prompt.len(), "{ty}: the restored prompt was recomputed");
        assert_eq!(got.tokens, want.tokens, "{ty}");
        assert!(a.state_bytes().unwrap() == b.state_bytes().unwrap(), "{ty}: states differ after generating");

        let other =
            if ty == ferrolm::kv::KvType::F16 { ferrolm::kv::KvType::F32 } else { ferrolm::kv::KvType::F16 };
        let mut c = Session::new(&model, SessionOptions { type_k: other, ..o.clone() }).unwrap();
        let err = c.load_state(&file).unwrap_err().to_string();
        assert!(err.contains("another model or cache layout"), "{err}");
        let bytes = std::fs::read(&file).unwrap();
        assert!(b.load_state_bytes(&bytes[..bytes.len() / 2]).is_err());
        assert_eq!(
            b.state_bytes().unwrap(),
            a.state_bytes().unwrap(),
            "{ty}: a failed load changed the session"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reasoning budget on a real model: the prompt opens the reasoning, the model writes its
/// `tokens` greedy tokens, then the message and the closing tag are written for it (their exact
/// tokens, not sampled), and the generation goes on after them as the model continues that text.
#[test]
fn a_reasoning_budget_writes_the_closing_tag_after_its_tokens() {
    use ferrolm::decoder::ReasoningBudget;
    let Some(model) = load() else { return };
    let prompt = "<|im_start|>user\nWhat is 17 times 3?<|im_end|>\n<|im_start|>assistant\n<think>\n";
    let tokens = Session::new(&model, opts(512)).unwrap().tokenize_prompt(prompt).unwrap();
    let greedy = |params: &GenerateParams| {
        Session::new(&model, opts(512)).unwrap().generate_tokens(&tokens, params).unwrap().tokens
    };
    let unlimited = greedy(&GenerateParams { ignore_eos: true, ..GenerateParams::greedy(20) });
    let budget = ReasoningBudget {
        open: "<think>".into(),
        close: "</think>".into(),
        natural_close: "</think>".into(),
        opened: true,
        tokens: 5,
        message: " Enough thinking.".into(),
    };
    let params = GenerateParams {
        ignore_eos: true,
        reasoning_budget: Some(budget.clone()),
        ..GenerateParams::greedy(20)
    };
    let limited = greedy(&params);
    let forced = model.tokenizer().encode(" Enough thinking.</think>", false, true).unwrap();
    assert_eq!(limited[..5], unlimited[..5], "the budget's tokens are the model's own");
    assert_eq!(limited[5..5 + forced.len()], forced[..], "then the message and the tag");
    assert_eq!(limited.len(), 20, "the forced tokens count toward max_tokens and the answer follows");
    // After the tag the model goes on from the text as written: its greedy continuation.
    let mut context = tokens.clone();
    context.extend_from_slice(&limited[..5 + forced.len()]);
    let n_rest = 20 - (5 + forced.len());
    let rest = Session::new(&model, opts(512))
        .unwrap()
        .generate_tokens(&context, &GenerateParams { ignore_eos: true, ..GenerateParams::greedy(n_rest) })
        .unwrap()
        .tokens;
    assert_eq!(limited[5 + forced.len()..], rest[..], "the answer after the tag");

    // A zero budget closes the reasoning before any token of it.
    let zero = ReasoningBudget { tokens: 0, message: String::new(), ..budget };
    let closed = greedy(&GenerateParams { reasoning_budget: Some(zero), ..GenerateParams::greedy(4) });
    let tag = model.tokenizer().encode("</think>", false, true).unwrap();
    assert_eq!(closed[..tag.len()], tag[..]);
}
