//! The router: routes, API-key check, CORS, body limit, and JSON errors for everything the HTTP
//! layer itself refuses (404, 405, 413). Also the small endpoints: models, tokenize,
//! detokenize, embeddings, health, metrics, slots and the web page.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tower_http::limit::RequestBodyLimitLayer;

use super::cors::{self, CorsPolicy};
use super::error::ApiError;
use super::json::{fields, parse_object, token_id, type_name};
use super::params::{CommonFields, Vocab};
use super::prompt::prompt_list;
use super::server_tools::{self, ServerTools};
use super::stream_session;
use super::{
    AppState, ServerConfig, ServerError, anthropic, chat, completions, json_response, metrics, native,
    responses, sleep,
};
use ferrolm::model::Pooling;

/// The web page served at `/`.
const INDEX_HTML: &str = include_str!("../../static/index.html");

/// Most texts in one embeddings request.
const MAX_EMBED_INPUTS: usize = 2048;

/// Builds the router: [`routes`] inside [`outer_layers`].
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn router(state: AppState) -> Result<Router, ServerError> {
    router_with_tools(state, None)
}

/// [`router`] with the server tools (`/tools`) when started.
pub(crate) fn router_with_tools(
    state: AppState,
    tools: Option<Arc<ServerTools>>,
) -> Result<Router, ServerError> {
    let cfg = state.cfg.clone();
    outer_layers(routes(state), &cfg, tools)
}

/// Every route of one model's server, without the layers. With a sleeper, the task routes
/// pass through its gate (which wakes the model); the read-only ones (health, props, models,
/// metrics, slots, load, the page) do not, and answer while the model sleeps.
pub(crate) fn routes(state: AppState) -> Router {
    let tasks = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/v1/completions", post(text_completions))
        .route("/completion", post(native_completion))
        .route("/completions", post(native_completion))
        .route("/infill", post(infill))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/rerank", post(rerank))
        .route("/rerank", post(rerank))
        .route("/v1/reranking", post(rerank))
        .route("/reranking", post(rerank))
        .route("/embeddings", post(embeddings_native))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/v1/responses", post(responses_create))
        .route("/responses", post(responses_create))
        .route("/v1/responses/input_tokens", post(responses_input_tokens))
        .route("/responses/input_tokens", post(responses_input_tokens))
        .route("/v1/messages", post(anthropic_messages))
        .route("/v1/messages/count_tokens", post(anthropic_count_tokens))
        .route("/apply-template", post(apply_template))
        .route("/predict", post(predict))
        .route("/slots/{id}", post(slot_action));
    let tasks = match &state.sleep {
        Some(s) => tasks.route_layer(middleware::from_fn_with_state(s.clone(), sleep::gate)),
        None => tasks,
    };
    let tasks = tasks.route_layer(middleware::from_fn(stream_session::conversation));
    let read_only = Router::new()
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route("/props", get(props))
        .route("/health", get(health))
        .route("/metrics", get(prometheus))
        .route("/get_load", get(load))
        .route("/slots", get(slots))
        .route("/", get(page));
    tasks.merge(read_only).merge(stream_routes()).fallback(not_found).with_state(state)
}

/// The resumable-stream routes ([`stream_session`]); the id travels in the query string since
/// it may name a model with slashes.
pub(crate) fn stream_routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/v1/stream", get(stream_session::get_stream).delete(stream_session::delete_stream))
        .route("/v1/streams/lookup", post(stream_session::lookup))
}

async fn page(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
    index(state.cfg.web_ui, uri).await
}

