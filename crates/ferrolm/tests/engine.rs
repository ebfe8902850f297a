//! The engine with a real model, driven from plain threads (no async runtime): batched
//! generation equals generation alone, concurrent callers, the prefix cache is shared across
//! slots, dropped handles free their slots within a tick, prompt log-probabilities, queue limits.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolm::decoder::FinishReason;
use ferrolm::engine::{
    BatchStrategy, Engine, EngineConfig, EngineError, Event, GenRequest, RequestHandle, SlotAction,
    SlotOutcome, SlotState, SubmitError, Usage,
};
use ferrolm::model::Model;
use ferrolm::session::{GenerateParams, Session, SessionOptions};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn load() -> Option<Arc<Model>> {
    let path = common::require_model(SMOL)?;
    Some(Arc::new(Model::load(path).expect("model loads")))
}

fn engine(model: &Arc<Model>, n_slots: usize, strategy: BatchStrategy) -> Engine {
    let cfg = EngineConfig { n_slots, n_ctx: 1024, chunk_size: 64, strategy, ..EngineConfig::default() };
    Engine::start(model.clone(), cfg).expect("engine starts")
}

fn request(model: &Model, prompt: &str, max_tokens: usize) -> GenRequest {
    let prompt = model.tokenizer().encode(prompt, true, true).expect("tokenizes");
    GenRequest { prompt, params: GenerateParams::greedy(max_tokens), ..GenRequest::default() }
}

/// Collects a request's tokens, text, finish and usage.
fn collect(rx: RequestHandle) -> (Vec<u32>, String, FinishReason, Usage) {
    let (mut ids, mut text) = (Vec::new(), String::new());
    for ev in rx {
        match ev {
            Event::Token { id, text: t, .. } => {
                ids.push(id);
                text.push_str(&t);
            }
            Event::Done { text: t, finish, usage, .. } => {
                text.push_str(&t);
                return (ids, text, finish, usage);
            }
            Event::PromptLogprobs(_) | Event::Progress { .. } => {}
            Event::Error(e) => panic!("engine error: {e}"),
            Event::Refused(e) => panic!("refused: {e}"),
        }
    }
    panic!("the stream ended without Done");
}

const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "My favourite recipe for pancakes starts with",
    "In 1969, the first humans",
    "A haiku about the sea:",
];

#[test]
fn batched_greedy_generation_equals_each_request_alone() {
    let Some(model) = load() else { return };
    // Reference: each prompt alone through a plain session.
    let mut expected = Vec::new();
    for p in PROMPTS {
        let mut s = Session::new(&model, SessionOptions::default()).expect("session");
        expected.push(s.generate(p, &GenerateParams::greedy(24)).expect("generates").tokens);
    }
    for strategy in [BatchStrategy::DecodeFirst, BatchStrategy::PrefillFirst, BatchStrategy::Balanced] {
        let eng = engine(&model, 4, strategy);
        // 8 requests on 4 slots: prompts and decode steps share forward passes, and later
        // requests queue for a slot.
        let rxs: Vec<_> =
            PROMPTS.iter().map(|p| eng.submit(request(&model, p, 24)).expect("accepted")).collect();
        for (i, rx) in rxs.into_iter().enumerate() {
            let (ids, _, finish, usage) = collect(rx);
            assert_eq!(ids, expected[i], "{strategy:?}: prompt {i} differs from its greedy run alone");
            assert_eq!(usage.completion_tokens, ids.len());
            assert!(matches!(finish, FinishReason::Length | FinishReason::StopString));
        }
        assert!(eng.wait_idle(Duration::from_secs(5)));
        let m = eng.metrics();
        assert_eq!(m.requests_finished, PROMPTS.len() as u64);
        assert!(m.forward_passes_total > 0 && m.generated_tokens_total > 0);
    }
}

