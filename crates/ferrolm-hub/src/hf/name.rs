//! Hub model names as people type them: `org/repo`, `org/repo:Q4_K_M`, `hf://org/repo/file.gguf`,
//! `hf.co/org/repo:tag` (Ollama's spelling), `https://huggingface.co/org/repo/resolve/main/file`.

use crate::HubError;

/// Which files of a repository a name asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// No tag or file: the repository's default GGUF (Q4_K_M when there is a choice), or the
    /// whole safetensors folder.
    Auto,
    /// A quantization tag, matched against the GGUF file names (`Q4_K_M`, `q8_0`, `F16`…).
    Tag(String),
    /// One file of the repository (a split GGUF's first shard brings the other shards).
    File(String),
}

/// A model on the Hugging Face Hub (or a server with its URL layout, `HF_ENDPOINT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfName {
    /// `org/name`.
    pub repo: String,
    /// Branch, tag or commit: `main` unless the name says `@rev` or `/resolve/rev/`.
    pub revision: String,
    /// What to take from the repository.
    pub selector: Selector,
}

const DEFAULT_REVISION: &str = "main";

/// Prefixes that make a name a Hub name whatever follows.
const PREFIXES: &[&str] = &[
    "hf://",
    "https://huggingface.co/",
    "http://huggingface.co/",
    "https://hf.co/",
    "huggingface.co/",
    "hf.co/",
];

impl HfName {
    /// A Hub name for `repo` (`org/name`) and an optional file in it, as `--hf-repo`/`--hf-file`
    /// give them (the repo may carry `:tag` and `@revision`).
    pub fn from_repo_and_file(repo: &str, file: Option<&str>) -> Result<Self, HubError> {
        let mut name = parse_explicit(repo)?;
        if let Some(file) = file {
            if file.is_empty() || file.starts_with('/') || file.split('/').any(|s| s == "..") {
                return Err(bad(repo, "the file must be a relative path inside the repository"));
            }
            name.selector = Selector::File(file.to_owned());
        }
        Ok(name)
    }

    /// Parses `s` as a Hub name. `Ok(None)`: `s` does not look like one (a file path, a catalog
    /// name). A bare `org/repo[:tag]` counts only when both parts are valid repository name
    /// parts and it does not end like a model file; prefixed names (`hf://`, `hf.co/`, Hub URLs)
    /// always count, and a malformed one is an error.
    pub fn parse(s: &str) -> Result<Option<Self>, HubError> {
        if PREFIXES.iter().any(|p| s.starts_with(p)) {
            return parse_explicit(s).map(Some);
        }
        let bare_candidate = s.matches('/').count() == 1
            && !s.starts_with(['.', '/', '~'])
            && !looks_like_file(s)
            && s.split('/').all(|part| valid_part(strip_suffixes(part)));
        if bare_candidate { parse_explicit(s).map(Some) } else { Ok(None) }
    }

    /// The name as `org/repo[@rev][:tag|/file]`, for messages.
    pub fn display(&self) -> String {
        let rev =
            if self.revision == DEFAULT_REVISION { String::new() } else { format!("@{}", self.revision) };
        match &self.selector {
            Selector::Auto => format!("{}{rev}", self.repo),
            Selector::Tag(t) => format!("{}{rev}:{t}", self.repo),
            Selector::File(f) => format!("{}{rev}/{f}", self.repo),
        }
    }
}

fn bad(name: &str, why: &str) -> HubError {
    HubError::BadName { name: name.to_owned(), why: why.to_owned() }
}

fn looks_like_file(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    [".gguf", ".safetensors", ".bin", ".json"].iter().any(|ext| lower.ends_with(ext))
}

/// `name@rev:tag` → `name` (for the validity check of a bare name).
fn strip_suffixes(part: &str) -> &str {
    let part = part.split_once(':').map_or(part, |(p, _)| p);
    part.split_once('@').map_or(part, |(p, _)| p)
}

