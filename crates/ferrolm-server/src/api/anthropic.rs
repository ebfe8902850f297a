//! Anthropic's Messages API: `POST /v1/messages` (plain and streamed, with tool use) and
//! `POST /v1/messages/count_tokens`.
//!
//! A request is translated into the chat request it means (`system` first; text blocks as text
//! parts; an assistant's `tool_use` blocks as tool calls; a user's `tool_result` blocks as tool
//! messages; `tools` with their `input_schema` as functions; `tool_choice` `auto`, `any`, `tool`
//! or `none`; `stop_sequences`, `temperature`, `top_p`, `top_k`) and runs as a chat completion
//! through the model's template. The answer is a `message`: its `content` blocks (a thinking
//! model's reasoning as a `thinking` block with an empty `signature`, as llama-server writes
//! it; `text`; then `tool_use` with the parsed arguments as `input`), `stop_reason`
//! (`end_turn`, `max_tokens`, `stop_sequence` with `stop_sequence`, `tool_use`) and `usage`.
//! Streamed, the events are Anthropic's: `message_start`, `content_block_start`/`_delta`/`_stop`
//! per block (reasoning as `thinking_delta` and an empty `signature_delta` before its stop, text
//! as `text_delta`, a tool's input as one `input_json_delta`), `message_delta` with the stop
//! reason and the output tokens, and `message_stop`.
//!
//! The reasoning is split as for chat (the server's `--reasoning-format`, or the request's
//! `reasoning_format`; `none` leaves it in the text). `thinking: {"type": "enabled"}` turns
//! thinking on, its `budget_tokens` limiting the reasoning as chat's `reasoning_budget_tokens`
//! does; `{"type": "disabled"}` turns it off as `enable_thinking: false` does; an assistant's
//! `thinking` blocks are its `reasoning_content`.
//!
//! Refused with 400 naming the field: image and document blocks.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse;
use serde_json::{Map, Value, json};

use super::chat::{ChatJob, copy_renamed, function_tool, named_tool_choice, prepare, requests};
use super::error::ApiError;
use super::events_sse::{EventWriter, named, respond};
use super::json::{parse_object, type_name};
use super::response::{Collected, collect, new_id, submit_all};
use super::tools::{ReplyText, ToolCall};
use super::{AppState, json_response};
use ferrolm::decoder::FinishReason;
use ferrolm::engine::{RequestHandle, Usage};

/// The text of a `system` field or a `tool_result` content: a string or text blocks.
fn text_of(param: &str, v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(blocks) => {
            let mut out = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => out.push(t.to_string()),
                    _ => {
                        return Err(ApiError::invalid_param(
                            format!("{param}[{i}]"),
                            "only text blocks are supported here",
                        ));
                    }
                }
            }
            Ok(out.join("\n"))
        }
        other => Err(ApiError::invalid_param(
            param,
            format!("must be a string or blocks, not {}", type_name(other)),
        )),
    }
}

/// One Anthropic message as chat messages (a user message with tool results becomes one tool
/// message per result, then the user's text if any).
fn chat_messages(i: usize, m: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let param = format!("messages[{i}]");
    let role = match m.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        Some(r) => {
            return Err(ApiError::invalid_param(
                format!("{param}.role"),
                format!("unknown role '{r}' (user or assistant)"),
            ));
        }
        None => return Err(ApiError::invalid_param(format!("{param}.role"), "a message needs a role")),
    };
    let blocks = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        _ => {
            return Err(ApiError::invalid_param(
                format!("{param}.content"),
                "`content` must be a string or blocks",
            ));
        }
    };
    let (mut parts, mut calls, mut thinking) = (Vec::new(), Vec::new(), None::<String>);
    for (j, b) in blocks.iter().enumerate() {
        let bp = format!("{param}.content[{j}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                parts.push(json!({"type": "text", "text": b.get("text").cloned().unwrap_or(json!(""))}))
            }
            Some("tool_use") if role == "assistant" => calls.push(json!({
                "id": b.get("id").cloned().unwrap_or_else(|| json!(new_id("toolu_"))),
                "type": "function",
                "function": {
                    "name": b.get("name").cloned().unwrap_or(json!("")),
                    "arguments": b.get("input").cloned().unwrap_or(json!({})).to_string(),
                },
            })),
            Some("tool_result") if role == "user" => {
                let id = b.get("tool_use_id").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid_param(format!("{bp}.tool_use_id"), "a tool_result needs `tool_use_id`")
                })?;
                let text = text_of(&format!("{bp}.content"), b.get("content").unwrap_or(&Value::Null))?;
                out.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
            }
            Some("thinking") if role == "assistant" => thinking
                .get_or_insert_with(String::new)
                .push_str(b.get("thinking").and_then(Value::as_str).unwrap_or("")),
            Some("redacted_thinking") if role == "assistant" => {}
            Some(t) => {
                return Err(ApiError::invalid_param(
                    bp,
                    format!("content blocks of type '{t}' are not supported here"),
                ));
            }
            None => return Err(ApiError::invalid_param(bp, "a content block needs a `type`")),
        }
    }
    if !parts.is_empty() || !calls.is_empty() || thinking.is_some() {
        let mut msg =
            json!({"role": role, "content": if parts.is_empty() { Value::Null } else { json!(parts) }});
        if !calls.is_empty() {
            msg["tool_calls"] = json!(calls);
        }
        if let Some(t) = thinking {
            msg["reasoning_content"] = json!(t);
        }
        out.push(msg);
    }
    Ok(())
}

