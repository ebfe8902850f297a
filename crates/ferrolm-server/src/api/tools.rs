//! Tool calls in a model's reply, in the formats chat templates teach:
//!
//! - Hermes / Qwen: `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (any number; the last
//!   closing tag may be missing when generation stopped at it);
//! - Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`;
//! - Llama 3.1: `<|python_tag|>{"name": …, "parameters": {…}}`;
//! - gpt-oss (harmony): messages to `functions.NAME` whose text is the JSON arguments, as the
//!   reasoning split leaves them in the content
//!   (`<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}`,
//!   [`ferrolm::chat::harmony::tool_calls`]);
//! - a reply that is nothing but such a JSON object (or an array of them) naming one of the
//!   request's tools (Llama 3.2 and others);
//! - the generic format ([`super::generic_tools`]): `{"tool_call": {…}}`, `{"tool_calls": […]}`
//!   or `{"response": …}` (then the response is the content and there are no calls).
//!
//! Anything else is plain text.

use ferrolm::chat::harmony;
use ferrolm::chat::reasoning::{Part, ReasoningSplitter, Thinking};
use serde_json::{Value, json};

use super::response::new_id;

/// Markers that open a tool call.
const MARKERS: [&str; 4] = ["<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", harmony::START];
const CLOSE: &str = "</tool_call>";

/// One parsed call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolCall {
    /// Function name.
    pub name: String,
    /// Arguments as JSON text (OpenAI sends a string).
    pub arguments: String,
}

impl ToolCall {
    /// The `tool_calls[]` entry of a message (`index` added for stream deltas).
    pub(crate) fn to_json(&self, index: Option<usize>) -> Value {
        let mut v = json!({
            "id": new_id("call_"),
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        });
        if let Some(i) = index {
            v["index"] = json!(i);
        }
        v
    }
}

/// A call from `{"name": …, "arguments" | "parameters": …}`.
fn call_from(v: &Value) -> Option<ToolCall> {
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let arguments = match obj.get("arguments").or_else(|| obj.get("parameters")) {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Some(ToolCall { name: name.to_string(), arguments })
}

/// Calls from a JSON object or array of objects; `None` unless every item is a call.
fn calls_from_json(text: &str) -> Option<Vec<ToolCall>> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    match &v {
        Value::Array(items) if !items.is_empty() => items.iter().map(call_from).collect(),
        Value::Object(_) => call_from(&v).map(|c| vec![c]),
        _ => None,
    }
}

/// Finds the tool calls in a reply: the text outside them and the calls, or `None` when the
/// reply holds none. `tools` are the names the request offered (a bare JSON reply must name one).
pub(crate) fn parse(text: &str, tools: &[String]) -> Option<(String, Vec<ToolCall>)> {
    if text.contains(harmony::START) {
        let (content, calls) = harmony::tool_calls(text)?;
        let calls = calls.into_iter().map(|c| ToolCall { name: c.name, arguments: c.arguments }).collect();
        return Some((content, calls));
    }
    if let Some(rest) = text.find("<tool_call>").map(|p| (&text[..p], &text[p..])) {
        let (before, mut rest) = rest;
        let mut content = before.to_string();
        let mut calls = Vec::new();
        while let Some(start) = rest.find("<tool_call>") {
            content.push_str(&rest[..start]);
            let body = &rest[start + "<tool_call>".len()..];
            let (inner, after) = match body.find(CLOSE) {
                Some(end) => (&body[..end], &body[end + CLOSE.len()..]),
                None => (body, ""),
            };
            calls.extend(calls_from_json(inner)?);
            rest = after;
        }
        content.push_str(rest);
        return Some((content.trim().to_string(), calls));
    }
    for marker in ["[TOOL_CALLS]", "<|python_tag|>"] {
        if let Some(p) = text.find(marker) {
            let calls = calls_from_json(&text[p + marker.len()..])?;
            return Some((text[..p].trim().to_string(), calls));
        }
    }
    let trimmed = text.trim();
    if let Some(found) = generic_answer(trimmed, tools) {
        return Some(found);
    }
    if trimmed.starts_with(['{', '[']) {
        let calls = calls_from_json(trimmed)?;
        if calls.iter().all(|c| tools.contains(&c.name)) {
            return Some((String::new(), calls));
        }
    }
    None
}

