//! MCP servers over stdio, as llama-server's `--mcp-servers-config` / `--mcp-servers-json`
//! (`tools/server/server-mcp.cpp`): each configured server is a child process speaking
//! newline-delimited JSON-RPC 2.0 on its stdin and stdout (MCP's stdio transport).
//!
//! At start every server is spawned once, initialized, asked for its tools (`tools/list`, at
//! most [`WARMUP_BUDGET`]) and stopped; its tools are then `/tools` entries named
//! `<server>_<tool>`. A call spawns the server again on demand and keeps it for the next calls;
//! one that died (crashed, closed its output) is spawned afresh on the next call, and one that
//! cannot be started is not tried again for [`COOLDOWN`]. Calls to one server are serialized,
//! each under its `timeout_ms`. Replies are matched by id: notifications, malformed lines and
//! late replies of timed-out calls are skipped. Each child runs in its own process group, and
//! the whole group is killed when its server is stopped, so a grandchild that holds the pipes
//! neither keeps a read waiting nor outlives the server.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::shell::stopped;

/// The MCP protocol version the client asks for.
const PROTOCOL_VERSION: &str = "2024-11-05";
/// Longest tool discovery of one server at start.
pub(crate) const WARMUP_BUDGET: Duration = Duration::from_secs(10);
/// How long a server that could not be started is not tried again.
const COOLDOWN: Duration = Duration::from_secs(5);
/// Longest line read from a server; longer ones are dropped.
const MAX_LINE: usize = 8 << 20;
/// Bytes of a server's stderr kept for the log when it fails.
const ERR_TAIL: usize = 4096;

/// One MCP server of the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServerConfig {
    /// The key in `mcpServers`, the prefix of its tools' names.
    pub name: String,
    /// The program to run (looked up in `PATH`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set over the server's own environment.
    pub env: BTreeMap<String, String>,
    /// Its working folder (`None`: the server's).
    pub cwd: Option<String>,
    /// Longest a tool call may take (`timeout_ms`, default 30 s).
    pub timeout: Duration,
}

/// Why an MCP configuration was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid MCP server configuration: {0}")]
pub struct McpConfigError(pub String);

/// Reads an MCP configuration in Cursor's format, `{"mcpServers": {"name": {"command",
/// "args", "env", "cwd", "timeout_ms"}}}`. Text that is not JSON, or fields of the wrong type,
/// are errors; no `mcpServers` gives no servers, and an entry without a `command` is skipped
/// (both logged), as llama-server does.
pub fn parse_mcp_servers(text: &str) -> Result<Vec<McpServerConfig>, McpConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|e| McpConfigError(format!("not JSON: {e}")))?;
    let Some(servers) = root.get("mcpServers").and_then(Value::as_object) else {
        tracing::warn!("MCP configuration: no \"mcpServers\" object, no servers");
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, cfg) in servers {
        let bad = |what: &str| McpConfigError(format!("server \"{name}\": {what}"));
        let string = |v: &Value, what: &str| v.as_str().map(str::to_string).ok_or_else(|| bad(what));
        let command = match cfg.get("command") {
            None => {
                tracing::warn!(server = %name, "MCP server has no command, skipped");
                continue;
            }
            Some(c) => string(c, "\"command\" must be a string")?,
        };
        let args = match cfg.get("args") {
            None => Vec::new(),
            Some(Value::Array(a)) => {
                a.iter().map(|v| string(v, "\"args\" must hold strings")).collect::<Result<_, _>>()?
            }
            Some(_) => return Err(bad("\"args\" must be an array")),
        };
        let mut env = BTreeMap::new();
        if let Some(e) = cfg.get("env") {
            let obj = e.as_object().ok_or_else(|| bad("\"env\" must be an object"))?;
            for (k, v) in obj {
                env.insert(k.clone(), string(v, "\"env\" values must be strings")?);
            }
        }
        let cwd = cfg.get("cwd").map(|c| string(c, "\"cwd\" must be a string")).transpose()?;
        let timeout_ms = match cfg.get("timeout_ms") {
            None => 30_000,
            Some(t) => t
                .as_u64()
                .filter(|&t| t > 0)
                .ok_or_else(|| bad("\"timeout_ms\" must be a positive integer"))?,
        };
        if out.iter().any(|s: &McpServerConfig| &s.name == name) {
            tracing::warn!(server = %name, "MCP server named twice, the first kept");
            continue;
        }
        let timeout = Duration::from_millis(timeout_ms);
        out.push(McpServerConfig { name: name.clone(), command, args, env, cwd, timeout });
    }
    Ok(out)
}

