//! A small SVG chart writer: line and point series on linear or log axes, a legend, and
//! several panels per file. Pure string building, so plots are reproducible byte for byte.

use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Line,
    Points,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
}

#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    /// A log y axis (values that span decades); points at or below 0 are not drawn.
    pub y_log: bool,
    pub series: Vec<Series>,
    /// Labels drawn next to points: (x, y, text).
    pub annotations: Vec<(f64, f64, String)>,
    /// Events on the x axis (a rate change): a dashed vertical line, labelled at its top.
    pub markers: Vec<(f64, String)>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const WIDTH: f64 = 760.0;
const PANEL_HEIGHT: f64 = 380.0;
const MARGIN_L: f64 = 70.0;
const MARGIN_R: f64 = 190.0;
const MARGIN_T: f64 = 34.0;
const MARGIN_B: f64 = 48.0;
/// Text widths are not known while writing SVG: a label is taken to be this wide per
/// character and font pixel (DejaVu Sans's capitals and digits are ~0.63–0.72 em), so
/// that legends wrap and labels keep apart wherever the browser's font is no wider.
const EM_PER_CHAR: f64 = 0.7;
/// Legend text: its font size and the characters a line holds in the right margin.
const LEGEND_FONT: f64 = 11.0;
const LEGEND_LINE: f64 = 13.0;

/// Words of `text` in lines of at most `max` characters (a longer word is cut).
fn wrap(text: &str, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = vec![];
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > max {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..max).collect());
        }
        let word: String = word.into_iter().collect();
        if word.is_empty() {
            continue;
        }
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// A label's box as placed: (left, top, right, bottom).
type TextBox = (f64, f64, f64, f64);

