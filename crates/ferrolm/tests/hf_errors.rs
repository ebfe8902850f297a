//! Broken Hugging Face folders get clear errors, never panics: missing or contradictory config
//! keys, unknown model types, missing shards, tensors of the wrong shape or type.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use ferrolm::format::safetensors::{SafetensorsFile, StDtype, write_safetensors};
use ferrolm::model::Model;
use serde_json::Value;

/// A copy of the tiny Llama conformance folder in a temporary directory.
fn tiny_folder() -> (tempfile::TempDir, PathBuf) {
    tiny_copy("llama")
}

/// A copy of the tiny conformance folder of model `name` in a temporary directory.
fn tiny_copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/conformance/{name}/hf"));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny-llama");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    (tmp, dir)
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let p = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Rewrites `model.safetensors` with `change` applied to each (name, dtype, shape, bytes).
fn edit_tensors(
    dir: &Path,
    change: impl Fn(&str, StDtype, Vec<usize>, Vec<u8>) -> Option<(StDtype, Vec<usize>, Vec<u8>)>,
) {
    let path = dir.join("model.safetensors");
    let file = SafetensorsFile::open(&path).unwrap();
    let bytes = file.storage().as_bytes();
    let mut owned = Vec::new();
    for t in file.tensors() {
        let data = bytes[t.range.clone()].to_vec();
        if let Some(new) = change(&t.name, t.dtype, t.shape.clone(), data) {
            owned.push((t.name.clone(), new.0, new.1, new.2));
        }
    }
    drop(file);
    let list: Vec<_> =
        owned.iter().map(|(n, d, s, b)| (n.as_str(), *d, s.as_slice(), b.as_slice())).collect();
    write_safetensors(&path, &list).unwrap();
}

/// Rewrites `model.safetensors` with every tensor renamed by `rename` (data unchanged).
fn rename_tensors(dir: &Path, rename: impl Fn(&str) -> String) {
    let path = dir.join("model.safetensors");
    let file = SafetensorsFile::open(&path).unwrap();
    let bytes = file.storage().as_bytes().to_vec();
    let tensors: Vec<_> =
        file.tensors().iter().map(|t| (rename(&t.name), t.dtype, t.shape.clone(), t.range.clone())).collect();
    drop(file);
    let list: Vec<_> =
        tensors.iter().map(|(n, d, s, r)| (n.as_str(), *d, s.as_slice(), &bytes[r.clone()])).collect();
    write_safetensors(&path, &list).unwrap();
}