/// The layers around a server's routes: API key, body limit, JSON errors for what the HTTP
/// layer refuses, head limits and CORS; inside them also `/tools` and `/cors-proxy` (403 when
/// off).
pub(crate) fn outer_layers(
    app: Router,
    cfg: &ServerConfig,
    tools: Option<Arc<ServerTools>>,
) -> Result<Router, ServerError> {
    let cors = CorsPolicy::from_config(cfg)?;
    let app = app.merge(server_tools::routes(tools, cfg.server_tools.cors_proxy));
    let key: Option<Arc<str>> = cfg.api_key.as_deref().map(Arc::from);
    let mut app = app
        .layer(middleware::from_fn_with_state(key, auth))
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(cfg.max_body_bytes))
        // Outside the body limit, so that its 413 (a too-large Content-Length is refused before
        // any handler runs) is turned into an OpenAI-shaped error too.
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(head_limits));
    if let Some(policy) = cors {
        app = app.layer(middleware::from_fn_with_state(policy, cors::cors));
    }
    Ok(app)
}

/// Compares two byte strings in time independent of where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization: Bearer TOKEN` value; the scheme is case-insensitive
/// (RFC 7235), any run of spaces may follow it.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// With an API key set, every route but `/health` and `/` needs `Authorization: Bearer KEY`
/// or `X-Api-Key: KEY` (Anthropic's header, which llama-server accepts too).
async fn auth(State(key): State<Option<Arc<str>>>, req: Request, next: Next) -> Response {
    let Some(key) = key else { return next.run(req).await };
    if matches!(req.uri().path(), "/health" | "/") || req.method() == Method::OPTIONS {
        return next.run(req).await;
    }
    let headers = req.headers();
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_token);
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim);
    let ok = bearer.or(x_api_key).is_some_and(|g| same_secret(g.as_bytes(), key.as_bytes()));
    if ok {
        return next.run(req).await;
    }
    let mut resp = ApiError::unauthorized().into_response();
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// Error responses the HTTP layer makes itself (405, 413, a body that cannot be read) get
/// OpenAI's JSON error shape; their other headers (`Allow`) stay.
async fn json_errors(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).into_owned());
    // A body cut by the connection layer's body timeout (axum's rejection says 400).
    let status = match &text {
        Ok(t) if status == StatusCode::BAD_REQUEST && t.contains(crate::conn::BODY_TIMEOUT) => {
            StatusCode::REQUEST_TIMEOUT
        }
        _ => status,
    };
    let message = match (status, text) {
        (StatusCode::METHOD_NOT_ALLOWED, _) => format!("method {method} is not allowed for {path}"),
        (StatusCode::PAYLOAD_TOO_LARGE, _) => {
            "the request body is too large (see --max-body-bytes)".to_string()
        }
        (_, Ok(t)) if !t.trim().is_empty() => t.trim().to_string(),
        _ => status.canonical_reason().unwrap_or("error").to_string(),
    };
    let mut out = ApiError::with_status(status, message).into_response();
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// Longest request target (path and query) in bytes; longer gets 414.
pub(crate) const MAX_URI_BYTES: usize = 8 << 10;
/// Most header bytes (names and values) in a request; more gets 431.
pub(crate) const MAX_HEADER_BYTES: usize = 32 << 10;
/// Most header lines in a request; more gets 431. The connection layer lets hyper parse up to
/// twice as many, so that these limits (not hyper's, whose answers have no body) apply.
pub(crate) const MAX_HEADERS: usize = 100;

/// 414 and 431 with a JSON body, under hyper's own limits (which answer with an empty body).
async fn head_limits(req: Request, next: Next) -> Response {
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return ApiError::with_status(
            StatusCode::URI_TOO_LONG,
            format!("the request target has {uri_len} bytes, more than {MAX_URI_BYTES}"),
        )
        .into_response();
    }
    let headers = req.headers();
    let bytes: usize = headers.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        return ApiError::with_status(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!(
                "the request has {} headers of {bytes} bytes (at most {MAX_HEADERS} and {MAX_HEADER_BYTES})",
                headers.len()
            ),
        )
        .into_response();
    }
    next.run(req).await
}

pub(crate) async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::route_not_found(method.as_str(), uri.path())
}

async fn chat_completions(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    chat::handle(state, body).await
}

async fn text_completions(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    completions::handle(state, body).await
}

async fn native_completion(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    native::handle(state, body).await
}

