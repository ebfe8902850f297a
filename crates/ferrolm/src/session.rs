//! [`Session`]: one conversation with a model, holding its own KV cache.
//!
//! A session remembers which tokens its cache holds. Each call gives the *whole* prompt; the
//! session reuses the longest cached prefix and prefills only the rest, so a multi-turn chat (or
//! any prompt that extends the previous one) costs only its new tokens.
//!
//! ```no_run
//! use ferrolm::model::Model;
//! use ferrolm::session::{GenerateParams, Session, SessionOptions, StreamEvent};
//!
//! # fn main() -> ferrolm::Result<()> {
//! let model = Model::load("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let mut session = Session::new(&model, SessionOptions::default())?;
//! let params = GenerateParams { max_tokens: Some(32), ..GenerateParams::default() };
//! for event in session.stream("The capital of France is", &params)? {
//!     match event? {
//!         StreamEvent::Token { text, .. } => print!("{text}"),
//!         StreamEvent::Finished { text, reason, .. } => println!("{text}\n[{reason:?}]"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod chat;
mod generation;
mod speculative;
mod state;
mod stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use crate::decoder::{FinishReason, GenerateParams, StopCheck, StopMatcher};
pub use chat::{ChatSession, ChatStream, encode_rendered};
pub use generation::{Completion, GenerationStats};
pub use speculative::{Drafter, MAX_DRAFT, SpeculativeOptions};
pub use state::StateIo;
pub use stream::{LogitsProcessor, StreamEvent, TokenStream};

use crate::batch::{Batch, Logits};
use crate::kv::{CacheManager, CacheOptions, EvictionStats, KvCache, KvType, SeqId};
use crate::model::Model;
use crate::sequence::{Outputs, Sequence};
use crate::{Error, Result};

/// How a [`Session`] is set up.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Context size: the most tokens (prompt and generated) the session's cache holds. With an
    /// eviction policy, the cache stays within it (and within `cache.kv_budget`) while the
    /// conversation goes on without limit.
    pub n_ctx: usize,
    /// Largest prompt chunk processed in one forward pass.
    pub n_batch: usize,
    /// Storage type of cached keys.
    pub type_k: KvType,
    /// Storage type of cached values.
    pub type_v: KvType,
    /// Eviction policy, KV budget and memory-pressure threshold.
    pub cache: CacheOptions,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            n_ctx: 4096,
            n_batch: 512,
            type_k: KvType::F16,
            type_v: KvType::F16,
            cache: CacheOptions::default(),
        }
    }
}

/// Stops a running generation from any thread. Cloning shares the flag.
///
/// A generation checks the flag before every token (and between prompt chunks) and ends with
/// [`FinishReason::Cancelled`]. Each new generation clears the flag when it starts.
#[derive(Clone, Debug, Default)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    /// Asks the current generation to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was asked for and not yet cleared.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn clear(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The sequence id a session uses in its own cache.
const SEQ: SeqId = 0;

/// One conversation with a model: a KV cache, the tokens it holds and the logits after them.
pub struct Session<'m> {
    model: &'m Model,
    opts: SessionOptions,
    kv: KvCache,
    /// The conversation so far in `kv` (its tokens, its eviction policy).
    seq: Sequence,
    /// Logits after the last token of `tokens` (empty when unknown). `[n_vocab]`
    logits: Vec<f32>,
    /// The batch and output of the last forward pass, kept so a decode step allocates nothing.
    batch: Batch,
    out: Logits,
    cancel: CancelHandle,
    /// Speculative decoding's drafter, when enabled.
    spec: Option<speculative::Speculator<'m>>,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("opts", &self.opts).field("n_tokens", &self.seq.len()).finish()
    }
}

/// What [`Session::prefill`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillStats {
    /// Prompt length in tokens.
    pub n_prompt: usize,
    /// Tokens reused from the cache.
    pub n_cached: usize,
    /// Tokens run through the model.
    pub n_prefilled: usize,
    /// Time spent in forward passes.
    pub time: Duration,
    /// Whether a cancellation stopped it before the end of the prompt.
    pub cancelled: bool,
}

