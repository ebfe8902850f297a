//! What the HTTP layer needs from the model and the engine, as a trait: the real
//! [`Engine`] in the server, a scripted one in the tests (so every route, its validation and its
//! response shapes are tested without a model).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ferrolm::chat::ChatTemplate;
use ferrolm::engine::{
    Engine, EngineError, GenRequest, MetricsSnapshot, RequestHandle, SlotAction, SlotInfo, SlotOutcome,
    SubmitError,
};
use ferrolm::model::{Pooling, Relevance};

use super::infill::FimTokens;

/// A boxed `Send` future.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The model and engine, as the routes see them.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Context size of a slot, in tokens.
    fn n_ctx(&self) -> usize;
    /// Whether the slots evict (then a prompt may be longer than the context).
    fn evicts(&self) -> bool;
    /// Vocabulary size.
    fn n_vocab(&self) -> usize;
    /// The BOS token, if the model has one.
    fn bos(&self) -> Option<u32>;
    /// The end-of-generation tokens (EOS, EOT, …).
    fn eog_ids(&self) -> Vec<u32> {
        Vec::new()
    }
    /// Text of the BOS and EOS tokens (the template's `bos_token`, `eos_token`).
    fn bos_eos_text(&self) -> (String, String);
    /// Tokenizes text.
    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>, String>;
    /// The bytes a token stands for.
    fn piece(&self, id: u32) -> Vec<u8>;
    /// The model's chat template, if it has one (or it does not compile: the message).
    fn chat_template(&self) -> Result<&ChatTemplate, String>;
    /// Queues a generation (its constraint is compiled here: a bad schema or grammar is a
    /// [`SubmitError::Constraint`]).
    fn submit(&self, req: GenRequest) -> Result<RequestHandle, SubmitError>;
    /// Embeds token sequences (used as given: nothing is added).
    fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
        pooling: Option<Pooling>,
        normalize: bool,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EngineError>>;
    /// The model's fill-in-the-middle tokens, when it has the prefix, suffix and middle ones.
    fn fim_tokens(&self) -> Option<FimTokens> {
        None
    }
    /// Whether the model can rerank.
    fn is_reranker(&self) -> bool {
        false
    }
    /// Scores each document's relevance to the query (a reranker model).
    fn rerank(
        &self,
        query: String,
        documents: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Relevance>, EngineError>> {
        let _ = (query, documents);
        Box::pin(async { Err(ferrolm::Error::InvalidInput("the served model cannot rerank".into()).into()) })
    }
    /// Saves, restores or erases a slot's cached conversation (waits while the slot is busy).
    /// Without an engine behind it (the fuzzing stub), every slot id is invalid.
    fn slot_action(
        &self,
        slot: usize,
        action: SlotAction,
    ) -> BoxFuture<'_, Result<SlotOutcome, EngineError>> {
        let _ = action;
        Box::pin(async move { Err(EngineError::InvalidSlot(slot)) })
    }
    /// Counters.
    fn metrics(&self) -> MetricsSnapshot;
    /// Slots.
    fn slots(&self) -> Vec<SlotInfo>;
    /// Stops accepting requests.
    fn shutdown(&self);
    /// Cancels every request.
    fn cancel_all(&self);
    /// Waits until idle, at most `timeout`.
    fn wait_idle(&self, timeout: Duration) -> BoxFuture<'_, bool>;
    /// Whether the model is released for idling (`--sleep-idle-seconds`), or being released or
    /// loaded again.
    fn is_sleeping(&self) -> bool {
        false
    }
}

/// The real engine and its model.
pub(crate) struct EngineBackend {
    engine: Engine,
    template: Result<ChatTemplate, String>,
}

impl EngineBackend {
    /// Wraps the engine; the chat template (`template_source`, else the model's) is compiled
    /// once here.
    pub(crate) fn new(engine: Engine, template_source: Option<&str>) -> EngineBackend {
        let template = match template_source {
            Some(src) => {
                ChatTemplate::new(src).map_err(|e| format!("the given chat template cannot be used: {e}"))
            }
            None => match engine.model().chat_template() {
                Ok(Some(t)) => Ok(t),
                Ok(None) => Err("the model has no chat template: use /v1/completions".to_string()),
                Err(e) => Err(format!("the model's chat template cannot be used: {e}")),
            },
        };
        EngineBackend { engine, template }
    }
}

