//! [`Engine`]: many users on one model, with continuous batching — the core the HTTP server,
//! the Elixir NIF and the Python module wrap.
//!
//! One engine thread owns the KV cache of `n_slots` [`Sequence`](crate::sequence::Sequence)s.
//! Each tick it builds one [`Batch`](crate::batch::Batch) from the decode tokens of the slots
//! that are generating and prompt chunks of the slots that are prefilling (in the order a
//! [`BatchStrategy`] picks), runs one forward pass, then lets each slot's
//! [`Decoder`](crate::decoder::Decoder) pick its next token. A finished slot's KV cache goes to
//! the [shared prefix cache](prefix), where any later request that starts with the same tokens
//! reuses it. A request may speculate ([`GenRequest::lookup`], or [`GenRequest::draft`] with the
//! engine's [draft model](EngineConfig::draft_model)): its drafts join its decode token in the
//! tick's pass, and its decoder keeps those it samples itself.
//!
//! [`Engine::submit`] checks a request, compiles its constraint and queues it; its events come
//! back on the returned [`RequestHandle`] (a blocking iterator and an async stream, no runtime
//! needed). Dropping the handle cancels the request: its slot is freed on the next tick.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ferrolm::decoder::GenerateParams;
//! use ferrolm::engine::{Engine, EngineConfig, Event, GenRequest};
//! use ferrolm::model::Model;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Arc::new(Model::load("SmolLM2-135M-Instruct.Q4_1.gguf")?);
//! let engine = Engine::start(model.clone(), EngineConfig::default())?;
//! let prompt = model.tokenizer().encode("The capital of France is", true, true)?;
//! let handle = engine.submit(GenRequest { prompt, params: GenerateParams::greedy(16), ..Default::default() })?;
//! for event in handle {
//!     match event {
//!         Event::Token { text, .. } => print!("{text}"),
//!         Event::Done { text, finish, .. } => println!("{text} [{}]", finish.as_str()),
//!         Event::Error(e) => eprintln!("error: {e}"),
//!         Event::Refused(e) => eprintln!("refused: {e}"),
//!         Event::PromptLogprobs(_) | Event::Progress { .. } => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod draft;
mod events;
mod metrics;
mod plan;
pub mod prefix;
mod scheduler;
mod slot;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use events::{EventSender, RequestHandle, event_channel};
pub use metrics::{MetricsSnapshot, SlotInfo, SlotState};
pub use plan::{CustomStrategy, Demand, Plan};

use crate::decoder::{Decoder, FinishReason, GenerateParams, TokenLogprob};
use crate::kv::{CacheOptions, KvType};
use crate::model::{Model, Pooling, Relevance};

/// How the scheduler fills each tick's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BatchStrategy {
    /// Every generating slot's next token first, then prompt chunks with the room left: steady
    /// streaming for running requests, new prompts wait for room.
    #[default]
    DecodeFirst,
    /// A prompt waiting to be prefilled takes the whole tick (running requests pause): the
    /// lowest time to first token.
    PrefillFirst,
    /// Decode tokens and prompt chunks share the tick: prompts get at least half of the room.
    Balanced,
}

impl BatchStrategy {
    /// `decode-first`, `prefill-first` or `balanced`.
    pub fn name(self) -> &'static str {
        match self {
            BatchStrategy::DecodeFirst => "decode-first",
            BatchStrategy::PrefillFirst => "prefill-first",
            BatchStrategy::Balanced => "balanced",
        }
    }

    /// Parses [`BatchStrategy::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "decode-first" => Some(BatchStrategy::DecodeFirst),
            "prefill-first" => Some(BatchStrategy::PrefillFirst),
            "balanced" => Some(BatchStrategy::Balanced),
            _ => None,
        }
    }
}

