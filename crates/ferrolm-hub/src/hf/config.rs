//! The Hub settings people already have: `HF_ENDPOINT`, `HF_TOKEN` (or the token file
//! `huggingface-cli login` writes), `HF_HOME`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`.

use std::path::{Path, PathBuf};

/// Where the Hub is, who we are, where its cache is.
#[derive(Clone)]
pub struct HubConfig {
    /// `HF_ENDPOINT`, default `https://huggingface.co`, without a trailing `/`.
    pub endpoint: String,
    /// `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the file `HF_TOKEN_PATH` or
    /// `$HF_HOME/token`.
    pub token: Option<String>,
    /// `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`.
    pub cache: PathBuf,
    /// `HF_HUB_OFFLINE` is true: use the cache only.
    pub offline: bool,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("cache", &self.cache)
            .field("offline", &self.offline)
            .finish()
    }
}

/// The default endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `1`, `true`, `yes`, `on` (any case) as huggingface_hub reads boolean variables.
fn truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

impl HubConfig {
    /// The settings from the environment, as `huggingface_hub` reads them.
    pub fn from_env() -> Self {
        Self::from_vars(&var)
    }

    /// The settings from `get` (a stand-in for the environment, for tests).
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Self {
        let home = get("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let cache = get("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| get("HOME").map(|h| Path::new(&h).join(".cache")))
                .or_else(dirs::cache_dir)
                .unwrap_or_else(|| PathBuf::from(".cache"));
            cache.join("huggingface")
        });
        let cache = get("HF_HUB_CACHE")
            .or_else(|| get("HUGGINGFACE_HUB_CACHE"))
            .map_or_else(|| home.join("hub"), PathBuf::from);
        let token_file = get("HF_TOKEN_PATH").map_or_else(|| home.join("token"), PathBuf::from);
        let token = get("HF_TOKEN")
            .or_else(|| get("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| std::fs::read_to_string(token_file).ok())
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let endpoint = get("HF_ENDPOINT")
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
            .trim_end_matches('/')
            .to_owned();
        let offline = get("HF_HUB_OFFLINE").is_some_and(|v| truthy(&v));
        Self { endpoint, token, cache, offline }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> HubConfig {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        HubConfig::from_vars(&move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_follow_huggingface_hub() {
        let c = cfg(&[("HOME", "/home/u")]);
        assert_eq!(c.endpoint, "https://huggingface.co");
        assert_eq!(c.cache, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert!(!c.offline && c.token.is_none());
        let c = cfg(&[("XDG_CACHE_HOME", "/x"), ("HF_HUB_OFFLINE", "ON")]);
        assert_eq!(c.cache, PathBuf::from("/x/huggingface/hub"));
        assert!(c.offline);
        let c = cfg(&[("HF_HOME", "/h"), ("HF_HUB_CACHE", "/c"), ("HF_ENDPOINT", "http://127.0.0.1:9/")]);
        assert_eq!((c.cache, c.endpoint.as_str()), (PathBuf::from("/c"), "http://127.0.0.1:9"));
    }

    #[test]
    fn token_from_variable_or_login_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "hf_file\n").unwrap();
        let home = dir.path().to_str().unwrap();
        assert_eq!(cfg(&[("HF_HOME", home)]).token.as_deref(), Some("hf_file"));
        assert_eq!(cfg(&[("HF_HOME", home), ("HF_TOKEN", "hf_env")]).token.as_deref(), Some("hf_env"));
        assert_eq!(cfg(&[("HF_HOME", "/nonexistent")]).token, None);
        assert!(!format!("{:?}", cfg(&[("HF_TOKEN", "hf_secret")])).contains("hf_secret"));
    }
}
