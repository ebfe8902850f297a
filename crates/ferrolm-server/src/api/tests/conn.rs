//! The connection layer on real sockets: idle and half-sent connections cannot lock out
//! `/health`, idle connections are closed, slow bodies time out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::super::ServerConfig;
use super::fake::Fake;
use super::{config, read_answer};
use crate::conn::ConnLimits;

/// A server over a fake backend with `limits`; its address.
async fn start(limits: ConnLimits) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let cfg = ServerConfig { connections: limits, ..config() };
    tokio::spawn(super::super::run(vec![listener], Arc::new(Fake::reply("x")), cfg, std::future::pending()));
    addr
}

/// `GET /health` on a new connection: the whole answer.
async fn health(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.expect("write");
    read_answer(&mut s, 30).await
}

/// Whether the server closed `s` (EOF or reset) within `within`; what it still sends first
/// (the rest of an answer) is read and dropped.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let drain = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, drain).await.is_ok()
}

#[tokio::test]
async fn idle_and_half_sent_connections_cannot_lock_out_health() {
    let limits = ConnLimits { max_connections: 20, ..ConnLimits::default() };
    let addr = start(limits).await;
    let mut held = Vec::new();
    for i in 0..40 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        if i % 2 == 0 {
            s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n").await.expect("half a request");
        }
        held.push(s);
    }
    let t0 = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(5), health(addr)).await.expect("answered in time");
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with(r#"{"status":"ok"}"#), "{out}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // The oldest idle ones were closed to make room.
    let mut n_closed = 0;
    for s in held.iter_mut() {
        n_closed += usize::from(closed_within(s, Duration::from_millis(20)).await);
    }
    assert!(n_closed >= 20, "{n_closed} closed");
}

#[tokio::test]
async fn idle_and_slow_connections_are_closed_after_their_timeouts() {
    let limits = ConnLimits {
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        ..ConnLimits::default()
    };
    let addr = start(limits).await;
    // Never sends a byte.
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    // Sends half its headers.
    let mut half = TcpStream::connect(addr).await.expect("connect");
    half.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n").await.expect("write");
    // Kept alive after one request.
    let mut kept = TcpStream::connect(addr).await.expect("connect");
    kept.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n = kept.read(&mut buf).await.expect("read");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    for (name, s) in [("idle", &mut idle), ("half-sent", &mut half), ("kept-alive", &mut kept)] {
        assert!(closed_within(s, Duration::from_secs(3)).await, "{name} was not closed");
    }
    // A body that stops halfway gets an error, not a hung handler.
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"pro",
    )
    .await
    .expect("write");
    let out = read_answer(&mut slow, 3).await;
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(out.contains(r#""type":"invalid_request_error""#), "{out}");
    assert!(out.contains("--body-timeout"), "{out}");
}

/// Over the socket, too many headers (under hyper's own limit) get a JSON 431, not hyper's
/// empty one.
#[tokio::test]
async fn too_many_headers_get_a_json_431_on_the_wire() {
    let addr = start(ConnLimits::default()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = String::from("GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
    for i in 0..150 {
        req.push_str(&format!("x-h{i}: v\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let out = read_answer(&mut s, 30).await;
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    assert!(out.contains(r#""type":"invalid_request_error""#), "{out}");
}

/// What hyper answers itself (a request it cannot parse, more header lines or bytes than it
/// reads) also has a JSON body on the wire.
#[tokio::test]
async fn requests_hyper_cannot_parse_get_json_errors() {
    let addr = start(ConnLimits::default()).await;
    let mut many = String::from("GET /health HTTP/1.1\r\nhost: x\r\n");
    for i in 0..1000 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let huge = format!("GET /health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(600 << 10));
    let cases: [(&str, String); 4] = [
        ("400", "GET /health HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n".into()),
        ("400", "G\u{1}T /health HTTP/1.1\r\nhost: x\r\n\r\n".into()),
        ("431", many),
        ("431", huge),
    ];
    for (status, req) in cases {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        // The server answers and closes before it reads a huge request to the end (the close
        // may then reset the connection): keep what arrived.
        let _ = s.write_all(req.as_bytes()).await;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let read = async {
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                got.extend_from_slice(&buf[..n]);
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read).await.expect("answered in time");
        let out = String::from_utf8_lossy(&got).into_owned();
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    }
}

/// A comma-separated `host` listens on every address, on one port; both answer.
#[tokio::test]
async fn several_addresses_share_one_port() {
    // IPv6 loopback may be missing (containers): then two IPv4 loopback addresses.
    let v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let host = if v6 { "127.0.0.1,::1" } else { "127.0.0.1,127.0.0.2" };
    let cfg = ServerConfig { host: host.into(), port: 0, ..config() };
    let listeners = super::super::bind(&cfg).await.expect("bind");
    assert_eq!(listeners.len(), 2);
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().expect("addr")).collect();
    assert_eq!(addrs[0].port(), addrs[1].port());
    tokio::spawn(super::super::run(listeners, Arc::new(Fake::reply("x")), cfg, std::future::pending()));
    for a in addrs {
        assert!(health(a).await.starts_with("HTTP/1.1 200"), "{a}");
    }
    let bad = ServerConfig { host: " , ".into(), ..config() };
    assert!(super::super::bind(&bad).await.is_err());
}
