//! `ferrolm bench`: prompt-processing and text-generation speed, measured like llama.cpp's
//! `llama-bench` and reported with its field names (see docs/benchmarks.md).
//!
//! Each test is either `ppN` (N random prompt tokens fed in forward passes of at most
//! `--batch-size` tokens, logits only after the last token of each pass) or `tgN` (N random
//! tokens fed one per forward pass, logits after each). With `--parallel P` (P > 1) a
//! generation test `tgNxP` runs P sequences together, as a server's slots do: each forward pass
//! takes one token of every sequence, and tokens/s counts the tokens of all of them. With
//! `--n-depth D` (D > 0) a test `ppN @ dD` or `tgN @ dD` runs after D random tokens already in
//! the cache of every sequence (fed as a prompt before the clock starts, as llama-bench's `-d`
//! does): the speed at a long context. A test runs once per thread count: one unrecorded warm-up
//! (the whole prompt for pp, one token for tg, as llama-bench does), then `--repetitions` timed
//! runs, each from an empty KV cache (refilled to the depth).
//!
//! With `--prompt-file`, each generation length also runs on that text (`tgN (text) @ dD`, D
//! being the file's tokens) and, with `--lookup` or `--model-draft`, speculatively
//! (`tgN (lookup) @ dD`): see [`text`].

pub(crate) mod info;
pub(crate) mod output;
mod text;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use ferrolm::backend::{BackendChoice, Placement};
use ferrolm::batch::Batch;
use ferrolm::kv::{CacheManager, KvCache, SeqId};
use ferrolm::model::{LoadOptions, Model, Pooling};
use ferrolm::sequence::{Outputs, Sequence};
use ferrolm::session::SessionOptions;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

pub(crate) use info::BuildInfo;
use info::ModelInfo;
pub(crate) use output::TestShape;
use output::{OutputFormat, Printer, TestResult};
use text::TextMode;

/// Seed of the random token ids: every run of a test feeds the same tokens.
const SEED: u64 = 1234;

/// Arguments of `ferrolm bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: GGUF file, Hugging Face model folder or catalog name. Repeat to bench several.
    #[arg(short = 'm', long = "model", required = true)]
    pub models: Vec<String>,
    /// Prompt lengths to test (comma list; 0 skips prompt tests).
    #[arg(short = 'p', long = "n-prompt", value_delimiter = ',', default_value = "512")]
    pub n_prompt: Vec<usize>,
    /// Numbers of tokens to generate (comma list; 0 skips generation tests).
    #[arg(short = 'n', long = "n-gen", value_delimiter = ',', default_value = "128")]
    pub n_gen: Vec<usize>,
    /// Thread counts (comma list; default: one per CPU used: the performance cores, else all).
    #[arg(short = 't', long = "threads", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Which CPUs the worker threads run on (the default thread count is their number).
    #[command(flatten)]
    pub cpu: crate::cpu_args::CpuArgs,
    /// Timed runs per test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub repetitions: usize,
    /// Sequences generating together in the generation tests (comma list): each forward pass
    /// takes one token of each, like a server's busy slots.
    #[arg(long = "parallel", value_delimiter = ',', default_value = "1")]
    pub parallel: Vec<usize>,
    /// Tokens already in the cache when a test starts (comma list, like llama-bench's `-d`):
    /// every test runs at each depth.
    #[arg(short = 'd', long = "n-depth", value_delimiter = ',', default_value = "0")]
    pub n_depth: Vec<usize>,
    /// Largest number of prompt tokens per forward pass.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch_size: usize,
    /// Output format: md (a table), json, jsonl or csv.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Md)]
    pub output: OutputFormat,
    /// Storage types of the KV cache.
    #[command(flatten)]
    pub kv_types: crate::cache_args::KvTypeArgs,
    /// Eviction policy, budget and memory threshold (evictions are part of the timed work).
    #[command(flatten)]
    pub cache: crate::cache_args::CacheArgs,
    /// Backends to measure (comma list): cpu, cuda, opencl, hybrid (prompt chunks on OpenCL,
    /// generation on the CPU), auto.
    #[arg(long = "backend", value_delimiter = ',', default_value = "cpu")]
    pub backends: Vec<BackendChoice>,
    /// Hybrid mode: batches of at least this many tokens run on OpenCL.
    #[arg(long, default_value_t = 32)]
    pub hybrid_min_batch: usize,
    /// Text whose greedy continuation the generation tests also measure (`tgN (text)`), and
    /// with --lookup or --model-draft speculatively (`tgN (lookup)`, `tgN (draft)`).
    #[arg(long = "prompt-file", value_name = "FILE")]
    pub prompt_file: Option<std::path::PathBuf>,
    /// Speculative decoding in the text tests.
    #[command(flatten)]
    pub speculative: crate::speculative_args::SpeculativeArgs,
    /// Skip the warm-up run before each test's repetitions.
    #[arg(long)]
    pub no_warmup: bool,
    /// Seconds to sleep before each test after the first (lets the CPU cool down).
    #[arg(long, default_value_t = 0.0)]
    pub delay: f64,
    /// The name results are filed under (the `device` field; `ferrolm dashboard` plots a series
    /// per device). Default: the host name.
    #[arg(long = "device-name", value_name = "NAME")]
    pub device_name: Option<String>,
}