/// A request's end reaches its caller after the counters that include it are published: a
/// client that reads `/metrics` right after its answer sees its tokens (llama.cpp's server
/// suite checks `tokens_predicted_total` this way).
#[test]
fn the_counters_include_a_request_once_its_end_arrives() {
    let Some(model) = load() else { return };
    let eng = engine(&model, 2, BatchStrategy::DecodeFirst);
    let mut generated = 0;
    for (i, n) in [1usize, 4, 16].into_iter().enumerate() {
        let (ids, _, _, usage) = collect(eng.submit(request(&model, "I believe", n)).expect("accepted"));
        assert_eq!(usage.completion_tokens, ids.len());
        generated += ids.len() as u64;
        let m = eng.metrics();
        assert_eq!(m.generated_tokens_total, generated, "after request {i}");
        assert_eq!(m.requests_finished, i as u64 + 1, "after request {i}");
    }
}

#[test]
fn a_shared_prefix_is_reused_from_another_slot() {
    let Some(model) = load() else { return };
    let eng = engine(&model, 2, BatchStrategy::DecodeFirst);
    let prefix = "You are a helpful assistant. ".repeat(40);
    let a = request(&model, &format!("{prefix}Question: what is two plus two?"), 8);
    let b = request(&model, &format!("{prefix}Question: name a colour."), 8);
    let shared = a.prompt.iter().zip(&b.prompt).take_while(|(x, y)| x == y).count();
    assert!(shared > 200, "prompts share {shared} tokens");
    // Occupy slot 0 with a long request so that B lands on the other slot.
    let (_, _, _, ua) = collect(eng.submit(a).expect("accepted"));
    assert_eq!(ua.cached_tokens, 0);
    let blocker = eng.submit(request(&model, "Count from one to a hundred:", 200)).expect("accepted");
    let expected_b = {
        let mut s = Session::new(&model, SessionOptions::default()).expect("session");
        s.generate_tokens(&b.prompt, &b.params).expect("generates").tokens
    };
    let (ids_b, _, _, ub) = collect(eng.submit(b).expect("accepted"));
    assert_eq!(ub.cached_tokens, shared, "B reuses exactly the shared prefix");
    assert_eq!(ids_b, expected_b, "reused KV gives the same tokens as a cold run");
    drop(blocker);
    assert!(eng.wait_idle(Duration::from_secs(5)));
    let m = eng.metrics();
    assert!(m.prefix_cache_hits >= 1 && m.prefix_cache_entries >= 1 && m.prefix_cache_bytes > 0);
    // `fresh_prompt` (llama-server's cache_prompt: false) runs the whole prompt again.
    let fresh =
        GenRequest { fresh_prompt: true, ..request(&model, &format!("{prefix}Question: name a colour."), 8) };
    let (ids_fresh, _, _, uf) = collect(eng.submit(fresh).expect("accepted"));
    assert_eq!(uf.cached_tokens, 0);
    assert_eq!(ids_fresh, expected_b);
}

