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
}
