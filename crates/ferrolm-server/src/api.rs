//! The OpenAI-compatible HTTP API over the [engine](ferrolm::engine).
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/embeddings`,
//! `GET /v1/models` (and `/v1/models/{id}`), `POST /tokenize`, `POST /detokenize`,
//! `GET /health`, `GET /metrics` (Prometheus), `GET /slots` and `GET /` (a web page). The
//! `/v1` routes also answer without the prefix, as llama-server's do.
//!
//! Requests take OpenAI's fields plus every sampler of the library under llama-server's names
//! (`top_k`, `min_p`, `dry_multiplier`, …). A sampler field that is absent keeps the server's
//! default, [`ServerConfig::sampler`]: the library's (llama.cpp's) defaults — temperature 0.8,
//! top-k 40, top-p 0.95, min-p 0.05 — unless the command line changed them, rather than OpenAI's
//! temperature 1 and top-p 1 over the whole vocabulary, which small local models answer badly
//! (llama-server makes the same choice). Chat has no default `max_tokens` (until the end of
//! generation or a full context); completions default to 16 as OpenAI's do.
//!
//! Errors have OpenAI's shape `{"error": {"message", "type", "param", "code"}}`.

mod anthropic;
mod backend;
mod chat;
mod completions;
mod cors;
mod error;
mod events_sse;
mod generic_tools;
mod infill;
mod json;
mod metrics;
mod multi;
mod native;
mod params;
mod predict;
mod prompt;
mod response;
mod responses;
mod routes;
mod server_tools;
mod sleep;
mod slots;
mod stream;
mod stream_session;
mod tools;

/// Entry point of the `http_request` fuzz target (`fuzz/`); not a stable API.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ferrolm::engine::DraftSettings;
use ferrolm::model::Pooling;
use ferrolm::sampling::SamplerParams;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::conn::{self, ConnLimits};

pub use error::ApiError;
pub use multi::{
    CatalogEntry, LoadFn, ModelsConfig, check_catalog, read_models_preset, scan_models_dir, serve_models,
};
pub(crate) use routes::MAX_HEADERS;
pub use server_tools::{
    McpConfigError, McpServerConfig, ServerToolsConfig, builtin_tool_names, parse_mcp_servers,
};

use backend::{Backend, EngineBackend, SharedBackend};

use ferrolm::engine::Engine;

/// How long the connections still open after a shutdown's drain get to end.
const FINAL_GRACE: Duration = Duration::from_secs(5);

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on; several, comma-separated, share the port.
    pub host: String,
    /// Port (0: any free port; the one chosen is printed).
    pub port: u16,
    /// The served model's id (`model` in requests and responses).
    pub model_id: String,
    /// The names given with `--alias` (the id among them when it is one of them): other names
    /// the model answers to, listed as its `aliases` in `/v1/models` (llama-server's field).
    pub aliases: Vec<String>,
    /// `--tags`: informational labels listed as the model's `tags` in `/v1/models`.
    pub tags: Vec<String>,
    /// When set, every route but `/health` and `/` needs `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// Origins allowed by CORS (`*` for any, `localhost` for any origin on this machine);
    /// empty: no CORS headers (`ferrolm serve` passes `*`, llama-server's default).
    pub cors_origins: Vec<String>,
    /// Whether CORS allows credentials (then `*` echoes the request's origin).
    pub cors_credentials: bool,
    /// `Access-Control-Allow-Methods` of a CORS preflight.
    pub cors_methods: String,
    /// `Access-Control-Allow-Headers` of a CORS preflight.
    pub cors_headers: String,
    /// Largest request body in bytes (413 above).
    pub max_body_bytes: usize,
    /// Longest a request may run (queueing included); a request's `timeout` may lower it.
    /// Zero: no limit.
    pub timeout: Duration,
    /// On shutdown, how long running requests get to finish before they are cancelled.
    pub shutdown_timeout: Duration,
    /// Sampling defaults for the fields a request leaves out.
    pub sampler: SamplerParams,
    /// Pooling of `/v1/embeddings` (`None`: the model's, else mean).
    pub embeddings_pooling: Option<Pooling>,
    /// With a draft model in the engine (`--model-draft`): the draft settings of requests that
    /// do not ask for prompt lookup, which their `speculative.n_max`, `speculative.n_min` and
    /// `speculative.p_min` override (as llama-server's). `None`: no draft model.
    pub draft: Option<DraftSettings>,
    /// Connection limits: header, body and idle timeouts, connection caps.
    pub connections: ConnLimits,
    /// Most tokens a request generates, and the number it generates when it does not say
    /// (llama-server's `--n-predict`). `None`: each endpoint's default, no cap.
    pub n_predict: Option<usize>,
    /// A chat template (Jinja source) used instead of the model's (`--chat-template-file`).
    pub chat_template: Option<String>,
    /// The model's file, shown by `/props`.
    pub model_path: Option<String>,
    /// Thinking (`--reasoning`): `Some(false)` renders every chat with `enable_thinking` false
    /// (and closes a thinking block the template opens anyway); `Some(true)` or `None` (auto)
    /// with `enable_thinking` true, as llama.cpp passes it; a request's
    /// `chat_template_kwargs.enable_thinking` wins.
    pub reasoning: Option<bool>,
    /// `--reasoning-format`: whether a thinking model's reasoning goes to `reasoning_content`
    /// (`deepseek`, the default) or stays in the content (`none`).
    pub reasoning_to_field: bool,
    /// Most tokens of reasoning per chat request on a thinking model (`--reasoning-budget`);
    /// `None`: no limit. A request's `reasoning_budget_tokens` wins.
    pub reasoning_budget: Option<usize>,
    /// Written before the closing tag when a reasoning budget runs out
    /// (`--reasoning-budget-message`).
    pub reasoning_budget_message: String,
    /// Folder of slot save files (`--slot-save-path`); `None`: `POST /slots/{id}` is refused.
    pub slot_save_path: Option<std::path::PathBuf>,
    /// Whether `GET /metrics` answers (`--no-metrics`: 501).
    pub metrics: bool,
    /// Whether `GET /` serves the chat page (`--no-ui`: 404).
    pub web_ui: bool,
    /// `--verbose`: whole chat and completion answers carry llama-server's `__verbose` object
    /// unless the request's `verbose` is false.
    pub verbose: bool,
    /// Whether `GET /slots` answers (`--no-slots`: 501).
    pub slots: bool,
    /// Release the model after this long without a task, and load it again on the next one
    /// (llama-server's `--sleep-idle-seconds`; needs a way to reload it: [`serve_reloadable`],
    /// or a multi-model server). `None`: never.
    pub sleep_idle: Option<Duration>,
    /// llama-server's experimental server tools, MCP servers and CORS proxy (`/tools`,
    /// `/cors-proxy`); off by default.
    pub server_tools: ServerToolsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8080,
            model_id: "ferrolm".into(),
            aliases: Vec::new(),
            tags: Vec::new(),
            api_key: None,
            cors_origins: Vec::new(),
            cors_credentials: true,
            cors_methods: "GET, POST, DELETE, OPTIONS".into(),
            cors_headers: "*".into(),
            max_body_bytes: 8 << 20,
            timeout: Duration::from_secs(600),
            shutdown_timeout: Duration::from_secs(30),
            sampler: SamplerParams::default(),
            embeddings_pooling: None,
            draft: None,
            connections: ConnLimits::default(),
            n_predict: None,
            chat_template: None,
            model_path: None,
            reasoning: None,
            reasoning_to_field: true,
            reasoning_budget: None,
            reasoning_budget_message: String::new(),
            slot_save_path: None,
            metrics: true,
            web_ui: true,
            verbose: false,
            slots: true,
            sleep_idle: None,
            server_tools: ServerToolsConfig::default(),
        }
    }
}

