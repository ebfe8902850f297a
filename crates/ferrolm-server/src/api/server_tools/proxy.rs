//! `GET`/`POST /cors-proxy?url=URL` (`--ui-mcp-proxy`, as llama-server's
//! `server-cors-proxy.h`): the request is sent on to `URL` and its answer passed back, so that a
//! web page can reach an MCP server that does not allow its origin. Only the request's
//! `x-llama-server-proxy-header-NAME` headers are sent on, as `NAME`; the body of a `POST` goes
//! as is. The answer's status, headers (hop-by-hop ones left out) and body are streamed back.
//! Plain `http://` targets only: ferrolm's server has no TLS client, and an `https://` URL is
//! refused by name.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Query;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;

use super::super::error::ApiError;

/// Longest a proxied exchange may take (llama-server's read and write timeouts).
const PROXY_TIMEOUT: Duration = Duration::from_secs(600);
/// The prefix of the headers sent on.
const HEADER_PREFIX: &str = "x-llama-server-proxy-header-";

/// A parsed `http://host[:port]/path?query` target.
#[derive(Debug, PartialEq)]
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
    pub path_and_query: String,
}

/// Parses the `url` of a proxy request; the message says what is wrong.
pub(crate) fn parse_target(url: &str) -> Result<Target, String> {
    let (scheme, rest) = url.split_once("://").ok_or("invalid target URL: no scheme")?;
    match scheme.to_ascii_lowercase().as_str() {
        "http" => {}
        "https" => return Err("https targets are not supported by ferrolm's proxy (plain http only)".into()),
        other => return Err(format!("unsupported URL scheme in target URL: {other}")),
    }
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(cut);
    let tail = tail.split('#').next().unwrap_or_default();
    if authority.contains('@') {
        return Err("authentication in target URL is not supported".into());
    }
    let port_of = |p: &str| p.parse::<u16>().map_err(|_| format!("invalid port in target URL: {p}"));
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("invalid target URL: unclosed '['")?;
        match after.strip_prefix(':') {
            Some(p) => (h, port_of(p)?),
            None if after.is_empty() => (h, 80),
            None => return Err(format!("invalid target URL: {authority}")),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, port_of(p)?),
            None => (authority, 80),
        }
    };
    if host.is_empty() {
        return Err("invalid target URL: missing host".into());
    }
    let path_and_query = if tail.starts_with('/') { tail.to_string() } else { format!("/{tail}") };
    Ok(Target { host: host.to_string(), port, path_and_query })
}

/// The `url` query parameter.
#[derive(serde::Deserialize)]
pub(crate) struct ProxyQuery {
    url: Option<String>,
}

/// The proxy route's handler.
pub(crate) async fn handle(
    method: Method,
    Query(q): Query<ProxyQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(url) = q.url else {
        return ApiError::invalid("the query parameter \"url\" is required").into_response();
    };
    let target = match parse_target(&url) {
        Ok(t) => t,
        Err(e) => return ApiError::invalid(e).into_response(),
    };
    tracing::info!(%method, host = %target.host, port = target.port, path = %target.path_and_query, "proxying");
    match tokio::time::timeout(PROXY_TIMEOUT, forward(method, &target, &headers, body)).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => ApiError::with_status(StatusCode::BAD_GATEWAY, e).into_response(),
        Err(_) => ApiError::with_status(StatusCode::GATEWAY_TIMEOUT, "the proxied request timed out")
            .into_response(),
    }
}

/// Sends the request to `target` and turns its answer into ours.
async fn forward(
    method: Method,
    target: &Target,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, String> {
    let stream = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("cannot connect to {}:{}: {e}", target.host, target.port))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream))
        .await
        .map_err(|e| format!("proxy handshake failed: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("proxied connection ended: {e}");
        }
    });
    let host = if target.host.contains(':') { format!("[{}]", target.host) } else { target.host.clone() };
    let mut req = Request::builder()
        .method(method.clone())
        .uri(&target.path_and_query)
        .header(header::HOST, format!("{host}:{}", target.port));
    for (name, value) in headers {
        let Some(rest) = name.as_str().strip_prefix(HEADER_PREFIX).filter(|r| !r.is_empty()) else {
            continue;
        };
        if let Ok(n) = HeaderName::from_bytes(rest.as_bytes()) {
            req = req.header(n, value.clone());
        }
    }
    let has_body = method == Method::POST;
    if has_body {
        let kind = headers.get(header::CONTENT_TYPE).cloned();
        req = req.header(header::CONTENT_TYPE, kind.unwrap_or(HeaderValue::from_static("application/json")));
    }
    let req = req
        .body(if has_body { Body::from(body) } else { Body::empty() })
        .map_err(|e| format!("cannot build the proxied request: {e}"))?;
    let resp = sender.send_request(req).await.map_err(|e| format!("proxied request failed: {e}"))?;
    let (parts, incoming) = resp.into_parts();
    let mut out = Response::new(Body::new(incoming));
    *out.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        let hop = matches!(
            name.as_str(),
            "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "te" | "trailer"
        );
        // CORS headers are the proxy's own (its layer adds them), not the target's.
        if !hop && !name.as_str().starts_with("access-control-") {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = parse_target("http://example.com").expect("url");
        assert_eq!(t, Target { host: "example.com".into(), port: 80, path_and_query: "/".into() });
        let t = parse_target("http://127.0.0.1:8080/models?x=1#frag").expect("url");
        assert_eq!(t, Target { host: "127.0.0.1".into(), port: 8080, path_and_query: "/models?x=1".into() });
        let t = parse_target("http://[::1]:9000/a").expect("url");
        assert_eq!((t.host.as_str(), t.port), ("::1", 9000));
        assert!(parse_target("ftp://x/").expect_err("scheme").contains("unsupported URL scheme"));
        assert!(parse_target("https://x/").expect_err("tls").contains("https"));
        assert!(parse_target("http://u:p@x/").expect_err("auth").contains("authentication"));
        assert!(parse_target("http:///path").expect_err("host").contains("missing host"));
        assert!(parse_target("http://x:99999/").expect_err("port").contains("invalid port"));
        assert!(parse_target("example.com").is_err());
    }
}
