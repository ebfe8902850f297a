//! Thinking models: telling their reasoning from their answer, and turning thinking off.
//!
//! A template that knows thinking tags ([`ThinkingTags::of_template`]) marks the model's
//! reasoning with them: `<think>…</think>` (DeepSeek R1, Qwen 3, QwQ, SmolLM 3) or
//! `<|START_THINKING|>…<|END_THINKING|>` (Command R7B). As llama.cpp's `deepseek` reasoning
//! format does, the reasoning is the text between the tags when the output starts with the
//! opening tag (after whitespace), or from the start when the prompt already opened it (a
//! template that "forces" thinking); everything after the closing tag is the answer, and a
//! reasoning never closed stays reasoning.
//!
//! gpt-oss writes the "harmony" format instead ([`crate::harmony`]): after the prompt's
//! `<|start|>assistant`, a sequence of messages on channels, each after the first opened by
//! `<|start|>assistant` again: `<|channel|>analysis<|message|>REASONING<|end|>` (any number of
//! them), `<|channel|>commentary<|message|>PREAMBLE<|end|>` (shown as content), and last
//! `<|channel|>final<|message|>ANSWER`, which runs to the end of the output (`<|return|>` ends
//! the generation and is not text). As llama.cpp reads it, the reasoning is the analysis
//! messages' text and the content is the rest without the markers; an answer may come without
//! any analysis, and a header may say more (`<|channel|>final <|constrain|>json`, a stray
//! `<|channel|>commentary to=assistant` before the channel). A message to a recipient (a tool
//! call, `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>`) is
//! content as a whole message, `<|start|>assistant` included also for the first one, for
//! [`crate::harmony::tool_calls`] to read; whatever else the model writes stays in the content
//! as written, from where it starts.
//!
//! [`ReasoningSplitter`] does this incrementally, on pieces of a stream: a tag split across
//! pieces is held back until it is complete, so a streamed split equals the split of the whole
//! text. [`ThinkingTags::disable`] closes a thinking block that a prompt opened, as llama.cpp does
//! when reasoning is off (`--reasoning off`, `enable_thinking: false`).

use crate::Message;
use crate::harmony::{self, Header};
use serde_json::Value;

/// A template's thinking tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkingTags {
    /// Opens the reasoning.
    pub open: &'static str,
    /// Closes it.
    pub close: &'static str,
    /// The harmony format's other markers; `None` for a plain pair of tags.
    harmony: Option<Harmony>,
}

/// The markers of the harmony format besides the analysis channel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Harmony {
    /// Starts every message after the first (the prompt wrote the first one's).
    start: &'static str,
    /// Opens the answer, which runs to the end of the output.
    answer: &'static str,
}

/// The longest harmony header (between the message start and `<|message|>`) waited for: a
/// longer one is no header.
const MAX_HEADER: usize = 256;

const DEEPSEEK: ThinkingTags = ThinkingTags { open: "<think>", close: "</think>", harmony: None };
const COMMAND_R: ThinkingTags =
    ThinkingTags { open: "<|START_THINKING|>", close: "<|END_THINKING|>", harmony: None };
const HARMONY: ThinkingTags = ThinkingTags {
    open: "<|channel|>analysis<|message|>",
    close: "<|end|>",
    harmony: Some(Harmony { start: harmony::START, answer: "<|channel|>final<|message|>" }),
};

impl ThinkingTags {
    /// The tags a template's source uses, if any: harmony's when it writes `<|channel|>` (as
    /// llama.cpp recognises gpt-oss), else a pair of thinking tags it mentions.
    pub fn of_template(source: &str) -> Option<ThinkingTags> {
        if source.contains("<|channel|>") {
            return Some(HARMONY);
        }
        [COMMAND_R, DEEPSEEK].into_iter().find(|t| source.contains(t.open))
    }

    /// Whether these are the harmony format's markers (gpt-oss).
    pub fn is_harmony(&self) -> bool {
        self.harmony.is_some()
    }

    /// What closes the reasoning for the model when a reasoning budget runs out: the closing
    /// tag, and for harmony the header of the answer after it.
    pub fn forced_close(&self) -> String {
        match self.harmony {
            Some(h) => format!("{}{}{}", self.close, h.start, h.answer),
            None => self.close.to_string(),
        }
    }

    /// Whether `prompt` ends inside an opened thinking block (the model starts reasoning).
    pub fn forced_open(&self, prompt: &str) -> bool {
        prompt.trim_end().ends_with(self.open)
    }

