//! Loading errors name what is wrong: unsupported architectures, unsupported tensor types,
//! missing tensors and wrong shapes, and KV cache types whose blocks do not fit a head. Uses tiny
//! synthetic models written with `GgufWriter`.
#![allow(clippy::unwrap_used)]

use ferrolm::GgmlType;
use ferrolm::batch::Batch;
use ferrolm::format::gguf::{MetaArray, MetaValue};
use ferrolm::format::gguf_write::GgufWriter;
use ferrolm::model::Model;

const D: u64 = 32;
const FF: u64 = 64;
const VOCAB: u64 = 8;

fn f32_bytes(n: u64, seed: u32) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let x =
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32;
            ((x - 0.5) * 0.2).to_le_bytes()
        })
        .collect()
}

/// A 2-layer llama-architecture model with an 8-token SentencePiece vocabulary.
fn tiny_llama(arch: &str, swap: Option<(&str, GgmlType)>, skip: Option<&str>) -> Vec<u8> {
    tiny_llama_edited(arch, swap, skip, |_, _| {})
}

/// Metadata of the tiny model, in writing order.
type Meta = Vec<(String, MetaValue)>;
/// Tensors of the tiny model: name and dims.
type Tensors = Vec<(String, Vec<u64>)>;

/// [`tiny_llama`] with `edit` applied to its metadata and tensor list before writing.
fn tiny_llama_edited(
    arch: &str,
    swap: Option<(&str, GgmlType)>,
    skip: Option<&str>,
    edit: impl FnOnce(&mut Meta, &mut Tensors),
) -> Vec<u8> {
    let mut meta: Meta = Vec::new();
    let s = |v: &str| MetaValue::String(v.to_string());
    meta.push(("general.architecture".into(), s(arch)));
    for (k, v) in [
        ("block_count", 2u32),
        ("embedding_length", D as u32),
        ("feed_forward_length", FF as u32),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
        ("context_length", 128),
    ] {
        meta.push((format!("{arch}.{k}"), MetaValue::U32(v)));
    }
    meta.push((format!("{arch}.attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-5)));
    meta.push(("tokenizer.ggml.model".into(), s("llama")));
    let tokens = ["<unk>", "<s>", "</s>", "▁a", "▁b", "a", "b", "▁"];
    meta.push((
        "tokenizer.ggml.tokens".into(),
        MetaValue::Array(MetaArray::String(tokens.map(String::from).to_vec())),
    ));
    meta.push((
        "tokenizer.ggml.scores".into(),
        MetaValue::Array(MetaArray::F32(vec![0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0])),
    ));
    meta.push((
        "tokenizer.ggml.token_type".into(),
        MetaValue::Array(MetaArray::I32(vec![2, 3, 3, 1, 1, 1, 1, 1])),
    ));
    let mut tensors: Tensors =
        vec![("token_embd.weight".into(), vec![D, VOCAB]), ("output_norm.weight".into(), vec![D])];
    for i in 0..2 {
        for (n, dims) in [
            ("attn_norm", vec![D]),
            ("attn_q", vec![D, D]),
            ("attn_k", vec![D, D / 2]),
            ("attn_v", vec![D, D / 2]),
            ("attn_output", vec![D, D]),
            ("ffn_norm", vec![D]),
            ("ffn_gate", vec![D, FF]),
            ("ffn_up", vec![D, FF]),
            ("ffn_down", vec![FF, D]),
        ] {
            tensors.push((format!("blk.{i}.{n}.weight"), dims));
        }
    }
    edit(&mut meta, &mut tensors);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add(k, v).unwrap();
    }
    for (k, (name, dims)) in tensors.into_iter().enumerate() {
        if skip == Some(name.as_str()) {
            continue;
        }
        let n: u64 = dims.iter().product();
        match swap {
            Some((t, ty)) if t == name => {
                let bytes = ty.row_bytes(dims[0]).unwrap() * dims[1..].iter().product::<u64>();
                w.add_tensor(name, &dims, ty, vec![0; bytes as usize]).unwrap();
            }
            _ => {
                w.add_tensor(name, &dims, GgmlType::F32, f32_bytes(n, k as u32)).unwrap();
            }
        }
    }
    w.to_bytes()
}

fn load(bytes: Vec<u8>) -> ferrolm::Result<Model> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    std::fs::write(&p, bytes).unwrap();
    Model::load(&p)
}

#[test]
fn tiny_model_loads_and_runs() {
    let m = load(tiny_llama("llama", None, None)).unwrap();
    let toks = m.tokenizer().encode("a b", true, false).unwrap();
    assert_eq!(toks[0], 1, "BOS first: {toks:?}");
    let mut kv = m.new_kv_cache(16);
    let out = m.forward(&Batch::from_prompt(0, 0, &toks), &mut kv).unwrap();
    assert_eq!(out.last().unwrap().len(), VOCAB as usize);
    assert!(out.last().unwrap().iter().all(|v| v.is_finite()));
}

#[test]
fn unsupported_architecture_is_named() {
    let err = load(tiny_llama("mamba", None, None)).unwrap_err();
    assert!(err.to_string().contains("unsupported model architecture 'mamba'"), "{err}");
}

#[test]
fn unsupported_tensor_type_is_named() {
    let err = load(tiny_llama("llama", Some(("blk.1.ffn_up.weight", GgmlType::Q8_1)), None)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("blk.1.ffn_up.weight") && msg.contains("Q8_1"), "{msg}");
}

#[test]
fn missing_tensor_is_named() {
    let err = load(tiny_llama("llama", None, Some("blk.0.attn_k.weight"))).unwrap_err();
    assert!(err.to_string().contains("blk.0.attn_k.weight"), "{err}");
}

#[test]
fn quantized_cache_types_need_whole_blocks_per_head() {
    use ferrolm::kv::{KvCache, KvType};
    use ferrolm::session::{Session, SessionOptions};
    // head_dim 8: blocks of 32 values do not fit a head.
    let m = load(tiny_llama("llama", None, None)).unwrap();
    for (k, v) in [(KvType::Q8_0, KvType::F16), (KvType::F32, KvType::Q4_0)] {
        let err = m.new_kv_cache_typed(16, k, v).unwrap_err();
        assert!(matches!(err, ferrolm::Error::InvalidInput(_)), "{err}");
        assert!(err.to_string().contains("blocks of 32"), "{err}");
        let opts = SessionOptions { type_k: k, type_v: v, ..SessionOptions::default() };
        assert!(matches!(Session::new(&m, opts), Err(ferrolm::Error::InvalidInput(_))));
        // A cache made by hand is refused by the forward pass, not attended.
        let mut kv = KvCache::new(2, 16, 16, k, v);
        let err = m.forward(&Batch::from_prompt(0, 0, &[1, 3]), &mut kv).unwrap_err();
        assert!(matches!(err, ferrolm::Error::InvalidInput(_)), "{err}");
        assert_eq!(kv.memory_bytes(), 0);
    }
    assert!(m.new_kv_cache_typed(16, KvType::F32, KvType::F16).is_ok());
}

/// Sets (or adds) metadata key `key`.
fn set(meta: &mut Meta, key: &str, v: MetaValue) {
    match meta.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = v,
        None => meta.push((key.to_string(), v)),
    }
}

