//! Real chat templates against Hugging Face's reference renderer
//! (`tests/fixtures/chat-templates.json`: 35 templates × 3 conversations rendered by
//! transformers' `render_jinja_template`), and the templates inside the test models.
#![allow(clippy::unwrap_used)]

mod common;

use ferrolm::chat::{CalendarDate, ChatTemplate, ChatTemplateError, Message, RenderOptions};
use ferrolm::model::Model;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Fixture {
    meta: Meta,
    templates: BTreeMap<String, Case>,
}

#[derive(Deserialize)]
struct Meta {
    render_kwargs: RenderKwargs,
    date_for_strftime_now: String,
    conversations: BTreeMap<String, Vec<Message>>,
}

#[derive(Deserialize)]
struct RenderKwargs {
    add_generation_prompt: bool,
    bos_token: String,
    eos_token: String,
}

#[derive(Deserialize)]
struct Case {
    template: String,
    renders: BTreeMap<String, Expected>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Expected {
    Text(String),
    Error { error: String },
}

fn load_fixture() -> Fixture {
    let path = common::fixtures_dir().join("chat-templates.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The first differing position, with some context on both sides.
fn first_difference(got: &str, want: &str) -> String {
    let at = got.bytes().zip(want.bytes()).take_while(|(a, b)| a == b).count();
    let ctx = |s: &str| {
        let mut start = at.saturating_sub(60);
        while !s.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (at + 60).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        format!("{:?}", &s[start..end])
    };
    format!("differs at byte {at}:\n      got  {}\n      want {}", ctx(got), ctx(want))
}

#[test]
fn reference_renders_match_byte_for_byte() {
    let fx = load_fixture();
    let rk = &fx.meta.render_kwargs;
    let opts = RenderOptions {
        add_generation_prompt: rk.add_generation_prompt,
        bos_token: rk.bos_token.clone(),
        eos_token: rk.eos_token.clone(),
        today: Some(CalendarDate::parse(&fx.meta.date_for_strftime_now).unwrap()),
        ..Default::default()
    };
    assert_eq!(fx.templates.len(), 35);
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, case) in &fx.templates {
        let template = match ChatTemplate::new(&case.template) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: does not compile: {e}"));
                continue;
            }
        };
        assert_eq!(template.source(), case.template);
        assert_eq!(case.renders.len(), 3, "{name}");
        for (conv, expected) in &case.renders {
            checked += 1;
            let messages = &fx.meta.conversations[conv];
            let got = template.render(messages, &opts);
            match (expected, got) {
                (Expected::Text(want), Ok(got)) if *want == got => {}
                (Expected::Text(want), Ok(got)) => {
                    failures.push(format!("{name} / {conv}: {}", first_difference(&got, want)))
                }
                (Expected::Text(_), Err(e)) => failures.push(format!("{name} / {conv}: failed: {e}")),
                (Expected::Error { .. }, Err(_)) => {}
                (Expected::Error { error }, Ok(_)) => {
                    failures.push(format!("{name} / {conv}: rendered, but the reference raised '{error}'"))
                }
            }
        }
    }
    assert_eq!(checked, 105);
    assert!(failures.is_empty(), "{} of {checked} renders differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn raised_errors_carry_the_template_message() {
    let fx = load_fixture();
    let case = &fx.templates["google-gemma-2-2b-it"];
    let Expected::Error { error } = &case.renders["sys_user"] else { panic!("fixture changed") };
    let t = ChatTemplate::new(&case.template).unwrap();
    match t.render(&fx.meta.conversations["sys_user"], &RenderOptions::default()) {
        Err(ChatTemplateError::Raised(msg)) => assert_eq!(&msg, error),
        other => panic!("expected a raised exception, got {other:?}"),
    }
    // It converts into the library's error with its message unchanged.
    let e: ferrolm::Error = ChatTemplateError::Raised("no".into()).into();
    assert_eq!(e.to_string(), "chat template raised an exception: no");
}

/// Options with the model's own BOS/EOS token texts.
fn model_options(tok: &ferrolm::tokenizer::Tokenizer, add_generation_prompt: bool) -> RenderOptions {
    let text = |id: Option<u32>| id.and_then(|id| tok.token_text(id)).unwrap_or_default().to_string();
    RenderOptions {
        add_generation_prompt,
        bos_token: text(tok.bos()),
        eos_token: text(tok.eos()),
        ..Default::default()
    }
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("You are terse."),
        Message::user("Hi!"),
        Message::assistant("Hello."),
        Message::user("Bye?"),
    ]
}

/// SmolLM2's ChatML template, with and without a system message (it adds its own default one).
fn check_smollm2(tok: &ferrolm::tokenizer::Tokenizer) {
    let template = ChatTemplate::new(tok.chat_template().expect("SmolLM2 ships a chat template")).unwrap();
    let opts = model_options(tok, true);
    assert_eq!(opts.bos_token, "<|im_start|>");
    assert_eq!(opts.eos_token, "<|im_end|>");
    // Expected texts: Python jinja2 rendering the same template.
    assert_eq!(
        template.render(&conversation(), &opts).unwrap(),
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye?<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        template.render(&[Message::user("Hi!")], &model_options(tok, false)).unwrap(),
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi!<|im_end|>\n"
    );
}

#[test]
fn smollm2_gguf_template_renders_chatml() {
    let Some(path) = common::require_model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let model = Model::load(&path).unwrap();
    check_smollm2(model.tokenizer());
}

#[test]
fn smollm2_hf_folder_template_renders_chatml() {
    let Some(dir) = common::require_hf_folder("SmolLM2-135M-Instruct-hf") else { return };
    check_smollm2(&ferrolm::tokenizer::Tokenizer::from_hf_dir(&dir).unwrap());
}

#[test]
fn gemma3_270m_base_gguf_has_no_template() {
    // The test model is the base (not instruction-tuned) Gemma 3 270M: its GGUF carries no
    // `tokenizer.chat_template`, so there is nothing to render.
    let Some(path) = common::require_model("gemma-3-270m-q4_k_m.gguf") else { return };
    let model = Model::load(&path).unwrap();
    assert_eq!(model.tokenizer().chat_template(), None);
}
