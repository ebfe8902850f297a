//! Many models in one server (`ferrolm serve --models-dir DIR`), as Ollama and llama-server's
//! router mode serve them.
//!
//! The catalog is fixed at start: every GGUF file of the folder (the first shard of a split
//! model) and every Hugging Face model folder in it, each under its file or folder name. A
//! request names its model in the body's `model` (or `?model=` on a GET); the model is loaded on
//! first use and gets a complete single-model server of its own (its engine, slots and prefix
//! cache, [`routes::routes`]), to which the request is passed unchanged.
//!
//! Invariants:
//! - at most `max_loaded` models are loaded or loading, and the loaded ones' cost (weight files
//!   plus KV capacity) stays within `memory_budget` when one is set;
//! - to make room, the least recently used models with no request in flight are unloaded; when
//!   every loaded model is busy, the request waits, first come first served, until one is idle
//!   (at most the request timeout, then 503 with `Retry-After`); a waiting client that goes
//!   away leaves the queue without costing any model its place;
//! - concurrent requests for a model that is loading wait for the same load;
//! - a request in flight (its response body included, for streams) keeps its model loaded;
//! - with `--sleep-idle-seconds`, a loaded model idle that long sleeps ([`super::sleep`]): its
//!   memory is released but it keeps its place (and its cost, so that waking it never exceeds
//!   the budget) until it is unloaded; its status is `sleeping`, `/props?model=` says
//!   `is_sleeping`, and its next task loads it again.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ferrolm::engine::Engine;
use ferrolm::model::Pooling;
use futures_util::StreamExt;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tower::ServiceExt;

use super::backend::{EngineBackend, SharedBackend};
use super::error::ApiError;
use super::sleep::BackendReload;
use super::stream_session;
use super::{AppState, Drain, ServerConfig, ServerError, json_response, metrics, response, routes};

/// One model the server can load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The name requests give in `model`.
    pub id: String,
    /// The GGUF file (the first shard of a split model) or the Hugging Face folder.
    pub path: PathBuf,
    /// Bytes of its weight files.
    pub bytes: u64,
}

/// Loads a model file or folder and starts its engine (the binary knows the load options and
/// the engine settings).
pub type LoadFn = Arc<dyn Fn(&Path) -> Result<Engine, String> + Send + Sync>;

/// The models of a multi-model server and its limits.
pub struct ModelsConfig {
    /// What can be loaded ([`scan_models_dir`]).
    pub catalog: Vec<CatalogEntry>,
    /// Most models loaded at once (at least 1).
    pub max_loaded: usize,
    /// Most bytes of loaded models (weights plus KV capacity); `None`: no limit.
    pub memory_budget: Option<u64>,
    /// How a model is loaded.
    pub load: LoadFn,
    /// Whether a request loads the model it names (`--no-models-autoload`: only
    /// `POST /models/load` does).
    pub autoload: bool,
}

/// The catalog of `dir`: each `*.gguf` file (a split model once, by its `-00001-of-N` file,
/// under the name without that suffix) and each sub-folder holding a `config.json`, sorted by
/// name. Refuses an empty folder and two models with the same name.
pub fn scan_models_dir(dir: &Path) -> Result<Vec<CatalogEntry>, ServerError> {
    let io = |e: std::io::Error| ServerError::Config(format!("--models-dir {}: {e}", dir.display()));
    let mut out: Vec<CatalogEntry> = Vec::new();
    // Split models: name -> (first shard, bytes of all shards).
    let mut splits: HashMap<String, (Option<PathBuf>, u64)> = HashMap::new();
    for item in std::fs::read_dir(dir).map_err(io)? {
        let item = item.map_err(io)?;
        let path = item.path();
        let name = item.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if path.join("config.json").is_file() {
                out.push(CatalogEntry { id: name, bytes: folder_bytes(&path), path });
            }
            continue;
        }
        let Some(stem) = name.strip_suffix(".gguf").or_else(|| name.strip_suffix(".GGUF")) else {
            continue;
        };
        let bytes = std::fs::metadata(&path).map_err(io)?.len();
        match split_part(stem) {
            Some((base, k)) => {
                let split = splits.entry(base.to_string()).or_default();
                split.1 += bytes;
                if k == 1 {
                    split.0 = Some(path);
                }
            }
            None => out.push(CatalogEntry { id: stem.to_string(), path, bytes }),
        }
    }
    for (id, (first, bytes)) in splits {
        if let Some(path) = first {
            out.push(CatalogEntry { id, path, bytes });
        }
    }
    if out.is_empty() {
        return Err(ServerError::Config(format!(
            "--models-dir {}: no GGUF file or Hugging Face model folder in it",
            dir.display()
        )));
    }
    check_catalog(out).map_err(|m| ServerError::Config(format!("--models-dir {}: {m}", dir.display())))
}

