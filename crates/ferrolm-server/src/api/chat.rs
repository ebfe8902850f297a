//! `POST /v1/chat/completions`: messages rendered with the model's chat template, then generated.

use ferrolm::chat::reasoning::{Thinking, ThinkingTags};
use ferrolm::chat::{CalendarDate, Message, RenderOptions};
use ferrolm::constrain::ConstraintSpec;
use ferrolm::decoder::ReasoningBudget;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::backend::{Backend, encode_prompt};
use super::error::ApiError;
use super::generic_tools::{self, CallRules};
use super::json::{fields, parse_object, type_name};
use super::native;
use super::params::{CommonFields, GenSpec, Vocab, max_tokens, top_logprobs};
use super::response::{
    Collected, UsageSum, chat_logprob, collect, completion_body, new_id, submit_all, unix_now,
};
use super::stream::{StreamHead, StreamKind, sse_response};
use super::tools;
use super::{AppState, check_context, json_response};
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use ferrolm::engine::GenRequest;

/// Fields only chat reads.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct ChatFields {
    messages: Option<Value>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    chat_template_kwargs: Option<Map<String, Value>>,
    reasoning_format: Option<String>,
    add_generation_prompt: Option<bool>,
    continue_final_message: Option<Value>,
    parallel_tool_calls: Option<bool>,
    reasoning_budget_tokens: Option<i64>,
    thinking_budget_tokens: Option<i64>,
    reasoning_budget_message: Option<String>,
}

/// A chat request ready to run.
pub(crate) struct ChatJob {
    /// The prompt's tokens.
    pub prompt: Vec<u32>,
    /// Sampling, `max_tokens`, `n`, streaming.
    pub spec: GenSpec,
    /// Alternatives per token, when log-probabilities are asked.
    pub logprobs: Option<usize>,
    /// Names of the offered tools (`None`: no tool-call parsing).
    pub tools: Option<Vec<String>>,
    /// The `model` to answer with.
    pub model: String,
    /// A thinking model's output to split: its reasoning goes to `reasoning_content` (or, for
    /// gpt-oss with `reasoning_format: none`, stays in the content while the answer's markers go).
    pub thinking: Option<Thinking>,
    /// The rendered prompt.
    pub prompt_text: String,
    /// Add `__verbose` to a whole answer ([`GenSpec::verbose`]).
    pub verbose: bool,
}

impl ChatJob {
    /// A whole reply read as the request asks: (reasoning, content, tool calls)
    /// ([`tools::read_reply`]).
    pub(crate) fn read(&self, text: &str) -> (Option<String>, String, Vec<tools::ToolCall>) {
        tools::read_reply(text, self.tools.as_deref(), self.thinking)
    }

    /// A reply to read as it streams ([`tools::ReplyText`]).
    pub(crate) fn reply_text(&self) -> tools::ReplyText {
        tools::ReplyText::new(self.tools.clone(), self.thinking)
    }
}

/// A message's content: a string, an array of text parts (joined with newlines), or null.
fn content(i: usize, v: Option<&Value>) -> Result<Option<String>, ApiError> {
    let param = format!("messages[{i}].content");
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => texts.push(t),
                    (Some(kind), _) if kind != "text" => {
                        return Err(ApiError::invalid_param(
                            param,
                            format!("content parts of type '{kind}' are not supported (only text)"),
                        ));
                    }
                    _ => {
                        return Err(ApiError::invalid_param(
                            param,
                            "a content part must be {\"type\": \"text\", \"text\": \"...\"}",
                        ));
                    }
                }
            }
            Ok(Some(texts.join("\n")))
        }
        Some(other) => Err(ApiError::invalid_param(
            param,
            format!("content must be a string or an array of parts, not {}", type_name(other)),
        )),
    }
}

