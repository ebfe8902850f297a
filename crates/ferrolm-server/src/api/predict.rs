//! `POST /predict`: Vertex AI's custom-container prediction route (llama-server serves it in
//! that mode). `{"instances": [request, …]}` → `{"predictions": [answer, …]}`, each instance a
//! chat completion request marked `"@requestFormat": "chatCompletions"`, run at once.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::error::ApiError;
use super::json::parse_object;
use super::{AppState, chat, json_response};

/// Most instances in one request.
const MAX_INSTANCES: usize = 64;

pub(crate) async fn handle(state: AppState, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let Some(instances) = v.get("instances").and_then(Value::as_array) else {
        return Err(ApiError::invalid_param("instances", "`instances` (an array of requests) is required"));
    };
    if instances.is_empty() || instances.len() > MAX_INSTANCES {
        return Err(ApiError::invalid_param(
            "instances",
            format!("`instances` must hold 1 to {MAX_INSTANCES} requests, not {}", instances.len()),
        ));
    }
    let mut bodies = Vec::with_capacity(instances.len());
    for (i, inst) in instances.iter().enumerate() {
        let Some(obj) = inst.as_object() else {
            return Err(ApiError::invalid_param(format!("instances[{i}]"), "an instance must be an object"));
        };
        match obj.get("@requestFormat").and_then(Value::as_str) {
            Some("chatCompletions") => {}
            other => {
                return Err(ApiError::invalid_param(
                    format!("instances[{i}].@requestFormat"),
                    format!("`@requestFormat` must be \"chatCompletions\", not {other:?}"),
                ));
            }
        }
        if obj.get("stream").and_then(Value::as_bool) == Some(true) {
            return Err(ApiError::invalid_param(
                format!("instances[{i}].stream"),
                "predictions are not streamed",
            ));
        }
        let mut request = obj.clone();
        request.remove("@requestFormat");
        bodies.push(Bytes::from(Value::Object(request).to_string()));
    }
    let answers =
        futures_util::future::try_join_all(bodies.into_iter().map(|b| chat::handle(state.clone(), b)))
            .await?;
    let mut predictions = Vec::with_capacity(answers.len());
    for answer in answers {
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        predictions
            .push(serde_json::from_slice::<Value>(&bytes).map_err(|e| ApiError::internal(e.to_string()))?);
    }
    Ok(json_response(StatusCode::OK, &json!({"predictions": predictions})))
}