#[test]
fn dropping_the_receiver_frees_the_slot_at_once() {
    let Some(model) = load() else { return };
    let eng = engine(&model, 4, BatchStrategy::DecodeFirst);
    let mut rxs = Vec::new();
    for p in PROMPTS {
        let mut req = request(&model, p, 100_000);
        req.params.ignore_eos = true;
        rxs.push(eng.submit(req).expect("accepted"));
    }
    // Wait for tokens to flow, then drop every client.
    let first = rxs[0].recv();
    assert!(matches!(first, Some(Event::Token { .. })));
    // `/slots` is published after each tick: wait for the one that sent the token.
    let t0 = Instant::now();
    while eng.slots().iter().all(|s| s.state == SlotState::Idle) {
        assert!(t0.elapsed() < Duration::from_secs(5), "no slot ever showed busy");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(rxs);
    let t0 = Instant::now();
    assert!(eng.wait_idle(Duration::from_secs(1)), "slots still busy after 1 s");
    std::thread::sleep(Duration::from_millis(300));
    assert!(eng.slots().iter().all(|s| s.state == SlotState::Idle));
    eprintln!("all slots free {} ms after the clients left", t0.elapsed().as_millis());
    // Still serving.
    let (ids, ..) = collect(eng.submit(request(&model, PROMPTS[0], 4)).expect("accepted"));
    assert_eq!(ids.len(), 4);
}

#[test]
fn prompt_logprobs_score_every_prompt_token() {
    let Some(model) = load() else { return };
    let eng = engine(&model, 2, BatchStrategy::DecodeFirst);
    let mut req = request(&model, "The capital of France is Paris. The capital of Italy is Rome.", 0);
    req.logprobs = Some(3);
    req.prompt_logprobs = true;
    let n = req.prompt.len();
    let prompt = req.prompt.clone();
    let mut rx = eng.submit(req).expect("accepted");
    let Some(Event::PromptLogprobs(lps)) = rx.recv() else { panic!("prompt logprobs first") };
    assert_eq!(lps.len(), n);
    assert!(lps[0].is_none());
    for (i, lp) in lps.iter().enumerate().skip(1) {
        let lp = lp.as_ref().expect("scored");
        assert_eq!(lp.id, prompt[i]);
        assert!(lp.logprob <= 0.0 && lp.top.len() == 3);
        assert!(lp.top[0].1 >= lp.logprob - 1e-6);
    }
    // "Rome" after "The capital of Italy is" is likely: its log-probability beats a uniform guess.
    let last = lps[n - 1].as_ref().expect("scored");
    assert!(last.logprob > -(model.config().n_vocab as f32).ln() / 2.0, "{last:?}");
    match rx.recv() {
        Some(Event::Done { finish: FinishReason::Length, usage, .. }) => {
            assert_eq!(usage.completion_tokens, 0)
        }
        other => panic!("expected Done, got {other:?}"),
    }
}

#[test]
fn bad_requests_and_a_full_queue_are_refused() {
    let Some(model) = load() else { return };
    let cfg = EngineConfig { n_slots: 1, n_ctx: 64, max_queue: 2, ..EngineConfig::default() };
    let eng = Engine::start(model.clone(), cfg).expect("engine starts");
    let long = request(&model, &"word ".repeat(200), 4);
    assert!(matches!(eng.submit(long), Err(SubmitError::ContextLength { n_ctx: 64, .. })));
    assert!(matches!(eng.submit(GenRequest::default()), Err(SubmitError::Invalid(_))));
    let mut bad = request(&model, "hi", 4);
    bad.prompt.push(u32::MAX);
    assert!(matches!(eng.submit(bad), Err(SubmitError::Invalid(_))));
    // One slot, queue of 2: the first request runs (its first token came), two wait, the next
    // one is refused.
    let story = || {
        let mut r = request(&model, "Tell me a long story.", 10_000);
        r.params.ignore_eos = true;
        r
    };
    let mut running = eng.submit(story()).expect("the first request is taken");
    assert!(matches!(running.recv(), Some(Event::Token { .. })), "the first request runs");
    let mut queued = Vec::new();
    let refused = loop {
        match eng.submit(story()) {
            Ok(rx) => queued.push(rx),
            Err(e) => break e,
        }
        assert!(queued.len() <= 2, "a queue of 2 took a third request");
    };
    assert!(matches!(refused, SubmitError::QueueFull { retry_after_s, .. } if retry_after_s >= 1));
    assert_eq!(queued.len(), 2);
    assert_eq!(eng.metrics().requests_rejected, 1, "the refusal is counted");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(eng.metrics().requests_rejected, 1, "and stays counted after the next ticks");

    // Shutdown: new requests are refused, the queued ones end at once with Refused, the running
    // one goes on until cancelled.
    eng.shutdown();
    assert_eq!(eng.submit(request(&model, "hi", 1)).err(), Some(SubmitError::ShuttingDown));
    let t0 = Instant::now();
    for mut rx in queued {
        assert_eq!(rx.recv(), Some(Event::Refused(SubmitError::ShuttingDown)));
        assert_eq!(rx.recv(), None, "nothing follows Refused");
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "refused after {:?}", t0.elapsed());
    assert!(matches!(running.recv(), Some(Event::Token { .. })), "the running request goes on");
    eng.cancel_all();
    let (_, _, finish, _) = collect(running);
    assert_eq!(finish, FinishReason::Cancelled);
    assert!(eng.wait_idle(Duration::from_secs(2)));
}

/// A chat-templated user message, as the API sends it.
fn chat_prompt(model: &Model, user: &str) -> Vec<u32> {
    use ferrolm::chat::{Message, RenderOptions};
    let template = model.chat_template().expect("template reads").expect("SmolLM2 has a template");
    let opts = RenderOptions { add_generation_prompt: true, ..RenderOptions::default() };
    let text = template.render(&[Message::user(user)], &opts).expect("renders");
    model.tokenizer().encode(&text, true, true).expect("tokenizes")
}

#[test]
fn greedy_output_does_not_depend_on_the_prefix_cache_or_the_chunking() {
    // A request run cold, then again with all but its last prompt token cached, then with a
    // different prompt sharing only part of the cache, must give the same tokens each time:
    // the rest of a cached chunk is attended as the whole chunk would be (llama.cpp and this
    // engine before the fix switched to the per-query attention path for the short remainder,
    // which flipped near-ties, e.g. on this prompt).
    let Some(model) = load() else { return };
    let code = "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n        \
                if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n            \
                out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]\n";
    let users = [
        format!("Explain what this Python function does and give its time complexity.\n\n{code}"),
        format!("Explain what this Python function does.\n\n{code}"),
        "Write a short story of about one hundred words about a robot who learns to paint.".to_string(),
    ];
    for chunk_size in [512, 48] {
        let cfg = EngineConfig { n_slots: 1, n_ctx: 1024, chunk_size, ..EngineConfig::default() };
        let eng = Engine::start(model.clone(), cfg).expect("engine starts");
        for user in &users {
            let prompt = chat_prompt(&model, user);
            let req = || GenRequest {
                prompt: prompt.clone(),
                params: GenerateParams::greedy(96),
                ..Default::default()
            };
            let (cold, _, _, u0) = collect(eng.submit(req()).expect("accepted"));
            let (warm, _, _, u1) = collect(eng.submit(req()).expect("accepted"));
            assert_eq!(u1.cached_tokens, prompt.len() - 1, "the second run reuses the prompt");
            assert!(u0.cached_tokens < prompt.len() - 1);
            assert_eq!(warm, cold, "chunk {chunk_size}: cached run differs for {user:?}");
        }
    }
}

#[test]
fn eight_threads_get_what_each_request_gets_alone() {
    let Some(model) = load() else { return };
    let alone: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| {
            let mut s = Session::new(&model, SessionOptions::default()).expect("session");
            s.generate(p, &GenerateParams::greedy(32)).expect("generates").tokens
        })
        .collect();
    let eng = engine(&model, 8, BatchStrategy::DecodeFirst);
    // Eight callers on eight threads submit at the same time and read their own handles.
    let barrier = std::sync::Barrier::new(PROMPTS.len());
    let got: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let threads: Vec<_> = PROMPTS
            .iter()
            .map(|p| {
                let (eng, model, barrier) = (&eng, &model, &barrier);
                scope.spawn(move || {
                    let req = request(model, p, 32);
                    barrier.wait();
                    collect(eng.submit(req).expect("accepted")).0
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("caller thread")).collect()
    });
    for (i, (g, a)) in got.iter().zip(&alone).enumerate() {
        assert_eq!(g, a, "prompt {i}: concurrent output differs from the request alone");
    }
    let m = eng.metrics();
    // The requests really ran together: fewer passes than generated tokens.
    assert!(m.forward_passes_total < m.generated_tokens_total, "{m:?}");
}

#[test]
fn a_dropped_handle_frees_its_slot_within_one_tick() {
    let Some(model) = load() else { return };
    let eng = engine(&model, 2, BatchStrategy::DecodeFirst);
    let mut req = request(&model, PROMPTS[1], 100_000);
    req.params.ignore_eos = true;
    let mut rx = eng.submit(req).expect("accepted");
    for _ in 0..3 {
        assert!(matches!(rx.recv(), Some(Event::Token { .. })));
    }
    let t0 = Instant::now();
    while eng.slots().iter().all(|s| s.state == SlotState::Idle) {
        assert!(t0.elapsed() < Duration::from_secs(5), "no slot ever showed busy");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The counters are published after each tick: at most the pass running now completes
    // after the drop, and the next tick frees the slot before running another.
    let passes_at_drop = eng.metrics().forward_passes_total;
    drop(rx);
    assert!(eng.wait_idle(Duration::from_secs(2)), "the slot is still busy");
    let passes = eng.metrics().forward_passes_total;
    assert!(passes <= passes_at_drop + 1, "{} passes ran after the drop", passes - passes_at_drop);
    assert_eq!(eng.metrics().requests_cancelled, 1);
}

/// Polls a future on this thread until it is ready (a minimal executor: no runtime needed).
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

#[test]
fn the_handle_is_also_an_async_stream() {
    let Some(model) = load() else { return };
    let eng = engine(&model, 2, BatchStrategy::DecodeFirst);
    let blocking = collect(eng.submit(request(&model, PROMPTS[2], 16)).expect("accepted")).0;
    let mut rx = eng.submit(request(&model, PROMPTS[2], 16)).expect("accepted");
    let streamed = block_on(async move {
        let mut ids = Vec::new();
        while let Some(ev) = rx.next_event().await {
            if let Event::Token { id, .. } = ev {
                ids.push(id);
            }
        }
        ids
    });
    assert_eq!(streamed, blocking);
}

/// A strategy that runs one prompt token per slot and tick, and counts its calls.
struct OneTokenPrefill(Arc<std::sync::atomic::AtomicUsize>);

impl ferrolm::engine::CustomStrategy for OneTokenPrefill {
    fn plan(&mut self, demands: &[ferrolm::engine::Demand], budget: usize) -> Option<ferrolm::engine::Plan> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut plan = ferrolm::engine::Plan::default();
        for d in demands.iter().take(budget) {
            if d.decode {
                plan.decode.push(d.slot);
            } else if d.prompt_left > 0 {
                plan.prefill.push((d.slot, 1));
            }
        }
        Some(plan)
    }
}

#[test]
fn a_custom_strategy_plans_each_tick_and_an_observer_sees_each_tick() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    let Some(model) = load() else { return };
    let calls = Arc::new(AtomicUsize::new(0));
    let (ticks, generated) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicU64::new(0)));
    let (t, g) = (ticks.clone(), generated.clone());
    let hooks = ferrolm::engine::EngineHooks {
        strategy: Some(Box::new(OneTokenPrefill(calls.clone()))),
        on_tick: Some(Box::new(move |r: &ferrolm::engine::TickReport| {
            assert!(r.batch_tokens >= 1 && r.busy_slots <= 2);
            t.fetch_add(1, Ordering::Relaxed);
            g.fetch_add(r.generated_tokens, Ordering::Relaxed);
        })),
    };
    let cfg = EngineConfig { n_slots: 2, n_ctx: 1024, chunk_size: 64, ..EngineConfig::default() };
    let eng = Engine::start_with_hooks(model.clone(), cfg, hooks).expect("engine starts");
    let req = request(&model, PROMPTS[0], 8);
    let n_prompt = req.prompt.len();
    let (ids, ..) = collect(eng.submit(req).expect("accepted"));
    let alone = collect(
        engine(&model, 1, BatchStrategy::DecodeFirst).submit(request(&model, PROMPTS[0], 8)).expect("ok"),
    );
    assert_eq!(ids, alone.0, "greedy output does not depend on the strategy");
    // One prompt token a tick: one tick per prompt token, then one per generated token after
    // the first (which the last prompt token's logits give).
    assert!(eng.wait_idle(Duration::from_secs(5)));
    assert_eq!(ticks.load(Ordering::Relaxed), n_prompt + ids.len() - 1);
    assert!(calls.load(Ordering::Relaxed) >= ticks.load(Ordering::Relaxed));
    assert_eq!(generated.load(Ordering::Relaxed), ids.len() as u64);
}