impl<'m> Session<'m> {
    /// A new, empty session on `model`.
    pub fn new(model: &'m Model, opts: SessionOptions) -> Result<Self> {
        model.check_generative()?;
        if opts.n_ctx == 0 || opts.n_batch == 0 {
            return Err(Error::InvalidInput("the context size and batch size must be at least 1".into()));
        }
        let mut kv = model.new_kv_cache_typed(opts.n_ctx, opts.type_k, opts.type_v)?;
        let manager = CacheManager::new(opts.cache.clone(), model.attention_shapes(), opts.n_ctx)?;
        let seq = Sequence::new(&mut kv, SEQ, manager);
        Ok(Self {
            model,
            opts,
            kv,
            seq,
            logits: Vec::new(),
            batch: Batch::new(),
            out: Logits::default(),
            cancel: CancelHandle::default(),
            spec: None,
        })
    }

    /// The model.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The options the session was made with.
    pub fn options(&self) -> &SessionOptions {
        &self.opts
    }

    /// The tokens the cache holds (prompt and generated so far).
    pub fn tokens(&self) -> &[u32] {
        self.seq.tokens()
    }

    /// The context size.
    pub fn n_ctx(&self) -> usize {
        self.opts.n_ctx
    }

    /// A handle that stops this session's current generation from another thread.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// Forgets everything: the next prompt is prefilled from scratch.
    pub fn reset(&mut self) {
        self.seq.clear(&mut self.kv);
        self.logits.clear();
    }

    /// Bytes of KV cache memory in use.
    pub fn kv_memory_bytes(&self) -> usize {
        self.kv.memory_bytes()
    }

    /// Tokens whose keys and values are cached (fewer than [`Session::tokens`] once some were
    /// evicted).
    pub fn kv_len(&self) -> usize {
        self.seq.kv_len(&self.kv)
    }

    /// Evictions so far.
    pub fn eviction_stats(&self) -> EvictionStats {
        self.seq.eviction_stats()
    }

    /// Whether no further token fits: the cache is at its limit and the policy never evicts.
    pub fn is_full(&self) -> bool {
        self.seq.is_full(&self.kv)
    }

    /// Tokenizes `prompt` as a whole prompt (the tokenizer's BOS added, special tokens such as
    /// `<|im_start|>` recognised).
    pub fn tokenize_prompt(&self, prompt: &str) -> Result<Vec<u32>> {
        Ok(self.model.tokenizer().encode(prompt, true, true)?)
    }