async fn infill(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    super::infill::handle(state, body).await
}

pub(crate) async fn health() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// `GET /`: the chat page, unless `--no-ui`.
pub(crate) async fn index(web_ui: bool, uri: axum::http::Uri) -> Response {
    if !web_ui {
        return ApiError::route_not_found("GET", uri.path()).into_response();
    }
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML).into_response()
}

/// `GET /metrics`, with llama-server's `Process-Start-Time-Unix` header. While the model sleeps,
/// the metrics taken on entering sleep.
async fn prometheus(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.cfg.metrics {
        return Err(ApiError::not_supported(
            "the metrics endpoint is off (the server was started with --no-metrics)",
        ));
    }
    let tasks = state.sleep.as_ref().map_or(0, |s| s.tasks());
    let frozen = state.sleep.as_ref().and_then(|s| s.frozen_metrics());
    let text = match frozen {
        Some((m, rss)) => state.scrapes.asleep(metrics::Reading { m, rss }, tasks),
        None => {
            let rss = ferrolm::sysmem::resident().map(|(rss, _)| rss);
            state.scrapes.awake(metrics::Reading { m: state.backend.metrics(), rss }, tasks)
        }
    };
    let mut resp = ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response();
    resp.headers_mut().insert("process-start-time-unix", HeaderValue::from(state.created));
    Ok(resp)
}

/// `GET /get_load`: the load that sglang's router polls for its `power_of_two` policy, in the
/// shape SGLang's server gives (one entry per data-parallel rank; ferrolm has one): requests
/// running and waiting, and `num_tokens`, the tokens held in the slots' KV caches, which the
/// router sums as the worker's load.
async fn load(State(state): State<AppState>) -> Response {
    let m = state.backend.metrics();
    let rank = json!({
        "dp_rank": 0,
        "num_reqs": m.slots_busy,
        "num_waiting_reqs": m.queue_depth,
        "num_tokens": m.kv_tokens,
    });
    json_response(StatusCode::OK, &json!([rank]))
}

/// `GET /slots`: each slot's row, with llama-server's `is_processing` and `n_ctx` (501 with
/// `--no-slots`).
async fn slots(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.cfg.slots {
        return Err(ApiError::not_supported("This server does not support the slots endpoint (--no-slots)."));
    }
    let n_ctx = state.backend.n_ctx();
    let rows: Vec<Value> = state
        .backend
        .slots()
        .into_iter()
        .map(|s| {
            let mut row = serde_json::to_value(&s).unwrap_or(Value::Null);
            row["is_processing"] = json!(s.state != ferrolm::engine::SlotState::Idle);
            row["n_ctx"] = json!(n_ctx);
            row
        })
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Array(rows)))
}

/// The query of `POST /slots/{id}`.
#[derive(Deserialize)]
struct SlotQuery {
    action: Option<String>,
}

async fn slot_action(
    State(state): State<AppState>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<SlotQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    super::slots::handle(state, &id, q.action.as_deref(), body).await
}

/// One `/v1/models` entry.
fn model_entry(state: &AppState, id: &str) -> Value {
    json!({
        "id": id,
        "object": "model",
        "created": state.created,
        "owned_by": "ferrolm",
        "meta": {
            "n_ctx": state.backend.n_ctx(),
            "n_vocab": state.backend.n_vocab(),
            "n_slots": state.backend.metrics().slots_total,
        },
    })
}

/// The one served model, under its id, with its `--alias` names in `aliases` and its `--tags`
/// in `tags`, as llama-server lists them.
async fn models(State(state): State<AppState>) -> Response {
    let mut entry = model_entry(&state, &state.cfg.model_id);
    entry["aliases"] = json!(state.cfg.aliases);
    entry["tags"] = json!(state.cfg.tags);
    json_response(StatusCode::OK, &json!({"object": "list", "data": [entry]}))
}

