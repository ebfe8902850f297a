//! A hybrid model's recurrent state (the tiny conformance models of Qwen 3.5, three gated delta
//! net layers and one attention layer, and LFM2, two short convolutions between two attention
//! layers) through the library: a session reuses its cache only where the
//! state holds exactly the cached tokens and recomputes otherwise, chunked prefill carries the
//! state across chunks, eviction leaves the state alone, the engine batches several sequences
//! and reuses a whole cached conversation, and what a recurrent state cannot do (speculative
//! decoding, saved states) is refused with a clear error.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use ferrolm::engine::{Engine, EngineConfig, Event, GenRequest, PromptLookup, SubmitError};
use ferrolm::kv::{CacheOptions, PolicyKind};
use ferrolm::model::Model;
use ferrolm::session::{Drafter, GenerateParams, Session, SessionOptions, SpeculativeOptions};

/// The conformance models with recurrent layers.
const MODELS: [&str; 2] = ["qwen35", "lfm2"];

fn model(name: &str) -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/conformance/{name}/model.gguf"));
    Model::load(path).unwrap()
}

/// Pseudo-random ordinary tokens of the tiny vocabulary.
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 3 + (i.wrapping_mul(2_654_435_761).wrapping_add(seed * 97) >> 7) % 370).collect()
}

fn greedy(n: usize) -> GenerateParams {
    GenerateParams { ignore_eos: true, ..GenerateParams::greedy(n) }
}

/// What a fresh session generates after `prompt`.
fn fresh(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(model, SessionOptions::default()).unwrap();
    s.generate_tokens(prompt, &greedy(n)).unwrap().tokens
}

#[test]
fn a_session_reuses_the_whole_cache_and_recomputes_a_diverging_prompt() {
    for name in MODELS {
        let m = model(name);
        let mut s = Session::new(&m, SessionOptions::default()).unwrap();
        let first = tokens(20, 1);
        let out = s.generate_tokens(&first, &greedy(6)).unwrap();
        assert_eq!(out.tokens, fresh(&m, &first, 6));

        // The next prompt extends everything cached: only its new tokens run.
        let mut second = s.tokens().to_vec();
        second.extend(tokens(9, 2));
        let out = s.generate_tokens(&second, &greedy(6)).unwrap();
        assert_eq!(out.stats.n_cached, second.len() - 9);
        assert_eq!(out.tokens, fresh(&m, &second, 6));

        // A prompt that leaves the cached tokens part way cannot cut the state back: it runs whole.
        let mut third = second[..15].to_vec();
        third.extend(tokens(7, 3));
        let out = s.generate_tokens(&third, &greedy(6)).unwrap();
        assert_eq!((out.stats.n_cached, out.stats.n_prefilled), (0, third.len()));
        assert_eq!(out.tokens, fresh(&m, &third, 6));

        // The same prompt again: its logits are not kept, so it runs again, from the start.
        let again = s.generate_tokens(&third, &greedy(6)).unwrap();
        assert_eq!(again.tokens, out.tokens);
    }
}

#[test]
fn chunked_prefill_carries_the_state_across_chunks() {
    for name in MODELS {
        let m = model(name);
        let prompt = tokens(40, 4);
        let want = fresh(&m, &prompt, 8);
        for n_batch in [1, 3, 7, 16] {
            let mut s = Session::new(&m, SessionOptions { n_batch, ..SessionOptions::default() }).unwrap();
            assert_eq!(s.generate_tokens(&prompt, &greedy(8)).unwrap().tokens, want, "n_batch {n_batch}");
        }
    }
}

#[test]
fn eviction_drops_attention_keys_but_keeps_the_recurrent_state() {
    for name in MODELS {
        let m = model(name);
        // StreamingLLM keeps 4 sink tokens and the most recent ones: the run goes far past the
        // 32-token context without an error.
        let cache = CacheOptions { policy: PolicyKind::Sliding, window: 16, ..CacheOptions::default() };
        let mut s =
            Session::new(&m, SessionOptions { n_ctx: 32, cache, ..SessionOptions::default() }).unwrap();
        let out = s.generate_tokens(&tokens(20, 5), &greedy(60)).unwrap();
        assert_eq!(out.tokens.len(), 60);
        assert!(s.kv_len() <= 32, "{} cached", s.kv_len());
        assert_eq!(s.tokens().len(), 20 + 60 - 1);
    }
}

