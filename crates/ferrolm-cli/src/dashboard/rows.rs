//! Reading benchmark results: `ferrolm bench -o jsonl` lines (or `-o json` arrays, or
//! llama-bench's own JSON lines) from files, folders, file-name globs or stdin.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Map, Value};

use crate::bench::TestShape;

/// What a plot draws one line or bar for: a model on a backend with a thread count on a device.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Series {
    /// The model file's name without its `.gguf` extension (or the `model_type`).
    pub model: String,
    /// `backends`, e.g. `CPU`, `OpenCL+CPU`.
    pub backend: String,
    /// `device`; llama-bench's rows have none: their `cpu_info`.
    pub device: String,
    /// `n_threads`.
    pub n_threads: u64,
}

impl Series {
    /// `model / backend / N threads / device`: the legend's text and the `data-series` value.
    pub fn label(&self) -> String {
        let threads = if self.n_threads == 1 { "thread" } else { "threads" };
        format!("{} / {} / {} {threads} / {}", self.model, self.backend, self.n_threads, self.device)
    }
}

/// What a plot is about: one test (`pp512`, `tg128 @ d4096`, …). Ordered by depth, then
/// prompt tests before generation tests, then size.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Test {
    n_depth: usize,
    generates: bool,
    n_prompt: usize,
    n_gen: usize,
    n_parallel: usize,
    mode: String,
}

impl Test {
    /// The test's name as `ferrolm bench` prints it, without draft counts.
    pub fn name(&self) -> String {
        TestShape {
            n_depth: self.n_depth,
            n_prompt: self.n_prompt,
            n_gen: self.n_gen,
            n_parallel: self.n_parallel,
            mode: &self.mode,
        }
        .name(None)
    }
}

/// One result row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Its series.
    pub series: Series,
    /// Its test.
    pub test: Test,
    /// Mean tokens/s.
    pub avg_ts: f64,
    /// Standard deviation of the tokens/s (0 when absent).
    pub stddev_ts: f64,
    /// `build_commit`, or "unknown".
    pub commit: String,
    /// `test_time` (RFC 3339, which sorts as text), or "".
    pub time: String,
}

/// Reads every input: a file, a folder (its `*.jsonl` and `*.json` files), a file-name glob
/// (`results/*.jsonl`, for shells that leave it to the program) or `-` (stdin). Returns the
/// rows in input order and the names of the sources read.
pub fn read_inputs(inputs: &[PathBuf]) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    let mut rows = Vec::new();
    let mut sources = Vec::new();
    for input in inputs {
        if input.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading stdin")?;
            rows.extend(parse_text(&text, "<stdin>")?);
            sources.push("<stdin>".to_string());
            continue;
        }
        for file in expand(input)? {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {name}"))?;
            rows.extend(parse_text(&text, &name)?);
            sources.push(name);
        }
    }
    if rows.is_empty() {
        anyhow::bail!("no benchmark results in {}", sources.join(", "));
    }
    Ok((rows, sources))
}

/// The files an input names: itself, a folder's result files (sorted), or a glob's matches.
fn expand(input: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if input.is_dir() {
        let files = list_dir(input, |name| name.ends_with(".jsonl") || name.ends_with(".json"))?;
        if files.is_empty() {
            anyhow::bail!("{} holds no .jsonl or .json files", input.display());
        }
        return Ok(files);
    }
    let name = input.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if input.exists() || !name.contains(['*', '?']) {
        return Ok(vec![input.to_path_buf()]);
    }
    let dir = match input.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let files = list_dir(dir, |n| wildcard_match(&name, n))?;
    if files.is_empty() {
        anyhow::bail!("no file matches {}", input.display());
    }
    Ok(files)
}

/// The files of `dir` whose names pass `keep`, sorted.
fn list_dir(dir: &Path, keep: impl Fn(&str) -> bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let path = entry.path();
        if path.is_file() && keep(&entry.file_name().to_string_lossy()) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters and `?` for one.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Greedy matching with backtracking to the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            (i, j) = (i + 1, j + 1);
        } else if i < p.len() && p[i] == '*' {
            (star, mark, i) = (Some(i), j, i + 1);
        } else if let Some(s) = star {
            (i, mark) = (s + 1, mark + 1);
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The rows of one source's text: JSON lines (blank lines skipped), or one JSON array
/// (`ferrolm bench -o json`). Errors name the source and the line (or the array element).
pub fn parse_text(text: &str, source: &str) -> anyhow::Result<Vec<Row>> {
    if text.trim_start().starts_with('[') {
        let all: Vec<Value> =
            serde_json::from_str(text).with_context(|| format!("{source}: not a JSON array of results"))?;
        return all
            .iter()
            .enumerate()
            .map(|(i, v)| parse_row(v).map_err(|e| anyhow::anyhow!("{source}: element {}: {e}", i + 1)))
            .collect();
    }
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{source}:{}", i + 1);
        let v: Value = serde_json::from_str(line).with_context(|| format!("{}: not a JSON line", at()))?;
        rows.push(parse_row(&v).map_err(|e| anyhow::anyhow!("{}: {e}", at()))?);
    }
    Ok(rows)
}

