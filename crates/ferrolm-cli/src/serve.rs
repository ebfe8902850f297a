//! `ferrolm serve`: an OpenAI-compatible HTTP server (continuous batching over N slots, chunked
//! prefill, a prefix cache shared by all slots). Ctrl-C or SIGTERM stops it gracefully.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use ferrolm::engine::{BatchStrategy, Engine, EngineConfig};
use ferrolm::hub;
use ferrolm::model::Pooling;
use ferrolm_server::{
    ConnLimits, ReloadFn, ServerConfig, derive_max_connections, raise_fd_limit, serve, serve_reloadable,
};

use ferrolm_server::api::{ServerToolsConfig, parse_mcp_servers};

use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;
use crate::speculative_args::ServeDraftArgs;

/// Arguments of `ferrolm serve`.
#[derive(clap::Args)]
pub struct Args {
    /// The model; `--ctx-size` is the context of each slot.
    #[command(flatten)]
    model: ModelArgs,
    /// Defaults for the sampling fields a request leaves out.
    #[command(flatten)]
    sampling: Box<SamplingArgs>,
    /// Address to listen on; several, comma-separated (`127.0.0.1,::1`), share the port.
    #[arg(long, default_value = "127.0.0.1", help_heading = "Server")]
    host: String,
    /// Port (0: any free port; the address is printed as `listening on http://ADDR`).
    #[arg(long, default_value_t = 8080, help_heading = "Server")]
    port: u16,
    /// Slots: requests generating at the same time.
    #[arg(long, visible_alias = "np", default_value_t = 4, help_heading = "Server")]
    parallel: usize,
    /// Most tokens in one forward pass, prompt chunks and decode tokens together (default:
    /// --batch-size).
    #[arg(long = "chunk-size", help_heading = "Server")]
    chunk_size: Option<usize>,
    /// How each forward pass is filled: decode-first (steady streaming), prefill-first (lowest
    /// time to first token) or balanced.
    #[arg(long = "batch-strategy", default_value = "decode-first", value_parser = parse_strategy, help_heading = "Server")]
    batch_strategy: BatchStrategy,
    /// Most requests waiting for a slot; more get 503 with Retry-After.
    #[arg(long = "max-queue", default_value_t = 64, help_heading = "Server")]
    max_queue: usize,
    /// Memory for the shared prefix cache in MiB (0 disables it).
    #[arg(long = "cache-ram", default_value_t = 1024, help_heading = "Server")]
    cache_ram: usize,
    /// The served model's id (repeat for more names; the first is the id). Default: the catalog
    /// name or the file name without extension.
    #[arg(long = "alias", help_heading = "Server")]
    alias: Vec<String>,
    /// Informational tags of the served model, comma-separated (listed in /v1/models as
    /// llama-server's --tags; not used for routing).
    #[arg(long = "tags", value_delimiter = ',', help_heading = "Server")]
    tags: Vec<String>,
    /// Require `Authorization: Bearer KEY` (except on /health and /).
    #[arg(long = "api-key", conflicts_with = "api_key_file", help_heading = "Server")]
    api_key: Option<String>,
    /// Read the API key from this file (first line).
    #[arg(long = "api-key-file", help_heading = "Server")]
    api_key_file: Option<std::path::PathBuf>,
    /// Allow this origin by CORS (repeatable, or comma-separated as llama-server's
    /// `--cors-origins`; `*` for any, as llama-server by default; `localhost` for any origin on
    /// this machine; `none`: no CORS headers). Default: `*`, or `localhost` with `--tools`,
    /// MCP servers or `--agent`, as llama-server's.
    #[arg(
        long = "cors-origin",
        visible_alias = "cors-origins",
        value_delimiter = ',',
        help_heading = "Server"
    )]
    cors_origin: Vec<String>,
    /// `Access-Control-Allow-Methods` of a CORS preflight.
    #[arg(long = "cors-methods", default_value = "GET, POST, DELETE, OPTIONS", help_heading = "Server")]
    cors_methods: String,
    /// `Access-Control-Allow-Headers` of a CORS preflight.
    #[arg(long = "cors-headers", default_value = "*", help_heading = "Server")]
    cors_headers: String,
    /// Do not allow credentials by CORS (then `--cors-origin *` answers `*` instead of the
    /// request's origin).
    #[arg(long = "no-cors-credentials", overrides_with = "cors_credentials", help_heading = "Server")]
    no_cors_credentials: bool,
    /// Allow credentials by CORS (the default).
    #[arg(long = "cors-credentials", overrides_with = "no_cors_credentials", help_heading = "Server")]
    cors_credentials: bool,
    /// Most tokens a request generates, and the number it generates when it does not say
    /// (llama-server's; -1: each endpoint's default, no cap).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true, help_heading = "Server")]
    n_predict: i64,
    /// Use this chat template (a Jinja file) instead of the model's.
    #[arg(long = "chat-template-file", conflicts_with = "chat_template", help_heading = "Server")]
    chat_template_file: Option<std::path::PathBuf>,
    /// Use this chat template instead of the model's: a built-in one by name (chatml, llama3,
    /// gemma, phi3, phi4, zephyr, vicuna, vicuna-orca, deepseek, command-r; llama.cpp's
    /// formats) or a Jinja template's text.
    #[arg(long = "chat-template", help_heading = "Server")]
    chat_template: Option<String>,
    /// Thinking for models whose template has it (llama-server's `--reasoning`): on, off (the
    /// template's `enable_thinking` false; a thinking block it opens is closed) or auto (the
    /// template's default).
    #[arg(long = "reasoning", visible_alias = "rea", default_value = "auto", value_parser = ["on", "off", "auto"], help_heading = "Server")]
    reasoning: String,
    /// Where a thinking model's reasoning goes: deepseek (or auto) puts it in
    /// `message.reasoning_content` / `delta.reasoning_content`, none leaves it in the content.
    #[arg(long = "reasoning-format", default_value = "auto", value_parser = ["none", "deepseek", "auto"], help_heading = "Server")]
    reasoning_format: String,
    /// Most tokens of reasoning for a thinking model (llama-server's flag): -1 no limit, 0 close
    /// the reasoning at once, N: after N tokens of reasoning the closing tag is written for the
    /// model. A request's `reasoning_budget_tokens` wins.
    #[arg(long = "reasoning-budget", default_value_t = -1, allow_negative_numbers = true, help_heading = "Server")]
    reasoning_budget: i64,
    /// Text written before the closing tag when a reasoning budget runs out.
    #[arg(long = "reasoning-budget-message", default_value = "", help_heading = "Server")]
    reasoning_budget_message: String,
    /// Refuse to start unless the model reranks (a cross-encoder or a reranker with a
    /// classification head): llama-server's flag, which turns its `/rerank` endpoint on.
    /// ferrolm serves `/rerank` whenever the model is a reranker, with or without it.
    #[arg(long = "reranking", visible_alias = "rerank", conflicts_with_all = ["models_dir", "models_preset"], help_heading = "Server")]
    reranking: bool,
    /// Folder where `POST /slots/{id}?action=save` writes slot files and `restore` reads them
    /// (llama-server's flag); without it those actions are refused.
    #[arg(long = "slot-save-path", help_heading = "Server")]
    slot_save_path: Option<std::path::PathBuf>,
    /// Serve `GET /metrics` (the default; llama-server's flag, which it needs to serve them).
    #[arg(long = "metrics", overrides_with = "no_metrics", help_heading = "Server")]
    metrics: bool,
    /// Do not serve the chat page at `/` (404).
    #[arg(long = "no-ui", help_heading = "Server")]
    no_ui: bool,
    #[command(flatten)]
    server_tools: ServerToolsArgs,
    /// Whole chat and completion answers carry llama-server's `__verbose` object (the rendered
    /// prompt, the generation settings, timings), unless a request sets `verbose` false
    /// (llama-server's `--verbose`; logging is set with FERROLM_LOG).
    #[arg(long = "verbose", help_heading = "Server")]
    verbose: bool,
    /// Answer `GET /slots` with 501 (llama-server's `--no-slots`); `--slots` keeps it (the
    /// default).
    #[arg(long = "no-slots", help_heading = "Server", overrides_with = "slots")]
    no_slots: bool,
    /// Serve `GET /slots` (the default).
    #[arg(long = "slots", help_heading = "Server", overrides_with = "no_slots")]
    slots: bool,
    /// Do not serve `GET /metrics` (501).
    #[arg(long = "no-metrics", help_heading = "Server")]
    no_metrics: bool,
    /// Seconds without a task after which the model is released (weights, KV and prefix
    /// caches) until the next task loads it again (llama-server's option; -1: never). GET
    /// /health, /props, /models, /metrics and /slots are not tasks: they answer while it sleeps.
    #[arg(long = "sleep-idle-seconds", default_value_t = -1, allow_hyphen_values = true, help_heading = "Server")]
    sleep_idle_seconds: i64,
    /// Largest request body in bytes.
    #[arg(long = "max-body-bytes", default_value_t = 8 << 20, help_heading = "Server")]
    max_body_bytes: usize,
    /// Longest a request may take in seconds, queueing included (0: no limit); a request's
    /// `timeout` field may lower it.
    #[arg(long, default_value_t = 600.0, help_heading = "Server")]
    timeout: f64,
    /// On Ctrl-C or SIGTERM, seconds running requests get to finish before they are cancelled.
    #[arg(long = "shutdown-timeout", default_value_t = 30.0, help_heading = "Server")]
    shutdown_timeout: f64,
    /// Seconds a client gets to send a request's headers (else the connection is closed).
    #[arg(long = "header-timeout", default_value_t = 10.0, help_heading = "Connections")]
    header_timeout: f64,
    /// Seconds a client gets to send a request's body once its headers are in (else 408).
    #[arg(long = "body-timeout", default_value_t = 30.0, help_heading = "Connections")]
    body_timeout: f64,
    /// Seconds a keep-alive connection with no request in flight stays open.
    #[arg(long = "idle-timeout", default_value_t = 60.0, help_heading = "Connections")]
    idle_timeout: f64,
    /// Most open connections (0: derived from the file-descriptor limit, which the server
    /// raises to its hard limit, keeping 64 free). Over the cap, the connection idle the longest
    /// is closed; a new one is refused (503) only when all are busy.
    #[arg(long = "max-connections", default_value_t = 0, help_heading = "Connections")]
    max_connections: usize,
    /// Most open connections from one client address (0: only --max-connections); over it, that
    /// client's longest-idle connection is closed.
    #[arg(long = "max-connections-per-client", default_value_t = 0, help_heading = "Connections")]
    max_connections_per_client: usize,
    /// Pooling of the embeddings: mean, cls or last (default: the model's, else mean), or none:
    /// one vector per token, served by /embeddings only.
    #[arg(long = "embeddings-pooling", value_parser = parse_pooling, help_heading = "Server")]
    embeddings_pooling: Option<Pooling>,
    /// A draft model for speculative decoding, and the requests' default settings.
    #[command(flatten)]
    draft: ServeDraftArgs,
    /// Serve every model of this folder, each under its file or folder name: GGUF files (a split
    /// model by its -00001-of-N file) and Hugging Face model folders. A request picks one by
    /// `model`; a model is loaded on first use with this command's options (each has its own
    /// slots and prefix cache). GET /v1/models lists them with their status.
    #[arg(long = "models-dir", conflicts_with_all = ["model", "hf_repo", "alias", "model_draft"], help_heading = "Models")]
    models_dir: Option<std::path::PathBuf>,
    /// With --models-dir: most models loaded at once; loading another unloads the least
    /// recently used model that has no request in flight.
    #[arg(long = "models-max", default_value_t = 4, help_heading = "Models")]
    models_max: usize,
    /// Serve the models of a llama-server preset file: a `[name]` section per model with
    /// `model = PATH` (relative to the file). With --models-dir too, both are served.
    #[arg(long = "models-preset", conflicts_with_all = ["model", "hf_repo", "alias", "model_draft"], help_heading = "Models")]
    models_preset: Option<std::path::PathBuf>,
    /// With --models-dir/--models-preset: load a model only on `POST /models/load`, not on the
    /// first request naming it (which then gets 400).
    #[arg(long = "no-models-autoload", help_heading = "Models")]
    no_models_autoload: bool,
    /// With --models-dir: memory budget in MiB of the loaded models (weight files plus KV
    /// caches); 0: only --models-max limits them.
    #[arg(long = "models-memory", default_value_t = 0, help_heading = "Models")]
    models_memory: u64,
}