/// How the engine is set up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Number of slots: sequences generating at the same time.
    pub n_slots: usize,
    /// Context size of each slot, in tokens (capped at an encoder model's positions).
    pub n_ctx: usize,
    /// Most tokens in one forward pass (prompt chunks and decode tokens together).
    pub chunk_size: usize,
    /// How a tick's batch is filled.
    pub strategy: BatchStrategy,
    /// Most requests waiting for a slot; more are refused with [`SubmitError::QueueFull`].
    pub max_queue: usize,
    /// Storage type of cached keys.
    pub type_k: KvType,
    /// Storage type of cached values.
    pub type_v: KvType,
    /// Eviction policy of each slot's cache.
    pub cache: CacheOptions,
    /// Memory budget of the shared prefix cache in bytes (0 disables it).
    pub prefix_cache_bytes: usize,
    /// Pooling of `/v1/embeddings` (`None`: the model's own, else mean).
    pub embed_pooling: Option<Pooling>,
    /// A smaller model with the same vocabulary, for requests that speculate with it
    /// ([`GenRequest::draft`]). It keeps one sequence per slot in its own cache (`n_ctx` tokens
    /// each, of `type_k`/`type_v`).
    pub draft_model: Option<Arc<Model>>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            n_slots: 4,
            n_ctx: 4096,
            chunk_size: 512,
            strategy: BatchStrategy::DecodeFirst,
            max_queue: 64,
            type_k: KvType::F16,
            type_v: KvType::F16,
            cache: CacheOptions::default(),
            prefix_cache_bytes: 1 << 30,
            embed_pooling: None,
            draft_model: None,
        }
    }
}

/// What one tick did, for an [`EngineHooks::on_tick`] observer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TickReport {
    /// Tokens in the tick's batch (decode tokens and prompt tokens).
    pub batch_tokens: usize,
    /// Prompt tokens run.
    pub prompt_tokens: usize,
    /// Tokens generated (sampled) by the tick.
    pub generated_tokens: u64,
    /// Slots still holding a request after the tick.
    pub busy_slots: usize,
    /// Requests waiting for a slot.
    pub queue_depth: usize,
    /// Time spent planning the batch (a custom strategy included).
    pub plan_time: Duration,
    /// Time of the forward pass and the sampling (and of the draft model's drafting, if any).
    pub run_time: Duration,
}

/// A per-tick observer (see [`EngineHooks::on_tick`]).
pub type TickObserver = Box<dyn FnMut(&TickReport) + Send>;

/// Extension points of the engine thread (see [`Engine::start_with_hooks`]).
#[derive(Default)]
pub struct EngineHooks {
    /// Asked for each tick's plan instead of [`EngineConfig::strategy`].
    pub strategy: Option<Box<dyn CustomStrategy>>,
    /// Called on the engine thread after each tick that ran a batch; keep it short.
    pub on_tick: Option<TickObserver>,
}

impl std::fmt::Debug for EngineHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHooks")
            .field("strategy", &self.strategy.is_some())
            .field("on_tick", &self.on_tick.is_some())
            .finish()
    }
}

/// One generation request.
#[derive(Clone, Debug, Default)]
pub struct GenRequest {
    /// The whole prompt, tokenized (BOS included when the model wants one).
    pub prompt: Vec<u32>,
    /// Sampling, stop strings, `max_tokens`, constraint.
    pub params: GenerateParams,
    /// `Some(k)`: report each generated token's log-probability and the `k` most likely
    /// alternatives (`k` may be 0).
    pub logprobs: Option<usize>,
    /// Report the prompt tokens' log-probabilities too (`echo` with `logprobs`), with the same
    /// number of alternatives. The whole prompt is then run through the model (no prefix reuse).
    pub prompt_logprobs: bool,
    /// Cancel the request when it has not finished after this long (queueing included).
    pub timeout: Option<Duration>,
    /// Speculative decoding by prompt lookup (exact: the output is the same without it).
    pub lookup: Option<PromptLookup>,
    /// Speculative decoding with the engine's draft model ([`EngineConfig::draft_model`]; exact
    /// too). Not with [`GenRequest::lookup`].
    pub draft: Option<DraftSettings>,
    /// Run the whole prompt through the model, reusing no prefix from the prefix cache
    /// (llama-server's `cache_prompt: false`). The output is the same either way, up to the
    /// rounding of a differently batched prompt.
    pub fresh_prompt: bool,
    /// Run in this slot (llama-server's `id_slot`): the request waits until that slot is free.
    /// `None`: any free slot.
    pub slot: Option<usize>,
    /// Report [`GenRequest::logprobs`] from the distribution the sampler drew from (after
    /// truncation and temperature) instead of the model's ([`Decoder::with_post_sampling`]).
    pub post_sampling_probs: bool,
    /// Send [`Event::Progress`]: when a slot takes the request, after each prompt chunk, and
    /// before each token (llama-server's `return_progress` and `timings_per_token`).
    pub progress: bool,
}

