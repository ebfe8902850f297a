//! The Hub's cache layout, shared with `huggingface_hub` and llama.cpp:
//!
//! ```text
//! <HF_HUB_CACHE>/models--<org>--<name>/
//!     blobs/<etag>                    file contents, named by ETag (sha256 for LFS files,
//!                                     git blob sha1 otherwise); <etag>.incomplete while downloading
//!     snapshots/<commit>/<path>       relative symlinks to ../../blobs/<etag>
//!     refs/<revision>                 the commit a branch or tag pointed to (no newline)
//! <HF_HUB_CACHE>/.locks/models--<org>--<name>/<etag>.lock
//! ```
//!
//! Files downloaded by either side are found by the other without a download.

use std::path::{Path, PathBuf};

use crate::HubError;

/// A Hub cache folder (`HF_HUB_CACHE`).
#[derive(Debug, Clone)]
pub struct HubCache {
    root: PathBuf,
}

/// One cached repository, for `ferrolm list`.
#[derive(Debug, Clone)]
pub struct CachedRepo {
    /// `org/name`.
    pub repo: String,
    /// Its folder.
    pub path: PathBuf,
    /// Bytes of its blobs (complete and partial).
    pub size: u64,
    /// Its snapshots: the commit, the refs pointing at it, and its files.
    pub snapshots: Vec<CachedSnapshot>,
}

/// One snapshot of a cached repository.
#[derive(Debug, Clone)]
pub struct CachedSnapshot {
    /// The commit hash.
    pub commit: String,
    /// Branches and tags whose ref names this commit.
    pub refs: Vec<String>,
    /// Paths of its files, relative to the snapshot folder.
    pub files: Vec<String>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io { path: path.to_owned(), source }
}

/// Whether `s` is a full commit hash.
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl HubCache {
    /// The cache at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The cache folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `models--org--name`.
    fn folder_name(repo: &str) -> String {
        format!("models--{}", repo.replace('/', "--"))
    }

    /// The repository's folder.
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.root.join(Self::folder_name(repo))
    }

    /// Where the contents with `etag` are stored.
    pub fn blob_path(&self, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(etag)
    }

    /// The lock file guarding the download of `etag` (the path `huggingface_hub` locks too).
    pub fn lock_path(&self, repo: &str, etag: &str) -> PathBuf {
        self.root.join(".locks").join(Self::folder_name(repo)).join(format!("{etag}.lock"))
    }

    /// The snapshot folder of `commit`.
    pub fn snapshot_dir(&self, repo: &str, commit: &str) -> PathBuf {
        self.repo_dir(repo).join("snapshots").join(commit)
    }

    /// The commit `revision` names in the cache: itself when it is a commit hash with a
    /// snapshot, else what `refs/<revision>` records.
    pub fn commit_for(&self, repo: &str, revision: &str) -> Option<String> {
        if is_commit(revision) && self.snapshot_dir(repo, revision).is_dir() {
            return Some(revision.to_owned());
        }
        let text = std::fs::read_to_string(self.repo_dir(repo).join("refs").join(revision)).ok()?;
        let commit = text.trim();
        is_commit(commit).then(|| commit.to_owned())
    }

    /// Records that `revision` points at `commit` (nothing to do when it is the commit).
    pub fn write_ref(&self, repo: &str, revision: &str, commit: &str) -> Result<(), HubError> {
        if revision == commit {
            return Ok(());
        }
        let path = self.repo_dir(repo).join("refs").join(revision);
        if std::fs::read_to_string(&path).is_ok_and(|t| t.trim() == commit) {
            return Ok(());
        }
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        std::fs::write(&path, commit).map_err(io_err(&path))
    }

    /// Makes `snapshots/<commit>/<file>` point at the blob `etag`; returns its path.
    pub fn link(&self, repo: &str, commit: &str, file: &str, etag: &str) -> Result<PathBuf, HubError> {
        let link = self.snapshot_dir(repo, commit).join(file);
        let dir = link.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let blob = self.blob_path(repo, etag);
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).map_err(io_err(&link))?;
        }
        #[cfg(unix)]
        {
            // snapshots/<commit>/<a/b/file> → ../../(../..)blobs/<etag>
            let depth = file.split('/').count() + 1;
            let target = PathBuf::from("../".repeat(depth)).join("blobs").join(etag);
            std::os::unix::fs::symlink(&target, &link).map_err(io_err(&link))?;
        }
        #[cfg(not(unix))]
        std::fs::copy(&blob, &link).map_err(io_err(&link))?;
        let _ = blob;
        Ok(link)
    }

    /// The file's path in the snapshot when it is there and its blob is complete.
    pub fn cached_file(&self, repo: &str, commit: &str, file: &str) -> Option<PathBuf> {
        let path = self.snapshot_dir(repo, commit).join(file);
        // `metadata` follows the link: a dangling link (blob removed) is not a cached file.
        std::fs::metadata(&path).is_ok_and(|m| m.is_file()).then_some(path)
    }

    /// Paths of the files in a snapshot, relative to it, sorted.
    pub fn snapshot_files(&self, repo: &str, commit: &str) -> Vec<String> {
        let root = self.snapshot_dir(repo, commit);
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                    stack.push(path);
                } else if let Ok(rel) = path.strip_prefix(&root) {
                    out.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        out.sort();
        out
    }

    /// Every model repository in the cache, sorted by name.
    pub fn repos(&self) -> Vec<CachedRepo> {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Vec::new() };
        let mut repos: Vec<CachedRepo> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let repo = name.strip_prefix("models--")?.replacen("--", "/", 1);
                Some(self.describe(&repo))
            })
            .collect();
        repos.sort_by(|a, b| a.repo.cmp(&b.repo));
        repos
    }

    fn describe(&self, repo: &str) -> CachedRepo {
        let path = self.repo_dir(repo);
        let size = std::fs::read_dir(path.join("blobs"))
            .map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
            .unwrap_or(0);
        let refs = ref_names(&path.join("refs"));
        let mut snapshots: Vec<CachedSnapshot> = std::fs::read_dir(path.join("snapshots"))
            .map(|d| {
                d.flatten()
                    .map(|e| {
                        let commit = e.file_name().to_string_lossy().into_owned();
                        let refs =
                            refs.iter().filter(|(_, c)| *c == commit).map(|(name, _)| name.clone()).collect();
                        let files = self.snapshot_files(repo, &commit);
                        CachedSnapshot { commit, refs, files }
                    })
                    .collect()
            })
            .unwrap_or_default();
        snapshots.sort_by(|a, b| a.commit.cmp(&b.commit));
        CachedRepo { repo: repo.to_owned(), path, size, snapshots }
    }

    /// Removes a repository from the cache; the bytes freed, or `None` when it was not cached.
    pub fn remove(&self, repo: &str) -> Result<Option<u64>, HubError> {
        let dir = self.repo_dir(repo);
        if !dir.is_dir() {
            return Ok(None);
        }
        let size = self.describe(repo).size;
        std::fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
        let locks = self.root.join(".locks").join(Self::folder_name(repo));
        let _ = std::fs::remove_dir_all(locks);
        Ok(Some(size))
    }
}

