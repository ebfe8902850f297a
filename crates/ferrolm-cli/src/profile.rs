//! `ferrolm profile` and `ferrolm generate --profile`: the time of each operator type per
//! forward pass, for the prompt (prefill) and the generated tokens (decode).
//!
//! The model's backends are wrapped in the library's timing layer
//! ([`ferrolm::backend::profile::ProfiledBackend`], which costs nothing when not installed),
//! the generation runs as usual, and the table sets what each operator took against the time
//! the session measured for the phase; the difference is the work outside the backend's
//! operators (sampling, detokenizing, batch and cache bookkeeping).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use ferrolm::backend::profile::{OpTime, Phase, PhaseProfile, Profiler};
use ferrolm::model::Model;
use ferrolm::session::{GenerateParams, GenerationStats, Session};
use serde_json::{Value, json};

use crate::model_args::ModelArgs;

/// The prompt profiled when none is given.
const DEFAULT_PROMPT: &str = "The history of the printing press begins in the fifteenth century, when";

/// Help text on the prompt and on what the times mean.
const PROFILE_HELP: &str = "Without -p or -f the prompt is a fixed sentence of plain English. \
Times are what the host sees: on a GPU backend (opencl, cuda) an \
operator that only queues work looks cheap and the call that waits for the device (a transfer, \
the next download) carries it.";

/// Arguments of `ferrolm profile`.
#[derive(clap::Args)]
#[command(after_help = PROFILE_HELP)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompt: crate::prompt_args::PromptArgs,
    /// Tokens to generate (greedy, past end-of-generation tokens).
    #[arg(short = 'n', long = "n-predict", default_value_t = 32)]
    n_predict: usize,
    /// Skip the unrecorded warm-up generation (the prompt and two tokens) before the profiled one.
    #[arg(long)]
    no_warmup: bool,
    /// Output format: md (a table per phase) or json.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Md)]
    output: Format,
}

/// Output formats of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A Markdown table per phase.
    Md,
    /// One JSON object.
    Json,
}

/// The timing layer installed on a model: says which phase the following passes belong to and
/// reports what they took.
pub struct Hook {
    profiler: Arc<Profiler>,
}

impl Hook {
    /// Wraps `model`'s backends in the timing layer, roles named after its weights.
    pub fn install(model: &mut Model) -> anyhow::Result<Hook> {
        let profiler = Profiler::new(model.weights().matrices());
        let placement = model.placement().profiled(&profiler);
        model.set_placement(placement).context("profiling the model's backends")?;
        Ok(Hook { profiler })
    }

    /// The following passes are the prompt's (call before prefilling).
    pub fn prefill(&self) {
        self.profiler.set_phase(Phase::Prefill);
    }

    /// The following passes are generated tokens' (call once the prompt is prefilled).
    pub fn decode(&self) {
        self.profiler.set_phase(Phase::Decode);
    }

    /// Forgets what was recorded so far.
    pub fn reset(&self) {
        self.profiler.reset();
    }

    /// The profile of a generation whose statistics are `stats`.
    pub fn report(&self, stats: &GenerationStats) -> Report {
        let [prefill, decode] = self.profiler.report();
        Report {
            phases: vec![
                PhaseReport::new(Phase::Prefill, prefill, stats.n_prefilled, stats.prompt_time),
                PhaseReport::new(Phase::Decode, decode, stats.n_decode, stats.decode_time),
            ],
        }
    }
}

/// A generation's profile.
#[derive(Debug)]
pub struct Report {
    /// Prefill, then decode.
    pub phases: Vec<PhaseReport>,
}

/// One phase's operators against its measured time.
#[derive(Debug)]
pub struct PhaseReport {
    /// The phase.
    pub phase: Phase,
    /// Forward passes.
    pub passes: u64,
    /// Tokens run through the model.
    pub tokens: usize,
    /// The time the session measured for the phase.
    pub measured: Duration,
    /// Operators, slowest first.
    pub ops: Vec<OpTime>,
}

/// One row of a phase's table.
#[derive(Debug, PartialEq)]
pub struct Row {
    /// The operator (`matmul`, …), or `other` for the time outside the backend's operators.
    pub op: String,
    /// A matrix product's weight type.
    pub weight: String,
    /// A matrix product's role.
    pub role: String,
    /// Calls (none for `other`).
    pub calls: Option<u64>,
    /// Milliseconds in all passes.
    pub total_ms: f64,
    /// Milliseconds per pass.
    pub ms_per_pass: f64,
    /// Share of the phase's measured time, in percent.
    pub percent: f64,
}