/// An assistant message's `tool_calls`, with JSON-text arguments parsed into objects (chat
/// templates write them with `tojson`).
fn tool_calls(i: usize, v: &Value) -> Result<Value, ApiError> {
    let param = format!("messages[{i}].tool_calls");
    let bad = |m: &str| ApiError::invalid_param(param.clone(), m.to_string());
    let calls = v.as_array().ok_or_else(|| bad("tool_calls must be an array"))?;
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        let mut c = c.as_object().cloned().ok_or_else(|| bad("a tool call must be an object"))?;
        let f = c
            .get_mut("function")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| bad("a tool call needs \"function\": {\"name\": ..., \"arguments\": ...}"))?;
        if !f.get("name").is_some_and(Value::is_string) {
            return Err(bad("a tool call's function needs a name"));
        }
        match f.get("arguments") {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(Value::String(args)) => match serde_json::from_str::<Value>(args) {
                Ok(parsed @ Value::Object(_)) => {
                    f.insert("arguments".into(), parsed);
                }
                _ => return Err(bad("a tool call's arguments must be a JSON object (as text)")),
            },
            Some(_) => return Err(bad("a tool call's arguments must be a JSON object (as text)")),
        }
        out.push(Value::Object(c));
    }
    Ok(Value::Array(out))
}

/// The request's messages as the template's.
pub(crate) fn messages(v: Option<&Value>) -> Result<Vec<Message>, ApiError> {
    let items = match v {
        // An empty list is rendered as it is (the template's generation prompt alone), as
        // llama-server does.
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => {
            return Err(ApiError::invalid_param("messages", "`messages` is required"));
        }
        Some(other) => {
            return Err(ApiError::invalid_param(
                "messages",
                format!("`messages` must be an array, not {}", type_name(other)),
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        let obj = m.as_object().ok_or_else(|| {
            ApiError::invalid_param(format!("messages[{i}]"), "a message must be an object")
        })?;
        let role = match obj.get("role").and_then(Value::as_str) {
            Some("developer") => "system",
            Some(r @ ("system" | "user" | "assistant" | "tool" | "function")) => r,
            Some(r) => {
                return Err(ApiError::invalid_param(
                    format!("messages[{i}].role"),
                    format!("unknown role '{r}' (use system, developer, user, assistant or tool)"),
                ));
            }
            None => {
                return Err(ApiError::invalid_param(format!("messages[{i}].role"), "a message needs a role"));
            }
        };
        let mut extra = Map::new();
        for key in ["name", "tool_call_id", "reasoning_content"] {
            match obj.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => {
                    extra.insert(key.into(), Value::String(s.clone()));
                }
                Some(_) => {
                    return Err(ApiError::invalid_param(format!("messages[{i}].{key}"), "must be a string"));
                }
            }
        }
        if role == "tool" && !extra.contains_key("tool_call_id") {
            return Err(ApiError::invalid_param(
                format!("messages[{i}].tool_call_id"),
                "a tool message needs `tool_call_id` (the id of the call it answers)",
            ));
        }
        let has_calls = match obj.get("tool_calls") {
            None | Some(Value::Null) => false,
            Some(v) if role == "assistant" => {
                extra.insert("tool_calls".into(), tool_calls(i, v)?);
                true
            }
            Some(_) => {
                return Err(ApiError::invalid_param(
                    format!("messages[{i}].tool_calls"),
                    "only assistant messages have tool_calls",
                ));
            }
        };
        let text = match content(i, obj.get("content"))? {
            Some(t) => t,
            None if has_calls || role == "assistant" => String::new(),
            None => {
                return Err(ApiError::invalid_param(
                    format!("messages[{i}].content"),
                    "a message needs content",
                ));
            }
        };
        out.push(Message { role: role.into(), content: Some(Value::String(text)), extra });
    }
    Ok(out)
}

/// `tools` and `tool_choice`: the tool definitions to give the template (`None`: none).
pub(crate) fn offered_tools(
    tools: Option<&Value>,
    choice: Option<&Value>,
) -> Result<Option<Vec<Value>>, ApiError> {
    let list = match tools {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "tools",
                format!("`tools` must be an array, not {}", type_name(other)),
            ));
        }
    };
    for (i, t) in list.iter().enumerate() {
        let ok = t.get("type").and_then(Value::as_str) == Some("function")
            && t.get("function").and_then(|f| f.get("name")).is_some_and(Value::is_string);
        if !ok {
            return Err(ApiError::invalid_param(
                format!("tools[{i}]"),
                "a tool must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}",
            ));
        }
    }
    let name_of = |t: &Value| t["function"]["name"].as_str().unwrap_or_default().to_string();
    let chosen: Vec<Value> = match choice {
        None | Some(Value::Null) => list.clone(),
        Some(Value::String(s)) if s == "none" => return Ok(None),
        Some(Value::String(s)) if s == "auto" || s == "required" => list.clone(),
        Some(v @ Value::Object(_)) => {
            let name =
                v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid_param(
                        "tool_choice",
                        "tool_choice needs {\"function\": {\"name\": ...}}",
                    )
                })?;
            let one: Vec<Value> = list.iter().filter(|t| name_of(t) == name).cloned().collect();
            if one.is_empty() {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    format!("tool_choice names '{name}', which is not in `tools`"),
                ));
            }
            one
        }
        Some(other) => {
            return Err(ApiError::invalid_param(
                "tool_choice",
                format!("tool_choice must be \"none\", \"auto\", \"required\" or an object, not {other}"),
            ));
        }
    };
    Ok((!chosen.is_empty()).then_some(chosen))
}

