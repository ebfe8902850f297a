//! Tools for a model whose chat template has no tool syntax (llama-server's "generic" format).
//!
//! The template cannot show the tools, so the prompt does: a system instruction lists them (as
//! JSON) and asks for a JSON answer, either `{"tool_call": {"name", "arguments"}}` (or, with
//! `parallel_tool_calls`, `{"tool_calls": [...]}`) or `{"response": "..."}`. The answer is
//! constrained to exactly that shape by a JSON schema whose calls name only the offered tools
//! with their parameter schemas, and [`super::tools::parse`] reads it back. Earlier turns are
//! rewritten in the same shape: an assistant's `tool_calls` become its JSON content, and a
//! `tool` message becomes a user message holding `{"tool_response": …}`, so that templates
//! that know only user and assistant turns render them.

use ferrolm::chat::Message;
use serde_json::{Value, json};

/// What the model is told, before the tool definitions.
const INSTRUCTION: &str = "You can call the tools below. Answer with one JSON object and nothing else: \
either {\"tool_call\": {\"name\": <tool name>, \"arguments\": <arguments object>}} to call a tool, \
or {\"response\": <your reply>} to answer the user directly.";

/// The same for parallel calls.
const INSTRUCTION_PARALLEL: &str = "You can call the tools below. Answer with one JSON object and nothing \
else: either {\"tool_calls\": [{\"name\": <tool name>, \"arguments\": <arguments object>}, ...]} to \
call one or more tools, or {\"response\": <your reply>} to answer the user directly.";

/// How the answer may call tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallRules {
    /// A tool must be called (`tool_choice` `required` or a named function).
    pub required: bool,
    /// Several calls at once (`parallel_tool_calls`).
    pub parallel: bool,
}

/// Rewrites `msgs` for the generic format: tool turns as JSON text, and the instruction with
/// the tool definitions in the system message (appended to the first one, or a new one first).
pub(crate) fn rewrite_messages(msgs: &mut Vec<Message>, tools: &[Value], rules: CallRules) {
    for m in msgs.iter_mut() {
        if m.role == "tool" {
            let mut response = json!({"content": m.content.clone().unwrap_or(Value::Null)});
            for key in ["name", "tool_call_id"] {
                if let Some(v) = m.extra.remove(key) {
                    response[key] = v;
                }
            }
            m.role = "user".into();
            m.content = Some(Value::String(json!({"tool_response": response}).to_string()));
        } else if let Some(calls) = m.extra.remove("tool_calls").filter(|c| !c.is_null()) {
            let calls: Vec<Value> =
                calls.as_array().map(|a| a.iter().map(plain_call).collect()).unwrap_or_default();
            let answer = match calls.as_slice() {
                [one] if !rules.parallel => json!({"tool_call": one}),
                _ => json!({"tool_calls": calls}),
            };
            m.content = Some(Value::String(answer.to_string()));
        }
    }
    let defs: Vec<&Value> = tools.iter().map(|t| t.get("function").unwrap_or(t)).collect();
    let instruction = if rules.parallel { INSTRUCTION_PARALLEL } else { INSTRUCTION };
    let text =
        format!("{instruction}\n\nTools:\n{}", serde_json::to_string_pretty(&defs).unwrap_or_default());
    match msgs.first_mut() {
        Some(first) if first.role == "system" => {
            let before = match &first.content {
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            };
            let joined = if before.is_empty() { text } else { format!("{before}\n\n{text}") };
            first.content = Some(Value::String(joined));
        }
        _ => msgs.insert(
            0,
            Message { role: "system".into(), content: Some(Value::String(text)), extra: Default::default() },
        ),
    }
}

/// `{"name", "arguments"}` of an OpenAI `tool_calls` entry (arguments parsed when they are JSON
/// text).
fn plain_call(c: &Value) -> Value {
    let f = c.get("function").unwrap_or(c);
    let arguments = match f.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        Some(v) => v.clone(),
        None => json!({}),
    };
    json!({"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": arguments})
}