/// Speculative decoding of one request by prompt lookup (see `decoder::speculative`): with each
/// of its decode tokens, the request runs up to `max_draft` tokens that followed the latest
/// earlier occurrence of its context's last n-gram (`n` ≤ `max_ngram`), and keeps those its own
/// sampling confirms. Drafts ride on top of a tick's token budget. A request on an evicting
/// cache decodes plainly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptLookup {
    /// Longest n-gram matched (at least 1).
    pub max_ngram: usize,
    /// Most tokens drafted per pass (1 to [`MAX_DRAFT`](crate::decoder::speculative::MAX_DRAFT)).
    pub max_draft: usize,
}

impl PromptLookup {
    /// Checks the settings.
    pub fn validate(&self) -> crate::Result<()> {
        use crate::decoder::speculative::MAX_DRAFT;
        if self.max_ngram == 0 || self.max_draft == 0 || self.max_draft > MAX_DRAFT {
            return Err(crate::Error::InvalidInput(format!(
                "prompt lookup needs an n-gram of at least 1 token and 1 to {MAX_DRAFT} drafted tokens per pass (got {} and {})",
                self.max_ngram, self.max_draft
            )));
        }
        Ok(())
    }
}

/// Speculative decoding of one request with the engine's draft model: before each of its
/// decode steps the draft model, in step with the request's tokens in its own cache, drafts
/// greedily while it is confident; the drafts of all such slots run batched through the draft
/// model, then through the target in the tick's pass with the other slots' tokens, and the
/// request keeps those its own sampling confirms (as with [`PromptLookup`]). A request on an
/// evicting cache decodes plainly. The fields are llama-server's `speculative.n_max`, `n_min`
/// and `p_min`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftSettings {
    /// Most tokens drafted per pass (1 to [`MAX_DRAFT`](crate::decoder::speculative::MAX_DRAFT)).
    pub max_draft: usize,
    /// Fewest drafted tokens worth a verification pass (0 to `max_draft`): a shorter draft is
    /// dropped and the step decodes plainly.
    pub min_draft: usize,
    /// Drafting stops at the first token the draft model gives a probability below this (0 to
    /// 1; 0 always drafts `max_draft` tokens).
    pub p_min: f32,
}

impl Default for DraftSettings {
    /// llama-server's defaults (`n_max` 16 lowered to [`MAX_DRAFT`](crate::decoder::speculative::MAX_DRAFT), `n_min` 0, `p_min` 0.75).
    fn default() -> Self {
        Self { max_draft: crate::decoder::speculative::MAX_DRAFT, min_draft: 0, p_min: 0.75 }
    }
}