/// The catalog of a models preset, llama-server's INI file: a `[name]` section per model with
/// `model = PATH` (relative to the file's folder). Other keys (llama-server's per-model flags)
/// are refused by name, as is a section without `model`.
pub fn read_models_preset(path: &Path) -> Result<Vec<CatalogEntry>, ServerError> {
    let bad = |m: String| ServerError::Config(format!("--models-preset {}: {m}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out: Vec<CatalogEntry> = Vec::new();
    let mut section: Option<(String, Option<PathBuf>)> = None;
    let mut finish = |section: Option<(String, Option<PathBuf>)>| -> Result<(), ServerError> {
        let Some((id, file)) = section else { return Ok(()) };
        let file = file.ok_or_else(|| bad(format!("[{id}] has no `model = PATH`")))?;
        let bytes = if file.is_dir() {
            folder_bytes(&file)
        } else {
            std::fs::metadata(&file).map_err(|e| bad(format!("[{id}] {}: {e}", file.display())))?.len()
        };
        out.push(CatalogEntry { id, path: file, bytes });
        Ok(())
    };
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            finish(section.take())?;
            section = Some((name.trim().to_string(), None));
            continue;
        }
        let (key, value) =
            line.split_once('=').ok_or_else(|| bad(format!("line {}: not `key = value`", n + 1)))?;
        let Some((id, file)) = section.as_mut() else {
            return Err(bad(format!("line {}: a key before any [section]", n + 1)));
        };
        match key.trim() {
            "model" | "m" => *file = Some(base.join(value.trim())),
            other => {
                return Err(bad(format!(
                    "[{id}] key `{other}` is not supported (ferrolm's presets take `model = PATH`)"
                )));
            }
        }
    }
    finish(section.take())?;
    if out.is_empty() {
        return Err(bad("no [model] section".into()));
    }
    Ok(out)
}

/// Sorts a catalog by name; refuses two models of the same name.
pub fn check_catalog(mut catalog: Vec<CatalogEntry>) -> Result<Vec<CatalogEntry>, String> {
    catalog.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(w) = catalog.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(format!(
            "two models are named '{}' ({} and {})",
            w[0].id,
            w[0].path.display(),
            w[1].path.display()
        ));
    }
    Ok(catalog)
}

/// `NAME-0000K-of-0000N` (five digits each, as `gguf-split` writes) -> (`NAME`, K).
fn split_part(stem: &str) -> Option<(&str, u32)> {
    let (rest, n) = stem.rsplit_once("-of-")?;
    let (base, k) = rest.rsplit_once('-')?;
    let five_digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !(five_digits(k) && five_digits(n)) || base.is_empty() {
        return None;
    }
    Some((base, k.parse().ok()?))
}

/// Bytes of the weight files of a Hugging Face folder.
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(items) = std::fs::read_dir(dir) else { return 0 };
    items
        .flatten()
        .filter(|i| {
            let n = i.file_name().to_string_lossy().into_owned();
            n.ends_with(".safetensors") || n.ends_with(".bin") || n.ends_with(".gguf")
        })
        .filter_map(|i| std::fs::metadata(i.path()).ok().map(|m| m.len()))
        .sum()
}