fn parse_strategy(s: &str) -> Result<BatchStrategy, String> {
    BatchStrategy::from_name(s)
        .ok_or_else(|| format!("unknown batch strategy '{s}' (use decode-first, prefill-first or balanced)"))
}

fn parse_pooling(s: &str) -> Result<Pooling, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Pooling::None);
    }
    Pooling::from_name(s).ok_or_else(|| format!("unknown pooling '{s}' (use mean, cls, last or none)"))
}

/// A non-negative, finite number of seconds.
fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    if !s.is_finite() || !(0.0..=1e9).contains(&s) {
        bail!("{flag} must be a number of seconds (0 or more), not {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

/// A finite number of seconds above zero.
fn positive_seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    let d = seconds(flag, s)?;
    if d.is_zero() {
        bail!("{flag} must be more than 0 seconds");
    }
    Ok(d)
}

/// `limits` with `--max-connections` (0: derived) under the file-descriptor limit, raised to
/// the hard limit.
fn connection_cap(limits: ConnLimits) -> ConnLimits {
    let wanted = limits.max_connections;
    let nofile = match raise_fd_limit() {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(err = %e, "cannot read the file-descriptor limit; assuming 1024");
            1024
        }
    };
    let cap = derive_max_connections(nofile, (wanted > 0).then_some(wanted));
    if wanted > cap {
        eprintln!("--max-connections {wanted} lowered to {cap} (file-descriptor limit {nofile})");
    }
    tracing::info!(nofile, max_connections = cap, "connection cap");
    ConnLimits { max_connections: cap, ..limits }
}