impl DraftSettings {
    /// Checks the settings.
    pub fn validate(&self) -> crate::Result<()> {
        use crate::decoder::speculative::MAX_DRAFT;
        if self.max_draft == 0 || self.max_draft > MAX_DRAFT || self.min_draft > self.max_draft {
            return Err(crate::Error::InvalidInput(format!(
                "a draft model drafts 1 to {MAX_DRAFT} tokens per pass, at least min_draft ≤ max_draft (got {} and {})",
                self.max_draft, self.min_draft
            )));
        }
        if !(0.0..=1.0).contains(&self.p_min) {
            return Err(crate::Error::InvalidInput(format!(
                "the draft model's minimum probability is between 0 and 1 (got {})",
                self.p_min
            )));
        }
        Ok(())
    }
}

/// Token counts and timings of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    /// Tokens generated (an end-of-generation token that ended it not counted).
    pub completion_tokens: usize,
    /// Time in the queue before a slot took the request, in milliseconds.
    pub queue_ms: f64,
    /// Time from taking a slot to the first token, in milliseconds (prefill).
    pub prompt_ms: f64,
    /// Time from the first token to the end, in milliseconds.
    pub decode_ms: f64,
    /// Tokens drafted by speculative decoding ([`GenRequest::lookup`], [`GenRequest::draft`]).
    pub draft_tokens: usize,
    /// Drafted tokens kept (part of `completion_tokens`).
    pub draft_accepted: usize,
    /// Verification passes that checked drafted tokens.
    pub draft_passes: usize,
    /// The slot that ran the request (none when it ended in the queue).
    pub slot: Option<usize>,
}

/// What the engine sends back about a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The prompt tokens' log-probabilities (the first token has none). Sent before any token,
    /// only when [`GenRequest::prompt_logprobs`] was asked.
    PromptLogprobs(Vec<Option<TokenLogprob>>),
    /// A generated token and the text it makes final (may be empty: part of a UTF-8 character,
    /// or text held back while it may still become a stop string).
    Token {
        /// The token id.
        id: u32,
        /// Text now final.
        text: String,
        /// Its log-probability, when asked.
        logprob: Option<TokenLogprob>,
    },
    /// Where the request stands, only when [`GenRequest::progress`] was asked: sent when a slot
    /// takes it (nothing processed but the cached prefix), after each prompt chunk, and before
    /// each [`Event::Token`] (its counts include that token).
    Progress {
        /// Prompt tokens in the cache so far (the cached prefix included; the prompt's length
        /// once it is all in).
        processed: usize,
        /// Counts and timings so far.
        usage: Usage,
    },
    /// The end: held-back text (empty when none), why it ended, and the counts. Nothing follows.
    Done {
        /// Remaining text.
        text: String,
        /// Why it ended.
        finish: FinishReason,
        /// Counts and timings.
        usage: Usage,
        /// The stop string that ended it, when `finish` is [`FinishReason::StopString`].
        stop_word: Option<String>,
    },
    /// The request failed inside the engine (e.g. a constraint that cannot be compiled). Nothing
    /// follows.
    Error(String),
    /// The request was queued but refused before a slot took it: the engine began
    /// [shutting down](Engine::shutdown) ([`SubmitError::ShuttingDown`]). Nothing follows.
    Refused(SubmitError),
}

/// Why a request was not accepted.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is full; try again after about this many seconds.
    #[error("the server is busy: {queued} requests are waiting; retry after {retry_after_s} s")]
    QueueFull {
        /// Requests waiting.
        queued: usize,
        /// Suggested wait (`Retry-After`).
        retry_after_s: u64,
    },
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The prompt does not fit in a slot's context.
    #[error("the prompt has {n_prompt} tokens, more than the context size of {n_ctx}")]
    ContextLength {
        /// Prompt tokens.
        n_prompt: usize,
        /// Context of a slot.
        n_ctx: usize,
    },
    /// The request cannot run (empty prompt, bad token id, bad sampler options).
    #[error("{0}")]
    Invalid(String),
    /// The request's constraint (JSON schema, grammar, regular expression) does not compile.
    #[error("{0}")]
    Constraint(String),
    /// The model cannot generate (an encoder: it only embeds).
    #[error("{0}")]
    NotGenerative(String),
}

