//! [`PyModel`]: a loaded model (immutable, shared by sessions and engines), its tokenizer,
//! chat template and embeddings.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ferrolm::chat::{Message, RenderOptions};
use ferrolm::model::{Model, Pooling};
use ferrolm::tokenizer::TokenType;

use crate::errors::{Kind, new_err, to_py};

/// A model loaded from a GGUF file or a Hugging Face folder. Immutable: any number of
/// `Session`s and `Engine`s share one.
#[pyclass(name = "Model", module = "ferrolm._ferrolm", frozen)]
pub struct PyModel {
    pub(crate) model: Arc<Model>,
    path: String,
}

/// Text given as `str` or UTF-8 `bytes`.
#[derive(FromPyObject)]
pub(crate) enum Text {
    Str(String),
    Bytes(Vec<u8>),
}

impl Text {
    pub(crate) fn into_string(self) -> PyResult<String> {
        match self {
            Text::Str(s) => Ok(s),
            Text::Bytes(b) => String::from_utf8(b)
                .map_err(|e| new_err(Kind::Invalid, format!("the text is not UTF-8: {e}"))),
        }
    }
}

/// A prompt: text (tokenized with the model's BOS and special tokens parsed) or token ids.
#[derive(FromPyObject)]
pub(crate) enum Prompt {
    Tokens(Vec<u32>),
    Text(Text),
}

impl Prompt {
    /// The prompt's tokens.
    pub(crate) fn tokens(self, model: &Model) -> PyResult<Vec<u32>> {
        let tokens = match self {
            Prompt::Tokens(t) => t,
            Prompt::Text(t) => {
                model.tokenizer().encode(&t.into_string()?, true, true).map_err(|e| to_py(e.into()))?
            }
        };
        if tokens.is_empty() {
            return Err(new_err(Kind::Invalid, "the prompt is empty"));
        }
        Ok(tokens)
    }
}

fn parse_json(what: &str, s: &str) -> PyResult<serde_json::Value> {
    serde_json::from_str(s).map_err(|e| new_err(Kind::Invalid, format!("{what} is not valid JSON: {e}")))
}

impl PyModel {
    /// The library's model.
    pub(crate) fn inner(&self) -> &Arc<Model> {
        &self.model
    }
}

#[pymethods]
impl PyModel {
    /// Loads `path` (a GGUF file or a Hugging Face folder). `n_threads` sizes the worker pool
    /// (default: one thread per physical core). The GIL is released while loading.
    #[new]
    #[pyo3(signature = (path, *, n_threads=None))]
    fn new(py: Python<'_>, path: std::path::PathBuf, n_threads: Option<usize>) -> PyResult<Self> {
        if !path.exists() {
            return Err(new_err(Kind::NotFound, format!("model file not found: {}", path.display())));
        }
        let model = py
            .allow_threads(|| {
                ferrolm::threads::init(n_threads)?;
                Model::load(&path)
            })
            .map_err(to_py)?;
        Ok(Self { model: Arc::new(model), path: path.to_string_lossy().into_owned() })
    }

    /// The file or folder the model came from.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The architecture name (`llama`, `gemma3`, …).
    #[getter]
    fn arch(&self) -> String {
        format!("{:?}", self.model.config().arch).to_lowercase()
    }

    /// Vocabulary size.
    #[getter]
    fn n_vocab(&self) -> usize {
        self.model.config().n_vocab
    }

    /// Embedding width.
    #[getter]
    fn n_embd(&self) -> usize {
        self.model.config().n_embd
    }

    /// Context size the model was trained with.
    #[getter]
    fn n_ctx_train(&self) -> usize {
        self.model.config().n_ctx_train
    }

    /// The BOS token id (`None` when the model has none).
    #[getter]
    fn bos(&self) -> Option<u32> {
        self.model.tokenizer().bos()
    }

    /// The EOS token id (`None` when the model has none).
    #[getter]
    fn eos(&self) -> Option<u32> {
        self.model.tokenizer().eos()
    }

    /// Whether `token` ends a generation (EOS, end of turn, …).
    fn is_eog(&self, token: u32) -> bool {
        self.model.tokenizer().is_eog(token)
    }

    /// The vocabulary text of `token` (`None` outside the vocabulary).
    fn token_text(&self, token: u32) -> Option<String> {
        self.model.tokenizer().token_text(token).map(str::to_string)
    }

    /// Token ids of `text`. `add_bos`: add the BOS (and EOS) the model asks for; `special`:
    /// control tokens written in the text (such as `<|im_start|>`) become those tokens.
    #[pyo3(signature = (text, add_bos=true, special=false))]
    fn tokenize(&self, py: Python<'_>, text: Text, add_bos: bool, special: bool) -> PyResult<Vec<u32>> {
        let text = text.into_string()?;
        py.allow_threads(|| self.model.tokenizer().encode(&text, add_bos, special))
            .map_err(|e| to_py(e.into()))
    }

