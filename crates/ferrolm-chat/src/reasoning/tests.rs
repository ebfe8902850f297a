//! Tests of the reasoning split. The harmony cases follow llama.cpp's gpt-oss parser tests
//! (`tests/test-chat.cpp`).
#![allow(clippy::unwrap_used)]

use super::*;

fn field(tags: ThinkingTags) -> Thinking {
    Thinking::new(tags, false)
}

fn in_content(tags: ThinkingTags) -> Thinking {
    Thinking { tags, forced_open: false, to_field: false }
}

fn stream(how: Thinking, pieces: &[&str]) -> (Option<String>, String) {
    let mut s = ReasoningSplitter::new(how);
    let mut parts: Vec<Part> = pieces.iter().flat_map(|p| s.feed(p)).collect();
    parts.extend(s.finish());
    join(parts)
}

/// The split of `whole`, checked to be the same for every split of it into two pieces and
/// for one character at a time.
fn split_every_way(how: Thinking, whole: &str) -> (Option<String>, String) {
    let want = ReasoningSplitter::split(how, whole);
    for i in (0..=whole.len()).filter(|&i| whole.is_char_boundary(i)) {
        assert_eq!(stream(how, &[&whole[..i], &whole[i..]]), want, "{whole:?} split at {i}");
    }
    let chars: Vec<String> = whole.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(stream(how, &refs), want, "{whole:?} char by char");
    want
}

fn pair(reasoning: Option<&str>, content: &str) -> (Option<String>, String) {
    (reasoning.map(str::to_string), content.to_string())
}

#[test]
fn reasoning_at_the_start_is_split_from_the_answer() {
    let whole = "\n<think>I should add.</think>\n\n2 + 2 = 4";
    assert_eq!(split_every_way(field(DEEPSEEK), whole), pair(Some("I should add."), "2 + 2 = 4"));
}

#[test]
fn no_tag_means_all_answer_and_a_forced_block_starts_in_reasoning() {
    let split = ReasoningSplitter::split;
    assert_eq!(split(field(DEEPSEEK), "Plain <think> answer"), pair(None, "Plain <think> answer"));
    assert_eq!(split(field(DEEPSEEK), "  <thin"), pair(None, "  <thin"));
    let forced = Thinking::new(DEEPSEEK, true);
    assert_eq!(split(forced, "hmm</think>yes"), pair(Some("hmm"), "yes"));
    // A reasoning never closed stays reasoning.
    assert_eq!(split(forced, "still thinking </thi"), pair(Some("still thinking </thi"), ""));
    assert_eq!(split(field(COMMAND_R), "<|START_THINKING|>a<|END_THINKING|>b"), pair(Some("a"), "b"));
    // A second block after the answer began is answer.
    assert_eq!(
        split(field(DEEPSEEK), "<think>a</think>b<think>c</think>"),
        pair(Some("a"), "b<think>c</think>")
    );
}

#[test]
fn thinking_is_turned_off_as_llama_cpp_does() {
    assert_eq!(DEEPSEEK.disable("<|Assistant|><think>\n"), "<|Assistant|><think>\n</think>");
    assert_eq!(DEEPSEEK.disable("<|im_start|>assistant\n"), "<|im_start|>assistant\n");
    assert_eq!(COMMAND_R.disable("<|CHATBOT_TOKEN|>"), "<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>");
    assert_eq!(ThinkingTags::of_template("{{ '<think>\\n' }}"), Some(DEEPSEEK));
    assert_eq!(ThinkingTags::of_template("{{ messages }}"), None);
    // gpt-oss always reasons: its prompt stays.
    assert_eq!(
        HARMONY.disable("<|start|>user<|message|>hi<|end|><|start|>assistant"),
        "<|start|>user<|message|>hi<|end|><|start|>assistant"
    );
}

const ANALYSIS_THEN_FINAL: &str = "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?";

