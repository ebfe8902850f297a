//! The Hub's HTTP protocol: repository listings from `/api/models/<repo>/revision/<rev>`, file
//! metadata from a `HEAD` of `/<repo>/resolve/<rev>/<file>` (commit, ETag, size, redirect to the
//! blob store), and downloads that resume with `Range` requests, retry with backoff and are
//! checked against the ETag before they enter the cache.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest;
use ureq::tls::{RootCerts, TlsConfig};

use super::cache::HubCache;
use super::config::HubConfig;
use crate::{HubError, PullEvent};

/// Attempts per request (the first try and the retries) on 5xx answers, 429 and dropped
/// connections.
const ATTEMPTS: u32 = 6;
/// Redirects followed per request.
const MAX_REDIRECTS: usize = 5;
const CHUNK: usize = 1 << 20;

/// What a `HEAD` of a file's `resolve` URL says.
#[derive(Debug, Clone)]
pub struct FileMeta {
    /// The commit the revision resolved to.
    pub commit: String,
    /// The content's ETag: sha256 (LFS files) or git blob sha1, without quotes.
    pub etag: String,
    /// Size in bytes, when given.
    pub size: Option<u64>,
    /// Where the contents are (the blob store for LFS files).
    pub url: String,
}

/// A client of one Hub endpoint.
pub struct HubClient {
    cfg: HubConfig,
    agent: ureq::Agent,
}

/// A response, or a failure that a retry may cure.
enum Failure {
    /// Connection refused or dropped, timeouts, 5xx, 429.
    Transient(String),
    /// Anything else.
    Fatal(HubError),
}