/// `GET /props` (llama-server's): the server's default generation settings, slots, model and
/// chat template.
async fn props(State(state): State<AppState>) -> Result<Response, ApiError> {
    let b = state.backend.as_ref();
    let cfg = &state.cfg;
    let mut spec =
        CommonFields::default().spec(&cfg.sampler, Vocab::of(b), cfg.request_timeout(), cfg.draft)?;
    spec.params.max_tokens = cfg.n_predict;
    let (bos, eos) = b.bos_eos_text();
    let body = json!({
        "default_generation_settings": {"n_ctx": b.n_ctx(), "params": native::generation_settings(&spec, None)},
        "total_slots": b.metrics().slots_total,
        "model_alias": cfg.model_id,
        "model_path": cfg.model_path,
        "chat_template": b.chat_template().ok().map(|t| t.source().to_string()),
        "bos_token": bos,
        "eos_token": eos,
        "build_info": super::response::fingerprint(),
        "modalities": {"vision": false, "audio": false},
        "is_sleeping": b.is_sleeping(),
    });
    Ok(json_response(StatusCode::OK, &body))
}

async fn responses_create(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    responses::handle(state, body).await
}

async fn anthropic_messages(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    anthropic::messages(state, body).await
}

async fn anthropic_count_tokens(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    Ok(json_response(StatusCode::OK, &anthropic::count_tokens(&state, &v)?))
}

async fn predict(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    super::predict::handle(state, body).await
}

async fn responses_input_tokens(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    Ok(json_response(StatusCode::OK, &responses::input_tokens(&state, &v)?))
}

async fn chat_input_tokens(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    Ok(json_response(StatusCode::OK, &chat::input_tokens(&state, &v)?))
}

async fn apply_template(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    Ok(json_response(StatusCode::OK, &chat::apply_template(&state, &v)?))
}

async fn model(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    if state.cfg.model_names().contains(&id) {
        Ok(json_response(StatusCode::OK, &model_entry(&state, &id)))
    } else {
        Err(ApiError::model_not_found(&id))
    }
}

#[derive(Deserialize)]
struct TokenizeFields {
    content: String,
    add_special: Option<bool>,
    parse_special: Option<bool>,
    with_pieces: Option<bool>,
}

/// `POST /tokenize`: `{"content", "add_special", "parse_special", "with_pieces"}` →
/// `{"tokens": [id…]}` or, with pieces, `{"tokens": [{"id", "piece"}…]}` (a piece that is not
/// valid UTF-8 is given as its bytes).
async fn tokenize(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let f: TokenizeFields = fields(&parse_object(&body)?)?;
    let b = state.backend.as_ref();
    let (add_special, parse_special) = (f.add_special.unwrap_or(false), f.parse_special.unwrap_or(true));
    let ids = b.tokenize(&f.content, add_special, parse_special).map_err(ApiError::invalid)?;
    let tokens: Vec<Value> = if f.with_pieces.unwrap_or(false) {
        ids.iter()
            .map(|&id| {
                let bytes = b.piece(id);
                let piece = match String::from_utf8(bytes) {
                    Ok(s) => Value::String(s),
                    Err(e) => json!(e.into_bytes()),
                };
                json!({"id": id, "piece": piece})
            })
            .collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    };
    Ok(json_response(StatusCode::OK, &json!({"tokens": tokens})))
}

