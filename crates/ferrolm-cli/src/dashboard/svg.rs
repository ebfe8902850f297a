//! The plots, as inline SVG that scales to the page's width (a `viewBox` 480 units wide): a
//! horizontal bar per series, and a line per series over build commits. Every series' element
//! carries `data-plot`, `data-test` and `data-series` attributes, and a `<title>` tooltip.

use std::fmt::Write as _;

use super::esc;

/// The width of every plot, in SVG units.
const WIDTH: f64 = 480.0;

/// How a series is drawn: its label (the `data-series` value) and its colour.
#[derive(Clone, Copy, Debug)]
pub struct Style<'a> {
    /// [`super::rows::Series::label`].
    pub label: &'a str,
    /// A CSS colour.
    pub color: &'a str,
    /// Whether its history line is dashed (told apart from a series of the same colour).
    pub dashed: bool,
}

/// A bar: a series' latest tokens/s in a test.
#[derive(Debug)]
pub struct Bar<'a> {
    /// The series.
    pub style: Style<'a>,
    /// Tokens/s.
    pub value: f64,
    /// The tooltip's text.
    pub tooltip: String,
}

/// A point of a history line.
#[derive(Debug)]
pub struct Point {
    /// Index into the plot's x ticks.
    pub x: usize,
    /// Tokens/s.
    pub value: f64,
    /// The tooltip's text.
    pub tooltip: String,
}

/// A history line: one series' points, in x order.
#[derive(Debug)]
pub struct Line<'a> {
    /// The series.
    pub style: Style<'a>,
    /// Its points.
    pub points: Vec<Point>,
}

/// Tokens/s as shown on the page: two decimals below 100, one above.
pub fn fmt_ts(v: f64) -> String {
    if v < 100.0 { format!("{v:.2}") } else { format!("{v:.1}") }
}

/// The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 (times a power of ten) at least `v`: the
/// top of an axis, which then has five ticks at round values.
fn nice_max(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&m| m >= v * (1.0 - 1e-12))
        .unwrap_or(10.0 * p)
}

