//! llama-server's experimental server tools (`--tools`), MCP servers (`--mcp-servers-config`,
//! `--mcp-servers-json`) and CORS proxy (`--ui-mcp-proxy`), for agents and the web page:
//!
//! - `GET /tools` lists the enabled tools: `{"tool", "display_name", "type" ("server" or
//!   "mcp"), "permissions": {"write"}, "uses_cwd", "definition"}` (the definition is an OpenAI
//!   function tool, ready for a chat request's `tools`).
//! - `POST /tools` with `{"tool", "params", "stream"}` runs one. A tool's own failure is a 200
//!   with `{"error": message}`; a malformed body or a missing parameter is a 400, an unknown
//!   tool a 404. The `x-tool-cwd` header sets the folder relative paths (and commands) start
//!   from; a `cwd` in the params is ignored. `exec_shell_command` may stream
//!   (`"stream": true`): SSE events `{"chunk": text}`, then `{"done": true}` (with `"error"` when
//!   it failed).
//! - With neither tools nor MCP servers, both routes answer 403; so does `/cors-proxy` without
//!   `--ui-mcp-proxy`.
//!
//! Tools run on tokio's blocking pool or as child processes, never on the engine's thread, so a
//! slow tool does not hold up generation. Isolated runtimes (`x-tool-runtime`, llama-server's
//! containers and ssh) are not implemented: a valid runtime header is refused with a 500 naming
//! it, and the tools never fall back to the host for such a request.

mod definitions;
mod edit;
mod files;
mod mcp;
mod proxy;
mod shell;

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::watch;

pub use mcp::{McpConfigError, McpServerConfig, parse_mcp_servers};

use super::error::ApiError;
use super::json_response;

/// The built-in tools, in llama-server's order: (name, display name, writes).
const BUILTIN: [(&str, &str, bool); 7] = [
    ("read_file", "Read file", false),
    ("file_glob_search", "File search", false),
    ("grep_search", "Grep search", false),
    ("exec_shell_command", "Execute shell command", true),
    ("write_file", "Write file", true),
    ("edit_file", "Edit file", true),
    ("get_info", "Get Runtime Info", false),
];

/// The names of the built-in tools, for `--tools`.
pub fn builtin_tool_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|t| t.0).collect()
}

/// What the server-tools features are given on the command line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerToolsConfig {
    /// Built-in tools to enable (`--tools`; `all` for every one). Empty: none.
    pub tools: Vec<String>,
    /// MCP servers whose tools `/tools` offers (`--mcp-servers-config`, `--mcp-servers-json`).
    pub mcp_servers: Vec<McpServerConfig>,
    /// Whether `/cors-proxy` answers (`--ui-mcp-proxy`).
    pub cors_proxy: bool,
}

impl ServerToolsConfig {
    /// Whether tools or MCP servers are configured (then CORS defaults to `localhost`, as
    /// llama-server's).
    pub fn any_tools(&self) -> bool {
        !self.tools.is_empty() || !self.mcp_servers.is_empty()
    }

    /// Checks `--tools`' names: each a built-in tool or `all`.
    pub fn check(&self) -> Result<(), String> {
        let known = builtin_tool_names();
        match self.tools.iter().find(|t| t.as_str() != "all" && !known.contains(&t.as_str())) {
            Some(bad) => Err(format!("unknown tool \"{bad}\". available tools: {}", known.join(", "))),
            None => Ok(()),
        }
    }
}

/// Why a tool call failed as a request (not as the tool's own `{"error"}` answer).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// A missing or mistyped parameter: 400.
    #[error("{0}")]
    BadRequest(String),
    /// The call could not run (a refused runtime, a shutdown): 500.
    #[error("{0}")]
    Failed(String),
}

/// A required string parameter.
pub(crate) fn req_str(params: &Value, key: &str) -> Result<String, CallError> {
    match params.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(CallError::BadRequest(format!("parameter \"{key}\" must be a string"))),
        None => Err(CallError::BadRequest(format!("missing parameter \"{key}\""))),
    }
}

/// An optional string parameter.
pub(crate) fn opt_str(params: &Value, key: &str) -> Result<Option<String>, CallError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => req_str(params, key).map(Some),
    }
}

/// An optional integer parameter.
pub(crate) fn opt_i64(params: &Value, key: &str) -> Result<Option<i64>, CallError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| CallError::BadRequest(format!("parameter \"{key}\" must be an integer"))),
    }
}

/// An optional boolean parameter.
pub(crate) fn opt_bool(params: &Value, key: &str) -> Result<Option<bool>, CallError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| CallError::BadRequest(format!("parameter \"{key}\" must be a boolean"))),
    }
}