/// A tool an MCP server offers.
#[derive(Clone, Debug)]
pub(crate) struct McpTool {
    /// The server's name.
    pub server: String,
    /// The tool's own name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The JSON schema of its arguments (`{}` when the server gave none).
    pub schema: Value,
}

/// Reads newline-delimited lines from a pipe, dropping over-long ones.
struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    skipping: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(inner: R) -> Self {
        LineReader { inner, buf: Vec::new(), skipping: false }
    }

    /// The next non-empty line (without `\r\n`), `None` at the end of the stream.
    async fn next_line(&mut self) -> Option<String> {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if std::mem::take(&mut self.skipping) {
                    continue;
                }
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if !text.is_empty() {
                    return Some(text.to_string());
                }
                continue;
            }
            if self.buf.len() > MAX_LINE {
                tracing::warn!("MCP: dropping a line longer than {MAX_LINE} bytes");
                self.buf.clear();
                self.skipping = true;
            }
            match self.inner.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// The JSON-RPC session with one running server: what a call needs, behind one lock.
struct Session {
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next_id: u64,
    initialized: bool,
}

/// One running MCP server process.
pub(crate) struct Transport {
    name: String,
    timeout: Duration,
    session: tokio::sync::Mutex<Session>,
    alive: Arc<AtomicBool>,
    pgid: Option<i32>,
    tasks: Vec<JoinHandle<()>>,
    err_tail: Arc<Mutex<String>>,
}

impl Drop for Transport {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(pgid) = self.pgid.filter(|&p| p > 0) {
            // SAFETY: kill(2) with a negative pid signals the process group the server was
            // started in (`process_group(0)`): the server and what it spawned. No pointers are
            // involved; ESRCH (the group is gone) is harmless.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// An RPC's failure, as its message.
type RpcResult = Result<Value, String>;

impl Transport {
    /// Starts the server of `cfg`: the child, a task feeding its stdout lines to calls, one
    /// logging its stderr, and one reaping it.
    pub(crate) fn spawn(cfg: &McpServerConfig) -> Result<Transport, String> {
        let mut cmd = tokio::process::Command::new(&cfg.command);
        cmd.args(&cfg.args)
            .envs(&cfg.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &cfg.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", cfg.command))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the child has no pipes".into());
        };
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        let alive = Arc::new(AtomicBool::new(true));
        let err_tail = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel(1024);
        let (a1, a2) = (alive.clone(), alive.clone());
        let reader = tokio::spawn(async move {
            let mut r = LineReader::new(stdout);
            while let Some(line) = r.next_line().await {
                if tx.send(line).await.is_err() {
                    break;
                }
            }
            a1.store(false, Ordering::SeqCst);
        });
        let (tail, name) = (err_tail.clone(), cfg.name.clone());
        let errlog = tokio::spawn(async move {
            let mut r = LineReader::new(stderr);
            while let Some(line) = r.next_line().await {
                tracing::debug!(server = %name, "MCP stderr: {line}");
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                t.push_str(&line);
                t.push('\n');
                let cut = t.len().saturating_sub(ERR_TAIL);
                let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(t.len());
                t.drain(..cut);
            }
        });
        let reaper = tokio::spawn(async move {
            let _ = child.wait().await;
            a2.store(false, Ordering::SeqCst);
        });
        let session = tokio::sync::Mutex::new(Session { stdin, lines, next_id: 1, initialized: false });
        Ok(Transport {
            name: cfg.name.clone(),
            timeout: cfg.timeout,
            session,
            alive,
            pgid,
            tasks: vec![reader, errlog, reaper],
            err_tail,
        })
    }