/// One test: `n_prompt` prompt tokens or `n_gen` generated tokens (one of them is 0), the
/// latter in each of `n_parallel` sequences, after `n_depth` tokens already cached in each;
/// or, with `text`, `n_gen` tokens continuing the prompt file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Test {
    n_prompt: usize,
    n_gen: usize,
    n_parallel: usize,
    n_depth: usize,
    text: Option<TextMode>,
}

/// The validated plan: thread counts and tests, in llama-bench's order.
#[derive(Debug)]
struct Plan {
    threads: Vec<usize>,
    tests: Vec<Test>,
    delay: Duration,
}

impl Args {
    fn plan(&self) -> anyhow::Result<Plan> {
        if self.repetitions == 0 {
            anyhow::bail!("--repetitions must be at least 1");
        }
        if self.batch_size == 0 {
            anyhow::bail!("--batch-size must be at least 1");
        }
        if self.parallel.contains(&0) {
            anyhow::bail!("--parallel values must be at least 1");
        }
        if self.threads.contains(&0) {
            anyhow::bail!("--threads values must be at least 1");
        }
        if self.device_name.as_deref().is_some_and(|d| d.trim().is_empty()) {
            anyhow::bail!("--device-name must not be empty");
        }
        if !self.delay.is_finite() || self.delay < 0.0 {
            anyhow::bail!("--delay must be a number of seconds, 0 or more");
        }
        let threads = if self.threads.is_empty() {
            vec![std::thread::available_parallelism().map_or(1, |n| n.get())]
        } else {
            self.threads.clone()
        };
        let pp = self.n_prompt.iter().filter(|&&n| n > 0).map(|&n| (n, 0, 1));
        let tg = self
            .n_gen
            .iter()
            .filter(|&&n| n > 0)
            .flat_map(|&n| self.parallel.iter().map(move |&p| (0, n, p)));
        let mut tests: Vec<Test> = pp
            .chain(tg)
            .flat_map(|(n_prompt, n_gen, n_parallel)| {
                self.n_depth.iter().map(move |&n_depth| Test {
                    n_prompt,
                    n_gen,
                    n_parallel,
                    n_depth,
                    text: None,
                })
            })
            .collect();
        let spec = self.speculative.drafter_name().is_some();
        if spec && self.prompt_file.is_none() {
            anyhow::bail!(
                "--lookup and --model-draft need --prompt-file: drafts only match real text, never random tokens"
            );
        }
        if self.prompt_file.is_some() {
            let modes: &[TextMode] =
                if spec { &[TextMode::Plain, TextMode::Speculative] } else { &[TextMode::Plain] };
            for &n_gen in self.n_gen.iter().filter(|&&n| n > 0) {
                tests.extend(modes.iter().map(|&m| Test {
                    n_prompt: 0,
                    n_gen,
                    n_parallel: 1,
                    n_depth: 0,
                    text: Some(m),
                }));
            }
        }
        if tests.is_empty() {
            anyhow::bail!("nothing to run: every --n-prompt and --n-gen value is 0");
        }
        Ok(Plan { threads, tests, delay: Duration::from_secs_f64(self.delay) })
    }
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut plan = args.plan()?;
    // Pin the worker pools of every test to the CPUs asked for (or the performance cores).
    if let Some(set) = ferrolm::threads::configure(None, args.cpu.set()?)?
        && args.threads.is_empty()
    {
        plan.threads = vec![set.len()];
    }
    args.cache.validate()?;
    let build = BuildInfo::current();
    let cpu = info::cpu_info();
    let device = args.device_name.clone().unwrap_or_else(info::default_device_name);
    let mut printer = Printer::new(args.output, std::io::stdout().lock());
    let prompt_text = match &args.prompt_file {
        Some(p) => Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let draft = args.speculative.load_draft()?;
    let mut first = true;
    for (i, spec) in args.models.iter().enumerate() {
        let path = crate::pull::resolve_model(Some(spec))?;
        let mut model = Model::load_with(&path, &LoadOptions::default())
            .with_context(|| format!("loading {}", path.display()))?;
        let minfo = ModelInfo::new(&path, &model);
        let prompt = match &prompt_text {
            Some(t) => model.tokenizer().encode(t, true, false).context("tokenizing the prompt file")?,
            None => Vec::new(),
        };
        if prompt_text.is_some() && prompt.is_empty() {
            anyhow::bail!("the prompt file tokenized to nothing");
        }
        if i == 0 {
            // After the first model loaded, so that a bad path prints nothing on stdout.
            printer.begin(&build, &cpu, &device)?;
        }
        printer.model(&minfo)?;
        if model.config().arch.is_encoder() && plan.tests.iter().any(|t| !runs_on(&model, t)) {
            eprintln!(
                "note: {} is an encoder: only the prompt tests run (each embeds one text of that many tokens)",
                model.config().arch.name()
            );
        }
        for &choice in &args.backends {
            let placement =
                choice.resolve(args.hybrid_min_batch, None).with_context(|| format!("--backend {choice}"))?;
            model.set_placement(placement).with_context(|| format!("--backend {choice}"))?;
            let backend = backend_label(model.placement());
            for &n_threads in &plan.threads {
                for &test in plan.tests.iter().filter(|t| runs_on(&model, t)) {
                    if !first && !plan.delay.is_zero() {
                        std::thread::sleep(plan.delay);
                    }
                    first = false;
                    tracing::info!(
                        model = %minfo.filename,
                        n_threads,
                        n_prompt = test.n_prompt,
                        n_gen = test.n_gen,
                        n_parallel = test.n_parallel,
                        n_depth = test.n_depth,
                        "bench"
                    );
                    let test_time = info::rfc3339_now();
                    let m =
                        with_threads(n_threads, || measure(&model, &args, test, &prompt, draft.as_ref()))??;
                    printer.result(&TestResult {
                        backend: &backend,
                        build: &build,
                        cpu: &cpu,
                        device: &device,
                        model: &minfo,
                        n_batch: args.batch_size,
                        n_threads,
                        type_k: args.kv_types.k,
                        type_v: args.kv_types.v,
                        n_prompt: test.n_prompt,
                        n_gen: test.n_gen,
                        n_parallel: test.n_parallel,
                        n_depth: m.n_depth,
                        mode: m.mode,
                        n_drafted: m.n_drafted,
                        n_accepted: m.n_accepted,
                        test_time,
                        samples_ns: m.samples_ns,
                    })?;
                }
            }
        }
    }
    printer.finish()
}

/// What one test measured: each repetition's nanoseconds, the cached tokens it ran after, and
/// for a test on the prompt file its mode name and draft counts.
struct Measured {
    samples_ns: Vec<u64>,
    n_depth: usize,
    mode: &'static str,
    n_drafted: usize,
    n_accepted: usize,
}

/// Runs one test: on random tokens ([`run_test`]) or on the prompt file's tokens `prompt`
/// ([`text::run`], speculatively with the command line's drafter and `draft` model).
fn measure(
    model: &Model,
    args: &Args,
    test: Test,
    prompt: &[u32],
    draft: Option<&Model>,
) -> anyhow::Result<Measured> {
    let Some(mode) = test.text else {
        let samples_ns = run_test(model, args, test)?;
        return Ok(Measured { samples_ns, n_depth: test.n_depth, mode: "", n_drafted: 0, n_accepted: 0 });
    };
    let (spec, name) = match mode {
        TextMode::Plain => (None, "text"),
        TextMode::Speculative => {
            (args.speculative.options(draft)?, args.speculative.drafter_name().unwrap_or("text"))
        }
    };
    let opts = SessionOptions {
        n_ctx: prompt.len() + test.n_gen + 1,
        n_batch: args.batch_size,
        type_k: args.kv_types.k,
        type_v: args.kv_types.v,
        cache: args.cache.options(),
    };
    let r = text::run(model, opts, prompt, test.n_gen, spec, args.repetitions, !args.no_warmup)?;
    Ok(Measured {
        samples_ns: r.samples_ns,
        n_depth: prompt.len(),
        mode: name,
        n_drafted: r.n_drafted,
        n_accepted: r.n_accepted,
    })
}

/// llama-bench's name of the backends a placement uses.
fn backend_label(p: &Placement) -> String {
    let name = |b: &dyn ferrolm::backend::Backend| match b.name() {
        "opencl" => "OpenCL",
        "cuda" => "CUDA",
        _ => "CPU",
    };
    match p {
        Placement::Single(b) => name(b.as_ref()).to_string(),
        Placement::Hybrid { prefill, decode, .. } => {
            format!("{}+{}", name(prefill.as_ref()), name(decode.as_ref()))
        }
    }
}

/// Runs `f` with the kernels using `n` threads. The one place the thread count is applied.
fn with_threads<R>(n: usize, f: impl FnOnce() -> R) -> anyhow::Result<R> {
    ferrolm::threads::set_num_threads(n).with_context(|| format!("cannot start {n} worker threads"))?;
    Ok(f())
}

/// The warm-up and the timed repetitions of one test; returns each repetition's nanoseconds.
/// `n` token ids as llama-bench makes them: BOS first when the model adds one, then random ids.
fn random_tokens(model: &Model, rng: &mut StdRng, n: usize) -> Vec<u32> {
    let tok = model.tokenizer();
    let bos = tok.bos().filter(|_| tok.add_bos());
    let n_vocab = model.config().n_vocab as u32;
    (0..n)
        .map(|i| match bos {
            Some(b) if i == 0 => b,
            _ => rng.random_range(0..n_vocab),
        })
        .collect()
}

/// Whether `test` applies to `model`: an encoder has no generation, no cache to fill to a depth
/// and no text modes; its prompt tests embed a text.
fn runs_on(model: &Model, test: &Test) -> bool {
    !model.config().arch.is_encoder() || (test.n_gen == 0 && test.n_depth == 0 && test.text.is_none())
}

/// An encoder's prompt test: embeds one text of `n_prompt` random tokens (after the BOS/CLS token
/// when the model adds one), as llama-bench times an embedding model's prompt.
fn run_encoder_test(model: &Model, args: &Args, test: Test) -> anyhow::Result<Vec<u64>> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut text = || random_tokens(model, &mut rng, test.n_prompt);
    if !args.no_warmup {
        model.embed_tokens(&[text()], Pooling::Mean).context("warm-up run")?;
    }
    let mut samples = Vec::with_capacity(args.repetitions);
    for rep in 0..args.repetitions {
        let ids = text();
        let t0 = Instant::now();
        model.embed_tokens(&[ids], Pooling::Mean).with_context(|| format!("repetition {}", rep + 1))?;
        samples.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1));
    }
    Ok(samples)
}