/// The model's default id: its catalog name, its Hub name (`org/repo[:tag]`), else its file (or
/// folder) name without extension.
fn default_model_id(arg: Option<&str>, path: &Path) -> String {
    let name = arg.unwrap_or(hub::DEFAULT_MODEL);
    if !Path::new(name).exists()
        && let Ok(Some(hf)) = hub::hf::HfName::parse(name)
    {
        return hf.display();
    }
    if !Path::new(name).exists()
        && let Some(entry) = hub::find(name)
    {
        return entry.name.to_string();
    }
    let stem = if path.is_dir() { path.file_name() } else { path.file_stem() };
    stem.map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "ferrolm".into())
}

impl Args {
    /// The engine configuration.
    fn engine_config(&self) -> anyhow::Result<EngineConfig> {
        if self.parallel == 0 {
            bail!("--parallel must be at least 1");
        }
        let chunk_size = self.chunk_size.unwrap_or(self.model.batch_size);
        if chunk_size == 0 {
            bail!("--chunk-size must be at least 1");
        }
        Ok(EngineConfig {
            n_slots: self.parallel,
            n_ctx: self.model.ctx_size,
            chunk_size,
            strategy: self.batch_strategy,
            max_queue: self.max_queue,
            type_k: self.model.kv_types.k,
            type_v: self.model.kv_types.v,
            cache: self.model.cache.options(),
            prefix_cache_bytes: self.cache_ram.saturating_mul(1 << 20),
            embed_pooling: self.embeddings_pooling,
            // Set once loaded (`run`).
            draft_model: None,
        })
    }

    /// The server configuration (`default_id`: the model's name when no --alias is given).
    /// `--chat-template-file` or `--chat-template`, checked to compile.
    fn chat_template_source(&self) -> anyhow::Result<Option<String>> {
        let src = match (&self.chat_template_file, &self.chat_template) {
            (Some(f), _) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
            (None, Some(s)) => match ferrolm::chat::builtin_template(s) {
                Some(src) => src.to_string(),
                None if s.contains("{%") || s.contains("{{") => s.clone(),
                None => bail!(
                    "--chat-template {s:?} is neither a built-in template ({}) nor a Jinja template",
                    ferrolm::chat::builtin_template_names().collect::<Vec<_>>().join(", ")
                ),
            },
            (None, None) => return Ok(None),
        };
        ferrolm::chat::ChatTemplate::new(&src).context("the chat template does not compile")?;
        Ok(Some(src))
    }

    /// `--slot-save-path`, created when missing (llama-server needs it to exist already).
    fn slot_save_folder(&self) -> anyhow::Result<Option<std::path::PathBuf>> {
        let Some(dir) = &self.slot_save_path else { return Ok(None) };
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--slot-save-path {}: cannot create the folder", dir.display()))?;
        Ok(Some(dir.clone()))
    }