/// Whether the prompt continues the last message rather than opening a new assistant turn, as
/// llama-server decides it: `continue_final_message: true` (vLLM's and transformers' name) or a
/// last message from the assistant (a prefill) continue it, unless two assistant messages end
/// the list; `add_generation_prompt: true` with an explicit `continue_final_message` is an
/// error, as is continuing a message with tool calls. Returns whether to add the generation
/// prompt to what is rendered, and the message to continue (taken off `msgs`).
fn continuation(chat: &ChatFields, msgs: &mut Vec<Message>) -> Result<(bool, Option<Continued>), ApiError> {
    let mut add = chat.add_generation_prompt.unwrap_or(true);
    let mut cont = match &chat.continue_final_message {
        None | Some(Value::Null | Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "continue_final_message",
                format!("`continue_final_message` must be a boolean, not {}", type_name(other)),
            ));
        }
    };
    let role = |k: usize| msgs.len().checked_sub(k).map(|i| msgs[i].role.as_str());
    if !cont && role(1) == Some("assistant") {
        if role(2) == Some("assistant") {
            return Err(ApiError::invalid_param(
                "messages",
                "Cannot have 2 or more assistant messages at the end of the list.",
            ));
        }
        (cont, add) = (true, false);
    }
    if !cont {
        return Ok((add, None));
    }
    if add {
        return Err(ApiError::invalid_param(
            "continue_final_message",
            "Cannot set both add_generation_prompt and continue_final_message to true.",
        ));
    }
    let Some(last) = msgs.pop() else { return Ok((false, None)) };
    if last.extra.get("tool_calls").is_some_and(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
        return Err(ApiError::invalid_param(
            "messages",
            "Cannot continue an assistant message that contains tool calls.",
        ));
    }
    // Text parts (checked by `messages`) are joined by blank lines, as llama.cpp renders a
    // continued message.
    let raw_parts =
        chat.messages.as_ref().and_then(Value::as_array).and_then(|m| m.last()?.get("content")?.as_array());
    let text = match (raw_parts, &last.content) {
        (Some(parts), _) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n\n"),
        (None, Some(Value::String(s))) => s.clone(),
        _ => String::new(),
    };
    let reasoning = last.extra.get("reasoning_content").and_then(Value::as_str).map(str::to_string);
    Ok((true, Some(Continued { text, reasoning })))
}

/// An assistant message the prompt continues.
struct Continued {
    /// Its text.
    text: String,
    /// Its `reasoning_content` (gpt-oss's prompt shows it).
    reasoning: Option<String>,
}

/// A chat request rendered: the prompt, the offered tools, and the thinking split to make of
/// the output ([`ChatJob::thinking`]).
struct Rendered {
    text: String,
    tools: Option<Vec<Value>>,
    /// The template's thinking tags, if it has them.
    tags: Option<ThinkingTags>,
    thinking: Option<Thinking>,
    /// With tools on a template without tool syntax: the schema the answer must follow
    /// ([`generic_tools`]).
    generic: Option<Value>,
}