/// A loaded model: its server and what eviction needs.
struct Loaded {
    app: Router,
    backend: SharedBackend,
    /// Weight bytes plus the KV capacity of its slots.
    cost: u64,
    /// Requests in flight (their response bodies included).
    in_flight: Arc<AtomicUsize>,
    /// The table's clock at its last use.
    last_used: AtomicU64,
}

/// Loads a model into a backend, with the pooling its metadata asks for (crate-private: tests
/// load fakes).
pub(crate) type BackendLoadFn =
    Arc<dyn Fn(&Path) -> Result<(SharedBackend, Option<Pooling>), String> + Send + Sync>;

type LoadFuture = Shared<BoxFuture<'static, Result<Arc<Loaded>, String>>>;

enum Slot {
    Loading(LoadFuture),
    Ready(Arc<Loaded>),
}

/// The multi-model server's state.
pub(crate) struct Models {
    base: Arc<ServerConfig>,
    catalog: Vec<CatalogEntry>,
    max_loaded: usize,
    memory_budget: Option<u64>,
    load: BackendLoadFn,
    autoload: bool,
    created: u64,
    table: Mutex<HashMap<String, Slot>>,
    clock: AtomicU64,
    accepting: std::sync::atomic::AtomicBool,
    loads: AtomicU64,
    unloads: AtomicU64,
    load_failures: AtomicU64,
    /// Tickets of the requests waiting for room, oldest first.
    queue: Mutex<VecDeque<u64>>,
    next_ticket: AtomicU64,
    /// Woken when a model goes idle or a waiter leaves the queue.
    idle: Arc<Notify>,
}

/// Keeps a model loaded while a request (or its response body) lives.
struct InFlight {
    count: Arc<AtomicUsize>,
    idle: Arc<Notify>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// A request's place in the queue for room; leaving (served, failed or gone) lets the next in.
struct Ticket {
    models: Arc<Models>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.models.queue.lock().unwrap_or_else(|e| e.into_inner()).retain(|t| *t != self.id);
        self.models.idle.notify_waiters();
    }
}

impl Models {
    fn entry(&self, id: &str) -> Option<&CatalogEntry> {
        self.catalog.iter().find(|e| e.id == id)
    }

