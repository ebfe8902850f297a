//! Models: loading, facts, the tokenizer, chat templates and embeddings.

use std::sync::Arc;

use ferrolm::backend::BackendChoice;
use ferrolm::chat::{ChatTemplate, Message, RenderOptions};
use ferrolm::model::{Model, Pooling};
use rustler::{Binary, Encoder, Env, NifResult, OwnedBinary, ResourceArc, Term};

use crate::{atoms, err};

/// A loaded model; contexts and servers hold their own `Arc`, so it lives as long as any of them.
pub(crate) struct ModelRes {
    pub(crate) model: Arc<Model>,
    pub(crate) path: String,
}

#[rustler::resource_impl]
impl rustler::Resource for ModelRes {}

/// Loads a GGUF file or a Hugging Face folder onto `backend` (`cpu`, `opencl`, `auto`, `hybrid`).
#[rustler::nif(schedule = "DirtyIo")]
fn load_model(env: Env, path: String, backend: String, n_threads: Option<usize>) -> NifResult<Term> {
    if let Some(n) = n_threads {
        // The worker pool is process-wide; a second size request is ignored by the library.
        let _ = ferrolm::threads::init(Some(n));
    }
    let choice: BackendChoice = backend.parse().map_err(err)?;
    let mut model = Model::load(&path).map_err(|e| err(format!("cannot load {path}: {e}")))?;
    let placement = choice.resolve(32, None).map_err(|e| err(format!("backend {backend}: {e}")))?;
    model.set_placement(placement).map_err(|e| err(format!("backend {backend}: {e}")))?;
    Ok((atoms::ok(), ResourceArc::new(ModelRes { model: Arc::new(model), path })).encode(env))
}

/// Facts about a model as a map (reading the chat template compiles it: a dirty scheduler).
#[rustler::nif(schedule = "DirtyCpu")]
fn model_info(env: Env, m: ResourceArc<ModelRes>) -> NifResult<Term> {
    let model = &m.model;
    let c = model.config();
    let gguf = model.gguf();
    let n_params: u64 = gguf.tensors().iter().map(|t| t.n_elements()).sum();
    let size: u64 = gguf.tensors().iter().map(|t| gguf.tensor_range(t).len() as u64).sum();
    let name = gguf.opt_str("general.name").ok().flatten().unwrap_or("").to_string();
    let template = model.chat_template().ok().flatten().map(|t| t.source().to_string());
    let desc =
        format!("{} {} ({} layers, {} M params)", c.arch.name(), name, c.n_layer, n_params / 1_000_000);
    let pairs: Vec<(&str, Term)> = vec![
        ("desc", desc.encode(env)),
        ("name", name.encode(env)),
        ("architecture", c.arch.name().encode(env)),
        ("path", m.path.encode(env)),
        ("n_params", n_params.encode(env)),
        ("size", size.encode(env)),
        ("n_ctx_train", c.n_ctx_train.encode(env)),
        ("n_embd", c.n_embd.encode(env)),
        ("n_layer", c.n_layer.encode(env)),
        ("n_head", c.n_head.encode(env)),
        ("n_head_kv", c.n_head_kv.encode(env)),
        ("n_vocab", c.n_vocab.encode(env)),
        ("chat_template", template.encode(env)),
    ];
    let mut map = rustler::types::map::map_new(env);
    for (k, v) in pairs {
        map = map.map_put(rustler::types::atom::Atom::from_str(env, k)?.encode(env), v)?;
    }
    Ok(map)
}

/// Text to token ids.
#[rustler::nif(schedule = "DirtyCpu")]
fn tokenize(
    m: ResourceArc<ModelRes>,
    text: String,
    add_special: bool,
    parse_special: bool,
) -> NifResult<Vec<u32>> {
    m.model.tokenizer().encode(&text, add_special, parse_special).map_err(err)
}

/// Token ids to text.
#[rustler::nif(schedule = "DirtyCpu")]
fn detokenize(m: ResourceArc<ModelRes>, ids: Vec<u32>) -> NifResult<String> {
    check_ids(&m, &ids)?;
    Ok(m.model.tokenizer().decode(&ids))
}

fn check_ids(m: &ModelRes, ids: &[u32]) -> NifResult<()> {
    let n = m.model.tokenizer().n_vocab();
    match ids.iter().find(|&&t| t as usize >= n) {
        Some(t) => Err(err(format!("token id {t} is out of range (vocabulary of {n})"))),
        None => Ok(()),
    }
}

