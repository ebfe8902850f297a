//! Models from the Hugging Face Hub (or any server with its URL layout, `HF_ENDPOINT`), kept in
//! the Hub's own cache so that `huggingface_hub`, llama.cpp and ferrolm share downloads.
//!
//! [`HfName`] parses what people type (`org/repo:Q4_K_M`, `hf://org/repo/file.gguf`,
//! `hf.co/org/repo`); [`select::plan`] picks the files (a GGUF by quantization tag, every shard of
//! a split GGUF, or a safetensors folder); [`HubClient`] lists, downloads (resuming, retrying,
//! checking the ETag) and links them into the [`HubCache`]. [`pull`] does all of it.

mod cache;
mod client;
mod config;
mod name;
pub mod select;

use std::path::PathBuf;

pub use cache::{CachedRepo, CachedSnapshot, HubCache, is_commit};
pub use client::{FileMeta, HubClient};
pub use config::{DEFAULT_ENDPOINT, HubConfig};
pub use name::{HfName, Selector};
use select::Plan;

use crate::{HubError, PullEvent};

/// Downloads (unless cached) the model `name` names, with the settings of the environment;
/// returns the path to load: the GGUF file (the first shard of a split model), or the snapshot
/// folder of a safetensors model.
pub fn pull(name: &HfName, progress: &mut dyn FnMut(PullEvent<'_>)) -> Result<PathBuf, HubError> {
    pull_with(&HubClient::new(HubConfig::from_env()), name, progress)
}

/// [`pull`] through `client`.
///
/// Offline (`HF_HUB_OFFLINE`), the cache alone answers. Online, the revision is resolved to a
/// commit; files already in that commit's snapshot are not fetched again. When the Hub cannot be
/// reached at all, a complete cached copy of the revision is used, with a warning.
pub fn pull_with(
    client: &HubClient,
    name: &HfName,
    progress: &mut dyn FnMut(PullEvent<'_>),
) -> Result<PathBuf, HubError> {
    let shown = name.display();
    progress(PullEvent::Resolving { name: &shown });
    let cache = client.cache();
    if client.config().offline {
        return from_cache(&cache, name, progress);
    }
    let (commit, files) = match client.repo_files(&name.repo, &name.revision, progress) {
        Ok(listing) => listing,
        Err(e @ HubError::Network { .. }) => {
            tracing::warn!("{e}; trying the local cache");
            return from_cache(&cache, name, progress).map_err(|_| e);
        }
        Err(e) => return Err(e),
    };
    let plan = select::plan(&name.repo, &files, &name.selector)?;
    let mut all_cached = true;
    for file in plan.files() {
        if cache.cached_file(&name.repo, &commit, file).is_some() {
            continue;
        }
        all_cached = false;
        let meta = client.file_meta(&name.repo, &commit, file, progress)?;
        client.download_blob(&name.repo, file, &meta, progress)?;
        cache.link(&name.repo, &commit, file, &meta.etag)?;
    }
    cache.write_ref(&name.repo, &name.revision, &commit)?;
    let path = target(&cache, &name.repo, &commit, &plan);
    tracing::info!(model = %shown, path = %path.display(), "model ready");
    progress(PullEvent::Done { path: &path, cached: all_cached });
    Ok(path)
}

/// What to load of a plan: the first GGUF file, or the snapshot folder.
fn target(cache: &HubCache, repo: &str, commit: &str, plan: &Plan) -> PathBuf {
    match plan {
        Plan::Gguf { files } => cache.snapshot_dir(repo, commit).join(&files[0]),
        Plan::Folder { .. } => cache.snapshot_dir(repo, commit),
    }
}

/// The model from the cache alone.
fn from_cache(
    cache: &HubCache,
    name: &HfName,
    progress: &mut dyn FnMut(PullEvent<'_>),
) -> Result<PathBuf, HubError> {
    let offline = |missing: String| HubError::Offline { name: name.display(), missing };
    let commit = cache
        .commit_for(&name.repo, &name.revision)
        .ok_or_else(|| offline(format!("revision '{}' was never downloaded", name.revision)))?;
    let files = cache.snapshot_files(&name.repo, &commit);
    let plan = select::plan(&name.repo, &files, &name.selector).map_err(|e| offline(e.to_string()))?;
    if let Some(file) = plan.files().iter().find(|f| cache.cached_file(&name.repo, &commit, f).is_none()) {
        return Err(offline(format!("'{file}' is not in the cache")));
    }
    let path = target(cache, &name.repo, &commit, &plan);
    progress(PullEvent::Done { path: &path, cached: true });
    Ok(path)
}