    fn ready(&self) -> Vec<(String, Arc<Loaded>)> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = table
            .iter()
            .filter_map(|(id, s)| match s {
                Slot::Ready(l) => Some((id.clone(), l.clone())),
                Slot::Loading(_) => None,
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The model's server, loading it first when needed, and a guard that keeps it loaded.
    async fn acquire(self: &Arc<Self>, entry: &CatalogEntry) -> Result<(Arc<Loaded>, InFlight), ApiError> {
        let deadline = self.base.request_timeout().map(|t| tokio::time::Instant::now() + t);
        let mut ticket: Option<Ticket> = None;
        loop {
            // Created before looking, so that a model going idle after the look still wakes us.
            let woken = self.idle.notified();
            let pending = {
                let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
                match table.get(&entry.id) {
                    Some(Slot::Ready(l)) => return Ok(self.enter(l)),
                    Some(Slot::Loading(f)) => Some(f.clone()),
                    None => {
                        if !self.accepting.load(Ordering::Acquire) {
                            return Err(ApiError::busy("the server is shutting down", 1));
                        }
                        if self.first_in_line(ticket.as_ref()) && self.make_room(&mut table, entry)? {
                            let f = self.start_load(entry);
                            table.insert(entry.id.clone(), Slot::Loading(f.clone()));
                            Some(f)
                        } else {
                            None
                        }
                    }
                }
            };
            let Some(pending) = pending else {
                // Every loaded model is busy (or others came first): wait in line.
                if ticket.is_none() {
                    ticket = Some(self.take_ticket());
                }
                let waited = match deadline {
                    Some(d) => tokio::time::timeout_at(d, woken).await.is_ok(),
                    None => {
                        woken.await;
                        true
                    }
                };
                if !waited {
                    return Err(ApiError::busy(
                        format!("cannot load model '{}': every loaded model stayed busy", entry.id),
                        2,
                    ));
                }
                continue;
            };
            drop(ticket.take());
            let done = pending.await;
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            let still_loading = matches!(table.get(&entry.id), Some(Slot::Loading(_)));
            match done {
                Ok(l) if still_loading => {
                    // Entered under the same lock: nothing can unload it before its first use.
                    let entered = self.enter(&l);
                    table.insert(entry.id.clone(), Slot::Ready(l));
                    return Ok(entered);
                }
                Ok(_) => {}
                Err(e) => {
                    if still_loading {
                        table.remove(&entry.id);
                        self.idle.notify_waiters();
                    }
                    return Err(ApiError::internal(format!("cannot load model '{}': {e}", entry.id)));
                }
            }
        }
    }

    /// Counts a request on a loaded model (call with the table locked).
    fn enter(&self, l: &Arc<Loaded>) -> (Arc<Loaded>, InFlight) {
        l.in_flight.fetch_add(1, Ordering::AcqRel);
        l.last_used.store(self.clock.fetch_add(1, Ordering::AcqRel), Ordering::Release);
        (l.clone(), InFlight { count: l.in_flight.clone(), idle: self.idle.clone() })
    }

    /// Whether a request holding `ticket` may make room now: it is first in the queue, or
    /// (without a ticket) nobody waits.
    fn first_in_line(&self, ticket: Option<&Ticket>) -> bool {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        match ticket {
            Some(t) => queue.front() == Some(&t.id),
            None => queue.is_empty(),
        }
    }

    fn take_ticket(self: &Arc<Self>) -> Ticket {
        let id = self.next_ticket.fetch_add(1, Ordering::AcqRel);
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(id);
        Ticket { models: self.clone(), id }
    }

    /// Starts loading `entry` on a blocking thread; the shared future gives its server.
    fn start_load(self: &Arc<Self>, entry: &CatalogEntry) -> LoadFuture {
        let (me, entry) = (self.clone(), entry.clone());
        let task = tokio::task::spawn_blocking({
            let (load, path) = (me.load.clone(), entry.path.clone());
            move || load(&path)
        });
        async move {
            let t0 = std::time::Instant::now();
            let (backend, pooling) = match task.await {
                Ok(Ok(loaded)) => loaded,
                Ok(Err(e)) => return Err(me.failed(&entry, e)),
                Err(e) => return Err(me.failed(&entry, e.to_string())),
            };
            let loaded = me.serve_backend(&entry, backend, pooling);
            me.loads.fetch_add(1, Ordering::AcqRel);
            tracing::info!(model = %entry.id, ms = t0.elapsed().as_millis() as u64, cost = loaded.cost, "model loaded");
            Ok(Arc::new(loaded))
        }
        .boxed()
        .shared()
    }

    fn failed(&self, entry: &CatalogEntry, e: String) -> String {
        self.load_failures.fetch_add(1, Ordering::AcqRel);
        tracing::warn!(model = %entry.id, error = %e, "model load failed");
        e
    }

    /// One model's server over `backend`.
    fn serve_backend(
        &self,
        entry: &CatalogEntry,
        backend: SharedBackend,
        pooling: Option<Pooling>,
    ) -> Loaded {
        let cfg = ServerConfig {
            model_id: entry.id.clone(),
            aliases: Vec::new(),
            tags: Vec::new(),
            model_path: Some(entry.path.display().to_string()),
            embeddings_pooling: Some(self.base.pooling_for(pooling)),
            ..(*self.base).clone()
        };
        let cost = entry.bytes + backend.metrics().kv_capacity_bytes as u64;
        let (load, path) = (self.load.clone(), entry.path.clone());
        let reload: BackendReload = Arc::new(move || load(&path).map(|(b, _)| b));
        let state = AppState::sleepy(backend, Some(reload), Arc::new(cfg), self.created);
        Loaded {
            backend: state.backend.clone(),
            app: routes::routes(state),
            cost,
            in_flight: Arc::new(AtomicUsize::new(0)),
            last_used: AtomicU64::new(self.clock.fetch_add(1, Ordering::AcqRel)),
        }
    }

    /// Unloads least recently used idle models until `entry` fits: `false` when every loaded
    /// model is busy, an error when it can never fit.
    fn make_room(&self, table: &mut HashMap<String, Slot>, entry: &CatalogEntry) -> Result<bool, ApiError> {
        if let Some(budget) = self.memory_budget.filter(|b| entry.bytes > *b) {
            return Err(ApiError::with_status(
                StatusCode::INSUFFICIENT_STORAGE,
                format!(
                    "model '{}' has {} MiB of weights, more than the --models-memory budget of {} MiB",
                    entry.id,
                    entry.bytes >> 20,
                    budget >> 20
                ),
            ));
        }
        loop {
            let used: u64 = table
                .iter()
                .map(|(id, s)| match s {
                    Slot::Ready(l) => l.cost,
                    Slot::Loading(_) => self.entry(id).map_or(0, |e| e.bytes),
                })
                .sum();
            let over_count = table.len() >= self.max_loaded;
            let over_memory = self.memory_budget.is_some_and(|b| used + entry.bytes > b);
            if !over_count && !over_memory {
                return Ok(true);
            }
            let victim = table
                .iter()
                .filter_map(|(id, s)| match s {
                    Slot::Ready(l) if l.in_flight.load(Ordering::Acquire) == 0 => {
                        Some((l.last_used.load(Ordering::Acquire), id.clone()))
                    }
                    _ => None,
                })
                .min();
            let Some((_, id)) = victim else { return Ok(false) };
            if let Some(Slot::Ready(l)) = table.remove(&id) {
                l.backend.shutdown();
                self.unloads.fetch_add(1, Ordering::AcqRel);
                tracing::info!(model = %id, "model unloaded (least recently used)");
            }
        }
    }

    /// `POST /models/unload`: unloads a model now (refused while it has requests in flight).
    fn unload(&self, id: &str) -> Result<bool, ApiError> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        match table.get(id) {
            Some(Slot::Ready(l)) if l.in_flight.load(Ordering::Acquire) > 0 => {
                Err(ApiError::busy(format!("model '{id}' has requests in flight"), 1))
            }
            Some(Slot::Ready(_)) => {
                if let Some(Slot::Ready(l)) = table.remove(id) {
                    l.backend.shutdown();
                    self.unloads.fetch_add(1, Ordering::AcqRel);
                    self.idle.notify_waiters();
                    tracing::info!(model = %id, "model unloaded (asked)");
                }
                Ok(true)
            }
            Some(Slot::Loading(_)) => Err(ApiError::busy(format!("model '{id}' is loading"), 1)),
            None => Ok(false),
        }
    }

    /// Which catalog entry a request names; without a name, the only model when there is one.
    fn resolve(&self, name: Option<&str>) -> Result<&CatalogEntry, ApiError> {
        match name {
            Some(n) => self.entry(n).ok_or_else(|| ApiError::model_not_found(n)),
            None if self.catalog.len() == 1 => Ok(&self.catalog[0]),
            None => Err(ApiError::invalid_param(
                "model",
                format!(
                    "this server serves several models: name one in `model` (GET /v1/models lists them: {})",
                    self.catalog.iter().map(|e| e.id.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )),
        }
    }

    fn status(&self, id: &str) -> &'static str {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        match table.get(id) {
            Some(Slot::Ready(l)) if l.backend.is_sleeping() => "sleeping",
            Some(Slot::Ready(_)) => "loaded",
            Some(Slot::Loading(_)) => "loading",
            None => "unloaded",
        }
    }

    /// A `/v1/models` entry, with llama-server's router-mode `status`.
    fn model_entry(&self, e: &CatalogEntry) -> Value {
        json!({
            "id": e.id,
            "object": "model",
            "created": self.created,
            "owned_by": "ferrolm",
            "path": e.path.display().to_string(),
            "status": {"value": self.status(&e.id)},
            "meta": {"size": e.bytes},
        })
    }
}

impl Drain for Models {
    fn shutdown(&self) {
        self.accepting.store(false, Ordering::Release);
        self.idle.notify_waiters(); // the requests waiting for room give up
        for (_, l) in self.ready() {
            l.backend.shutdown();
        }
    }