fn overlaps(a: TextBox, b: TextBox) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Tick values and labels for an axis.
fn ticks(lo: f64, hi: f64, log: bool) -> Vec<(f64, String)> {
    if log {
        let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        return (a..=b)
            .map(|e| (10f64.powi(e), fmt_num(10f64.powi(e))))
            .collect();
    }
    let span = (hi - lo).max(1e-12);
    let raw = span / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 7.0)
        .unwrap_or(10.0 * mag);
    let mut v = (lo / step).floor() * step;
    let mut out = vec![];
    while v <= hi + step * 1e-9 {
        if v >= lo - step * 1e-9 {
            out.push((v, fmt_num(v)));
        }
        v += step;
    }
    out
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e5 || v.abs() < 0.01 {
        // Three significant digits, so that neighbouring ticks (1.5e5, 2e5) stay apart.
        let s = format!("{v:.2e}");
        match s.split_once('e') {
            Some((m, e)) => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
            None => s,
        }
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn bounds(chart: &Chart) -> Option<(f64, f64, f64, f64)> {
    let pts = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|&&(x, y)| drawable(chart, x, y));
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let mut any = false;
    for &(x, y) in pts {
        any = true;
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !any {
        return None;
    }
    if chart.x_log {
        x0 = 10f64.powf(x0.log10().floor());
        x1 = 10f64.powf(x1.log10().ceil().max(x0.log10() + 1.0));
    } else if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if chart.y_log {
        y0 = 10f64.powf(y0.log10().floor());
        y1 = 10f64.powf(y1.log10().ceil().max(y0.log10() + 1.0));
        return Some((x0, x1, y0, y1));
    }
    y0 = y0.min(0.0);
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    Some((x0, x1, y0, y1 * 1.05))
}

/// Whether a point can be placed on the chart's axes (a log axis has no place for 0).
fn drawable(chart: &Chart, x: f64, y: f64) -> bool {
    x.is_finite() && y.is_finite() && (!chart.x_log || x > 0.0) && (!chart.y_log || y > 0.0)
}

fn panel(out: &mut String, chart: &Chart, top: f64) {
    let plot_w = WIDTH - MARGIN_L - MARGIN_R;
    let plot_h = PANEL_HEIGHT - MARGIN_T - MARGIN_B;
    let (px, py) = (MARGIN_L, top + MARGIN_T);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
        px,
        top + 20.0,
        esc(&chart.title)
    );
    let Some((x0, x1, y0, y1)) = bounds(chart) else {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="12">no data</text>"#,
            px + 10.0,
            py + plot_h / 2.0
        );
        return;
    };
    let sx = |x: f64| {
        let f = if chart.x_log {
            (x.log10() - x0.log10()) / (x1.log10() - x0.log10())
        } else {
            (x - x0) / (x1 - x0)
        };
        px + f * plot_w
    };
    let sy = |y: f64| {
        let f = if chart.y_log {
            (y.log10() - y0.log10()) / (y1.log10() - y0.log10())
        } else {
            (y - y0) / (y1 - y0)
        };
        py + plot_h - f * plot_h
    };
    let _ = writeln!(
        out,
        r##"<rect x="{px}" y="{py}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>"##
    );
    for (v, label) in ticks(x0, x1, chart.x_log) {
        let x = sx(v);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{py}" x2="{x:.1}" y2="{}" stroke="#ddd"/>"##,
            py + plot_h
        );
        let _ = writeln!(
            out,
            r#"<text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{label}</text>"#,
            py + plot_h + 17.0
        );
    }
    for (v, label) in ticks(y0, y1, chart.y_log) {
        let y = sy(v);
        let _ = writeln!(
            out,
            r##"<line x1="{px}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/>"##,
            px + plot_w
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{label}</text>"#,
            px - 7.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        px + plot_w / 2.0,
        py + plot_h + 36.0,
        esc(&chart.x_label)
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>"#,
        px - 50.0,
        py + plot_h / 2.0,
        px - 50.0,
        py + plot_h / 2.0,
        esc(&chart.y_label)
    );
    let mut legend_y = py + 14.0;
    for (i, s) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|&&(x, y)| drawable(chart, x, y))
            .map(|&(x, y)| (sx(x), sy(y)))
            .collect();
        let lx = px + plot_w + 12.0;
        let max_chars = ((MARGIN_R - 30.0) / (LEGEND_FONT * EM_PER_CHAR)) as usize;
        // Nothing to draw: the legend says so, in grey and without a colour swatch (an entry
        // with a colour but no line reads as a line the reader cannot find).
        if pts.is_empty() {
            let lines = wrap(&format!("{} (nothing to draw)", s.name), max_chars);
            for (k, line) in lines.iter().enumerate() {
                let _ = writeln!(
                    out,
                    r##"<text class="{}" x="{}" y="{}" font-size="{LEGEND_FONT}" fill="#777">{}</text>"##,
                    // The entry's first line is "no-data": one per series without data.
                    if k == 0 { "no-data" } else { "no-data-cont" },
                    lx + 18.0,
                    legend_y + k as f64 * LEGEND_LINE,
                    esc(line)
                );
            }
            legend_y += lines.len() as f64 * LEGEND_LINE + 5.0;
            continue;
        }
        match s.style {
            Style::Line if pts.len() > 1 => {
                let d: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                let _ = writeln!(
                    out,
                    r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
                    d.join(" ")
                );
            }
            _ => {
                // Every point a dot of radius 2.5: a zero-length stroke with round caps, all
                // of a series in one path (a quarter of the bytes of a circle each, which a
                // per-write plot has thousands of). Points that land on the same 0.1 px are
                // drawn once.
                let mut drawn = std::collections::BTreeSet::new();
                let mut d = String::new();
                for (x, y) in &pts {
                    let at = format!("{x:.1} {y:.1}");
                    if drawn.insert(at.clone()) {
                        let _ = write!(d, "M{at}h0");
                    }
                }
                let _ = writeln!(
                    out,
                    r#"<path class="points" d="{d}" stroke="{color}" stroke-width="5" stroke-linecap="round" fill="none"/>"#
                );
            }
        }
        // The legend in the right margin, each name wrapped to the margin's width.
        let lines = wrap(&s.name, max_chars);
        let _ = writeln!(
            out,
            r#"<rect x="{lx}" y="{}" width="12" height="4" fill="{color}"/>"#,
            legend_y - 6.0
        );
        for (k, line) in lines.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" font-size="{LEGEND_FONT}">{}</text>"#,
                lx + 18.0,
                legend_y + k as f64 * LEGEND_LINE,
                esc(line)
            );
        }
        legend_y += lines.len() as f64 * LEGEND_LINE + 5.0;
    }
    for (x, text) in &chart.markers {
        if !x.is_finite() || *x < x0 || *x > x1 || (chart.x_log && *x <= 0.0) {
            continue;
        }
        let lx = sx(*x);
        let _ = writeln!(
            out,
            r##"<line x1="{lx:.1}" y1="{py}" x2="{lx:.1}" y2="{}" stroke="#555" stroke-dasharray="4 3"/>"##,
            py + plot_h
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" font-size="10">{}</text>"#,
            lx + 3.0,
            py + 11.0,
            esc(text)
        );
    }
    // Point labels: beside their point, inside the plot, never over another label (a
    // label that finds no free place is left out: its neighbour already names the spot).
    let mut placed: Vec<TextBox> = vec![];
    for (x, y, text) in &chart.annotations {
        if !drawable(chart, *x, *y) {
            continue;
        }
        let (ax, ay) = (sx(*x), sy(*y));
        let w = text.chars().count() as f64 * 10.0 * EM_PER_CHAR;
        let right_side = ax + 4.0 + w <= px + plot_w;
        let left = if right_side { ax + 4.0 } else { ax - 4.0 - w };
        let spot = [-4.0, 12.0, -16.0, 24.0]
            .into_iter()
            .map(|dy| (left, ay + dy - 9.0, left + w, ay + dy + 2.0))
            .find(|b| b.1 >= py && b.3 <= py + plot_h && !placed.iter().any(|p| overlaps(*p, *b)));
        let Some(b) = spot else { continue };
        placed.push(b);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
            b.0,
            b.3 - 2.0,
            esc(text)
        );
    }
}