/// A generic-format answer: an object whose one key is `tool_call`, `tool_calls` (calls of
/// offered tools) or `response` (the content).
fn generic_answer(text: &str, tools: &[String]) -> Option<(String, Vec<ToolCall>)> {
    let Value::Object(map) = serde_json::from_str::<Value>(text).ok()? else { return None };
    let (key, v) = map.iter().next().filter(|_| map.len() == 1)?;
    let calls = match (key.as_str(), v) {
        ("response", Value::String(s)) => return Some((s.clone(), Vec::new())),
        ("response", other) => return Some((other.to_string(), Vec::new())),
        ("tool_call", call) => vec![call_from(call)?],
        ("tool_calls", Value::Array(items)) if !items.is_empty() => {
            items.iter().map(call_from).collect::<Option<Vec<_>>>()?
        }
        _ => return None,
    };
    calls.iter().all(|c| tools.contains(&c.name)).then_some((String::new(), calls))
}

/// Streaming: passes text through until a tool call may be starting, then holds the rest to
/// parse at the end.
#[derive(Debug, Default)]
pub(crate) struct ToolStream {
    /// Text not released yet.
    held: String,
    /// A marker (or a leading JSON value) was seen: everything from there is held.
    capturing: bool,
    /// Non-whitespace text was released.
    released_text: bool,
}

impl ToolStream {
    /// Takes new text; returns what can be shown now.
    pub(crate) fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.capturing {
            return String::new();
        }
        if let Some(p) = MARKERS.iter().filter_map(|m| self.held.find(m)).min() {
            self.capturing = true;
            let out: String = self.held.drain(..p).collect();
            return self.release(out);
        }
        if !self.released_text {
            let t = self.held.trim_start();
            if t.starts_with(['{', '[']) {
                self.capturing = true;
                return String::new();
            }
            if t.is_empty() {
                return String::new();
            }
        }
        // Hold back a tail that could be the start of a marker.
        let keep = MARKERS
            .iter()
            .flat_map(|m| (1..m.len()).rev().filter(|&k| self.held.ends_with(&m[..k])).take(1))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out: String = self.held.drain(..cut).collect();
        self.release(out)
    }

    fn release(&mut self, out: String) -> String {
        if !out.trim().is_empty() {
            self.released_text = true;
        }
        out
    }

    /// At the end: the text still to show and the calls found.
    pub(crate) fn finish(&mut self, tools: &[String]) -> (String, Vec<ToolCall>) {
        let held = std::mem::take(&mut self.held);
        if self.capturing
            && let Some((content, calls)) = parse(&held, tools)
        {
            return (content, calls);
        }
        (held, Vec::new())
    }
}

/// A reply as it streams: a thinking model's reasoning split off ([`ReasoningSplitter`]), the
/// rest passed through as it comes or, when tools were offered, held from where a tool call may
/// start and parsed at the end ([`ToolStream`]).
pub(crate) struct ReplyText {
    reasoning: Option<ReasoningSplitter>,
    tools: Option<(ToolStream, Vec<String>)>,
}

impl ReplyText {
    /// `tools`: the offered tools' names (`None`: no tool parsing); `thinking`: how to split
    /// the reasoning off (`None`: everything is content).
    pub(crate) fn new(tools: Option<Vec<String>>, thinking: Option<Thinking>) -> ReplyText {
        ReplyText {
            reasoning: thinking.map(ReasoningSplitter::new),
            tools: tools.map(|names| (ToolStream::default(), names)),
        }
    }

    /// New text; returns what can be shown now (no empty parts).
    pub(crate) fn push(&mut self, text: &str) -> Vec<Part> {
        self.split(text, false)
    }

    /// The last text: what remains to show, and the tool calls found.
    pub(crate) fn finish(&mut self, text: &str) -> (Vec<Part>, Vec<ToolCall>) {
        let mut parts = self.split(text, true);
        let Some((t, names)) = &mut self.tools else { return (parts, Vec::new()) };
        let (rest, calls) = t.finish(names);
        match parts.last_mut() {
            Some(Part::Content(c)) => c.push_str(&rest),
            _ if !rest.is_empty() => parts.push(Part::Content(rest)),
            _ => {}
        }
        (parts, calls)
    }

    /// `text` split into reasoning and content, the content through the tool-call filter.
    fn split(&mut self, text: &str, end: bool) -> Vec<Part> {
        let mut parts = match &mut self.reasoning {
            Some(s) => {
                let mut parts = s.feed(text);
                if end {
                    parts.extend(s.finish());
                }
                parts
            }
            None => vec![Part::Content(text.to_string())],
        };
        if let Some((t, _)) = &mut self.tools {
            for p in &mut parts {
                if let Part::Content(c) = p {
                    *c = t.push(c);
                }
            }
        }
        parts.retain(|p| !matches!(p, Part::Reasoning(s) | Part::Content(s) if s.is_empty()));
        parts
    }
}

