//! gpt-oss's "harmony" format: message headers, and the tool calls a reply holds.
//!
//! A harmony message is `<|start|>ROLE` (the prompt writes the first assistant one), a header,
//! `<|message|>`, its text, and an end marker. The header names the channel
//! (`<|channel|>analysis`, `commentary`, `final`) and may name a recipient (` to=NAME`), either
//! in the role part (`<|start|>assistant to=functions.f<|channel|>commentary json`) or after the
//! channel (`<|channel|>commentary to=functions.f <|constrain|>json`); a constraint type
//! (`json`, with or without `<|constrain|>`) may end it. gpt-oss calls a function by writing a
//! message to `functions.NAME` whose text is the JSON arguments, ended by `<|call|>` (an
//! end-of-generation token, so the output usually stops right after the arguments).
//!
//! As llama.cpp's gpt-oss parser reads it, a message addressed to anyone but `assistant` is a
//! call (`<|channel|>commentary to=assistant` is a stray prefix gpt-oss sometimes writes
//! before the real channel), and only calls of `functions.*` are tool calls.

/// Starts an assistant message.
pub const START: &str = "<|start|>assistant";
/// Names the channel in a header.
pub const CHANNEL: &str = "<|channel|>";
/// Ends a header.
pub const MESSAGE: &str = "<|message|>";
/// Ends a tool call's arguments (and the generation).
pub const CALL: &str = "<|call|>";
/// Ends a message.
pub const END: &str = "<|end|>";
/// Introduces a recipient in a header.
const TO: &str = " to=";
/// Markers a header cannot hold.
const NOT_IN_HEADER: [&str; 5] = ["<|start|>", END, CALL, "<|return|>", MESSAGE];

/// What a message header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// The channel (`analysis`, `commentary`, `final`), the last one named.
    pub channel: Option<&'a str>,
    /// The recipient of a call (` to=NAME`); `None` for a message to no one or to `assistant`.
    pub recipient: Option<&'a str>,
}

impl<'a> Header<'a> {
    /// Reads the header text between `<|start|>assistant` (or the start of the output) and
    /// `<|message|>`; `None` when it is not one (it holds another marker).
    pub fn parse(text: &'a str) -> Option<Header<'a>> {
        if NOT_IN_HEADER.iter().any(|m| text.contains(m)) {
            return None;
        }
        let word = |marker: &str| {
            let (_, after) = text.rsplit_once(marker)?;
            let end = after.find([' ', '<']).unwrap_or(after.len());
            Some(&after[..end]).filter(|w| !w.is_empty())
        };
        Some(Header { channel: word(CHANNEL), recipient: word(TO).filter(|r| *r != "assistant") })
    }

    /// Whether a header could start with `text` (a header starts with the channel or the
    /// recipient): `Some(true)` when it does, `Some(false)` when more text is needed to know.
    pub fn may_start(text: &str) -> Option<bool> {
        if text.starts_with(CHANNEL) || text.starts_with(TO) {
            Some(true)
        } else if CHANNEL.starts_with(text) || TO.starts_with(text) {
            Some(false)
        } else {
            None
        }
    }

    /// The function a tool call names (`functions.NAME`).
    pub fn function(&self) -> Option<&'a str> {
        self.recipient?.strip_prefix("functions.").filter(|n| !n.is_empty())
    }
}

/// A tool call read from a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments: the JSON text as written.
    pub arguments: String,
}

/// The tool calls in a reply's content: each a message `<|start|>assistant HEADER<|message|>ARGS`
/// to `functions.NAME` (as a reasoning split writes them, [`crate::reasoning`]), its arguments
/// ended by `<|call|>`, `<|end|>`, the next message or the end of the text. Returns the text
/// around them (trimmed) and the calls, or `None` when the text holds no message, or a message
/// that is not a call of a function with JSON arguments.
pub fn tool_calls(text: &str) -> Option<(String, Vec<ToolCall>)> {
    let first = text.find(START)?;
    let mut content = text[..first].to_string();
    let mut rest = &text[first..];
    let mut calls = Vec::new();
    while let Some(p) = rest.find(START) {
        content.push_str(&rest[..p]);
        let msg = &rest[p + START.len()..];
        let h = msg.find(MESSAGE)?;
        let name = Header::parse(&msg[..h])?.function()?;
        let body = &msg[h + MESSAGE.len()..];
        let (args, after) = match [CALL, END, START].iter().filter_map(|m| Some((body.find(m)?, *m))).min() {
            Some((i, START)) => (&body[..i], &body[i..]),
            Some((i, m)) => (&body[..i], &body[i + m.len()..]),
            None => (body, ""),
        };
        let args = args.trim();
        serde_json::from_str::<serde_json::Value>(args).ok()?;
        calls.push(ToolCall { name: name.to_string(), arguments: args.to_string() });
        rest = after;
    }
    content.push_str(rest);
    Some((content.trim().to_string(), calls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_name_channel_and_recipient() {
        let h = |t| Header::parse(t);
        assert_eq!(h("<|channel|>analysis"), Some(Header { channel: Some("analysis"), recipient: None }));
        let call = Header { channel: Some("commentary"), recipient: Some("functions.f") };
        assert_eq!(h("<|channel|>commentary to=functions.f <|constrain|>json"), Some(call));
        assert_eq!(h(" to=functions.f<|channel|>commentary json"), Some(call));
        assert_eq!(call.function(), Some("f"));
        // The stray prefix gpt-oss sometimes writes: the last channel counts, `assistant` is no one.
        assert_eq!(
            h("<|channel|>commentary to=assistant<|channel|>final"),
            Some(Header { channel: Some("final"), recipient: None })
        );
        assert_eq!(h("<|channel|>commentary to=python <|constrain|>code").and_then(|h| h.function()), None);
        assert_eq!(h("<|channel|>final<|end|>"), None);
        assert_eq!(Header::may_start("<|chan"), Some(false));
        assert_eq!(Header::may_start(" to=x"), Some(true));
        assert_eq!(Header::may_start("Hello"), None);
    }

    #[test]
    fn tool_calls_in_every_header_layout() {
        let call = |n: &str, a: &str| ToolCall { name: n.into(), arguments: a.into() };
        let one = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\"}";
        assert_eq!(tool_calls(one), Some((String::new(), vec![call("get_weather", "{\"city\": \"Rome\"}")])));
        let two = "I'll check. <|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|><|start|>assistant<|channel|>analysis to=functions.g<|message|> {\"a\": [1]} ";
        assert_eq!(
            tool_calls(two),
            Some(("I'll check.".to_string(), vec![call("f", "{}"), call("g", "{\"a\": [1]}")]))
        );
        // Not calls: no message, a builtin tool, arguments that are not JSON, another message.
        assert_eq!(tool_calls("plain"), None);
        assert_eq!(tool_calls("<|start|>assistant<|channel|>commentary to=python<|message|>print(1)"), None);
        assert_eq!(
            tool_calls("<|start|>assistant to=functions.f<|channel|>commentary<|message|>{\"a\""),
            None
        );
        assert_eq!(tool_calls("<|start|>assistant<|channel|>final <|constrain|>json<|message|>{}"), None);
    }
}