#[test]
fn harmony_analysis_is_reasoning_and_final_is_content() {
    let gpt_oss = include_str!("../../testdata/openai-gpt-oss-120b.jinja");
    assert_eq!(ThinkingTags::of_template(gpt_oss), Some(HARMONY));
    assert!(HARMONY.is_harmony() && !DEEPSEEK.is_harmony());
    let h = field(HARMONY);
    assert_eq!(
        split_every_way(h, ANALYSIS_THEN_FINAL),
        pair(Some("I'm\nthinking"), "Hello, world!\nWhat's up?")
    );
    // An answer without analysis: no reasoning.
    assert_eq!(split_every_way(h, "<|channel|>final<|message|>Hello, world!"), pair(None, "Hello, world!"));
    // A preamble on the commentary channel is content.
    assert_eq!(
        split_every_way(h, "<|channel|>commentary<|message|>Hello, world!"),
        pair(None, "Hello, world!")
    );
    assert_eq!(
        split_every_way(
            h,
            "<|channel|>commentary<|message|>Let me see. <|end|><|start|>assistant<|channel|>final<|message|>4"
        ),
        pair(None, "Let me see. 4")
    );
    // Several analysis messages: their texts joined.
    assert_eq!(
        split_every_way(
            h,
            "<|channel|>analysis<|message|>One.<|end|><|start|>assistant<|channel|>analysis<|message|>Two.<|end|><|start|>assistant<|channel|>final<|message|>3"
        ),
        pair(Some("One.Two."), "3")
    );
    // Cut off while reasoning: all reasoning; the answer's markers in part: nothing shown yet.
    assert_eq!(
        split_every_way(h, "<|channel|>analysis<|message|>I'm\nthinking"),
        pair(Some("I'm\nthinking"), "")
    );
    assert_eq!(stream(h, &["<|channel|>analysis<|message|>a<|end|><|start|>assist"]).0, Some("a".into()));
}

#[test]
fn harmony_reasoning_stays_in_the_content_with_reasoning_format_none() {
    let none = in_content(HARMONY);
    assert_eq!(
        split_every_way(none, ANALYSIS_THEN_FINAL),
        pair(None, "<|channel|>analysis<|message|>I'm\nthinking<|end|>Hello, world!\nWhat's up?")
    );
    assert_eq!(split_every_way(none, "<|channel|>final<|message|>Hi"), pair(None, "Hi"));
    assert_eq!(
        split_every_way(none, "<|channel|>analysis<|message|>I'm"),
        pair(None, "<|channel|>analysis<|message|>I'm")
    );
}

#[test]
fn harmony_tool_calls_are_content_as_whole_messages() {
    let h = field(HARMONY);
    // The reasoning before a call is split off; the call stays as written.
    let call = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\"}";
    let whole = format!("<|channel|>analysis<|message|>Call it.<|end|>{call}");
    assert_eq!(split_every_way(h, &whole), pair(Some("Call it."), call));
    // A call as the first message (recipient after the channel, or in the role part, right
    // after the prompt's `<|start|>assistant`) gets its message start.
    let direct = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}";
    assert_eq!(split_every_way(h, direct), pair(None, &format!("<|start|>assistant{direct}")));
    let in_role = " to=functions.f<|channel|>commentary json<|message|>{}";
    assert_eq!(split_every_way(h, in_role), pair(None, &format!("<|start|>assistant{in_role}")));
    // Several calls, their end markers kept, analysis between them still reasoning.
    let two = "<|channel|>analysis<|message|>A.<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|><|start|>assistant<|channel|>analysis<|message|>B.<|end|><|start|>assistant<|channel|>commentary to=functions.g<|message|>{\"x\": 1}<|call|>";
    assert_eq!(
        split_every_way(h, two),
        pair(
            Some("A.B."),
            "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|><|start|>assistant<|channel|>commentary to=functions.g<|message|>{\"x\": 1}<|call|>"
        )
    );
    // With reasoning_format none the call is written the same way.
    assert_eq!(
        split_every_way(in_content(HARMONY), &whole),
        pair(None, &format!("<|channel|>analysis<|message|>Call it.<|end|>{call}"))
    );
}