    /// The bytes of `tokens`. Control tokens (BOS, end of turn) are rendered only with
    /// `special=True`. Ids outside the vocabulary raise `ValueError`.
    #[pyo3(signature = (tokens, special=false))]
    fn detokenize<'py>(
        &self,
        py: Python<'py>,
        tokens: Vec<u32>,
        special: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let tok = self.model.tokenizer();
        let mut bytes = Vec::new();
        for &t in &tokens {
            if t as usize >= tok.n_vocab() {
                return Err(new_err(
                    Kind::Invalid,
                    format!("token id {t} is outside the vocabulary of {}", tok.n_vocab()),
                ));
            }
            if special || tok.token_type(t) != Some(TokenType::Control) {
                bytes.extend(tok.token_to_piece(t));
            }
        }
        Ok(PyBytes::new(py, &bytes))
    }

    /// The model's chat template source (`None` when it has none).
    fn chat_template(&self) -> Option<String> {
        self.model.tokenizer().chat_template().map(str::to_string)
    }

    /// Renders `messages` (a JSON list of OpenAI-style messages) with the model's chat template
    /// or `template`; `tools` (a JSON list) and `kwargs` (a JSON object of template variables
    /// such as `enable_thinking`) are passed to the template.
    #[pyo3(signature = (messages, *, add_generation_prompt=true, tools=None, template=None, kwargs=None))]
    fn apply_chat_template(
        &self,
        messages: &str,
        add_generation_prompt: bool,
        tools: Option<&str>,
        template: Option<&str>,
        kwargs: Option<&str>,
    ) -> PyResult<String> {
        let messages: Vec<Message> = serde_json::from_str(messages)
            .map_err(|e| new_err(Kind::Invalid, format!("messages are not a list of chat messages: {e}")))?;
        let template = match template {
            Some(src) => ferrolm::chat::ChatTemplate::new(src).map_err(|e| to_py(e.into()))?,
            None => self.model.chat_template().map_err(to_py)?.ok_or_else(|| {
                new_err(Kind::Invalid, "the model has no chat template; give one (chat_format or template=)")
            })?,
        };
        let tok = self.model.tokenizer();
        let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or_default().to_string();
        let tools = match tools {
            Some(t) => match parse_json("tools", t)? {
                serde_json::Value::Array(list) => Some(list),
                _ => return Err(new_err(Kind::Invalid, "tools must be a list")),
            },
            None => None,
        };
        let kwargs = match kwargs {
            Some(k) => match parse_json("kwargs", k)? {
                serde_json::Value::Object(map) => map,
                _ => return Err(new_err(Kind::Invalid, "template kwargs must be an object")),
            },
            None => serde_json::Map::new(),
        };
        let opts = RenderOptions {
            add_generation_prompt,
            bos_token: text(tok.bos()),
            eos_token: text(tok.eos()),
            tools,
            kwargs,
            ..RenderOptions::default()
        };
        template.render(&messages, &opts).map_err(|e| to_py(e.into()))
    }

    /// Tokens of a rendered chat prompt: parsed with special tokens, the model's BOS added once
    /// (templates that write the BOS text themselves do not get two).
    fn tokenize_chat(&self, prompt: &str) -> PyResult<Vec<u32>> {
        ferrolm::session::encode_rendered(self.model.tokenizer(), prompt).map_err(to_py)
    }

    /// One vector per text: final hidden states pooled (`mean`, `cls` or `last`; default the
    /// model's own, else mean) and L2-normalised when `normalize`. The GIL is released.
    #[pyo3(signature = (texts, *, pooling=None, normalize=true))]
    fn embed(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        pooling: Option<&str>,
        normalize: bool,
    ) -> PyResult<Vec<Vec<f32>>> {
        let pooling = match pooling {
            Some(p) => parse_pooling(p)?,
            None => self.model.default_pooling().unwrap_or_default(),
        };
        py.allow_threads(|| self.model.embed(&texts, pooling, normalize)).map_err(to_py)
    }

    /// Whether the model can rerank (a classifier head and a rerank template, as llama.cpp's
    /// converter writes Qwen3-Reranker).
    #[getter]
    fn is_reranker(&self) -> bool {
        self.model.is_reranker()
    }

    /// The relevance of each document to `query` (higher is more relevant; for Qwen3-Reranker
    /// the probability of "yes"), in the documents' order. The GIL is released.
    fn rerank(&self, py: Python<'_>, query: &str, documents: Vec<String>) -> PyResult<Vec<f32>> {
        let scores = py.allow_threads(|| self.model.rerank(query, &documents)).map_err(to_py)?;
        Ok(scores.iter().map(|s| s.score).collect())
    }

    fn __repr__(&self) -> String {
        let c = self.model.config();
        format!(
            "Model(path={:?}, arch={}, n_vocab={}, n_embd={})",
            self.path,
            self.arch(),
            c.n_vocab,
            c.n_embd
        )
    }
}

/// A pooling name from Python (`mean`, `cls` or `last`), or `InvalidInputError`.
pub(crate) fn parse_pooling(name: &str) -> PyResult<Pooling> {
    Pooling::from_name(name)
        .ok_or_else(|| new_err(Kind::Invalid, format!("unknown pooling '{name}' (mean, cls, last)")))
}