    /// Whether the process still runs and its output is open.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The end of the server's stderr, for the log.
    fn diagnostics(&self) -> String {
        self.err_tail.lock().unwrap_or_else(|e| e.into_inner()).trim().to_string()
    }

    /// Sends one request and waits for the reply with its id until `deadline` or `stop`.
    async fn rpc(
        &self,
        s: &mut Session,
        method: &str,
        params: Value,
        deadline: tokio::time::Instant,
        stop: &mut watch::Receiver<bool>,
    ) -> RpcResult {
        let id = s.next_id;
        s.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = msg.to_string();
        line.push('\n');
        let write = async {
            s.stdin.write_all(line.as_bytes()).await?;
            s.stdin.flush().await
        };
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err("transport closed".into()),
            Err(_) => return Err("request timed out".into()),
        }
        loop {
            tokio::select! {
                line = s.lines.recv() => {
                    let Some(line) = line else { return Err("transport closed".into()) };
                    // Malformed lines, notifications and stale replies are skipped.
                    let Ok(reply) = serde_json::from_str::<Value>(&line) else { continue };
                    if reply.get("id").and_then(Value::as_u64) == Some(id) {
                        return Ok(reply);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Err("request timed out".into()),
                _ = stopped(stop) => return Err("cancelled".into()),
            }
        }
    }

    /// The `result` of a reply, or its error's message.
    fn result_of(reply: Value) -> RpcResult {
        if let Some(e) = reply.get("error") {
            let msg = e.get("message").and_then(Value::as_str).or(e.as_str()).unwrap_or("unknown error");
            return Err(msg.to_string());
        }
        reply.get("result").cloned().ok_or_else(|| "invalid response from MCP server".into())
    }

    /// The `initialize` handshake, once per process.
    async fn ensure_init(
        &self,
        s: &mut Session,
        deadline: tokio::time::Instant,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), String> {
        if s.initialized {
            return Ok(());
        }
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "ferrolm", "version": env!("CARGO_PKG_VERSION")},
        });
        let reply = self.rpc(s, "initialize", params, deadline, stop).await;
        reply.and_then(Self::result_of).map_err(|e| format!("initialize failed: {e}"))?;
        let note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
        let _ = tokio::time::timeout_at(deadline, s.stdin.write_all(note.as_bytes())).await;
        s.initialized = true;
        Ok(())
    }

    /// Locks the session, unless `stop` flips first.
    async fn lock(
        &self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<tokio::sync::MutexGuard<'_, Session>, String> {
        tokio::select! {
            g = self.session.lock() => Ok(g),
            _ = stopped(stop) => Err("cancelled".into()),
        }
    }

    /// The server's tools (`tools/list`), within `budget`.
    pub(crate) async fn list_tools(
        &self,
        budget: Duration,
        mut stop: watch::Receiver<bool>,
    ) -> Result<Vec<McpTool>, String> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut s = self.lock(&mut stop).await?;
        self.ensure_init(&mut s, deadline, &mut stop).await?;
        let reply = self.rpc(&mut s, "tools/list", json!({}), deadline, &mut stop).await;
        let result = reply.and_then(Self::result_of).map_err(|e| format!("tools/list failed: {e}"))?;
        let list = result.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
        let text = |t: &Value, k: &str| t.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        Ok(list
            .iter()
            .map(|t| McpTool {
                server: self.name.clone(),
                name: text(t, "name"),
                description: text(t, "description"),
                schema: t.get("inputSchema").filter(|s| s.is_object()).cloned().unwrap_or_else(|| json!({})),
            })
            .filter(|t| !t.name.is_empty())
            .collect())
    }

    /// Calls `tool` with `arguments`: `/tools`' answer, `{"plain_text_response": text}` (the
    /// text parts of the result's content, one per line) or `{"error": message}`.
    pub(crate) async fn call(&self, tool: &str, arguments: Value, mut stop: watch::Receiver<bool>) -> Value {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let outcome = async {
            let mut s = self.lock(&mut stop).await?;
            self.ensure_init(&mut s, deadline, &mut stop).await?;
            let params = json!({"name": tool, "arguments": arguments});
            self.rpc(&mut s, "tools/call", params, deadline, &mut stop).await.and_then(Self::result_of)
        }
        .await;
        match outcome {
            Ok(result) => result_to_answer(&result),
            Err(e) => json!({"error": e}),
        }
    }
}

