//! The engine-owned KV cache.
