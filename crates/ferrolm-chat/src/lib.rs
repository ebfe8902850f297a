//! Chat templates: a model's Jinja template turning a conversation into its prompt text.
//!
//! Templates render the way Hugging Face transformers renders them (Python jinja2 with
//! `trim_blocks` and `lstrip_blocks`, `raise_exception`, `strftime_now` and a `tojson` that is
//! `json.dumps(..., ensure_ascii=False)`), on [MiniJinja](https://docs.rs/minijinja) with its
//! Python-compatibility methods (`.strip()`, `.split()`, `.items()`, …).
//!
//! The template sees `messages`, `tools` (`None` when not given), `documents` (`None`),
//! `add_generation_prompt`, `bos_token`, `eos_token`, and every entry of
//! [`RenderOptions::kwargs`] (e.g. `enable_thinking`) as a variable.
//!
//! ```
//! use ferrolm_chat::{ChatTemplate, Message, RenderOptions};
//!
//! # fn main() -> Result<(), ferrolm_chat::ChatTemplateError> {
//! let t = ChatTemplate::new(
//!     "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}\
//!      {% if add_generation_prompt %}<|assistant|>{% endif %}",
//! )?;
//! let opts = RenderOptions { add_generation_prompt: true, ..Default::default() };
//! let text = t.render(&[Message::system("Be brief."), Message::user("Hi!")], &opts)?;
//! assert_eq!(text, "<|system|>Be brief.\n<|user|>Hi!\n<|assistant|>");
//! # Ok(())
//! # }
//! ```
//!
//! Not supported: methods that change a list or dict in place (`list.append`, `dict.update`…),
//! since template values are immutable here; a template calling one fails with a render error.
//!
//! Part of ferrolm, which re-exports this crate as `ferrolm::chat`. It depends on no other ferrolm
//! crate: a template is rendered from messages and token texts, whatever model they belong to.

mod builtin;
mod date;
mod env;
pub mod harmony;
mod methods;
mod pyjson;
pub mod reasoning;
#[cfg(test)]
mod tests;

use minijinja::{Environment, Value};
use serde::{Deserialize, Serialize};

pub use builtin::{builtin_template, builtin_template_names};
pub use date::CalendarDate;

/// A compiled chat template; render it as often as needed (it is `Send + Sync`).
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("source_len", &self.source.len()).finish_non_exhaustive()
    }
}

/// One message of a conversation, as the template sees it: a dict with `role`, `content` and any
/// extra fields (`tool_calls`, `name`, `tool_call_id`, `reasoning_content`, …).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, or whatever the template understands.
    pub role: String,
    /// A string, a list of parts (`[{"type": "text", "text": "…"}]`, passed through as a list), or
    /// `None` (the template sees `None`, as in Python).
    #[serde(default)]
    pub content: Option<serde_json::Value>,
    /// Every other field of the message, in order.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Message {
    /// A message with this role and text content.
    pub fn new(role: impl Into<String>, text: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: Some(serde_json::Value::String(text.into())),
            extra: serde_json::Map::new(),
        }
    }

    /// A `system` message.
    pub fn system(text: impl Into<String>) -> Message {
        Message::new("system", text)
    }

    /// A `user` message.
    pub fn user(text: impl Into<String>) -> Message {
        Message::new("user", text)
    }

    /// An `assistant` message.
    pub fn assistant(text: impl Into<String>) -> Message {
        Message::new("assistant", text)
    }

    /// A `tool` message (a tool's result).
    pub fn tool(text: impl Into<String>) -> Message {
        Message::new("tool", text)
    }
}

