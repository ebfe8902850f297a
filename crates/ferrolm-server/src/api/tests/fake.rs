//! A scripted backend: a byte-level tokenizer with a few special tokens, a ChatML template, and
//! an engine that answers every request with a fixed reply (or an error, or nothing).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ferrolm::chat::ChatTemplate;
use ferrolm::constrain::ConstraintSpec;
use ferrolm::decoder::{FinishReason, TokenLogprob};
use ferrolm::engine::{
    EngineError, Event, EventSender, GenRequest, MetricsSnapshot, RequestHandle, SlotAction, SlotInfo,
    SlotOutcome, SlotState, SubmitError, Usage, event_channel,
};
use ferrolm::model::Pooling;

use super::super::backend::{Backend, BoxFuture};

pub(crate) const BOS: u32 = 256;
/// `</s>`, the second special token.
pub(crate) const EOS: u32 = 257;
const SPECIALS: [&str; 4] = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"];

/// ChatML with tools, as Qwen/Hermes templates write them.
pub(crate) const CHATML_TOOLS: &str = "{{ bos_token }}{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A template that knows nothing of tools.
pub(crate) const PLAIN: &str = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}";

/// The texts, pooling and normalisation of an embedding call.
pub(crate) type EmbedCall = (Vec<Vec<u32>>, Option<Pooling>, bool);

/// How the fake engine answers.
#[derive(Clone, Debug)]
pub(crate) enum Mode {
    /// Replies with this text, one token per byte, then `Stop` (or `Length` at `max_tokens`).
    Reply(String),
    /// Sends an engine error.
    Fail(String),
    /// Sends nothing and keeps the channel open (its sender is kept in `held`).
    Hang,
    /// Refuses with a full queue after this many accepted requests.
    QueueFullAfter(usize),
    /// Refuses: shutting down.
    ShuttingDown,
    /// Accepts, then refuses while queued: the engine began shutting down.
    RefusedInQueue,
}

/// The constraints the fake engine refuses to compile, as the real one refuses a schema that
/// only refers to itself or a grammar that cannot be matched: a grammar or regex that says
/// `bad`, a schema whose root is `{"$ref": "#"}`.
fn unmatchable(spec: &ConstraintSpec) -> bool {
    match spec {
        ConstraintSpec::Lark(g) | ConstraintSpec::Gbnf(g) | ConstraintSpec::Regex(g) => g.contains("bad"),
        ConstraintSpec::JsonSchema(s) => s.get("$ref").is_some_and(|r| r == "#"),
        ConstraintSpec::JsonObject => false,
    }
}

pub(crate) struct Fake {
    pub n_ctx: usize,
    pub template: Result<ChatTemplate, String>,
    pub mode: Mutex<Mode>,
    /// Every request submitted.
    pub requests: Mutex<Vec<GenRequest>>,
    /// Senders of `Hang` requests.
    pub held: Mutex<Vec<std::sync::Arc<EventSender>>>,
    pub accepted: AtomicUsize,
    pub embed_calls: Mutex<Vec<EmbedCall>>,
    pub shut_down: AtomicBool,
    pub cancelled_all: AtomicBool,
    /// What `wait_idle` answers.
    pub idle: AtomicBool,
    /// Whether the model reranks (scores: 1 / (1 + document length)).
    pub reranker: AtomicBool,
    /// The fill-in-the-middle tokens it reports.
    pub fim: Option<crate::api::infill::FimTokens>,
    /// Per slot (2), the tokens a slot save writes: what the last restore put there, else
    /// `[1, 2, 3]`; an erase empties it.
    pub slot_tokens: Mutex<Vec<Vec<u32>>>,
}

impl Fake {
    pub(crate) fn new(mode: Mode) -> Fake {
        Fake {
            n_ctx: 512,
            template: ChatTemplate::new(CHATML_TOOLS).map_err(|e| e.to_string()),
            mode: Mutex::new(mode),
            requests: Mutex::new(Vec::new()),
            held: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
            embed_calls: Mutex::new(Vec::new()),
            shut_down: AtomicBool::new(false),
            cancelled_all: AtomicBool::new(false),
            idle: AtomicBool::new(true),
            reranker: AtomicBool::new(false),
            fim: None,
            slot_tokens: Mutex::new(vec![vec![1, 2, 3]; 2]),
        }
    }

    pub(crate) fn reply(text: &str) -> Fake {
        Fake::new(Mode::Reply(text.to_string()))
    }

    pub(crate) fn with_template(mut self, source: &str) -> Fake {
        self.template = ChatTemplate::new(source).map_err(|e| e.to_string());
        self
    }

