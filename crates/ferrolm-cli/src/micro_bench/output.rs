//! Results of `ferrolm micro-bench`: in `ferrolm bench`'s formats (a Markdown table, JSON, JSON
//! lines or CSV) and with its statistics and CSV quoting.

use std::io::Write;

use ferrolm::Isa;
use serde_json::{Value, json};

use super::cases::Case;
use crate::bench::info::{BuildInfo, cpu_info};
use crate::bench::output::{OutputFormat, csv_cell, finish_rows, flush_rows, mean, median, stddev};

/// One case's measurements and where they were taken.
pub struct Measurement<'a> {
    /// The case.
    pub case: &'a Case,
    /// The kernels' instruction-set level.
    pub isa: Isa,
    /// Threads.
    pub n_threads: usize,
    /// Calls per repetition.
    pub iterations: u64,
    /// Nanoseconds per call of each repetition.
    pub samples_ns: Vec<u64>,
}

/// The size fields a case may have (absent ones are null).
const DIM_FIELDS: [&str; 10] =
    ["rows", "cols", "width", "n_head", "n_head_kv", "head_dim", "n_depth", "n_tokens", "style", "n_threads"];

impl Measurement<'_> {
    fn median_ns(&self) -> f64 {
        median(&self.samples_ns.iter().map(|&v| v as f64).collect::<Vec<_>>())
    }

    /// Per second of the median time: GFLOP/s, weight GB/s (matrix-vector products) and
    /// values per second (element-wise operators).
    pub fn rates(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        let s = self.median_ns() / 1e9;
        let w = self.case.work;
        (w.flops.map(|f| f / s / 1e9), w.weight_bytes.map(|b| b / s / 1e9), w.elements.map(|e| e / s))
    }

    /// The fields, by name, in a fixed order (every case has all of them).
    pub fn fields(&self, build: &BuildInfo, cpu: &str) -> Vec<(&'static str, Value)> {
        let ns: Vec<f64> = self.samples_ns.iter().map(|&v| v as f64).collect();
        let (gflops, gbs, eps) = self.rates();
        let dim = |name: &str| {
            if name == "n_threads" {
                return json!(self.n_threads);
            }
            self.case.dims.iter().find(|d| d.0 == name).map_or(Value::Null, |d| d.1.clone())
        };
        let mut f = vec![
            ("build_commit", json!(build.commit)),
            ("cpu_info", json!(cpu)),
            ("isa", json!(self.isa.name())),
            ("op", json!(self.case.op)),
            ("type", json!(self.case.dtype)),
            ("case", json!(self.case.label)),
        ];
        f.extend(DIM_FIELDS.iter().map(|&n| (n, dim(n))));
        f.extend([
            ("iterations", json!(self.iterations)),
            ("flops", json!(self.case.work.flops)),
            ("weight_bytes", json!(self.case.work.weight_bytes)),
            ("elements", json!(self.case.work.elements)),
            ("median_ns", json!(median(&ns).round() as u64)),
            ("avg_ns", json!(mean(&ns).round() as u64)),
            ("stddev_ns", json!(stddev(&ns).round() as u64)),
            ("gflops", json!(gflops)),
            ("weight_gbs", json!(gbs)),
            ("elements_per_s", json!(eps)),
            ("samples_ns", json!(self.samples_ns)),
        ]);
        f
    }

    /// The Markdown table's cells.
    fn md_cells(&self) -> Vec<String> {
        let ns: Vec<f64> = self.samples_ns.iter().map(|&v| v as f64).collect();
        let (gflops, gbs, eps) = self.rates();
        let mut rate: Vec<String> = Vec::new();
        rate.extend(gflops.map(|g| format!("{g:.2} GFLOP/s")));
        rate.extend(gbs.map(|g| format!("{g:.2} GB/s")));
        rate.extend(eps.map(|e| format!("{:.3} G elem/s", e / 1e9)));
        vec![
            self.case.op.to_string(),
            self.case.dtype.clone(),
            self.case.label.clone(),
            self.isa.name().to_string(),
            self.n_threads.to_string(),
            format!("{:.2} ± {:.2}", median(&ns) / 1e3, stddev(&ns) / 1e3),
            rate.join(", "),
        ]
    }
}

/// Writes measurements as they come, in one format.
pub struct Printer<W: Write> {
    format: OutputFormat,
    out: W,
    build: BuildInfo,
    cpu: String,
    /// JSON objects held until the array is closed.
    json: Vec<Value>,
}

/// Markdown table columns and whether they are right-aligned.
const MD_COLUMNS: [(&str, bool); 7] = [
    ("op", false),
    ("type", false),
    ("size", false),
    ("isa", false),
    ("threads", true),
    ("µs (median ± sd)", true),
    ("throughput", true),
];

impl<W: Write> Printer<W> {
    /// A printer writing `format` to `out`.
    pub fn new(format: OutputFormat, out: W) -> Self {
        Self { format, out, build: BuildInfo::current(), cpu: cpu_info(), json: Vec::new() }
    }

