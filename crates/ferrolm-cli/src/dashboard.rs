//! `ferrolm dashboard`: `ferrolm bench -o jsonl` results gathered over runs and devices, made
//! into one self-contained HTML page (inline SVG, no scripts, nothing fetched): per test
//! (`pp512`, `tg128`, … at each depth) a bar per series — a model on a backend with a thread
//! count on a device — with its latest tokens/s, and each series' history over build commits.
//! See docs/benchmarks.md ("Dashboard").

mod page;
mod rows;
mod svg;

use std::path::PathBuf;

use anyhow::Context as _;

/// Arguments of `ferrolm dashboard`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Result files of `ferrolm bench -o jsonl` (or `-o json`, or llama-bench's JSON lines):
    /// files, folders (their .jsonl and .json files), globs such as `results/*.jsonl`, or `-`
    /// for stdin.
    #[arg(required = true, value_name = "RESULTS")]
    pub inputs: Vec<PathBuf>,
    /// The HTML file to write (`-`: stdout).
    #[arg(short = 'o', long = "output", default_value = "dashboard.html")]
    pub output: PathBuf,
    /// The page's title.
    #[arg(long, default_value = "ferrolm benchmarks")]
    pub title: String,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (rows, sources) = rows::read_inputs(&args.inputs)?;
    let html = page::render(&rows, &sources, &args.title);
    if args.output.as_os_str() == "-" {
        use std::io::Write as _;
        std::io::stdout().lock().write_all(html.as_bytes()).context("writing the page to stdout")?;
    } else {
        std::fs::write(&args.output, &html).with_context(|| format!("writing {}", args.output.display()))?;
        eprintln!("wrote {} ({} results from {} sources)", args.output.display(), rows.len(), sources.len());
    }
    Ok(())
}