/// One token's bytes (may be part of a UTF-8 character).
#[rustler::nif]
fn token_to_piece<'a>(env: Env<'a>, m: ResourceArc<ModelRes>, id: u32) -> NifResult<Binary<'a>> {
    check_ids(&m, &[id])?;
    let piece = m.model.tokenizer().token_to_piece(id);
    let mut bin = OwnedBinary::new(piece.len()).ok_or_else(|| err("out of memory"))?;
    bin.as_mut_slice().copy_from_slice(&piece);
    Ok(bin.release(env))
}

/// `{vocab_size, bos, eos}` (`nil` where the model has none).
#[rustler::nif]
fn vocab_info(m: ResourceArc<ModelRes>) -> (usize, Option<u32>, Option<u32>) {
    let t = m.model.tokenizer();
    (t.n_vocab(), t.bos(), t.eos())
}

/// Whether a token ends generation.
#[rustler::nif]
fn is_eog(m: ResourceArc<ModelRes>, id: u32) -> bool {
    m.model.tokenizer().is_eog(id)
}

/// Renders `messages` with the model's chat template (or `template`), ready for the reply.
pub(crate) fn render_chat(
    model: &Model,
    messages: Term,
    template: Option<String>,
    kwargs: Term,
) -> Result<String, String> {
    let template = match template {
        Some(src) => ChatTemplate::new(&src).map_err(|e| e.to_string())?,
        None => model
            .chat_template()
            .map_err(|e| e.to_string())?
            .ok_or("the model has no chat template; pass chat_template:")?,
    };
    let messages: Vec<Message> = serde_json::from_value(crate::term_json::to_json(messages)?)
        .map_err(|e| format!("messages: {e} (each a map with role and content)"))?;
    let tok = model.tokenizer();
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or_default().to_string();
    let kwargs = match crate::term_json::to_json(kwargs)? {
        serde_json::Value::Object(o) => o,
        serde_json::Value::Null => serde_json::Map::new(),
        _ => return Err("chat_template_kwargs: must be a map".into()),
    };
    let opts = RenderOptions {
        add_generation_prompt: true,
        bos_token: text(tok.bos()),
        eos_token: text(tok.eos()),
        kwargs,
        ..RenderOptions::default()
    };
    template.render(&messages, &opts).map_err(|e| e.to_string())
}

/// A rendered chat prompt's tokens (the BOS once, even when the template writes it too).
pub(crate) fn chat_tokens(model: &Model, prompt: &str) -> Result<Vec<u32>, String> {
    ferrolm::session::encode_rendered(model.tokenizer(), prompt).map_err(|e| e.to_string())
}

/// The prompt text of a chat (for `Ferrolm.chat/3` and inspection).
#[rustler::nif(schedule = "DirtyCpu")]
fn apply_chat_template<'a>(
    m: ResourceArc<ModelRes>,
    messages: Term<'a>,
    template: Option<String>,
    kwargs: Term<'a>,
) -> NifResult<String> {
    render_chat(&m.model, messages, template, kwargs).map_err(err)
}

/// Embeddings of `texts`, pooled (`mean`, `cls`, `last`; `nil`: the model's own) and optionally
/// L2-normalised.
#[rustler::nif(schedule = "DirtyCpu")]
fn embed(
    m: ResourceArc<ModelRes>,
    texts: Vec<String>,
    pooling: Option<String>,
    normalize: bool,
) -> NifResult<Vec<Vec<f64>>> {
    let pooling = match pooling {
        Some(p) => Pooling::from_name(&p)
            .ok_or_else(|| err(format!("pooling_type: unknown pooling {p:?} (mean, cls, last)")))?,
        None => m.model.default_pooling().unwrap_or_default(),
    };
    let v = m.model.embed(&texts, pooling, normalize).map_err(err)?;
    Ok(v.into_iter().map(|row| row.into_iter().map(f64::from).collect()).collect())
}

/// Whether the model can rerank (a classifier head and a rerank template).
#[rustler::nif]
fn is_reranker(m: ResourceArc<ModelRes>) -> bool {
    m.model.is_reranker()
}

/// The relevance of each document to `query`, in the documents' order.
#[rustler::nif(schedule = "DirtyCpu")]
fn rerank(m: ResourceArc<ModelRes>, query: String, documents: Vec<String>) -> NifResult<Vec<f64>> {
    let scores = m.model.rerank(&query, &documents).map_err(err)?;
    Ok(scores.into_iter().map(|s| f64::from(s.score)).collect())
}

/// A JSON schema as a grammar in the Lark dialect that `grammar:` takes.
#[rustler::nif]
fn json_schema_grammar(schema: Term) -> NifResult<String> {
    let value = match schema.decode::<String>() {
        Ok(text) => serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?,
        Err(_) => crate::term_json::to_json(schema).map_err(err)?,
    };
    if !value.is_object() && !value.is_boolean() {
        return Err(err("a JSON schema is an object"));
    }
    Ok(format!("start: %json {value}"))
}
