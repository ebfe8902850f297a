//! OpenAI's Responses API: `POST /v1/responses` (plain and streamed, with function calls).
//!
//! A request is translated into the chat request it means: `instructions` as the system
//! message; `input` as a string or a list of items (messages with `input_text` parts or a
//! string, `function_call` items as the assistant's tool calls, `function_call_output` items as
//! tool messages); `tools` of type `function`; `tool_choice`; `max_output_tokens`;
//! `temperature`, `top_p`; `text.format` (`text`, `json_object`, `json_schema`); `reasoning`
//! items as the next assistant message's `reasoning_content`. The answer is a `response` whose
//! `output` holds a thinking model's reasoning as a `reasoning` item (an empty `summary`, one
//! `reasoning_text` part, as llama-server writes it), a `message` item with one `output_text`
//! part and a `function_call` item per parsed call; `status` is `incomplete` (with
//! `incomplete_details.reason` `max_output_tokens`) when the length limit cut it. Streamed, the
//! events are the Responses API's (`response.created`, `response.output_item.added`,
//! `response.content_part.added`, `response.reasoning_text.delta` / `.done`,
//! `response.output_text.delta` / `.done`, … `response.completed`), numbered by
//! `sequence_number`. The reasoning is split as for chat (the server's `--reasoning-format`, or
//! the request's `reasoning_format`; `none` leaves it in the text).
//!
//! Nothing is stored: `previous_response_id` and `store: true` are refused by name, as are
//! built-in tools (web search, file search…) and non-text input parts.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse;
use serde_json::{Map, Value, json};

use super::chat::{ChatJob, copy_renamed, function_tool, named_tool_choice, prepare, requests};
use super::error::ApiError;
use super::events_sse::{EventWriter, named, respond};
use super::json::{parse_object, type_name};
use super::response::{Collected, Live, UsageSum, collect, new_id, submit_all, unix_now};
use super::tools::{ReplyText, ToolCall};
use super::{AppState, json_response};
use ferrolm::decoder::FinishReason;
use ferrolm::engine::{RequestHandle, Usage};

/// The text of a message's `content`: a string or `input_text`/`output_text` parts.
fn content_text(param: &str, v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => out.push(t),
                    (t, _) => {
                        return Err(ApiError::invalid_param(
                            format!("{param}[{i}]"),
                            format!("content parts of type {t:?} are not supported (only text)"),
                        ));
                    }
                }
            }
            Ok(out.join("\n"))
        }
        other => Err(ApiError::invalid_param(
            param,
            format!("must be a string or parts, not {}", type_name(other)),
        )),
    }
}

/// The chat messages of `input`.
fn input_messages(v: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let items = match v {
        Value::String(s) => {
            out.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Value::Array(items) => items,
        other => {
            return Err(ApiError::invalid_param(
                "input",
                format!("must be a string or items, not {}", type_name(other)),
            ));
        }
    };
    // A reasoning item's text, for the assistant message after it.
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let p = format!("input[{i}]");
        let field = |k: &str| item.get(k).and_then(Value::as_str);
        match field("type").unwrap_or("message") {
            "reasoning" => {
                let parts = item.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
                let text: String =
                    parts.iter().filter_map(|c| c.get("text").and_then(Value::as_str)).collect();
                reasoning.get_or_insert_with(String::new).push_str(&text);
            }
            "message" => {
                let role = match field("role") {
                    Some("developer") => "system",
                    Some(r @ ("system" | "user" | "assistant")) => r,
                    _ => {
                        return Err(ApiError::invalid_param(
                            format!("{p}.role"),
                            "role must be user, assistant, system or developer",
                        ));
                    }
                };
                let text =
                    content_text(&format!("{p}.content"), item.get("content").unwrap_or(&Value::Null))?;
                let mut msg = json!({"role": role, "content": text});
                if let Some(r) = reasoning.take().filter(|_| role == "assistant") {
                    msg["reasoning_content"] = json!(r);
                }
                out.push(msg);
            }
            "function_call" => {
                let call = json!({
                    "id": field("call_id").unwrap_or_default(),
                    "type": "function",
                    "function": {"name": field("name").unwrap_or_default(), "arguments": field("arguments").unwrap_or("{}")},
                });
                // Consecutive calls belong to one assistant turn.
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" && last.get("tool_calls").is_some() => {
                        if let Some(a) = last["tool_calls"].as_array_mut() {
                            a.push(call);
                        }
                    }
                    _ => {
                        let mut msg = json!({"role": "assistant", "content": null, "tool_calls": [call]});
                        if let Some(r) = reasoning.take() {
                            msg["reasoning_content"] = json!(r);
                        }
                        out.push(msg);
                    }
                }
            }
            "function_call_output" => {
                let id = field("call_id").ok_or_else(|| {
                    ApiError::invalid_param(format!("{p}.call_id"), "`call_id` is required")
                })?;
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => content_text(&format!("{p}.output"), other)?,
                    None => String::new(),
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
            t => {
                return Err(ApiError::invalid_param(
                    format!("{p}.type"),
                    format!("input items of type '{t}' are not supported"),
                ));
            }
        }
    }
    Ok(())
}