/// `s` escaped for HTML text and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `ferrolm bench -o jsonl` line.
    fn line(
        device: &str,
        threads: u64,
        n_prompt: u64,
        n_gen: u64,
        commit: &str,
        time: &str,
        ts: f64,
    ) -> String {
        serde_json::json!({
            "build_commit": commit, "build_number": 0, "cpu_info": "Cortex-A76", "device": device,
            "backends": "CPU", "model_filename": "/data/local/tmp/ferrolm/SmolLM2.Q4_1.gguf",
            "model_type": "llama 134.52M Q4_1", "n_threads": threads, "n_prompt": n_prompt,
            "n_gen": n_gen, "n_depth": 0, "n_parallel": 1, "mode": "", "test_time": time,
            "avg_ts": ts, "stddev_ts": 1.5,
        })
        .to_string()
    }

    fn page_of(text: &str) -> String {
        let rows = rows::parse_text(text, "r.jsonl").expect("valid rows");
        page::render(&rows, &["r.jsonl".to_string()], "bench <lab>")
    }

    #[test]
    fn every_series_has_a_bar_and_a_legend_entry_in_each_test() {
        let text = [
            line("pixel-7", 4, 64, 0, "aaa1111", "2025-01-01T10:00:00Z", 300.0),
            line("pixel-7", 4, 0, 16, "aaa1111", "2025-01-01T10:01:00Z", 40.0),
            line("rpi5", 2, 64, 0, "aaa1111", "2025-01-01T11:00:00Z", 120.0),
            line("rpi5", 2, 0, 16, "aaa1111", "2025-01-01T11:01:00Z", 15.0),
        ]
        .join("\n");
        let html = page_of(&text);
        for series in ["SmolLM2.Q4_1 / CPU / 4 threads / pixel-7", "SmolLM2.Q4_1 / CPU / 2 threads / rpi5"] {
            for test in ["pp64", "tg16"] {
                let bar = format!(r#"data-plot="bars" data-test="{test}" data-series="{series}""#);
                assert_eq!(html.matches(&bar).count(), 1, "{bar} in {html}");
            }
            assert_eq!(html.matches(&format!(r#"<li data-series="{series}">"#)).count(), 2, "{html}");
        }
        // pp64 before tg16; the title escaped; one build: no history plot.
        assert!(html.find(">pp64</h2>").expect("pp64") < html.find(">tg16</h2>").expect("tg16"));
        assert!(html.contains("<title>bench &lt;lab&gt;</title>"), "{html}");
        assert!(!html.contains(r#"data-plot="history""#) && html.contains("One build (aaa1111"), "{html}");
        assert!(html.contains(">300.0</text>") && html.contains(">15.00</text>"), "{html}");
        // Self-contained: no scripts, nothing fetched.
        assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"));
    }

    #[test]
    fn history_has_a_point_per_build_and_the_latest_result_makes_the_bar() {
        let text = [
            line("pixel-7", 4, 0, 16, "ccc3333", "2025-03-01T00:00:00Z", 45.0),
            line("pixel-7", 4, 0, 16, "aaa1111", "2025-01-01T00:00:00Z", 40.0),
            line("pixel-7", 4, 0, 16, "bbb2222", "2025-02-01T00:00:00Z", 42.0),
            line("rpi5", 2, 0, 16, "bbb2222", "2025-02-02T00:00:00Z", 15.0),
        ]
        .join("\n");
        let html = page_of(&text);
        let series = "SmolLM2.Q4_1 / CPU / 4 threads / pixel-7";
        let g = format!(r#"data-plot="history" data-test="tg16" data-series="{series}">"#);
        let at = html.find(&g).expect("history line");
        let group = &html[at..at + html[at..].find("</g>").expect("end")];
        assert_eq!(group.matches("<circle").count(), 3, "{group}");
        // Commits in time order on the x axis, whatever the input order.
        let (a, b, c) = (html.find(">aaa1111<"), html.find(">bbb2222<"), html.find(">ccc3333<"));
        assert!(a < b && b < c && a.is_some(), "{html}");
        let bar = format!(r#"data-plot="bars" data-test="tg16" data-series="{series}""#);
        let bar_at = html.find(&bar).expect("bar");
        assert!(html[bar_at..].split("</g>").next().expect("bar").contains(">45.00</text>"));
        assert_eq!(html.matches(r#"data-plot="history" data-test="tg16""#).count(), 2);
    }

    #[test]
    fn bad_lines_are_named() {
        let good = line("d", 1, 8, 0, "abc", "2025-01-01T00:00:00Z", 1.0);
        let cases = [
            (format!("{good}\n\n{{\"avg_ts\": 1"), "r.jsonl:3: not a JSON line"),
            (format!("{good}\n[1, 2]"), "r.jsonl:2: not a JSON object"),
            ("[1, 2]".to_string(), "r.jsonl: element 1: not a JSON object"),
            (format!("[{good},"), "r.jsonl: not a JSON array"),
            (format!("{good}\n{good}\n42"), "r.jsonl:3: not a JSON object"),
            (good.replace("\"avg_ts\":1.0", "\"avg_ts\":\"fast\""), "r.jsonl:1: no \"avg_ts\""),
            (
                good.replace("\"n_threads\":1", "\"n_threads\":-1"),
                "r.jsonl:1: \"n_threads\" is not a whole number",
            ),
            (good.replace("\"backends\":\"CPU\"", "\"backends\":3"), "r.jsonl:1: no \"backends\""),
            (good.replace("\"n_gen\":0,", ""), "r.jsonl:1: no \"n_gen\""),
            (format!("[{good}, {{}}]"), "r.jsonl: element 2: no \"model_filename\""),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", rows::parse_text(&text, "r.jsonl").expect_err(want));
            assert!(err.starts_with(want), "{want:?} vs {err:?}");
        }
    }

    #[test]
    fn inputs_are_files_folders_and_globs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        std::fs::write(&a, line("a", 1, 8, 0, "abc", "", 1.0) + "\n").expect("write");
        std::fs::write(&b, line("b", 1, 8, 0, "abc", "", 2.0) + "\n").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not results").expect("write");
        let read = |p: PathBuf| rows::read_inputs(&[p]).map(|(rows, sources)| (rows.len(), sources.len()));
        assert_eq!(read(dir.path().to_path_buf()).expect("folder"), (2, 2));
        assert_eq!(read(dir.path().join("*.jsonl")).expect("glob"), (2, 2));
        assert_eq!(read(a.clone()).expect("file"), (1, 1));
        let err = read(dir.path().join("*.csv")).expect_err("no match").to_string();
        assert!(err.starts_with("no file matches"), "{err}");
        let empty = dir.path().join("empty.jsonl");
        std::fs::write(&empty, "\n").expect("write");
        assert!(read(empty).expect_err("empty").to_string().starts_with("no benchmark results in"));
    }
}
