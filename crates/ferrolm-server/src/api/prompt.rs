//! llama-server's prompt forms, shared by `/completion`, `/v1/completions` and `/embeddings`.
//!
//! One prompt is any of:
//! - a string, tokenized as a whole prompt (BOS as the tokenizer adds it, special tokens parsed);
//! - an array of token ids, used as given;
//! - a *mixed* array of token ids and strings, one sequence: each string is tokenized in place
//!   (only a string in first position gets the BOS);
//! - an object `{"prompt_string": …}`, or `{"content": [{"type": "text", "text": …}, …]}` whose
//!   text parts are joined. Media parts (and `multimodal_data`) are refused: no model here takes
//!   images or audio.
//!
//! A request's `prompt`/`input` is one prompt, or an array of prompts. An array holding any
//! number is one mixed prompt, as llama-server reads it.

use serde_json::Value;

use super::backend::{Backend, encode_prompt};
use super::error::ApiError;
use super::json::{token_id, type_name};

/// One prompt: its tokens and its text (for `echo`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PromptIn {
    /// Tokens run through the model.
    pub tokens: Vec<u32>,
    /// The text echoed back.
    pub text: String,
}

/// A request's prompts under `param`: one prompt or an array of at most `max` prompts (see the
/// module doc). An empty array is an error; a prompt may come out with no tokens (the caller
/// decides whether that is allowed).
pub(crate) fn prompt_list(
    backend: &dyn Backend,
    param: &str,
    v: Option<&Value>,
    max: usize,
) -> Result<Vec<PromptIn>, ApiError> {
    match v {
        None | Some(Value::Null) => Err(ApiError::invalid_param(param, format!("`{param}` is required"))),
        Some(Value::Array(items)) if items.is_empty() => {
            Err(ApiError::invalid_param(param, format!("`{param}` is empty")))
        }
        Some(Value::Array(items)) if !items.iter().any(Value::is_number) => {
            if items.len() > max {
                return Err(ApiError::invalid_param(
                    param,
                    format!("at most {max} prompts per request, not {}", items.len()),
                ));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| one_prompt(backend, &format!("{param}[{i}]"), item))
                .collect()
        }
        Some(other) => Ok(vec![one_prompt(backend, param, other)?]),
    }
}

/// One prompt (see the module doc); `param` names it in errors.
pub(crate) fn one_prompt(backend: &dyn Backend, param: &str, v: &Value) -> Result<PromptIn, ApiError> {
    match v {
        Value::String(s) => text_prompt(backend, param, s),
        Value::Array(items) => mixed_prompt(backend, param, items),
        Value::Object(map) => object_prompt(backend, param, map),
        other => Err(ApiError::invalid_param(
            param,
            format!(
                "a prompt is a string, an array of token ids and strings, or an object, not {}",
                type_name(other)
            ),
        )),
    }
}

fn text_prompt(backend: &dyn Backend, param: &str, s: &str) -> Result<PromptIn, ApiError> {
    let tokens = encode_prompt(backend, s).map_err(|e| ApiError::invalid_param(param, e))?;
    Ok(PromptIn { tokens, text: s.to_string() })
}

/// Token ids and strings, one sequence.
fn mixed_prompt(backend: &dyn Backend, param: &str, items: &[Value]) -> Result<PromptIn, ApiError> {
    let mut tokens = Vec::with_capacity(items.len());
    let mut text = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::Number(_) => {
                let id = token_id(param, item, backend.n_vocab())?;
                tokens.push(id);
                text.extend(backend.piece(id));
            }
            Value::String(s) => {
                let ids = if i == 0 { encode_prompt(backend, s) } else { backend.tokenize(s, false, true) };
                tokens.extend(ids.map_err(|e| ApiError::invalid_param(param, e))?);
                text.extend_from_slice(s.as_bytes());
            }
            other => {
                return Err(ApiError::invalid_param(
                    format!("{param}[{i}]"),
                    format!("a prompt array holds token ids and strings, not {}", type_name(other)),
                ));
            }
        }
    }
    Ok(PromptIn { tokens, text: String::from_utf8_lossy(&text).into_owned() })
}

/// `{"prompt_string": …}` or `{"content": [text parts]}`.
fn object_prompt(
    backend: &dyn Backend,
    param: &str,
    map: &serde_json::Map<String, Value>,
) -> Result<PromptIn, ApiError> {
    let not_multimodal = |what: &str| {
        ApiError::invalid_param(param, format!("{what}: the served model takes no images, audio or video"))
    };
    if map.get("multimodal_data").is_some_and(|m| !m.is_null()) {
        return Err(not_multimodal("`multimodal_data`"));
    }
    if let Some(p) = map.get("prompt_string") {
        return match p {
            Value::String(s) => text_prompt(backend, param, s),
            other => Err(ApiError::invalid_param(
                param,
                format!("`prompt_string` must be a string, not {}", type_name(other)),
            )),
        };
    }
    let Some(content) = map.get("content") else {
        return Err(ApiError::invalid_param(param, "a prompt object needs `prompt_string` or `content`"));
    };
    let Value::Array(parts) = content else {
        return Err(ApiError::invalid_param(
            param,
            format!("a prompt object's `content` is an array of parts, not {}", type_name(content)),
        ));
    };
    let mut text = String::new();
    for (i, part) in parts.iter().enumerate() {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => match part.get("text") {
                Some(Value::String(s)) => text.push_str(s),
                _ => {
                    return Err(ApiError::invalid_param(
                        format!("{param}.content[{i}]"),
                        "a text part needs a string `text`",
                    ));
                }
            },
            Some(kind @ ("image_url" | "input_audio" | "input_video" | "image" | "audio" | "video")) => {
                return Err(not_multimodal(&format!("a `{kind}` part")));
            }
            Some(other) => {
                return Err(ApiError::invalid_param(
                    format!("{param}.content[{i}]"),
                    format!("unknown content part type {other:?} (only \"text\")"),
                ));
            }
            None => {
                return Err(ApiError::invalid_param(
                    format!("{param}.content[{i}]"),
                    "a content part needs a `type`",
                ));
            }
        }
    }
    if parts.is_empty() {
        return Err(ApiError::invalid_param(param, "a prompt object's `content` is empty"));
    }
    text_prompt(backend, param, &text)
}