/// The prompt text of a chat request's `messages` (with its `tools` and
/// `chat_template_kwargs`), rendered by the chat template, with thinking as the server's
/// `--reasoning` and the request's `enable_thinking` say (llama.cpp's rules, see
/// [`ThinkingTags::disable`]).
fn render(state: &AppState, chat: &ChatFields) -> Result<Rendered, ApiError> {
    let backend = state.backend.as_ref();
    let mut msgs = messages(chat.messages.as_ref())?;
    let (add_generation_prompt, continued) = continuation(chat, &mut msgs)?;
    let tools = offered_tools(chat.tools.as_ref(), chat.tool_choice.as_ref())?;
    let template = backend.chat_template().map_err(ApiError::invalid)?;
    let tags = ThinkingTags::of_template(template.source());
    if let Some(t) = tags {
        t.adapt_messages(&mut msgs);
    }
    // A template that never mentions tools cannot show them: the generic format does.
    let generic = match &tools {
        Some(list) if !template.source().contains("tools") => {
            let required = matches!(&chat.tool_choice, Some(Value::Object(_)))
                || chat.tool_choice.as_ref().and_then(Value::as_str) == Some("required");
            let rules = CallRules { required, parallel: chat.parallel_tool_calls.unwrap_or(false) };
            generic_tools::rewrite_messages(&mut msgs, list, rules);
            Some(generic_tools::answer_schema(list, rules))
        }
        _ => None,
    };
    let to_field = match chat.reasoning_format.as_deref() {
        None | Some("auto") => state.cfg.reasoning_to_field,
        Some("deepseek") => true,
        Some("none") => false,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "reasoning_format",
                format!("reasoning_format must be none, deepseek or auto, not {other:?}"),
            ));
        }
    };
    // As llama.cpp: templates always see `enable_thinking` (true unless `--reasoning off`), so
    // that one testing `not enable_thinking` does not take an unset flag for "off".
    let mut kwargs = chat.chat_template_kwargs.clone().unwrap_or_default();
    kwargs.entry("enable_thinking").or_insert(Value::Bool(state.cfg.reasoning.unwrap_or(true)));
    // llama.cpp gives every template today's date under these names (Llama 3.x, FireFunction).
    let today = CalendarDate::today_utc();
    kwargs.entry("date_string").or_insert_with(|| Value::String(today.format("%d %b %Y")));
    kwargs.entry("datetime").or_insert_with(|| Value::String(today.format("%b %d %Y")));
    // FireFunction v2's template appends `functions` to its system prompt: the tools as JSON
    // text, empty without tools (what llama.cpp's FireFunction handler gave it).
    kwargs.entry("functions").or_insert_with(|| {
        let text =
            tools.as_ref().filter(|t| !t.is_empty()).and_then(|t| serde_json::to_string_pretty(t).ok());
        Value::String(text.unwrap_or_default())
    });
    let enable_thinking = kwargs.get("enable_thinking").and_then(Value::as_bool);
    let (bos_token, eos_token) = backend.bos_eos_text();
    let opts = RenderOptions {
        add_generation_prompt,
        bos_token,
        eos_token,
        tools: if generic.is_some() { None } else { tools.clone() },
        kwargs,
        today: None,
    };
    let mut text = template.render(&msgs, &opts).map_err(|e| ApiError::invalid(e.to_string()))?;
    if let (Some(t), Some(false)) = (tags, enable_thinking) {
        text = t.disable(&text);
    }
    if let Some(c) = continued {
        // The continued text is answer, not reasoning: a block the turn opened is closed first
        // (gpt-oss: the message's reasoning is written, and its answer opened).
        if let Some(t) = tags {
            text = t.continue_answer(&text, c.reasoning.as_deref());
        }
        text.push_str(&c.text);
    }
    // With `reasoning_format: none` the output is left as it is, except gpt-oss's, whose answer
    // still loses its markers (as llama.cpp's gpt-oss parser does).
    let thinking = tags.filter(|t| to_field || t.is_harmony()).map(|t| Thinking {
        tags: t,
        forced_open: t.forced_open(&text),
        to_field,
    });
    Ok(Rendered { text, tools, tags, thinking, generic })
}