/// `POST /detokenize`: `{"tokens": [id…]}` → `{"content": text}`.
async fn detokenize(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let b = state.backend.as_ref();
    let ids = match v.get("tokens") {
        Some(Value::Array(items)) => {
            items.iter().map(|t| token_id("tokens", t, b.n_vocab())).collect::<Result<Vec<u32>, _>>()?
        }
        _ => return Err(ApiError::invalid_param("tokens", "`tokens` must be an array of token ids")),
    };
    let bytes: Vec<u8> = ids.iter().flat_map(|&id| b.piece(id)).collect();
    Ok(json_response(StatusCode::OK, &json!({"content": String::from_utf8_lossy(&bytes)})))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct EmbeddingFields {
    input: Option<Value>,
    model: Option<String>,
    encoding_format: Option<String>,
    dimensions: Option<i64>,
    normalize: Option<bool>,
}

/// Standard base64 of the vector's little-endian `f32` bytes.
pub(crate) fn base64_f32(v: &[f32]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ABC[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The inputs of an embeddings request, tokenized and checked against the context; their
/// token count.
fn embedding_inputs(state: &AppState, input: Option<&Value>) -> Result<(Vec<Vec<u32>>, usize), ApiError> {
    let b = state.backend.as_ref();
    let inputs = prompt_list(b, "input", input, MAX_EMBED_INPUTS)?;
    let mut n_tokens = 0;
    for (i, p) in inputs.iter().enumerate() {
        let n = p.tokens.len();
        if n == 0 {
            return Err(ApiError::invalid_param(format!("input[{i}]"), "the input has no tokens"));
        }
        // Each input runs as one sequence: it must fit a slot's context like a prompt does.
        if n > b.n_ctx() {
            return Err(ApiError::context_length(format!(
                "input[{i}] is too large: {n} tokens, more than the context length of {}",
                b.n_ctx()
            )));
        }
        n_tokens += n;
    }
    Ok((inputs.into_iter().map(|p| p.tokens).collect(), n_tokens))
}

/// `POST /v1/embeddings`: OpenAI's shape, one pooled vector per input.
async fn embeddings(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let f: EmbeddingFields = fields(&v)?;
    let base64 = match f.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "encoding_format",
                format!("encoding_format must be float or base64, not {other:?}"),
            ));
        }
    };
    if f.dimensions.is_some() {
        return Err(ApiError::invalid_param("dimensions", "`dimensions` is not supported"));
    }
    if state.cfg.embeddings_pooling == Some(Pooling::None) {
        return Err(ApiError::invalid(
            "the server embeds without pooling (--embeddings-pooling none): one vector per token, \
             which OpenAI's shape cannot hold; use /embeddings",
        ));
    }
    let (inputs, n_tokens) = embedding_inputs(&state, f.input.as_ref())?;
    let b = state.backend.as_ref();
    let vectors = b.embed(inputs, state.cfg.embeddings_pooling, f.normalize.unwrap_or(true)).await?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 { json!(base64_f32(v)) } else { json!(v) };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": state.cfg.answer_model(f.model),
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// `POST /embeddings` (llama-server's own): `[{index, embedding}]`, each embedding a list of
/// vectors: the pooled one, or one per token with `--embeddings-pooling none` (not
/// normalised).
async fn embeddings_native(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let f: EmbeddingFields = fields(&v)?;
    // llama-server's `content` is the same as `input`.
    let input = f.input.as_ref().or_else(|| v.get("content"));
    let (inputs, _) = embedding_inputs(&state, input)?;
    let lens: Vec<usize> = inputs.iter().map(Vec::len).collect();
    let pooling = state.cfg.embeddings_pooling;
    let vectors = state.backend.embed(inputs, pooling, f.normalize.unwrap_or(true)).await?;
    let body: Vec<Value> = vectors
        .iter()
        .zip(lens)
        .enumerate()
        .map(|(i, (v, n))| {
            // `[n_tokens, n_embd]` without pooling, else one vector.
            let rows = if pooling == Some(Pooling::None) { n } else { 1 };
            let rows: Vec<&[f32]> = v.chunks((v.len() / rows).max(1)).collect();
            json!({"index": i, "embedding": rows})
        })
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Array(body)))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RerankFields {
    model: Option<String>,
    query: Option<Value>,
    documents: Option<Value>,
    /// Hugging Face TEI's name for `documents` (then the answer is TEI's bare list).
    texts: Option<Value>,
    top_n: Option<i64>,
    /// TEI: put each text in its result.
    return_text: Option<bool>,
    /// Jina/Cohere: put each document in its result.
    return_documents: Option<bool>,
}