fn load_err(dir: &Path) -> String {
    match Model::load(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_untouched_copy_loads() {
    let (_tmp, dir) = tiny_folder();
    let m = Model::load(&dir).unwrap();
    assert_eq!(m.config().n_layer, 2);
}

#[test]
fn missing_config_key_is_named() {
    let (_tmp, dir) = tiny_folder();
    edit_config(&dir, |c| {
        c.remove("hidden_size");
    });
    let e = load_err(&dir);
    assert!(e.contains("config.json") && e.contains("hidden_size"), "{e}");
}

#[test]
fn contradictory_config_keys_are_errors() {
    let (_tmp, dir) = tiny_folder();
    edit_config(&dir, |c| {
        c.insert("num_key_value_heads".into(), 3.into());
    });
    let e = load_err(&dir);
    assert!(e.contains("num_key_value_heads"), "{e}");

    let (_tmp, dir) = tiny_folder();
    edit_config(&dir, |c| {
        c.insert("vocab_size".into(), 1000.into());
    });
    let e = load_err(&dir);
    assert!(e.contains("vocab_size") || e.contains("token_embd"), "{e}");

    let (_tmp, dir) = tiny_folder();
    edit_config(&dir, |c| {
        c.insert("num_hidden_layers".into(), "two".into());
    });
    let e = load_err(&dir);
    assert!(e.contains("num_hidden_layers"), "{e}");
}

#[test]
fn unknown_model_type_is_named() {
    let (_tmp, dir) = tiny_folder();
    edit_config(&dir, |c| {
        c.insert("model_type".into(), "mamba".into());
    });
    let e = load_err(&dir);
    assert!(e.contains("unsupported model architecture") && e.contains("mamba"), "{e}");
}

#[test]
fn missing_config_and_bad_json_are_errors() {
    let (_tmp, dir) = tiny_folder();
    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    assert!(load_err(&dir).contains("config.json"));
    std::fs::remove_file(dir.join("config.json")).unwrap();
    assert!(Model::load(&dir).is_err());
}

#[test]
fn shard_listed_in_the_index_but_missing_is_named() {
    let (_tmp, dir) = tiny_folder();
    let file = SafetensorsFile::open(dir.join("model.safetensors")).unwrap();
    let mut map = serde_json::Map::new();
    for (i, name) in file.names().enumerate() {
        let shard =
            if i % 2 == 0 { "model-00001-of-00002.safetensors" } else { "model-00002-of-00002.safetensors" };
        map.insert(name.to_string(), shard.into());
    }
    drop(file);
    std::fs::rename(dir.join("model.safetensors"), dir.join("model-00001-of-00002.safetensors")).unwrap();
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("model-00002-of-00002.safetensors") && e.contains("missing"), "{e}");
}

#[test]
fn tensor_with_wrong_shape_is_named() {
    let (_tmp, dir) = tiny_folder();
    edit_tensors(&dir, |name, dt, shape, data| {
        if name == "model.layers.1.mlp.down_proj.weight" {
            // Same bytes, transposed shape.
            Some((dt, vec![shape[1], shape[0]], data))
        } else {
            Some((dt, shape, data))
        }
    });
    let e = load_err(&dir);
    assert!(e.contains("blk.1.ffn_down.weight") && e.contains("shape"), "{e}");
}

#[test]
fn gpt_oss_folders_with_mxfp4_experts_or_odd_tensors_are_refused() {
    // OpenAI ships gpt-oss's experts as MXFP4 blocks and scales: refused, with the way out.
    let (_tmp, dir) = tiny_copy("gpt-oss");
    rename_tensors(&dir, |name| name.replace("experts.down_proj", "experts.down_proj_blocks"));
    let e = load_err(&dir);
    assert!(e.contains("MXFP4") && e.contains("convert_hf_to_gguf"), "{e}");
    // Fused experts of a type that cannot be rearranged, or of the wrong rank.
    let (_tmp, dir) = tiny_copy("gpt-oss");
    edit_tensors(&dir, |name, dt, shape, data| {
        let fused = name.ends_with("experts.gate_up_proj");
        Some(if fused { (StDtype::I16, shape, data) } else { (dt, shape, data) })
    });
    let e = load_err(&dir);
    assert!(e.contains("gate_up_proj") && e.contains("I16"), "{e}");
    let (_tmp, dir) = tiny_copy("gpt-oss");
    edit_tensors(&dir, |name, dt, shape, data| {
        let flat = if name.ends_with("experts.down_proj") { vec![shape.iter().product()] } else { shape };
        Some((dt, flat, data))
    });
    let e = load_err(&dir);
    assert!(e.contains("down_proj") && e.contains("shape"), "{e}");
}

#[test]
fn tensor_with_wrong_dtype_is_named() {
    let (_tmp, dir) = tiny_folder();
    edit_tensors(&dir, |name, dt, shape, data| {
        if name == "model.layers.0.self_attn.q_proj.weight" {
            // Reinterpret the bf16 bytes as int16: same size, a type no matmul takes.
            Some((StDtype::I16, shape, data))
        } else {
            Some((dt, shape, data))
        }
    });
    let e = load_err(&dir);
    assert!(e.contains("model.layers.0.self_attn.q_proj.weight") && e.contains("I16"), "{e}");
}

#[test]
fn missing_tensor_and_untied_head_are_named() {
    let (_tmp, dir) = tiny_folder();
    edit_tensors(&dir, |name, dt, shape, data| {
        (name != "model.layers.0.self_attn.v_proj.weight").then_some((dt, shape, data))
    });
    assert!(load_err(&dir).contains("blk.0.attn_v.weight"));

    let (_tmp, dir) = tiny_folder();
    edit_tensors(&dir, |name, dt, shape, data| (name != "lm_head.weight").then_some((dt, shape, data)));
    let e = load_err(&dir);
    assert!(e.contains("lm_head.weight") && e.contains("tie_word_embeddings"), "{e}");
}

#[test]
fn safetensors_errors_convert_into_the_library_error() {
    let e: ferrolm::Error = SafetensorsFile::open("/nonexistent/x.safetensors").unwrap_err().into();
    assert!(matches!(e, ferrolm::Error::Safetensors(_)), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/x.safetensors"), "{e}");
}