/// A repository owner or name: letters, digits, `-`, `_`, `.`; not starting with `-` or `.`.
fn valid_part(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 96
        && !p.starts_with(['-', '.'])
        && !p.ends_with('.')
        && !p.contains("--")
        && !p.contains("..")
        && p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn parse_explicit(s: &str) -> Result<HfName, HubError> {
    let rest = PREFIXES.iter().find_map(|p| s.strip_prefix(p)).unwrap_or(s);
    let mut segments: Vec<&str> = rest.split('/').collect();
    if segments.len() < 2 {
        return Err(bad(s, "expected org/repo"));
    }
    let owner = segments.remove(0);
    let mut repo_part = segments.remove(0);
    let mut revision = DEFAULT_REVISION.to_owned();
    let mut selector = Selector::Auto;
    // `org/repo:tag` (only without a file part: a file path may contain ':').
    if segments.is_empty()
        && let Some((r, tag)) = repo_part.rsplit_once(':')
    {
        if !valid_tag(tag) {
            return Err(bad(s, "the tag after ':' may hold only letters, digits, '-', '_' and '.'"));
        }
        repo_part = r;
        if !tag.eq_ignore_ascii_case("latest") {
            selector = Selector::Tag(tag.to_owned());
        }
    }
    if let Some((r, rev)) = repo_part.split_once('@') {
        if rev.is_empty() {
            return Err(bad(s, "empty revision after '@'"));
        }
        repo_part = r;
        revision = rev.to_owned();
    }
    if !valid_part(owner) || !valid_part(repo_part) {
        return Err(bad(s, "a repository is org/name with letters, digits, '-', '_' and '.'"));
    }
    // Hub URLs: `org/repo/resolve/<rev>/<file>` or `org/repo/blob/<rev>/<file>`.
    if segments.len() >= 3 && matches!(segments[0], "resolve" | "blob") && !s.starts_with("hf://") {
        revision = segments[1].to_owned();
        segments.drain(..2);
    }
    let file = segments.join("/");
    if !file.is_empty() {
        if segments.iter().any(|seg| seg.is_empty() || *seg == "..") {
            return Err(bad(s, "the file must be a relative path inside the repository"));
        }
        selector = Selector::File(file);
    }
    Ok(HfName { repo: format!("{owner}/{repo_part}"), revision, selector })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn p(s: &str) -> HfName {
        HfName::parse(s).unwrap().unwrap_or_else(|| panic!("{s} should be a Hub name"))
    }

    fn name(repo: &str, rev: &str, selector: Selector) -> HfName {
        HfName { repo: repo.into(), revision: rev.into(), selector }
    }

    #[test]
    fn names_people_type() {
        assert_eq!(p("org/repo"), name("org/repo", "main", Selector::Auto));
        assert_eq!(p("org/repo:Q4_K_M"), name("org/repo", "main", Selector::Tag("Q4_K_M".into())));
        assert_eq!(p("org/repo:latest"), name("org/repo", "main", Selector::Auto));
        assert_eq!(p("org/repo@v1.0:q8_0"), name("org/repo", "v1.0", Selector::Tag("q8_0".into())));
        assert_eq!(p("hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q4_K_M").repo, "bartowski/Qwen2.5-0.5B-GGUF");
        assert_eq!(p("huggingface.co/org/repo").selector, Selector::Auto);
        assert_eq!(
            p("hf://org/repo/sub/model-Q4_0.gguf"),
            name("org/repo", "main", Selector::File("sub/model-Q4_0.gguf".into()))
        );
        assert_eq!(p("hf://org/repo@dev/m.gguf"), name("org/repo", "dev", Selector::File("m.gguf".into())));
        assert_eq!(
            p("https://huggingface.co/org/repo/resolve/abc123/m.gguf"),
            name("org/repo", "abc123", Selector::File("m.gguf".into()))
        );
        assert_eq!(
            p("https://huggingface.co/org/repo/blob/main/dir/m.gguf"),
            name("org/repo", "main", Selector::File("dir/m.gguf".into()))
        );
    }

    #[test]
    fn paths_and_catalog_names_are_not_hub_names() {
        for s in ["smollm2", "model.gguf", "models/model.gguf", "./org/repo", "/abs/path", "a/b/c", "~/x"] {
            assert_eq!(HfName::parse(s).unwrap(), None, "{s}");
        }
        assert_eq!(HfName::parse("dir/config.json").unwrap(), None);
    }

    #[test]
    fn malformed_prefixed_names_are_errors() {
        for s in ["hf://org", "hf://org/re po", "hf://org/repo:", "hf.co/org/repo@:x", "hf://org/repo/../x"] {
            let e = HfName::parse(s).expect_err(s);
            assert!(matches!(e, HubError::BadName { .. }), "{s}: {e}");
        }
    }

    #[test]
    fn repo_and_file_flags() {
        let n = HfName::from_repo_and_file("org/repo", Some("m-Q4_0.gguf")).unwrap();
        assert_eq!(n.selector, Selector::File("m-Q4_0.gguf".into()));
        assert_eq!(
            HfName::from_repo_and_file("org/repo:Q8_0", None).unwrap().selector,
            Selector::Tag("Q8_0".into())
        );
        assert!(HfName::from_repo_and_file("org/repo", Some("../x")).is_err());
        assert_eq!(n.display(), "org/repo/m-Q4_0.gguf");
    }
}
