//! `GET /metrics`: the engine's counters in the Prometheus text exposition format.

use std::fmt::Write;
use std::sync::Mutex;

use ferrolm::engine::MetricsSnapshot;

/// The `Content-Type` of the exposition format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What one model's `/metrics` shows: the engine's counters and the process's resident set
/// size (bytes, where the system reports it).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Reading {
    /// The engine's counters.
    pub m: MetricsSnapshot,
    /// Resident set size.
    pub rss: Option<u64>,
}

/// The counters behind llama-server's throughput gauges (`llamacpp:prompt_tokens_seconds`,
/// `llamacpp:predicted_tokens_seconds`), which cover the time between two scrapes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Bucket {
    prompt_tokens: u64,
    prompt_seconds: f64,
    generated_tokens: u64,
    generation_seconds: f64,
}

impl Bucket {
    fn of(m: &MetricsSnapshot) -> Bucket {
        Bucket {
            prompt_tokens: m.prompt_tokens_total.saturating_sub(m.cached_tokens_total),
            prompt_seconds: m.prompt_seconds_total,
            generated_tokens: m.generated_tokens_total,
            generation_seconds: m.generation_seconds_total,
        }
    }

    /// Prompt and generated tokens per second of work since `start` (0 without work).
    fn rates_since(&self, start: &Bucket) -> Rates {
        let rate = |tokens: u64, seconds: f64| if seconds > 0.0 { tokens as f64 / seconds } else { 0.0 };
        Rates {
            prompt: rate(
                self.prompt_tokens.saturating_sub(start.prompt_tokens),
                self.prompt_seconds - start.prompt_seconds,
            ),
            generation: rate(
                self.generated_tokens.saturating_sub(start.generated_tokens),
                self.generation_seconds - start.generation_seconds,
            ),
        }
    }
}

/// Tokens per second over the window of a scrape.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Rates {
    /// Prompt tokens (cached ones apart) per second of prompt processing.
    pub prompt: f64,
    /// Generated tokens per second of generation.
    pub generation: f64,
}

/// What `/metrics` keeps between scrapes, as llama-server does: the throughput bucket (each
/// scrape reports the work since the previous one, then starts a new window) and, for a server
/// that sleeps, the last reading.
#[derive(Default)]
pub(crate) struct Scrapes(Mutex<ScrapeState>);

#[derive(Default)]
struct ScrapeState {
    /// The counters when the current window started.
    bucket: Bucket,
    /// The last scrape's reading and the number of tasks entered then.
    last: Option<(Reading, u64)>,
}

impl ScrapeState {
    /// Renders `reading` with the rates since the window started, then starts a new window.
    fn scrape(&mut self, reading: Reading, tasks: u64) -> String {
        let bucket = Bucket::of(&reading.m);
        let rates = bucket.rates_since(&self.bucket);
        self.bucket = bucket;
        let text = render(&reading.m, reading.rss, rates);
        self.last = Some((reading, tasks));
        text
    }
}

impl Scrapes {
    /// A scrape of an awake model: `now`, with `tasks` entered so far.
    pub(crate) fn awake(&self, now: Reading, tasks: u64) -> String {
        self.lock().scrape(now, tasks)
    }