fn run_test(model: &Model, args: &Args, test: Test) -> anyhow::Result<Vec<u64>> {
    if model.config().arch.is_encoder() {
        return run_encoder_test(model, args, test);
    }
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut tokens = |n: usize| random_tokens(model, &mut rng, n);
    let cap = test.n_depth + test.n_prompt + test.n_gen;
    let mut kv = model.new_kv_cache_typed(cap, args.kv_types.k, args.kv_types.v)?;
    let mut seqs = Vec::with_capacity(test.n_parallel);
    for s in 0..test.n_parallel {
        let mgr = CacheManager::new(args.cache.options(), model.attention_shapes(), cap)?;
        seqs.push(Sequence::new(&mut kv, s as SeqId, mgr));
    }
    // The depth: the first `n_depth` tokens of `ids[s]`, fed to every sequence as a prompt.
    let fill = |kv: &mut KvCache, seqs: &mut [Sequence], ids: &[Vec<u32>]| -> anyhow::Result<()> {
        for (seq, seq_ids) in seqs.iter_mut().zip(ids) {
            seq.clear(kv);
            if test.n_depth > 0 {
                prompt(model, kv, seq, &seq_ids[..test.n_depth], args.batch_size)
                    .context("filling the depth")?;
            }
        }
        Ok(())
    };
    if !args.no_warmup {
        if test.n_depth > 0 {
            let ids: Vec<Vec<u32>> = (0..test.n_parallel).map(|_| tokens(test.n_depth)).collect();
            fill(&mut kv, &mut seqs, &ids)?;
        }
        if test.n_prompt > 0 {
            prompt(model, &mut kv, &mut seqs[0], &tokens(test.n_prompt), args.batch_size)
                .context("warm-up prompt run")?;
        }
        if test.n_gen > 0 {
            let ids: Vec<Vec<u32>> = (0..test.n_parallel).map(|_| tokens(1)).collect();
            generate(model, &mut kv, &mut seqs, &ids).context("warm-up generation run")?;
        }
    }
    let mut samples = Vec::with_capacity(args.repetitions);
    for rep in 0..args.repetitions {
        let ids: Vec<Vec<u32>> =
            (0..test.n_parallel).map(|_| tokens(test.n_depth + test.n_prompt + test.n_gen)).collect();
        fill(&mut kv, &mut seqs, &ids)?;
        let timed: Vec<Vec<u32>> = ids.iter().map(|v| v[test.n_depth..].to_vec()).collect();
        let t0 = Instant::now();
        if test.n_prompt > 0 {
            prompt(model, &mut kv, &mut seqs[0], &timed[0], args.batch_size)
        } else {
            generate(model, &mut kv, &mut seqs, &timed)
        }
        .with_context(|| format!("repetition {}", rep + 1))?;
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1);
        tracing::debug!(rep = rep + 1, ms = ns as f64 / 1e6, "repetition done");
        samples.push(ns);
    }
    Ok(samples)
}