/// Loads the tiny model with one metadata value changed; the error's text.
fn load_with_key(key: &str, v: MetaValue) -> String {
    let bytes = tiny_llama_edited("llama", None, None, |m, _| set(m, key, v));
    load(bytes).map(|_| ()).expect_err(key).to_string()
}

#[test]
fn non_finite_or_negative_floats_are_named() {
    for key in ["llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"] {
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.0, 0.0] {
            let msg = load_with_key(key, MetaValue::F32(v));
            assert!(msg.contains(key), "{key} = {v}: {msg}");
        }
    }
    for key in ["llama.rope.scaling.factor", "llama.attention.scale", "llama.final_logit_softcapping"] {
        for v in [f32::NAN, f32::INFINITY, -2.0] {
            let msg = load_with_key(key, MetaValue::F32(v));
            assert!(msg.contains(key), "{key} = {v}: {msg}");
        }
    }
    let msg = load_with_key("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(5.0));
    assert!(msg.contains("epsilon"), "{msg}");
}

#[test]
fn absurd_sizes_fail_before_allocating() {
    // 4294967295 layers: the error must come before a per-layer table is allocated (a 4 GiB
    // allocation here would abort the test binary or take seconds).
    let t = std::time::Instant::now();
    let msg = load_with_key("llama.block_count", MetaValue::U32(u32::MAX));
    assert!(msg.contains("implausibly large") && msg.contains("n_layer 4294967295"), "{msg}");
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
    for (key, v) in [
        ("llama.context_length", 0u64),
        ("llama.context_length", 1 << 40),
        ("llama.feed_forward_length", 0),
        ("llama.attention.head_count", 0),
        ("llama.embedding_length", 1 << 40),
    ] {
        let msg = load_with_key(key, MetaValue::U64(v));
        assert!(!msg.is_empty() && !msg.contains("panicked"), "{key}: {msg}");
    }
    // A mixture needs its top k (and then its router and experts, which this dense file lacks).
    let msg = load_with_key("llama.expert_count", MetaValue::U32(8));
    assert!(msg.contains("llama.expert_used_count") && msg.contains("missing"), "{msg}");

    let msg = load_with_key("llama.vocab_size", MetaValue::U32(9));
    assert!(msg.contains("llama.vocab_size"), "{msg}");
}