/// `POST /v1/responses/input_tokens`: the number of tokens the request's prompt has (OpenAI's
/// `response.input_tokens` object), the request rendered as it would be answered.
pub(crate) fn input_tokens(state: &AppState, v: &Value) -> Result<Value, ApiError> {
    let mut counted = super::chat::input_tokens(state, &to_chat(v)?)?;
    counted["object"] = Value::from("response.input_tokens");
    Ok(counted)
}

/// The chat request a Responses request means.
fn to_chat(v: &Value) -> Result<Value, ApiError> {
    let obj = v.as_object().ok_or_else(|| ApiError::invalid("the body must be a JSON object"))?;
    if obj.get("previous_response_id").is_some_and(|x| !x.is_null()) {
        return Err(ApiError::invalid_param(
            "previous_response_id",
            "responses are not stored: send the whole conversation in `input`",
        ));
    }
    if obj.get("store") == Some(&Value::Bool(true)) {
        return Err(ApiError::invalid_param("store", "responses are not stored"));
    }
    let mut messages = Vec::new();
    if let Some(Value::String(s)) = obj.get("instructions") {
        messages.push(json!({"role": "system", "content": s}));
    }
    input_messages(
        obj.get("input").ok_or_else(|| ApiError::invalid_param("input", "`input` is required"))?,
        &mut messages,
    )?;
    let mut chat = Map::new();
    chat.insert("messages".into(), json!(messages));
    let pairs = [
        ("model", "model"),
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("stream", "stream"),
        ("reasoning_format", "reasoning_format"),
        ("chat_template_kwargs", "chat_template_kwargs"),
        // llama-server's live reports of a stream.
        ("timings_per_token", "timings_per_token"),
        ("return_progress", "return_progress"),
    ];
    copy_renamed(obj, &mut chat, &pairs);
    if let Some(Value::Array(tools)) = obj.get("tools") {
        let mut funcs = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::invalid_param(
                    format!("tools[{i}].type"),
                    "only function tools are supported",
                ));
            }
            funcs.push(function_tool(t, "parameters"));
        }
        if !funcs.is_empty() {
            chat.insert("tools".into(), json!(funcs));
            if let Some(tc) = obj.get("tool_choice") {
                let choice = match tc {
                    Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
                        named_tool_choice(o.get("name"))
                    }
                    other => other.clone(),
                };
                chat.insert("tool_choice".into(), choice);
            }
        }
    }
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")) {
        let rf = match format.get("type").and_then(Value::as_str) {
            Some("json_schema") => json!({"type": "json_schema", "json_schema": {
                "name": format.get("name").cloned().unwrap_or(json!("output")),
                "schema": format.get("schema").cloned().unwrap_or(Value::Null),
            }}),
            _ => format.clone(),
        };
        chat.insert("response_format".into(), rf);
    }
    Ok(Value::Object(chat))
}

/// The `function_call` output item of a parsed call.
fn function_call_item(c: &ToolCall) -> Value {
    json!({"type": "function_call", "id": new_id("fc_"), "call_id": new_id("call_"), "name": c.name,
        "arguments": c.arguments, "status": "completed"})
}