    /// A scrape while the model sleeps: the metrics taken on entering sleep (`frozen`). When no
    /// task ran since the last scrape, that scrape's reading stands for them, so that every
    /// scrape of an unchanged server shows the same (its uptime and memory included).
    pub(crate) fn asleep(&self, frozen: Reading, tasks: u64) -> String {
        let mut st = self.lock();
        let reading = match st.last.take() {
            Some((r, t)) if t == tasks => r,
            _ => frozen,
        };
        st.scrape(reading, tasks)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScrapeState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Renders `m`, the process's resident set size `rss` (bytes, where the system reports it) and
/// llama-server's throughput gauges `rates` as Prometheus text: `# HELP`, `# TYPE` and one
/// sample per metric.
pub(crate) fn render(m: &MetricsSnapshot, rss: Option<u64>, rates: Rates) -> String {
    let mut out = String::with_capacity(4096);
    for (name, kind, help, value) in rows(m) {
        write_metric(&mut out, name, kind, help, value);
    }
    write_rss(&mut out, rss);
    write_llamacpp(&mut out, m, rates);
    out
}

/// The same counters under llama-server's `llamacpp:` names, for dashboards and tests written
/// for it; its throughput gauges cover the time since the previous scrape.
fn write_llamacpp(out: &mut String, m: &MetricsSnapshot, rates: Rates) {
    let per_pass = if m.forward_passes_total > 0 {
        m.busy_slots_per_pass_total as f64 / m.forward_passes_total as f64
    } else {
        0.0
    };
    let rows: [(&str, &str, &str, f64); 15] = [
        (
            "prompt_tokens_total",
            "counter",
            "Prompt tokens processed (cached ones apart).",
            m.prompt_tokens_total.saturating_sub(m.cached_tokens_total) as f64,
        ),
        (
            "prompt_tokens_cached_total",
            "counter",
            "Prompt tokens taken from the cache.",
            m.cached_tokens_total as f64,
        ),
        ("prompt_seconds_total", "counter", "Prompt processing time.", m.prompt_seconds_total),
        ("tokens_predicted_total", "counter", "Generated tokens.", m.generated_tokens_total as f64),
        ("tokens_predicted_seconds_total", "counter", "Generation time.", m.generation_seconds_total),
        ("n_decode_total", "counter", "Forward passes (llama_decode calls).", m.forward_passes_total as f64),
        ("n_tokens_max", "counter", "Most tokens one request held.", m.request_tokens_max as f64),
        ("spec_decode_num_draft_tokens_total", "counter", "Drafted tokens.", m.draft_tokens_total as f64),
        (
            "spec_decode_num_accepted_tokens_total",
            "counter",
            "Drafted tokens accepted.",
            m.draft_accepted_total as f64,
        ),
        (
            "spec_decode_num_drafts_total",
            "counter",
            "Verification passes of drafts.",
            m.draft_passes_total as f64,
        ),
        (
            "prompt_tokens_seconds",
            "gauge",
            "Prompt tokens per second of prompt processing since the previous scrape.",
            rates.prompt,
        ),
        (
            "predicted_tokens_seconds",
            "gauge",
            "Generated tokens per second of generation since the previous scrape.",
            rates.generation,
        ),
        ("requests_processing", "gauge", "Requests running in a slot.", m.slots_busy as f64),
        ("requests_deferred", "gauge", "Requests waiting for a slot.", m.queue_depth as f64),
        ("n_busy_slots_per_decode", "gauge", "Busy slots per forward pass, on average.", per_pass),
    ];
    for (name, kind, help, value) in rows {
        write_sample(out, "llamacpp:", name, kind, help, value);
    }
}

/// One unlabelled `ferrolm_` metric: `# HELP`, `# TYPE` and its sample.
fn write_metric(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    write_sample(out, "ferrolm_", name, kind, help, value);
}

/// One unlabelled metric named `{prefix}{name}`.
fn write_sample(out: &mut String, prefix: &str, name: &str, kind: &str, help: &str, value: f64) {
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {prefix}{name} {help}");
    let _ = writeln!(out, "# TYPE {prefix}{name} {kind}");
    let _ = writeln!(out, "{prefix}{name} {}", sample(value));
}

/// What a multi-model server's `/metrics` says of its model table.
pub(crate) struct ModelsSnapshot {
    /// Models in the catalog.
    pub available: usize,
    /// Ids of the models loaded now.
    pub loaded: Vec<String>,
    /// Ids of the loaded models that sleep (released for idling).
    pub sleeping: Vec<String>,
    /// Loads, unloads and failed loads since the start.
    pub loads: u64,
    pub unloads: u64,
    pub load_failures: u64,
}

/// The model table of a multi-model server as Prometheus text.
pub(crate) fn render_models(m: &ModelsSnapshot) -> String {
    let rows: [(&str, &str, &str, f64); 5] = [
        ("models_available", "gauge", "Models the server can load.", m.available as f64),
        ("models_loaded", "gauge", "Models loaded now.", m.loaded.len() as f64),
        ("model_loads_total", "counter", "Models loaded since the start.", m.loads as f64),
        ("model_unloads_total", "counter", "Models unloaded since the start.", m.unloads as f64),
        ("model_load_failures_total", "counter", "Model loads that failed.", m.load_failures as f64),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in rows {
        write_metric(&mut out, name, kind, help, value);
    }
    let _ = writeln!(out, "# HELP ferrolm_model_loaded 1 for each model loaded now.");
    let _ = writeln!(out, "# TYPE ferrolm_model_loaded gauge");
    for id in &m.loaded {
        let _ = writeln!(out, "ferrolm_model_loaded{{model=\"{}\"}} 1", label_value(id));
    }
    let _ =
        writeln!(out, "# HELP ferrolm_model_sleeping 1 for each loaded model released for idling, 0 else.");
    let _ = writeln!(out, "# TYPE ferrolm_model_sleeping gauge");
    for id in &m.loaded {
        let asleep = u8::from(m.sleeping.contains(id));
        let _ = writeln!(out, "ferrolm_model_sleeping{{model=\"{}\"}} {asleep}", label_value(id));
    }
    out
}

/// The engine metrics of several models, each sample labelled with its `model`, then the
/// process's resident memory.
pub(crate) fn render_labelled(models: &[(String, MetricsSnapshot)], rss: Option<u64>) -> String {
    let mut out = String::new();
    let per_model: Vec<_> = models.iter().map(|(id, m)| (label_value(id), rows(m))).collect();
    if let Some((_, first)) = per_model.first() {
        for (i, (name, kind, help, _)) in first.iter().enumerate() {
            let _ = writeln!(out, "# HELP ferrolm_{name} {help}");
            let _ = writeln!(out, "# TYPE ferrolm_{name} {kind}");
            for (id, rows) in &per_model {
                let _ = writeln!(out, "ferrolm_{name}{{model=\"{id}\"}} {}", sample(rows[i].3));
            }
        }
    }
    write_rss(&mut out, rss);
    out
}

/// A label value with `\`, `"` and newlines escaped, as the exposition format wants.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn write_rss(out: &mut String, rss: Option<u64>) {
    write_metric(
        out,
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory of the server process (NaN where the system does not report it).",
        rss.map_or(f64::NAN, |b| b as f64),
    );
}

/// One model's engine metrics: (name, type, help, value).
fn rows(m: &MetricsSnapshot) -> [(&'static str, &'static str, &'static str, f64); 26] {
    let ratio = if m.kv_capacity_tokens > 0 { m.kv_tokens as f64 / m.kv_capacity_tokens as f64 } else { 0.0 };
    [
        ("requests_total", "counter", "Requests accepted.", m.requests_total as f64),
        (
            "requests_finished_total",
            "counter",
            "Requests that ended normally (length or stop).",
            m.requests_finished as f64,
        ),
        (
            "requests_cancelled_total",
            "counter",
            "Requests cancelled (client gone, shutdown) or timed out.",
            m.requests_cancelled as f64,
        ),
        ("requests_failed_total", "counter", "Requests that failed in the engine.", m.requests_failed as f64),
        (
            "requests_rejected_total",
            "counter",
            "Requests refused because the queue was full.",
            m.requests_rejected as f64,
        ),
        ("prompt_tokens_total", "counter", "Prompt tokens of all requests.", m.prompt_tokens_total as f64),
        (
            "cached_tokens_total",
            "counter",
            "Prompt tokens served from the prefix cache.",
            m.cached_tokens_total as f64,
        ),
        ("generated_tokens_total", "counter", "Tokens generated.", m.generated_tokens_total as f64),
        ("forward_passes_total", "counter", "Forward passes run.", m.forward_passes_total as f64),
        (
            "generation_tokens_per_second",
            "gauge",
            "Generated tokens per second over the last 10 seconds.",
            m.generation_tokens_per_second,
        ),
        (
            "prompt_tokens_per_second",
            "gauge",
            "Prompt tokens processed per second over the last 10 seconds.",
            m.prompt_tokens_per_second,
        ),
        ("queue_depth", "gauge", "Requests waiting for a slot.", m.queue_depth as f64),
        ("slots_busy", "gauge", "Slots running a request.", m.slots_busy as f64),
        ("slots_total", "gauge", "Number of slots.", m.slots_total as f64),
        ("kv_tokens", "gauge", "Tokens in the slots' KV caches.", m.kv_tokens as f64),
        ("kv_bytes", "gauge", "Bytes of the slots' KV caches.", m.kv_bytes as f64),
        ("kv_capacity_tokens", "gauge", "Most tokens all slots can hold.", m.kv_capacity_tokens as f64),
        (
            "kv_capacity_bytes",
            "gauge",
            "Bytes of the slots' KV caches when every slot holds a full context.",
            m.kv_capacity_bytes as f64,
        ),
        ("kv_usage_ratio", "gauge", "KV cache tokens over capacity (0 to 1).", ratio),
        (
            "prefix_cache_entries",
            "gauge",
            "Sequences kept by the prefix cache.",
            m.prefix_cache_entries as f64,
        ),
        ("prefix_cache_tokens", "gauge", "Tokens kept by the prefix cache.", m.prefix_cache_tokens as f64),
        ("prefix_cache_bytes", "gauge", "Bytes kept by the prefix cache.", m.prefix_cache_bytes as f64),
        (
            "prefix_cache_budget_bytes",
            "gauge",
            "Most bytes the prefix cache keeps (--cache-ram).",
            m.prefix_cache_budget_bytes as f64,
        ),
        (
            "prefix_cache_hits_total",
            "counter",
            "Requests that reused a cached prefix.",
            m.prefix_cache_hits as f64,
        ),
        (
            "prefix_cache_lookups_total",
            "counter",
            "Requests that looked for a cached prefix.",
            m.prefix_cache_lookups as f64,
        ),
        ("uptime_seconds", "gauge", "Seconds since the engine started.", m.uptime_seconds),
    ]
}

/// A sample value: integers without a fraction, NaN and infinities as Prometheus spells them.
fn sample(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama_metric(text: &str, name: &str) -> f64 {
        let prefix = format!("llamacpp:{name} ");
        let line = text.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
        line.and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    }

    /// llama-server's throughput gauges across scrapes and a sleep (its test_sleep.py).
    #[test]
    fn throughput_buckets_cover_the_time_between_scrapes() {
        let ran = |tokens: u64, seconds: f64| Reading {
            m: MetricsSnapshot {
                generated_tokens_total: tokens,
                generation_seconds_total: seconds,
                ..MetricsSnapshot::default()
            },
            rss: Some(1 << 20),
        };
        let s = Scrapes::default();
        assert_eq!(llama_metric(&s.awake(ran(8, 0.5), 1), "predicted_tokens_seconds"), 16.0);
        // Nothing since: an empty window.
        let second = s.awake(ran(8, 0.5), 1);
        assert_eq!(llama_metric(&second, "predicted_tokens_seconds"), 0.0);
        // Asleep with no task since the last scrape: that scrape again, even if the reading
        // taken on entering sleep differs in time-dependent values.
        let frozen = Reading { rss: Some(2 << 20), ..ran(8, 0.5) };
        assert_eq!(s.asleep(frozen.clone(), 1), second);
        // A task ran before the sleep: the first scrape reports it, the next ones nothing.
        let s = Scrapes::default();
        s.awake(ran(0, 0.0), 0);
        let asleep = s.asleep(ran(4, 0.25), 1);
        assert_eq!(llama_metric(&asleep, "predicted_tokens_seconds"), 16.0);
        assert_eq!(llama_metric(&s.asleep(ran(4, 0.25), 1), "predicted_tokens_seconds"), 0.0);
        // Waking (a task that generates nothing) reports nothing again.
        assert_eq!(llama_metric(&s.awake(ran(4, 0.25), 2), "predicted_tokens_seconds"), 0.0);
    }

    #[test]
    fn every_metric_has_help_type_and_one_sample() {
        let m = MetricsSnapshot {
            requests_total: 7,
            kv_tokens: 50,
            kv_capacity_tokens: 200,
            generation_tokens_per_second: 12.5,
            ..MetricsSnapshot::default()
        };
        let text = render(&m, Some(123 << 20), Rates::default());
        let names = [
            "requests_total",
            "requests_finished_total",
            "requests_cancelled_total",
            "requests_failed_total",
            "requests_rejected_total",
            "prompt_tokens_total",
            "cached_tokens_total",
            "generated_tokens_total",
            "forward_passes_total",
            "generation_tokens_per_second",
            "prompt_tokens_per_second",
            "queue_depth",
            "slots_busy",
            "slots_total",
            "kv_tokens",
            "kv_bytes",
            "kv_capacity_tokens",
            "kv_capacity_bytes",
            "kv_usage_ratio",
            "prefix_cache_entries",
            "prefix_cache_tokens",
            "prefix_cache_bytes",
            "prefix_cache_budget_bytes",
            "prefix_cache_hits_total",
            "prefix_cache_lookups_total",
            "uptime_seconds",
            "process_resident_memory_bytes",
        ];
        for n in names {
            let full = format!("ferrolm_{n}");
            assert!(text.contains(&format!("# HELP {full} ")), "{n} help");
            assert!(text.contains(&format!("# TYPE {full} ")), "{n} type");
            let samples = text.lines().filter(|l| l.split(' ').next() == Some(full.as_str())).count();
            assert_eq!(samples, 1, "{n} sample");
        }
        assert!(text.contains("ferrolm_requests_total 7\n"));
        assert!(text.contains("ferrolm_process_resident_memory_bytes 128974848\n"));
        assert!(render(&m, None, Rates::default()).contains("ferrolm_process_resident_memory_bytes NaN\n"));
        assert!(text.contains("ferrolm_kv_usage_ratio 0.25\n"));
        assert!(text.contains("ferrolm_generation_tokens_per_second 12.5\n"));
        assert!(text.contains("# TYPE ferrolm_requests_total counter\n"));
        assert!(text.contains("# TYPE ferrolm_queue_depth gauge\n"));
        // Every line is a comment or `name value`.
        for l in text.lines() {
            assert!(l.starts_with("# ") || l.split(' ').count() == 2, "{l}");
        }
        assert_eq!(sample(f64::NAN), "NaN");
        assert_eq!(sample(f64::INFINITY), "+Inf");
    }
}