/// Submits every request at once (they share ticks), then collects each one's tokens and usage.
fn submit_all(eng: &Engine, reqs: Vec<GenRequest>) -> Vec<(Vec<u32>, Usage)> {
    let rxs: Vec<_> = reqs.into_iter().map(|r| eng.submit(r).expect("accepted")).collect();
    rxs.into_iter()
        .map(|rx| {
            let (ids, _, _, usage) = collect(rx);
            (ids, usage)
        })
        .collect()
}

/// A prompt whose continuation copies from it: prompt lookup has something to find.
const COPY_PROMPT: &str = "Shopping list: apples, pears, plums, cherries, grapes, lemons, limes, oranges.\n\
    Shopping list: apples, pears, plums, cherries, grapes, lemons, limes, oranges.\n\
    Shopping list: apples, pears, plums, cherries, grapes, lemons, limes, oranges.\n\
    Shopping list:";

/// Requests speculating by prompt lookup, batched with plain ones, generate exactly what each
/// generates alone without it (greedy and seeded sampling), and keep drafts on a copy prompt;
/// bad lookup settings are refused at submit.
#[test]
fn prompt_lookup_requests_generate_what_they_generate_alone() {
    use ferrolm::engine::PromptLookup;
    use ferrolm::sampling::SamplerParams;
    let Some(model) = load() else { return };
    let sampled = GenerateParams {
        max_tokens: Some(40),
        sampler: SamplerParams { temperature: 0.8, top_k: 20, seed: Some(7), ..SamplerParams::default() },
        ..GenerateParams::default()
    };
    let cases = [
        (COPY_PROMPT, GenerateParams::greedy(48)),
        (COPY_PROMPT, sampled.clone()),
        (PROMPTS[1], GenerateParams::greedy(24)),
        (PROMPTS[2], sampled),
    ];
    // The reference: the same requests without lookup, in the same batches. (A session alone
    // is no reference for sampling: the engine's prompt chunks round differently.)
    let lookup = Some(PromptLookup { max_ngram: 3, max_draft: 6 });
    let run = |speculate: bool| -> Vec<(Vec<u32>, Usage)> {
        let eng = engine(&model, 3, BatchStrategy::Balanced);
        let reqs: Vec<_> = cases
            .iter()
            .enumerate()
            .map(|(i, (p, params))| {
                let prompt = model.tokenizer().encode(p, true, true).expect("tokenizes");
                // Requests 0, 1 and 2 speculate, 3 does not: all share ticks.
                let lookup = if speculate && i < 3 { lookup } else { None };
                GenRequest { prompt, params: params.clone(), lookup, ..GenRequest::default() }
            })
            .collect();
        submit_all(&eng, reqs)
    };
    let plain = run(false);
    let fast = run(true);
    for (i, ((want, _), (got, usage))) in plain.iter().zip(&fast).enumerate() {
        assert_eq!(got, want, "request {i}: speculation changed the output");
        assert!(usage.draft_accepted <= usage.draft_tokens);
        if i < 2 {
            assert!(usage.draft_accepted > 5, "request {i}: the copy prompt keeps drafts: {usage:?}");
        }
    }
    // Greedy requests also equal a session alone.
    let mut s = Session::new(&model, SessionOptions::default()).expect("session");
    assert_eq!(fast[0].0, s.generate(COPY_PROMPT, &cases[0].1).expect("generates").tokens);
    let eng = engine(&model, 1, BatchStrategy::Balanced);
    let bad =
        GenRequest { lookup: Some(PromptLookup { max_ngram: 3, max_draft: 99 }), ..request(&model, "hi", 4) };
    assert!(matches!(eng.submit(bad), Err(SubmitError::Invalid(_))));
    let bad =
        GenRequest { lookup: Some(PromptLookup { max_ngram: 0, max_draft: 4 }), ..request(&model, "hi", 4) };
    assert!(matches!(eng.submit(bad), Err(SubmitError::Invalid(_))));
}

