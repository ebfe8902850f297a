//! `config.json` → GGUF metadata, the way llama.cpp's converter writes it.
//!
//! A Hugging Face folder's configuration is translated once into the GGUF keys ferrolm reads
//! from any GGUF file, so one parser ([`ModelConfig::from_gguf`](crate::model::ModelConfig))
//! serves both formats and `ferrolm convert` writes exactly the metadata the model ran with.

use serde_json::{Map, Value};

use crate::format::gguf::{MetaArray, MetaValue};
use crate::model::config::Arch;
use crate::{Error, Result};

/// What the tensor mapping needs to know besides the metadata.
#[derive(Clone, Debug)]
pub struct HfLayout {
    /// Architecture family.
    pub arch: Arch,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head size.
    pub head_dim: usize,
    /// Whether the LM head is the embedding table.
    pub tied: bool,
    /// Per-pair RoPE frequency factors computed from the config (Llama 3 scaling).
    pub rope_freqs: Option<Vec<f32>>,
    /// LongRoPE long and short factors.
    pub longrope: Option<(Vec<f32>, Vec<f32>)>,
}

/// The `expert_*` keys of a mixture-of-experts config (none for a dense model): experts, top k,
/// expert and shared-expert sizes, and whether the top-k weights are normalised (transformers'
/// `norm_topk_prob`; Mixtral always normalises).
fn experts(c: &Cfg<'_>, arch: Arch, model_type: &str, put: &mut impl FnMut(&str, MetaValue)) -> Result<()> {
    let n_expert = match c.opt_usize("num_local_experts")? {
        Some(n) => Some(n),
        None => c.opt_usize("num_experts")?,
    };
    let moe_arch = arch.is_moe() || model_type == "mixtral";
    let Some(n_expert) = n_expert.filter(|_| moe_arch) else {
        if moe_arch {
            return Err(Error::Config(format!("config.json: {model_type} without num_experts")));
        }
        return Ok(());
    };
    if c.opt_usize("decoder_sparse_step")?.is_some_and(|s| s != 1)
        || c.get("mlp_only_layers").and_then(Value::as_array).is_some_and(|l| !l.is_empty())
    {
        return Err(Error::Config(
            "config.json: dense layers between expert layers (decoder_sparse_step, mlp_only_layers) are not supported"
                .into(),
        ));
    }
    let u32v = |n: usize| MetaValue::U32(n.min(u32::MAX as usize) as u32);
    put("expert_count", u32v(n_expert));
    put("expert_used_count", u32v(c.usize("num_experts_per_tok")?));
    let ff = match c.opt_usize("moe_intermediate_size")? {
        Some(n) => n,
        None => c.usize("intermediate_size")?,
    };
    put("expert_feed_forward_length", u32v(ff));
    let shared = match c.opt_usize("shared_expert_intermediate_size")? {
        Some(n) => Some(n),
        None => c.opt_usize("shared_intermediate_size")?,
    };
    if let Some(n) = shared.filter(|&n| n > 0) {
        put("expert_shared_feed_forward_length", u32v(n));
    }
    // Mixtral, Granite MoE, Qwen 3.5 MoE and Qwen3-Next (as llama.cpp runs it) always normalise;
    // the others say so in `norm_topk_prob`.
    let always =
        model_type == "mixtral" || matches!(arch, Arch::GraniteMoe | Arch::Qwen35Moe | Arch::Qwen3Next);
    let norm = always || c.opt_bool("norm_topk_prob")?.unwrap_or(false);
    put("expert_weights_norm", MetaValue::Bool(norm));
    Ok(())
}

/// Checks that SmolLM 3's unrotated layers are the ones llama.cpp assumes (every fourth).
fn smollm3_rope_layers(c: &Cfg<'_>, n_layer: usize) -> Result<()> {
    let Some(Value::Array(flags)) = c.get("no_rope_layers") else { return Ok(()) };
    let ok = flags.len() == n_layer
        && flags.iter().enumerate().all(|(il, f)| f.as_i64().map(|v| v != 0) == Some((il + 1) % 4 != 0));
    if !ok {
        return Err(Error::Config(
            "config.json: no_rope_layers must leave every fourth layer without RoPE (layers 3, 7, …)".into(),
        ));
    }
    Ok(())
}

/// Reads `config.json` fields with errors that name the key.
struct Cfg<'a> {
    map: &'a Map<String, Value>,
}

impl Cfg<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => {
                v.as_u64().and_then(|n| usize::try_from(n).ok()).map(Some).ok_or_else(|| {
                    Error::Config(format!("config.json: '{key}' must be a non-negative integer"))
                })
            }
        }
    }

    fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| Error::Config(format!("config.json: missing '{key}'")))
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| Error::Config(format!("config.json: '{key}' must be a number"))),
        }
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| Error::Config(format!("config.json: '{key}' must be a boolean"))),
        }
    }
}