    fn cancel_all(&self) {
        for (_, l) in self.ready() {
            l.backend.cancel_all();
        }
    }

    fn wait_idle(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        async move {
            let models = self.ready();
            let all =
                futures_util::future::join_all(models.iter().map(|(_, l)| l.backend.wait_idle(timeout)));
            all.await.into_iter().all(|idle| idle)
        }
        .boxed()
    }
}

/// Binds `cfg.host:cfg.port` and serves the models of `models` until `shutdown` completes (see
/// [`super::serve_listener`] for the shutdown sequence). `cfg` holds what every model shares
/// (sampler defaults, limits, API key); its `model_id` and aliases are not used.
pub async fn serve_models(
    cfg: ServerConfig,
    models: ModelsConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (shutdown_timeout, limits) = (cfg.shutdown_timeout, cfg.connections);
    let template = cfg.chat_template.clone();
    let load = models.load;
    let backend_load: BackendLoadFn = Arc::new(move |path: &Path| {
        let engine = load(path)?;
        let pooling = engine.model().default_pooling();
        let backend: SharedBackend = Arc::new(EngineBackend::new(engine, template.as_deref()));
        Ok((backend, pooling))
    });
    let table = ModelTable {
        catalog: models.catalog,
        max_loaded: models.max_loaded,
        memory_budget: models.memory_budget,
        load: backend_load,
        autoload: models.autoload,
    };
    let listeners = super::bind(&cfg).await?;
    let tools = super::start_tools(&cfg).await?;
    let shutdown = super::stop_tools_on(shutdown, tools.clone());
    let (app, state) = app_with_tools(cfg, table, tools.clone())?;
    let served = super::serve_app(listeners, app, state.as_ref(), limits, shutdown_timeout, shutdown).await;
    if let Some(t) = tools {
        t.shutdown();
    }
    served
}

/// [`ModelsConfig`] with the load giving backends.
pub(crate) struct ModelTable {
    pub catalog: Vec<CatalogEntry>,
    pub max_loaded: usize,
    pub memory_budget: Option<u64>,
    pub load: BackendLoadFn,
    pub autoload: bool,
}

/// The multi-model server's router and state, without server tools.
#[cfg(test)]
pub(crate) fn app(cfg: ServerConfig, t: ModelTable) -> Result<(Router, Arc<Models>), ServerError> {
    app_with_tools(cfg, t, None)
}

/// The multi-model server's router and state; `tools` answer `/tools` when started.
pub(crate) fn app_with_tools(
    cfg: ServerConfig,
    t: ModelTable,
    tools: Option<Arc<super::server_tools::ServerTools>>,
) -> Result<(Router, Arc<Models>), ServerError> {
    if t.max_loaded == 0 {
        return Err(ServerError::Config("--models-max must be at least 1".into()));
    }
    let state = Arc::new(Models {
        base: Arc::new(cfg.clone()),
        catalog: t.catalog,
        max_loaded: t.max_loaded,
        memory_budget: t.memory_budget,
        load: t.load,
        autoload: t.autoload,
        created: response::unix_now(),
        table: Mutex::new(HashMap::new()),
        clock: AtomicU64::new(0),
        accepting: std::sync::atomic::AtomicBool::new(true),
        loads: AtomicU64::new(0),
        unloads: AtomicU64::new(0),
        load_failures: AtomicU64::new(0),
        queue: Mutex::new(VecDeque::new()),
        next_ticket: AtomicU64::new(0),
        idle: Arc::new(Notify::new()),
    });
    let app = routes::outer_layers(front(state.clone()), &cfg, tools)?;
    Ok((app, state))
}

/// The routes the multi-model server answers itself; everything else goes to a model.
fn front(state: Arc<Models>) -> Router {
    Router::new()
        .route("/health", get(routes::health))
        .route("/", get(page))
        .route("/v1/models", get(list))
        .route("/models", get(list))
        .route("/v1/models/{*id}", get(one))
        .route("/metrics", get(prometheus))
        .route("/props", get(props))
        .route("/models/load", post(load))
        .route("/models/unload", post(unload))
        .merge(routes::stream_routes())
        .fallback(forward)
        .with_state(state)
}

/// `GET /props`: the server's own (llama-server's router `role`, limits) without `?model=`,
/// that model's with it.
async fn props(State(m): State<Arc<Models>>, req: Request) -> Result<Response, ApiError> {
    if requested_model(req.uri(), &[]).is_some() {
        return forward(State(m), req).await;
    }
    let body = json!({
        "role": "router",
        "max_instances": m.max_loaded,
        "models_autoload": m.autoload,
        "build_info": super::response::fingerprint(),
        "models": m.catalog.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
    });
    Ok(json_response(StatusCode::OK, &body))
}

async fn page(State(m): State<Arc<Models>>, uri: axum::http::Uri) -> Response {
    routes::index(m.base.web_ui, uri).await
}

async fn list(State(m): State<Arc<Models>>) -> Response {
    let data: Vec<Value> = m.catalog.iter().map(|e| m.model_entry(e)).collect();
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

async fn one(State(m): State<Arc<Models>>, UrlPath(id): UrlPath<String>) -> Result<Response, ApiError> {
    let e = m.entry(&id).ok_or_else(|| ApiError::model_not_found(&id))?;
    Ok(json_response(StatusCode::OK, &m.model_entry(e)))
}

/// The `model` of a `POST /models/load|unload` body.
fn body_model(body: &[u8]) -> Result<String, ApiError> {
    let v = super::json::parse_object(body)?;
    v.get("model")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ApiError::invalid_param("model", "`model` (a string) is required"))
}

async fn load(State(m): State<Arc<Models>>, body: axum::body::Bytes) -> Result<Response, ApiError> {
    let name = body_model(&body)?;
    let entry = m.resolve(Some(&name))?.clone();
    drop(m.acquire(&entry).await?);
    Ok(json_response(StatusCode::OK, &json!({"success": true, "model": name})))
}

async fn unload(State(m): State<Arc<Models>>, body: axum::body::Bytes) -> Result<Response, ApiError> {
    let name = body_model(&body)?;
    m.resolve(Some(&name))?;
    let was_loaded = m.unload(&name)?;
    Ok(json_response(StatusCode::OK, &json!({"success": true, "model": name, "was_loaded": was_loaded})))
}

/// `GET /metrics`: the model table's counters, then every loaded model's engine metrics
/// labelled with `model`.
async fn prometheus(State(m): State<Arc<Models>>) -> Response {
    let ready = m.ready();
    let mut text = metrics::render_models(&metrics::ModelsSnapshot {
        available: m.catalog.len(),
        loaded: ready.iter().map(|(id, _)| id.clone()).collect(),
        sleeping: ready.iter().filter(|(_, l)| l.backend.is_sleeping()).map(|(id, _)| id.clone()).collect(),
        loads: m.loads.load(Ordering::Acquire),
        unloads: m.unloads.load(Ordering::Acquire),
        load_failures: m.load_failures.load(Ordering::Acquire),
    });
    let rss = ferrolm::sysmem::resident().map(|(rss, _)| rss);
    let snapshots: Vec<_> = ready.iter().map(|(id, l)| (id.clone(), l.backend.metrics())).collect();
    text.push_str(&metrics::render_labelled(&snapshots, rss));
    ([(axum::http::header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

/// Passes a request to the model it names, loading the model first when needed. A streamed
/// request with `X-Conversation-Id` gets its session now (reads answer 503 while the model
/// loads) and runs in a task of its own, so that it outlives its client.
async fn forward(State(m): State<Arc<Models>>, req: Request) -> Result<Response, ApiError> {
    let (mut parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| ApiError::invalid(format!("cannot read the request body: {e}")))?;
    let name = requested_model(&parts.uri, &bytes);
    let entry = m.resolve(name.as_deref())?.clone();
    if !m.autoload && m.status(&entry.id) == "unloaded" {
        return Err(ApiError::invalid_param(
            "model",
            format!(
                "model '{}' is not loaded, and this server loads models only when asked \
                 (--no-models-autoload): POST /models/load first",
                entry.id
            ),
        ));
    }
    let session = match stream_session::header_id(&parts.headers)? {
        Some(id) if wants_stream(&bytes) => stream_session::create(&id, true),
        _ => return run_on_model(m, entry, parts, bytes, None).await,
    };
    parts.extensions.insert(stream_session::Ticket::Made(session.clone()));
    let task = tokio::spawn(run_on_model(m, entry, parts, bytes, Some(session)));
    task.await.unwrap_or_else(|e| Err(ApiError::internal(format!("the request failed: {e}"))))
}

/// Runs a request on its model (loading it first); with a session, a cancellation while the
/// model loads answers 400, and the model stays loaded until the session's stream ends.
async fn run_on_model(
    m: Arc<Models>,
    entry: CatalogEntry,
    parts: axum::http::request::Parts,
    bytes: axum::body::Bytes,
    session: Option<Arc<stream_session::Session>>,
) -> Result<Response, ApiError> {
    let acquired = match &session {
        Some(s) => tokio::select! {
            biased;
            _ = s.cancelled() => Err(ApiError::invalid("the request was cancelled while its model loaded")),
            r = m.acquire(&entry) => r,
        },
        None => m.acquire(&entry).await,
    };
    let (loaded, guard) = match acquired {
        Ok(a) => a,
        Err(e) => {
            if let Some(s) = &session {
                stream_session::evict(s);
            }
            return Err(e);
        }
    };
    let req = Request::from_parts(parts, Body::from(bytes));
    let resp = match loaded.app.clone().oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    if let Some(s) = session {
        if s.is_loading() {
            // No stream started (an error, say): nothing to keep.
            stream_session::evict(&s);
        } else {
            tokio::spawn(async move {
                s.wait_done().await;
                drop(guard);
            });
            return Ok(resp);
        }
    }
    // The guard lives as long as the body, so a stream keeps its model loaded.
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _keep_loaded = &guard;
        chunk
    });
    Ok(Response::from_parts(parts, Body::from_stream(body)))
}

/// Whether a body asks for `"stream": true`.
fn wants_stream(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct StreamField {
        stream: Option<Value>,
    }
    serde_json::from_slice::<StreamField>(body).is_ok_and(|f| f.stream == Some(Value::Bool(true)))
}

/// The model a request names: the body's top-level `model` string, else `?model=`.
fn requested_model(uri: &axum::http::Uri, body: &[u8]) -> Option<String> {
    // Only the `model` field is read: the rest of the body is skipped, not built into a tree
    // (the model's own server parses it).
    #[derive(serde::Deserialize)]
    struct ModelField {
        model: Option<Value>,
    }
    let from_body = serde_json::from_slice::<ModelField>(body)
        .ok()
        .and_then(|f| f.model)
        .and_then(|m| m.as_str().map(str::to_string));
    from_body.or_else(|| {
        let Query(q) = Query::<HashMap<String, String>>::try_from_uri(uri).ok()?;
        q.get("model").cloned()
    })
}