    /// Writes what comes before the results.
    pub fn begin(&mut self, isa: Isa) -> anyhow::Result<()> {
        match self.format {
            OutputFormat::Md => {
                writeln!(self.out, "## ferrolm micro-bench\n")?;
                writeln!(self.out, "- build: ferrolm {} ({})", self.build.version, self.build.commit)?;
                writeln!(self.out, "- CPU: {} (kernels: {isa})\n", self.cpu)?;
                let head: Vec<&str> = MD_COLUMNS.iter().map(|c| c.0).collect();
                let rule: Vec<&str> = MD_COLUMNS.iter().map(|c| if c.1 { "---:" } else { "---" }).collect();
                writeln!(self.out, "| {} |", head.join(" | "))?;
                writeln!(self.out, "| {} |", rule.join(" | "))?;
            }
            OutputFormat::Csv => {
                let names: Vec<&str> = csv_header();
                writeln!(self.out, "{}", names.join(","))?;
            }
            OutputFormat::Json | OutputFormat::Jsonl => {}
        }
        self.flush()
    }

    /// Writes one measurement.
    pub fn result(&mut self, m: &Measurement<'_>) -> anyhow::Result<()> {
        let fields = m.fields(&self.build, &self.cpu);
        let object = || Value::Object(fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect());
        match self.format {
            OutputFormat::Md => writeln!(self.out, "| {} |", m.md_cells().join(" | "))?,
            OutputFormat::Json => self.json.push(object()),
            OutputFormat::Jsonl => writeln!(self.out, "{}", object())?,
            OutputFormat::Csv => {
                let cells: Vec<String> = fields.iter().map(|(_, v)| csv_cell(v)).collect();
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

/// The CSV header: the names of [`Measurement::fields`].
fn csv_header() -> Vec<&'static str> {
    let mut v = vec!["build_commit", "cpu_info", "isa", "op", "type", "case"];
    v.extend(DIM_FIELDS);
    v.extend([
        "iterations",
        "flops",
        "weight_bytes",
        "elements",
        "median_ns",
        "avg_ns",
        "stddev_ns",
        "gflops",
        "weight_gbs",
        "elements_per_s",
        "samples_ns",
    ]);
    v
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::micro_bench::cases::Work;

    fn case() -> Case {
        Case {
            op: "matmul",
            dtype: "q4_0".into(),
            label: "2 x 32, 1 tok".into(),
            dims: vec![("rows", 2.into()), ("cols", 32.into()), ("n_tokens", 1.into())],
            work: Work { flops: Some(128.0), weight_bytes: Some(36.0), elements: None },
            runner: RefCell::new(Box::new(|| Ok(()))),
        }
    }

    #[test]
    fn fields_match_the_csv_header_and_rates_use_the_median() {
        let c = case();
        let m = Measurement {
            case: &c,
            isa: Isa::Scalar,
            n_threads: 2,
            iterations: 3,
            samples_ns: vec![100, 400, 200],
        };
        let build = BuildInfo { version: "0", commit: "abc" };
        let f = m.fields(&build, "cpu");
        assert_eq!(f.iter().map(|f| f.0).collect::<Vec<_>>(), csv_header());
        let get = |k: &str| f.iter().find(|f| f.0 == k).map(|f| f.1.clone()).unwrap_or(Value::Null);
        assert_eq!(get("median_ns"), json!(200));
        assert_eq!(get("n_threads"), json!(2));
        assert_eq!(get("width"), Value::Null);
        // 128 flops in 200 ns: 0.64 GFLOP/s; 36 bytes: 0.18 GB/s.
        let (g, b, e) = m.rates();
        assert!((g.unwrap_or(0.0) - 0.64).abs() < 1e-9 && (b.unwrap_or(0.0) - 0.18).abs() < 1e-9);
        assert_eq!(e, None);
        let cells = m.md_cells();
        assert_eq!(cells.len(), MD_COLUMNS.len());
        assert_eq!(cells[5], "0.20 ± 0.15");
        assert_eq!(cells[6], "0.64 GFLOP/s, 0.18 GB/s");
    }

    #[test]
    fn every_format_writes_the_measurement() {
        let c = case();
        let m = Measurement { case: &c, isa: Isa::Scalar, n_threads: 1, iterations: 1, samples_ns: vec![5] };
        for format in [OutputFormat::Md, OutputFormat::Json, OutputFormat::Jsonl, OutputFormat::Csv] {
            let mut p = Printer::new(format, Vec::new());
            p.begin(Isa::Scalar).expect("write");
            p.result(&m).expect("write");
            p.finish().expect("write");
            let text = String::from_utf8(p.out).expect("utf-8");
            assert!(text.contains("2 x 32, 1 tok"), "{format:?}: {text}");
            if format == OutputFormat::Json {
                let v: Value = serde_json::from_str(&text).expect("json");
                assert_eq!(v[0]["op"], "matmul");
            }
        }
    }
}
