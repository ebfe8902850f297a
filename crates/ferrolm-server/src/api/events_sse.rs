//! One request streamed as named server-sent events (`event: NAME` + `data: JSON`), the framing
//! of Anthropic's Messages API and OpenAI's Responses API, the reply read as it streams
//! ([`ReplyText`]: reasoning split off, tool calls held back).

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::Value;

use super::error::ApiError;
use super::tools::{ReplyText, ToolCall};
use ferrolm::chat::reasoning::Part;
use ferrolm::decoder::FinishReason;
use ferrolm::engine::{Event, RequestHandle, Usage};

/// Turns a request's engine events into named SSE events: the reasoning and the text as they
/// may be shown, then the end with the tool calls found.
pub(crate) trait EventWriter: Send + 'static {
    /// The reply's text so far.
    fn reply(&mut self) -> &mut ReplyText;
    /// Writes text that can be shown (never empty).
    fn text(&mut self, text: &str);
    /// Writes reasoning (never empty).
    fn reasoning(&mut self, text: &str);
    /// Writes the parts of the reply.
    fn parts(&mut self, parts: Vec<Part>) {
        for p in parts {
            match p {
                Part::Reasoning(r) => self.reasoning(&r),
                Part::Content(c) => self.text(&c),
            }
        }
    }
    /// Writes the end of the reply.
    fn end(&mut self, finish: FinishReason, usage: Usage, stop_word: Option<String>, calls: Vec<ToolCall>);
    /// Writes an error event; the stream then ends.
    fn error(&mut self, e: ApiError);
    /// The events written since the last call.
    fn take(&mut self) -> Vec<sse::Event>;
    /// The prompt has run up to token `processed` (llama-server's `return_progress`); nothing
    /// by default.
    fn progress(&mut self, _processed: usize, _usage: Usage) {}
    /// A token came (before its text is written); nothing by default.
    fn token(&mut self) {}

    /// Handles one engine event; true when it was the last (the stream then ends).
    fn event(&mut self, ev: Event) -> bool {
        match ev {
            Event::PromptLogprobs(_) => false,
            Event::Progress { processed, usage } => {
                self.progress(processed, usage);
                false
            }
            Event::Token { text, .. } => {
                self.token();
                let parts = self.reply().push(&text);
                self.parts(parts);
                false
            }
            Event::Done { text, finish, usage, stop_word } => {
                let (parts, calls) = self.reply().finish(&text);
                self.parts(parts);
                self.end(finish, usage, stop_word, calls);
                true
            }
            Event::Error(m) => {
                self.error(ApiError::internal(m));
                true
            }
            Event::Refused(e) => {
                self.error(e.into());
                true
            }
        }
    }
}

/// The SSE event named by `v["type"]` with `v` as its data.
pub(crate) fn named(v: &Value) -> sse::Event {
    sse::Event::default().event(v["type"].as_str().unwrap_or("message")).data(v.to_string())
}

/// The response: the events `writer` already holds, then those of each engine event of `rx`.
pub(crate) fn respond<W: EventWriter>(mut writer: W, rx: RequestHandle) -> Response {
    let first = writer.take();
    let rest = stream::unfold((rx, writer, false), |(mut rx, mut w, ended)| async move {
        if ended {
            return None;
        }
        let ended = match rx.next_event().await {
            Some(e) => w.event(e),
            None => {
                w.error(ApiError::internal("the engine stopped before the request finished"));
                true
            }
        };
        let batch = w.take();
        Some((stream::iter(batch), (rx, w, ended)))
    })
    .flatten();
    let body = stream::iter(first).chain(rest).map(Ok::<sse::Event, Infallible>);
    Sse::new(body).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}
