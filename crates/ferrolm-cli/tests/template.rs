//! `ferrolm template render` end to end.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
}

fn fixture() -> serde_json::Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ferrolm/tests/fixtures/chat-templates.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn stdout(out: Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn renders_a_reference_template_exactly() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    // Llama 3.2 calls strftime_now: the reference used this date.
    let case = &fx["templates"]["meta-llama-Llama-3.2-3B-Instruct"];
    let template = write(dir.path(), "t.jinja", case["template"].as_str().unwrap());
    for conv in ["sys_user", "multi_turn", "user_only"] {
        let messages = write(dir.path(), "m.json", &fx["meta"]["conversations"][conv].to_string());
        let out = bin()
            .args(["template", "render", "--template"])
            .arg(&template)
            .arg("--messages")
            .arg(&messages)
            .args(["--bos", "<s>", "--eos", "</s>", "--date", "2026-11-21"])
            .output()
            .unwrap();
        assert_eq!(stdout(out), case["renders"][conv].as_str().unwrap(), "{conv}");
    }
}

#[test]
fn options_reach_the_template() {
    let dir = tempfile::tempdir().unwrap();
    let template = write(
        dir.path(),
        "t.jinja",
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}\
         {% if tools %}{{ tools|tojson }}{% endif %}{{ enable_thinking }}\
         {% if add_generation_prompt %}<gen>{% endif %}",
    );
    let messages = write(dir.path(), "m.json", r#"{"messages": [{"role": "user", "content": "hi"}]}"#);
    let tools = write(dir.path(), "tools.json", r#"[{"name": "f"}]"#);
    let run = |extra: &[&str]| {
        let mut cmd = bin();
        cmd.args(["template", "render", "--template"]).arg(&template).arg("--messages").arg(&messages);
        stdout(cmd.args(extra).output().unwrap())
    };
    assert_eq!(run(&[]), "[user:hi]<gen>");
    assert_eq!(run(&["--no-generation-prompt", "--bos", "B"]), "B[user:hi]");
    assert_eq!(
        run(&["--tools", tools.to_str().unwrap(), "--kwargs", r#"{"enable_thinking": true}"#]),
        r#"[user:hi][{"name": "f"}]True<gen>"#
    );
}

#[test]
fn template_errors_fail_with_their_message() {
    let dir = tempfile::tempdir().unwrap();
    let template = write(dir.path(), "t.jinja", "{{ raise_exception('System role not supported') }}");
    let messages = write(dir.path(), "m.json", "[]");
    let out = bin()
        .args(["template", "render", "--template"])
        .arg(&template)
        .arg("--messages")
        .arg(&messages)
        .output();
    let out = out.unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("System role not supported"));
    let bad = write(dir.path(), "bad.json", r#"{"msgs": []}"#);
    let out =
        bin().args(["template", "render", "--template"]).arg(&template).arg("--messages").arg(&bad).output();
    let out = out.unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"messages\""));
}

#[test]
fn renders_with_a_models_own_template() {
    let dir = match std::env::var_os("FERROLM_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => ferrolm::hub::model_dir().unwrap(),
    };
    let model = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.is_file() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "{} is missing and CI=true",
            model.display()
        );
        eprintln!("notice: skipping, {} not found", model.display());
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let messages = write(
        tmp.path(),
        "m.json",
        r#"[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]"#,
    );
    let out = bin().args(["template", "render", "-m"]).arg(&model).arg("--messages").arg(&messages).output();
    assert_eq!(
        stdout(out.unwrap()),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    );
}