/// The RoPE settings of a config: `rope_parameters` (transformers 5) or `rope_theta` +
/// `rope_scaling` (earlier versions); for Gemma 3, the global layers' entry.
fn rope_section(c: &Cfg<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(theta) = c.get("rope_theta") {
        out.insert("rope_theta".into(), theta.clone());
    }
    for key in ["rope_scaling", "rope_parameters"] {
        if let Some(Value::Object(m)) = c.get(key) {
            let m = match m.get("full_attention") {
                Some(Value::Object(inner)) => inner,
                _ => m,
            };
            for (k, v) in m {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(t) = out.get("type").cloned() {
        out.entry("rope_type").or_insert(t);
    }
    out
}

fn f32_list(v: Option<&Value>, what: &str) -> Result<Vec<f32>> {
    let arr = v
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Config(format!("config.json: '{what}' must be a list of numbers")))?;
    arr.iter()
        .map(|x| x.as_f64().map(|f| f as f32))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::Config(format!("config.json: '{what}' must be a list of numbers")))
}

/// Llama 3 RoPE scaling as per-pair frequency factors (the converter's `rope_freqs.weight`).
fn llama3_factors(rope: &Map<String, Value>, base: f64, head_dim: usize) -> Vec<f32> {
    let num = |k: &str, d: f64| rope.get(k).and_then(Value::as_f64).unwrap_or(d);
    let factor = num("factor", 8.0);
    let low = num("low_freq_factor", 1.0);
    let high = num("high_freq_factor", 4.0);
    let old_ctx = num("original_max_position_embeddings", 8192.0);
    let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf((2 * i) as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect()
}

/// Gemma 4's proportional RoPE as per-pair frequency factors (the converter's
/// `rope_freqs.weight`): the first `partial · head_dim / 2` pairs rotate as usual, the others'
/// frequencies are divided by 1e30 (they do not rotate).
fn proportional_factors(partial: f64, head_dim: usize) -> Vec<f32> {
    let n_rot = ((partial * head_dim as f64) as usize / 2).min(head_dim / 2);
    (0..head_dim / 2).map(|i| if i < n_rot { 1.0 } else { 1e30 }).collect()
}

/// Qwen 3.5's gated delta net keys as llama.cpp's converter writes them, and
/// `ssm.v_heads_grouped`: the folder keeps the value heads in Hugging Face's order (the
/// converter reorders them, ferrolm reads them as stored).
fn qwen35_keys(c: &Cfg<'_>, arch: Arch, n_layer: usize, put: &mut impl FnMut(&str, MetaValue)) -> Result<()> {
    let recurrent: Vec<bool> = match c.get("layer_types").and_then(Value::as_array) {
        Some(types) => types.iter().map(|t| t.as_str() == Some("linear_attention")).collect(),
        None => {
            let every = c.opt_usize("full_attention_interval")?.unwrap_or(4).max(1);
            (0..n_layer).map(|il| (il + 1) % every != 0).collect()
        }
    };
    let u32v = |n: usize| MetaValue::U32(n.min(u32::MAX as usize) as u32);
    let (n_v, dv) = (c.usize("linear_num_value_heads")?, c.usize("linear_value_head_dim")?);
    put("ssm.conv_kernel", u32v(c.usize("linear_conv_kernel_dim")?));
    put("ssm.state_size", u32v(c.usize("linear_key_head_dim")?));
    put("ssm.group_count", u32v(c.usize("linear_num_key_heads")?));
    put("ssm.time_step_rank", u32v(n_v));
    put("ssm.inner_size", u32v(n_v * dv));
    put("attention.recurrent_layers", MetaValue::Array(MetaArray::Bool(recurrent)));
    put("ssm.v_heads_grouped", MetaValue::Bool(true));
    if arch != Arch::Qwen3Next {
        // Qwen 3.5's multi-axis RoPE sections (text gives every section the same position, so
        // ferrolm does not read them; llama.cpp's loader requires the key): as llama.cpp's
        // converter writes them, padded to four, [11, 11, 10, 0] when the config has none.
        let sections = rope_section(c)
            .get("mrope_section")
            .and_then(Value::as_array)
            .map(|v| v.iter().map(|x| x.as_i64().unwrap_or(0) as i32).collect::<Vec<_>>())
            .unwrap_or_else(|| vec![11, 11, 10]);
        let sections: Vec<i32> = sections.into_iter().chain(std::iter::repeat(0)).take(4).collect();
        put("rope.dimension_sections", MetaValue::Array(MetaArray::I32(sections)));
    }
    if c.opt_bool("attention_bias")? == Some(true) {
        return Err(Error::Config("config.json: Qwen 3.5 with attention biases is not supported".into()));
    }
    Ok(())
}

/// LFM2's keys as llama.cpp's converter writes them: no key/value heads for the convolution
/// layers, the convolution's width, its epsilon's own name, and the feed-forward width its MLP
/// derives from `intermediate_size` (with `block_auto_adjust_ff_dim`: two thirds, times
/// `block_ffn_dim_multiplier` rounded up to `block_multiple_of`). Later entries replace the common
/// keys written before them.
fn lfm2_keys(c: &Cfg<'_>, dims: (usize, usize, usize), put: &mut impl FnMut(&str, MetaValue)) -> Result<()> {
    let (n_layer, n_head_kv, n_ff) = dims;
    let types = c
        .get("layer_types")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Config("config.json: LFM2 without layer_types is not supported".into()))?;
    if types.len() != n_layer {
        return Err(Error::Config(format!("config.json: {} layer_types for {n_layer} layers", types.len())));
    }
    if c.opt_bool("conv_bias")? == Some(true) {
        return Err(Error::Config("config.json: LFM2 with conv_bias is not supported".into()));
    }
    let heads = types.iter().map(|t| if t.as_str() == Some("conv") { 0 } else { n_head_kv as u32 }).collect();
    put("attention.head_count_kv", MetaValue::Array(MetaArray::U32(heads)));
    let l_cache = c.opt_usize("conv_L_cache")?.unwrap_or(3);
    put("shortconv.l_cache", MetaValue::U32(l_cache.min(u32::MAX as usize) as u32));
    if let Some(eps) = c.opt_f64("norm_eps")? {
        put("attention.layer_norm_rms_epsilon", MetaValue::F32(eps as f32));
    }
    let mut ff = c.opt_usize("block_ff_dim")?.unwrap_or(n_ff);
    if c.opt_bool("block_auto_adjust_ff_dim")?.unwrap_or(true) {
        ff = 2 * ff / 3;
        // transformers rounds only with a multiplier (llama.cpp's converter always does).
        if let Some(m) = c.opt_f64("block_ffn_dim_multiplier")? {
            let multiple = c.opt_usize("block_multiple_of")?.unwrap_or(256).max(1);
            ff = ((m * ff as f64) as usize).div_ceil(multiple) * multiple;
        }
    }
    put("feed_forward_length", MetaValue::U32(ff.min(u32::MAX as usize) as u32));
    Ok(())
}

/// Gemma 4's keys beyond Gemma 3's (`dims`: vocabulary size, key/value heads, the sliding
/// layers' head size; `swa`: which layers are sliding), and errors for the variants ferrolm does
/// not run yet. Per-layer arrays replace the scalar keys written before them.
fn gemma4_keys(
    c: &Cfg<'_>,
    dims: (usize, usize, usize),
    swa: &[bool],
    put: &mut impl FnMut(&str, MetaValue),
) -> Result<()> {
    let (n_vocab, n_head_kv, head_dim_swa) = dims;
    let k_eq_v = c.opt_bool("attention_k_eq_v")?.unwrap_or(false);
    let unsupported =
        |what: &str| Err(Error::Config(format!("config.json: Gemma 4 with {what} is not supported yet")));
    if c.get("use_bidirectional_attention").and_then(Value::as_str) == Some("all") {
        return unsupported("bidirectional attention (use_bidirectional_attention 'all')");
    }
    // transformers gives the global layers their own key/value heads only with k_eq_v.
    if let Some(g) = c.opt_usize("num_global_key_value_heads")?.filter(|_| k_eq_v)
        && g != n_head_kv
    {
        let heads = swa.iter().map(|&swa| (if swa { n_head_kv } else { g }) as u32).collect();
        put("attention.head_count_kv", MetaValue::Array(MetaArray::U32(heads)));
    }
    if c.get("hidden_activation").and_then(Value::as_str).is_some_and(|a| a != "gelu_pytorch_tanh") {
        return unsupported("an activation other than gelu_pytorch_tanh");
    }
    let per_layer = c.opt_usize("hidden_size_per_layer_input")?.unwrap_or(0);
    if per_layer > 0 && c.opt_usize("vocab_size_per_layer_input")?.is_some_and(|v| v != n_vocab) {
        return unsupported("a per-layer embedding table of another size than the vocabulary");
    }
    let u32v = |n: usize| MetaValue::U32(n.min(u32::MAX as usize) as u32);
    if c.opt_bool("enable_moe_block")? == Some(true) {
        // Every block's experts run beside its dense MLP.
        put("expert_count", u32v(c.usize("num_experts")?));
        put("expert_used_count", u32v(c.usize("top_k_experts")?));
        put("expert_feed_forward_length", u32v(c.usize("moe_intermediate_size")?));
    }
    put("embedding_length_per_layer_input", u32v(per_layer));
    let n_shared = c.opt_usize("num_kv_shared_layers")?.unwrap_or(0);
    put("attention.shared_kv_layers", u32v(n_shared));
    if c.opt_bool("use_double_wide_mlp")? == Some(true) {
        // The KV-shared layers' MLPs are twice as wide.
        let (n_layer, n_ff) = (c.usize("num_hidden_layers")?, c.usize("intermediate_size")?);
        let first_shared = n_layer.saturating_sub(n_shared);
        let widths = (0..n_layer).map(|il| (if il < first_shared { n_ff } else { 2 * n_ff }) as u32);
        put("feed_forward_length", MetaValue::Array(MetaArray::U32(widths.collect())));
    }
    let sliding = c.get("rope_parameters").map(|p| &p["sliding_attention"]);
    let partial = sliding.and_then(|p| p["partial_rotary_factor"].as_f64()).unwrap_or(1.0);
    if sliding.and_then(|p| p["rope_type"].as_str()).is_some_and(|t| t != "default") {
        return unsupported("scaled RoPE in the sliding layers");
    }
    put("attention.key_length_swa", u32v(head_dim_swa));
    put("attention.value_length_swa", u32v(head_dim_swa));
    put("rope.dimension_count_swa", u32v((head_dim_swa as f64 * partial) as usize));
    Ok(())
}

/// A BERT encoder's `config.json` (`BertModel`, as sentence-transformers folders hold it), with
/// the keys llama.cpp's converter writes. llama.cpp computes every BERT's GELU with the tanh
/// approximation, and so does ferrolm, also for `hidden_act: "gelu"` (erf): the two differ by
/// less than 1e-3 per activation.
fn translate_bert(c: &Cfg<'_>, name: &str) -> Result<(Vec<(String, MetaValue)>, HfLayout)> {
    let arch = Arch::Bert;
    let act = c.get("hidden_act").and_then(Value::as_str).unwrap_or("gelu");
    if !matches!(act, "gelu" | "gelu_new" | "gelu_pytorch_tanh") {
        return Err(Error::Config(format!("config.json: BERT with hidden_act '{act}' is not supported")));
    }
    let pos = c.get("position_embedding_type").and_then(Value::as_str).unwrap_or("absolute");
    if pos != "absolute" {
        return Err(Error::Config(format!(
            "config.json: BERT with {pos} position embeddings is not supported"
        )));
    }
    let n_embd = c.usize("hidden_size")?;
    let n_layer = c.usize("num_hidden_layers")?;
    let n_head = c.usize("num_attention_heads")?;
    if n_head == 0 || n_embd % n_head != 0 {
        return Err(Error::Config(format!(
            "config.json: hidden_size {n_embd} is not a multiple of num_attention_heads {n_head}"
        )));
    }
    let u32v = |key: &str| -> Result<MetaValue> {
        u32::try_from(c.usize(key)?)
            .map(MetaValue::U32)
            .map_err(|_| Error::Config(format!("config.json: '{key}' is too large")))
    };
    let a = arch.name();
    let mut kv: Vec<(String, MetaValue)> = vec![
        ("general.architecture".into(), MetaValue::String(a.into())),
        ("general.name".into(), MetaValue::String(name.into())),
    ];
    for (key, src) in [
        ("context_length", "max_position_embeddings"),
        ("embedding_length", "hidden_size"),
        ("block_count", "num_hidden_layers"),
        ("feed_forward_length", "intermediate_size"),
        ("attention.head_count", "num_attention_heads"),
        ("vocab_size", "vocab_size"),
    ] {
        kv.push((format!("{a}.{key}"), u32v(src)?));
    }
    let eps = c.opt_f64("layer_norm_eps")?.unwrap_or(1e-12);
    kv.push((format!("{a}.attention.layer_norm_epsilon"), MetaValue::F32(eps as f32)));
    kv.push((format!("{a}.attention.causal"), MetaValue::Bool(false)));
    let types = c.opt_usize("type_vocab_size")?.unwrap_or(2);
    kv.push((format!("{a}.token_type_count"), MetaValue::U32(types.min(u32::MAX as usize) as u32)));
    let head_dim = n_embd / n_head;
    let layout = HfLayout {
        arch,
        n_layer,
        n_head,
        n_head_kv: n_head,
        head_dim,
        tied: true,
        rope_freqs: None,
        longrope: None,
    };
    Ok((kv, layout))
}

/// The `{arch}.pooling_type` code a sentence-transformers folder asks for (mean 1, CLS 2, last
/// token 3), read as llama.cpp's converter reads it: the Pooling module named in `modules.json`
/// (default `1_Pooling`), its `pooling_mode_*_token(s)` flags or its `pooling_mode` name.
pub fn sentence_transformers_pooling(dir: &std::path::Path) -> Option<u32> {
    let read = |p: std::path::PathBuf| -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
    };
    let module = read(dir.join("modules.json"))
        .and_then(|m| {
            m.as_array()?.iter().find_map(|m| {
                m["type"].as_str()?.ends_with("Pooling").then(|| m["path"].as_str().map(str::to_string))?
            })
        })
        .unwrap_or_else(|| "1_Pooling".into());
    let v = read(dir.join(module).join("config.json"))?;
    let on = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    let by_flag =
        [("pooling_mode_mean_tokens", 1), ("pooling_mode_cls_token", 2), ("pooling_mode_lasttoken", 3)]
            .into_iter()
            .find(|(k, _)| on(k))
            .map(|(_, code)| code);
    by_flag.or_else(|| match v.get("pooling_mode").and_then(Value::as_str)? {
        "mean" => Some(1),
        "cls" => Some(2),
        "lasttoken" => Some(3),
        _ => None,
    })
}