#[test]
fn a_broken_mixture_of_experts_is_named() {
    let with = |extra: Vec<(&str, u32)>| {
        let bytes = tiny_llama_edited("llama", None, None, |m, _| {
            for (k, v) in extra {
                set(m, k, MetaValue::U32(v));
            }
        });
        load(bytes).map(|_| ()).expect_err("broken mixture").to_string()
    };
    let msg = with(vec![("llama.expert_count", 4), ("llama.expert_used_count", 5)]);
    assert!(msg.contains("4 experts with 5 used"), "{msg}");
    let msg = with(vec![
        ("llama.expert_count", 4),
        ("llama.expert_used_count", 2),
        ("llama.expert_gating_func", 9),
    ]);
    assert!(msg.contains("llama.expert_gating_func = 9"), "{msg}");
    let msg = with(vec![
        ("llama.expert_count", 4),
        ("llama.expert_used_count", 2),
        ("llama.expert_group_count", 2),
    ]);
    assert!(msg.contains("grouped expert routing"), "{msg}");
    // Valid keys on a file without experts: the router is missing.
    let msg = with(vec![("llama.expert_count", 4), ("llama.expert_used_count", 2)]);
    assert!(msg.contains("blk.0.ffn_gate_inp.weight"), "{msg}");
    // A dense architecture does not take experts; a mixture architecture needs them.
    let bytes = tiny_llama_edited("qwen2moe", None, None, |_, _| {});
    let msg = load(bytes).map(|_| ()).expect_err("qwen2moe without experts").to_string();
    assert!(msg.contains("qwen2moe.expert_count is missing"), "{msg}");
}

#[test]
fn norm_weights_must_be_float() {
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0] {
        let err = load(tiny_llama("llama", Some(("blk.0.attn_norm.weight", ty)), None)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("blk.0.attn_norm.weight") && msg.contains("must be F32, F16 or BF16"), "{msg}");
    }
    // F16 norms are what some converters write: accepted.
    let mut bytes = tiny_llama("llama", Some(("output_norm.weight", GgmlType::F16)), None);
    load(bytes.clone()).unwrap();
    // The same with one value NaN (an F32 norm re-typed as F16 reads as such garbage).
    let f = ferrolm::format::gguf::GgufFile::from_bytes(bytes.clone()).unwrap();
    let range = f.tensor_range(f.tensor("output_norm.weight").unwrap());
    bytes[range.start + 6..range.start + 8].copy_from_slice(&[0xff, 0x7f]);
    let msg = load(bytes).unwrap_err().to_string();
    assert!(msg.contains("'output_norm.weight' has a non-finite value (NaN) at index 3"), "{msg}");
}

#[test]
fn unused_tensors_are_an_error() {
    // block_count = 1 leaves layer 1's nine tensors unused.
    let msg = load_with_key("llama.block_count", MetaValue::U32(1));
    assert!(
        msg.contains("wrong number of tensors") && msg.contains("9 of 20") && msg.contains("blk.1."),
        "{msg}"
    );
    // A stray tensor of no known role.
    let bytes = tiny_llama_edited("llama", None, None, |_, t| t.push(("blk.7.extra.weight".into(), vec![D])));
    let msg = load(bytes).unwrap_err().to_string();
    assert!(msg.contains("'blk.7.extra.weight'"), "{msg}");
}

#[cfg(unix)]
#[test]
fn fifo_model_path_fails_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let st = std::process::Command::new("mkfifo").arg(&p).status().unwrap();
    assert!(st.success());
    // Opening a FIFO for reading would block forever: the check must come first.
    let err = Model::load(&p).unwrap_err();
    assert!(format!("{err:?}").contains("FIFO"), "{err:?}");
}
