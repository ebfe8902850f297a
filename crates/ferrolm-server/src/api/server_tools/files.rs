//! The file tools of `POST /tools`: `read_file`, `write_file`, `edit_file`, `file_glob_search`
//! and `grep_search`, as llama-server's (`tools/server/server-tools.cpp`): the same parameters,
//! limits and answer shapes. They block on the file system, so the caller runs them on tokio's
//! blocking pool, never on the engine's thread.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{CallError, opt_bool, opt_i64, opt_str, req_str};

/// Most bytes `read_file` returns as text (more needs a line range).
const READ_MAX: usize = 16 * 1024;
/// Most bytes `read_file` returns as base64 (`x-resp-type: base64`).
const READ_MAX_BASE64: u64 = 32 * 1024 * 1024;
/// Most entries `file_glob_search` shows and matches `grep_search` reports.
const SEARCH_MAX: usize = 100;
/// Time budget of one directory listing (git or the walker).
const LIST_BUDGET: Duration = Duration::from_secs(15);
/// Most bytes of `git ls-files` output read.
const GIT_LIST_MAX: usize = 8 << 20;
/// Directories listed but never walked into: they can be enormous.
const JUNK_DIRS: [&str; 13] = [
    ".git",
    ".svn",
    ".hg",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    "dist",
    "build",
    "target",
    ".cache",
    ".idea",
    ".vscode",
];

/// Resolves a tool's `path`: a leading `~` is the home folder, a relative path is taken from
/// `cwd` (the `x-tool-cwd` header) or the server's working folder; `.` and `..` are folded.
pub(crate) fn resolve(path: &str, cwd: Option<&Path>) -> PathBuf {
    let expanded = match path.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest.trim_start_matches('/')),
            None => PathBuf::from(path),
        },
        _ => PathBuf::from(path),
    };
    let full = if expanded.is_absolute() {
        expanded
    } else {
        match cwd {
            Some(c) => c.join(expanded),
            None => std::env::current_dir().map(|d| d.join(&expanded)).unwrap_or(expanded),
        }
    };
    let mut out = PathBuf::new();
    for c in full.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `*` matches within one path part, `**` across parts, `?` one character, `[...]` a class
/// (`[!...]`/`[^...]` negated, `a-z` ranges). Dynamic programming over (pattern, text)
/// positions, so no pattern takes exponential time.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let mut memo = vec![None; (p.len() + 1) * (t.len() + 1)];
    glob_at(&p, &t, 0, 0, &mut memo)
}

fn glob_at(p: &[char], t: &[char], i: usize, j: usize, memo: &mut [Option<bool>]) -> bool {
    let key = i * (t.len() + 1) + j;
    if let Some(v) = memo[key] {
        return v;
    }
    let v = if i == p.len() {
        j == t.len()
    } else if p[i] == '*' && p.get(i + 1) == Some(&'*') {
        // `**/` also matches no folder at all.
        let skip_slash = p.get(i + 2) == Some(&'/') && glob_at(p, t, i + 3, j, memo);
        skip_slash || glob_at(p, t, i + 2, j, memo) || (j < t.len() && glob_at(p, t, i, j + 1, memo))
    } else if p[i] == '*' {
        glob_at(p, t, i + 1, j, memo) || (j < t.len() && t[j] != '/' && glob_at(p, t, i, j + 1, memo))
    } else if j == t.len() {
        false
    } else if p[i] == '?' {
        t[j] != '/' && glob_at(p, t, i + 1, j + 1, memo)
    } else if p[i] == '[' {
        match class_match(p, i, t[j]) {
            Some((true, end)) => glob_at(p, t, end + 1, j + 1, memo),
            Some((false, _)) => false,
            // No closing bracket: a literal `[`.
            None => t[j] == '[' && glob_at(p, t, i + 1, j + 1, memo),
        }
    } else {
        p[i] == t[j] && glob_at(p, t, i + 1, j + 1, memo)
    };
    memo[key] = Some(v);
    v
}

/// Whether `c` is in the class opening at `p[open]`, and the index of its `]`.
fn class_match(p: &[char], open: usize, c: char) -> Option<(bool, usize)> {
    let mut k = open + 1;
    let negated = matches!(p.get(k), Some('!') | Some('^'));
    if negated {
        k += 1;
    }
    let first = k;
    let mut hit = false;
    while k < p.len() && (p[k] != ']' || k == first) {
        if p.get(k + 1) == Some(&'-') && p.get(k + 2).is_some_and(|&e| e != ']') {
            hit |= p[k] <= c && c <= p[k + 2];
            k += 3;
        } else {
            hit |= p[k] == c;
            k += 1;
        }
    }
    (k < p.len()).then_some((hit != negated, k))
}

