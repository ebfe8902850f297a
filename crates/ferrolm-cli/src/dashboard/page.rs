//! The page: a header summing up the inputs, then one section per test with its bar plot (each
//! series' latest result), its history plot (each series over build commits) and its legend.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::esc;
use super::rows::{Row, Series, Test};
use super::svg::{self, Bar, Line, Point, Style};

/// Series colours (Tableau 10), given in series order; from the eleventh series on they repeat
/// with dashed history lines.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
    "#bab0ac",
];

const CSS: &str = "\
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:760px;padding:12px;color:#222;background:#fff}\
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.2em 0 .3em;border-top:1px solid #ddd;padding-top:.6em}\
h3{font-size:.95em;margin:.6em 0 .2em;color:#444}p.meta,p.note{color:#555;font-size:.9em;margin:.3em 0}\
nav a{margin-right:.8em;white-space:nowrap}svg{width:100%;max-width:640px;height:auto;display:block}\
svg text{font-size:12px;fill:#222}svg .tick{font-size:11px;fill:#555}svg .axis-title{font-size:12px;fill:#444}\
svg .grid{stroke:#e4e4e4;stroke-width:1}\
ul.legend{list-style:none;padding:0;margin:.4em 0;display:flex;flex-wrap:wrap;gap:.3em 1em;font-size:.85em}\
ul.legend li{display:flex;align-items:center;gap:.35em}\
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;flex:none}";

/// The page for `rows` (read from `sources`), titled `title`.
pub fn render(rows: &[Row], sources: &[String], title: &str) -> String {
    let series: BTreeSet<&Series> = rows.iter().map(|r| &r.series).collect();
    let labels: BTreeMap<&Series, (String, usize)> =
        series.iter().enumerate().map(|(i, &s)| (s, (s.label(), i))).collect();
    let style = |s: &Series| {
        let (label, i) = &labels[s];
        Style { label, color: PALETTE[i % PALETTE.len()], dashed: (i / PALETTE.len()) % 2 == 1 }
    };
    let commits = commit_order(rows);
    let mut tests: BTreeMap<&Test, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        tests.entry(&r.test).or_default().push(r);
    }
    let mut body = header(rows, sources, title, &commits, &series);
    let names: Vec<String> = tests.keys().map(|t| t.name()).collect();
    body += "<nav>";
    for (i, name) in names.iter().enumerate() {
        let _ = write!(body, r##"<a href="#test-{i}">{}</a>"##, esc(name));
    }
    body += "</nav>";
    for (i, (name, test_rows)) in names.iter().zip(tests.values()).enumerate() {
        body += &section(i, name, test_rows, &commits, &style);
    }
    format!(
        concat!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
            "<title>{}</title><style>{}</style></head>\n<body>\n{}\n</body></html>\n"
        ),
        esc(title),
        CSS,
        body
    )
}

/// The build commits, oldest first: ordered by their earliest `test_time`, then by first
/// appearance. Each with the date of that earliest time.
fn commit_order(rows: &[Row]) -> Vec<(String, String)> {
    let mut first: Vec<(&str, &str)> = Vec::new();
    for r in rows {
        match first.iter_mut().find(|(c, _)| *c == r.commit) {
            Some((_, t)) if r.time.as_str() < *t => *t = &r.time,
            Some(_) => {}
            None => first.push((&r.commit, &r.time)),
        }
    }
    // A stable sort: commits without times keep their input order.
    first.sort_by_key(|&(_, t)| t);
    first.into_iter().map(|(c, t)| (c.to_string(), t.get(..10).unwrap_or(t).to_string())).collect()
}