/// A `tools/call` result as `/tools` answers it.
fn result_to_answer(result: &Value) -> Value {
    let parts = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let text: Vec<&str> = parts
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
        .map(|p| p.get("text").and_then(Value::as_str).unwrap_or_default())
        .collect();
    let text = text.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let msg = if text.is_empty() { "MCP tool returned an error".to_string() } else { text };
        return json!({"error": msg});
    }
    json!({"plain_text_response": text})
}

/// Every configured server: its tools found at start, and the processes running for calls.
pub(crate) struct McpServers {
    configs: Vec<McpServerConfig>,
    tools: Vec<McpTool>,
    running: Mutex<HashMap<String, Arc<Transport>>>,
    cooldown: Mutex<HashMap<String, Instant>>,
    stop: watch::Receiver<bool>,
}

impl McpServers {
    /// Spawns every server once (all at the same time), lists its tools and stops it. A server
    /// that cannot be started or answers badly is logged and offers no tools.
    pub(crate) async fn start(configs: Vec<McpServerConfig>, stop: watch::Receiver<bool>) -> McpServers {
        let warmups = configs.iter().map(|cfg| {
            let stop = stop.clone();
            async move {
                let t = match Transport::spawn(cfg) {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!(server = %cfg.name, "MCP warmup: {e}");
                        return Vec::new();
                    }
                };
                match t.list_tools(WARMUP_BUDGET, stop).await {
                    Ok(tools) => {
                        tracing::info!(server = %cfg.name, n = tools.len(), "MCP warmup: tools found");
                        tools
                    }
                    Err(e) => {
                        tracing::warn!(server = %cfg.name, stderr = %t.diagnostics(), "MCP warmup: {e}");
                        Vec::new()
                    }
                }
            }
        });
        let tools = futures_util::future::join_all(warmups).await.into_iter().flatten().collect();
        McpServers { configs, tools, running: Mutex::default(), cooldown: Mutex::default(), stop }
    }

    /// The tools found at start.
    pub(crate) fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    /// The running process of `server`, started when there is none or it died; `None` while
    /// it cannot be started (cooldown) or the server shuts down.
    fn transport(&self, server: &str) -> Option<Arc<Transport>> {
        if *self.stop.borrow() {
            return None;
        }
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = running.get(server) {
            if t.is_alive() {
                return Some(t.clone());
            }
            tracing::warn!(server, stderr = %t.diagnostics(), "MCP server is no longer running, starting it again");
            running.remove(server);
        }
        let mut cooldown = self.cooldown.lock().unwrap_or_else(|e| e.into_inner());
        if cooldown.get(server).is_some_and(|&until| Instant::now() < until) {
            return None;
        }
        let cfg = self.configs.iter().find(|c| c.name == server)?;
        match Transport::spawn(cfg) {
            Ok(t) => {
                let t = Arc::new(t);
                running.insert(server.to_string(), t.clone());
                Some(t)
            }
            Err(e) => {
                tracing::warn!(server, "MCP server cannot start: {e}");
                cooldown.insert(server.to_string(), Instant::now() + COOLDOWN);
                None
            }
        }
    }

    /// Calls `tool` of `server`: `/tools`' answer (see [`Transport::call`]).
    pub(crate) async fn call(&self, server: &str, tool: &str, arguments: Value) -> Value {
        match self.transport(server) {
            Some(t) => t.call(tool, arguments, self.stop.clone()).await,
            None => json!({"error": format!("MCP server unavailable: {server}")}),
        }
    }

    /// Stops every running server (their process groups are killed).
    pub(crate) fn close_all(&self) {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parsing() {
        let text = r#"{"mcpServers": {
            "a": {"command": "python3", "args": ["x.py"], "env": {"K": "V"}, "timeout_ms": 500},
            "nocmd": {"args": []}
        }}"#;
        let cfgs = parse_mcp_servers(text).expect("parse");
        assert_eq!(cfgs.len(), 1);
        assert_eq!((cfgs[0].name.as_str(), cfgs[0].timeout), ("a", Duration::from_millis(500)));
        assert_eq!(cfgs[0].env.get("K").map(String::as_str), Some("V"));
        assert!(parse_mcp_servers("not valid json").is_err());
        assert!(parse_mcp_servers(r#"{"mcpServers": {"a": {"command": 3}}}"#).is_err());
        assert!(parse_mcp_servers(r#"{"mcpServers": {"a": {"command": "x", "args": "y"}}}"#).is_err());
        assert!(parse_mcp_servers("{}").expect("empty").is_empty());
    }

    #[test]
    fn results_become_tools_answers() {
        let r = json!({"content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]});
        assert_eq!(result_to_answer(&r), json!({"plain_text_response": "a\nb"}));
        assert_eq!(
            result_to_answer(&json!({"isError": true, "content": []})),
            json!({"error": "MCP tool returned an error"})
        );
    }

    /// A fake server in sh: it answers `initialize`, sends a notification and a malformed line
    /// before each reply, echoes `tools/call`'s id back, answers the tool `slow` after 4 s and
    /// exits on the tool `die`.
    const FAKE: &str = r#"
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"capabilities":{}}}\n' "$id" ;;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","description":"d","inputSchema":{"type":"object","properties":{}}}]}}\n' "$id" ;;
    *'"slow"'*) sleep 4; printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[]}}\n' "$id" ;;
    *'"die"'*) exit 1 ;;
    *) printf '{"jsonrpc":"2.0","method":"notifications/progress"}\nnot json\n{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok %s"}]}}\n' "$id" "$id" ;;
  esac
