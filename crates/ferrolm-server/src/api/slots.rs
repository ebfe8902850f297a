//! llama-server's `POST /slots/{id}?action=save|restore|erase` (with `--slot-save-path`): a
//! slot's cached conversation saved to a file in that folder and restored from it (the engine
//! serializes the cache, this layer only names and moves the files), or forgotten.

use std::path::PathBuf;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use ferrolm::engine::{EngineError, SlotAction, SlotOutcome};
use serde_json::{Value, json};

use super::error::ApiError;
use super::json::parse_object;
use super::{AppState, json_response};

/// Whether `name` is a plain file name: no folder part, no `..`, no control characters, not
/// empty and not over 255 bytes (what llama-server's filename check allows, in short).
pub(crate) fn valid_filename(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && name.trim() == name
        && !name
            .chars()
            .any(|c| c.is_control() || matches!(c, '/' | '\\' | ':' | '*' | '?' | '"' | '<' | '>' | '|'))
}

/// The handler: `id` from the path, `action` from the query, `filename` from the body.
pub(crate) async fn handle(
    state: AppState,
    id: &str,
    action: Option<&str>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(dir) = state.cfg.slot_save_path.clone() else {
        return Err(ApiError::not_supported(
            "This server does not support slots action. Start it with `--slot-save-path`",
        ));
    };
    let slot: usize = id.parse().map_err(|_| ApiError::invalid("Invalid slot ID"))?;
    match action {
        Some("save") => save(&state, slot, file(&dir, &body)?).await,
        Some("restore") => restore(&state, slot, file(&dir, &body)?).await,
        Some("erase") => {
            let outcome = run(&state, slot, SlotAction::Erase).await?;
            let SlotOutcome::Erased { n_tokens } = outcome else { return Err(unexpected()) };
            Ok(json_response(StatusCode::OK, &json!({"id_slot": slot, "n_erased": n_tokens})))
        }
        _ => Err(ApiError::invalid("Invalid action")),
    }
}

/// The body's `filename` and its path in `dir`.
fn file(dir: &std::path::Path, body: &Bytes) -> Result<(String, PathBuf), ApiError> {
    let v = parse_object(body)?;
    let Some(name) = v.get("filename").and_then(Value::as_str) else {
        return Err(ApiError::invalid_param("filename", "`filename` (a string) is required"));
    };
    if !valid_filename(name) {
        return Err(ApiError::invalid_param("filename", "Invalid filename"));
    }
    Ok((name.to_string(), dir.join(name)))
}

async fn save(state: &AppState, slot: usize, (name, path): (String, PathBuf)) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let SlotOutcome::Saved { n_tokens, bytes } = run(state, slot, SlotAction::Save).await? else {
        return Err(unexpected());
    };
    let n_written = bytes.len();
    tokio::task::spawn_blocking(move || std::fs::write(&path, &bytes))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("Unable to save slot: cannot write {name}: {e}")))?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(json_response(
        StatusCode::OK,
        &json!({"id_slot": slot, "filename": name, "n_saved": n_tokens, "n_written": n_written,
            "timings": {"save_ms": ms}}),
    ))
}

async fn restore(
    state: &AppState,
    slot: usize,
    (name, path): (String, PathBuf),
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let bytes = tokio::task::spawn_blocking(move || std::fs::read(&path))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::invalid(format!("Unable to restore slot: cannot read {name}: {e}")))?;
    let n_read = bytes.len();
    let outcome = run(state, slot, SlotAction::Restore(bytes))
        .await
        .map_err(|e| ApiError { message: format!("Unable to restore slot: {}", e.message), ..e })?;
    let SlotOutcome::Restored { n_tokens } = outcome else { return Err(unexpected()) };
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(json_response(
        StatusCode::OK,
        &json!({"id_slot": slot, "filename": name, "n_restored": n_tokens, "n_read": n_read,
            "timings": {"restore_ms": ms}}),
    ))
}

/// Runs the action on the engine; a bad slot id is llama-server's 400 "Invalid slot ID".
async fn run(state: &AppState, slot: usize, action: SlotAction) -> Result<SlotOutcome, ApiError> {
    match state.backend.slot_action(slot, action).await {
        Ok(o) => Ok(o),
        Err(EngineError::InvalidSlot(_)) => Err(ApiError::invalid("Invalid slot ID")),
        Err(EngineError::Config(m)) => Err(ApiError::invalid(m)),
        Err(e) => Err(e.into()),
    }
}

fn unexpected() -> ApiError {
    ApiError::internal("the engine answered another slot action")
}
