//! Results of `ferrolm bench` and their printing: a Markdown table, JSON, JSON lines or CSV,
//! with llama-bench's field names.

use std::io::Write;

use anyhow::Context as _;
use ferrolm::kv::KvType;
use serde_json::{Value, json};

use super::info::{BuildInfo, ModelInfo};

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// A Markdown table with a header naming the model, CPU and build.
    Md,
    /// One JSON array of result objects.
    Json,
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header line.
    Csv,
}

/// One test's measurements and what they were measured on.
#[derive(Debug)]
pub struct TestResult<'a> {
    /// The build.
    pub build: &'a BuildInfo,
    /// The CPU's name.
    pub cpu: &'a str,
    /// The device's name (`--device-name`, or the host name).
    pub device: &'a str,
    /// The model.
    pub model: &'a ModelInfo,
    /// The backend(s) the passes ran on (`CPU`, `OpenCL`, `OpenCL+CPU` for the hybrid).
    pub backend: &'a str,
    /// Largest prompt chunk per forward pass.
    pub n_batch: usize,
    /// Threads.
    pub n_threads: usize,
    /// Key storage type.
    pub type_k: KvType,
    /// Value storage type.
    pub type_v: KvType,
    /// Prompt tokens (0 for a generation test).
    pub n_prompt: usize,
    /// Generated tokens (0 for a prompt test), per sequence.
    pub n_gen: usize,
    /// Sequences generating together, one token each per forward pass (1 for a prompt test).
    pub n_parallel: usize,
    /// Tokens already cached in each sequence when the test started.
    pub n_depth: usize,
    /// `""` for random tokens; for a test on the prompt file `text` (plain decoding) or the
    /// speculative drafter (`lookup`, `draft`).
    pub mode: &'a str,
    /// Tokens drafted over all repetitions (speculative tests).
    pub n_drafted: usize,
    /// Drafted tokens kept over all repetitions.
    pub n_accepted: usize,
    /// When the test started (RFC 3339).
    pub test_time: String,
    /// Nanoseconds of each repetition.
    pub samples_ns: Vec<u64>,
}

/// What a test runs, apart from where and how fast: the fields that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestShape<'a> {
    /// Tokens already cached in each sequence when the test started.
    pub n_depth: usize,
    /// Prompt tokens (0 for a generation test).
    pub n_prompt: usize,
    /// Generated tokens (0 for a prompt test), per sequence.
    pub n_gen: usize,
    /// Sequences generating together.
    pub n_parallel: usize,
    /// `""` for random tokens, `text`, or the speculative drafter's name.
    pub mode: &'a str,
}

impl TestShape<'_> {
    /// `ppN`, `tgN`, or `tgNxP` for `P` sequences generating together, then ` (text)` for a
    /// test on the prompt file or ` (lookup)`, ` (draft)` for a speculative one — with
    /// `kept` = (accepted, drafted) ` (lookup, K/N kept)` — then ` @ dD` at a depth of `D`
    /// cached tokens (llama-bench's name).
    pub fn name(&self, kept: Option<(usize, usize)>) -> String {
        let mut name = match (self.n_prompt, self.n_gen) {
            (p, 0) => format!("pp{p}"),
            (0, g) => format!("tg{g}"),
            (p, g) => format!("pp{p}+tg{g}"),
        };
        if self.n_parallel > 1 {
            name += &format!("x{}", self.n_parallel);
        }
        match (self.mode, kept) {
            ("", _) => {}
            ("text", _) => name += " (text)",
            (drafter, Some((accepted, drafted))) => {
                name += &format!(" ({drafter}, {accepted}/{drafted} kept)")
            }
            (drafter, None) => name += &format!(" ({drafter})"),
        }
        if self.n_depth > 0 {
            name += &format!(" @ d{}", self.n_depth);
        }
        name
    }
}