/// The text decoder's config of a multimodal folder (Gemma 4's, Qwen 3.5's
/// `*ForConditionalGeneration`: `text_config` as model type `text_type`, with the top level's
/// `tie_word_embeddings` when it has none of its own); the vision and audio towers' tensors are
/// not read.
fn text_config(c: &Cfg<'_>, text_type: &str) -> Result<Value> {
    let Some(Value::Object(text)) = c.get("text_config") else {
        let top = c.get("model_type").and_then(Value::as_str).unwrap_or_default();
        return Err(Error::Config(format!("config.json: model_type '{top}' without a 'text_config' object")));
    };
    let mut text = text.clone();
    text.insert("model_type".into(), Value::String(text_type.into()));
    if let (None, Some(tied)) = (text.get("tie_word_embeddings"), c.get("tie_word_embeddings")) {
        text.insert("tie_word_embeddings".into(), tied.clone());
    }
    Ok(Value::Object(text))
}

/// Translates a parsed `config.json` into GGUF metadata entries and the tensor layout.
pub fn translate(json: &Value, name: &str) -> Result<(Vec<(String, MetaValue)>, HfLayout)> {
    let map = json.as_object().ok_or_else(|| Error::Config("config.json is not a JSON object".into()))?;
    let c = Cfg { map };
    let model_type = c
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Config("config.json: missing 'model_type'".into()))?;
    let arch = match model_type {
        "bert" => return translate_bert(&c, name),
        "gemma4" => return translate(&text_config(&c, "gemma4_text")?, name),
        "qwen3_5" => return translate(&text_config(&c, "qwen3_5_text")?, name),
        "qwen3_5_moe" => return translate(&text_config(&c, "qwen3_5_moe_text")?, name),
        "llama" | "mistral" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        "phi3" => Arch::Phi3,
        "gemma" => Arch::Gemma,
        "gemma2" => Arch::Gemma2,
        "gemma3_text" => Arch::Gemma3,
        "gemma4_text" => Arch::Gemma4,
        "mixtral" => Arch::Llama,
        "qwen2_moe" => Arch::Qwen2Moe,
        "qwen3_moe" => Arch::Qwen3Moe,
        "olmoe" => Arch::Olmoe,
        "smollm3" => Arch::SmolLM3,
        "granite" => Arch::Granite,
        "granitemoe" | "granitemoeshared" => Arch::GraniteMoe,
        "gpt_oss" => Arch::GptOss,
        "qwen3_5_text" => Arch::Qwen35,
        "qwen3_5_moe_text" => Arch::Qwen35Moe,
        "qwen3_next" => Arch::Qwen3Next,
        "lfm2" => Arch::Lfm2,
        other => return Err(Error::UnsupportedArchitecture(format!("{other} (config.json model_type)"))),
    };
    let a = arch.name();
    let mut kv: Vec<(String, MetaValue)> = Vec::new();
    let mut put = |k: &str, v: MetaValue| {
        kv.push((if k.starts_with("general.") { k.into() } else { format!("{a}.{k}") }, v))
    };
    let u32v = |n: usize, key: &str| -> Result<MetaValue> {
        u32::try_from(n)
            .map(MetaValue::U32)
            .map_err(|_| Error::Config(format!("config.json: '{key}' is too large")))
    };

    put("general.architecture", MetaValue::String(a.into()));
    put("general.name", MetaValue::String(name.into()));
    let n_embd = c.usize("hidden_size")?;
    let n_layer = c.usize("num_hidden_layers")?;
    let n_head = c.usize("num_attention_heads")?;
    let n_head_kv = c.opt_usize("num_key_value_heads")?.unwrap_or(n_head);
    let n_ff = c.usize("intermediate_size")?;
    let n_vocab = c.usize("vocab_size")?;
    if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
        return Err(Error::Config(format!(
            "config.json: num_attention_heads {n_head} is not a positive multiple of num_key_value_heads {n_head_kv}"
        )));
    }
    let head_dim = match c.opt_usize("head_dim")? {
        Some(d) => d,
        None if n_embd % n_head == 0 => n_embd / n_head,
        None => {
            return Err(Error::Config(format!(
                "config.json: hidden_size {n_embd} is not divisible by num_attention_heads {n_head} and no head_dim is given"
            )));
        }
    };
    // Gemma 4: `head_dim` is the sliding layers' head size, `global_head_dim` the global ones'.
    let (head_dim, head_dim_swa) = match c.opt_usize("global_head_dim")? {
        Some(g) if arch == Arch::Gemma4 && g > 0 => (g, head_dim),
        _ => (head_dim, head_dim),
    };
    let ctx = c.opt_usize("max_position_embeddings")?.unwrap_or(2048);
    let eps = c.opt_f64("rms_norm_eps")?.unwrap_or(1e-6);
    put("vocab_size", u32v(n_vocab, "vocab_size")?);
    put("context_length", u32v(ctx, "max_position_embeddings")?);
    put("embedding_length", u32v(n_embd, "hidden_size")?);
    put("block_count", u32v(n_layer, "num_hidden_layers")?);
    // Gemma 4 may replace this by a width per layer (`gemma4_keys`; a later entry wins).
    put("feed_forward_length", u32v(n_ff, "intermediate_size")?);
    put("attention.head_count", u32v(n_head, "num_attention_heads")?);
    put("attention.head_count_kv", u32v(n_head_kv, "num_key_value_heads")?);
    put("attention.key_length", u32v(head_dim, "head_dim")?);
    put("attention.value_length", u32v(head_dim, "head_dim")?);
    put("attention.layer_norm_rms_epsilon", MetaValue::F32(eps as f32));

    // RoPE.
    let rope = rope_section(&c);
    let base = rope.get("rope_theta").and_then(Value::as_f64).unwrap_or(10_000.0);
    put("rope.freq_base", MetaValue::F32(base as f32));
    // Gemma 4's global layers rotate part of each head through frequency factors (below).
    let partial = match rope.get("partial_rotary_factor").and_then(Value::as_f64) {
        _ if arch == Arch::Gemma4 => None,
        Some(p) => Some(p),
        None => c.opt_f64("partial_rotary_factor")?,
    };
    let rope_dims = partial.map_or(head_dim, |p| (head_dim as f64 * p) as usize);
    if rope_dims == 0 || rope_dims > head_dim || rope_dims % 2 != 0 {
        return Err(Error::Config(format!(
            "config.json: partial_rotary_factor gives {rope_dims} rotary dimensions"
        )));
    }
    put("rope.dimension_count", u32v(rope_dims, "partial_rotary_factor")?);
    let rope_type = rope.get("rope_type").and_then(Value::as_str).unwrap_or("default");
    let factor = rope.get("factor").and_then(Value::as_f64);
    let orig_ctx = match rope.get("original_max_position_embeddings").and_then(Value::as_u64) {
        Some(v) => Some(v as usize),
        None => c.opt_usize("original_max_position_embeddings")?,
    };
    let mut rope_freqs = None;
    let mut longrope = None;
    match rope_type {
        "default" => {}
        "linear" => {
            put("rope.scaling.type", MetaValue::String("linear".into()));
            put("rope.scaling.factor", MetaValue::F32(factor.unwrap_or(1.0) as f32));
        }
        "llama3" => rope_freqs = Some(llama3_factors(&rope, base, rope_dims)),
        "proportional" if arch == Arch::Gemma4 => {
            let p = rope.get("partial_rotary_factor").and_then(Value::as_f64).unwrap_or(1.0);
            rope_freqs = Some(proportional_factors(p, head_dim));
        }
        "yarn" => {
            let factor =
                factor.ok_or_else(|| Error::Config("config.json: yarn scaling without 'factor'".into()))?;
            put("rope.scaling.type", MetaValue::String("yarn".into()));
            put("rope.scaling.factor", MetaValue::F32(factor as f32));
            put(
                "rope.scaling.original_context_length",
                u32v(orig_ctx.unwrap_or(ctx), "original_max_position_embeddings")?,
            );
            for (src, dst) in
                [("beta_fast", "rope.scaling.yarn_beta_fast"), ("beta_slow", "rope.scaling.yarn_beta_slow")]
            {
                if let Some(v) = rope.get(src).and_then(Value::as_f64) {
                    put(dst, MetaValue::F32(v as f32));
                }
            }
            // ggml always rounds the correction range outwards; transformers only by default.
            if rope.get("truncate").and_then(Value::as_bool) == Some(false) {
                put("rope.scaling.yarn_truncate", MetaValue::Bool(false));
            }
            if let Some(af) = rope.get("attention_factor").and_then(Value::as_f64) {
                // An explicit attention factor replaces YaRN's default 0.1·ln(factor) + 1.
                let default = if factor > 1.0 { 0.1 * factor.ln() + 1.0 } else { 1.0 };
                put("rope.scaling.attn_factor", MetaValue::F32((af / default) as f32));
            }
        }
        "longrope" | "su" => {
            let orig = orig_ctx.ok_or_else(|| {
                Error::Config("config.json: longrope without original_max_position_embeddings".into())
            })?;
            let long = f32_list(rope.get("long_factor"), "long_factor")?;
            let short = f32_list(rope.get("short_factor"), "short_factor")?;
            if long.len() != rope_dims / 2 || short.len() != rope_dims / 2 {
                return Err(Error::Config(format!(
                    "config.json: longrope factors must have {} entries (long {}, short {})",
                    rope_dims / 2,
                    long.len(),
                    short.len()
                )));
            }
            let scale = ctx as f64 / orig as f64;
            let af = match rope.get("attention_factor").and_then(Value::as_f64) {
                Some(v) => v,
                None if scale > 1.0 => (1.0 + scale.ln() / (orig as f64).ln()).sqrt(),
                None => 1.0,
            };
            put("rope.scaling.original_context_length", u32v(orig, "original_max_position_embeddings")?);
            put("rope.scaling.attn_factor", MetaValue::F32(af as f32));
            longrope = Some((long, short));
        }
        other => return Err(Error::Config(format!("config.json: RoPE scaling '{other}' is not supported"))),
    }

    // Sliding windows, soft-capping, attention scale.
    let window = c.opt_usize("sliding_window")?.filter(|&w| w > 0);
    let layer_types: Option<Vec<bool>> = match c.get("layer_types") {
        Some(Value::Array(v)) => Some(
            v.iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => Ok(true),
                    // Qwen 3.5's and LFM2's recurrent layers (`qwen35_keys`, `lfm2_keys`)
                    // attend in no window either.
                    Some("full_attention") => Ok(false),
                    Some("linear_attention") if arch.is_qwen_hybrid() => Ok(false),
                    Some("conv") if arch == Arch::Lfm2 => Ok(false),
                    _ => Err(Error::Config(format!("config.json: unknown layer type {t}"))),
                })
                .collect::<Result<_>>()?,
        ),
        _ => None,
    };
    if let Some(lt) = &layer_types
        && lt.len() != n_layer
    {
        return Err(Error::Config(format!(
            "config.json: layer_types has {} entries for {n_layer} layers",
            lt.len()
        )));
    }
    experts(&c, arch, model_type, &mut put)?;
    let mut swa_pattern =
        |flags: Vec<bool>| put("attention.sliding_window_pattern", MetaValue::Array(MetaArray::Bool(flags)));
    match arch {
        Arch::Bert | Arch::NomicBert | Arch::JinaBertV2 | Arch::NomicBertMoe => {
            return Err(Error::Config(format!(
                "config.json: {model_type} folders are not read directly (BERT is, as model_type 'bert'); \
                 convert the folder to GGUF with llama.cpp's convert_hf_to_gguf.py"
            )));
        }
        Arch::GptOss => {
            // llama.cpp's gpt-oss graph has these constants built in, as ferrolm's has.
            let alpha = c.opt_f64("swiglu_alpha")?.unwrap_or(1.702);
            let limit = c.opt_f64("swiglu_limit")?.unwrap_or(7.0);
            if (alpha - 1.702).abs() > 1e-6 || (limit - 7.0).abs() > 1e-6 {
                return Err(Error::Config(format!(
                    "config.json: gpt-oss with swiglu_alpha {alpha} / swiglu_limit {limit} is not supported \
                     (only gpt-oss's 1.702 / 7)"
                )));
            }
            if c.opt_bool("attention_bias")? == Some(false) {
                return Err(Error::Config(
                    "config.json: gpt-oss without attention biases is not supported".into(),
                ));
            }
            if let Some(w) = window {
                swa_pattern(
                    layer_types.clone().unwrap_or_else(|| (0..n_layer).map(|i| i % 2 == 0).collect()),
                );
                put("attention.sliding_window", u32v(w, "sliding_window")?);
            }
        }
        Arch::SmolLM3 => smollm3_rope_layers(&c, n_layer)?,
        Arch::Granite | Arch::GraniteMoe => {
            for (src, dst) in [
                ("embedding_multiplier", "embedding_scale"),
                ("residual_multiplier", "residual_scale"),
                ("attention_multiplier", "attention.scale"),
                ("logits_scaling", "logit_scale"),
            ] {
                if let Some(v) = c.opt_f64(src)? {
                    put(dst, MetaValue::F32(v as f32));
                }
            }
        }
        Arch::Olmoe => {
            if c.get("clip_qkv").is_some_and(|v| !v.is_null()) {
                return Err(Error::Config("config.json: OLMoE's clip_qkv is not supported".into()));
            }
        }
        Arch::Llama | Arch::Phi3 => {
            if let Some(w) = window {
                swa_pattern(layer_types.clone().unwrap_or_else(|| vec![true; n_layer]));
                put("attention.sliding_window", u32v(w, "sliding_window")?);
            }
        }
        Arch::Qwen35 | Arch::Qwen35Moe | Arch::Qwen3Next => qwen35_keys(&c, arch, n_layer, &mut put)?,
        Arch::Lfm2 => lfm2_keys(&c, (n_layer, n_head_kv, n_ff), &mut put)?,
        Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen2Moe | Arch::Qwen3Moe => {
            if c.opt_bool("use_sliding_window")?.unwrap_or(false) {
                return Err(Error::Config(
                    "config.json: use_sliding_window is not supported for Qwen".into(),
                ));
            }
        }
        Arch::Gemma => {}
        Arch::Gemma2 | Arch::Gemma3 | Arch::Gemma4 => {
            if let Some(w) = window {
                let period = if arch == Arch::Gemma2 {
                    2
                } else {
                    c.opt_usize("sliding_window_pattern")?.unwrap_or(6)
                };
                let flags = layer_types
                    .clone()
                    .unwrap_or_else(|| (0..n_layer).map(|i| period == 0 || (i + 1) % period != 0).collect());
                swa_pattern(flags);
                put("attention.sliding_window", u32v(w, "sliding_window")?);
            }
            for (src, dst) in [
                ("attn_logit_softcapping", "attn_logit_softcapping"),
                ("final_logit_softcapping", "final_logit_softcapping"),
            ] {
                if let Some(v) = c.opt_f64(src)? {
                    put(dst, MetaValue::F32(v as f32));
                }
            }
            if let Some(s) = c.opt_f64("query_pre_attn_scalar")?
                && s > 0.0
                && (s - head_dim as f64).abs() > 1e-9
            {
                put("attention.scale", MetaValue::F32((1.0 / s.sqrt()) as f32));
            }
            if matches!(arch, Arch::Gemma3 | Arch::Gemma4) {
                // transformers 5 nests it under `rope_parameters.sliding_attention`.
                let nested =
                    c.get("rope_parameters").and_then(|p| p["sliding_attention"]["rope_theta"].as_f64());
                let local_base = match nested {
                    Some(b) => b,
                    None => c.opt_f64("rope_local_base_freq")?.unwrap_or(10_000.0),
                };
                put("rope.freq_base_swa", MetaValue::F32(local_base as f32));
            }
        }
    }

    if arch == Arch::Gemma4 {
        let swa = layer_types.unwrap_or_else(|| (0..n_layer).map(|i| (i + 1) % 6 != 0).collect());
        gemma4_keys(&c, (n_vocab, n_head_kv, head_dim_swa), &swa, &mut put)?;
    }
    let tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(arch.is_gemma());
    let layout = HfLayout { arch, n_layer, n_head, n_head_kv, head_dim, tied, rope_freqs, longrope };
    Ok((kv, layout))
}