/// Feeds `ids` as a prompt in forward passes of at most `n_batch` tokens (fewer when the
/// eviction budget needs smaller chunks).
fn prompt(
    model: &Model,
    kv: &mut KvCache,
    seq: &mut Sequence,
    ids: &[u32],
    n_batch: usize,
) -> anyhow::Result<()> {
    let n_batch = n_batch.min(seq.max_chunk(true));
    let mut batch = Batch::new();
    for chunk in ids.chunks(n_batch) {
        batch.clear();
        seq.feed(kv, &mut batch, chunk, true, Outputs::Last)?;
        model.forward(&batch, kv)?;
    }
    seq.end_prompt(kv);
    Ok(())
}

/// Feeds the token lists of `ids` (sequence `s` gets `ids[s]`, all of one length) one token of
/// each per forward pass, asking for the logits of each.
fn generate(model: &Model, kv: &mut KvCache, seqs: &mut [Sequence], ids: &[Vec<u32>]) -> anyhow::Result<()> {
    let mut batch = Batch::new();
    let len = ids.first().map_or(0, Vec::len);
    for pos in 0..len {
        batch.clear();
        for (seq, seq_ids) in seqs.iter_mut().zip(ids) {
            seq.feed(kv, &mut batch, &seq_ids[pos..pos + 1], false, Outputs::Last)?;
        }
        model.forward(&batch, kv)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn plan(argv: &[&str]) -> anyhow::Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))?;
        cli.args.plan()
    }

    #[test]
    fn plan_orders_prompt_tests_before_generation_and_skips_zeros() {
        let p = plan(&["-m", "x", "-p", "0,64,16", "-n", "8,0", "-t", "2,1"]).expect("valid");
        assert_eq!(p.threads, vec![2, 1]);
        let t = |n_prompt, n_gen| Test { n_prompt, n_gen, n_parallel: 1, n_depth: 0, text: None };
        assert_eq!(p.tests, vec![t(64, 0), t(16, 0), t(0, 8)]);
    }

    #[test]
    fn parallel_values_multiply_the_generation_tests_only() {
        let p = plan(&["-m", "x", "-p", "32", "-n", "8,16", "--parallel", "1,4"]).expect("valid");
        let t = |n_prompt, n_gen, n_parallel| Test { n_prompt, n_gen, n_parallel, n_depth: 0, text: None };
        assert_eq!(p.tests, vec![t(32, 0, 1), t(0, 8, 1), t(0, 8, 4), t(0, 16, 1), t(0, 16, 4)]);
    }

    #[test]
    fn every_test_runs_at_every_depth() {
        let p = plan(&["-m", "x", "-p", "32", "-n", "8", "--parallel", "1,2", "-d", "0,256"]).expect("valid");
        let t =
            |n_prompt, n_gen, n_parallel, n_depth| Test { n_prompt, n_gen, n_parallel, n_depth, text: None };
        assert_eq!(
            p.tests,
            vec![
                t(32, 0, 1, 0),
                t(32, 0, 1, 256),
                t(0, 8, 1, 0),
                t(0, 8, 1, 256),
                t(0, 8, 2, 0),
                t(0, 8, 2, 256)
            ]
        );
    }

    #[test]
    fn plan_rejects_bad_values() {
        for argv in [
            &["-m", "x", "-t", "0"][..],
            &["-m", "x", "-r", "0"],
            &["-m", "x", "-b", "0"],
            &["-m", "x", "-p", "0", "-n", "0"],
            &["-m", "x", "--delay", "-1"],
            &["-m", "x", "--parallel", "0"],
            &["-m", "x", "-p", "1,a"],
            &["-m", "x", "-d", "-1"],
            &["-m", "x", "--lookup"],
            &["-m", "x", "--model-draft", "y"],
            &["-m", "x", "--prompt-file", "f", "--lookup", "--model-draft", "y"],
            &["-m", "x", "--cache-type-k", "q4_1"],
            &["-m", "x", "--device-name", " "],
        ] {
            assert!(plan(argv).is_err(), "{argv:?} was accepted");
        }
    }

    #[test]
    fn a_prompt_file_adds_text_tests_and_a_drafter_speculative_ones() {
        let text = |n_gen, m| Test { n_prompt: 0, n_gen, n_parallel: 1, n_depth: 0, text: Some(m) };
        let p = plan(&["-m", "x", "-p", "0", "-n", "8,16", "--prompt-file", "f"]).expect("valid");
        let random = |n_gen| Test { n_prompt: 0, n_gen, n_parallel: 1, n_depth: 0, text: None };
        assert_eq!(p.tests, vec![random(8), random(16), text(8, TextMode::Plain), text(16, TextMode::Plain)]);
        let p = plan(&["-m", "x", "-p", "0", "-n", "8", "--prompt-file", "f", "--lookup"]).expect("valid");
        assert_eq!(p.tests, vec![random(8), text(8, TextMode::Plain), text(8, TextMode::Speculative)]);
    }

    #[test]
    fn every_cache_type_is_accepted() {
        for t in ferrolm::kv::KvType::ALL {
            let cli = Cli::try_parse_from([
                "bench",
                "-m",
                "x",
                "--cache-type-k",
                t.name(),
                "--cache-type-v",
                t.name(),
            ])
            .expect("valid");
            assert_eq!((cli.args.kv_types.k, cli.args.kv_types.v), (t, t));
        }
    }

    #[test]
    fn default_threads_are_the_available_cores() {
        let p = plan(&["-m", "x"]).expect("valid");
        assert_eq!(p.threads, vec![std::thread::available_parallelism().map_or(1, |n| n.get())]);
        let t = |n_prompt, n_gen| Test { n_prompt, n_gen, n_parallel: 1, n_depth: 0, text: None };
        assert_eq!(p.tests, vec![t(512, 0), t(0, 128)]);
    }
}