    /// `prompt` with thinking turned off: an opened block is closed; for Command R7B, whose
    /// template never opens one, an empty block is added. gpt-oss cannot think less than its
    /// template's `reasoning_effort` says: its prompt stays as it is.
    pub fn disable(&self, prompt: &str) -> String {
        if self.forced_open(prompt) {
            format!("{prompt}{}", self.close)
        } else if *self == COMMAND_R && !prompt.trim_end().ends_with(self.close) {
            format!("{prompt}{}{}", self.open, self.close)
        } else {
            prompt.to_string()
        }
    }

    /// `prompt` (which ends with the header of an assistant turn) made ready for the text of an
    /// assistant message it continues: harmony (as llama.cpp) writes the message's reasoning as
    /// an analysis message, then opens the answer; other formats close a block the prompt
    /// opened ([`ThinkingTags::disable`]).
    pub fn continue_answer(&self, prompt: &str, reasoning: Option<&str>) -> String {
        match self.harmony {
            Some(h) => format!(
                "{prompt}{}{}{}{}{}",
                self.open,
                reasoning.unwrap_or(""),
                self.close,
                h.start,
                h.answer
            ),
            None => self.disable(prompt),
        }
    }

    /// Messages as the template reads them. gpt-oss's reads an assistant message's reasoning
    /// from `thinking`, and refuses `content` with it on a turn with tool calls: as llama.cpp
    /// does, `reasoning_content` is copied to `thinking`, and such a turn's content (or a
    /// missing one) is left empty. It also shows one call per assistant message, and names
    /// each tool result after the call before it: a message with several calls becomes one
    /// message per call, each followed by its result ([`one_call_per_message`]), as gpt-oss
    /// makes them (a call ends its turn). Other templates read the messages as they are.
    pub fn adapt_messages(&self, messages: &mut Vec<Message>) {
        if self.harmony.is_none() {
            return;
        }
        one_call_per_message(messages);
        for m in messages.iter_mut().filter(|m| m.role == "assistant") {
            let has_calls =
                m.extra.get("tool_calls").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
            if let Some(r @ Value::String(_)) = m.extra.get("reasoning_content").cloned() {
                m.extra.insert("thinking".into(), r);
                if has_calls {
                    m.content = Some(Value::String(String::new()));
                }
            }
            if has_calls && matches!(m.content, None | Some(Value::Null)) {
                m.content = Some(Value::String(String::new()));
            }
        }
    }
}

/// Splits each assistant message with several `tool_calls` into one message per call (the
/// first keeps the content and reasoning), each followed by the tool message answering it: the
/// one with its `tool_call_id` among the tool messages right after, else the first of them.
fn one_call_per_message(messages: &mut Vec<Message>) {
    let mut out = Vec::with_capacity(messages.len());
    let mut it = std::mem::take(messages).into_iter().peekable();
    while let Some(m) = it.next() {
        let calls = match m.extra.get("tool_calls") {
            Some(Value::Array(c)) if m.role == "assistant" && c.len() > 1 => c.clone(),
            _ => {
                out.push(m);
                continue;
            }
        };
        let mut results = Vec::new();
        while let Some(r) = it.next_if(|r| r.role == "tool") {
            results.push(r);
        }
        for (k, call) in calls.into_iter().enumerate() {
            let id = call.get("id").and_then(Value::as_str).map(str::to_string);
            let mut one = if k == 0 { m.clone() } else { Message::assistant("") };
            one.extra.insert("tool_calls".into(), Value::Array(vec![call]));
            out.push(one);
            let answers = |r: &Message| {
                id.is_some() && r.extra.get("tool_call_id").and_then(Value::as_str) == id.as_deref()
            };
            let at = results.iter().position(answers).or((!results.is_empty()).then_some(0));
            if let Some(p) = at {
                out.push(results.remove(p));
            }
        }
        out.extend(results);
    }
    *messages = out;
}

/// How to read a thinking model's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thinking {
    /// The model's tags.
    pub tags: ThinkingTags,
    /// The prompt opened the reasoning ([`ThinkingTags::forced_open`]).
    pub forced_open: bool,
    /// The reasoning goes to its own field (`reasoning_content`); otherwise it stays in the
    /// content with its tags, as with llama.cpp's `reasoning_format: none` (for harmony the
    /// analysis messages stay as written, while the answer still loses its markers).
    pub to_field: bool,
}