    /// Makes the cache hold exactly `prompt`, reusing its longest cached prefix, and leaves the
    /// logits after the prompt's last token ready. Stops early if the session is cancelled.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<PrefillStats> {
        self.seq.check_prompt(prompt, self.model.config().n_vocab)?;
        let cached = self.seq.tokens();
        let mut common = cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        if common == prompt.len() && (common < cached.len() || self.logits.is_empty()) {
            // Everything is cached but the logits after the prompt are not: run its last token again.
            common -= 1;
        }
        if common < cached.len() && self.model.config().is_recurrent() {
            // A recurrent state holds every cached token and cannot be cut back.
            common = 0;
        }
        self.truncate(common);
        let t0 = Instant::now();
        let mut cancelled = false;
        let chunk_len = self.opts.n_batch.min(self.seq.max_chunk(true));
        for chunk in prompt[common..].chunks(chunk_len) {
            if self.cancel.is_cancelled() {
                cancelled = true;
                break;
            }
            self.run(chunk, true)?;
        }
        if !cancelled {
            self.seq.end_prompt(&mut self.kv);
            // A draft model reads the prompt now too, so that decoding starts with it cached
            // (not on an evicting cache, where the session never drafts).
            if let Some(spec) = &mut self.spec
                && !self.seq.manager().evicts()
            {
                spec.prefill(prompt)?;
            }
        }
        let stats = PrefillStats {
            n_prompt: prompt.len(),
            n_cached: common,
            n_prefilled: self.seq.len() - common,
            time: t0.elapsed(),
            cancelled,
        };
        tracing::debug!(
            n_prompt = stats.n_prompt,
            n_cached = stats.n_cached,
            ms = stats.time.as_millis() as u64,
            "prompt prefilled"
        );
        Ok(stats)
    }

    /// Generates a reply to the whole prompt `prompt` and returns it at once.
    pub fn generate(&mut self, prompt: &str, params: &GenerateParams) -> Result<Completion> {
        let tokens = self.tokenize_prompt(prompt)?;
        self.generate_tokens(&tokens, params)
    }

    /// Like [`Session::generate`] from prompt tokens.
    pub fn generate_tokens(&mut self, prompt: &[u32], params: &GenerateParams) -> Result<Completion> {
        stream::collect(&mut self.stream_tokens(prompt, params)?)
    }

    /// Starts generating a reply to the whole prompt `prompt`; the prompt is prefilled before
    /// this returns and tokens come from the returned iterator. Dropping the iterator stops the
    /// generation and leaves the session ready for the next call.
    pub fn stream(&mut self, prompt: &str, params: &GenerateParams) -> Result<TokenStream<'_, 'm>> {
        let tokens = self.tokenize_prompt(prompt)?;
        self.stream_tokens(&tokens, params)
    }

    /// Like [`Session::stream`] from prompt tokens.
    pub fn stream_tokens(&mut self, prompt: &[u32], params: &GenerateParams) -> Result<TokenStream<'_, 'm>> {
        TokenStream::start(self, prompt, params)
    }

    /// Turns speculative decoding on for the following generations (`None`: off). An error for
    /// bad settings or a draft model whose vocabulary is not this model's. See
    /// [`SpeculativeOptions`] and the module `session::speculative`.
    pub fn set_speculative(&mut self, opts: Option<SpeculativeOptions<'m>>) -> Result<()> {
        if opts.is_some() && self.model.config().is_recurrent() {
            return Err(Error::InvalidInput(crate::decoder::speculative::NO_SPECULATION.into()));
        }
        self.spec = opts.map(|o| speculative::Speculator::new(o, self.model, &self.opts)).transpose()?;
        Ok(())
    }

    /// Whether speculative decoding is on.
    pub fn is_speculative(&self) -> bool {
        self.spec.is_some()
    }

    /// Drafts tokens to follow the cached ones and `next` (not yet run): none when speculation is
    /// off, the cache evicts, or the context has no room for a draft. `out` is cleared first.
    fn draft(&mut self, next: u32, out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        let room = self.opts.n_ctx.saturating_sub(self.seq.len() + 1);
        let Some(spec) = &mut self.spec else { return Ok(()) };
        if self.seq.manager().evicts() || room == 0 {
            return Ok(());
        }
        spec.draft(self.seq.tokens(), next, room, out)
    }

    /// Runs `tokens` after the cached ones (a verification pass: no eviction); every token's
    /// logits stay in `self.out`, row by row.
    fn run_pass(&mut self, tokens: &[u32]) -> Result<()> {
        self.forward(tokens, false, Outputs::All)
    }

    /// Drops cached tokens after the first `n`, keeping the logits: the caller has put those
    /// after token `n - 1` there.
    fn rewind(&mut self, n: usize) {
        if n < self.seq.len() {
            self.seq.truncate(&mut self.kv, n);
        }
    }

    /// Drops cached tokens after the first `n`.
    fn truncate(&mut self, n: usize) {
        if n < self.seq.len() {
            self.rewind(n);
            self.logits.clear();
        }
    }

    /// Runs `tokens` after the cached ones (evicting first if the cache needs room) into
    /// `self.out`; on an error the cache is as before. `in_prompt`: the tokens are part of a
    /// prompt.
    fn forward(&mut self, tokens: &[u32], in_prompt: bool, outputs: Outputs) -> Result<()> {
        let start = self.seq.len();
        self.batch.clear();
        self.seq.feed(&mut self.kv, &mut self.batch, tokens, in_prompt, outputs)?;
        if let Err(e) = self.model.forward_into(&self.batch, &mut self.kv, &mut self.out) {
            self.truncate(start);
            return Err(e);
        }
        Ok(())
    }

    /// Runs `tokens` after the cached ones (evicting first if the cache needs room) and keeps
    /// the logits after the last. `in_prompt`: the tokens are part of a prompt.
    fn run(&mut self, tokens: &[u32], in_prompt: bool) -> Result<()> {
        self.forward(tokens, in_prompt, Outputs::Last)?;
        self.out.take_last_into(&mut self.logits);
        Ok(())
    }
}
