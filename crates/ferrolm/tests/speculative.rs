//! Speculative decoding on the real test models: the output (tokens, text, finish, the logits
//! after the last token, what the session caches) is plain decoding's, greedy and seeded
//! sampling alike, with prompt lookup and with a draft model; bad settings are errors.
#![allow(clippy::unwrap_used)]

mod common;

use ferrolm::model::Model;
use ferrolm::sampling::SamplerParams;
use ferrolm::session::{
    Completion, Drafter, GenerateParams, MAX_DRAFT, Session, SessionOptions, SpeculativeOptions, StreamEvent,
};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

/// A prompt whose continuation copies from it: prompt lookup has something to find.
const COPY_PROMPT: &str = "Shopping list: apples, pears, plums, cherries, grapes, lemons, limes, oranges.\n\
    Shopping list: apples, pears, plums, cherries, grapes, lemons, limes, oranges.\n\
    Shopping list: apples, pears, plums, cherries, grapes, lemons, limes, oranges.\n\
    Shopping list:";

fn load(file: &str) -> Option<Model> {
    Some(Model::load(common::require_model(file)?).unwrap())
}

fn opts() -> SessionOptions {
    SessionOptions { n_ctx: 512, ..SessionOptions::default() }
}

/// A generation and what the session holds after it: the cached tokens and the logits after
/// them (the stream's `logits()` at its end).
fn generate(session: &mut Session<'_>, prompt: &str, params: &GenerateParams) -> (Completion, Vec<u32>) {
    let out = session.generate(prompt, params).unwrap();
    (out, session.tokens().to_vec())
}

fn check_same(model: &Model, spec: SpeculativeOptions<'_>, params: &GenerateParams) -> Completion {
    let mut plain = Session::new(model, opts()).unwrap();
    let (want, want_cached) = generate(&mut plain, COPY_PROMPT, params);
    let mut fast = Session::new(model, opts()).unwrap();
    fast.set_speculative(Some(spec)).unwrap();
    let (got, got_cached) = generate(&mut fast, COPY_PROMPT, params);
    assert_eq!(got.tokens, want.tokens, "{spec:?}: tokens differ from plain decoding");
    assert_eq!(got.text, want.text);
    assert_eq!(got.stats.finish, want.stats.finish);
    assert_eq!(got_cached, want_cached, "{spec:?}: the session caches other tokens");
    assert_eq!(got.stats.n_decode, want.stats.n_decode);
    assert_eq!(got.stats.n_kv, want.stats.n_kv);
    assert!(got.stats.n_draft_accepted <= got.stats.n_drafted);
    // The next turn continues from the same state: its logits equal plain decoding's, bit for bit.
    let next = GenerateParams::greedy(1);
    let follow = format!("{COPY_PROMPT}{} And", want.text);
    let mut a = plain.stream(&follow, &next).unwrap();
    let mut b = fast.stream(&follow, &next).unwrap();
    a.next().unwrap().unwrap();
    b.next().unwrap().unwrap();
    assert!(a.logits().iter().zip(b.logits()).all(|(x, y)| x.to_bits() == y.to_bits()));
    got
}

#[test]
fn prompt_lookup_greedy_is_plain_greedy() {
    let Some(model) = load(SMOL) else { return };
    let spec =
        SpeculativeOptions { drafter: Drafter::PromptLookup { max_ngram: 3 }, max_draft: 8, p_min: 0.0 };
    let out = check_same(&model, spec, &GenerateParams::greedy(64));
    let s = &out.stats;
    eprintln!("prompt lookup: {} of {} drafted tokens kept: {:?}", s.n_draft_accepted, s.n_drafted, out.text);
    assert!(s.n_draft_accepted > 10, "the copy prompt should let lookup drafts through: {s:?}");
}

#[test]
fn a_draft_model_with_seeded_sampling_is_plain_sampling() {
    let Some(model) = load(SMOL) else { return };
    // The model drafting for itself: greedy drafts against a sampled target, so some drafts
    // are kept and some are not.
    let spec = SpeculativeOptions { drafter: Drafter::Model(&model), max_draft: 4, p_min: 0.0 };
    let params = GenerateParams {
        max_tokens: Some(48),
        sampler: SamplerParams { temperature: 0.7, top_k: 20, seed: Some(42), ..SamplerParams::default() },
        ..GenerateParams::default()
    };
    let out = check_same(&model, spec, &params);
    let s = &out.stats;
    eprintln!("self-draft, sampled: {} of {} drafted tokens kept", s.n_draft_accepted, s.n_drafted);
    assert!(s.n_drafted > 0 && s.n_draft_accepted > 0, "{s:?}");
    // Greedy self-drafting keeps nearly every draft.
    let greedy = check_same(&model, spec, &GenerateParams::greedy(40));
    // (Not every one: the draft session prefills the prompt through the tiled prompt path,
    // whose last bits differ from the decode path's, and a near-tie may go the other way.)
    assert!(greedy.stats.draft_acceptance() > 0.9, "{:?}", greedy.stats);
}

#[test]
fn stop_strings_and_early_ends_inside_a_pass_leave_plain_decoding_s_state() {
    let Some(model) = load(SMOL) else { return };
    let spec = SpeculativeOptions {
        drafter: Drafter::PromptLookup { max_ngram: 2 },
        max_draft: MAX_DRAFT,
        p_min: 0.0,
    };
    for max_tokens in [1, 2, 5, 13] {
        check_same(&model, spec, &GenerateParams::greedy(max_tokens));
    }
    let params = GenerateParams { stop: vec!["grapes".into()], ..GenerateParams::greedy(64) };
    check_same(&model, spec, &params);
    // A stream dropped after a few tokens leaves the tokens it showed in the cache, no draft.
    let mut fast = Session::new(&model, opts()).unwrap();
    fast.set_speculative(Some(spec)).unwrap();
    let mut shown = fast.tokenize_prompt(COPY_PROMPT).unwrap();
    let n_prompt = shown.len();
    {
        let mut stream = fast.stream(COPY_PROMPT, &GenerateParams::greedy(64)).unwrap();
        for _ in 0..12 {
            if let StreamEvent::Token { id, .. } = stream.next().unwrap().unwrap() {
                shown.push(id);
            }
        }
    }
    // The last shown token was never run through the model (as in plain decoding), or it was.
    let cached = fast.tokens();
    assert!(cached.len() >= n_prompt + 11 && cached.len() <= n_prompt + 12, "{} cached", cached.len());
    assert_eq!(cached, &shown[..cached.len()]);
}

#[test]
fn bad_settings_are_errors() {
    let Some(model) = load(SMOL) else { return };
    let mut s = Session::new(&model, opts()).unwrap();
    for max_draft in [0, MAX_DRAFT + 1] {
        let spec =
            SpeculativeOptions { drafter: Drafter::PromptLookup { max_ngram: 3 }, max_draft, p_min: 0.0 };
        assert!(s.set_speculative(Some(spec)).is_err(), "max_draft {max_draft}");
    }
    let spec =
        SpeculativeOptions { drafter: Drafter::PromptLookup { max_ngram: 0 }, max_draft: 4, p_min: 0.0 };
    assert!(s.set_speculative(Some(spec)).is_err());
    let Some(gemma) = load(GEMMA) else { return };
    let err = s
        .set_speculative(Some(SpeculativeOptions {
            drafter: Drafter::Model(&gemma),
            max_draft: 4,
            p_min: 0.0,
        }))
        .unwrap_err();
    assert!(err.to_string().contains("vocabulary"), "{err}");
    assert!(!s.is_speculative());
}