/// Requests speculating with the engine's draft model (here the model itself, against greedy
/// and sampled targets), batched with plain ones, generate exactly what they generate without
/// it, again when the slots' draft caches hold the last requests; bad settings, a request for
/// a draft model the engine lacks, and a draft model of another vocabulary are refused.
#[test]
fn draft_model_requests_generate_what_they_generate_alone() {
    use ferrolm::engine::{DraftSettings, EngineError, PromptLookup};
    use ferrolm::sampling::SamplerParams;
    let Some(model) = load() else { return };
    let sampled = GenerateParams {
        max_tokens: Some(40),
        sampler: SamplerParams { temperature: 0.8, top_k: 20, seed: Some(7), ..SamplerParams::default() },
        ..GenerateParams::default()
    };
    let always = DraftSettings { max_draft: 6, min_draft: 0, p_min: 0.0 };
    let confident = DraftSettings { max_draft: 8, min_draft: 2, p_min: 0.75 };
    let cases = [
        (COPY_PROMPT, GenerateParams::greedy(48), Some(always)),
        (COPY_PROMPT, sampled.clone(), Some(confident)),
        (PROMPTS[1], GenerateParams::greedy(24), Some(confident)),
        (PROMPTS[2], sampled, None),
    ];
    let cfg = |draft: Option<Arc<Model>>| EngineConfig {
        n_slots: 3,
        n_ctx: 1024,
        chunk_size: 64,
        strategy: BatchStrategy::Balanced,
        draft_model: draft,
        ..EngineConfig::default()
    };
    let run = |eng: &Engine, speculate: bool| -> Vec<(Vec<u32>, Usage)> {
        let reqs: Vec<_> = cases
            .iter()
            .map(|(p, params, draft)| {
                let prompt = model.tokenizer().encode(p, true, true).expect("tokenizes");
                let draft = if speculate { *draft } else { None };
                GenRequest { prompt, params: params.clone(), draft, ..GenRequest::default() }
            })
            .collect();
        submit_all(eng, reqs)
    };
    let plain = run(&Engine::start(model.clone(), cfg(None)).expect("engine"), false);
    let eng = Engine::start(model.clone(), cfg(Some(model.clone()))).expect("engine with a draft model");
    for round in 0..2 {
        let fast = run(&eng, true);
        for (i, ((want, _), (got, usage))) in plain.iter().zip(&fast).enumerate() {
            assert_eq!(got, want, "round {round}, request {i}: speculation changed the output");
            assert!(usage.draft_accepted <= usage.draft_tokens, "{usage:?}");
            assert_eq!(usage.draft_tokens > 0, cases[i].2.is_some(), "request {i}: {usage:?}");
        }
        // Drafting for itself, greedily: nearly every draft is kept.
        let u = &fast[0].1;
        assert!(u.draft_accepted * 10 >= u.draft_tokens * 9 && u.draft_accepted > 20, "{u:?}");
    }
    let mut s = Session::new(&model, SessionOptions::default()).expect("session");
    assert_eq!(plain[0].0, s.generate(COPY_PROMPT, &cases[0].1).expect("generates").tokens);

    let with = |draft: DraftSettings| GenRequest { draft: Some(draft), ..request(&model, "hi", 4) };
    for bad in [
        DraftSettings { max_draft: 0, ..always },
        DraftSettings { max_draft: 99, ..always },
        DraftSettings { min_draft: 7, ..always },
        DraftSettings { p_min: 1.5, ..always },
    ] {
        assert!(matches!(eng.submit(with(bad)), Err(SubmitError::Invalid(_))), "{bad:?}");
    }
    let both = GenRequest { lookup: Some(PromptLookup { max_ngram: 3, max_draft: 4 }), ..with(always) };
    assert!(matches!(eng.submit(both), Err(SubmitError::Invalid(_))));
    let no_draft_model = engine(&model, 1, BatchStrategy::Balanced);
    assert!(matches!(no_draft_model.submit(with(always)), Err(SubmitError::Invalid(_))));
    let gemma =
        common::require_model("gemma-3-270m-q4_k_m.gguf").map(|p| Arc::new(Model::load(p).expect("loads")));
    if let Some(gemma) = gemma {
        let err = Engine::start(model.clone(), cfg(Some(gemma))).expect_err("another vocabulary");
        assert!(matches!(&err, EngineError::Config(m) if m.contains("vocabulary")), "{err}");
    }
}