impl From<HubError> for Failure {
    fn from(e: HubError) -> Self {
        Failure::Fatal(e)
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io { path: path.to_owned(), source }
}

/// Percent-encodes a path segment (revisions such as `refs/pr/1` contain `/`).
fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Percent-encodes a file path, keeping its `/`.
fn encode_path(s: &str) -> String {
    s.split('/').map(encode_segment).collect::<Vec<_>>().join("/")
}

fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// `W/"abc"` → `abc`.
fn clean_etag(s: &str) -> String {
    s.trim().trim_start_matches("W/").trim_matches('"').to_owned()
}

impl HubClient {
    /// A client for `cfg`; HTTPS trusts the system certificate store, and the `HTTPS_PROXY` /
    /// `HTTP_PROXY` / `ALL_PROXY` / `NO_PROXY` settings apply.
    pub fn new(cfg: HubConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .tls_config(TlsConfig::builder().root_certs(RootCerts::PlatformVerifier).build())
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .user_agent(concat!("ferrolm/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Self { cfg, agent }
    }

    /// The configuration.
    pub fn config(&self) -> &HubConfig {
        &self.cfg
    }

    /// The cache.
    pub fn cache(&self) -> HubCache {
        HubCache::new(&self.cfg.cache)
    }

    /// One request, following redirects; the token goes only to the endpoint's own host.
    fn send(
        &self,
        method: &str,
        url: &str,
        range_from: Option<u64>,
    ) -> Result<ureq::http::Response<ureq::Body>, Failure> {
        let mut url = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = ureq::http::Request::builder().method(method).uri(&url);
            if let Some(token) = &self.cfg.token
                && same_origin(&url, &self.cfg.endpoint)
            {
                req = req.header("Authorization", format!("Bearer {token}"));
            }
            if let Some(from) = range_from.filter(|&f| f > 0) {
                req = req.header("Range", format!("bytes={from}-"));
            }
            let req = req.body(()).map_err(|e| HubError::Http {
                url: url.clone(),
                status: 0,
                message: format!("invalid request: {e}"),
            })?;
            let resp = self.agent.run(req).map_err(|e| Failure::Transient(e.to_string()))?;
            let status = resp.status().as_u16();
            // A HEAD answered with a redirect to another host (the blob store) carries the
            // file's metadata itself; redirects within the Hub (renamed repositories) are
            // followed, as huggingface_hub does.
            let Some(target) = header(&resp, "location").filter(|_| (300..400).contains(&status)) else {
                return Ok(resp);
            };
            let target = absolute(&url, &target);
            if method == "HEAD" && !same_origin(&target, &url) {
                return Ok(resp);
            }
            url = target;
        }
        Err(Failure::Fatal(HubError::Http { url, status: 310, message: "too many redirects".into() }))
    }

    /// `send` with retries and backoff on transient failures.
    fn send_retrying(
        &self,
        method: &str,
        url: &str,
        what: &str,
        progress: &mut dyn FnMut(PullEvent<'_>),
    ) -> Result<ureq::http::Response<ureq::Body>, HubError> {
        let mut attempt = 1;
        loop {
            let outcome = match self.send(method, url, None) {
                Ok(resp) if is_transient(resp.status().as_u16()) => {
                    Err(Failure::Transient(format!("HTTP {}", resp.status().as_u16())))
                }
                other => other,
            };
            match outcome {
                Ok(resp) => return Ok(resp),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Transient(reason)) if attempt < ATTEMPTS => {
                    progress(PullEvent::Retrying { file: what, attempt, reason: &reason });
                    std::thread::sleep(backoff(attempt));
                    attempt += 1;
                }
                Err(Failure::Transient(reason)) => {
                    return Err(HubError::Network { url: url.to_owned(), message: reason });
                }
            }
        }
    }

    /// The commit `revision` resolves to and the repository's files.
    pub fn repo_files(
        &self,
        repo: &str,
        revision: &str,
        progress: &mut dyn FnMut(PullEvent<'_>),
    ) -> Result<(String, Vec<String>), HubError> {
        let url = format!("{}/api/models/{repo}/revision/{}", self.cfg.endpoint, encode_segment(revision));
        let mut resp = self.send_retrying("GET", &url, repo, progress)?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(self.status_error(repo, None, &resp, status));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| HubError::Network { url: url.clone(), message: e.to_string() })?;
        let info: serde_json::Value = serde_json::from_str(&body).map_err(|e| HubError::Http {
            url: url.clone(),
            status,
            message: format!("the repository listing is not JSON: {e}"),
        })?;
        let commit = info["sha"].as_str().unwrap_or_default().to_owned();
        let files: Vec<String> = info["siblings"]
            .as_array()
            .map(|s| s.iter().filter_map(|f| f["rfilename"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        if commit.is_empty() {
            return Err(HubError::Http {
                url,
                status,
                message: "the repository listing has no commit ('sha')".into(),
            });
        }
        Ok((commit, files))
    }

    /// Metadata of `file` at `revision`.
    pub fn file_meta(
        &self,
        repo: &str,
        revision: &str,
        file: &str,
        progress: &mut dyn FnMut(PullEvent<'_>),
    ) -> Result<FileMeta, HubError> {
        let url = format!(
            "{}/{repo}/resolve/{}/{}",
            self.cfg.endpoint,
            encode_segment(revision),
            encode_path(file)
        );
        let resp = self.send_retrying("HEAD", &url, file, progress)?;
        let status = resp.status().as_u16();
        if !(200..400).contains(&status) {
            return Err(self.status_error(repo, Some(file), &resp, status));
        }
        let etag = header(&resp, "x-linked-etag").or_else(|| header(&resp, "etag")).map(|e| clean_etag(&e));
        let commit = header(&resp, "x-repo-commit");
        let (Some(etag), Some(commit)) = (etag.filter(|e| !e.is_empty()), commit) else {
            return Err(HubError::Http {
                url,
                status,
                message: "the answer lacks the ETag or X-Repo-Commit header: is HF_ENDPOINT a Hub?".into(),
            });
        };
        let size = header(&resp, "x-linked-size")
            .or_else(|| header(&resp, "content-length"))
            .and_then(|s| s.parse().ok());
        let target = match header(&resp, "location") {
            Some(loc) if (300..400).contains(&status) => absolute(&url, &loc),
            _ => url,
        };
        Ok(FileMeta { commit, etag, size, url: target })
    }

    /// The error for a 4xx answer about `repo` (and `file`).
    fn status_error(
        &self,
        repo: &str,
        file: Option<&str>,
        resp: &ureq::http::Response<ureq::Body>,
        status: u16,
    ) -> HubError {
        let code = header(resp, "x-error-code").unwrap_or_default();
        let message = header(resp, "x-error-message").unwrap_or_default();
        match (status, code.as_str()) {
            (401 | 403, "RepoNotFound") | (404, "RepoNotFound") => HubError::NotFound {
                repo: repo.to_owned(),
                file: None,
                detail: "no such repository (or it is private and your token cannot see it)".into(),
            },
            (404, "RevisionNotFound") => HubError::NotFound {
                repo: repo.to_owned(),
                file: None,
                detail: format!("no such revision ({message})"),
            },
            (401 | 403, _) => HubError::Gated {
                repo: repo.to_owned(),
                url: format!("{}/{repo}", self.cfg.endpoint),
                has_token: self.cfg.token.is_some(),
            },
            (404, _) => HubError::NotFound {
                repo: repo.to_owned(),
                file: file.map(str::to_owned),
                detail: if file.is_some() { "no such file in the repository" } else { "no such repository" }
                    .into(),
            },
            _ => HubError::Http {
                url: format!("{}/{repo}", self.cfg.endpoint),
                status,
                message: if message.is_empty() { code } else { message },
            },
        }
    }

    /// Downloads `meta`'s contents into the blob `etag` (resuming a partial download), checks
    /// them against the ETag and returns the blob's path.
    pub fn download_blob(
        &self,
        repo: &str,
        file: &str,
        meta: &FileMeta,
        progress: &mut dyn FnMut(PullEvent<'_>),
    ) -> Result<PathBuf, HubError> {
        let cache = self.cache();
        let blob = cache.blob_path(repo, &meta.etag);
        let lock_path = cache.lock_path(repo, &meta.etag);
        for dir in [blob.parent(), lock_path.parent()].into_iter().flatten() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        // Another process (ours or huggingface_hub) may be downloading the same blob.
        let lock = File::create(&lock_path).map_err(io_err(&lock_path))?;
        lock.lock().map_err(io_err(&lock_path))?;
        if std::fs::metadata(&blob).is_ok_and(|m| meta.size.is_none_or(|s| s == m.len())) {
            return Ok(blob);
        }
        let part = blob.with_file_name(format!("{}.incomplete", meta.etag));
        self.fetch_into(&part, repo, file, meta, progress)?;
        progress(PullEvent::Verifying { file });
        if let Err(e) = verify(&part, &meta.etag, file) {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
        std::fs::rename(&part, &blob).map_err(io_err(&blob))?;
        Ok(blob)
    }

    /// Fills `part` with the contents at `meta.url`, resuming from what it holds.
    fn fetch_into(
        &self,
        part: &Path,
        repo: &str,
        file: &str,
        meta: &FileMeta,
        progress: &mut dyn FnMut(PullEvent<'_>),
    ) -> Result<(), HubError> {
        let mut attempt = 1;
        loop {
            let have = std::fs::metadata(part).map_or(0, |m| m.len());
            if meta.size.is_some_and(|s| s == have && s > 0) {
                return Ok(());
            }
            match self.fetch_once(part, have, repo, file, meta, progress) {
                Ok(()) => return Ok(()),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Transient(reason)) if attempt < ATTEMPTS => {
                    tracing::warn!(file, attempt, %reason, "download interrupted; resuming");
                    progress(PullEvent::Retrying { file, attempt, reason: &reason });
                    std::thread::sleep(backoff(attempt));
                    attempt += 1;
                }
                Err(Failure::Transient(reason)) => {
                    return Err(HubError::Network { url: meta.url.clone(), message: reason });
                }
            }
        }
    }

    /// One GET: appends to `part` from byte `have` (or rewrites it when the server ignores the
    /// range). A connection dropped before the end is transient.
    fn fetch_once(
        &self,
        part: &Path,
        have: u64,
        repo: &str,
        file: &str,
        meta: &FileMeta,
        progress: &mut dyn FnMut(PullEvent<'_>),
    ) -> Result<(), Failure> {
        let resp = self.send("GET", &meta.url, Some(have))?;
        let status = resp.status().as_u16();
        if is_transient(status) {
            return Err(Failure::Transient(format!("HTTP {status}")));
        }
        let resumed = match status {
            206 if content_range_start(&resp) == Some(have) => true,
            200 => false,
            416 if meta.size == Some(have) => return Ok(()),
            416 | 206 => {
                // The partial file does not fit what the server has: start again.
                std::fs::remove_file(part).map_err(io_err(part))?;
                return Err(Failure::Transient(format!("HTTP {status} for a resumed download; restarting")));
            }
            _ => return Err(Failure::Fatal(self.status_error(repo, Some(file), &resp, status))),
        };
        let mut out = OpenOptions::new()
            .create(true)
            .write(true)
            .append(resumed)
            .truncate(!resumed)
            .open(part)
            .map_err(io_err(part))?;
        let mut done = if resumed { have } else { 0 };
        let total = meta.size.unwrap_or(0);
        let mut reader = resp.into_body().into_reader();
        let mut buf = vec![0u8; CHUNK];
        progress(PullEvent::Downloading { file, done, total });
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    out.flush().map_err(io_err(part))?;
                    return Err(Failure::Transient(format!("connection dropped after {done} bytes: {e}")));
                }
            };
            out.write_all(&buf[..n]).map_err(io_err(part))?;
            done += n as u64;
            progress(PullEvent::Downloading { file, done, total });
        }
        out.sync_all().map_err(io_err(part))?;
        match meta.size {
            Some(size) if done < size => {
                Err(Failure::Transient(format!("connection closed after {done} of {size} bytes")))
            }
            _ => Ok(()),
        }
    }
}

fn is_transient(status: u16) -> bool {
    status == 429 || status == 408 || (500..600).contains(&status)
}

/// 0.5 s, 1 s, 2 s, 4 s, 8 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(500u64 << (attempt - 1).min(4))
}

fn content_range_start(resp: &ureq::http::Response<ureq::Body>) -> Option<u64> {
    // `bytes 100-199/200`
    let v = header(resp, "content-range")?;
    v.strip_prefix("bytes ")?.split('-').next()?.trim().parse().ok()
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..].find('/').map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

fn same_origin(a: &str, b: &str) -> bool {
    origin(a).eq_ignore_ascii_case(origin(b))
}

/// Resolves a `Location` against the URL it came from.
fn absolute(base: &str, location: &str) -> String {
    if location.contains("://") {
        location.to_owned()
    } else if location.starts_with('/') {
        format!("{}{location}", origin(base))
    } else {
        let dir = base.rsplit_once('/').map_or(base, |(d, _)| d);
        format!("{dir}/{location}")
    }
}

/// Checks a downloaded file against its ETag: a 64-hex ETag is the SHA-256 of the contents (LFS
/// files), a 40-hex one the git blob SHA-1; other ETags cannot be checked.
pub fn verify(path: &Path, etag: &str, file: &str) -> Result<(), HubError> {
    let hex = |n| etag.len() == n && etag.bytes().all(|b| b.is_ascii_hexdigit());
    let actual = if hex(64) {
        crate::sha256_file(path, &mut |_, _| {})?
    } else if hex(40) {
        git_blob_sha1(path)?
    } else {
        tracing::debug!(file, etag, "ETag is not a content hash; not verified");
        return Ok(());
    };
    if actual.eq_ignore_ascii_case(etag) {
        Ok(())
    } else {
        Err(HubError::HashMismatch { file: file.to_owned(), expected: etag.to_owned(), actual })
    }
}

/// Git's object id of a file: SHA-1 of `blob <len>\0` followed by the contents.
fn git_blob_sha1(path: &Path) -> Result<String, HubError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let len = f.metadata().map_err(io_err(path))?.len();
    let mut hasher = sha1::Sha1::new();
    hasher.update(format!("blob {len}\0").as_bytes());
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = f.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn urls() {
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode_path("a b/c.gguf"), "a%20b/c.gguf");
        assert_eq!(absolute("http://h:1/a/b", "/x/y"), "http://h:1/x/y");
        assert_eq!(absolute("http://h:1/a/b", "https://cdn/z"), "https://cdn/z");
        assert!(same_origin("https://huggingface.co/x", "https://HuggingFace.co"));
        assert!(!same_origin("https://cdn-lfs.hf.co/x", "https://huggingface.co"));
        assert_eq!(clean_etag("W/\"abc\""), "abc");
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(9), Duration::from_secs(8));
    }

    #[test]
    fn etag_checks() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, b"hello\n").unwrap();
        // `git hash-object` of "hello\n".
        verify(&f, "ce013625030ba8dba906f756967f9e9ca394464a", "x").unwrap();
        verify(&f, "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03", "x").unwrap();
        let e = verify(&f, &"0".repeat(64), "x").unwrap_err();
        assert!(matches!(e, HubError::HashMismatch { .. }), "{e}");
        verify(&f, "not-a-hash", "x").unwrap();
    }
}