/// The reasoning budget of a chat request on a template with thinking tags (llama-server's
/// rules): `reasoning_budget_tokens` (else `thinking_budget_tokens`), where -1 or absent takes
/// the server's `--reasoning-budget`; `reasoning_budget_message`, else the server's.
fn reasoning_budget(
    state: &AppState,
    chat: &ChatFields,
    tags: Option<ThinkingTags>,
    prompt: &str,
) -> Result<Option<ReasoningBudget>, ApiError> {
    let (field, asked) = match (chat.reasoning_budget_tokens, chat.thinking_budget_tokens) {
        (Some(n), _) => ("reasoning_budget_tokens", n),
        (None, Some(n)) => ("thinking_budget_tokens", n),
        (None, None) => ("reasoning_budget_tokens", -1),
    };
    let tokens = match asked {
        -1 => state.cfg.reasoning_budget,
        n => Some(usize::try_from(n).map_err(|_| {
            ApiError::invalid_param(field, format!("`{field}` must be -1 (no limit) or at least 0, not {n}"))
        })?),
    };
    let (Some(tokens), Some(tags)) = (tokens, tags) else { return Ok(None) };
    Ok(Some(ReasoningBudget {
        open: tags.open.to_string(),
        close: tags.forced_close(),
        natural_close: tags.close.to_string(),
        opened: tags.forced_open(prompt),
        tokens,
        message: chat
            .reasoning_budget_message
            .clone()
            .unwrap_or_else(|| state.cfg.reasoning_budget_message.clone()),
    }))
}

/// Copies `pairs` of (field of `from`, chat field) into a chat request, leaving out absent and
/// null fields: how other APIs' requests name the chat request's fields.
pub(crate) fn copy_renamed(from: &Map<String, Value>, chat: &mut Map<String, Value>, pairs: &[(&str, &str)]) {
    for (src, dst) in pairs {
        if let Some(x) = from.get(*src).filter(|x| !x.is_null()) {
            chat.insert((*dst).into(), x.clone());
        }
    }
}

/// A chat request's function tool from another API's tool object: its `name`, `description`
/// and the JSON schema under `schema_key`.
pub(crate) fn function_tool(t: &Value, schema_key: &str) -> Value {
    json!({"type": "function", "function": {
        "name": t.get("name").cloned().unwrap_or(Value::Null),
        "description": t.get("description").cloned().unwrap_or(json!("")),
        "parameters": t.get(schema_key).cloned().unwrap_or(json!({"type": "object"})),
    }})
}

/// A chat `tool_choice` naming the function called `name`.
pub(crate) fn named_tool_choice(name: Option<&Value>) -> Value {
    json!({"type": "function", "function": {"name": name.cloned().unwrap_or(Value::Null)}})
}

/// `POST /apply-template` (llama-server's): the prompt a chat request would run, as
/// `{"prompt": text}`, without running it.
pub(crate) fn apply_template(state: &AppState, v: &Value) -> Result<Value, ApiError> {
    let chat: ChatFields = fields(v)?;
    Ok(json!({"prompt": render(state, &chat)?.text}))
}

/// `POST /chat/completions/input_tokens` (llama-server's): the number of prompt tokens a chat
/// request would run, as `{"input_tokens": n}`, without running it.
pub(crate) fn input_tokens(state: &AppState, v: &Value) -> Result<Value, ApiError> {
    let chat: ChatFields = fields(v)?;
    let text = render(state, &chat)?.text;
    let prompt = encode_prompt(state.backend.as_ref(), &text).map_err(ApiError::invalid)?;
    Ok(json!({"input_tokens": prompt.len()}))
}