/// Errors of [`Engine::start`] and [`Engine::embed`].
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// An error of the library (model, cache, input).
    #[error(transparent)]
    Model(#[from] crate::Error),
    /// The configuration is unusable.
    #[error("invalid engine configuration: {0}")]
    Config(String),
    /// The engine thread has stopped.
    #[error("the engine has stopped")]
    Stopped,
    /// A slot action named a slot the engine does not have.
    #[error("Invalid slot ID {0}")]
    InvalidSlot(usize),
}

/// An action on a slot's cached conversation (llama-server's `POST /slots/{id}?action=…`).
#[derive(Clone, Debug)]
pub enum SlotAction {
    /// Serialize what the slot's last request left cached ([`crate::kv::encode_state`]).
    Save,
    /// Load a saved state (bytes of a [`SlotAction::Save`]) as the slot's conversation: the
    /// next request starting with its tokens reuses its cache.
    Restore(Vec<u8>),
    /// Forget the slot's conversation.
    Erase,
}

/// What a [`SlotAction`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotOutcome {
    /// The slot's state: `n_tokens` tokens and their cache, as `bytes`.
    Saved {
        /// Tokens saved.
        n_tokens: usize,
        /// The state ([`crate::kv::decode_state`] reads it).
        bytes: Vec<u8>,
    },
    /// A state was restored.
    Restored {
        /// Tokens restored.
        n_tokens: usize,
    },
    /// The slot's conversation was forgotten.
    Erased {
        /// Tokens it held.
        n_tokens: usize,
    },
}

/// A request handed to the engine thread.
pub(crate) enum Job {
    Generate {
        id: u64,
        req: Box<GenRequest>,
        /// The request's per-token step, built (and its constraint compiled) by `submit`.
        decoder: Box<Decoder>,
        tx: EventSender,
        queued_at: std::time::Instant,
    },
    Embed {
        /// One token sequence per input (as the tokenizer gives them: BOS/EOS included).
        inputs: Vec<Vec<u32>>,
        pooling: Option<Pooling>,
        normalize: bool,
        tx: std::sync::mpsc::Sender<Result<Vec<Vec<f32>>, EngineError>>,
    },
    Slot(scheduler::SlotJob),
    Rerank {
        query: String,
        documents: Vec<String>,
        tx: std::sync::mpsc::Sender<Result<Vec<Relevance>, EngineError>>,
    },
}