done
"#;

    fn fake(timeout_ms: u64) -> McpServerConfig {
        McpServerConfig {
            name: "fake".into(),
            command: "sh".into(),
            args: vec!["-c".into(), FAKE.into()],
            env: BTreeMap::new(),
            cwd: None,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[tokio::test]
    async fn warmup_calls_timeouts_and_respawn() {
        let (tx, rx) = watch::channel(false);
        let bad = McpServerConfig { name: "bad".into(), command: "/nonexistent/mcp".into(), ..fake(2500) };
        let servers = McpServers::start(vec![fake(2500), bad], rx).await;
        assert_eq!(servers.tools().len(), 1);
        assert_eq!((servers.tools()[0].server.as_str(), servers.tools()[0].name.as_str()), ("fake", "echo"));
        // The warmup process is gone; a call starts one. Ids 1 (initialize) and 2 (the call).
        assert_eq!(servers.call("fake", "echo", json!({})).await, json!({"plain_text_response": "ok 2"}));
        assert_eq!(servers.call("fake", "echo", json!({})).await, json!({"plain_text_response": "ok 3"}));
        let started = Instant::now();
        let r = servers.call("fake", "slow", json!({})).await;
        assert_eq!(r, json!({"error": "request timed out"}));
        assert!(started.elapsed() < Duration::from_secs(5));
        // The late reply (id 4) is skipped; the next call gets its own.
        assert_eq!(servers.call("fake", "echo", json!({})).await, json!({"plain_text_response": "ok 5"}));
        // A crash: the next call starts the server again (ids from 1).
        let _ = servers.call("fake", "die", json!({})).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(servers.call("fake", "echo", json!({})).await, json!({"plain_text_response": "ok 2"}));
        assert!(
            servers.call("bad", "x", json!({})).await["error"]
                .as_str()
                .expect("error")
                .contains("unavailable")
        );
        // A shutdown cancels a call in flight at once.
        let slow = fake(30_000);
        let slow_servers = McpServers::start(vec![slow], tx.subscribe()).await;
        let call = slow_servers.call("fake", "slow", json!({}));
        let flip = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _ = tx.send(true);
        };
        let started = Instant::now();
        let (r, ()) = tokio::join!(call, flip);
        assert_eq!(r, json!({"error": "cancelled"}));
        assert!(started.elapsed() < Duration::from_secs(5));
        servers.close_all();
    }
}