impl PhaseReport {
    fn new(phase: Phase, p: PhaseProfile, tokens: usize, measured: Duration) -> Self {
        PhaseReport { phase, passes: p.passes, tokens, measured, ops: p.ops }
    }

    /// Milliseconds in the backend's operators.
    pub fn ops_ms(&self) -> f64 {
        self.ops.iter().map(|o| o.ns as f64 / 1e6).sum()
    }

    /// The table: each operator, then `other` (measured time outside the operators).
    pub fn rows(&self) -> Vec<Row> {
        let measured_ms = self.measured.as_secs_f64() * 1e3;
        let per_pass = |ms: f64| if self.passes == 0 { 0.0 } else { ms / self.passes as f64 };
        let percent = |ms: f64| if measured_ms > 0.0 { 100.0 * ms / measured_ms } else { 0.0 };
        let mut rows: Vec<Row> = self
            .ops
            .iter()
            .map(|o| {
                let ms = o.ns as f64 / 1e6;
                Row {
                    op: o.op.name().to_string(),
                    weight: o.weight.clone().unwrap_or_default(),
                    role: o.role.clone().unwrap_or_default(),
                    calls: Some(o.calls),
                    total_ms: ms,
                    ms_per_pass: per_pass(ms),
                    percent: percent(ms),
                }
            })
            .collect();
        let other = (measured_ms - self.ops_ms()).max(0.0);
        rows.push(Row {
            op: "other".into(),
            weight: String::new(),
            role: String::new(),
            calls: None,
            total_ms: other,
            ms_per_pass: per_pass(other),
            percent: percent(other),
        });
        rows
    }
}

impl Report {
    /// Markdown: a heading and a table per phase that ran.
    pub fn write_md(&self, out: &mut dyn Write) -> std::io::Result<()> {
        for p in self.phases.iter().filter(|p| p.passes > 0) {
            writeln!(
                out,
                "\n### {}: {} in {}, {:.2} ms measured, {:.2} ms in backend operators\n",
                p.phase.name(),
                plural(p.tokens as u64, "token"),
                plural(p.passes, "pass"),
                p.measured.as_secs_f64() * 1e3,
                p.ops_ms()
            )?;
            writeln!(out, "| op | weight | role | calls | total ms | ms/pass | % |")?;
            writeln!(out, "| --- | --- | --- | ---: | ---: | ---: | ---: |")?;
            for r in p.rows() {
                let calls = r.calls.map_or(String::new(), |c| c.to_string());
                writeln!(
                    out,
                    "| {} | {} | {} | {calls} | {:.3} | {:.3} | {:.1} |",
                    r.op, r.weight, r.role, r.total_ms, r.ms_per_pass, r.percent
                )?;
            }
        }
        writeln!(out, "\n(other: time outside the backend's operators: sampling, detokenizing, bookkeeping)")
    }

    /// One JSON object: every phase with its rows.
    pub fn to_json(&self) -> Value {
        let phases: Vec<Value> = self
            .phases
            .iter()
            .map(|p| {
                let rows: Vec<Value> = p
                    .rows()
                    .into_iter()
                    .map(|r| {
                        json!({
                            "op": r.op, "weight": r.weight, "role": r.role, "calls": r.calls,
                            "total_ms": r.total_ms, "ms_per_pass": r.ms_per_pass, "percent": r.percent,
                        })
                    })
                    .collect();
                json!({
                    "phase": p.phase.name(),
                    "tokens": p.tokens,
                    "passes": p.passes,
                    "measured_ms": p.measured.as_secs_f64() * 1e3,
                    "ops_ms": p.ops_ms(),
                    "ops": rows,
                })
            })
            .collect();
        json!({ "phases": phases })
    }
}

/// `1 pass`, `2 passes`, `3 tokens`.
fn plural(n: u64, noun: &str) -> String {
    match (n, noun.ends_with('s')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        (_, false) => format!("{n} {noun}s"),
    }
}