impl ServerConfig {
    /// The pooling of `/v1/embeddings`: `--embeddings-pooling`, else the model's, else mean.
    pub fn pooling_for(&self, model_default: Option<Pooling>) -> Pooling {
        self.embeddings_pooling.or(model_default).unwrap_or_default()
    }

    /// The id and the aliases.
    pub fn model_names(&self) -> Vec<String> {
        let mut names = vec![self.model_id.clone()];
        for a in &self.aliases {
            if !names.contains(a) {
                names.push(a.clone());
            }
        }
        names
    }

    /// The `model` a response names. A request may name any model, as with llama-server: the
    /// one model is served whatever the name, and the answer names it by the name asked when
    /// that is one of its names, else by its id.
    pub(crate) fn answer_model(&self, requested: Option<String>) -> String {
        requested.filter(|m| self.model_names().contains(m)).unwrap_or_else(|| self.model_id.clone())
    }

    /// The most tokens a request generates, as llama-server decides it: the request's own
    /// limit wins (even above `--n-predict`); a request without one, or with `n_predict: -1`
    /// (`asked_default`), gets `--n-predict`; with no `--n-predict` either, `-1` runs until the
    /// context is full (`asked`, the context) and no limit at all gets `endpoint_default`.
    pub(crate) fn generation_limit(
        &self,
        asked: Option<usize>,
        asked_default: bool,
        endpoint_default: Option<usize>,
    ) -> Option<usize> {
        match (asked, self.n_predict) {
            (Some(_), Some(d)) if asked_default => Some(d),
            (Some(a), _) => Some(a),
            (None, Some(d)) => Some(d),
            (None, None) => endpoint_default,
        }
    }