/// Validates a chat request and renders and tokenizes its prompt.
pub(crate) fn prepare(state: &AppState, v: &Value) -> Result<ChatJob, ApiError> {
    let backend = state.backend.as_ref();
    let common: CommonFields = fields(v)?;
    let chat: ChatFields = fields(v)?;
    let mut spec =
        common.spec(&state.cfg.sampler, Vocab::of(backend), state.cfg.request_timeout(), state.cfg.draft)?;
    let Rendered { text, tools, tags, thinking, generic } = render(state, &chat)?;
    spec.params.reasoning_budget = reasoning_budget(state, &chat, tags, &text)?;
    if let Some(schema) = generic {
        if spec.params.constraint.is_some() {
            return Err(ApiError::invalid_param(
                spec.constraint_param.unwrap_or("response_format"),
                "a constrained answer cannot be combined with tools on a model whose chat template \
                 has no tool syntax (the tool calls are constrained already)",
            ));
        }
        spec.params.constraint = Some(ConstraintSpec::JsonSchema(schema));
        spec.constraint_param = Some("tools");
    }
    let prompt = encode_prompt(backend, &text).map_err(ApiError::invalid)?;
    let asked = match chat.max_completion_tokens {
        Some(m) if common.n_predict.is_none() => {
            max_tokens("max_completion_tokens", Some(m), backend.n_ctx(), false)?
        }
        _ => common.max_new_tokens(chat.max_tokens, backend.n_ctx(), false)?,
    };
    let max = state.cfg.generation_limit(asked, common.asks_server_default(), None);
    check_context(backend, prompt.len(), max)?;
    spec.params.max_tokens = max;
    let top = top_logprobs("top_logprobs", chat.top_logprobs)?;
    let logprobs = match (chat.logprobs.unwrap_or(false), top) {
        (true, k) => Some(k.unwrap_or(0)),
        (false, Some(k)) if k > 0 => {
            return Err(ApiError::invalid_param("top_logprobs", "`top_logprobs` needs `logprobs: true`"));
        }
        (false, _) => None,
    };
    let tool_names = tools.map(|t| {
        t.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect::<Vec<_>>()
    });
    let model = state.cfg.answer_model(common.model);
    let verbose = spec.verbose(state.cfg.verbose)?;
    Ok(ChatJob { prompt, spec, logprobs, tools: tool_names, model, thinking, prompt_text: text, verbose })
}

/// The engine requests of a job (one per choice).
pub(crate) fn requests(job: &ChatJob) -> Vec<GenRequest> {
    (0..job.spec.n).map(|i| job.spec.request(job.prompt.clone(), i, job.logprobs)).collect()
}

/// One choice of a `chat.completion`.
fn choice_json(backend: &dyn Backend, i: usize, c: &Collected, job: &ChatJob) -> Value {
    let (reasoning, content, calls) = job.read(&c.text);
    let mut message = json!({"role": "assistant", "content": content});
    if let Some(r) = reasoning {
        message["reasoning_content"] = Value::String(r);
    }
    let mut reason = c.finish.map_or("stop", |f| f.openai_reason());
    if !calls.is_empty() {
        if content.is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = calls.iter().map(|c| c.to_json(None)).collect();
        reason = "tool_calls";
    }
    let logprobs = if c.logprobs.is_empty() {
        Value::Null
    } else {
        json!({"content": c.logprobs.iter().map(|l| chat_logprob(backend, l)).collect::<Vec<_>>()})
    };
    json!({"index": i, "message": message, "logprobs": logprobs, "finish_reason": reason})
}

/// The handler.
pub(crate) async fn handle(state: AppState, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let job = prepare(&state, &v)?;
    let rxs = submit_all(state.backend.as_ref(), requests(&job), job.spec.timeout, job.spec.constraint_param)
        .await?;
    let id = new_id("chatcmpl-");
    let created = unix_now();
    if job.spec.stream {
        let head = StreamHead {
            id,
            created,
            model: job.model,
            n: job.spec.n,
            include_usage: job.spec.include_usage,
            live: job.spec.live,
        };
        let kind = StreamKind::Chat { tools: job.tools, thinking: job.thinking };
        return Ok(sse_response(state.backend.clone(), head, kind, rxs));
    }
    let results = futures_util::future::try_join_all(rxs.into_iter().map(collect)).await?;
    let mut usage = UsageSum::default();
    let mut choices = Vec::with_capacity(results.len());
    for (i, c) in results.iter().enumerate() {
        usage.add(&c.usage, i == 0);
        choices.push(choice_json(state.backend.as_ref(), i, c, &job));
    }
    let mut body = completion_body("chat.completion", &id, created, &job.model, choices, &usage);
    if job.verbose {
        body["__verbose"] =
            native::result_object(&job.spec, job.logprobs, &job.model, &job.prompt_text, &results[0]);
    }
    Ok(json_response(StatusCode::OK, &body))
}