/// The content part of a message item (`output_text`) or a reasoning item (`reasoning_text`).
fn text_part(reasoning: bool, text: &str) -> Value {
    if reasoning {
        json!({"type": "reasoning_text", "text": text})
    } else {
        json!({"type": "output_text", "text": text, "annotations": []})
    }
}

/// A `message` item, or a `reasoning` item (`reasoning`), with its text as its one part (none
/// while in progress).
fn text_item(reasoning: bool, id: &str, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" { json!([]) } else { json!([text_part(reasoning, text)]) };
    if reasoning {
        json!({"type": "reasoning", "id": id, "status": status, "summary": [], "content": content})
    } else {
        json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
    }
}

/// A `response.output_text.EVENT` event, or `response.reasoning_text.EVENT`: `delta` with the
/// new text, `done` with the whole `text`.
fn text_event(reasoning: bool, event: &str, item_id: &str, index: usize, text: &str) -> Value {
    let kind = if reasoning { "reasoning_text" } else { "output_text" };
    let key = if event == "delta" { "delta" } else { "text" };
    let mut v = json!({"type": format!("response.{kind}.{event}"), "item_id": item_id, "output_index": index,
        "content_index": 0, key: text});
    if !reasoning {
        v["logprobs"] = json!([]);
    }
    v
}

/// A new item id: `rs_…` for reasoning, `msg_…` for a message.
fn item_id(reasoning: bool) -> String {
    new_id(if reasoning { "rs_" } else { "msg_" })
}

/// The `response` object.
fn response_object(
    id: &str,
    created: u64,
    model: &str,
    status: &str,
    output: Vec<Value>,
    usage: Option<&Usage>,
) -> Value {
    let mut v = json!({
        "id": id, "object": "response", "created_at": created, "status": status, "model": model,
        "output": output, "error": null,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "instructions": null, "metadata": {}, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "temperature": null, "top_p": null,
    });
    if let Some(u) = usage {
        v["usage"] = json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        });
    }
    v
}

fn status_of(finish: Option<FinishReason>) -> &'static str {
    match finish {
        Some(FinishReason::Length | FinishReason::ContextFull) => "incomplete",
        _ => "completed",
    }
}

/// `POST /v1/responses`.
pub(crate) async fn handle(state: AppState, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let job = prepare(&state, &to_chat(&v)?)?;
    let rxs = submit_all(state.backend.as_ref(), requests(&job), job.spec.timeout, job.spec.constraint_param)
        .await?;
    let rx = rxs.into_iter().next().ok_or_else(|| ApiError::internal("no request was queued"))?;
    let (id, created) = (new_id("resp_"), unix_now());
    if job.spec.stream {
        return Ok(stream_response(job, id, created, rx));
    }
    let c: Collected = collect(rx).await?;
    let (reasoning, text, calls) = job.read(&c.text);
    let mut output = Vec::new();
    if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
        output.push(text_item(true, &item_id(true), &r, "completed"));
    }
    if !text.is_empty() || calls.is_empty() {
        output.push(text_item(false, &item_id(false), &text, "completed"));
    }
    output.extend(calls.iter().map(function_call_item));
    let body = response_object(&id, created, &job.model, status_of(c.finish), output, Some(&c.usage));
    Ok(json_response(StatusCode::OK, &body))
}

/// The SSE events of one streamed response.
struct Events {
    job: ChatJob,
    id: String,
    created: u64,
    reply: ReplyText,
    /// The item being written: a reasoning or message item.
    open: Option<OpenItem>,
    /// The items written.
    output: Vec<Value>,
    seq: u64,
    out: Vec<sse::Event>,
    /// llama-server's `return_progress` and `timings_per_token`.
    live: Live,
}

/// A reasoning or message item as it streams.
struct OpenItem {
    reasoning: bool,
    id: String,
    text: String,
}

impl Events {
    fn emit(&mut self, mut v: Value) {
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.out.push(named(&v));
    }

    fn start(&mut self) {
        let r = response_object(&self.id, self.created, &self.job.model, "in_progress", Vec::new(), None);
        self.emit(json!({"type": "response.created", "response": r.clone()}));
        self.emit(json!({"type": "response.in_progress", "response": r}));
    }