/// The chat request an Anthropic request means.
fn to_chat(v: &Value) -> Result<Value, ApiError> {
    let obj = v.as_object().ok_or_else(|| ApiError::invalid("the body must be a JSON object"))?;
    let mut messages = Vec::new();
    if let Some(s) = obj.get("system") {
        let text = text_of("system", s)?;
        if !text.is_empty() {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    match obj.get("messages") {
        Some(Value::Array(ms)) => {
            for (i, m) in ms.iter().enumerate() {
                chat_messages(i, m, &mut messages)?;
            }
        }
        _ => return Err(ApiError::invalid_param("messages", "`messages` must be an array")),
    }
    let mut chat = Map::new();
    chat.insert("messages".into(), json!(messages));
    let pairs = [
        ("model", "model"),
        ("max_tokens", "max_tokens"),
        ("stop_sequences", "stop"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("stream", "stream"),
        ("reasoning_format", "reasoning_format"),
        ("chat_template_kwargs", "chat_template_kwargs"),
    ];
    copy_renamed(obj, &mut chat, &pairs);
    thinking_switch(obj.get("thinking"), &mut chat)?;
    if let Some(Value::Array(tools)) = obj.get("tools") {
        let funcs: Vec<Value> = tools.iter().map(|t| function_tool(t, "input_schema")).collect();
        if !funcs.is_empty() {
            chat.insert("tools".into(), json!(funcs));
        }
    }
    if let Some(tc) = obj.get("tool_choice") {
        let choice = match tc.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => named_tool_choice(tc.get("name")),
            _ => {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "`tool_choice.type` must be auto, any, tool or none",
                ));
            }
        };
        if chat.contains_key("tools") {
            chat.insert("tool_choice".into(), choice);
        }
    }
    Ok(Value::Object(chat))
}

/// `thinking: {"type": "enabled" | "disabled"}` as the chat request's `enable_thinking` (a
/// `chat_template_kwargs` entry the request did not set itself), and an enabled thinking's
/// `budget_tokens` as `reasoning_budget_tokens`.
fn thinking_switch(thinking: Option<&Value>, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let on = match thinking.filter(|t| !t.is_null()).map(|t| t.get("type").and_then(Value::as_str)) {
        None => return Ok(()),
        Some(Some("enabled")) => true,
        Some(Some("disabled")) => false,
        Some(_) => {
            return Err(ApiError::invalid_param(
                "thinking.type",
                "`thinking.type` must be enabled or disabled",
            ));
        }
    };
    match thinking.and_then(|t| t.get("budget_tokens")) {
        Some(b) if on && b.as_u64().is_some() => {
            chat.insert("reasoning_budget_tokens".into(), b.clone());
        }
        None | Some(Value::Null) => {}
        Some(_) if !on => {}
        Some(b) => {
            return Err(ApiError::invalid_param(
                "thinking.budget_tokens",
                format!("`thinking.budget_tokens` must be a whole number of tokens, not {b}"),
            ));
        }
    }
    match chat.entry("chat_template_kwargs").or_insert_with(|| json!({})) {
        Value::Object(kwargs) => {
            kwargs.entry("enable_thinking").or_insert(Value::Bool(on));
            Ok(())
        }
        _ => Err(ApiError::invalid_param("chat_template_kwargs", "`chat_template_kwargs` must be an object")),
    }
}

/// Anthropic's `stop_reason`.
fn stop_reason(finish: Option<FinishReason>, tool_use: bool) -> &'static str {
    match finish {
        _ if tool_use => "tool_use",
        Some(FinishReason::StopString) => "stop_sequence",
        Some(FinishReason::Length | FinishReason::ContextFull) => "max_tokens",
        _ => "end_turn",
    }
}

/// A `tool_use` block; its `input` is the parsed arguments (an object).
fn tool_use_block(c: &ToolCall) -> Value {
    let input =
        serde_json::from_str::<Value>(&c.arguments).ok().filter(Value::is_object).unwrap_or(json!({}));
    json!({"type": "tool_use", "id": new_id("toolu_"), "name": c.name, "input": input})
}

fn usage_json(c: &Collected) -> Value {
    json!({
        "input_tokens": c.usage.prompt_tokens,
        "output_tokens": c.usage.completion_tokens,
        "cache_read_input_tokens": c.usage.cached_tokens,
        "cache_creation_input_tokens": 0,
    })
}

