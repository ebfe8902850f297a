//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use ferrolm::engine::{EngineError, SubmitError};

/// An error answered to the client, with its HTTP status.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's error `type` (`invalid_request_error`, `server_error`, …).
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, …).
    pub code: Option<&'static str>,
    /// Seconds for the `Retry-After` header.
    pub retry_after: Option<u64>,
    /// A prompt too long for the context: its tokens and the context's (llama-server's
    /// `n_prompt_tokens` and `n_ctx`).
    pub sizes: Option<(u32, u32)>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
            sizes: None,
        }
    }

    /// 400: the request is malformed or a value is out of range.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 about one field.
    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError { param: Some(param.into()), ..ApiError::invalid(message) }
    }

    /// 400 `context_length_exceeded`.
    pub fn context_length(message: impl Into<String>) -> ApiError {
        ApiError { code: Some("context_length_exceeded"), ..ApiError::invalid(message) }
    }

    /// 400 for a prompt that does not fit the context: llama-server's type
    /// `exceed_context_size_error` with the sizes, OpenAI's code `context_length_exceeded`.
    pub fn context_size(message: impl Into<String>, n_prompt_tokens: usize, n_ctx: usize) -> ApiError {
        ApiError {
            kind: "exceed_context_size_error",
            sizes: Some((clamp_u32(n_prompt_tokens), clamp_u32(n_ctx))),
            ..ApiError::context_length(message)
        }
    }

    /// 404 `model_not_found`.
    pub fn model_not_found(model: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("The model `{model}` does not exist (GET /v1/models lists the served model)"),
            )
        }
    }

    /// 404 for a path no route serves.
    pub fn route_not_found(method: &str, path: &str) -> ApiError {
        ApiError {
            code: Some("not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("no route for {method} {path}"),
            )
        }
    }

    /// 501 `not_supported_error`: the served model cannot do what the route does.
    pub fn not_supported(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", message)
    }

    /// 401 `authentication_error` (llama-server's and Anthropic's type; OpenAI's code
    /// `invalid_api_key`): missing or wrong API key.
    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "missing or incorrect API key: send it as `Authorization: Bearer KEY`",
            )
        }
    }

    /// 503 with `Retry-After`.
    pub fn busy(message: impl Into<String>, retry_after_s: u64) -> ApiError {
        ApiError {
            code: Some("server_busy"),
            retry_after: Some(retry_after_s.max(1)),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
        }
    }

    /// 500: the engine failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// An error with any status (the body-limit and method rejections of the HTTP layer).
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> ApiError {
        let (kind, code) = match status {
            StatusCode::PAYLOAD_TOO_LARGE => ("invalid_request_error", Some("request_too_large")),
            StatusCode::METHOD_NOT_ALLOWED => ("invalid_request_error", Some("method_not_allowed")),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ("invalid_request_error", Some("unsupported_media_type")),
            s if s.is_server_error() => ("server_error", None),
            _ => ("invalid_request_error", None),
        };
        ApiError { code, ..ApiError::new(status, kind, message) }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }});
        if let Some((n_prompt_tokens, n_ctx)) = self.sizes {
            body["error"]["n_prompt_tokens"] = json!(n_prompt_tokens);
            body["error"]["n_ctx"] = json!(n_ctx);
        }
        body
    }
}

/// `n`, or `u32::MAX` when larger.
fn clamp_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = super::json_response(self.status, &self.body());
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        match e {
            SubmitError::QueueFull { retry_after_s, .. } => ApiError::busy(e.to_string(), retry_after_s),
            SubmitError::ShuttingDown => ApiError {
                code: Some("shutting_down"),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", e.to_string())
            },
            SubmitError::ContextLength { .. } => ApiError::context_length(e.to_string()),
            SubmitError::Invalid(m) | SubmitError::Constraint(m) => ApiError::invalid(m),
            SubmitError::NotGenerative(m) => ApiError::not_supported(m),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            EngineError::Model(ferrolm::Error::InvalidInput(m)) => ApiError::invalid(m),
            EngineError::Model(ferrolm::Error::Tokenizer(t)) => ApiError::invalid(t.to_string()),
            EngineError::Stopped => ApiError {
                code: Some("shutting_down"),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", e.to_string())
            },
            e => ApiError::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_errors_map_to_statuses() {
        let e: ApiError = SubmitError::QueueFull { queued: 64, retry_after_s: 3 }.into();
        assert_eq!((e.status, e.retry_after), (StatusCode::SERVICE_UNAVAILABLE, Some(3)));
        let resp = e.into_response();
        assert_eq!(resp.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"3"[..]));
        let e: ApiError = SubmitError::ShuttingDown.into();
        assert_eq!((e.status, e.retry_after), (StatusCode::SERVICE_UNAVAILABLE, None));
        let e: ApiError = SubmitError::Invalid("empty prompt".into()).into();
        assert_eq!((e.status, e.message.as_str()), (StatusCode::BAD_REQUEST, "empty prompt"));
        // An embedding-only (encoder) model asked to generate: 501, as for a route it cannot serve.
        let e: ApiError = SubmitError::NotGenerative("bert is an encoder model".into()).into();
        assert_eq!((e.status, e.kind), (StatusCode::NOT_IMPLEMENTED, "not_supported_error"));
        let e: ApiError = EngineError::Config("x".into()).into();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn body_has_openai_shape() {
        let b = ApiError::context_length("too long").body();
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(b["error"]["code"], "context_length_exceeded");
        assert!(b["error"]["param"].is_null());
        assert_eq!(ApiError::model_not_found("gpt-4").body()["error"]["param"], "model");
    }
}