#[cfg(test)]
mod tests {
    use super::translate;
    use crate::format::gguf::{MetaArray, MetaValue};
    use crate::model::config::Arch;

    /// A Gemma 4 text config in small: sliding layers of head size 16, global ones of 32 with one
    /// key/value head (k_eq_v), the last two layers sharing, double-wide MLPs there.
    fn gemma4_text() -> serde_json::Value {
        serde_json::json!({
            "model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 64,
            "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "global_head_dim": 32, "vocab_size": 512, "sliding_window": 8,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                            "sliding_attention", "full_attention"],
            "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 8,
            "vocab_size_per_layer_input": 512, "use_double_wide_mlp": true,
            "attention_k_eq_v": true, "num_global_key_value_heads": 1,
            "final_logit_softcapping": 30.0,
            "rope_parameters": {
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
        })
    }

    /// The last value written for `key` (later entries replace earlier ones in a GGUF).
    fn last<'a>(kv: &'a [(String, MetaValue)], key: &str) -> &'a MetaValue {
        &kv.iter().rev().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key}")).1
    }

    #[test]
    fn gemma4_keys_as_llama_cpp_writes_them() {
        let (kv, layout) = translate(&gemma4_text(), "t").expect("translate");
        assert_eq!(layout.arch, Arch::Gemma4);
        let u32s = |k: &str| match last(&kv, k) {
            MetaValue::Array(MetaArray::U32(v)) => v.clone(),
            MetaValue::U32(v) => vec![*v],
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(u32s("gemma4.attention.key_length"), [32]);
        assert_eq!(u32s("gemma4.attention.key_length_swa"), [16]);
        assert_eq!(u32s("gemma4.rope.dimension_count"), [32]);
        assert_eq!(u32s("gemma4.rope.dimension_count_swa"), [16]);
        assert_eq!(u32s("gemma4.feed_forward_length"), [64, 64, 64, 128, 128]);
        assert_eq!(u32s("gemma4.attention.head_count_kv"), [2, 2, 1, 2, 1]);
        assert_eq!(u32s("gemma4.attention.shared_kv_layers"), [2]);
        let freqs = layout.rope_freqs.expect("proportional RoPE factors");
        assert_eq!(freqs.len(), 16);
        assert!(freqs[..4].iter().all(|&f| f == 1.0) && freqs[4..].iter().all(|&f| f == 1e30));
    }

    #[test]
    fn gemma4_experts_are_written_as_llama_cpp_writes_them() {
        let mut moe = gemma4_text();
        moe["enable_moe_block"] = serde_json::json!(true);
        moe["num_experts"] = serde_json::json!(8);
        moe["moe_intermediate_size"] = serde_json::json!(24);
        let err = translate(&moe, "t").expect_err("no top_k_experts");
        assert!(err.to_string().contains("top_k_experts"), "{err}");
        moe["top_k_experts"] = serde_json::json!(2);
        let (kv, _) = translate(&moe, "t").expect("translate");
        let u32_of = |k: &str| match last(&kv, k) {
            MetaValue::U32(v) => *v,
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(u32_of("gemma4.expert_count"), 8);
        assert_eq!(u32_of("gemma4.expert_used_count"), 2);
        assert_eq!(u32_of("gemma4.expert_feed_forward_length"), 24);
        // Without enable_moe_block the expert keys say nothing (transformers builds no experts).
        moe["enable_moe_block"] = serde_json::json!(false);
        let (kv, _) = translate(&moe, "t").expect("translate");
        assert!(!kv.iter().any(|(k, _)| k.contains("expert")), "{kv:?}");
    }

    #[test]
    fn a_multimodal_gemma4_config_runs_its_text_decoder() {
        let top = serde_json::json!({"model_type": "gemma4", "text_config": gemma4_text(),
                                     "vision_config": {"model_type": "gemma4_vision"}});
        let (_, layout) = translate(&top, "t").expect("translate");
        assert_eq!((layout.arch, layout.n_layer, layout.tied), (Arch::Gemma4, 5, true));
        let err = translate(&serde_json::json!({"model_type": "gemma4"}), "t").expect_err("no text_config");
        assert!(err.to_string().contains("text_config"), "{err}");
        let mut bidi = gemma4_text();
        bidi["use_bidirectional_attention"] = serde_json::json!("all");
        let err = translate(&bidi, "t").expect_err("bidirectional");
        assert!(err.to_string().contains("bidirectional"), "{err}");
    }
}
