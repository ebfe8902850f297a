//! Server-sent events for `"stream": true`: `data: <json>\n\n` per chunk, then `data: [DONE]`.
//!
//! Chat: first a `delta.role = "assistant"` chunk per choice, content chunks (empty text
//! skipped; log-probabilities of tokens whose text is held back go with the next chunk), tool
//! calls (when the request offered tools) as one `delta.tool_calls` chunk, a chunk with the
//! `finish_reason`; with `stream_options.include_usage` a last chunk with `choices: []` and the
//! usage. The last chunk has llama-server's `timings`; with `timings_per_token` every chunk has
//! them, and with `return_progress` `prompt_progress` chunks come while the prompt runs. Completions: `text_completion` chunks the same way (the prompt first with `echo`).
//! Several choices interleave as their tokens come.
//!
//! The response body owns the engine receivers: when the client goes away the body is dropped,
//! and with it the receivers, which cancels the requests. A resumable stream
//! ([`super::stream_session`]) is the exception: its own task owns them.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use serde_json::{Value, json};

use super::backend::SharedBackend;
use super::error::ApiError;
use super::params::LiveReports;
use super::response::{LegacyLogprobs, Live, UsageSum, chat_logprob, fingerprint};
use super::stream_session;
use super::tools::ReplyText;
use ferrolm::chat::reasoning::{Part, Thinking};
use ferrolm::decoder::TokenLogprob;
use ferrolm::engine::{Event, RequestHandle};

/// What kind of chunks to write.
pub(crate) enum StreamKind {
    /// `chat.completion.chunk`; with tool names, tool calls are parsed.
    Chat {
        /// The offered tools' names (`None`: no tool parsing).
        tools: Option<Vec<String>>,
        /// How to split a thinking model's output: the reasoning streams as
        /// `delta.reasoning_content` (`None`: everything is content).
        thinking: Option<Thinking>,
    },
    /// `text_completion`.
    Completion {
        /// Per prompt: its text and tokens, when `echo` asked for them.
        echo: Vec<Option<(String, Vec<u32>)>>,
    },
}

/// The fixed fields of every chunk.
pub(crate) struct StreamHead {
    pub id: String,
    pub created: u64,
    pub model: String,
    /// Choices per prompt.
    pub n: usize,
    pub include_usage: bool,
    /// `return_progress` and `timings_per_token`.
    pub live: LiveReports,
}

struct Choice {
    started: bool,
    done: bool,
    /// The reply: reasoning split off, tool calls held back (chat).
    reply: ReplyText,
    /// Chat log-probabilities waiting for text.
    chat_lp: Vec<Value>,
    /// Completions log-probabilities waiting for text.
    legacy_lp: Option<LegacyLogprobs>,
    /// Characters of token text so far (completions `text_offset`).
    offset: usize,
    /// Progress and per-token timings.
    live: Live,
}

/// Turns engine events into SSE chunks.
struct Pump {
    backend: SharedBackend,
    head: StreamHead,
    kind: StreamKind,
    events: SelectAll<BoxStream<'static, (usize, Option<Event>)>>,
    choices: Vec<Choice>,
    queue: VecDeque<String>,
    usage: UsageSum,
    finished: usize,
    ended: bool,
}

/// A request's events as a stream of `(choice, event)`, ending with `(choice, None)` when it
/// closes.
fn tagged(i: usize, rx: RequestHandle) -> BoxStream<'static, (usize, Option<Event>)> {
    StreamExt::map(rx, move |ev| (i, Some(ev))).chain(stream::once(async move { (i, None) })).boxed()
}