/// `POST /v1/messages`.
pub(crate) async fn messages(state: AppState, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let job = prepare(&state, &to_chat(&v)?)?;
    if job.spec.n != 1 {
        return Err(ApiError::invalid_param("n", "one reply per request"));
    }
    let rxs = submit_all(state.backend.as_ref(), requests(&job), job.spec.timeout, job.spec.constraint_param)
        .await?;
    let id = new_id("msg_");
    let rx = rxs.into_iter().next().ok_or_else(|| ApiError::internal("no request was queued"))?;
    if job.spec.stream {
        return Ok(stream_response(job, id, rx));
    }
    let c = collect(rx).await?;
    let (reasoning, text, calls) = job.read(&c.text);
    let mut content = Vec::new();
    if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
        content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if !text.is_empty() || calls.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    content.extend(calls.iter().map(tool_use_block));
    let body = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": job.model,
        "content": content,
        "stop_reason": stop_reason(c.finish, !calls.is_empty()),
        "stop_sequence": c.stop_word,
        "usage": usage_json(&c),
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": n}`, the prompt the request would run.
pub(crate) fn count_tokens(state: &AppState, v: &Value) -> Result<Value, ApiError> {
    let mut chat = to_chat(v)?;
    // Counting needs no reply length.
    if let Some(o) = chat.as_object_mut() {
        o.remove("max_tokens");
        o.remove("stream");
    }
    let job = prepare(state, &chat)?;
    Ok(json!({"input_tokens": job.prompt.len()}))
}

/// The SSE events of one streamed message.
struct Events {
    job: ChatJob,
    id: String,
    reply: ReplyText,
    /// The open block: thinking (true) or text, and its index.
    open: Option<(bool, usize)>,
    /// The index of the next block.
    next: usize,
    out: Vec<sse::Event>,
}

impl Events {
    fn emit(&mut self, v: Value) {
        self.out.push(named(&v));
    }

    /// Text of a thinking block (`thinking`) or a text block, in the open block of its kind or
    /// in a new one after it.
    fn block_text(&mut self, thinking: bool, t: &str) {
        if t.is_empty() {
            return;
        }
        let index = match self.open {
            Some((kind, index)) if kind == thinking => index,
            _ => {
                self.close();
                let index = self.next;
                self.next += 1;
                self.open = Some((thinking, index));
                let block = if thinking {
                    json!({"type": "thinking", "thinking": "", "signature": ""})
                } else {
                    json!({"type": "text", "text": ""})
                };
                self.emit(json!({"type": "content_block_start", "index": index, "content_block": block}));
                index
            }
        };
        let delta = if thinking {
            json!({"type": "thinking_delta", "thinking": t})
        } else {
            json!({"type": "text_delta", "text": t})
        };
        self.emit(json!({"type": "content_block_delta", "index": index, "delta": delta}));
    }

    /// Closes the open block (a thinking block gets its empty signature first).
    fn close(&mut self) {
        let Some((thinking, index)) = self.open.take() else { return };
        if thinking {
            let delta = json!({"type": "signature_delta", "signature": ""});
            self.emit(json!({"type": "content_block_delta", "index": index, "delta": delta}));
        }
        self.emit(json!({"type": "content_block_stop", "index": index}));
    }

    fn start(&mut self) {
        let msg = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.job.model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.job.prompt.len(), "output_tokens": 0},
        });
        self.emit(json!({"type": "message_start", "message": msg}));
        self.emit(json!({"type": "ping"}));
    }

    fn done(
        &mut self,
        calls: &[ToolCall],
        finish: FinishReason,
        output_tokens: usize,
        stop_word: Option<String>,
    ) {
        self.close();
        for (index, c) in (self.next..).zip(calls) {
            let mut block = tool_use_block(c);
            let input = block["input"].take().to_string();
            block["input"] = json!({});
            self.emit(json!({"type": "content_block_start", "index": index, "content_block": block}));
            self.emit(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": input}}));
            self.emit(json!({"type": "content_block_stop", "index": index}));
        }
        let delta =
            json!({"stop_reason": stop_reason(Some(finish), !calls.is_empty()), "stop_sequence": stop_word});
        self.emit(
            json!({"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}}),
        );
        self.emit(json!({"type": "message_stop"}));
    }
}

impl EventWriter for Events {
    fn reply(&mut self) -> &mut ReplyText {
        &mut self.reply
    }

    fn text(&mut self, t: &str) {
        self.block_text(false, t);
    }

    fn reasoning(&mut self, t: &str) {
        self.block_text(true, t);
    }

    fn end(&mut self, finish: FinishReason, usage: Usage, stop_word: Option<String>, calls: Vec<ToolCall>) {
        self.done(&calls, finish, usage.completion_tokens, stop_word);
    }

    fn error(&mut self, e: ApiError) {
        self.emit(json!({"type": "error", "error": {"type": "api_error", "message": e.message}}));
    }

    fn take(&mut self) -> Vec<sse::Event> {
        std::mem::take(&mut self.out)
    }
}

fn stream_response(job: ChatJob, id: String, rx: RequestHandle) -> Response {
    let reply = job.reply_text();
    let mut ev = Events { job, id, reply, open: None, next: 0, out: Vec::new() };
    ev.start();
    respond(ev, rx)
}