impl TestResult<'_> {
    /// The test's shape.
    pub fn shape(&self) -> TestShape<'_> {
        TestShape {
            n_depth: self.n_depth,
            n_prompt: self.n_prompt,
            n_gen: self.n_gen,
            n_parallel: self.n_parallel,
            mode: self.mode,
        }
    }

    /// The test's name with its draft counts ([`TestShape::name`]).
    pub fn name(&self) -> String {
        self.shape().name(Some((self.n_accepted, self.n_drafted)))
    }

    /// Tokens per second of each repetition (the tokens of every sequence).
    pub fn samples_ts(&self) -> Vec<f64> {
        let n = ((self.n_prompt + self.n_gen) * self.n_parallel.max(1)) as f64;
        self.samples_ns.iter().map(|&ns| 1e9 * n / ns as f64).collect()
    }

    /// The fields, in llama-bench's order and with its names, plus `device`, `n_parallel`,
    /// `mode`, `n_drafted`, `n_accepted` and `median_ts`.
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        let ns: Vec<f64> = self.samples_ns.iter().map(|&v| v as f64).collect();
        let ts = self.samples_ts();
        vec![
            ("build_commit", json!(self.build.commit)),
            ("build_number", json!(0)),
            ("cpu_info", json!(self.cpu)),
            ("device", json!(self.device)),
            ("backends", json!(self.backend)),
            ("model_filename", json!(self.model.filename)),
            ("model_type", json!(self.model.model_type())),
            ("model_size", json!(self.model.size)),
            ("model_n_params", json!(self.model.n_params)),
            ("n_batch", json!(self.n_batch)),
            ("n_threads", json!(self.n_threads)),
            ("type_k", json!(kv_type_name(self.type_k))),
            ("type_v", json!(kv_type_name(self.type_v))),
            ("n_prompt", json!(self.n_prompt)),
            ("n_gen", json!(self.n_gen)),
            ("n_depth", json!(self.n_depth)),
            ("n_parallel", json!(self.n_parallel)),
            ("mode", json!(self.mode)),
            ("n_drafted", json!(self.n_drafted)),
            ("n_accepted", json!(self.n_accepted)),
            ("test_time", json!(self.test_time)),
            ("avg_ns", json!(mean(&ns).round() as u64)),
            ("stddev_ns", json!(stddev(&ns).round() as u64)),
            ("avg_ts", json!(mean(&ts))),
            ("stddev_ts", json!(stddev(&ts))),
            ("median_ts", json!(median(&ts))),
            ("samples_ns", json!(self.samples_ns)),
            ("samples_ts", json!(ts)),
        ]
    }

    fn to_json(&self) -> Value {
        Value::Object(self.fields().into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }
}

/// llama.cpp's name of a cache type (`f16`, `f32`, `q8_0`, `q4_0`).
fn kv_type_name(t: KvType) -> &'static str {
    t.name()
}

/// Mean; 0 for no values.
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// Sample standard deviation (n - 1 in the denominator, as llama-bench); 0 below two values.
pub fn stddev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Median (the mean of the two middle values for an even count); 0 for no values.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Writes results as they come, in one format.
pub struct Printer<W: Write> {
    format: OutputFormat,
    out: W,
    /// JSON objects held until the array is closed.
    json: Vec<Value>,
}

/// Markdown table columns and whether they are right-aligned.
const MD_COLUMNS: [(&str, bool); 8] = [
    ("model", false),
    ("size", true),
    ("params", true),
    ("backend", false),
    ("threads", true),
    ("test", true),
    ("t/s", true),
    ("median t/s", true),
];

impl<W: Write> Printer<W> {
    /// A printer writing `format` to `out`.
    pub fn new(format: OutputFormat, out: W) -> Self {
        Self { format, out, json: Vec::new() }
    }

    /// Writes what comes before the results.
    pub fn begin(&mut self, build: &BuildInfo, cpu: &str, device: &str) -> anyhow::Result<()> {
        match self.format {
            OutputFormat::Md => {
                writeln!(self.out, "## ferrolm bench\n")?;
                writeln!(self.out, "- build: ferrolm {} ({})", build.version, build.commit)?;
                writeln!(self.out, "- CPU: {cpu}")?;
                writeln!(self.out, "- device: {device}")?;
            }
            OutputFormat::Csv => {
                writeln!(self.out, "{}", CSV_FIELDS.join(","))?;
            }
            OutputFormat::Json | OutputFormat::Jsonl => {}
        }
        self.flush()
    }

    /// Writes what comes before a model's results (Markdown: its description and a table head).
    pub fn model(&mut self, m: &ModelInfo) -> anyhow::Result<()> {
        if self.format == OutputFormat::Md {
            writeln!(
                self.out,
                "\n- model: {} ({}, {}, {} params; weights {})\n",
                m.short_name,
                m.arch,
                m.size_label(),
                m.params_label(),
                m.types_label()
            )?;
            let head: Vec<&str> = MD_COLUMNS.iter().map(|c| c.0).collect();
            let rule: Vec<&str> = MD_COLUMNS.iter().map(|c| if c.1 { "---:" } else { "---" }).collect();
            writeln!(self.out, "| {} |", head.join(" | "))?;
            writeln!(self.out, "| {} |", rule.join(" | "))?;
        }
        self.flush()
    }

    /// Writes one test's result.
    pub fn result(&mut self, r: &TestResult<'_>) -> anyhow::Result<()> {
        match self.format {
            OutputFormat::Md => {
                let ts = r.samples_ts();
                let cells = [
                    r.model.model_type(),
                    r.model.size_label(),
                    r.model.params_label(),
                    r.backend.to_string(),
                    r.n_threads.to_string(),
                    r.name(),
                    format!("{:.2} ± {:.2}", mean(&ts), stddev(&ts)),
                    format!("{:.2}", median(&ts)),
                ];
                writeln!(self.out, "| {} |", cells.join(" | "))?;
            }
            OutputFormat::Json => self.json.push(r.to_json()),
            OutputFormat::Jsonl => writeln!(self.out, "{}", r.to_json())?,
            OutputFormat::Csv => {
                let cells: Vec<String> = r.fields().iter().map(|(_, v)| csv_cell(v)).collect();
                writeln!(self.out, "{}", cells.join(","))?;
            }
        }
        self.flush()
    }

