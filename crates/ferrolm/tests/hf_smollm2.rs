//! A real Hugging Face folder end to end: SmolLM2-135M-Instruct turned into an HF folder by
//! transformers (`from_pretrained(gguf_file=…)` then `save_pretrained`, see
//! `scripts/make_hf_smollm2.py`), loaded by ferrolm, against transformers' own greedy `generate`
//! recorded by the same script.
#![allow(clippy::unwrap_used)]

mod common;

use ferrolm::batch::Batch;
use ferrolm::kv::KvType;
use ferrolm::model::{Arch, LoadOptions, Model};
use ferrolm::sampling::argmax;
use serde::Deserialize;

/// Folder name under the model cache.
const FOLDER: &str = "SmolLM2-135M-Instruct-hf";

/// Greedy steps whose two best logits (transformers') are closer than this may legitimately
/// differ between two float32 implementations; comparison stops at the first one.
const TIE_GAP: f32 = 0.02;

#[derive(Deserialize)]
struct Expected {
    prompt: String,
    prompt_ids: Vec<u32>,
    generated_ids: Vec<u32>,
    greedy_margins: Vec<f32>,
}

#[test]
fn smollm2_hf_folder_matches_transformers_generate() {
    let Some(dir) = common::require_hf_folder(FOLDER) else { return };
    let exp: Expected =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ferrolm_expected.json")).unwrap()).unwrap();
    let model = Model::load_with(&dir, &LoadOptions { exact_f32: true, ..LoadOptions::default() }).unwrap();
    assert_eq!(model.config().arch, Arch::Llama);
    assert_eq!(model.config().n_layer, 30);

    let ids = model.tokenizer().encode(&exp.prompt, true, true).unwrap();
    assert_eq!(ids, exp.prompt_ids, "prompt tokens differ from transformers' tokenizer");

    let mut kv = model.new_kv_cache_typed(256, KvType::F32, KvType::F32).unwrap();
    let mut logits =
        model.forward(&Batch::from_prompt(0, 0, &ids), &mut kv).unwrap().last().unwrap().to_vec();
    let mut compared = 0;
    for (step, (&want, &margin)) in exp.generated_ids.iter().zip(&exp.greedy_margins).enumerate() {
        if margin < TIE_GAP {
            break;
        }
        let got = argmax(&logits);
        assert_eq!(got, want, "greedy step {step}: ferrolm {got}, transformers {want}");
        compared += 1;
        if model.tokenizer().is_eog(got) {
            break;
        }
        let pos = (ids.len() + step) as u32;
        logits =
            model.forward(&Batch::from_prompt(0, pos, &[got]), &mut kv).unwrap().last().unwrap().to_vec();
    }
    eprintln!("{compared} of {} greedy tokens compared", exp.generated_ids.len());
    assert!(compared >= 20, "only {compared} greedy steps compared");
}