/// The title and what the page was made from.
fn header(
    rows: &[Row],
    sources: &[String],
    title: &str,
    commits: &[(String, String)],
    series: &BTreeSet<&Series>,
) -> String {
    let devices: BTreeSet<&str> = series.iter().map(|s| s.device.as_str()).collect();
    let models: BTreeSet<&str> = series.iter().map(|s| s.model.as_str()).collect();
    let list = |v: Vec<&str>| esc(&v.join(", "));
    let build = crate::bench::BuildInfo::current();
    let mut h = format!("<h1>{}</h1>", esc(title));
    let _ = write!(
        h,
        concat!(
            "<p class=\"meta\">{} results from {}; {} series.</p>",
            "<p class=\"meta\">Devices: {}.</p><p class=\"meta\">Models: {}.</p>",
            "<p class=\"meta\">Builds: {} ({} to {}). Made by ferrolm {} ({}) <code>dashboard</code>.</p>"
        ),
        rows.len(),
        list(sources.iter().map(String::as_str).collect()),
        series.len(),
        list(devices.into_iter().collect()),
        list(models.into_iter().collect()),
        commits.len(),
        esc(&commit_label(commits.first())),
        esc(&commit_label(commits.last())),
        build.version,
        esc(build.commit),
    );
    h
}

fn commit_label(c: Option<&(String, String)>) -> String {
    match c {
        Some((commit, date)) if !date.is_empty() => format!("{commit}, {date}"),
        Some((commit, _)) => commit.clone(),
        None => String::new(),
    }
}

/// One test's section: bars of each series' latest result, the history over commits (when
/// the test ran on two builds or more), and the legend.
fn section<'s>(
    index: usize,
    name: &str,
    rows: &[&Row],
    commits: &[(String, String)],
    style: &impl Fn(&Series) -> Style<'s>,
) -> String {
    // The latest row of each series, and of each series at each commit (a later row wins ties).
    let mut latest: BTreeMap<&Series, &Row> = BTreeMap::new();
    let mut at_commit: BTreeMap<&Series, BTreeMap<usize, &Row>> = BTreeMap::new();
    for &r in rows {
        let c = commits.iter().position(|(c, _)| *c == r.commit).unwrap_or(0);
        for slot in [
            latest.entry(&r.series).or_insert(r),
            at_commit.entry(&r.series).or_default().entry(c).or_insert(r),
        ] {
            if r.time >= slot.time {
                *slot = r;
            }
        }
    }
    let bars: Vec<Bar<'_>> = latest
        .iter()
        .map(|(&s, &r)| Bar { style: style(s), value: r.avg_ts, tooltip: tooltip(name, r) })
        .collect();
    let mut out = format!(
        r#"<section id="test-{index}" data-test="{}"><h2>{}</h2><h3>Latest result per series</h3>{}"#,
        esc(name),
        esc(name),
        svg::bars(name, &bars)
    );
    // The commits this test ran on, oldest first, as x positions.
    let used: BTreeSet<usize> = at_commit.values().flat_map(|m| m.keys().copied()).collect();
    let x_of: BTreeMap<usize, usize> = used.iter().enumerate().map(|(x, &c)| (c, x)).collect();
    if used.len() >= 2 {
        let ticks: Vec<(String, String)> = used.iter().map(|&c| commits[c].clone()).collect();
        let lines: Vec<Line<'_>> = at_commit
            .iter()
            .map(|(&s, by_commit)| Line {
                style: style(s),
                points: by_commit
                    .iter()
                    .map(|(c, &r)| Point { x: x_of[c], value: r.avg_ts, tooltip: tooltip(name, r) })
                    .collect(),
            })
            .collect();
        out += "<h3>History over build commits</h3>";
        out += &svg::history(name, &ticks, &lines);
    } else {
        let _ = write!(
            out,
            "<p class=\"note\">One build ({}): the history plot needs results of two builds or more.</p>",
            esc(&commit_label(used.first().map(|&c| &commits[c])))
        );
    }
    out += "<ul class=\"legend\">";
    for s in latest.keys() {
        let st = style(s);
        let _ = write!(
            out,
            r#"<li data-series="{}"><span class="swatch" style="background:{}"></span>{}</li>"#,
            esc(st.label),
            esc(st.color),
            esc(st.label)
        );
    }
    out + "</ul></section>\n"
}

/// A row's tooltip: series, test, tokens/s ± deviation, build and time.
fn tooltip(test: &str, r: &Row) -> String {
    format!(
        "{}\n{test}: {} ± {} t/s\nbuild {}{}",
        r.series.label(),
        svg::fmt_ts(r.avg_ts),
        svg::fmt_ts(r.stddev_ts),
        r.commit,
        if r.time.is_empty() { String::new() } else { format!(", {}", r.time) }
    )
}