/// A pattern without `/` matches an entry's file name at any depth; with `/`, its whole
/// relative path, anchored by `**/` unless it starts with `**` or `/`.
pub(crate) fn path_glob_match(pattern: &str, rel: &str) -> bool {
    if !pattern.contains('/') {
        return glob_match(pattern, rel.rsplit('/').next().unwrap_or(rel));
    }
    if pattern.starts_with("**") || pattern.starts_with('/') {
        return glob_match(pattern, rel);
    }
    glob_match(&format!("**/{pattern}"), rel)
}

/// What a listing returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Files,
    Dirs,
    All,
}

/// One listed entry: its `/`-separated path relative to the base, and whether it is a folder.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub rel: String,
    pub is_dir: bool,
}

/// The entries under `base` (at most `max_depth` deep, 0: any depth), sorted by path, and
/// whether the listing was cut (time budget, unreadable folder). Files come from
/// `git ls-files` when `base` is in a git work tree (so `.gitignore` applies), else from a
/// walk that skips [`JUNK_DIRS`] and symbolic links to folders.
pub(crate) fn list_entries(base: &Path, max_depth: usize, kind: Kind) -> Result<(Vec<Entry>, bool), String> {
    if !base.is_dir() {
        return Err("path does not exist or is not a directory".into());
    }
    let deadline = Instant::now() + LIST_BUDGET;
    if kind == Kind::Files
        && let Some(mut entries) = git_files(base, max_depth, deadline)
    {
        entries.sort_by(|a, b| a.rel.cmp(&b.rel));
        return Ok((entries, false));
    }
    let (mut entries, cut) = walk(base, max_depth, kind, deadline);
    entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok((entries, cut))
}

/// `git ls-files` of `base` (tracked and untracked, ignored ones left out); `None` outside a
/// git work tree, without git, or past the deadline.
fn git_files(base: &Path, max_depth: usize, deadline: Instant) -> Option<Vec<Entry>> {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(base)
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stdout).take(GIT_LIST_MAX as u64).read_to_end(&mut buf);
        buf
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let out = reader.join().ok()?;
    if !status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out);
    let entries = text
        .lines()
        .map(|l| l.trim_end_matches('\r').replace('\\', "/"))
        .filter(|l| !l.is_empty())
        .filter(|l| max_depth == 0 || l.split('/').count() <= max_depth)
        .filter(|l| base.join(l).is_file())
        .map(|rel| Entry { rel, is_dir: false })
        .collect();
    Some(entries)
}

/// The walk of [`list_entries`] without git.
fn walk(base: &Path, max_depth: usize, kind: Kind, deadline: Instant) -> (Vec<Entry>, bool) {
    let mut out = Vec::new();
    let mut cut = false;
    let mut stack = vec![(base.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, rel_dir, depth)) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            cut = true;
            continue;
        };
        for entry in read {
            if Instant::now() >= deadline {
                return (out, true);
            }
            let Ok(entry) = entry else {
                cut = true;
                break;
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel_dir.is_empty() { name.clone() } else { format!("{rel_dir}/{name}") };
            let Ok(ft) = entry.file_type() else { continue };
            // A link is followed for its kind, never walked into (it may loop).
            let is_link = ft.is_symlink();
            let meta = if is_link { std::fs::metadata(entry.path()).ok() } else { None };
            let is_dir = ft.is_dir() || meta.as_ref().is_some_and(|m| m.is_dir());
            let is_file = ft.is_file() || meta.as_ref().is_some_and(|m| m.is_file());
            if is_dir {
                if kind != Kind::Files {
                    out.push(Entry { rel: rel.clone(), is_dir: true });
                }
                let junk = JUNK_DIRS.contains(&name.as_str());
                if !junk && !is_link && (max_depth == 0 || depth + 1 < max_depth) {
                    stack.push((entry.path(), rel, depth + 1));
                }
            } else if is_file && kind != Kind::Dirs {
                out.push(Entry { rel, is_dir: false });
            }
        }
    }
    (out, cut)
}