/// llama-server's slot save/restore/erase: a request pinned to slot 1 (`id_slot`), its slot
/// saved, restored into slot 0 of a new engine (a restarted server), and a continuation there
/// reuses every saved token and generates exactly what it does on the first engine. Erasing
/// forgets the tokens; a bad slot or file is an error.
#[test]
fn a_saved_slot_restores_into_another_engine_bit_identically() {
    let Some(model) = load() else { return };
    let first = engine(&model, 2, BatchStrategy::DecodeFirst);
    let a = GenRequest { slot: Some(1), ..request(&model, "The three primary colors are", 8) };
    let prompt = a.prompt.clone();
    let (ids_a, _, _, ua) = collect(first.submit(a).expect("accepted"));
    assert_eq!(ua.slot, Some(1));
    let SlotOutcome::Saved { n_tokens, bytes } = first.slot_action(1, SlotAction::Save).expect("saves")
    else {
        panic!("not a save")
    };
    assert_eq!(n_tokens, prompt.len() + ids_a.len() - 1, "prompt and generated tokens but the last");
    let mut cont = prompt.clone();
    cont.extend_from_slice(&ids_a);
    cont.extend(model.tokenizer().encode(" Also,", false, false).expect("tokenizes"));
    let c = GenRequest { prompt: cont, params: GenerateParams::greedy(12), ..GenRequest::default() };
    let (want, _, _, uc) = collect(first.submit(c.clone()).expect("accepted"));
    assert_eq!(uc.cached_tokens, n_tokens);

    let second = engine(&model, 2, BatchStrategy::DecodeFirst);
    let restored = second.slot_action(0, SlotAction::Restore(bytes.clone())).expect("restores");
    assert_eq!(restored, SlotOutcome::Restored { n_tokens });
    let (got, _, _, ug) = collect(second.submit(c.clone()).expect("accepted"));
    assert_eq!(ug.cached_tokens, n_tokens, "the restored tokens are reused");
    assert_eq!(got, want, "the continuation after a restore is the same");

    assert!(second.slot_action(0, SlotAction::Restore(bytes)).is_ok());
    assert_eq!(second.slot_action(0, SlotAction::Erase).expect("erases"), SlotOutcome::Erased { n_tokens });
    let (_, _, _, ue) = collect(second.submit(c).expect("accepted"));
    assert_eq!(ue.cached_tokens, 0, "an erased slot's tokens are forgotten");
    assert!(matches!(second.slot_action(2, SlotAction::Save), Err(EngineError::InvalidSlot(2))));
    let junk = second.slot_action(0, SlotAction::Restore(b"junk".to_vec())).expect_err("refused");
    assert!(junk.to_string().contains("not a ferrolm KV state"), "{junk}");
}

