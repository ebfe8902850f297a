//! Option maps from Elixir (already checked and normalised by `Ferrolm.Options`) to the
//! library's parameter structs.

use ferrolm::constrain::ConstraintSpec;
use ferrolm::decoder::GenerateParams;
use ferrolm::kv::{CacheOptions, KvType, PolicyKind};
use ferrolm::session::SessionOptions;
use rustler::{Decoder, Encoder, Term};

/// `map[key]` decoded, `None` when the key is absent or `nil`.
pub(crate) fn get<'a, T: Decoder<'a>>(map: Term<'a>, key: &str) -> Result<Option<T>, String> {
    let env = map.get_env();
    let k = rustler::types::atom::Atom::from_str(env, key).map_err(|_| format!("bad key {key}"))?;
    match map.map_get(k.encode(env)) {
        Ok(v) if v.is_atom() && v.atom_to_string().is_ok_and(|a| a == "nil") => Ok(None),
        Ok(v) => v.decode().map(Some).map_err(|_| format!("option {key}: wrong type")),
        Err(_) => Ok(None),
    }
}

/// Generation parameters: `max_tokens`, the sampler's knobs, `stop`, `ignore_eos`, and one of
/// `grammar` (Lark), `json_schema`, `regex`.
pub(crate) fn generate_params(map: Term) -> Result<GenerateParams, String> {
    let mut p = GenerateParams {
        max_tokens: get::<u64>(map, "max_tokens")?.map(|n| n as usize),
        ..GenerateParams::default()
    };
    let s = &mut p.sampler;
    macro_rules! set {
        ($field:expr, $key:literal, $ty:ty) => {
            if let Some(v) = get::<$ty>(map, $key)? {
                $field = v as _;
            }
        };
    }
    set!(s.temperature, "temp", f64);
    set!(s.top_k, "top_k", u64);
    set!(s.top_p, "top_p", f64);
    set!(s.min_p, "min_p", f64);
    set!(s.typical_p, "typical_p", f64);
    set!(s.repeat_penalty, "penalty_repeat", f64);
    set!(s.frequency_penalty, "penalty_freq", f64);
    set!(s.presence_penalty, "penalty_present", f64);
    set!(s.penalty_last_n, "penalty_last_n", i64);
    s.seed = get::<u64>(map, "seed")?;
    if let Some(stop) = get::<Vec<String>>(map, "stop")? {
        p.stop = stop;
    }
    p.ignore_eos = get::<bool>(map, "ignore_eos")?.unwrap_or(false);
    p.constraint = constraint(map)?;
    Ok(p)
}

fn constraint(map: Term) -> Result<Option<ConstraintSpec>, String> {
    let grammar = get::<String>(map, "grammar")?;
    let env = map.get_env();
    let schema = match map.map_get(
        rustler::types::atom::Atom::from_str(env, "json_schema").map_err(|e| format!("{e:?}"))?.encode(env),
    ) {
        Ok(t) if !(t.is_atom() && t.atom_to_string().is_ok_and(|a| a == "nil")) => Some(t),
        _ => None,
    };
    match (grammar, schema) {
        (Some(_), Some(_)) => Err("give either grammar: or json_schema:, not both".into()),
        (Some(g), None) => Ok(Some(ConstraintSpec::grammar(&g))),
        (None, Some(t)) => {
            let value = match t.decode::<String>() {
                Ok(text) => serde_json::from_str(&text).map_err(|e| format!("json_schema: not JSON: {e}"))?,
                Err(_) => crate::term_json::to_json(t).map_err(|e| format!("json_schema: {e}"))?,
            };
            Ok(Some(ConstraintSpec::JsonSchema(value)))
        }
        (None, None) => Ok(get::<String>(map, "regex")?.map(ConstraintSpec::Regex)),
    }
}

/// Context options: `n_ctx`, `n_batch`, `type_k`, `type_v`, and the eviction policy
/// (`kv_policy`, `kv_window`, `kv_protected_prefix`, `kv_budget`, `kv_memory_threshold_mb`,
/// `kv_target_ratio`).
pub(crate) fn session_options(map: Term) -> Result<SessionOptions, String> {
    let mut o = SessionOptions::default();
    if let Some(n) = get::<u64>(map, "n_ctx")? {
        o.n_ctx = n as usize;
    }
    if let Some(n) = get::<u64>(map, "n_batch")? {
        o.n_batch = n as usize;
    }
    let (k, v, c) = kv_options(map)?;
    (o.type_k, o.type_v, o.cache) = (k.unwrap_or(o.type_k), v.unwrap_or(o.type_v), c);
    Ok(o)
}

/// Cache types and eviction options shared by contexts and servers.
pub(crate) fn kv_options(map: Term) -> Result<(Option<KvType>, Option<KvType>, CacheOptions), String> {
    let kv_type = |key: &str| -> Result<Option<KvType>, String> {
        get::<String>(map, key)?
            .map(|n| KvType::from_name(&n).ok_or(format!("{key}: unknown KV cache type {n:?}")))
            .transpose()
    };
    let mut c = CacheOptions::default();
    if let Some(p) = get::<String>(map, "kv_policy")? {
        c.policy = PolicyKind::from_name(&p)
            .ok_or(format!("kv_policy: unknown policy {p:?} (none, sliding, h2o, snapkv)"))?;
    }
    if let Some(n) = get::<u64>(map, "kv_window")? {
        c.window = n as usize;
    }
    if let Some(n) = get::<u64>(map, "kv_protected_prefix")? {
        c.protected_prefix = n as usize;
    }
    c.kv_budget = get::<u64>(map, "kv_budget")?.map(|n| n as usize).or(c.kv_budget);
    c.memory_threshold_mb = get::<u64>(map, "kv_memory_threshold_mb")?.or(c.memory_threshold_mb);
    if let Some(r) = get::<f64>(map, "kv_target_ratio")? {
        c.target_ratio = r as f32;
    }
    Ok((kv_type("type_k")?, kv_type("type_v")?, c))
}