    /// The server's request timeout (`None`: none).
    pub(crate) fn request_timeout(&self) -> Option<Duration> {
        (!self.timeout.is_zero()).then_some(self.timeout)
    }
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// `host:port`.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// An I/O error while serving.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The configuration is unusable (a CORS origin that is not a header value, …).
    #[error("invalid server configuration: {0}")]
    Config(String),
}

/// What every handler gets.
#[derive(Clone)]
pub(crate) struct AppState {
    pub backend: SharedBackend,
    pub cfg: Arc<ServerConfig>,
    /// Start time (Unix seconds), the `created` of `/v1/models`.
    pub created: u64,
    /// With `--sleep-idle-seconds`: the sleeper, which `backend` is too.
    pub sleep: Option<Arc<sleep::Sleeper>>,
    /// `/metrics`' state between scrapes (llama-server's throughput buckets).
    pub scrapes: Arc<metrics::Scrapes>,
}

impl AppState {
    /// The state of a server over `backend`, which does not sleep.
    pub(crate) fn new(backend: SharedBackend, cfg: Arc<ServerConfig>, created: u64) -> AppState {
        AppState { backend, cfg, created, sleep: None, scrapes: Arc::default() }
    }

    /// The state of a server over `first`, released after `cfg.sleep_idle` without a task and
    /// loaded again with `reload` (a server that does not sleep without either).
    pub(crate) fn sleepy(
        first: SharedBackend,
        reload: Option<sleep::BackendReload>,
        cfg: Arc<ServerConfig>,
        created: u64,
    ) -> AppState {
        match (cfg.sleep_idle, reload) {
            (Some(idle), Some(reload)) => {
                let sleeper = sleep::Sleeper::start(first, idle, reload);
                let backend: SharedBackend = sleeper.clone();
                AppState { sleep: Some(sleeper), ..AppState::new(backend, cfg, created) }
            }
            _ => AppState::new(first, cfg, created),
        }
    }
}

/// A JSON response.
pub(crate) fn json_response(status: StatusCode, v: &serde_json::Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A prompt of `n_prompt` tokens must leave room for a token in a slot's context (or fit
/// exactly when nothing is generated), unless the slots evict.
pub(crate) fn check_context(
    backend: &dyn Backend,
    n_prompt: usize,
    max_tokens: Option<usize>,
) -> Result<(), ApiError> {
    let n_ctx = backend.n_ctx();
    let need = n_prompt + usize::from(max_tokens != Some(0));
    if backend.evicts() || need <= n_ctx {
        return Ok(());
    }
    Err(ApiError::context_size(
        format!(
            "the prompt has {n_prompt} tokens, which leaves no room in the context of {n_ctx} tokens \
             (prompt and reply together)"
        ),
        n_prompt,
        n_ctx,
    ))
}

/// Loads the served model again and starts its engine, after a sleep (`--sleep-idle-seconds`).
pub type ReloadFn = Arc<dyn Fn() -> Result<Engine, String> + Send + Sync>;

/// [`serve`] with a way to load the model again: with [`ServerConfig::sleep_idle`] set, the
/// model is released after that long without a task and `reload` loads it on the next one.
pub async fn serve_reloadable(
    engine: Engine,
    reload: ReloadFn,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let listeners = bind(&cfg).await?;
    let template = cfg.chat_template.clone();
    let backend: SharedBackend = Arc::new(EngineBackend::new(engine, template.as_deref()));
    let reload: sleep::BackendReload = Arc::new(move || {
        let engine = reload()?;
        Ok(Arc::new(EngineBackend::new(engine, template.as_deref())) as SharedBackend)
    });
    run_sleepy(listeners, backend, Some(reload), cfg, shutdown).await
}

/// Binds `cfg.host:cfg.port` (every address of a comma-separated `host`) and serves until
/// `shutdown` completes (see [`serve_listener`]). The model never sleeps (see
/// [`serve_reloadable`]).
pub async fn serve(
    engine: Engine,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let listeners = bind(&cfg).await?;
    let backend: SharedBackend = Arc::new(EngineBackend::new(engine, cfg.chat_template.as_deref()));
    run(listeners, backend, cfg, shutdown).await
}

/// Binds `cfg.host:cfg.port`: each address of a comma-separated `host` (llama-server's
/// `--host 127.0.0.1,::1`), all on one port (with port 0, the one the first address got).
pub(crate) async fn bind(cfg: &ServerConfig) -> Result<Vec<TcpListener>, ServerError> {
    let mut port = cfg.port;
    let mut out = Vec::new();
    for host in cfg.host.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let listener = TcpListener::bind((host, port))
            .await
            .map_err(|source| ServerError::Bind { addr: format!("{host}:{port}"), source })?;
        port = listener.local_addr()?.port();
        out.push(listener);
    }
    if out.is_empty() {
        let source = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to listen on");
        return Err(ServerError::Bind { addr: cfg.host.clone(), source });
    }
    Ok(out)
}