impl Backend for EngineBackend {
    fn n_ctx(&self) -> usize {
        self.engine.config().n_ctx
    }

    fn evicts(&self) -> bool {
        self.engine.config().cache.evicts()
    }

    fn n_vocab(&self) -> usize {
        self.engine.model().tokenizer().n_vocab()
    }

    fn bos(&self) -> Option<u32> {
        self.engine.model().tokenizer().bos()
    }

    fn eog_ids(&self) -> Vec<u32> {
        self.engine.model().tokenizer().eog_ids().collect()
    }

    fn bos_eos_text(&self) -> (String, String) {
        let tok = self.engine.model().tokenizer();
        let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or_default().to_string();
        (text(tok.bos()), text(tok.eos()))
    }

    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>, String> {
        self.engine.model().tokenizer().encode(text, add_special, parse_special).map_err(|e| e.to_string())
    }

    fn piece(&self, id: u32) -> Vec<u8> {
        self.engine.model().tokenizer().token_to_piece(id)
    }

    fn chat_template(&self) -> Result<&ChatTemplate, String> {
        self.template.as_ref().map_err(Clone::clone)
    }

    fn submit(&self, req: GenRequest) -> Result<RequestHandle, SubmitError> {
        self.engine.submit(req)
    }

    fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
        pooling: Option<Pooling>,
        normalize: bool,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EngineError>> {
        let engine = self.engine.clone();
        Box::pin(async move {
            // The engine thread embeds between ticks; wait for it off the async workers.
            tokio::task::spawn_blocking(move || engine.embed_tokens(inputs, pooling, normalize))
                .await
                .map_err(|_| EngineError::Stopped)?
        })
    }

    fn is_reranker(&self) -> bool {
        self.engine.is_reranker()
    }

    fn fim_tokens(&self) -> Option<FimTokens> {
        let s = self.engine.model().tokenizer().special_ids();
        Some(FimTokens { pre: s.fim_pre?, suf: s.fim_suf?, mid: s.fim_mid?, rep: s.fim_rep, sep: s.fim_sep })
    }

    fn rerank(
        &self,
        query: String,
        documents: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Relevance>, EngineError>> {
        let engine = self.engine.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || engine.rerank(query, documents))
                .await
                .map_err(|_| EngineError::Stopped)?
        })
    }

    fn slot_action(
        &self,
        slot: usize,
        action: SlotAction,
    ) -> BoxFuture<'_, Result<SlotOutcome, EngineError>> {
        let engine = self.engine.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || engine.slot_action(slot, action))
                .await
                .map_err(|_| EngineError::Stopped)?
        })
    }

    fn metrics(&self) -> MetricsSnapshot {
        self.engine.metrics()
    }

    fn slots(&self) -> Vec<SlotInfo> {
        self.engine.slots()
    }

    fn shutdown(&self) {
        self.engine.shutdown();
    }

    fn cancel_all(&self) {
        self.engine.cancel_all();
    }

    fn wait_idle(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let end = tokio::time::Instant::now() + timeout;
            while !self.engine.is_idle() {
                if tokio::time::Instant::now() >= end {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            true
        })
    }
}

/// Tokenizes a whole prompt: BOS as the tokenizer adds it, special tokens parsed, and a doubled
/// BOS (a template or prompt that writes the BOS text itself) collapsed to one.
pub(crate) fn encode_prompt(backend: &dyn Backend, text: &str) -> Result<Vec<u32>, String> {
    let mut tokens = backend.tokenize(text, true, true)?;
    if let Some(bos) = backend.bos()
        && tokens.len() >= 2
        && tokens[0] == bos
        && tokens[1] == bos
    {
        tokens.remove(0);
    }
    Ok(tokens)
}

/// A token's text (invalid UTF-8 replaced).
pub(crate) fn piece_text(backend: &dyn Backend, id: u32) -> String {
    String::from_utf8_lossy(&backend.piece(id)).into_owned()
}

/// Shared handle.
pub(crate) type SharedBackend = Arc<dyn Backend>;