#[test]
fn harmony_headers_say_more_and_unknown_output_stays_as_written() {
    let h = field(HARMONY);
    assert_eq!(split_every_way(h, "Just text"), pair(None, "Just text"));
    assert_eq!(split_every_way(h, " Hi"), pair(None, " Hi"));
    // A constrained answer is the answer (llama.cpp with a response format).
    let constrained = "<|channel|>analysis<|message|>JSON.<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{}";
    assert_eq!(split_every_way(h, constrained), pair(Some("JSON."), "{}"));
    // gpt-oss's stray `<|channel|>commentary to=assistant` before the channel is skipped.
    let stray = "<|channel|>commentary to=assistant<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>b";
    assert_eq!(split_every_way(h, stray), pair(Some("a"), "b"));
    // An unknown channel, or no header end in sight, stays as written.
    let odd = "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>other<|message|>b";
    assert_eq!(split_every_way(h, odd), pair(Some("a"), "<|start|>assistant<|channel|>other<|message|>b"));
    let long = format!("<|channel|>{}", "x".repeat(300));
    assert_eq!(split_every_way(h, &long), pair(None, &long));
}

#[test]
fn harmony_continues_an_answer_and_adapts_messages_as_llama_cpp_does() {
    assert_eq!(
        HARMONY.continue_answer("<|start|>assistant", Some("Hmm.")),
        "<|start|>assistant<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>"
    );
    assert_eq!(DEEPSEEK.continue_answer("A: <think>\n", None), "A: <think>\n</think>");
    let mut call = Message::assistant("I will call it.");
    call.extra.insert("reasoning_content".into(), "Need weather.".into());
    call.extra.insert("tool_calls".into(), serde_json::json!([{"function": {"name": "f", "arguments": {}}}]));
    let mut plain = Message::assistant("4");
    plain.extra.insert("reasoning_content".into(), "2+2".into());
    let mut no_content = Message { content: None, ..call.clone() };
    no_content.extra.remove("reasoning_content");
    let mut msgs = vec![Message::user("hi"), call, plain, no_content];
    let before = msgs.clone();
    DEEPSEEK.adapt_messages(&mut msgs);
    assert_eq!(msgs, before);
    HARMONY.adapt_messages(&mut msgs);
    assert_eq!(msgs[0], before[0]);
    assert_eq!(
        (msgs[1].content.as_ref(), msgs[1].extra.get("thinking")),
        (Some(&"".into()), Some(&"Need weather.".into()))
    );
    assert_eq!(
        (msgs[2].content.as_ref(), msgs[2].extra.get("thinking")),
        (Some(&"4".into()), Some(&"2+2".into()))
    );
    assert_eq!((msgs[3].content.as_ref(), msgs[3].extra.get("thinking")), (Some(&"".into()), None));
}

#[test]
fn harmony_shows_one_call_per_message_each_before_its_result() {
    let call =
        |id: &str, name: &str| serde_json::json!({"id": id, "function": {"name": name, "arguments": {}}});
    let mut two = Message::assistant("");
    two.extra.insert("reasoning_content".into(), "Both.".into());
    two.extra.insert("tool_calls".into(), serde_json::json!([call("a", "f"), call("b", "g")]));
    let result = |id: &str, text: &str| {
        let mut m = Message::new("tool", text);
        m.extra.insert("tool_call_id".into(), id.into());
        m
    };
    let mut msgs = vec![Message::user("hi"), two, result("b", "2"), result("a", "1"), Message::user("ok")];
    HARMONY.adapt_messages(&mut msgs);
    let shown: Vec<(String, Option<String>, Option<String>)> = msgs
        .iter()
        .map(|m| {
            let name =
                m.extra.get("tool_calls").map(|c| c[0]["function"]["name"].as_str().unwrap().to_string());
            let text = m.content.as_ref().and_then(|c| c.as_str()).map(str::to_string);
            (m.role.clone(), name, text)
        })
        .collect();
    let row = |r: &str, n: Option<&str>, t: &str| (r.to_string(), n.map(str::to_string), Some(t.to_string()));
    assert_eq!(
        shown,
        vec![
            row("user", None, "hi"),
            row("assistant", Some("f"), ""),
            row("tool", None, "1"),
            row("assistant", Some("g"), ""),
            row("tool", None, "2"),
            row("user", None, "ok"),
        ]
    );
    assert_eq!(msgs[1].extra.get("thinking"), Some(&"Both.".into()));
    assert_eq!(msgs[3].extra.get("thinking"), None);
}