impl Pump {
    fn chunk(&self, choices: Vec<Value>) -> Value {
        let object = match self.kind {
            StreamKind::Chat { .. } => "chat.completion.chunk",
            StreamKind::Completion { .. } => "text_completion",
        };
        let mut v = json!({
            "id": self.head.id,
            "object": object,
            "created": self.head.created,
            "model": self.head.model,
            "system_fingerprint": fingerprint(),
            "choices": choices,
        });
        if self.head.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    fn emit(&mut self, v: Value) {
        self.queue.push_back(v.to_string());
    }

    /// A content chunk (chat `delta.content`, completions `text`) with the waiting
    /// log-probabilities; `finish` closes the choice.
    fn text_chunk(&mut self, i: usize, text: &str, finish: Option<&str>) {
        let c = &mut self.choices[i];
        let choice = match &self.kind {
            StreamKind::Chat { .. } => {
                let lp = if c.chat_lp.is_empty() {
                    Value::Null
                } else {
                    json!({"content": std::mem::take(&mut c.chat_lp)})
                };
                let delta = if text.is_empty() { json!({}) } else { json!({"content": text}) };
                json!({"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish})
            }
            StreamKind::Completion { .. } => {
                let lp = match c.legacy_lp.take() {
                    Some(l) if !l.is_empty() => {
                        c.offset = l.offset();
                        l.to_json()
                    }
                    _ => Value::Null,
                };
                json!({"index": i, "text": text, "logprobs": lp, "finish_reason": finish})
            }
        };
        let mut v = self.chunk(vec![choice]);
        self.choices[i].live.annotate(&mut v);
        self.emit(v);
    }

    /// A `prompt_progress` chunk (chat: a role delta, as llama-server sends it).
    fn progress_chunk(&mut self, i: usize, progress: Value) {
        let choice = match &self.kind {
            StreamKind::Chat { .. } => {
                json!({"index": i, "delta": {"role": "assistant", "content": null}, "logprobs": null, "finish_reason": null})
            }
            StreamKind::Completion { .. } => {
                json!({"index": i, "text": "", "logprobs": null, "finish_reason": null})
            }
        };
        let mut v = self.chunk(vec![choice]);
        v["prompt_progress"] = progress;
        self.choices[i].live.annotate(&mut v);
        self.emit(v);
    }

    fn add_logprob(&mut self, i: usize, lp: &TokenLogprob) {
        match self.kind {
            StreamKind::Chat { .. } => {
                let v = chat_logprob(self.backend.as_ref(), lp);
                self.choices[i].chat_lp.push(v);
            }
            StreamKind::Completion { .. } => {
                let c = &mut self.choices[i];
                let legacy = c.legacy_lp.get_or_insert_with(|| LegacyLogprobs::new(c.offset));
                legacy.push(self.backend.as_ref(), lp.id, Some(lp));
            }
        }
    }

    /// The first event of a choice: the echoed prompt (completions).
    fn start(&mut self, i: usize, prompt_lps: Option<&[Option<TokenLogprob>]>) {
        self.choices[i].started = true;
        let StreamKind::Completion { echo } = &self.kind else { return };
        let Some(Some((text, tokens))) = echo.get(i / self.head.n) else { return };
        let (text, tokens) = (text.clone(), tokens.clone());
        if let Some(lps) = prompt_lps {
            let mut l = LegacyLogprobs::new(0);
            l.push_prompt(self.backend.as_ref(), &tokens, Some(lps));
            self.choices[i].legacy_lp = Some(l);
        }
        self.text_chunk(i, &text, None);
    }

    /// Emits the reasoning of `parts` as `delta.reasoning_content` chunks (a thinking model's)
    /// and the content as one chunk.
    fn parts(&mut self, i: usize, parts: Vec<Part>) {
        let mut shown = String::new();
        for p in parts {
            match p {
                Part::Reasoning(r) => {
                    let delta = json!({"reasoning_content": r});
                    let choice = json!({"index": i, "delta": delta, "logprobs": null, "finish_reason": null});
                    let v = self.chunk(vec![choice]);
                    self.emit(v);
                }
                Part::Content(c) => shown.push_str(&c),
            }
        }
        if !shown.is_empty() {
            self.text_chunk(i, &shown, None);
        }
    }

    fn handle(&mut self, i: usize, ev: Option<Event>) {
        if self.choices[i].done {
            return;
        }
        let Some(ev) = ev else {
            self.fail(ApiError::internal("the engine stopped before the request finished"));
            return;
        };
        if !self.choices[i].started {
            let lps = match &ev {
                Event::PromptLogprobs(p) => Some(p.as_slice()),
                _ => None,
            };
            self.start(i, lps);
        }
        match ev {
            Event::PromptLogprobs(_) => {}
            Event::Progress { processed, usage } => {
                if let Some(p) = self.choices[i].live.progress(processed, usage) {
                    self.progress_chunk(i, p);
                }
            }
            Event::Token { text, logprob, .. } => {
                self.choices[i].live.token();
                if let Some(lp) = &logprob {
                    self.add_logprob(i, lp);
                }
                let parts = self.choices[i].reply.push(&text);
                self.parts(i, parts);
            }
            Event::Done { text, finish, usage, .. } => {
                let (parts, calls) = self.choices[i].reply.finish(&text);
                self.parts(i, parts);
                if !calls.is_empty() {
                    let tc: Vec<Value> = calls.iter().enumerate().map(|(k, c)| c.to_json(Some(k))).collect();
                    let choice = json!({"index": i, "delta": {"tool_calls": tc}, "logprobs": null, "finish_reason": null});
                    let v = self.chunk(vec![choice]);
                    self.emit(v);
                }
                self.choices[i].done = true;
                self.finished += 1;
                self.usage.add(&usage, i.is_multiple_of(self.head.n));
                let reason = if calls.is_empty() { finish.openai_reason() } else { "tool_calls" };
                self.text_chunk(i, "", Some(reason));
                if self.finished == self.choices.len() {
                    self.finish_all();
                }
            }
            Event::Error(m) => self.fail(ApiError::internal(m)),
            Event::Refused(e) => self.fail(e.into()),
        }
    }

    /// Every choice is done: the usage chunk, timings on the last chunk (as llama-server
    /// sends them), `[DONE]`.
    fn finish_all(&mut self) {
        if self.head.include_usage {
            let mut v = self.chunk(Vec::new());
            v["usage"] = self.usage.usage_json();
            self.emit(v);
        }
        let timings = self.usage.timings_json();
        if let Some(last) = self.queue.back_mut()
            && let Ok(mut v) = serde_json::from_str::<Value>(last)
        {
            v["timings"] = timings;
            *last = v.to_string();
        }
        self.queue.push_back("[DONE]".to_string());
        self.ended = true;
    }

    /// An error mid-stream: an error event, then `[DONE]`.
    fn fail(&mut self, e: ApiError) {
        tracing::warn!(error = %e.message, "stream failed");
        self.queue.push_back(e.body().to_string());
        self.queue.push_back("[DONE]".to_string());
        self.ended = true;
    }

    async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(s) = self.queue.pop_front() {
                return Some(s);
            }
            if self.ended {
                return None;
            }
            match self.events.next().await {
                Some((i, ev)) => self.handle(i, ev),
                None => self.fail(ApiError::internal("the engine stopped before the request finished")),
            }
        }
    }
}

/// The SSE response for the receivers of one request (choice `i` is `rxs[i]`; the `head.n`
/// choices of each prompt are consecutive).
pub(crate) fn sse_response(
    backend: SharedBackend,
    head: StreamHead,
    kind: StreamKind,
    rxs: Vec<RequestHandle>,
) -> Response {
    let n_choices = rxs.len();
    let events = stream::select_all(rxs.into_iter().enumerate().map(|(i, rx)| tagged(i, rx)));
    let (tools, thinking) = match &kind {
        StreamKind::Chat { tools, thinking } => (tools.clone(), *thinking),
        StreamKind::Completion { .. } => (None, None),
    };
    let live = head.live;
    let mut pump = Pump {
        backend,
        head,
        kind,
        events,
        choices: (0..n_choices)
            .map(|_| Choice {
                started: false,
                done: false,
                reply: ReplyText::new(tools.clone(), thinking),
                chat_lp: Vec::new(),
                legacy_lp: None,
                offset: 0,
                live: Live::new(live),
            })
            .collect(),
        queue: VecDeque::new(),
        usage: UsageSum::default(),
        finished: 0,
        ended: false,
    };
    if let StreamKind::Chat { .. } = pump.kind {
        for i in 0..n_choices {
            pump.choices[i].started = true;
            let choice = json!({"index": i, "delta": {"role": "assistant", "content": null}, "logprobs": null, "finish_reason": null});
            let v = pump.chunk(vec![choice]);
            pump.emit(v);
        }
    }
    let payloads = stream::unfold(pump, |mut pump| async move {
        let data = pump.next().await?;
        Some((data, pump))
    });
    // A resumable stream (`X-Conversation-Id`): the generation outlives the client.
    if let Some(session) = stream_session::start_current() {
        stream_session::produce(session.clone(), payloads.boxed());
        return stream_session::reader_response(session, 0);
    }
    let body = payloads.map(|data| Ok::<sse::Event, Infallible>(sse::Event::default().data(data)));
    Sse::new(body).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}