    /// `--cors-origin`'s list: `none` alone turns CORS off; `*` without an API key is warned of,
    /// as llama-server does.
    fn cors_origins(&self, tools: &ServerToolsConfig) -> anyhow::Result<Vec<String>> {
        let mut list: Vec<String> = self.cors_origin.iter().map(|o| o.trim().to_string()).collect();
        if list.is_empty() && (tools.any_tools() || self.server_tools.agent) {
            tracing::warn!(
                "server tools or MCP servers are enabled: CORS allows localhost only (--cors-origin)"
            );
            list.push("localhost".into());
        } else if list.is_empty() {
            list.push("*".into());
        }
        if list.iter().any(|o| o == "none") {
            if list.len() > 1 {
                bail!("--cors-origin none turns CORS off and cannot be combined with origins");
            }
            return Ok(Vec::new());
        }
        if list.iter().any(String::is_empty) {
            bail!("--cors-origin must not be empty (`none` turns CORS off)");
        }
        if list.iter().any(|o| o == "*") && self.api_key.is_none() && self.api_key_file.is_none() {
            tracing::warn!(
                "CORS allows every origin and no API key is set: web pages opened in a browser on a \
                 machine that reaches this server can use it (--api-key, or --cors-origin localhost)"
            );
        }
        Ok(list)
    }

    fn server_config(&self, default_id: String) -> anyhow::Result<ServerConfig> {
        let api_key = match (&self.api_key, &self.api_key_file) {
            (Some(k), _) => Some(k.trim().to_string()),
            (None, Some(f)) => {
                let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
                Some(text.lines().next().unwrap_or_default().trim().to_string())
            }
            (None, None) => None,
        };
        if api_key.as_ref().is_some_and(String::is_empty) {
            bail!("the API key is empty");
        }
        let mut names: Vec<String> = Vec::new();
        for a in self.alias.iter().map(|a| a.trim().to_string()) {
            if a.is_empty() {
                bail!("--alias must not be empty");
            }
            if !names.contains(&a) {
                names.push(a);
            }
        }
        // The first alias is the id; without one, the model's own name (as llama-server, whose
        // aliases then replace the file's name).
        let model_id = names.first().cloned().unwrap_or(default_id);
        let mut tags: Vec<String> = Vec::new();
        for t in self.tags.iter().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()) {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let server_tools = self.server_tools.config()?;
        Ok(ServerConfig {
            host: self.host.clone(),
            port: self.port,
            model_id,
            aliases: names,
            tags,
            api_key,
            cors_origins: self.cors_origins(&server_tools)?,
            cors_credentials: !self.no_cors_credentials,
            cors_methods: self.cors_methods.clone(),
            cors_headers: self.cors_headers.clone(),
            max_body_bytes: self.max_body_bytes,
            timeout: seconds("--timeout", self.timeout)?,
            shutdown_timeout: seconds("--shutdown-timeout", self.shutdown_timeout)?,
            sampler: self.sampling.to_params()?,
            n_predict: match self.n_predict {
                -1 => None,
                n => Some(
                    usize::try_from(n)
                        .map_err(|_| anyhow::anyhow!("--n-predict must be -1 or at least 0, not {n}"))?,
                ),
            },
            chat_template: self.chat_template_source()?,
            model_path: None,
            reasoning: match self.reasoning.as_str() {
                "on" => Some(true),
                "off" => Some(false),
                _ => None,
            },
            reasoning_to_field: self.reasoning_format != "none",
            reasoning_budget: match self.reasoning_budget {
                -1 => None,
                n => {
                    Some(usize::try_from(n).map_err(|_| {
                        anyhow::anyhow!("--reasoning-budget must be -1 or at least 0, not {n}")
                    })?)
                }
            },
            reasoning_budget_message: self.reasoning_budget_message.clone(),
            slot_save_path: self.slot_save_folder()?,
            metrics: !self.no_metrics,
            sleep_idle: match self.sleep_idle_seconds {
                -1 => None,
                n if n >= 1 => Some(Duration::from_secs(n.unsigned_abs())),
                n => bail!("--sleep-idle-seconds must be -1 (never) or at least 1, not {n}"),
            },
            web_ui: !self.no_ui,
            server_tools,
            verbose: self.verbose,
            slots: !self.no_slots,
            embeddings_pooling: self.embeddings_pooling,
            draft: self.draft.settings()?,
            connections: ConnLimits {
                header_timeout: positive_seconds("--header-timeout", self.header_timeout)?,
                body_timeout: positive_seconds("--body-timeout", self.body_timeout)?,
                idle_timeout: positive_seconds("--idle-timeout", self.idle_timeout)?,
                max_connections: self.max_connections,
                max_per_client: self.max_connections_per_client,
            },
        })
    }
}