    pub(crate) fn requests(&self) -> Vec<GenRequest> {
        self.requests.lock().expect("lock").clone()
    }

    fn logprob(id: u32, k: usize) -> TokenLogprob {
        TokenLogprob {
            id,
            logprob: -0.5,
            top: (0..k as u32).map(|j| (u32::from(b'a') + j, -1.0 - j as f32)).collect(),
        }
    }
}

impl Backend for Fake {
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn evicts(&self) -> bool {
        false
    }

    fn n_vocab(&self) -> usize {
        256 + SPECIALS.len()
    }

    fn bos(&self) -> Option<u32> {
        Some(BOS)
    }

    fn eog_ids(&self) -> Vec<u32> {
        vec![EOS]
    }

    fn bos_eos_text(&self) -> (String, String) {
        ("<s>".into(), "</s>".into())
    }

    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        if add_special {
            out.push(BOS);
        }
        let bytes = text.as_bytes();
        let mut i = 0;
        'outer: while i < bytes.len() {
            if parse_special && text.is_char_boundary(i) {
                for (k, s) in SPECIALS.iter().enumerate() {
                    if text[i..].starts_with(s) {
                        out.push(256 + k as u32);
                        i += s.len();
                        continue 'outer;
                    }
                }
            }
            // One token per byte.
            out.push(u32::from(bytes[i]));
            i += 1;
        }
        Ok(out)
    }

    fn piece(&self, id: u32) -> Vec<u8> {
        match id {
            0..=255 => vec![id as u8],
            _ => SPECIALS.get(id as usize - 256).map(|s| s.as_bytes().to_vec()).unwrap_or_default(),
        }
    }

    fn chat_template(&self) -> Result<&ChatTemplate, String> {
        self.template.as_ref().map_err(Clone::clone)
    }

    fn submit(&self, req: GenRequest) -> Result<RequestHandle, SubmitError> {
        if let Some(spec) = &req.params.constraint
            && unmatchable(spec)
        {
            return Err(SubmitError::Constraint("invalid constraint: bad grammar".into()));
        }
        let mode = self.mode.lock().expect("lock").clone();
        match mode {
            Mode::ShuttingDown => return Err(SubmitError::ShuttingDown),
            Mode::QueueFullAfter(n) if self.accepted.load(Ordering::SeqCst) >= n => {
                return Err(SubmitError::QueueFull { queued: n, retry_after_s: 2 });
            }
            _ => {}
        }
        self.accepted.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().expect("lock").push(req.clone());
        let (tx, rx) = event_channel();
        let usage = |completion_tokens| Usage {
            prompt_tokens: req.prompt.len(),
            cached_tokens: 1,
            completion_tokens,
            queue_ms: 1.0,
            prompt_ms: 2.0,
            decode_ms: 4.0,
            // A speculating request drafted 3 tokens and kept 2.
            draft_tokens: if req.draft.is_some() || req.lookup.is_some() { 3 } else { 0 },
            draft_accepted: if req.draft.is_some() || req.lookup.is_some() { 2 } else { 0 },
            draft_passes: usize::from(req.draft.is_some() || req.lookup.is_some()),
            slot: Some(0),
        };
        match &mode {
            Mode::Hang => self.held.lock().expect("lock").push(std::sync::Arc::new(tx)),
            Mode::Fail(m) => {
                tx.send(Event::Error(m.clone()));
            }
            Mode::ShuttingDown => {}
            Mode::RefusedInQueue => {
                tx.send(Event::Refused(SubmitError::ShuttingDown));
            }
            Mode::Reply(_) | Mode::QueueFullAfter(_) => {
                let reply = match &mode {
                    Mode::Reply(t) => t.clone(),
                    _ => "ok".to_string(),
                };
                if req.prompt_logprobs {
                    let k = req.logprobs.unwrap_or(0);
                    let lps = req
                        .prompt
                        .iter()
                        .enumerate()
                        .map(|(i, &id)| (i > 0).then(|| Fake::logprob(id, k)))
                        .collect();
                    tx.send(Event::PromptLogprobs(lps));
                }
                let max = req.params.max_tokens.unwrap_or(usize::MAX);
                let bytes = reply.as_bytes();
                let n = bytes.len().min(max);
                // Progress: the cached token at the start (no time yet), then the whole prompt
                // in one chunk, then before each token.
                let progress = |processed: usize, u: Usage| {
                    if req.progress {
                        tx.send(Event::Progress { processed, usage: u });
                    }
                };
                progress(1, Usage { prompt_ms: 0.0, ..usage(0) });
                progress(req.prompt.len(), usage(0));
                // Each byte is a token; its text is released when it completes a character.
                let mut pending = Vec::new();
                for (k, &b) in bytes[..n].iter().enumerate() {
                    pending.push(b);
                    let text = match std::str::from_utf8(&pending) {
                        Ok(s) => {
                            let s = s.to_string();
                            pending.clear();
                            s
                        }
                        Err(_) => String::new(),
                    };
                    let logprob = req.logprobs.map(|k| Fake::logprob(u32::from(b), k));
                    progress(req.prompt.len(), usage(k + 1));
                    tx.send(Event::Token { id: u32::from(b), text, logprob });
                }
                // The whole reply: the model's end-of-generation token.
                let finish =
                    if n < bytes.len() { FinishReason::Length } else { FinishReason::EndOfGeneration };
                tx.send(Event::Done {
                    text: String::from_utf8_lossy(&pending).into_owned(),
                    finish,
                    usage: usage(n),
                    stop_word: None,
                });
            }
        }
        Ok(rx)
    }

    fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
        pooling: Option<Pooling>,
        normalize: bool,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EngineError>> {
        // Pooled: [length, 1]; without pooling: a row [position, 1] per token.
        let vectors = inputs
            .iter()
            .map(|t| match pooling {
                Some(Pooling::None) => (0..t.len()).flat_map(|p| [p as f32, 1.0]).collect(),
                _ => vec![t.len() as f32, 1.0],
            })
            .collect();
        self.embed_calls.lock().expect("lock").push((inputs, pooling, normalize));
        Box::pin(async move { Ok(vectors) })
    }

    fn fim_tokens(&self) -> Option<crate::api::infill::FimTokens> {
        self.fim
    }

    fn is_reranker(&self) -> bool {
        self.reranker.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn rerank(
        &self,
        query: String,
        documents: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<ferrolm::model::Relevance>, EngineError>> {
        let scores = documents
            .iter()
            .map(|d| ferrolm::model::Relevance {
                score: 1.0 / (1.0 + d.len() as f32),
                n_tokens: query.len() + d.len(),
            })
            .collect();
        Box::pin(async move { Ok(scores) })
    }

    /// A state is `FAKE` and the tokens as bytes; anything else is refused as a real engine
    /// refuses a file that is not a state.
    fn slot_action(
        &self,
        slot: usize,
        action: SlotAction,
    ) -> BoxFuture<'_, Result<SlotOutcome, EngineError>> {
        let mut slots = self.slot_tokens.lock().expect("lock");
        let result = match (slots.get_mut(slot), action) {
            (None, _) => Err(EngineError::InvalidSlot(slot)),
            (Some(t), SlotAction::Save) => {
                let mut bytes = b"FAKE".to_vec();
                bytes.extend(t.iter().map(|&x| x as u8));
                Ok(SlotOutcome::Saved { n_tokens: t.len(), bytes })
            }
            (Some(t), SlotAction::Restore(bytes)) => match bytes.strip_prefix(b"FAKE") {
                Some(rest) => {
                    *t = rest.iter().map(|&b| u32::from(b)).collect();
                    Ok(SlotOutcome::Restored { n_tokens: t.len() })
                }
                None => Err(ferrolm::Error::InvalidInput("not a ferrolm KV state file".into()).into()),
            },
            (Some(t), SlotAction::Erase) => Ok(SlotOutcome::Erased { n_tokens: std::mem::take(t).len() }),
        };
        Box::pin(async move { result })
    }

    fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot { requests_total: 3, slots_total: 2, slots_busy: 1, ..MetricsSnapshot::default() }
    }

    fn slots(&self) -> Vec<SlotInfo> {
        vec![SlotInfo {
            id: 0,
            state: SlotState::Generating,
            request_id: 9,
            n_prompt: 5,
            n_cached: 1,
            n_prompt_done: 5,
            n_generated: 2,
            n_kv: 7,
        }]
    }

    fn shutdown(&self) {
        self.shut_down.store(true, Ordering::SeqCst);
    }

    fn cancel_all(&self) {
        self.cancelled_all.store(true, Ordering::SeqCst);
        // Cancelled requests end.
        for tx in self.held.lock().expect("lock").drain(..) {
            tx.send(Event::Done {
                text: String::new(),
                finish: FinishReason::Cancelled,
                usage: Usage::default(),
                stop_word: None,
            });
        }
    }

    fn wait_idle(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        let idle = self.idle.load(Ordering::SeqCst);
        Box::pin(async move {
            if !idle {
                tokio::time::sleep(timeout).await;
            }
            idle
        })
    }
}