impl Thinking {
    /// Reasoning to its own field: llama.cpp's `deepseek` and `auto` reasoning formats.
    pub fn new(tags: ThinkingTags, forced_open: bool) -> Thinking {
        Thinking { tags, forced_open, to_field: true }
    }
}

/// A piece of output: reasoning or answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Reasoning text.
    Reasoning(String),
    /// Answer text.
    Content(String),
}

/// What a message opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// Reasoning, up to the closing tag.
    Reasoning,
    /// Content, up to the closing tag (a harmony preamble).
    Preamble,
    /// A harmony message to a recipient (a tool call): content as written, up to `<|call|>` or
    /// the closing tag, which stays.
    Call,
    /// The answer: the rest of the output.
    Answer,
}

/// Where the splitter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Before any non-whitespace: reasoning may still open.
    Start,
    /// Inside a block that the closing tag ends.
    Block(Block),
    /// Right after a block: whitespace before the answer is dropped, or (harmony) the next
    /// message opens.
    Gap,
    /// In the answer (the rest is content).
    Content,
}

/// What the held text starts with.
enum Opening {
    /// A marker ending at this byte, opening this.
    Full(usize, Block),
    /// Possibly a marker, not complete yet.
    Partial,
    /// No marker.
    None,
}

/// Whether `text` starts with `prefix` followed by `marker`, which opens reasoning.
fn opening(text: &str, prefix: &str, marker: &str) -> Opening {
    let Some(rest) = text.strip_prefix(prefix) else {
        return if prefix.starts_with(text) { Opening::Partial } else { Opening::None };
    };
    if rest.starts_with(marker) {
        Opening::Full(prefix.len() + marker.len(), Block::Reasoning)
    } else if marker.starts_with(rest) {
        Opening::Partial
    } else {
        Opening::None
    }
}

/// Whether `text` starts with `prefix` followed by a harmony header and `<|message|>`, and what
/// the message opens: its channel's block, a call when it has a recipient. The decision waits
/// for `<|message|>` (at most [`MAX_HEADER`] bytes on), so that it does not depend on how the
/// text was cut into pieces.
fn harmony_opening(text: &str, prefix: &str) -> Opening {
    let Some(rest) = text.strip_prefix(prefix) else {
        return if prefix.starts_with(text) { Opening::Partial } else { Opening::None };
    };
    match Header::may_start(rest) {
        None => return Opening::None,
        Some(false) => return Opening::Partial,
        Some(true) => {}
    }
    let Some(end) = rest.find(harmony::MESSAGE) else {
        let longest = MAX_HEADER + harmony::MESSAGE.len();
        return if rest.len() >= longest || Header::parse(rest).is_none() {
            Opening::None
        } else {
            Opening::Partial
        };
    };
    let block = match Header::parse(&rest[..end]).filter(|_| end <= MAX_HEADER) {
        Some(Header { recipient: Some(_), .. }) => Block::Call,
        Some(Header { channel: Some("analysis"), .. }) => Block::Reasoning,
        Some(Header { channel: Some("final"), .. }) => Block::Answer,
        Some(Header { channel: Some("commentary"), .. }) => Block::Preamble,
        _ => return Opening::None,
    };
    Opening::Full(prefix.len() + end + harmony::MESSAGE.len(), block)
}

/// Splits a thinking model's output into reasoning and answer as it streams.
#[derive(Clone, Debug)]
pub struct ReasoningSplitter {
    how: Thinking,
    mode: Mode,
    /// Text held back: leading whitespace, or a possible partial tag.
    held: String,
}

impl ReasoningSplitter {
    /// A splitter reading output as `how` says.
    pub fn new(how: Thinking) -> Self {
        let mode = if how.forced_open { Mode::Block(Block::Reasoning) } else { Mode::Start };
        Self { how, mode, held: String::new() }
    }

    /// Feeds a piece of output; returns what is now certain, in order.
    pub fn feed(&mut self, piece: &str) -> Vec<Part> {
        let mut out = Vec::new();
        self.held.push_str(piece);
        while self.step(&mut out) {}
        out
    }

    /// Moves on as far as the held text allows; false when it needs more text.
    fn step(&mut self, out: &mut Vec<Part>) -> bool {
        match self.mode {
            Mode::Content => {
                push(out, Part::Content(std::mem::take(&mut self.held)));
                false
            }
            Mode::Start => self.open_message(out, ""),
            Mode::Gap => match self.how.tags.harmony {
                Some(h) => self.open_message(out, h.start),
                None => {
                    self.held = self.held.trim_start().to_string();
                    if self.held.is_empty() {
                        return false;
                    }
                    self.mode = Mode::Content;
                    true
                }
            },
            Mode::Block(b) => self.in_block(out, b),
        }
    }