/// One result object. Needs `avg_ts`, `n_prompt`, `n_gen`, `n_threads`, `backends` and
/// `model_filename` or `model_type`; the other fields have defaults (llama-bench has no
/// `device`, `n_parallel` or `mode`).
fn parse_row(v: &Value) -> Result<Row, String> {
    let obj = v.as_object().ok_or("not a JSON object")?;
    let model = match str_field(obj, "model_filename") {
        Some(f) => model_name(f),
        None => str_field(obj, "model_type").ok_or("no \"model_filename\" or \"model_type\"")?.to_string(),
    };
    let device = str_field(obj, "device").or_else(|| str_field(obj, "cpu_info")).unwrap_or("unknown");
    let series = Series {
        model,
        backend: str_field(obj, "backends").ok_or("no \"backends\" (a string)")?.to_string(),
        device: device.to_string(),
        n_threads: uint_field(obj, "n_threads")?.ok_or("no \"n_threads\" (a whole number)")?,
    };
    let (n_prompt, n_gen) = (count(obj, "n_prompt", None)?, count(obj, "n_gen", None)?);
    let test = Test {
        n_depth: count(obj, "n_depth", Some(0))?,
        generates: n_gen > 0,
        n_prompt,
        n_gen,
        n_parallel: count(obj, "n_parallel", Some(1))?,
        mode: str_field(obj, "mode").unwrap_or("").to_string(),
    };
    let avg_ts = obj.get("avg_ts").and_then(Value::as_f64).filter(|t| t.is_finite() && *t >= 0.0);
    Ok(Row {
        series,
        test,
        avg_ts: avg_ts.ok_or("no \"avg_ts\" (a number of tokens/s, 0 or more)")?,
        stddev_ts: obj.get("stddev_ts").and_then(Value::as_f64).unwrap_or(0.0),
        commit: str_field(obj, "build_commit").unwrap_or("unknown").to_string(),
        time: str_field(obj, "test_time").unwrap_or("").to_string(),
    })
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// A whole-number field: `None` when absent, an error when present but not a whole number.
fn uint_field(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| format!("\"{key}\" is not a whole number: {v}")),
    }
}

/// A count: `default` when absent (an error without one), an error when not a whole number.
fn count(obj: &Map<String, Value>, key: &str, default: Option<u64>) -> Result<usize, String> {
    let n = uint_field(obj, key)?.or(default).ok_or_else(|| format!("no \"{key}\" (a whole number)"))?;
    usize::try_from(n).map_err(|_| format!("\"{key}\" is too large: {n}"))
}

/// A model path's last component without `.gguf` (paths from Linux, Android or Windows).
fn model_name(path: &str) -> String {
    let base = path.trim_end_matches(['/', '\\']).rsplit(['/', '\\']).next().unwrap_or(path);
    base.strip_suffix(".gguf").unwrap_or(base).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*.jsonl", "a.jsonl"));
        assert!(wildcard_match("pixel-?.jsonl", "pixel-7.jsonl"));
        assert!(wildcard_match("a*b*c", "aXXbYYbc"));
        assert!(!wildcard_match("*.jsonl", "a.json"));
        assert!(!wildcard_match("a?", "a"));
        assert!(wildcard_match("*", ""));
    }

    #[test]
    fn model_names_lose_folders_and_the_extension() {
        assert_eq!(model_name("/data/local/tmp/ferrolm/SmolLM2.Q4_1.gguf"), "SmolLM2.Q4_1");
        assert_eq!(model_name("C:\\models\\qwen.gguf"), "qwen");
        assert_eq!(model_name("./Qwen2.5-0.5B-Instruct/"), "Qwen2.5-0.5B-Instruct");
    }

    #[test]
    fn llama_bench_rows_get_defaults() {
        let line = r#"{"build_commit":"0c1e570","cpu_info":"Xeon","backends":"CPU","model_filename":"m.gguf","n_threads":2,"n_prompt":512,"n_gen":0,"n_depth":0,"test_time":"2025-01-01T00:00:00Z","avg_ts":160.5}"#;
        let rows = parse_text(line, "llama.jsonl").expect("valid");
        let r = &rows[0];
        assert_eq!(r.series.label(), "m / CPU / 2 threads / Xeon");
        assert_eq!((r.test.name(), r.avg_ts, r.commit.as_str()), ("pp512".to_string(), 160.5, "0c1e570"));
    }

    #[test]
    fn a_json_array_is_read_too() {
        let text = r#"[{"backends":"CPU","model_type":"llama 135M Q4_1","n_threads":1,"n_prompt":0,"n_gen":4,
            "n_parallel":8,"n_depth":64,"mode":"","avg_ts":3}]"#;
        let rows = parse_text(text, "r.json").expect("valid");
        assert_eq!(rows[0].test.name(), "tg4x8 @ d64");
        assert_eq!(rows[0].series.label(), "llama 135M Q4_1 / CPU / 1 thread / unknown");
        assert_eq!((rows[0].commit.as_str(), rows[0].time.as_str()), ("unknown", ""));
    }
}