#[test]
fn speculative_decoding_and_saved_states_are_refused() {
    for name in MODELS {
        let m = model(name);
        let mut s = Session::new(&m, SessionOptions::default()).unwrap();
        let lookup =
            SpeculativeOptions { drafter: Drafter::PromptLookup { max_ngram: 3 }, max_draft: 4, p_min: 0.0 };
        let err = s.set_speculative(Some(lookup)).unwrap_err();
        assert!(err.to_string().contains("recurrent"), "{err}");
        s.generate_tokens(&tokens(10, 6), &greedy(2)).unwrap();
        let err = s.save_state(std::env::temp_dir().join("ferrolm-recurrent-state.bin")).unwrap_err();
        assert!(err.to_string().contains("recurrent"), "{err}");

        let eng = Engine::start(Arc::new(model(name)), EngineConfig::default()).unwrap();
        let req = GenRequest {
            prompt: tokens(10, 7),
            params: greedy(4),
            lookup: Some(PromptLookup { max_ngram: 3, max_draft: 4 }),
            ..GenRequest::default()
        };
        match eng.submit(req) {
            Err(SubmitError::Invalid(e)) => assert!(e.contains("recurrent"), "{e}"),
            other => panic!("expected a refusal, got {:?}", other.err()),
        }
    }
}

fn engine_tokens(eng: &Engine, prompt: Vec<u32>, n: usize) -> (Vec<u32>, usize) {
    let rx = eng.submit(GenRequest { prompt, params: greedy(n), ..GenRequest::default() }).unwrap();
    let mut ids = Vec::new();
    for ev in rx {
        match ev {
            Event::Token { id, .. } => ids.push(id),
            Event::Done { usage, .. } => return (ids, usage.cached_tokens),
            Event::Error(e) => panic!("{e}"),
            Event::Refused(e) => panic!("{e:?}"),
            _ => {}
        }
    }
    panic!("no Done event");
}

#[test]
fn the_engine_batches_sequences_and_reuses_a_whole_cached_conversation() {
    for name in MODELS {
        let m = Arc::new(model(name));
        let cfg = EngineConfig { n_slots: 3, n_ctx: 256, chunk_size: 5, ..EngineConfig::default() };
        let eng = Engine::start(m.clone(), cfg).unwrap();
        let prompts: Vec<Vec<u32>> = (0..3).map(|i| tokens(12 + 5 * i, 10 + i as u32)).collect();
        let rxs: Vec<_> = prompts
            .iter()
            .map(|p| {
                eng.submit(GenRequest { prompt: p.clone(), params: greedy(10), ..GenRequest::default() })
                    .unwrap()
            })
            .collect();
        for (p, rx) in prompts.iter().zip(rxs) {
            let ids: Vec<u32> =
                rx.filter_map(|ev| if let Event::Token { id, .. } = ev { Some(id) } else { None }).collect();
            assert_eq!(ids, fresh(&m, p, 10));
        }
        // A follow-up that extends a finished conversation reuses its whole cache; one that leaves
        // it part way runs from the start. Both generate what a fresh session does.
        let first = tokens(16, 20);
        let (reply, _) = engine_tokens(&eng, first.clone(), 5);
        let mut follow = first.clone();
        follow.extend(&reply[..4]);
        follow.extend(tokens(6, 21));
        let (ids, cached) = engine_tokens(&eng, follow.clone(), 6);
        assert_eq!(cached, first.len() + 4, "the whole conversation is reused");
        assert_eq!(ids, fresh(&m, &follow, 6));
        let mut diverging = first[..10].to_vec();
        diverging.extend(tokens(5, 22));
        let (ids, cached) = engine_tokens(&eng, diverging.clone(), 6);
        assert_eq!(cached, 0);
        assert_eq!(ids, fresh(&m, &diverging, 6));
    }
}
