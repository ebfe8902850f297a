//! KV-cache options shared by `generate`, `chat`, `serve`, `perplexity` and `bench`: the
//! storage types and the eviction policy.

use ferrolm::kv::{CacheOptions, KvType, PolicyKind};

/// Storage types of the KV cache.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct KvTypeArgs {
    /// Storage type of cached keys: f16 (llama.cpp's default), f32, q8_0 or q4_0.
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = parse_kv_type)]
    pub k: KvType,
    /// Storage type of cached values: f16, f32, q8_0 or q4_0.
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = parse_kv_type)]
    pub v: KvType,
}

/// Parses a KV cache type name (`f16`, `f32`, `q8_0`, `q4_0`).
pub(crate) fn parse_kv_type(s: &str) -> Result<KvType, String> {
    KvType::from_name(s).ok_or_else(|| format!("unknown cache type '{s}' (use f16, f32, q8_0 or q4_0)"))
}

/// How the KV cache is kept bounded.
#[derive(clap::Args, Debug, Clone)]
pub struct CacheArgs {
    /// Which tokens to evict when the cache is full: none (stop at the context size), sliding
    /// (keep the protected prefix and the last --eviction-window tokens), h2o (heavy hitters by
    /// accumulated attention plus a recent window) or snapkv (compress the prompt by the
    /// attention of its last --eviction-window tokens).
    #[arg(long = "eviction-policy", default_value = "none", value_parser = parse_policy)]
    pub eviction_policy: PolicyKind,
    /// Recent window (sliding, h2o) or observation window (snapkv), in tokens.
    #[arg(long = "eviction-window", default_value_t = 256)]
    pub eviction_window: usize,
    /// Tokens at the start that are never evicted (attention sinks).
    #[arg(long = "protected-prefix", default_value_t = 4)]
    pub protected_prefix: usize,
    /// Most tokens cached per sequence (default: the context size).
    #[arg(long = "kv-budget")]
    pub kv_budget: Option<usize>,
    /// Evict when available memory (MemAvailable, or the cgroup's limit minus its usage) falls
    /// below this many MiB.
    #[arg(long = "memory-threshold-mb")]
    pub memory_threshold_mb: Option<u64>,
    /// An eviction keeps this fraction of the limit (or of the cache, under memory pressure).
    #[arg(long = "evict-ratio", default_value_t = 0.9)]
    pub evict_ratio: f32,
}

impl CacheArgs {
    /// Rejects combinations that would silently do nothing: `--memory-threshold-mb` only acts
    /// through an eviction policy (with `none` the cache cannot shrink).
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(mb) = self.memory_threshold_mb
            && self.eviction_policy == PolicyKind::None
        {
            anyhow::bail!(
                "--memory-threshold-mb {mb} needs an eviction policy: with --eviction-policy none \
                 the KV cache cannot shrink (add --eviction-policy sliding, h2o or snapkv)"
            );
        }
        Ok(())
    }

    /// The library's options.
    pub fn options(&self) -> CacheOptions {
        CacheOptions {
            policy: self.eviction_policy,
            window: self.eviction_window,
            protected_prefix: self.protected_prefix,
            kv_budget: self.kv_budget,
            memory_threshold_mb: self.memory_threshold_mb,
            target_ratio: self.evict_ratio,
        }
    }
}

fn parse_policy(s: &str) -> Result<PolicyKind, String> {
    PolicyKind::from_name(s)
        .ok_or_else(|| format!("unknown eviction policy '{s}' (use none, sliding, h2o or snapkv)"))
}
