//! `POST /slots/{id}?action=save|restore|erase`: llama-server's shapes and errors, the files in
//! `--slot-save-path`, and path traversal refused.

use std::sync::Arc;

use super::fake::Fake;
use super::{app, app_with, config, post};
use crate::api::ServerConfig;

fn with_dir(fake: Arc<Fake>, dir: &std::path::Path) -> axum::Router {
    app_with(fake, ServerConfig { slot_save_path: Some(dir.to_path_buf()), ..config() })
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrolm-slots-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

#[tokio::test]
async fn save_restore_erase_answer_as_llama_server() {
    let dir = temp_dir("ok");
    let fake = Arc::new(Fake::reply("a"));
    let app = with_dir(fake.clone(), &dir);
    let v = post(&app, "/slots/1?action=save", r#"{"filename": "s1.bin"}"#).await.json();
    assert_eq!((v["id_slot"].clone(), v["filename"].clone()), (1.into(), "s1.bin".into()), "{v}");
    assert_eq!((v["n_saved"].clone(), v["n_written"].clone()), (3.into(), 7.into()), "{v}");
    assert!(v["timings"]["save_ms"].is_number(), "{v}");
    assert_eq!(std::fs::read(dir.join("s1.bin")).expect("file"), b"FAKE\x01\x02\x03");

    let v = post(&app, "/slots/0?action=restore", r#"{"filename": "s1.bin"}"#).await.json();
    assert_eq!(
        (v["id_slot"].clone(), v["n_restored"].clone(), v["n_read"].clone()),
        (0.into(), 3.into(), 7.into())
    );
    assert!(v["timings"]["restore_ms"].is_number(), "{v}");

    let v = post(&app, "/slots/0?action=erase", "").await.json();
    assert_eq!(v, serde_json::json!({"id_slot": 0, "n_erased": 3}));
    assert!(fake.slot_tokens.lock().expect("lock")[0].is_empty());
    let v = post(&app, "/slots/0?action=save", r#"{"filename": "empty.bin"}"#).await.json();
    assert_eq!(v["n_saved"], 0);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[tokio::test]
async fn bad_requests_get_llama_server_errors() {
    let no_dir = app(Arc::new(Fake::reply("a")));
    let e = post(&no_dir, "/slots/0?action=save", r#"{"filename": "x"}"#)
        .await
        .assert_error(501, "not_supported_error");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("--slot-save-path")), "{e}");

    let dir = temp_dir("bad");
    std::fs::write(dir.join("junk.bin"), b"not a state").expect("write");
    let app = with_dir(Arc::new(Fake::reply("a")), &dir);
    for (path, body, message) in [
        ("/slots/x?action=save", r#"{"filename": "a"}"#, "Invalid slot ID"),
        ("/slots/7?action=save", r#"{"filename": "a"}"#, "Invalid slot ID"),
        ("/slots/7?action=erase", "", "Invalid slot ID"),
        ("/slots/0?action=fly", "", "Invalid action"),
        ("/slots/0", "", "Invalid action"),
        ("/slots/0?action=save", r#"{"filename": "../escape.bin"}"#, "Invalid filename"),
        ("/slots/0?action=save", r#"{"filename": "/etc/passwd"}"#, "Invalid filename"),
        ("/slots/0?action=restore", r#"{"filename": ".."}"#, "Invalid filename"),
        ("/slots/0?action=restore", r#"{"filename": "a\\b"}"#, "Invalid filename"),
        ("/slots/0?action=restore", r#"{"filename": ""}"#, "Invalid filename"),
        ("/slots/0?action=restore", r#"{"filename": "missing.bin"}"#, "Unable to restore slot"),
        ("/slots/0?action=restore", r#"{"filename": "junk.bin"}"#, "Unable to restore slot: not a ferrolm"),
        ("/slots/0?action=save", r#"{}"#, "`filename`"),
    ] {
        let e = post(&app, path, body).await.assert_error(400, "invalid_request_error");
        let m = e["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains(message), "{path} {body}: {e}");
    }
    assert!(!dir.parent().expect("parent").join("escape.bin").exists());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn filenames_are_plain_names() {
    for ok in ["slot1.bin", "a b.bin", "x.y.z", ".hidden"] {
        assert!(crate::api::slots::valid_filename(ok), "{ok}");
    }
    for bad in ["", ".", "..", "a/b", "a\\b", " lead", "trail ", "nul\0", "c:x", &"x".repeat(256)] {
        assert!(!crate::api::slots::valid_filename(bad), "{bad:?}");
    }
}