/// Checks an `x-tool-runtime` header as llama-server does (so that an option-looking container
/// id or ssh target, or an unknown scheme, is named as such), then refuses it: ferrolm runs
/// tools on the host only.
fn refuse_runtime(spec: &str) -> CallError {
    let valid = |id: &str, extra: &[char]| {
        id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && id.chars().all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c) || extra.contains(&c))
    };
    for engine in ["docker", "podman"] {
        if let Some(id) = spec.strip_prefix(&format!("{engine}-container:")) {
            if !valid(id, &[]) {
                return CallError::Failed(format!("invalid container id: {id}"));
            }
            return CallError::Failed(format!(
                "tool runtime {spec} is not supported: ferrolm runs tools on the host only"
            ));
        }
        if spec.starts_with(&format!("{engine}:")) {
            return CallError::Failed(format!("tool runtime must name a running container: {spec}"));
        }
    }
    if let Some(target) = spec.strip_prefix("ssh:") {
        if !valid(target, &['@']) {
            return CallError::Failed(format!("invalid ssh target: {target}"));
        }
        return CallError::Failed(format!(
            "tool runtime {spec} is not supported: ferrolm runs tools on the host only"
        ));
    }
    CallError::Failed(format!("unknown tool runtime: {spec}"))
}

/// The enabled tools, their MCP servers, and the flag that stops calls at shutdown.
pub(crate) struct ServerTools {
    /// Enabled built-in tools.
    builtin: Vec<&'static str>,
    /// The MCP servers (their tools found at start).
    mcp: Option<mcp::McpServers>,
    /// MCP tools offered: (`<server>_<tool>`, index into the servers' tools).
    mcp_names: Vec<(String, usize)>,
    /// Flipped at shutdown: running commands and MCP calls stop.
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for ServerTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mcp: Vec<&str> = self.mcp_names.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ServerTools").field("builtin", &self.builtin).field("mcp", &mcp).finish()
    }
}

impl ServerTools {
    /// Starts the configured tools (MCP servers spawned once to list their tools); `None` when
    /// there are none.
    pub(crate) async fn start(cfg: &ServerToolsConfig) -> Result<Option<Arc<ServerTools>>, String> {
        if !cfg.any_tools() {
            return Ok(None);
        }
        cfg.check()?;
        let all = cfg.tools.iter().any(|t| t == "all");
        let builtin: Vec<&'static str> =
            BUILTIN.iter().map(|t| t.0).filter(|n| all || cfg.tools.iter().any(|t| t == n)).collect();
        let (stop, rx) = watch::channel(false);
        let mcp = if cfg.mcp_servers.is_empty() {
            None
        } else {
            Some(mcp::McpServers::start(cfg.mcp_servers.clone(), rx).await)
        };
        let mut mcp_names: Vec<(String, usize)> = Vec::new();
        for (i, t) in mcp.iter().flat_map(|m| m.tools()).enumerate() {
            let name = format!("{}_{}", t.server, t.name);
            if builtin.contains(&name.as_str()) || mcp_names.iter().any(|(n, _)| *n == name) {
                tracing::warn!(tool = %name, "MCP tool collides with another tool, skipped");
                continue;
            }
            mcp_names.push((name, i));
        }
        tracing::warn!(
            builtin = builtin.len(),
            mcp = mcp_names.len(),
            "experimental server tools are enabled: do not expose this server to untrusted clients"
        );
        Ok(Some(Arc::new(ServerTools { builtin, mcp, mcp_names, stop })))
    }

    /// Stops running commands and MCP calls, and the MCP server processes.
    pub(crate) fn shutdown(&self) {
        let _ = self.stop.send(true);
        if let Some(m) = &self.mcp {
            m.close_all();
        }
    }

    /// `GET /tools`' list.
    fn list(&self) -> Value {
        let mut out: Vec<Value> = Vec::new();
        for (name, display, write) in BUILTIN.iter().filter(|t| self.builtin.contains(&t.0)) {
            out.push(json!({
                "display_name": display, "tool": name, "type": "server",
                "permissions": {"write": write}, "uses_cwd": true, "definition": definitions::of(name),
            }));
        }
        let tools = self.mcp.as_ref().map(|m| m.tools()).unwrap_or_default();
        for (name, i) in &self.mcp_names {
            let t = &tools[*i];
            let definition = json!({"type": "function", "function": {
                "name": name, "description": t.description, "parameters": t.schema,
            }});
            out.push(json!({
                "display_name": name, "tool": name, "type": "mcp",
                "permissions": {"write": false}, "uses_cwd": false, "definition": definition,
            }));
        }
        Value::Array(out)
    }

    /// Runs one tool to its answer.
    async fn call(
        &self,
        name: &str,
        params: Value,
        cwd: Option<PathBuf>,
        base64: bool,
    ) -> Result<Value, CallError> {
        if let Some((_, i)) = self.mcp_names.iter().find(|(n, _)| n == name) {
            let mcp = self.mcp.as_ref().ok_or_else(|| CallError::Failed("no MCP servers".into()))?;
            let t = &mcp.tools()[*i];
            return Ok(mcp.call(&t.server, &t.name, params).await);
        }
        let stop = self.stop.subscribe();
        let cwd_ref = cwd.as_deref();
        match name {
            "exec_shell_command" => shell::exec(&params, cwd_ref, stop).await,
            "get_info" => shell::get_info(cwd_ref, stop).await,
            _ => {
                let name = name.to_string();
                let run = move || blocking_tool(&name, &params, cwd.as_deref(), base64);
                tokio::task::spawn_blocking(run)
                    .await
                    .map_err(|e| CallError::Failed(format!("the tool failed: {e}")))?
            }
        }
    }