/// `POST /v1/rerank` (also `/rerank`, `/v1/reranking`, `/reranking`): llama-server's shape —
/// `{query, documents, top_n}` in, `{model, object, usage, results: [{index, relevance_score}]}`
/// out, best first — or Hugging Face TEI's (`texts` in, `[{index, score}]` out).
async fn rerank(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let f: RerankFields = fields(&v)?;
    let b = state.backend.as_ref();
    if !b.is_reranker() {
        return Err(ApiError::not_supported(
            "the served model cannot rerank: it needs a classifier head and a rerank template \
             (a Qwen3-Reranker GGUF converted by llama.cpp)",
        ));
    }
    let query = match f.query {
        Some(Value::String(q)) => q,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "query",
                format!("`query` must be a string, not {}", type_name(&other)),
            ));
        }
        None => return Err(ApiError::invalid_param("query", "`query` is required")),
    };
    let tei = f.documents.is_none() && f.texts.is_some();
    let (param, docs) = match (f.documents, f.texts) {
        (Some(d), _) => ("documents", d),
        (None, Some(t)) => ("texts", t),
        (None, None) => return Err(ApiError::invalid_param("documents", "`documents` is required")),
    };
    let documents = rerank_documents(param, &docs)?;
    // Each pair runs as one sequence: it must fit a slot's context like a prompt does.
    let n_query = b.tokenize(&query, false, false).map_err(ApiError::invalid)?.len();
    for (i, d) in documents.iter().enumerate() {
        let n = n_query + b.tokenize(d, false, false).map_err(ApiError::invalid)?.len();
        if n > b.n_ctx() {
            return Err(ApiError::context_length(format!(
                "{param}[{i}] with the query has {n} tokens, more than the context length of {}",
                b.n_ctx()
            )));
        }
    }
    let top_n = match f.top_n {
        None => documents.len(),
        Some(n) if n >= 1 => (n as usize).min(documents.len()),
        Some(n) => {
            return Err(ApiError::invalid_param("top_n", format!("`top_n` must be at least 1, not {n}")));
        }
    };
    let scores = b.rerank(query, documents.clone()).await?;
    let mut order = ferrolm::model::ranking(&scores);
    order.truncate(top_n);
    let label = if tei { "score" } else { "relevance_score" };
    let with_text = if tei { f.return_text.unwrap_or(false) } else { f.return_documents.unwrap_or(false) };
    let results: Vec<Value> = order
        .iter()
        .map(|&i| {
            let mut r = json!({"index": i, label: scores[i].score});
            if with_text {
                if tei {
                    r["text"] = json!(documents[i]);
                } else {
                    r["document"] = json!({"text": documents[i]});
                }
            }
            r
        })
        .collect();
    if tei {
        return Ok(json_response(StatusCode::OK, &Value::Array(results)));
    }
    let n_tokens: usize = scores.iter().map(|s| s.n_tokens).sum();
    let body = json!({
        "model": state.cfg.answer_model(f.model),
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": results,
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// The documents to rerank: a non-empty array of strings (or of `{"text": …}` objects, as
/// Cohere and Jina clients send them).
fn rerank_documents(param: &str, v: &Value) -> Result<Vec<String>, ApiError> {
    let Value::Array(items) = v else {
        return Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be an array of strings, not {}", type_name(v)),
        ));
    };
    if items.is_empty() {
        return Err(ApiError::invalid_param(param, format!("`{param}` must not be empty")));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            Value::String(s) => Ok(s.clone()),
            Value::Object(o) => match o.get("text") {
                Some(Value::String(s)) => Ok(s.clone()),
                _ => Err(ApiError::invalid_param(
                    format!("{param}[{i}]"),
                    "a document object needs a string `text`",
                )),
            },
            other => Err(ApiError::invalid_param(
                format!("{param}[{i}]"),
                format!("a document must be a string, not {}", type_name(other)),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_values() {
        // 1.0f32 = 00 00 80 3F; "AACAPw==".
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        // 1.0, 2.0 = 00 00 80 3F 00 00 00 40.
        assert_eq!(base64_f32(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(base64_f32(&[]), "");
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }
}
