//! CORS with llama-server's semantics: which origins a browser page may call the server from.
//!
//! - `*` allows any origin. With credentials allowed (the default, as llama-server's) the
//!   request's `Origin` is echoed back, since browsers refuse `*` on credentialed requests.
//! - Otherwise the listed origins are allowed, each echoed back when it matches; `localhost`
//!   stands for any origin on this machine (`http(s)://localhost`, `127.0.0.1` or `[::1]`, any
//!   port). Another origin gets no `Access-Control-Allow-Origin`, which the browser enforces.
//! - Every `OPTIONS` request is a preflight: answered 200 with the allowed methods, headers and
//!   credentials, before the API-key check (browsers send no `Authorization` on a preflight).
//!
//! An empty origin list turns CORS off: no headers, and `OPTIONS` is the router's 405.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ServerConfig, ServerError};

/// Which origins are allowed, and what a preflight answers.
#[derive(Debug)]
pub(crate) struct CorsPolicy {
    /// `*` was given.
    any: bool,
    /// `localhost` was given.
    local: bool,
    /// The other origins given, without a trailing `/`.
    origins: Vec<HeaderValue>,
    /// `Access-Control-Allow-Credentials`.
    credentials: bool,
    /// `Access-Control-Allow-Methods` of a preflight.
    methods: HeaderValue,
    /// `Access-Control-Allow-Headers` of a preflight.
    headers: HeaderValue,
}

impl CorsPolicy {
    /// The policy `cfg` asks for; `None` when its origin list is empty (CORS off).
    pub(crate) fn from_config(cfg: &ServerConfig) -> Result<Option<Arc<Self>>, ServerError> {
        if cfg.cors_origins.is_empty() {
            return Ok(None);
        }
        let value = |what: &str, v: &str| {
            HeaderValue::from_str(v).map_err(|_| ServerError::Config(format!("invalid CORS {what} {v:?}")))
        };
        let origins = cfg
            .cors_origins
            .iter()
            .filter(|o| !matches!(o.as_str(), "*" | "localhost"))
            .map(|o| value("origin", o.trim_end_matches('/')))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Arc::new(Self {
            any: cfg.cors_origins.iter().any(|o| o == "*"),
            local: cfg.cors_origins.iter().any(|o| o == "localhost"),
            origins,
            credentials: cfg.cors_credentials,
            methods: value("methods", &cfg.cors_methods)?,
            headers: value("headers", &cfg.cors_headers)?,
        })))
    }

    /// `Access-Control-Allow-Origin` for a request from `origin`, if that origin is allowed.
    fn allow_origin(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        if self.any {
            return match origin {
                Some(o) if self.credentials => Some(o.clone()),
                _ => Some(HeaderValue::from_static("*")),
            };
        }
        let o = origin?;
        let listed = self.origins.contains(o) || (self.local && o.to_str().is_ok_and(is_local_origin));
        listed.then(|| o.clone())
    }

    /// Adds the headers every answer to `origin` carries.
    fn decorate(&self, origin: Option<&HeaderValue>, h: &mut HeaderMap) {
        if let Some(allowed) = self.allow_origin(origin) {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
            if self.credentials {
                h.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
            }
        }
        if !self.any || self.credentials {
            // The answer depends on the request's origin.
            h.append(header::VARY, HeaderValue::from_static("origin"));
        }
    }
}

/// The CORS middleware: preflights answered here, other answers given the origin headers.
pub(crate) async fn cors(State(policy): State<Arc<CorsPolicy>>, req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    if req.method() == Method::OPTIONS {
        let mut res = StatusCode::OK.into_response();
        let h = res.headers_mut();
        policy.decorate(origin.as_ref(), h);
        // llama-server states it either way on a preflight.
        let credentials = if policy.credentials { "true" } else { "false" };
        h.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static(credentials));
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, policy.methods.clone());
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, policy.headers.clone());
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("3600"));
        return res;
    }
    let mut res = next.run(req).await;
    policy.decorate(origin.as_ref(), res.headers_mut());
    res
}

/// Whether `origin` is `http(s)://localhost`, `127.0.0.1` or `[::1]`, with any port.
fn is_local_origin(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    let host = match rest.strip_prefix("[::1]") {
        Some(port) => return port.is_empty() || port.strip_prefix(':').is_some_and(is_port),
        None => rest,
    };
    let (name, port) = host.split_once(':').unwrap_or((host, ""));
    matches!(name, "localhost" | "127.0.0.1") && (port.is_empty() || is_port(port))
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}