/// A whole reply read: (reasoning, content, tool calls); `tools` and `thinking` as for
/// [`ReplyText::new`]. A generic-format `response` is the content.
pub(crate) fn read_reply(
    text: &str,
    tools: Option<&[String]>,
    thinking: Option<Thinking>,
) -> (Option<String>, String, Vec<ToolCall>) {
    let (reasoning, content) = match thinking {
        Some(how) => ReasoningSplitter::split(how, text),
        None => (None, text.to_string()),
    };
    match tools.and_then(|names| parse(&content, names)) {
        Some((content, calls)) => (reasoning, content, calls),
        None => (reasoning, content, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<String> {
        vec!["get_weather".to_string()]
    }

    #[test]
    fn hermes_calls() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}";
        let (content, calls) = parse(text, &tools()).expect("calls");
        assert_eq!(content, "Let me check.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(calls[1].arguments, r#"{"city":"Rome"}"#);
        // A broken call body is text.
        assert_eq!(parse("<tool_call>{not json}</tool_call>", &tools()), None);
    }

    #[test]
    fn other_formats() {
        let (c, calls) =
            parse(r#"[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}]"#, &tools()).expect("mistral");
        assert_eq!(
            (c.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()),
            ("", "f", r#"{"a":1}"#)
        );
        let (_, calls) =
            parse(r#"<|python_tag|>{"name": "g", "parameters": {"b": "x"}}"#, &tools()).expect("llama");
        assert_eq!(calls[0].arguments, r#"{"b":"x"}"#);
        let (_, calls) = parse(r#" {"name": "get_weather", "parameters": {}} "#, &tools()).expect("bare");
        assert_eq!(calls[0].name, "get_weather");
        // Bare JSON naming no offered tool is an answer, not a call.
        assert_eq!(parse(r#"{"name": "Bob", "arguments": 1}"#, &tools()), None);
        assert_eq!(parse("just text", &tools()), None);
        let (_, calls) =
            parse(r#"<tool_call>{"name": "f", "arguments": "{\"x\": 2}"}"#, &tools()).expect("s");
        assert_eq!(calls[0].arguments, r#"{"x": 2}"#);
        // gpt-oss: the arguments as written.
        let harmony = "Checking. <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>";
        let (c, calls) = parse(harmony, &tools()).expect("harmony");
        assert_eq!(
            (c.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()),
            ("Checking.", "get_weather", r#"{"city": "Oslo"}"#)
        );
        assert_eq!(parse("<|start|>assistant<|channel|>commentary to=python<|message|>1", &tools()), None);
    }

    #[test]
    fn generic_answers() {
        let t = tools();
        let (content, calls) =
            parse(r#"{"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}"#, &t)
                .expect("call");
        assert_eq!(
            (content.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()),
            ("", "get_weather", r#"{"city":"Oslo"}"#)
        );
        let two = r#"{"tool_calls": [{"name": "get_weather", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]}"#;
        assert_eq!(parse(two, &t).expect("calls").1.len(), 2);
        assert_eq!(parse(r#" {"response": "Hello!"} "#, &t), Some(("Hello!".to_string(), Vec::new())));
        // An unknown tool, or another object, is plain text.
        assert_eq!(parse(r#"{"tool_call": {"name": "nope", "arguments": {}}}"#, &t), None);
        assert_eq!(parse(r#"{"response": "a", "extra": 1}"#, &t), None);
        let mut s = ToolStream::default();
        assert_eq!(s.push(r#"{"response": "#), "");
        assert_eq!(s.push(r#""Hi"}"#), "");
        assert_eq!(s.finish(&t), ("Hi".to_string(), Vec::new()));
    }

    #[test]
    fn stream_holds_calls_and_marker_prefixes() {
        let mut s = ToolStream::default();
        let mut shown = String::new();
        for piece in
            ["Sure", ". <tool", "_call>{\"name\": \"get_weather\",", " \"arguments\": {}}</tool_call>"]
        {
            shown.push_str(&s.push(piece));
        }
        assert_eq!(shown, "Sure. ");
        let (rest, calls) = s.finish(&tools());
        assert_eq!((rest.as_str(), calls.len()), ("", 1));

        let mut s = ToolStream::default();
        assert_eq!(s.push("a <tool"), "a ");
        assert_eq!(s.push("box> b"), "<toolbox> b");
        assert_eq!(s.finish(&tools()), (String::new(), vec![]));

        let mut s = ToolStream::default();
        assert_eq!(s.push("  "), "");
        assert_eq!(s.push("{\"name\": \"x\"}"), "");
        // Not an offered tool: the held text comes out at the end.
        assert_eq!(s.finish(&tools()), ("  {\"name\": \"x\"}".to_string(), vec![]));
    }
}