/// Serves on a bound listener until `shutdown` completes. Prints `listening on http://ADDR`
/// once (stdout and the log). On shutdown: the engine stops taking requests, the server stops
/// accepting connections, running requests get up to `cfg.shutdown_timeout` to finish, then the
/// rest are cancelled; returns `Ok` when the connections are closed.
pub async fn serve_listener(
    listener: TcpListener,
    engine: Engine,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let backend: SharedBackend = Arc::new(EngineBackend::new(engine, cfg.chat_template.as_deref()));
    run(vec![listener], backend, cfg, shutdown).await
}

/// [`serve_listener`] on any backend and any number of listeners.
pub(crate) async fn run(
    listeners: Vec<TcpListener>,
    backend: SharedBackend,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    run_sleepy(listeners, backend, None, cfg, shutdown).await
}

/// [`run`], the model released when idle and loaded again with `reload` (see
/// [`ServerConfig::sleep_idle`]).
pub(crate) async fn run_sleepy(
    listeners: Vec<TcpListener>,
    backend: SharedBackend,
    reload: Option<sleep::BackendReload>,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (shutdown_timeout, limits) = (cfg.shutdown_timeout, cfg.connections);
    let tools = start_tools(&cfg).await?;
    let shutdown = stop_tools_on(shutdown, tools.clone());
    let state = AppState::sleepy(backend, reload, Arc::new(cfg), response::unix_now());
    let backend = state.backend.clone();
    let app = routes::router_with_tools(state, tools.clone())?;
    let served = serve_app(listeners, app, &OneModel(backend), limits, shutdown_timeout, shutdown).await;
    if let Some(t) = tools {
        t.shutdown();
    }
    served
}

/// Starts the server tools and MCP servers of `cfg` (`None`: none configured).
pub(crate) async fn start_tools(
    cfg: &ServerConfig,
) -> Result<Option<Arc<server_tools::ServerTools>>, ServerError> {
    server_tools::ServerTools::start(&cfg.server_tools).await.map_err(ServerError::Config)
}

/// `shutdown`, which also stops running tool calls and the MCP servers the moment it
/// completes, so that a slow call does not hold up the drain.
pub(crate) async fn stop_tools_on(
    shutdown: impl Future<Output = ()> + Send + 'static,
    tools: Option<Arc<server_tools::ServerTools>>,
) {
    shutdown.await;
    if let Some(t) = tools {
        t.shutdown();
    }
}

/// What a graceful shutdown needs from what runs the requests: one model's engine, or every
/// model loaded by a multi-model server.
pub(crate) trait Drain: Send + Sync {
    /// Stops taking requests (queued ones are refused, running ones go on).
    fn shutdown(&self);
    /// Cancels every queued and running request.
    fn cancel_all(&self);
    /// Resolves `true` once nothing runs, `false` after `timeout`.
    fn wait_idle(&self, timeout: Duration) -> futures_util::future::BoxFuture<'_, bool>;
}

/// The one model of a single-model server.
struct OneModel(SharedBackend);

impl Drain for OneModel {
    fn shutdown(&self) {
        self.0.shutdown();
    }
    fn cancel_all(&self) {
        self.0.cancel_all();
    }
    fn wait_idle(&self, timeout: Duration) -> futures_util::future::BoxFuture<'_, bool> {
        self.0.wait_idle(timeout)
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then drains: the engine(s) stop taking
/// requests, the server stops accepting connections, running requests get `shutdown_timeout`
/// to finish, then the rest are cancelled.
pub(crate) async fn serve_app(
    listeners: Vec<TcpListener>,
    app: axum::Router,
    drain: &dyn Drain,
    limits: ConnLimits,
    shutdown_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    for l in &listeners {
        let local = l.local_addr()?;
        tracing::info!(%local, "listening");
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{local}");
        let _ = out.flush();
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut done = conn::spawn_server(listeners, app, limits, stop_rx);
    tokio::select! {
        _ = conn::flipped(&mut done) => return Ok(()),
        _ = shutdown => {}
    }
    tracing::info!("shutting down: refusing new requests, letting running ones finish");
    drain.shutdown();
    let _ = stop_tx.send(true);
    let idle = tokio::select! {
        _ = conn::flipped(&mut done) => return Ok(()),
        idle = drain.wait_idle(shutdown_timeout) => idle,
    };
    if !idle {
        tracing::warn!(
            ?shutdown_timeout,
            "requests still running after the shutdown timeout: cancelling them"
        );
        drain.cancel_all();
    }
    match tokio::time::timeout(FINAL_GRACE, conn::flipped(&mut done)).await {
        Ok(_) => Ok(()),
        Err(_) => {
            tracing::warn!("closing connections still open");
            Ok(())
        }
    }
}