/// Runs `ferrolm profile`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let prompt = args.prompt.text(Some(DEFAULT_PROMPT))?;
    if args.n_predict == 0 {
        bail!("--n-predict must be at least 1");
    }
    let (mut model, _, path) = args.model.load_with_path()?;
    let tokens = model.tokenizer().encode(&prompt, true, true)?;
    if tokens.is_empty() {
        bail!("the prompt tokenized to nothing");
    }
    if tokens.len() + args.n_predict > args.model.ctx_size {
        bail!(
            "the prompt and --n-predict need {} tokens, more than --ctx-size",
            tokens.len() + args.n_predict
        );
    }
    let hook = Hook::install(&mut model)?;
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(args.n_predict) };
    if !args.no_warmup {
        let warm = GenerateParams { max_tokens: Some(2), ..params.clone() };
        Session::new(&model, args.model.session_options())?.generate_tokens(&tokens, &warm)?;
        hook.reset();
    }
    let mut session = Session::new(&model, args.model.session_options())?;
    hook.prefill();
    let stream = session.stream_tokens(&tokens, &params)?;
    hook.decode();
    let done = stream.into_completion()?;
    let report = hook.report(&done.stats);
    let mut out = std::io::stdout().lock();
    match args.output {
        Format::Md => {
            writeln!(
                out,
                "## ferrolm profile\n\n- model: {}\n- backend: {}, {} threads",
                path.display(),
                model.placement().describe(),
                ferrolm::threads::current_num_threads()
            )?;
            report.write_md(&mut out)?;
        }
        Format::Json => {
            let mut v = report.to_json();
            v["model"] = json!(path.display().to_string());
            v["backend"] = json!(model.placement().describe());
            v["n_threads"] = json!(ferrolm::threads::current_num_threads());
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolm::backend::profile::OpKind;

    fn op(op: OpKind, role: Option<&str>, calls: u64, ms: u64) -> OpTime {
        let weight = role.map(|_| "q4_1".to_string());
        OpTime { op, weight, role: role.map(String::from), calls, ns: ms * 1_000_000 }
    }

    fn phase(passes: u64, measured_ms: u64) -> PhaseReport {
        PhaseReport {
            phase: Phase::Decode,
            passes,
            tokens: passes as usize,
            measured: Duration::from_millis(measured_ms),
            ops: vec![op(OpKind::Matmul, Some("ffn_down"), 60, 30), op(OpKind::Attention, None, 60, 10)],
        }
    }

    #[test]
    fn rows_split_the_measured_time_per_pass_and_share() {
        let rows = phase(2, 50).rows();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].op.as_str(), rows[0].role.as_str(), rows[0].calls),
            ("matmul", "ffn_down", Some(60))
        );
        assert_eq!((rows[0].total_ms, rows[0].ms_per_pass, rows[0].percent), (30.0, 15.0, 60.0));
        assert_eq!((rows[1].weight.as_str(), rows[1].percent), ("", 20.0));
        // What the operators do not account for.
        assert_eq!((rows[2].op.as_str(), rows[2].calls, rows[2].total_ms), ("other", None, 10.0));
        let total: f64 = rows.iter().map(|r| r.percent).sum();
        assert!((total - 100.0).abs() < 1e-9);
    }

    #[test]
    fn other_is_never_negative_and_an_empty_phase_divides_by_nothing() {
        let rows = phase(2, 30).rows();
        assert_eq!(rows[2].total_ms, 0.0);
        let rows = phase(0, 0).rows();
        assert!(rows.iter().all(|r| r.ms_per_pass == 0.0 && r.percent == 0.0));
    }

    #[test]
    fn markdown_and_json_list_the_phases_that_ran() {
        let report =
            Report { phases: vec![PhaseReport { phase: Phase::Prefill, ..phase(1, 40) }, phase(0, 0)] };
        let mut md = Vec::new();
        report.write_md(&mut md).expect("write");
        let md = String::from_utf8(md).expect("utf-8");
        assert!(
            md.contains("### prefill: 1 token in 1 pass, 40.00 ms measured, 40.00 ms in backend"),
            "{md}"
        );
        assert!(md.contains("| matmul | q4_1 | ffn_down | 60 | 30.000 | 30.000 | 75.0 |"), "{md}");
        assert!(!md.contains("### decode"), "{md}");
        let v = report.to_json();
        assert_eq!(v["phases"][0]["ops"][0]["calls"], 60);
        assert_eq!(v["phases"][1]["passes"], 0);
    }
}