    /// At the start of a message (after `prefix`): what it opens, if anything. Whitespace is
    /// skipped before the first message only.
    fn open_message(&mut self, out: &mut Vec<Part>, prefix: &str) -> bool {
        let harmony = self.how.tags.harmony;
        // A harmony header may start with a space (` to=…`): that is not whitespace to skip.
        let skip = prefix.is_empty() && !(harmony.is_some() && Header::may_start(&self.held).is_some());
        let ws = if skip { self.held.len() - self.held.trim_start().len() } else { 0 };
        let found = match harmony {
            Some(_) => harmony_opening(&self.held[ws..], prefix),
            None => opening(&self.held[ws..], prefix, self.how.tags.open),
        };
        match found {
            Opening::Partial => false,
            Opening::None => {
                self.mode = Mode::Content;
                true
            }
            Opening::Full(len, block) => {
                let header = &self.held[ws + prefix.len()..ws + len];
                if block == Block::Reasoning && !self.how.to_field {
                    push(out, Part::Content(format!("{}{header}", &self.held[..ws])));
                } else if block == Block::Call {
                    push(out, Part::Content(format!("{}{header}", harmony::START)));
                }
                self.held.drain(..ws + len);
                self.mode = if block == Block::Answer { Mode::Content } else { Mode::Block(block) };
                true
            }
        }
    }

    /// Inside a block: its text up to the closing tag.
    fn in_block(&mut self, out: &mut Vec<Part>, block: Block) -> bool {
        // A call ends at `<|call|>` too; its end marker stays with it.
        let closes: &[&str] =
            if block == Block::Call { &[harmony::CALL, self.how.tags.close] } else { &[self.how.tags.close] };
        let keep_tags = block == Block::Call || (block == Block::Reasoning && !self.how.to_field);
        match closes.iter().filter_map(|c| Some((self.held.find(c)?, *c))).min() {
            Some((i, close)) => {
                let text = self.held[..i].to_string();
                self.held.drain(..i + close.len());
                push(out, self.part(block, text));
                if keep_tags {
                    push(out, Part::Content(close.to_string()));
                }
                self.mode = Mode::Gap;
                true
            }
            None => {
                // Keep back a suffix that could be the start of a closing tag.
                let keep = closes.iter().map(|c| partial_suffix(&self.held, c)).max().unwrap_or(0);
                let ready = self.held.len() - keep;
                let text: String = self.held.drain(..ready).collect();
                push(out, self.part(block, text));
                false
            }
        }
    }

    /// A block's text as a part.
    fn part(&self, block: Block, text: String) -> Part {
        match block {
            Block::Reasoning if self.how.to_field => Part::Reasoning(text),
            _ => Part::Content(text),
        }
    }

    /// Ends the output: whatever was held back.
    pub fn finish(&mut self) -> Vec<Part> {
        let held = std::mem::take(&mut self.held);
        let part = match self.mode {
            Mode::Block(b) => self.part(b, held),
            Mode::Start | Mode::Gap | Mode::Content => Part::Content(held),
        };
        let mut out = Vec::new();
        push(&mut out, part);
        out
    }

    /// Splits a whole text: (reasoning, answer), the reasoning `None` when there is none.
    pub fn split(how: Thinking, text: &str) -> (Option<String>, String) {
        let mut s = ReasoningSplitter::new(how);
        let mut parts = s.feed(text);
        parts.extend(s.finish());
        join(parts)
    }
}

/// The parts joined: (reasoning, answer), the reasoning `None` when there is none.
fn join(parts: Vec<Part>) -> (Option<String>, String) {
    let (mut reasoning, mut content) = (None::<String>, String::new());
    for p in parts {
        match p {
            Part::Reasoning(r) => reasoning.get_or_insert_with(String::new).push_str(&r),
            Part::Content(c) => content.push_str(&c),
        }
    }
    (reasoning, content)
}

/// Appends a non-empty part, merging it with the previous part of the same kind.
fn push(out: &mut Vec<Part>, part: Part) {
    match (out.last_mut(), part) {
        (_, Part::Reasoning(s) | Part::Content(s)) if s.is_empty() => {}
        (Some(Part::Reasoning(a)), Part::Reasoning(b)) | (Some(Part::Content(a)), Part::Content(b)) => {
            a.push_str(&b)
        }
        (_, p) => out.push(p),
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