    /// Writes what comes after the results.
    pub fn finish(&mut self) -> anyhow::Result<()> {
        finish_rows(&mut self.out, self.format, &mut self.json)
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        flush_rows(&mut self.out)
    }
}

/// Writes what follows a report's rows in `format` (a blank line after a table, the array of
/// the rows gathered in `json`) and flushes: the end of a `bench` or `micro-bench` report.
pub(crate) fn finish_rows(
    out: &mut impl Write,
    format: OutputFormat,
    json: &mut Vec<Value>,
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Md => writeln!(out)?,
        OutputFormat::Json => {
            let all = Value::Array(std::mem::take(json));
            writeln!(out, "{}", serde_json::to_string_pretty(&all)?)?;
        }
        OutputFormat::Jsonl | OutputFormat::Csv => {}
    }
    flush_rows(out)
}

/// Flushes a report's output, so that each row shows as soon as it is measured.
pub(crate) fn flush_rows(out: &mut impl Write) -> anyhow::Result<()> {
    out.flush().context("cannot write the results")
}

/// The CSV header: the field names of [`TestResult::fields`].
const CSV_FIELDS: [&str; 28] = [
    "build_commit",
    "build_number",
    "cpu_info",
    "device",
    "backends",
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "n_batch",
    "n_threads",
    "type_k",
    "type_v",
    "n_prompt",
    "n_gen",
    "n_depth",
    "n_parallel",
    "mode",
    "n_drafted",
    "n_accepted",
    "test_time",
    "avg_ns",
    "stddev_ns",
    "avg_ts",
    "stddev_ts",
    "median_ts",
    "samples_ns",
    "samples_ts",
];

/// A CSV cell, always quoted as llama-bench does; arrays are `;`-separated.
pub(crate) fn csv_cell(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(Value::to_string).collect::<Vec<_>>().join(";"),
        other => other.to_string(),
    };
    format!("\"{}\"", text.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(stddev(&[5.0]), 0.0);
        // Sample standard deviation of 2, 4, 4, 4, 5, 5, 7, 9: sqrt(32 / 7).
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert!((stddev(&v) - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(median(&v), 4.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn csv_header_matches_the_fields() {
        let build = BuildInfo { version: "0", commit: "abc" };
        let model = ModelInfo {
            filename: "m.gguf".into(),
            short_name: "m.gguf".into(),
            arch: "llama",
            size: 10,
            n_params: 20,
            types: vec![(ferrolm::GgmlType::Q4_0, 10)],
            file_type: None,
        };
        let r = TestResult {
            backend: "CPU",
            build: &build,
            cpu: "cpu \"x\"",
            device: "board-1",
            model: &model,
            n_batch: 512,
            n_threads: 2,
            type_k: KvType::F16,
            type_v: KvType::F32,
            n_prompt: 0,
            n_gen: 4,
            n_parallel: 1,
            n_depth: 0,
            mode: "",
            n_drafted: 0,
            n_accepted: 0,
            test_time: "2025-01-01T00:00:00Z".into(),
            samples_ns: vec![1_000_000_000, 2_000_000_000],
        };
        let names: Vec<&str> = r.fields().iter().map(|f| f.0).collect();
        assert_eq!(names, CSV_FIELDS);
        let mut p = Printer::new(OutputFormat::Csv, Vec::new());
        p.result(&r).expect("write");
        let line = String::from_utf8(p.out).expect("utf-8");
        assert!(line.starts_with("\"abc\",\"0\",\"cpu \"\"x\"\"\",\"board-1\",\"CPU\""), "{line}");
        assert!(line.trim_end().ends_with("\"1000000000;2000000000\",\"4.0;2.0\""), "{line}");
        assert_eq!(r.name(), "tg4");
        assert_eq!(r.samples_ts(), vec![4.0, 2.0]);
        let r8 = TestResult { n_parallel: 8, ..r };
        assert_eq!(r8.name(), "tg4x8");
        assert_eq!(r8.samples_ts(), vec![32.0, 16.0]);
        // The depth is in the name, not in the tokens counted.
        let deep = TestResult { n_depth: 4096, ..r8 };
        assert_eq!(deep.name(), "tg4x8 @ d4096");
        assert_eq!(deep.samples_ts(), vec![32.0, 16.0]);
        let spec =
            TestResult { mode: "lookup", n_parallel: 1, n_depth: 300, n_drafted: 9, n_accepted: 7, ..deep };
        assert_eq!(spec.name(), "tg4 (lookup, 7/9 kept) @ d300");
        // Without the counts (the dashboard's name, the same across runs).
        assert_eq!(spec.shape().name(None), "tg4 (lookup) @ d300");
        let text = TestResult { mode: "text", n_drafted: 0, n_accepted: 0, ..spec };
        assert_eq!(text.name(), "tg4 (text) @ d300");
    }
}