    /// Text of a reasoning item (`reasoning`) or a message item, in the open item of its kind
    /// or in a new one after it.
    fn delta(&mut self, reasoning: bool, t: &str) {
        if t.is_empty() {
            return;
        }
        if self.open.as_ref().is_none_or(|o| o.reasoning != reasoning) {
            self.close();
            let index = self.output.len();
            let id = item_id(reasoning);
            let item = text_item(reasoning, &id, "", "in_progress");
            self.emit(json!({"type": "response.output_item.added", "output_index": index, "item": item}));
            self.emit(json!({"type": "response.content_part.added", "item_id": id, "output_index": index,
                "content_index": 0, "part": text_part(reasoning, "")}));
            self.open = Some(OpenItem { reasoning, id, text: String::new() });
        }
        let index = self.output.len();
        let Some(open) = self.open.as_mut() else { return };
        open.text.push_str(t);
        let mut v = text_event(reasoning, "delta", &open.id, index, t);
        self.live.annotate(&mut v);
        self.emit(v);
    }

    /// Ends the open item: its text, its part, the item done.
    fn close(&mut self) {
        let Some(OpenItem { reasoning, id, text }) = self.open.take() else { return };
        let index = self.output.len();
        self.emit(text_event(reasoning, "done", &id, index, &text));
        self.emit(json!({"type": "response.content_part.done", "item_id": id, "output_index": index,
            "content_index": 0, "part": text_part(reasoning, &text)}));
        let item = text_item(reasoning, &id, &text, "completed");
        self.emit(json!({"type": "response.output_item.done", "output_index": index, "item": item.clone()}));
        self.output.push(item);
    }

    fn done(&mut self, finish: FinishReason, usage: Usage, calls: Vec<ToolCall>) {
        self.close();
        for c in &calls {
            let index = self.output.len();
            let item = function_call_item(c);
            let mut added = item.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            self.emit(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
            self.emit(json!({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                "output_index": index, "delta": c.arguments}));
            self.emit(json!({"type": "response.function_call_arguments.done", "item_id": item["id"],
                "output_index": index, "arguments": c.arguments}));
            self.emit(
                json!({"type": "response.output_item.done", "output_index": index, "item": item.clone()}),
            );
            self.output.push(item);
        }
        let status = status_of(Some(finish));
        let output = std::mem::take(&mut self.output);
        let r = response_object(&self.id, self.created, &self.job.model, status, output, Some(&usage));
        let kind = if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        // llama-server's `timings` on the last event, as on a chat stream's last chunk.
        let mut sum = UsageSum::default();
        sum.add(&usage, true);
        self.emit(json!({"type": kind, "response": r, "timings": sum.timings_json()}));
    }
}

impl EventWriter for Events {
    fn reply(&mut self) -> &mut ReplyText {
        &mut self.reply
    }

    fn text(&mut self, t: &str) {
        self.delta(false, t);
    }

    fn reasoning(&mut self, t: &str) {
        self.delta(true, t);
    }

    fn end(&mut self, finish: FinishReason, usage: Usage, _stop_word: Option<String>, calls: Vec<ToolCall>) {
        self.done(finish, usage, calls);
    }

    fn error(&mut self, e: ApiError) {
        self.emit(json!({"type": "error", "code": e.code, "message": e.message, "param": e.param}));
    }

    fn take(&mut self) -> Vec<sse::Event> {
        std::mem::take(&mut self.out)
    }

    /// A `response.in_progress` event with llama-server's `prompt_progress`, when asked.
    fn progress(&mut self, processed: usize, usage: Usage) {
        if let Some(p) = self.live.progress(processed, usage) {
            let r = response_object(&self.id, self.created, &self.job.model, "in_progress", Vec::new(), None);
            let mut v = json!({"type": "response.in_progress", "response": r, "prompt_progress": p});
            self.live.annotate(&mut v);
            self.emit(v);
        }
    }

    fn token(&mut self) {
        self.live.token();
    }
}

fn stream_response(job: ChatJob, id: String, created: u64, rx: RequestHandle) -> Response {
    let reply = job.reply_text();
    let live = Live::new(job.spec.live);
    let mut ev =
        Events { job, id, created, reply, open: None, output: Vec::new(), seq: 0, out: Vec::new(), live };
    ev.start();
    respond(ev, rx)
}
