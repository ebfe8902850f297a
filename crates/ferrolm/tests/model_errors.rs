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
    let mut w = GgufWriter::new();
    let s = |v: &str| MetaValue::String(v.to_string());
    w.add("general.architecture", s(arch)).unwrap();
    for (k, v) in [
        ("block_count", 2u32),
        ("embedding_length", D as u32),
        ("feed_forward_length", FF as u32),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
        ("context_length", 128),
    ] {
        w.add(format!("{arch}.{k}"), MetaValue::U32(v)).unwrap();
    }
    w.add(format!("{arch}.attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-5)).unwrap();
    w.add("tokenizer.ggml.model", s("llama")).unwrap();
    let tokens = ["<unk>", "<s>", "</s>", "▁a", "▁b", "a", "b", "▁"];
    w.add("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::String(tokens.map(String::from).to_vec())))
        .unwrap();
    w.add(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(vec![0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0])),
    )
    .unwrap();
    w.add("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(vec![2, 3, 3, 1, 1, 1, 1, 1])))
        .unwrap();
    let mut tensors: Vec<(String, Vec<u64>)> =
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