    /// Whether `name` is an enabled tool, and whether it can stream.
    fn find(&self, name: &str) -> Option<bool> {
        if self.builtin.contains(&name) {
            return Some(name == "exec_shell_command");
        }
        self.mcp_names.iter().any(|(n, _)| n == name).then_some(false)
    }
}

/// The file tools, on the blocking pool.
fn blocking_tool(name: &str, params: &Value, cwd: Option<&Path>, base64: bool) -> Result<Value, CallError> {
    match name {
        "read_file" => files::read_file(params, cwd, base64),
        "write_file" => files::write_file(params, cwd),
        "edit_file" => edit::edit_file(params, cwd),
        "file_glob_search" => files::glob_search(params, cwd),
        "grep_search" => files::grep_search(params, cwd),
        other => Err(CallError::Failed(format!("unknown tool \"{other}\""))),
    }
}

/// The `/tools` and `/cors-proxy` routes: working ones when configured, 403 otherwise.
pub(crate) fn routes(tools: Option<Arc<ServerTools>>, cors_proxy: bool) -> Router {
    let mut r = Router::new();
    r = match tools {
        Some(t) => r.route("/tools", get(list_tools).post(call_tool).with_state(t)),
        None => r.route("/tools", get(disabled).post(disabled)),
    };
    if cors_proxy {
        r.route("/cors-proxy", get(proxy::handle).post(proxy::handle))
    } else {
        r.route("/cors-proxy", get(disabled).post(disabled))
    }
}

/// llama-server's answer for a feature that is off.
async fn disabled() -> Response {
    let body =
        json!({"error": {"code": 403, "message": "this feature is disabled", "type": "feature_disabled"}});
    json_response(StatusCode::FORBIDDEN, &body)
}

async fn list_tools(State(t): State<Arc<ServerTools>>) -> Response {
    json_response(StatusCode::OK, &t.list())
}

/// A header's text, when present and not empty.
fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|s| !s.is_empty())
}

fn call_error(e: CallError) -> Response {
    match e {
        CallError::BadRequest(m) => ApiError::invalid(m).into_response(),
        CallError::Failed(m) => ApiError::internal(m).into_response(),
    }
}

async fn call_tool(State(t): State<Arc<ServerTools>>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return ApiError::invalid("the body must be a JSON object").into_response(),
        Err(e) => return ApiError::invalid(format!("the body is not JSON: {e}")).into_response(),
    };
    let Some(name) = body.get("tool").and_then(Value::as_str) else {
        return ApiError::invalid_param("tool", "\"tool\" must be a string").into_response();
    };
    let mut params = match body.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return ApiError::invalid_param("params", "\"params\" must be an object").into_response(),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    // The model's own `cwd` never counts; the header's does.
    if let Some(obj) = params.as_object_mut() {
        obj.remove("cwd");
    }
    let cwd = header_text(&headers, "x-tool-cwd").map(PathBuf::from);
    if let Some(spec) = header_text(&headers, "x-tool-runtime") {
        return call_error(refuse_runtime(spec));
    }
    let base64 = header_text(&headers, "x-resp-type") == Some("base64");
    let Some(streams) = t.find(name) else {
        return ApiError::with_status(StatusCode::NOT_FOUND, format!("unknown tool \"{name}\""))
            .into_response();
    };
    if stream && !streams {
        return ApiError::with_status(
            StatusCode::NOT_FOUND,
            format!("tool \"{name}\" does not support stream = true"),
        )
        .into_response();
    }
    if stream {
        return stream_exec(&t, &params, cwd);
    }
    match t.call(name, params, cwd, base64).await {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => call_error(e),
    }
}

/// `exec_shell_command` streamed: its output as `{"chunk"}` events, then `{"done": true}`. A
/// client that goes away stops the command.
fn stream_exec(t: &ServerTools, params: &Value, cwd: Option<PathBuf>) -> Response {
    let (command, timeout, max_output) = match shell::exec_args(params) {
        Ok(a) => a,
        Err(e) => return call_error(e),
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let stop = t.stop.subscribe();
    tokio::spawn(async move {
        let sink_tx = tx.clone();
        let sink = move |chunk: &str| sink_tx.send(json!({"chunk": chunk})).is_ok();
        let o = shell::run(&["sh", "-c", &command], cwd.as_deref(), timeout, max_output, sink, stop).await;
        if o.stopped {
            let _ = tx.send(json!({"done": true, "error": "the command was stopped"}));
            return;
        }
        let _ = tx.send(json!({"chunk": shell::exit_line(&o)}));
        let _ = tx.send(json!({"done": true}));
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let v = rx.recv().await?;
        Some((Ok::<_, Infallible>(Event::default().data(v.to_string())), rx))
    });
    Sse::new(events).into_response()
}

#[cfg(test)]
mod tests;