/// The JSON schema of an answer: a call of one of `tools` (or several, when parallel), or,
/// unless a call is required, a `response`.
pub(crate) fn answer_schema(tools: &[Value], rules: CallRules) -> Value {
    let calls: Vec<Value> = tools
        .iter()
        .map(|t| {
            let f = t.get("function").unwrap_or(t);
            let params = f.get("parameters").filter(|p| p.is_object()).cloned().unwrap_or(json!({"type": "object"}));
            json!({
                "type": "object",
                "properties": {"name": {"const": f.get("name").cloned().unwrap_or(Value::Null)}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let call = if calls.len() == 1 { calls[0].clone() } else { json!({"anyOf": calls}) };
    let calling = if rules.parallel {
        json!({"type": "object", "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}},
               "required": ["tool_calls"], "additionalProperties": false})
    } else {
        json!({"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"], "additionalProperties": false})
    };
    if rules.required {
        return calling;
    }
    let responding = json!({"type": "object", "properties": {"response": {"type": "string"}},
                            "required": ["response"], "additionalProperties": false});
    json!({"anyOf": [calling, responding]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    fn msg(role: &str, content: Value) -> Message {
        Message { role: role.into(), content: Some(content), extra: Default::default() }
    }

    #[test]
    fn the_history_is_rewritten_and_the_tools_listed() {
        let rules = CallRules { required: false, parallel: false };
        let mut call = msg("assistant", Value::Null);
        call.content = None;
        call.extra.insert(
            "tool_calls".into(),
            json!([{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]),
        );
        let mut result = msg("tool", json!("3 degrees"));
        result.extra.insert("tool_call_id".into(), json!("c1"));
        let mut msgs = vec![msg("system", json!("Be brief.")), msg("user", json!("Oslo?")), call, result];
        rewrite_messages(&mut msgs, &[weather()], rules);
        let sys = msgs[0].content.as_ref().and_then(Value::as_str).expect("text");
        assert!(sys.starts_with("Be brief.\n\nYou can call the tools below."), "{sys}");
        assert!(sys.contains("\"name\": \"weather\"") && sys.contains("Weather of a city"), "{sys}");
        let c: Value = serde_json::from_str(msgs[2].content.as_ref().and_then(Value::as_str).expect("text"))
            .expect("JSON");
        assert_eq!(c, json!({"tool_call": {"name": "weather", "arguments": {"city": "Oslo"}}}));
        assert!(!msgs[2].extra.contains_key("tool_calls"));
        assert_eq!(msgs[3].role, "user");
        let r: Value = serde_json::from_str(msgs[3].content.as_ref().and_then(Value::as_str).expect("text"))
            .expect("JSON");
        assert_eq!(r, json!({"tool_response": {"content": "3 degrees", "tool_call_id": "c1"}}));
        // No system message: one is added first.
        let mut msgs = vec![msg("user", json!("hi"))];
        rewrite_messages(&mut msgs, &[weather()], rules);
        assert_eq!((msgs.len(), msgs[0].role.as_str()), (2, "system"));
    }

    #[test]
    fn the_schema_allows_exactly_the_offered_calls_or_a_response() {
        let auto = answer_schema(&[weather()], CallRules { required: false, parallel: false });
        let any = &auto["anyOf"];
        assert_eq!(any[0]["properties"]["tool_call"]["properties"]["name"], json!({"const": "weather"}));
        assert_eq!(any[0]["properties"]["tool_call"]["properties"]["arguments"]["required"], json!(["city"]));
        assert_eq!(any[1]["required"], json!(["response"]));
        let required = answer_schema(&[weather(), weather()], CallRules { required: true, parallel: true });
        assert_eq!(required["required"], json!(["tool_calls"]));
        assert_eq!(required["properties"]["tool_calls"]["items"]["anyOf"].as_array().map(Vec::len), Some(2));
    }
}