/// What a render passes to the template besides the messages.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    /// End with the header of an assistant turn, so that the model writes the reply.
    pub add_generation_prompt: bool,
    /// The model's beginning-of-sequence token text (`bos_token`).
    pub bos_token: String,
    /// The model's end-of-sequence token text (`eos_token`).
    pub eos_token: String,
    /// Tool (function) definitions, usually JSON schemas; `None` shows as `tools = None`.
    pub tools: Option<Vec<serde_json::Value>>,
    /// More template variables (e.g. `enable_thinking`); they override the ones above of the
    /// same name, except `messages`.
    pub kwargs: serde_json::Map<String, serde_json::Value>,
    /// The date `strftime_now` formats (at midnight); `None` uses the system clock (UTC).
    pub today: Option<CalendarDate>,
}

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template is not valid Jinja.
    #[error("chat template syntax error{}: {message}", at_line(*.line))]
    Syntax {
        /// What is wrong.
        message: String,
        /// The template line (1-based), when known.
        line: Option<usize>,
    },
    /// Rendering failed (an undefined attribute, a type error, an unknown filter…).
    #[error("chat template render error{}: {message}", at_line(*.line))]
    Render {
        /// What went wrong.
        message: String,
        /// The template line (1-based), when known.
        line: Option<usize>,
    },
    /// The template called `raise_exception(message)`, e.g. for a role it does not support.
    #[error("chat template raised an exception: {0}")]
    Raised(String),
}

fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(" at line {l}")).unwrap_or_default()
}

impl ChatTemplateError {
    fn syntax(err: &minijinja::Error) -> ChatTemplateError {
        ChatTemplateError::Syntax { message: describe(err), line: err.line() }
    }

    fn render(err: &minijinja::Error) -> ChatTemplateError {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = source {
            if let Some(raised) = e.downcast_ref::<env::Raised>() {
                return ChatTemplateError::Raised(raised.0.clone());
            }
            source = e.source();
        }
        ChatTemplateError::Render { message: describe(err), line: err.line() }
    }
}

/// An error's kind and detail, without MiniJinja's "(in template:line)" suffix (the line is
/// reported separately).
fn describe(err: &minijinja::Error) -> String {
    let mut message = match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.kind().to_string(),
    };
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        message.push_str(&format!(" ({e})"));
        source = e.source();
    }
    message
}

/// A JSON value as a template value (objects keep their key order, like Python dicts).
fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => Value::from(items.iter().map(json_to_value).collect::<Vec<_>>()),
        serde_json::Value::Object(map) => {
            Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), json_to_value(v))))
        }
    }
}

impl ChatTemplate {
    /// Compiles a template; syntax errors are reported here.
    pub fn new(source: &str) -> Result<ChatTemplate, ChatTemplateError> {
        let env = env::build(source).map_err(|e| ChatTemplateError::syntax(&e))?;
        Ok(ChatTemplate { env, source: source.to_string() })
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders a conversation to the prompt text.
    pub fn render(&self, messages: &[Message], opts: &RenderOptions) -> Result<String, ChatTemplateError> {
        let bad_input = |what: &str, e: &dyn std::fmt::Display| ChatTemplateError::Render {
            message: format!("cannot pass {what} to the template: {e}"),
            line: None,
        };
        let mut ctx = serde_json::Map::new();
        if let Some(tools) = &opts.tools {
            ctx.insert("tools".into(), tools.clone().into());
        }
        ctx.insert("add_generation_prompt".into(), opts.add_generation_prompt.into());
        ctx.insert("bos_token".into(), opts.bos_token.clone().into());
        ctx.insert("eos_token".into(), opts.eos_token.clone().into());
        for (k, v) in &opts.kwargs {
            ctx.insert(k.clone(), v.clone());
        }
        let messages = serde_json::to_value(messages).map_err(|e| bad_input("the messages", &e))?;
        ctx.insert("messages".into(), messages);
        if let Some(day) = opts.today {
            ctx.insert(env::TODAY_KEY.into(), day.to_string().into());
        }
        let none = || Value::from_object(env::PyNone);
        let mut vars = vec![];
        if opts.tools.is_none() {
            vars.push(("tools".to_string(), none()));
        }
        vars.push(("documents".to_string(), none()));
        vars.extend(ctx.iter().map(|(k, v)| (k.clone(), json_to_value(v))));
        let ctx = Value::from_pairs(vars);
        let template =
            self.env.get_template(env::TEMPLATE_NAME).map_err(|e| ChatTemplateError::syntax(&e))?;
        template.render(ctx).map_err(|e| ChatTemplateError::render(&e))
    }
}
