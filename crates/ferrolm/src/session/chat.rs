//! [`ChatSession`]: a multi-turn conversation rendered with the model's chat template, reusing
//! the KV cache from turn to turn.

use super::stream::{StreamEvent, TokenStream};
use super::{Completion, GenerateParams, Session, SessionOptions};
use crate::chat::{ChatTemplate, Message, RenderOptions};
use crate::model::Model;
use crate::{Error, Result};

/// A conversation: messages, a chat template and a [`Session`] whose cache follows the
/// conversation, so each turn prefills only what was added since the last one.
///
/// ```no_run
/// use ferrolm::model::Model;
/// use ferrolm::session::{ChatSession, GenerateParams, SessionOptions};
///
/// # fn main() -> ferrolm::Result<()> {
/// let model = Model::load("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let mut chat = ChatSession::new(&model, SessionOptions::default())?;
/// chat.push(ferrolm::chat::Message::system("You are a terse assistant."));
/// let params = GenerateParams { max_tokens: Some(64), ..GenerateParams::default() };
/// println!("{}", chat.send("What is the capital of France?", &params)?.text);
/// println!("{}", chat.send("And of Italy?", &params)?.text); // prefills only the new turn
/// # Ok(())
/// # }
/// ```
pub struct ChatSession<'m> {
    session: Session<'m>,
    template: ChatTemplate,
    render: RenderOptions,
    messages: Vec<Message>,
    /// The last rendered prompt and how many tokens it became: the cache holds those tokens
    /// followed by the reply's tokens.
    rendered: String,
    rendered_tokens: usize,
}

impl std::fmt::Debug for ChatSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatSession").field("messages", &self.messages.len()).finish_non_exhaustive()
    }
}

impl<'m> ChatSession<'m> {
    /// A conversation using the model's own chat template.
    pub fn new(model: &'m Model, opts: SessionOptions) -> Result<Self> {
        let template = model.chat_template()?.ok_or_else(|| {
            Error::InvalidInput(
                "the model has no chat template (give one with ChatSession::with_template)".into(),
            )
        })?;
        Self::with_template(model, opts, template)
    }

    /// A conversation using `template`.
    pub fn with_template(model: &'m Model, opts: SessionOptions, template: ChatTemplate) -> Result<Self> {
        let tok = model.tokenizer();
        let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or_default().to_string();
        let render = RenderOptions {
            add_generation_prompt: true,
            bos_token: text(tok.bos()),
            eos_token: text(tok.eos()),
            ..RenderOptions::default()
        };
        Ok(Self {
            session: Session::new(model, opts)?,
            template,
            render,
            messages: Vec::new(),
            rendered: String::new(),
            rendered_tokens: 0,
        })
    }

    /// The messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Adds a message without generating (a system prompt, a tool result, an earlier turn).
    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Render options: tools and template keyword arguments such as `enable_thinking`.
    pub fn render_options_mut(&mut self) -> &mut RenderOptions {
        &mut self.render
    }

    /// The underlying session (its cached tokens, its cancel handle).
    pub fn session(&self) -> &Session<'m> {
        &self.session
    }

    /// Forgets the conversation and the cache. With `keep_system`, leading system messages stay.
    pub fn reset(&mut self, keep_system: bool) {
        if keep_system {
            let n = self.messages.iter().take_while(|m| m.role == "system").count();
            self.messages.truncate(n);
        } else {
            self.messages.clear();
        }
        self.session.reset();
        self.rendered.clear();
        self.rendered_tokens = 0;
    }

    /// The prompt the next reply would be generated from (all messages, with the generation prompt).
    pub fn prompt(&self) -> Result<String> {
        Ok(self.template.render(&self.messages, &self.render)?)
    }

    /// Adds a user message and returns the assistant's reply, which is added to the messages.
    pub fn send(&mut self, user: &str, params: &GenerateParams) -> Result<Completion> {
        super::stream::collect(&mut self.send_stream(user, params)?)
    }

    /// Adds a user message and streams the assistant's reply. The reply (as far as it got, if the
    /// stream is dropped or cancelled) is added to the messages when the stream ends.
    pub fn send_stream(&mut self, user: &str, params: &GenerateParams) -> Result<ChatStream<'_, 'm>> {
        self.messages.push(Message::user(user));
        self.reply_stream(params)
    }

    /// Streams an assistant reply to the messages as they are (the last one is usually the
    /// user's).
    pub fn reply_stream(&mut self, params: &GenerateParams) -> Result<ChatStream<'_, 'm>> {
        let full = self.prompt()?;
        let tokens = self.prompt_tokens(&full)?;
        self.rendered = full;
        self.rendered_tokens = tokens.len();
        let inner = self.session.stream_tokens(&tokens, params)?;
        Ok(ChatStream { inner, messages: &mut self.messages, reply: String::new(), finished: false })
    }

    /// Tokens of the rendered prompt `full`. When `full` extends the text the cache already
    /// holds (the last prompt and reply), only the new text is tokenized and appended, so the
    /// cached tokens are reused exactly as they are.
    fn prompt_tokens(&self, full: &str) -> Result<Vec<u32>> {
        let tok = self.session.model().tokenizer();
        let cached = self.session.tokens();
        if self.rendered_tokens > 0 && cached.len() >= self.rendered_tokens {
            let mut held = self.rendered.clone().into_bytes();
            for &t in &cached[self.rendered_tokens..] {
                held.extend_from_slice(&tok.token_to_piece(t));
            }
            if let Ok(held) = String::from_utf8(held)
                && let Some(rest) = full.strip_prefix(held.as_str())
            {
                let mut tokens = cached.to_vec();
                tokens.extend(tok.encode(rest, false, true)?);
                return Ok(tokens);
            }
        }
        encode_rendered(tok, full)
    }
}

/// The tokens of a rendered chat prompt: special tokens parsed, the BOS added, and only once
/// when the template writes the BOS text itself.
pub fn encode_rendered(tok: &crate::tokenizer::Tokenizer, rendered: &str) -> Result<Vec<u32>> {
    let mut tokens = tok.encode(rendered, true, true)?;
    if let Some(bos) = tok.bos()
        && tokens.len() >= 2
        && tokens[0] == bos
        && tokens[1] == bos
    {
        tokens.remove(0);
    }
    Ok(tokens)
}

/// A streamed chat reply: [`StreamEvent`]s like [`TokenStream`]'s; the reply joins the
/// conversation when the stream finishes or is dropped.
pub struct ChatStream<'s, 'm> {
    inner: TokenStream<'s, 'm>,
    messages: &'s mut Vec<Message>,
    reply: String,
    finished: bool,
}

impl std::fmt::Debug for ChatStream<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").field("reply", &self.reply).finish_non_exhaustive()
    }
}

impl ChatStream<'_, '_> {
    /// The reply so far.
    pub fn reply(&self) -> &str {
        &self.reply
    }

    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.messages.push(Message::assistant(&self.reply));
        }
    }
}

impl Iterator for ChatStream<'_, '_> {
    type Item = Result<StreamEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        let event = self.inner.next()?;
        match &event {
            Ok(StreamEvent::Token { text, .. }) => self.reply.push_str(text),
            Ok(StreamEvent::Finished { text, .. }) => {
                self.reply.push_str(text);
                self.finish();
            }
            Err(_) => self.finish(),
        }
        Some(event)
    }
}

impl Drop for ChatStream<'_, '_> {
    fn drop(&mut self) {
        self.finish();
    }
}