/// A handle to the running engine (cheap to clone).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<scheduler::Shared>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl Engine {
    /// Starts the engine thread on `model`.
    pub fn start(model: Arc<Model>, config: EngineConfig) -> Result<Engine, EngineError> {
        Self::start_with_hooks(model, config, EngineHooks::default())
    }

    /// Starts the engine thread on `model` with a custom batch strategy and/or a per-tick
    /// observer.
    pub fn start_with_hooks(
        model: Arc<Model>,
        config: EngineConfig,
        hooks: EngineHooks,
    ) -> Result<Engine, EngineError> {
        let mut config = config;
        let mc = model.config();
        // An encoder has learned positions up to its training context and no further: a longer
        // slot context would only promise texts it refuses.
        if mc.arch.is_encoder() && mc.n_ctx_train > 0 && config.n_ctx > mc.n_ctx_train {
            tracing::info!(
                n_ctx = mc.n_ctx_train,
                asked = config.n_ctx,
                "context capped at the encoder's positions"
            );
            config.n_ctx = mc.n_ctx_train;
        }
        let (jobs, rx) = std::sync::mpsc::channel();
        let state = Arc::new(scheduler::State::default());
        state.accepting.store(true, Ordering::Release);
        let worker = scheduler::Worker::new(model.clone(), config.clone(), state.clone(), rx, hooks)?;
        std::thread::Builder::new()
            .name("ferrolm-engine".into())
            .spawn(move || worker.run())
            .map_err(|e| EngineError::Config(format!("cannot start the engine thread: {e}")))?;
        Ok(Engine { inner: Arc::new(scheduler::Shared { config, model, jobs, state }) })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.inner.model
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Checks a request, builds its [`Decoder`] (compiling its constraint, once) and queues it;
    /// its events come on the returned handle. Dropping the handle cancels the request (its slot
    /// is freed on the next tick).
    pub fn submit(&self, req: GenRequest) -> Result<RequestHandle, SubmitError> {
        let state = &self.inner.state;
        if !state.accepting.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown);
        }
        if let Err(e) = self.inner.model.check_generative() {
            return Err(SubmitError::NotGenerative(e.to_string()));
        }
        self.validate(&req)?;
        let max = self.inner.config.max_queue;
        let queued = state.queued.fetch_add(1, Ordering::AcqRel);
        if queued >= max {
            state.queued.fetch_sub(1, Ordering::AcqRel);
            state.rejected.fetch_add(1, Ordering::AcqRel);
            // About one request's time per slot-full of waiting requests.
            let retry_after_s = (queued / self.inner.config.n_slots.max(1)).clamp(1, 60) as u64;
            return Err(SubmitError::QueueFull { queued, retry_after_s });
        }
        let decoder = match Decoder::new(&self.inner.model, &req.params) {
            Ok(d) => d.with_logprobs(req.logprobs).with_post_sampling(req.post_sampling_probs),
            Err(e) => {
                state.queued.fetch_sub(1, Ordering::AcqRel);
                return Err(match e {
                    crate::Error::Constrain(_) => SubmitError::Constraint(e.to_string()),
                    _ => SubmitError::Invalid(e.to_string()),
                });
            }
        };
        let id = state.next_id.fetch_add(1, Ordering::AcqRel) + 1;
        let (tx, rx) = event_channel();
        let job = Job::Generate {
            id,
            req: Box::new(req),
            decoder: Box::new(decoder),
            tx,
            queued_at: Instant::now(),
        };
        if self.inner.jobs.send(job).is_err() {
            state.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::ShuttingDown);
        }
        Ok(rx.with_id(id))
    }

    /// What the engine refuses before queueing: an empty prompt, one longer than a slot's
    /// context (without an eviction policy), token ids outside the vocabulary, bad sampler
    /// options.
    fn validate(&self, req: &GenRequest) -> Result<(), SubmitError> {
        let cfg = &self.inner.config;
        if !cfg.cache.evicts() && req.prompt.len() > cfg.n_ctx {
            return Err(SubmitError::ContextLength { n_prompt: req.prompt.len(), n_ctx: cfg.n_ctx });
        }
        let n_vocab = self.inner.model.config().n_vocab;
        crate::sequence::check_prompt(&req.prompt, n_vocab, cfg.cache.evicts(), cfg.n_ctx)
            .map_err(|e| SubmitError::Invalid(e.to_string()))?;
        if let Some(s) = req.slot
            && s >= cfg.n_slots
        {
            return Err(SubmitError::Invalid(format!(
                "slot {s} does not exist (the engine has {})",
                cfg.n_slots
            )));
        }
        if (req.lookup.is_some() || req.draft.is_some()) && self.inner.model.config().is_recurrent() {
            return Err(SubmitError::Invalid(crate::decoder::speculative::NO_SPECULATION.into()));
        }
        if let Some(l) = &req.lookup {
            l.validate().map_err(|e| SubmitError::Invalid(e.to_string()))?;
        }
        if let Some(d) = &req.draft {
            if req.lookup.is_some() {
                return Err(SubmitError::Invalid(
                    "a request speculates by prompt lookup or with the draft model, not both".into(),
                ));
            }
            if cfg.draft_model.is_none() {
                return Err(SubmitError::Invalid("the engine has no draft model to speculate with".into()));
            }
            d.validate().map_err(|e| SubmitError::Invalid(e.to_string()))?;
        }
        req.params.sampler.validate().map_err(|e| SubmitError::Invalid(e.to_string()))
    }

    /// Embeds texts (run on the engine thread between ticks) with `pooling` (`None`: the
    /// configured one, else the model's, else mean). Each text is tokenized as a whole prompt
    /// (BOS and EOS as the tokenizer adds them). One `[n_embd]` vector per text. Blocks until
    /// done.
    pub fn embed(
        &self,
        texts: Vec<String>,
        pooling: Option<Pooling>,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let tok = self.inner.model.tokenizer();
        let inputs = texts
            .iter()
            .map(|t| tok.encode(t, true, false))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| EngineError::Model(e.into()))?;
        self.embed_tokens(inputs, pooling, normalize)
    }

    /// Embeds token sequences as given (nothing is added); see [`Engine::embed`]. An empty
    /// sequence or an id outside the vocabulary is an error.
    pub fn embed_tokens(
        &self,
        inputs: Vec<Vec<u32>>,
        pooling: Option<Pooling>,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.inner
            .jobs
            .send(Job::Embed { inputs, pooling, normalize, tx })
            .map_err(|_| EngineError::Stopped)?;
        rx.recv().map_err(|_| EngineError::Stopped)?
    }

    /// Scores each document's relevance to `query` with a reranker model (run on the engine
    /// thread between ticks; see [`crate::model::Model::rerank`]). Blocks until done.
    pub fn rerank(&self, query: String, documents: Vec<String>) -> Result<Vec<Relevance>, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.inner.jobs.send(Job::Rerank { query, documents, tx }).map_err(|_| EngineError::Stopped)?;
        rx.recv().map_err(|_| EngineError::Stopped)?
    }

    /// Runs a slot action on the engine thread between ticks; on a busy slot it waits until
    /// the slot's request ends (as llama-server defers it). Blocks until done.
    pub fn slot_action(&self, slot: usize, action: SlotAction) -> Result<SlotOutcome, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let job = scheduler::SlotJob { slot, action, tx };
        self.inner.jobs.send(Job::Slot(job)).map_err(|_| EngineError::Stopped)?;
        rx.recv().map_err(|_| EngineError::Stopped)?
    }

    /// Whether the model can rerank ([`crate::model::Model::is_reranker`]).
    pub fn is_reranker(&self) -> bool {
        self.inner.model.is_reranker()
    }

    /// The counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        let state = &self.inner.state;
        let mut m = state.published.lock().map(|p| p.metrics.clone()).unwrap_or_default();
        m.queue_depth = state.queued.load(Ordering::Acquire);
        m.requests_total = state.next_id.load(Ordering::Acquire);
        m.requests_rejected = state.rejected.load(Ordering::Acquire);
        m
    }

    /// Every slot's state as of the last tick.
    pub fn slots(&self) -> Vec<SlotInfo> {
        self.inner.state.published.lock().map(|p| p.slots.clone()).unwrap_or_default()
    }

    /// Requests queued or running now.
    pub fn in_flight(&self) -> usize {
        let state = &self.inner.state;
        state.queued.load(Ordering::Acquire) + state.running.load(Ordering::Acquire)
    }

    /// Stops accepting requests: [`Engine::submit`] answers [`SubmitError::ShuttingDown`] from
    /// now on, and requests still waiting for a slot end at once with
    /// [`Event::Refused`]`(ShuttingDown)`; running requests go on.
    pub fn shutdown(&self) {
        self.inner.state.accepting.store(false, Ordering::Release);
    }

    /// Cancels every queued and running request (each ends with [`FinishReason::Cancelled`]).
    pub fn cancel_all(&self) {
        self.inner.state.cancel_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether no request is queued or running (as of the last tick).
    pub fn is_idle(&self) -> bool {
        // The published counters count a request only after the tick that ended it.
        self.in_flight() == 0 && self.metrics().slots_busy == 0
    }

    /// Waits until no request is queued or running, at most `timeout`; whether it is idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.is_idle() {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