/// llama-server's experimental server tools, MCP servers and CORS proxy. Off by default; do not
/// turn them on for a server that untrusted clients reach.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServerToolsArgs {
    /// Experimental: built-in tools run by `POST /tools` (comma-separated, or `all`): read_file,
    /// file_glob_search, grep_search, exec_shell_command, write_file, edit_file, get_info. They
    /// read, write and run anything the server's user may. CORS then defaults to localhost.
    #[arg(long = "tools", value_delimiter = ',', help_heading = "Server tools")]
    tools: Vec<String>,
    /// llama-server's isolated tool runtimes (containers, ssh): not supported, refused.
    #[arg(long = "tools-runtime", help_heading = "Server tools")]
    tools_runtime: Option<String>,
    /// Experimental: a JSON file of MCP servers in Cursor's format (`{"mcpServers": {NAME:
    /// {"command", "args", "env", "cwd", "timeout_ms"}}}`), whose tools `/tools` offers as
    /// NAME_TOOL. CORS then defaults to localhost.
    #[arg(long = "mcp-servers-config", help_heading = "Server tools")]
    mcp_servers_config: Option<std::path::PathBuf>,
    /// Experimental: the same as inline JSON.
    #[arg(long = "mcp-servers-json", help_heading = "Server tools")]
    mcp_servers_json: Option<String>,
    /// Experimental: serve `/cors-proxy?url=URL`, which forwards a request to any http URL
    /// (for the web page's MCP clients).
    #[arg(
        long = "ui-mcp-proxy",
        visible_alias = "webui-mcp-proxy",
        overrides_with = "no_ui_mcp_proxy",
        help_heading = "Server tools"
    )]
    ui_mcp_proxy: bool,
    /// Do not serve `/cors-proxy` (the default).
    #[arg(
        long = "no-ui-mcp-proxy",
        visible_alias = "no-webui-mcp-proxy",
        overrides_with = "ui_mcp_proxy",
        help_heading = "Server tools"
    )]
    no_ui_mcp_proxy: bool,
    /// Experimental: every built-in tool and the CORS proxy (llama-server's `--agent`).
    #[arg(long = "agent", help_heading = "Server tools")]
    agent: bool,
}

impl ServerToolsArgs {
    /// The server's tools configuration; a bad MCP configuration or tool name is an error here,
    /// before the model loads.
    fn config(&self) -> anyhow::Result<ServerToolsConfig> {
        if let Some(rt) = &self.tools_runtime {
            bail!(
                "--tools-runtime {rt}: ferrolm has no isolated tool runtime (containers, ssh); \
                 tools run on the host, as the server's user"
            );
        }
        let mut mcp_servers = Vec::new();
        if let Some(path) = &self.mcp_servers_config {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--mcp-servers-config: cannot read {}", path.display()))?;
            let list = parse_mcp_servers(&text)
                .with_context(|| format!("--mcp-servers-config {}", path.display()))?;
            mcp_servers.extend(list);
        }
        if let Some(text) = &self.mcp_servers_json {
            for s in parse_mcp_servers(text).context("--mcp-servers-json")? {
                if mcp_servers.iter().any(|m: &ferrolm_server::api::McpServerConfig| m.name == s.name) {
                    tracing::warn!(server = %s.name, "MCP server named twice, the first kept");
                } else {
                    mcp_servers.push(s);
                }
            }
        }
        let mut tools: Vec<String> =
            self.tools.iter().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect();
        if self.agent && !tools.iter().any(|t| t == "all") {
            tools.push("all".into());
        }
        let cfg = ServerToolsConfig { tools, mcp_servers, cors_proxy: self.agent || self.ui_mcp_proxy };
        cfg.check().map_err(|e| anyhow::anyhow!("--tools: {e}"))?;
        Ok(cfg)
    }
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    eprintln!("shutting down (queued requests are refused; running ones get --shutdown-timeout to finish)");
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    // A server runs for days with a load that comes and goes: large freed buffers go straight
    // back to the system rather than staying in the allocator's heaps.
    ferrolm::sysmem::return_large_buffers();
    if args.models_dir.is_some() || args.models_preset.is_some() {
        return run_models(args);
    }
    let base_cfg = args.engine_config()?;
    // Check the server options before the (slower) model load.
    args.server_config(String::new())?;
    let (model, load_ms, path) = args.model.load_with_path()?;
    if args.reranking && !model.is_reranker() {
        bail!(
            "--reranking: {} is not a reranking model (it needs a classification head: a \
             cross-encoder such as bge-reranker, or a Qwen3 reranker)",
            path.display()
        );
    }
    let mut engine_cfg = base_cfg.clone();
    if let Some(draft) = args.draft.load_draft()? {
        tracing::info!(n_vocab = draft.config().n_vocab, "draft model loaded");
        engine_cfg.draft_model = Some(Arc::new(draft));
    }
    let server_cfg = args.server_config(default_model_id(args.model.name().as_deref(), &path))?;
    let pooling = server_cfg.pooling_for(model.default_pooling());
    let connections = connection_cap(server_cfg.connections);
    let model_path = Some(path.display().to_string());
    let server_cfg =
        ServerConfig { embeddings_pooling: Some(pooling), connections, model_path, ..server_cfg };
    let engine = Engine::start(Arc::new(model), engine_cfg).context("starting the engine")?;
    eprintln!(
        "loaded {} in {load_ms:.0} ms; serving it as '{}' with {} slots of {} tokens",
        path.display(),
        server_cfg.model_id,
        engine.config().n_slots,
        engine.config().n_ctx
    );
    if server_cfg.sleep_idle.is_some() {
        let reload = reloader(Arc::new(args), path, base_cfg);
        runtime()?.block_on(serve_reloadable(engine, reload, server_cfg, shutdown_signal()))?;
    } else {
        runtime()?.block_on(serve(engine, server_cfg, shutdown_signal()))?;
    }
    Ok(())
}

