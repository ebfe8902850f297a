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
//! [`ReasoningSplitter`] does this incrementally, on pieces of a stream: a tag split across
//! pieces is held back until it is complete, so a streamed split equals the split of the whole
//! text. [`ThinkingTags::disable`] closes a thinking block that a prompt opened, as llama.cpp does
//! when reasoning is off (`--reasoning off`, `enable_thinking: false`).

/// A template's thinking tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkingTags {
    /// Opens the reasoning.
    pub open: &'static str,
    /// Closes it.
    pub close: &'static str,
}

const DEEPSEEK: ThinkingTags = ThinkingTags { open: "<think>", close: "</think>" };
const COMMAND_R: ThinkingTags = ThinkingTags { open: "<|START_THINKING|>", close: "<|END_THINKING|>" };

impl ThinkingTags {
    /// The tags a template's source uses, if any.
    pub fn of_template(source: &str) -> Option<ThinkingTags> {
        [COMMAND_R, DEEPSEEK].into_iter().find(|t| source.contains(t.open))
    }

    /// Whether `prompt` ends inside an opened thinking block (the model starts reasoning).
    pub fn forced_open(&self, prompt: &str) -> bool {
        prompt.trim_end().ends_with(self.open)
    }

    /// `prompt` with thinking turned off: an opened block is closed; for Command R7B, whose
    /// template never opens one, an empty block is added.
    pub fn disable(&self, prompt: &str) -> String {
        if self.forced_open(prompt) {
            format!("{prompt}{}", self.close)
        } else if *self == COMMAND_R && !prompt.trim_end().ends_with(self.close) {
            format!("{prompt}{}{}", self.open, self.close)
        } else {
            prompt.to_string()
        }
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

/// Where the splitter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Before any non-whitespace: reasoning may still open.
    Start,
    /// Inside the reasoning.
    Reasoning,
    /// Right after the reasoning: whitespace before the answer is dropped.
    Gap,
    /// In the answer (the rest is content).
    Content,
}

/// Splits a thinking model's output into reasoning and answer as it streams.
#[derive(Clone, Debug)]
pub struct ReasoningSplitter {
    tags: ThinkingTags,
    mode: Mode,
    /// Text held back: leading whitespace, or a possible partial tag.
    held: String,
}

impl ReasoningSplitter {
    /// A splitter for `tags`; `forced_open`: the prompt opened the reasoning.
    pub fn new(tags: ThinkingTags, forced_open: bool) -> Self {
        Self { tags, mode: if forced_open { Mode::Reasoning } else { Mode::Start }, held: String::new() }
    }

    /// Feeds a piece of output; returns what is now certain, in order.
    pub fn feed(&mut self, piece: &str) -> Vec<Part> {
        let mut out = Vec::new();
        self.held.push_str(piece);
        loop {
            match self.mode {
                Mode::Content => {
                    push(&mut out, Part::Content(std::mem::take(&mut self.held)));
                    return out;
                }
                Mode::Start => {
                    let rest = self.held.trim_start();
                    if let Some(after) = rest.strip_prefix(self.tags.open) {
                        self.held = after.to_string();
                        self.mode = Mode::Reasoning;
                    } else if self.tags.open.starts_with(rest) {
                        return out; // whitespace, or the opening tag in part: wait
                    } else {
                        self.mode = Mode::Content;
                    }
                }
                Mode::Gap => {
                    self.held = self.held.trim_start().to_string();
                    if self.held.is_empty() {
                        return out;
                    }
                    self.mode = Mode::Content;
                }
                Mode::Reasoning => match self.held.find(self.tags.close) {
                    Some(i) => {
                        let reasoning = self.held[..i].to_string();
                        self.held = self.held[i + self.tags.close.len()..].to_string();
                        push(&mut out, Part::Reasoning(reasoning));
                        self.mode = Mode::Gap;
                    }
                    None => {
                        // Keep back a suffix that could be the start of the closing tag.
                        let keep = partial_suffix(&self.held, self.tags.close);
                        let ready = self.held[..self.held.len() - keep].to_string();
                        self.held.drain(..self.held.len() - keep);
                        push(&mut out, Part::Reasoning(ready));
                        return out;
                    }
                },
            }
        }
    }

    /// Ends the output: whatever was held back.
    pub fn finish(&mut self) -> Vec<Part> {
        let held = std::mem::take(&mut self.held);
        let part = match self.mode {
            Mode::Reasoning => Part::Reasoning(held),
            Mode::Start | Mode::Gap | Mode::Content => Part::Content(held),
        };
        let mut out = Vec::new();
        push(&mut out, part);
        out
    }

    /// Splits a whole text: (reasoning, answer), the reasoning `None` when there is none.
    pub fn split(tags: ThinkingTags, forced_open: bool, text: &str) -> (Option<String>, String) {
        let mut s = ReasoningSplitter::new(tags, forced_open);
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
mod tests {
    use super::*;

    fn stream(tags: ThinkingTags, forced: bool, pieces: &[&str]) -> (Option<String>, String) {
        let mut s = ReasoningSplitter::new(tags, forced);
        let mut parts: Vec<Part> = pieces.iter().flat_map(|p| s.feed(p)).collect();
        parts.extend(s.finish());
        join(parts)
    }

    #[test]
    fn reasoning_at_the_start_is_split_from_the_answer() {
        let whole = "\n<think>I should add.</think>\n\n2 + 2 = 4";
        let want = (Some("I should add.".to_string()), "2 + 2 = 4".to_string());
        assert_eq!(ReasoningSplitter::split(DEEPSEEK, false, whole), want);
        // Every split into two pieces gives the same parts as the whole text.
        for i in (0..=whole.len()).filter(|&i| whole.is_char_boundary(i)) {
            assert_eq!(stream(DEEPSEEK, false, &[&whole[..i], &whole[i..]]), want, "split at {i}");
        }
        let chars: Vec<String> = whole.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(stream(DEEPSEEK, false, &refs), want);
    }

    #[test]
    fn no_tag_means_all_answer_and_a_forced_block_starts_in_reasoning() {
        assert_eq!(
            ReasoningSplitter::split(DEEPSEEK, false, "Plain <think> answer"),
            (None, "Plain <think> answer".into())
        );
        assert_eq!(ReasoningSplitter::split(DEEPSEEK, false, "  <thin"), (None, "  <thin".into()));
        assert_eq!(
            ReasoningSplitter::split(DEEPSEEK, true, "hmm</think>yes"),
            (Some("hmm".into()), "yes".into())
        );
        // A reasoning never closed stays reasoning.
        assert_eq!(
            ReasoningSplitter::split(DEEPSEEK, true, "still thinking </thi"),
            (Some("still thinking </thi".into()), String::new())
        );
        assert_eq!(
            ReasoningSplitter::split(COMMAND_R, false, "<|START_THINKING|>a<|END_THINKING|>b"),
            (Some("a".into()), "b".into())
        );
    }

    #[test]
    fn thinking_is_turned_off_as_llama_cpp_does() {
        assert_eq!(DEEPSEEK.disable("<|Assistant|><think>\n"), "<|Assistant|><think>\n</think>");
        assert_eq!(DEEPSEEK.disable("<|im_start|>assistant\n"), "<|im_start|>assistant\n");
        assert_eq!(
            COMMAND_R.disable("<|CHATBOT_TOKEN|>"),
            "<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>"
        );
        assert_eq!(ThinkingTags::of_template("{{ '<think>\\n' }}"), Some(DEEPSEEK));
        assert_eq!(ThinkingTags::of_template("{{ messages }}"), None);
    }
}