/// With `progress`, a request reports where it stands: the cached prefix when a slot takes it,
/// each prompt chunk, then the counts before each token; the tokens are those of a request
/// without reports.
#[test]
fn progress_events_follow_the_prompt_chunks_then_the_tokens() {
    let Some(model) = load() else { return };
    let eng = engine(&model, 1, BatchStrategy::default());
    let prompt = "word ".repeat(150);
    let plain = collect(eng.submit(request(&model, &prompt, 4)).expect("queued"));
    let (mut chunks, mut tokens, mut done) = (Vec::new(), Vec::new(), None);
    let mut before_token: Vec<Usage> = Vec::new();
    let mut last = None;
    let rx = eng
        .submit(GenRequest { progress: true, fresh_prompt: true, ..request(&model, &prompt, 4) })
        .expect("queued");
    for ev in rx {
        match ev {
            Event::Progress { processed, usage } => last = Some((processed, usage)),
            Event::Token { id, .. } => {
                let (processed, usage) = last.take().expect("a progress event before each token");
                assert_eq!(processed, usage.prompt_tokens);
                before_token.push(usage);
                tokens.push(id);
            }
            Event::Done { usage, .. } => done = Some(usage),
            _ => {}
        }
        if let Some((processed, usage)) = last
            && tokens.is_empty()
            && chunks.last() != Some(&processed)
        {
            chunks.push(processed);
            if chunks.len() == 1 {
                assert_eq!(usage.prompt_ms, 0.0, "nothing has run at the start");
            }
        }
    }
    let n = plain.3.prompt_tokens;
    let want: Vec<usize> = (0..n).step_by(64).chain(std::iter::once(n)).collect();
    assert_eq!(chunks, want, "the start, then every chunk of 64");
    assert_eq!(tokens, plain.0);
    let counts: Vec<usize> = before_token.iter().map(|u| u.completion_tokens).collect();
    assert_eq!(counts, (1..=tokens.len()).collect::<Vec<_>>());
    assert!(before_token.windows(2).all(|w| w[1].decode_ms >= w[0].decode_ms));
    assert_eq!(done.expect("done").completion_tokens, tokens.len());
}