/// Loads the model (and the draft model) of `path` again and starts an engine on them, after a
/// sleep (`--sleep-idle-seconds`).
fn reloader(args: Arc<Args>, path: std::path::PathBuf, engine_cfg: EngineConfig) -> ReloadFn {
    Arc::new(move || {
        let model = args.model.load_path(&path).map_err(|e| format!("{e:#}"))?;
        let mut cfg = engine_cfg.clone();
        if let Some(draft) = args.draft.load_draft().map_err(|e| format!("{e:#}"))? {
            cfg.draft_model = Some(Arc::new(draft));
        }
        Engine::start(Arc::new(model), cfg).map_err(|e| e.to_string())
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// `--models-dir` / `--models-preset`: every model of the folder and the preset, each loaded on
/// first use.
fn run_models(args: Args) -> anyhow::Result<()> {
    if args.models_max == 0 {
        bail!("--models-max must be at least 1");
    }
    let engine_cfg = args.engine_config()?;
    let server_cfg = args.server_config("models".into())?;
    let mut catalog = Vec::new();
    if let Some(dir) = &args.models_dir {
        catalog.extend(ferrolm_server::api::scan_models_dir(dir)?);
    }
    if let Some(preset) = &args.models_preset {
        catalog.extend(ferrolm_server::api::read_models_preset(preset)?);
    }
    let catalog = ferrolm_server::api::check_catalog(catalog).map_err(anyhow::Error::msg)?;
    args.model.prepare()?;
    eprintln!(
        "serving {} models (at most {} loaded{}): {}",
        catalog.len(),
        args.models_max,
        if args.models_memory > 0 { format!(", {} MiB", args.models_memory) } else { String::new() },
        catalog.iter().map(|e| e.id.as_str()).collect::<Vec<_>>().join(", ")
    );
    let server_cfg = ServerConfig { connections: connection_cap(server_cfg.connections), ..server_cfg };
    let model_args = Arc::new(args.model);
    let load: ferrolm_server::api::LoadFn = Arc::new(move |path: &Path| {
        let model = model_args.load_path(path).map_err(|e| format!("{e:#}"))?;
        Engine::start(Arc::new(model), engine_cfg.clone()).map_err(|e| e.to_string())
    });
    let models = ferrolm_server::api::ModelsConfig {
        catalog,
        max_loaded: args.models_max,
        memory_budget: (args.models_memory > 0).then_some(args.models_memory.saturating_mul(1 << 20)),
        load,
        autoload: !args.no_models_autoload,
    };
    runtime()?.block_on(ferrolm_server::serve_models(server_cfg, models, shutdown_signal()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: Args,
    }

    fn parse(args: &[&str]) -> anyhow::Result<Args> {
        Ok(Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))?.a)
    }

    /// The README's OpenAI-client example must name a model the server it describes serves: it
    /// asks GET /v1/models, and the id its comment gives for `-m model.gguf` is the served rule's.
    #[test]
    fn readme_client_example_uses_the_served_id() {
        let readme = include_str!("../../../README.md");
        let start = readme.find("from openai import OpenAI").expect("the README's OpenAI example");
        let example = &readme[start..start + readme[start..].find("```").expect("end of the example")];
        assert!(example.contains("model = client.models.list().data[0].id"), "{example}");
        assert!(!example.contains("model=\""), "a hard-coded model name: {example}");
        let id = default_model_id(Some("model.gguf"), Path::new("model.gguf"));
        assert!(example.contains(&format!("(\"{id}\" for\n# `-m model.gguf`)")), "{id}: {example}");
        assert!(readme.contains("ferrolm serve -m model.gguf"), "the README's serve example changed");
    }

    #[test]
    fn defaults() {
        let a = parse(&[]).expect("defaults");
        let e = a.engine_config().expect("engine");
        assert_eq!((e.n_slots, e.n_ctx, e.chunk_size, e.max_queue), (4, 4096, 512, 64));
        assert_eq!((e.strategy, e.prefix_cache_bytes), (BatchStrategy::DecodeFirst, 1 << 30));
        let s = a.server_config("smollm2-135m-instruct".into()).expect("server");
        assert_eq!(
            (s.host.as_str(), s.port, s.model_id.as_str()),
            ("127.0.0.1", 8080, "smollm2-135m-instruct")
        );
        assert!(s.aliases.is_empty() && s.api_key.is_none() && s.cors_origins == ["*"] && s.cors_credentials);
        assert_eq!(
            (s.max_body_bytes, s.timeout, s.shutdown_timeout),
            (8 << 20, Duration::from_secs(600), Duration::from_secs(30))
        );
        assert_eq!(s.sampler, ferrolm::sampling::SamplerParams::default());
        assert_eq!((s.n_predict, s.chat_template), (None, None));
    }

    #[test]
    fn n_predict_and_chat_templates() {
        let cfg = |args: &[&str]| parse(args).expect("parses").server_config("m".into());
        assert_eq!(cfg(&["-n", "64"]).expect("ok").n_predict, Some(64));
        assert_eq!(cfg(&["--n-predict", "-1"]).expect("ok").n_predict, None);
        assert!(cfg(&["--n-predict", "-2"]).is_err());
        let chatml = cfg(&["--chat-template", "chatml"]).expect("a built-in name").chat_template;
        assert_eq!(chatml.as_deref(), ferrolm::chat::builtin_template("chatml"));
        let inline = "{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(
            cfg(&["--chat-template", inline]).expect("Jinja text").chat_template.as_deref(),
            Some(inline)
        );
        let r = cfg(&["--reasoning", "off", "--reasoning-format", "none"]).expect("ok");
        assert_eq!((r.reasoning, r.reasoning_to_field), (Some(false), false));
        let r = cfg(&[]).expect("ok");
        assert_eq!((r.reasoning, r.reasoning_to_field, r.reasoning_budget), (None, true, None));
        let r = cfg(&["--reasoning-budget", "0", "--reasoning-budget-message", "Enough."]).expect("ok");
        assert_eq!((r.reasoning_budget, r.reasoning_budget_message.as_str()), (Some(0), "Enough."));
        assert!(cfg(&["--reasoning-budget", "-2"]).is_err());
        assert!(parse(&["--reasoning", "maybe"]).is_err());
        let err = cfg(&["--chat-template", "llama9"]).expect_err("unknown name").to_string();
        assert!(err.contains("chatml"), "{err}");
        assert!(cfg(&["--chat-template", "{% for %}"]).is_err(), "a template that does not compile");
        assert!(cfg(&["--chat-template-file", "/nonexistent/t.jinja"]).is_err());
    }

    #[test]
    fn models_dir_flags() {
        let a = parse(&["--models-dir", "/srv/models", "--models-max", "2", "--models-memory", "512"])
            .expect("parses");
        assert_eq!(a.models_dir.as_deref(), Some(Path::new("/srv/models")));
        assert_eq!((a.models_max, a.models_memory), (2, 512));
        let d = parse(&[]).expect("defaults");
        assert_eq!((d.models_dir.is_none(), d.models_max, d.models_memory), (true, 4, 0));
        for other in [&["-m", "x.gguf"][..], &["--alias", "a"], &["--model-draft", "d.gguf"]] {
            for flag in ["--models-dir", "--models-preset"] {
                let args = [&[flag, "/srv/models"][..], other].concat();
                assert!(parse(&args).is_err(), "{flag} with {other:?}");
            }
        }
        let p = parse(&["--models-preset", "m.ini", "--no-models-autoload"]).expect("parses");
        assert!(p.models_preset.is_some() && p.no_models_autoload);
        let cors =
            parse(&["--cors-origins", "localhost,http://a.example", "--cors-origin", "http://b.example"])
                .expect("parses")
                .server_config("m".into())
                .expect("config")
                .cors_origins;
        assert_eq!(cors, ["localhost", "http://a.example", "http://b.example"]);
        let cfg = |args: &[&str]| parse(args).expect("parses").server_config("m".into());
        let off = cfg(&["--cors-origin", "none", "--no-cors-credentials"]).expect("config");
        assert!(off.cors_origins.is_empty() && !off.cors_credentials);
        assert!(cfg(&["--cors-origin", "none,http://a.example"]).is_err());
        let last =
            cfg(&["--no-cors-credentials", "--cors-credentials", "--cors-methods", "GET"]).expect("config");
        assert!(last.cors_credentials && last.cors_methods == "GET" && last.cors_headers == "*");
    }

    #[test]
    fn slot_save_folder_is_created_or_refused() {
        let base = std::env::temp_dir().join(format!("ferrolm-slot-save-{}", std::process::id()));
        let dir = base.join("a/b");
        let arg = dir.to_str().expect("utf-8 temp path");
        let cfg = parse(&["--slot-save-path", arg]).expect("parses").server_config("m".into());
        assert_eq!(cfg.expect("created").slot_save_path.as_deref(), Some(dir.as_path()));
        assert!(dir.is_dir());
        let file = base.join("file");
        std::fs::write(&file, b"x").expect("write");
        let arg = file.join("sub");
        let arg = arg.to_str().expect("utf-8 temp path");
        let err = parse(&["--slot-save-path", arg]).expect("parses").server_config("m".into());
        assert!(err.expect_err("under a file").to_string().contains("--slot-save-path"));
        std::fs::remove_dir_all(&base).expect("clean up");
    }

    #[test]
    fn server_tools_flags() {
        let cfg = |args: &[&str]| parse(args).and_then(|a| a.server_config("m".into()));
        let off = cfg(&[]).expect("config");
        assert_eq!(off.server_tools, ServerToolsConfig::default());
        let s = cfg(&["--tools", "read_file,grep_search", "--ui-mcp-proxy"]).expect("config");
        assert_eq!(s.server_tools.tools, ["read_file", "grep_search"]);
        assert!(s.server_tools.cors_proxy);
        // Tools make CORS default to this machine's origins, unless an origin is given.
        assert_eq!(s.cors_origins, ["localhost"]);
        let s = cfg(&["--tools", "all", "--cors-origin", "*"]).expect("config");
        assert_eq!(s.cors_origins, ["*"]);
        let s = cfg(&["--agent"]).expect("config");
        assert!(
            s.server_tools.cors_proxy && s.server_tools.tools == ["all"] && s.cors_origins == ["localhost"]
        );
        let json = r#"{"mcpServers": {"echo": {"command": "python3", "args": ["e.py"], "timeout_ms": 500}}}"#;
        let s = cfg(&["--mcp-servers-json", json]).expect("config");
        assert_eq!(s.server_tools.mcp_servers.len(), 1);
        assert_eq!(
            (s.server_tools.mcp_servers[0].name.as_str(), s.cors_origins[0].as_str()),
            ("echo", "localhost")
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("mcp.json");
        std::fs::write(&file, json).expect("write");
        let s = cfg(&["--mcp-servers-config", file.to_str().expect("utf8"), "--mcp-servers-json", json])
            .expect("config");
        assert_eq!(s.server_tools.mcp_servers.len(), 1, "the same name twice keeps the first");
        for bad in [
            vec!["--tools", "rm_rf"],
            vec!["--tools-runtime", "docker:busybox"],
            vec!["--mcp-servers-json", "not valid json"],
            vec!["--mcp-servers-config", "/nonexistent/path.json"],
        ] {
            let err = cfg(&bad).expect_err("refused");
            assert!(!format!("{err:#}").is_empty());
        }
        let err = format!("{:#}", cfg(&["--tools-runtime", "ssh:host"]).expect_err("refused"));
        assert!(err.contains("no isolated tool runtime"), "{err}");
    }

    #[test]
    fn every_flag() {
        let a = parse(&[
            "-c",
            "2048",
            "--parallel",
            "2",
            "--chunk-size",
            "128",
            "--batch-strategy",
            "balanced",
            "--max-queue",
            "9",
            "--cache-ram",
            "0",
            "--alias",
            "my-model",
            "--alias",
            "other",
            "--api-key",
            "k",
            "--cors-origin",
            "*",
            "--max-body-bytes",
            "1000",
            "--timeout",
            "2.5",
            "--shutdown-timeout",
            "0",
            "--embeddings-pooling",
            "last",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--temp",
            "0.3",
        ])
        .expect("flags");
        let e = a.engine_config().expect("engine");
        assert_eq!(
            (e.n_slots, e.n_ctx, e.chunk_size, e.max_queue, e.prefix_cache_bytes),
            (2, 2048, 128, 9, 0)
        );
        assert_eq!(e.strategy, BatchStrategy::Balanced);
        let s = a.server_config("file-stem".into()).expect("server");
        assert_eq!(s.model_id, "my-model");
        assert_eq!(s.aliases, vec!["my-model", "other"]);
        let t = parse(&["--tags", "chat, fim,,chat", "--tags", "small"]).expect("tags");
        assert_eq!(t.server_config("x".into()).expect("server").tags, vec!["chat", "fim", "small"]);
        assert_eq!((s.api_key.as_deref(), s.cors_origins.clone()), (Some("k"), vec!["*".to_string()]));
        assert_eq!(
            (s.max_body_bytes, s.timeout, s.shutdown_timeout),
            (1000, Duration::from_millis(2500), Duration::ZERO)
        );
        assert_eq!((s.host.as_str(), s.port, s.embeddings_pooling), ("0.0.0.0", 0, Some(Pooling::Last)));
        assert_eq!(s.sampler.temperature, 0.3);
        assert_eq!(parse(&["-b", "64"]).expect("b").engine_config().expect("e").chunk_size, 64);
    }

    #[test]
    fn a_draft_model_sets_the_requests_default_draft() {
        use ferrolm::engine::DraftSettings;
        assert_eq!(parse(&[]).expect("parses").server_config("x".into()).expect("ok").draft, None);
        let a = parse(&[
            "--model-draft",
            "d.gguf",
            "--draft-max",
            "5",
            "--draft-min",
            "2",
            "--draft-p-min",
            "0.5",
        ]);
        let s = a.expect("parses").server_config("x".into()).expect("ok");
        assert_eq!(s.draft, Some(DraftSettings { max_draft: 5, min_draft: 2, p_min: 0.5 }));
    }

    #[test]
    fn sleep_idle_seconds() {
        let off = parse(&[]).expect("parses").server_config("x".into()).expect("cfg");
        assert_eq!(off.sleep_idle, None);
        let never = parse(&["--sleep-idle-seconds", "-1"]).expect("parses");
        assert_eq!(never.server_config("x".into()).expect("cfg").sleep_idle, None);
        let a = parse(&["--sleep-idle-seconds", "30"]).expect("parses");
        assert_eq!(a.server_config("x".into()).expect("cfg").sleep_idle, Some(Duration::from_secs(30)));
    }

    #[test]
    fn bad_values() {
        assert!(parse(&["--batch-strategy", "fastest"]).is_err());
        assert!(parse(&["--embeddings-pooling", "max"]).is_err());
        assert!(parse(&["--api-key", "a", "--api-key-file", "f"]).is_err());
        assert!(parse(&["--parallel", "0"]).expect("parses").engine_config().is_err());
        assert!(parse(&["--timeout", "nan"]).expect("parses").server_config("x".into()).is_err());
        assert!(parse(&["--alias", " "]).expect("parses").server_config("x".into()).is_err());
        assert!(parse(&["--draft-max", "16"]).is_err());
        for bad in ["0", "-2"] {
            let a = parse(&["--sleep-idle-seconds", bad]).expect("parses");
            assert!(a.server_config("x".into()).is_err(), "--sleep-idle-seconds {bad}");
        }
        for bad in [["--draft-min", "9"], ["--draft-p-min", "1.5"]] {
            let a = parse(&["--model-draft", "d.gguf", bad[0], bad[1]]).expect("parses");
            assert!(a.server_config("x".into()).is_err(), "{bad:?}");
        }
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("key");
        std::fs::write(&f, "s3cret\nignored\n").expect("write");
        let a = parse(&["--api-key-file", f.to_str().expect("utf8")]).expect("parses");
        assert_eq!(a.server_config("x".into()).expect("cfg").api_key.as_deref(), Some("s3cret"));
    }

    #[test]
    fn connection_flags() {
        let s = parse(&[]).expect("defaults").server_config("x".into()).expect("cfg");
        assert_eq!(s.connections, ConnLimits { max_connections: 0, ..ConnLimits::default() });
        let a = parse(&[
            "--header-timeout",
            "2",
            "--body-timeout",
            "3",
            "--idle-timeout",
            "0.5",
            "--max-connections",
            "100",
            "--max-connections-per-client",
            "10",
        ])
        .expect("flags");
        let c = a.server_config("x".into()).expect("cfg").connections;
        assert_eq!(
            (c.header_timeout, c.body_timeout, c.idle_timeout, c.max_connections, c.max_per_client),
            (Duration::from_secs(2), Duration::from_secs(3), Duration::from_millis(500), 100, 10)
        );
        for flag in ["--header-timeout", "--body-timeout", "--idle-timeout"] {
            let a = parse(&[flag, "0"]).expect("parses");
            assert!(a.server_config("x".into()).is_err(), "{flag} 0");
        }
    }

    #[test]
    fn model_ids() {
        assert_eq!(
            default_model_id(None, Path::new("/x/SmolLM2-135M-Instruct.Q4_1.gguf")),
            "smollm2-135m-instruct"
        );
        assert_eq!(default_model_id(Some("smollm2"), Path::new("/x/a.gguf")), "smollm2-135m-instruct");
        assert_eq!(default_model_id(Some("hf.co/org/repo:Q4_0"), Path::new("/x/a.gguf")), "org/repo:Q4_0");
        assert_eq!(
            default_model_id(Some("/nonexistent/my.model.gguf"), Path::new("/nonexistent/my.model.gguf")),
            "my.model"
        );
    }
}