/// `(name, commit)` of every ref file under `refs/` (names may contain `/`).
fn ref_names(refs: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![refs.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let (Ok(rel), Ok(text)) = (path.strip_prefix(refs), std::fs::read_to_string(&path)) {
                out.push((rel.to_string_lossy().into_owned(), text.trim().to_owned()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const C1: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn layout_links_refs_and_removal() {
        let dir = tempfile::tempdir().unwrap();
        let cache = HubCache::new(dir.path());
        let blob = cache.blob_path("org/repo", "e1");
        std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
        std::fs::write(&blob, b"hello").unwrap();
        assert_eq!(blob, dir.path().join("models--org--repo/blobs/e1"));

        let link = cache.link("org/repo", C1, "sub/m.gguf", "e1").unwrap();
        assert_eq!(std::fs::read(&link).unwrap(), b"hello");
        #[cfg(unix)]
        assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from("../../../blobs/e1"));
        cache.write_ref("org/repo", "main", C1).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("models--org--repo/refs/main")).unwrap(), C1);
        assert_eq!(cache.commit_for("org/repo", "main").as_deref(), Some(C1));
        assert_eq!(cache.commit_for("org/repo", C1).as_deref(), Some(C1));
        assert_eq!(cache.commit_for("org/repo", "dev"), None);
        assert_eq!(cache.cached_file("org/repo", C1, "sub/m.gguf"), Some(link.clone()));

        let repos = cache.repos();
        assert_eq!(repos.len(), 1);
        assert_eq!((repos[0].repo.as_str(), repos[0].size), ("org/repo", 5));
        assert_eq!(repos[0].snapshots[0].refs, vec!["main".to_string()]);
        assert_eq!(repos[0].snapshots[0].files, vec!["sub/m.gguf".to_string()]);

        std::fs::remove_file(&blob).unwrap();
        assert_eq!(cache.cached_file("org/repo", C1, "sub/m.gguf"), None, "a dangling link is not cached");
        assert_eq!(cache.remove("org/repo").unwrap(), Some(0));
        assert_eq!(cache.remove("org/repo").unwrap(), None);
        assert!(cache.repos().is_empty());
    }
}