/// Splits text into lines as C++'s `getline` does: a final newline ends the last line.
fn lines_of(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

/// `read_file`: the file's text (a 1-based inclusive `start_line`..`end_line` range, lines
/// prefixed `N→` with `append_loc`), or its bytes as base64 when `resp_type` is `base64`.
pub(crate) fn read_file(params: &Value, cwd: Option<&Path>, base64: bool) -> Result<Value, CallError> {
    let path = req_str(params, "path")?;
    let start = opt_i64(params, "start_line")?.unwrap_or(1);
    let end = opt_i64(params, "end_line")?;
    let append_loc = opt_bool(params, "append_loc")?.unwrap_or(false);
    let full = resolve(&path, cwd);
    let Ok(meta) = std::fs::metadata(&full) else {
        return Ok(json!({"error": format!("cannot stat file: {path}")}));
    };
    let size = meta.len();
    if base64 {
        if size > READ_MAX_BASE64 {
            return Ok(json!({"error": format!("file too large ({size} bytes, max {READ_MAX_BASE64})")}));
        }
        let Ok(bytes) = std::fs::read(&full) else {
            return Ok(json!({"error": format!("failed to open file: {path}")}));
        };
        return Ok(json!({"base64": base64_encode(&bytes), "size_bytes": bytes.len()}));
    }
    if size > READ_MAX as u64 && end.is_none() {
        return Ok(json!({"error": format!(
            "file too large ({size} bytes, max {READ_MAX}). Use start_line/end_line to read a portion."
        )}));
    }
    let Ok(bytes) = std::fs::read(&full) else {
        return Ok(json!({"error": format!("failed to open file: {path}")}));
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut out = String::new();
    for (k, line) in lines_of(&text).into_iter().enumerate() {
        let n = k as i64 + 1;
        if n < start {
            continue;
        }
        if end.is_some_and(|e| n > e) {
            break;
        }
        let piece = if append_loc { format!("{n}\u{2192}{line}\n") } else { format!("{line}\n") };
        if out.len() + piece.len() > READ_MAX {
            out.push_str("[output truncated]");
            break;
        }
        out.push_str(&piece);
    }
    Ok(json!({"plain_text_response": out}))
}

/// Standard base64 with padding.
fn base64_encode(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `write_file`: creates or replaces the file (and its missing parent folders).
pub(crate) fn write_file(params: &Value, cwd: Option<&Path>) -> Result<Value, CallError> {
    let path = req_str(params, "path")?;
    let content = req_str(params, "content")?;
    let full = resolve(&path, cwd);
    let ok = full.parent().is_none_or(|p| std::fs::create_dir_all(p).is_ok())
        && std::fs::write(&full, content.as_bytes()).is_ok();
    if !ok {
        return Ok(json!({"error": format!("failed to write file: {path}")}));
    }
    Ok(json!({"result": "file written successfully", "path": path, "bytes": content.len()}))
}

/// `file_glob_search`: entries under `path` matching `include` (default `**`) and not
/// `exclude`, of `type` file (default), dir or all, at most `max_depth` deep, `limit` shown.
pub(crate) fn glob_search(params: &Value, cwd: Option<&Path>) -> Result<Value, CallError> {
    let path = req_str(params, "path")?;
    let include = opt_str(params, "include")?.unwrap_or_else(|| "**".into());
    let exclude = opt_str(params, "exclude")?.unwrap_or_default();
    let kind = match opt_str(params, "type")?.as_deref().unwrap_or("file") {
        "file" => Kind::Files,
        "dir" => Kind::Dirs,
        "all" => Kind::All,
        other => {
            return Ok(
                json!({"error": format!("invalid type: {other} (expected \"file\", \"dir\" or \"all\")")}),
            );
        }
    };
    let max_depth = opt_i64(params, "max_depth")?.unwrap_or(0).max(0) as usize;
    let limit = opt_i64(params, "limit")?.unwrap_or(SEARCH_MAX as i64);
    if limit < 1 {
        return Ok(json!({"error": format!("invalid limit: {limit} (expected 1 or more)")}));
    }
    let limit = (limit as usize).min(SEARCH_MAX);
    let base = resolve(&path, cwd);
    let (entries, cut) = match list_entries(&base, max_depth, kind) {
        Ok(v) => v,
        Err(e) => return Ok(json!({"error": format!("{e}: {path}")})),
    };
    let matches: Vec<&Entry> = entries
        .iter()
        .filter(|e| path_glob_match(&include, &e.rel))
        .filter(|e| exclude.is_empty() || !path_glob_match(&exclude, &e.rel))
        .collect();
    let mut text = String::new();
    let mut shown = Vec::new();
    for e in matches.iter().take(limit) {
        text.push_str(&e.rel);
        text.push_str(if e.is_dir { "/\n" } else { "\n" });
        shown.push(json!({"path": e.rel, "type": if e.is_dir { "dir" } else { "file" }}));
    }
    text.push_str(&format!("\n---\nTotal matches: {}\n", matches.len()));
    if matches.len() > shown.len() {
        text.push_str(&format!(
            "[{} results limit reached ({} total matches). Refine the glob pattern to narrow the search.]\n",
            shown.len(),
            matches.len()
        ));
    }
    if cut {
        text.push_str("[results truncated: time budget or unreadable directory]\n");
    }
    let base = base.to_string_lossy().into_owned();
    Ok(json!({"plain_text_response": text, "entries": shown, "base": base}))
}

/// `grep_search`: the lines matching `pattern` (a regular expression, or text with
/// `literal`) in the file `path` or the files under it (`include`/`exclude` globs), as
/// `file:line` (`file:N:line` with `return_line_numbers`), with `context_lines` around.
pub(crate) fn grep_search(params: &Value, cwd: Option<&Path>) -> Result<Value, CallError> {
    let path = req_str(params, "path")?;
    let pattern = req_str(params, "pattern")?;
    let include = opt_str(params, "include")?.unwrap_or_else(|| "**".into());
    let exclude = opt_str(params, "exclude")?.unwrap_or_default();
    let show_num = opt_bool(params, "return_line_numbers")?.unwrap_or(false);
    let literal = opt_bool(params, "literal")?.unwrap_or(false);
    let ignore_case = opt_bool(params, "ignore_case")?.unwrap_or(false);
    let ctx = opt_i64(params, "context_lines")?.unwrap_or(0).max(0) as usize;
    let source = if literal { fancy_regex::escape(&pattern).into_owned() } else { pattern };
    let source = if ignore_case { format!("(?i){source}") } else { source };
    let re = match fancy_regex::Regex::new(&source) {
        Ok(r) => r,
        Err(e) => return Ok(json!({"error": format!("invalid regex: {e}")})),
    };
    let abs = resolve(&path, cwd);
    let files: Vec<(PathBuf, String)> = if abs.is_file() {
        vec![(abs, path.clone())]
    } else if abs.is_dir() {
        match list_entries(&abs, 0, Kind::Files) {
            Ok((entries, _)) => entries
                .into_iter()
                .filter(|e| path_glob_match(&include, &e.rel))
                .filter(|e| exclude.is_empty() || !path_glob_match(&exclude, &e.rel))
                .map(|e| (abs.join(&e.rel), e.rel))
                .collect(),
            Err(e) => return Ok(json!({"error": format!("{e}: {path}")})),
        }
    } else {
        return Ok(json!({"error": format!("path does not exist: {path}")}));
    };
    let (text, total, full) = grep_files(&files, &re, show_num || ctx > 0, ctx);
    let mut text = text;
    text.push_str(&format!("\n---\nTotal matches: {total}\n"));
    if full {
        text.push_str(&format!(
            "[{SEARCH_MAX} matches limit reached. Narrow the path/pattern/include to see more.]\n"
        ));
    }
    Ok(json!({"plain_text_response": text}))
}

/// The matches of `re` in `files` (path, shown name): the text, their count, and whether the
/// count reached [`SEARCH_MAX`].
fn grep_files(
    files: &[(PathBuf, String)],
    re: &fancy_regex::Regex,
    show_num: bool,
    ctx: usize,
) -> (String, usize, bool) {
    let mut out = String::new();
    let mut total = 0;
    for (file, shown) in files {
        let Ok(bytes) = std::fs::read(file) else { continue };
        let text = String::from_utf8_lossy(&bytes);
        let lines = lines_of(&text);
        for (i, line) in lines.iter().enumerate() {
            if total >= SEARCH_MAX {
                return (out, total, true);
            }
            if !re.is_match(line).unwrap_or(false) {
                continue;
            }
            let (from, to) = (i.saturating_sub(ctx), (i + ctx).min(lines.len() - 1));
            for (j, l) in lines.iter().enumerate().take(to + 1).skip(from) {
                let sep = if j == i { ':' } else { '-' };
                out.push_str(shown);
                out.push(sep);
                if show_num {
                    out.push_str(&format!("{}{sep}", j + 1));
                }
                out.push_str(l);
                out.push('\n');
            }
            if ctx > 0 {
                out.push_str("--\n");
            }
            total += 1;
        }
    }
    (out, total, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_folds_dots_and_takes_the_cwd() {
        let cwd = Path::new("/work/here");
        assert_eq!(resolve("a/../b/./c.txt", Some(cwd)), PathBuf::from("/work/here/b/c.txt"));
        assert_eq!(resolve("/abs/x/..", Some(cwd)), PathBuf::from("/abs"));
        assert_eq!(resolve("../up", Some(cwd)), PathBuf::from("/work/up"));
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.rs", "main.rs"));
        assert!(!glob_match("*.rs", "src/main.rs"));
        assert!(glob_match("**/*.rs", "src/a/main.rs"));
        assert!(glob_match("**/*.rs", "main.rs"));
        assert!(glob_match("file?.[a-c]", "file1.b"));
        assert!(!glob_match("file?.[!a-c]", "file1.b"));
        assert!(glob_match("[[]x", "[x"));
        assert!(path_glob_match("*proj*", "project-alpha"));
        assert!(path_glob_match("src/*.cpp", "a/src/x.cpp"));
        assert!(path_glob_match("src/*.cpp", "src/x.cpp"));
        assert!(!path_glob_match("src/*.cpp", "src/a/x.cpp"));
        // No exponential blow-up.
        assert!(!glob_match("*a*a*a*a*a*a*a*a*a*a*b", &"a".repeat(60)));
    }

    #[test]
    fn base64_matches_the_rfc_vectors() {
        let cases = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")];
        for (plain, enc) in cases {
            assert_eq!(base64_encode(plain.as_bytes()), enc);
        }
    }

    #[test]
    fn listing_skips_junk_and_honours_depth_and_kind() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("build/nested")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
        std::fs::write(dir.path().join("build/x.txt"), "x").expect("write");
        std::fs::write(dir.path().join("top.txt"), "t").expect("write");
        std::fs::write(dir.path().join("a/mid.txt"), "m").expect("write");
        std::fs::write(dir.path().join("a/b/deep.txt"), "d").expect("write");
        let rels = |depth, kind| -> Vec<String> {
            list_entries(dir.path(), depth, kind).expect("list").0.into_iter().map(|e| e.rel).collect()
        };
        assert_eq!(rels(0, Kind::Files), ["a/b/deep.txt", "a/mid.txt", "top.txt"]);
        assert_eq!(rels(2, Kind::Files), ["a/mid.txt", "top.txt"]);
        assert_eq!(rels(1, Kind::Dirs), ["a", "build"]);
        assert_eq!(rels(0, Kind::Dirs), ["a", "a/b", "build"]);
        assert!(list_entries(&dir.path().join("top.txt"), 0, Kind::All).is_err());
    }

    #[test]
    fn read_grep_and_glob_answer_like_llama_server() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f.txt"), "alpha\nbeta\ngamma\n").expect("write");
        let cwd = Some(dir.path());
        let r = read_file(&json!({"path": "f.txt", "start_line": 2, "append_loc": true}), cwd, false)
            .expect("read");
        assert_eq!(r["plain_text_response"], "2\u{2192}beta\n3\u{2192}gamma\n");
        let r = read_file(&json!({"path": "f.txt"}), cwd, true).expect("read");
        assert_eq!(r["base64"], "YWxwaGEKYmV0YQpnYW1tYQo=");
        assert!(read_file(&json!({"path": "nope"}), cwd, false).expect("read")["error"].is_string());
        assert!(read_file(&json!({}), cwd, false).is_err());
        let g = grep_search(&json!({"path": ".", "pattern": "^(be|ga)", "return_line_numbers": true}), cwd)
            .expect("grep");
        assert_eq!(g["plain_text_response"], "f.txt:2:beta\nf.txt:3:gamma\n\n---\nTotal matches: 2\n");
        let g = grep_search(&json!({"path": "f.txt", "pattern": "(", "literal": false}), cwd).expect("grep");
        assert!(g["error"].as_str().expect("error").starts_with("invalid regex"));
        let s = glob_search(&json!({"path": ".", "type": "bogus"}), cwd).expect("glob");
        assert!(s["error"].as_str().expect("error").contains("invalid type"));
        let s = glob_search(&json!({"path": ".", "limit": 0}), cwd).expect("glob");
        assert!(s["error"].as_str().expect("error").contains("invalid limit"));
    }
}