/// An axis value's label, with as many decimals as the tick step (`max / 5`) needs.
fn tick_label(v: f64, max: f64) -> String {
    let step = max / 5.0;
    let decimals = (0..6).find(|&d| {
        let scaled = step * 10f64.powi(d);
        (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
    });
    format!("{v:.*}", decimals.unwrap_or(6) as usize)
}

fn svg_open(height: f64, aria: &str) -> String {
    format!(r#"<svg viewBox="0 0 {WIDTH} {height:.0}" role="img" aria-label="{}">"#, esc(aria))
}

/// A bar per series (in the order given), with its value at its end and a tokens/s axis.
pub fn bars(test: &str, bars: &[Bar<'_>]) -> String {
    const LEFT: f64 = 8.0;
    const RIGHT: f64 = 72.0;
    const ROW: f64 = 38.0;
    const TOP: f64 = 4.0;
    let max = nice_max(bars.iter().map(|b| b.value).fold(0.0, f64::max));
    let plot_w = WIDTH - LEFT - RIGHT;
    let axis_y = TOP + ROW * bars.len() as f64;
    let mut s = svg_open(axis_y + 42.0, &format!("{test}: tokens per second of each series"));
    for k in 0..=5 {
        let v = max * f64::from(k) / 5.0;
        let x = LEFT + plot_w * v / max;
        let _ = write!(
            s,
            r#"<line class="grid" x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{axis_y:.1}"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            axis_y + 15.0,
            tick_label(v, max)
        );
    }
    let _ = write!(
        s,
        r#"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">tokens/s</text>"#,
        LEFT + plot_w / 2.0,
        axis_y + 36.0
    );
    for (i, b) in bars.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let w = (plot_w * b.value / max).max(1.0);
        let _ = write!(
            s,
            concat!(
                r#"<g class="bar" data-plot="bars" data-test="{test}" data-series="{label}"><title>{tip}</title>"#,
                r#"<text class="label" x="{left}" y="{ty:.1}">{label}</text>"#,
                r#"<rect x="{left}" y="{ry:.1}" width="{w:.1}" height="16" fill="{color}"/>"#,
                r#"<text class="value" x="{vx:.1}" y="{vy:.1}">{value}</text></g>"#
            ),
            left = LEFT,
            w = w,
            test = esc(test),
            label = esc(b.style.label),
            tip = esc(&b.tooltip),
            ty = y + 13.0,
            ry = y + 18.0,
            color = esc(b.style.color),
            vx = LEFT + w + 4.0,
            vy = y + 31.0,
            value = fmt_ts(b.value),
        );
    }
    s + "</svg>"
}

/// A line per series over the x ticks (`(commit, date)` pairs, oldest first), with a
/// tokens/s axis from 0.
pub fn history(test: &str, ticks: &[(String, String)], lines: &[Line<'_>]) -> String {
    const LEFT: f64 = 52.0;
    const RIGHT: f64 = 36.0;
    const TOP: f64 = 10.0;
    const HEIGHT: f64 = 280.0;
    const BOTTOM: f64 = 66.0;
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let max = nice_max(lines.iter().flat_map(|l| &l.points).map(|p| p.value).fold(0.0, f64::max));
    let n = ticks.len();
    let x = |i: usize| if n < 2 { LEFT + plot_w / 2.0 } else { LEFT + plot_w * i as f64 / (n - 1) as f64 };
    let y = |v: f64| TOP + plot_h * (1.0 - v / max);
    let mut s = svg_open(HEIGHT, &format!("{test}: tokens per second of each series over build commits"));
    for k in 0..=5 {
        let v = max * f64::from(k) / 5.0;
        let _ = write!(
            s,
            r#"<line class="grid" x1="{LEFT}" y1="{yv:.1}" x2="{:.1}" y2="{yv:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT + plot_w,
            LEFT - 6.0,
            y(v) + 4.0,
            tick_label(v, max),
            yv = y(v),
        );
    }
    // At most six labelled commits, the newest always among them.
    let every = n.div_ceil(6).max(1);
    for (i, (commit, date)) in ticks.iter().enumerate() {
        if i % every != 0 && i + 1 != n {
            continue;
        }
        let _ = write!(
            s,
            r#"<text class="tick" x="{xi:.1}" y="{:.1}" text-anchor="middle"><tspan x="{xi:.1}">{}</tspan><tspan x="{xi:.1}" dy="13">{}</tspan></text>"#,
            TOP + plot_h + 16.0,
            esc(commit),
            esc(date),
            xi = x(i),
        );
    }
    let _ = write!(
        s,
        concat!(
            r#"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">build commit (oldest to newest)</text>"#,
            r#"<text class="axis-title" transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle">tokens/s</text>"#
        ),
        LEFT + plot_w / 2.0,
        HEIGHT - 8.0,
        TOP + plot_h / 2.0
    );
    for line in lines {
        let points: Vec<String> =
            line.points.iter().map(|p| format!("{:.1},{:.1}", x(p.x), y(p.value))).collect();
        let dash = if line.style.dashed { r#" stroke-dasharray="6 3""# } else { "" };
        let _ = write!(
            s,
            r#"<g class="line" data-plot="history" data-test="{}" data-series="{}"><polyline points="{}" fill="none" stroke-width="2" stroke="{color}"{dash}/>"#,
            esc(test),
            esc(line.style.label),
            points.join(" "),
            color = esc(line.style.color),
        );
        for p in &line.points {
            let _ = write!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{}"><title>{}</title></circle>"#,
                x(p.x),
                y(p.value),
                esc(line.style.color),
                esc(&p.tooltip)
            );
        }
        s += "</g>";
    }
    s + "</svg>"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(1.0), 1.0);
        assert_eq!(nice_max(1.3), 1.5);
        assert_eq!(nice_max(235.6), 250.0);
        assert_eq!(nice_max(281.0), 300.0);
        assert_eq!(nice_max(881.0), 1000.0);
        assert_eq!(nice_max(0.03), 0.03);
        assert_eq!(nice_max(0.031), 0.04);
        assert_eq!(tick_label(0.24, 1.2), "0.24");
        assert_eq!(tick_label(48.0, 120.0), "48");
        assert_eq!(tick_label(150.0, 250.0), "150");
        assert_eq!(tick_label(0.4, 2.0), "0.4");
        assert_eq!(tick_label(0.01, 0.05), "0.01");
    }

    #[test]
    fn every_point_is_drawn_with_its_series() {
        let style = Style { label: "m / CPU / 1 thread / a<b", color: "#4e79a7", dashed: true };
        let point = |x, value| Point { x, value, tooltip: format!("{value}") };
        let ticks = vec![("abc".to_string(), "2025-01-01".to_string()), ("def".into(), "2025-01-02".into())];
        let svg = history("tg4", &ticks, &[Line { style, points: vec![point(0, 10.0), point(1, 20.0)] }]);
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
        assert!(svg.contains(r#"data-series="m / CPU / 1 thread / a&lt;b""#), "{svg}");
        assert!(svg.contains("stroke-dasharray") && svg.contains(">def</tspan>"), "{svg}");
        let svg = bars("tg4", &[Bar { style, value: 12.345, tooltip: String::new() }]);
        assert!(svg.contains(">12.35</text>") && svg.contains(">tokens/s</text>"), "{svg}");
    }
}