/// One SVG document with the charts stacked vertically.
pub fn render(charts: &[Chart]) -> String {
    let height = PANEL_HEIGHT * charts.len().max(1) as f64;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    out.push('\n');
    out.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    out.push('\n');
    for (i, c) in charts.iter().enumerate() {
        panel(&mut out, c, i as f64 * PANEL_HEIGHT);
    }
    out.push_str("</svg>\n");
    out
}

/// The empirical CDF of `values` as (value, fraction ≤ value) points, at most `max_points`.
pub fn cdf(values: &mut [f64], max_points: usize) -> Vec<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return vec![];
    }
    let step = (n / max_points.max(1)).max(1);
    let mut pts: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (values[i], (i + 1) as f64 / n as f64))
        .collect();
    if pts.last().map(|p| p.1) != Some(1.0) {
        pts.push((values[n - 1], 1.0));
    }
    pts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_ends_at_one_and_is_sorted() {
        let mut v = vec![3.0, 1.0, 2.0, 4.0];
        let c = cdf(&mut v, 100);
        assert_eq!(c, [(1.0, 0.25), (2.0, 0.5), (3.0, 0.75), (4.0, 1.0)]);
        let mut many: Vec<f64> = (0..10_000).map(f64::from).collect();
        let c = cdf(&mut many, 500);
        assert!(c.len() <= 502);
        assert_eq!(c.last().unwrap().1, 1.0);
    }

    #[test]
    fn neighbouring_ticks_read_apart() {
        let labels: Vec<String> = [1500.0, 2000.0, 2500.0, 150_000.0, 200_000.0, 0.005]
            .iter()
            .map(|&v| fmt_num(v))
            .collect();
        assert_eq!(labels, ["1500", "2000", "2500", "1.5e5", "2e5", "5e-3"]);
    }

    #[test]
    fn legend_names_wrap_to_the_margin_and_long_words_are_cut() {
        assert_eq!(
            wrap("NOTSENT_LOWAT tuned to the rate", 20),
            ["NOTSENT_LOWAT tuned", "to the rate"]
        );
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
        let chart = Chart {
            series: vec![Series {
                name: "REPLENISH_TIME = 15 ms, emulated (NOTSENT_LOWAT wakeups)".into(),
                points: vec![(1.0, 1.0), (2.0, 2.0)],
                style: Style::Line,
            }],
            ..Default::default()
        };
        let svg = render(&[chart]);
        assert!(svg.contains(">REPLENISH_TIME = 15</text>"), "{svg}");
        assert!(svg.contains(">wakeups)</text>"), "{svg}");
    }

    #[test]
    fn labels_never_overlap_and_a_log_y_axis_has_decades() {
        let chart = Chart {
            y_log: true,
            series: vec![Series {
                name: "a".into(),
                points: vec![(1.0, 0.1), (1.0, 80.0)],
                style: Style::Points,
            }],
            annotations: (0..6).map(|i| (1.0, 3.0, format!("label {i}"))).collect(),
            ..Default::default()
        };
        let svg = render(&[chart]);
        assert!(
            svg.contains(">0.1</text>") && svg.contains(">100</text>"),
            "{svg}"
        );
        // Six labels on one point: four places, so two are left out.
        assert_eq!(svg.matches(">label ").count(), 4, "{svg}");
    }

    #[test]
    fn log_ticks_are_decades() {
        let t = ticks(0.3, 2000.0, true);
        let v: Vec<f64> = t.iter().map(|x| x.0).collect();
        assert_eq!(v, [0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0]);
    }

    #[test]
    fn one_series_per_legend_entry() {
        let chart = Chart {
            title: "t <&>".into(),
            x_log: true,
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(1.0, 0.5), (10.0, 1.0)],
                    style: Style::Line,
                },
                Series {
                    name: "b".into(),
                    points: vec![(2.0, 0.5)],
                    style: Style::Points,
                },
            ],
            ..Default::default()
        };
        let svg = render(&[chart]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains("t &lt;&amp;&gt;"));
        assert!(svg.contains(">a</text>") && svg.contains(">b</text>"));
    }

    #[test]
    fn a_point_series_is_one_path_of_dots_each_drawn_once() {
        let chart = Chart {
            series: vec![Series {
                name: "writes".into(),
                // The second point lands on the first's 0.1 px; the third does not.
                points: vec![(1.0, 1.0), (1.0000001, 1.0), (2.0, 3.0)],
                style: Style::Points,
            }],
            ..Default::default()
        };
        let svg = render(&[chart]);
        let path = svg
            .lines()
            .find(|l| l.starts_with(r#"<path class="points""#))
            .unwrap_or_else(|| panic!("{svg}"));
        assert_eq!(path.matches('M').count(), 2, "{path}");
        assert_eq!(path.matches("h0").count(), 2, "{path}");
        assert!(
            path.contains(r#"stroke-width="5" stroke-linecap="round""#),
            "{path}"
        );
        assert!(!svg.contains("<circle"));
    }
}
