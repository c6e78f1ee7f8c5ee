//! The run's HTML report: `index.html` beside table.md and one page per cell under
//! `cells/`. Self-contained: inline CSS, no scripts, nothing fetched from a network; the
//! plots are the run's own SVGs under `plots/`, the data the cells' own files, linked.
//!
//! Pure functions of what the run stored (table.md's text through [`md_to_html`], the
//! summary rows, each cell's meta.json and file list) plus one writer, [`write_site`].

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::aggregate::{self, Group};
use super::format::rate_header;
use super::record::{CellStatus, Meta, Status, SummaryRow};
use super::report;
use super::spec::{Cell, MatrixSpec};
use crate::report::compressed::{self, Listing};

const CSS: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:80em;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .5em;vertical-align:top;text-align:left}\
th{background:#f3f3f3}code{background:#f6f6f6;padding:0 .2em}img.plot{max-width:100%;border:1px solid #eee;margin:.5em 0}\
nav a{margin-right:1em}.runs a{margin-right:.4em;font-size:90%}strong{color:#a00}\
.status-ok{color:#060;font-weight:600}.status-failed,.status-not-run{color:#a00;font-weight:600}.status-interrupted{color:#a50;font-weight:600}\
summary{cursor:pointer;color:#245}pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em}\
dt{font-weight:600}dd{margin:0 0 .4em 1.5em}";

/// Tables with more rows than this are folded (`<details>`).
const FOLD_ROWS: usize = 12;

/// Text as HTML (element content and attribute values alike).
pub fn escape(s: &str) -> String {
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

/// One line of markdown's inline markup as HTML: `code` and **strong**, the rest escaped.
fn inline(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    let mut strong = false;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('`') {
            if let Some(end) = after.find('`') {
                let _ = write!(out, "<code>{}</code>", escape(&after[..end]));
                rest = &after[end + 1..];
                continue;
            }
        }
        if let Some(after) = rest.strip_prefix("**") {
            out.push_str(if strong { "</strong>" } else { "<strong>" });
            strong = !strong;
            rest = after;
            continue;
        }
        let next = rest
            .char_indices()
            .skip(1)
            .find(|(_, c)| *c == '`' || *c == '*')
            .map_or(rest.len(), |(i, _)| i);
        out.push_str(&escape(&rest[..next]));
        rest = &rest[next..];
    }
    if strong {
        out.push_str("</strong>");
    }
    out
}

/// The markdown sbm writes (table.md's notes, compare's output) as HTML: `#` headings,
/// pipe tables, `- ` lists and paragraphs, with [`inline`] markup. A table cell whose whole
/// text `link` knows (a cell's name) becomes a link to what it returns.
pub fn md_to_html(md: &str, link: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        if line.trim().is_empty() {
            i += 1;
        } else if let Some((level, text)) = heading(line) {
            let _ = writeln!(out, "<h{level}>{}</h{level}>", inline(text));
            i += 1;
        } else if line.starts_with('|') {
            let start = i;
            while i < lines.len() && lines[i].starts_with('|') {
                i += 1;
            }
            let table = table_html(&lines[start..i], link);
            // A long table (per-cell estimator figures, say) folds, so that the page's
            // plots and notes are not pushed pages down.
            let rows = i - start - 2;
            if rows > FOLD_ROWS {
                let _ = writeln!(
                    out,
                    "<details><summary>table of {rows} rows (click to show)</summary>\n{table}</details>"
                );
            } else {
                out.push_str(&table);
            }
        } else if line.starts_with("- ") {
            out.push_str("<ul>\n");
            while i < lines.len() && lines[i].starts_with("- ") {
                let _ = writeln!(out, "<li>{}</li>", inline(&lines[i][2..]));
                i += 1;
            }
            out.push_str("</ul>\n");
        } else {
            let start = i;
            while i < lines.len()
                && !lines[i].trim().is_empty()
                && !lines[i].starts_with('|')
                && !lines[i].starts_with("- ")
                && heading(lines[i]).is_none()
            {
                i += 1;
            }
            let text: Vec<String> = lines[start..i].iter().map(|l| inline(l.trim())).collect();
            let _ = writeln!(out, "<p>{}</p>", text.join(" "));
        }
    }
    out
}

fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    (1..=4)
        .contains(&level)
        .then(|| line[level..].strip_prefix(' '))
        .flatten()
        .map(|t| (level, t))
}

fn table_cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

fn table_html(lines: &[&str], link: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::from("<table>\n");
    let is_rule = |l: &str| {
        table_cells(l)
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
    };
    let has_header = lines.len() > 1 && is_rule(lines[1]);
    for (n, line) in lines.iter().enumerate() {
        if has_header && n == 1 {
            continue;
        }
        let tag = if has_header && n == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for cell in table_cells(line) {
            let body = match link(cell) {
                Some(href) => format!("<a href=\"{}\">{}</a>", escape(&href), escape(cell)),
                None => inline(cell),
            };
            let _ = write!(out, "<{tag}>{body}</{tag}>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// A whole page.
pub fn page(title: &str, nav: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<nav>{nav}</nav>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

/// A cell page's address from the run directory.
pub fn cell_href(cell: &str) -> String {
    format!("cells/{cell}.html")
}

/// What the index says about the run as a whole, read from its cells' meta.json.
#[derive(Debug, Default)]
pub struct RunFacts {
    pub sbm_versions: Vec<String>,
    pub commits: Vec<String>,
    pub kernels: Vec<String>,
    pub started_unix_s: Option<u64>,
    pub ended_unix_s: Option<u64>,
}

impl RunFacts {
    /// From the cells' meta.json (what ran) and cell.json (when).
    pub fn of(metas: &[Option<Meta>], statuses: &[Option<CellStatus>]) -> RunFacts {
        let mut f = RunFacts::default();
        let add = |list: &mut Vec<String>, s: &str| {
            if !list.iter().any(|x| x == s) {
                list.push(s.to_string());
            }
        };
        for m in metas.iter().flatten() {
            add(&mut f.sbm_versions, &m.sbm_version);
            add(&mut f.commits, &m.git_commit);
            add(&mut f.kernels, &m.kernel_release);
        }
        for c in statuses.iter().flatten() {
            let (a, b) = (c.started_unix_s, c.ended_unix_s);
            f.started_unix_s = Some(f.started_unix_s.map_or(a, |s| s.min(a)));
            f.ended_unix_s = Some(f.ended_unix_s.map_or(b, |s| s.max(b)));
        }
        f
    }
}

/// index.html: the table with every figure linked to its runs' pages, table.md's notes,
/// the run-wide plots, the run's facts and its files.
pub fn index_html(
    spec: &MatrixSpec,
    rows: &[SummaryRow],
    facts: &RunFacts,
    plots: &[String],
) -> String {
    let groups = aggregate::groups(spec, rows);
    let name = spec.name.clone().unwrap_or_else(|| "matrix run".into());
    let mut body = format!(
        "<h1>{}</h1>\n<p>{}</p>\n",
        escape(&name),
        inline(spec.description.trim())
    );
    body.push_str(&answer_html(spec, &groups));
    body.push_str(&main_table_html(spec, &groups));
    body.push_str(&facts_html(facts, rows));
    // The plots before the notes: the notes' long tables would push them pages down.
    let run_plots: Vec<&String> = plots.iter().filter(|p| !p.starts_with("cell-")).collect();
    if !run_plots.is_empty() {
        body.push_str("<h2>Plots</h2>\n");
        for p in run_plots {
            let _ = writeln!(
                body,
                "<p><img class=\"plot\" src=\"plots/{0}\" alt=\"{0}\"></p>",
                escape(p)
            );
        }
    }
    let known: Vec<&str> = rows.iter().map(|r| r.cell.as_str()).collect();
    let link = |text: &str| known.contains(&text).then(|| cell_href(text));
    body.push_str(&md_to_html(&report::notes_md(spec, rows, &groups), &link));
    body.push_str("<h2>Files</h2>\n<ul>\n");
    for (file, what) in [
        ("table.md", "this table as markdown"),
        (
            "summary.csv",
            "one row per cell (docs/output.md: summary.csv)",
        ),
        (
            "aggregates.csv",
            "one row per table cell over its repetitions",
        ),
        ("matrix.toml", "the matrix as run"),
    ] {
        let _ = writeln!(
            body,
            "<li><a href=\"{file}\">{file}</a>: {}</li>",
            escape(what)
        );
    }
    body.push_str("</ul>\n");
    page(&name, "<a href=\"index.html\">index</a>", &body)
}

fn facts_html(f: &RunFacts, rows: &[SummaryRow]) -> String {
    let ok = rows.iter().filter(|r| r.status == Status::Ok).count();
    let mut out = String::from("<dl>\n");
    let mut item = |k: &str, v: String| {
        let _ = writeln!(out, "<dt>{}</dt><dd>{v}</dd>", escape(k));
    };
    item("cells", format!("{} ({ok} finished)", rows.len()));
    let list = |v: &[String]| {
        if v.is_empty() {
            "not recorded".to_string()
        } else {
            v.iter()
                .map(|s| format!("<code>{}</code>", escape(s)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    item("host kernel", list(&f.kernels));
    item("sbm", list(&f.sbm_versions));
    item("commits", list(&f.commits));
    if let (Some(a), Some(b)) = (f.started_unix_s, f.ended_unix_s) {
        item("wall time", {
            let d = b.saturating_sub(a);
            format!(
                    "{}:{:02}:{:02} (h:mm:ss) from the first cell's start, {}, to the last one's end, {}",
                    d / 3600,
                    d / 60 % 60,
                    d % 60,
                    crate::clock::utc_date_time(a),
                    crate::clock::utc_date_time(b)
                )
        });
    }
    out.push_str("</dl>\n");
    out
}

/// The main table: rows = sender configurations, columns = rates, each figure the
/// table.md text of its group, followed by a link to every run.
fn main_table_html(spec: &MatrixSpec, groups: &[Group<'_>]) -> String {
    let mut out = String::from("<table>\n<tr><th>sender configuration</th>");
    for rate in &spec.axes.rate {
        let _ = write!(out, "<th>{}</th>", escape(&rate_header(rate)));
    }
    out.push_str("</tr>\n");
    for key in aggregate::row_keys(groups) {
        let _ = write!(out, "<tr><th>{}</th>", escape(key));
        for rate in &spec.axes.rate {
            match aggregate::find(groups, key, rate) {
                Some(g) => {
                    let runs: Vec<String> = g
                        .runs
                        .iter()
                        .map(|r| {
                            format!(
                                "<a href=\"{}\" title=\"{}\">r{}</a>",
                                escape(&cell_href(&r.cell)),
                                escape(&r.cell),
                                r.repetition
                            )
                        })
                        .collect();
                    let _ = write!(
                        out,
                        "<td{}>{}<div class=\"runs\">{}</div></td>",
                        heat(g.p50().map(|s| s.median)),
                        inline(&report::table_cell(g)),
                        runs.join("")
                    );
                }
                None => out.push_str("<td>—</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out.push_str(
        "<p class=\"key\">Cell colour: the median sojourn on a log scale, green at 1 ms or less, \
         red at 10 s or more; no colour: no delay figure.</p>\n",
    );
    out
}

/// A table cell's background for its median sojourn (µs): hue 120 (green) at 1 ms down to
/// 0 (red) at 10 s, on a log scale; light, so that the figures stay readable.
fn heat(median_us: Option<f64>) -> String {
    let Some(us) = median_us.filter(|v| *v > 0.0) else {
        return String::new();
    };
    let f = ((us.log10() - 3.0) / 4.0).clamp(0.0, 1.0);
    format!(
        " class=\"heat\" style=\"background:hsl({:.0},70%,88%)\"",
        120.0 * (1.0 - f)
    )
}

/// The run's answer in a line per rate: the configurations with the lowest and the highest
/// median sojourn there (medians over their finished runs), each linked to its row.
fn answer_html(spec: &MatrixSpec, groups: &[Group<'_>]) -> String {
    let mut items = vec![];
    for rate in &spec.axes.rate {
        let mut at: Vec<(&Group<'_>, f64)> = groups
            .iter()
            .filter(|g| &g.rate == rate)
            .filter_map(|g| Some((g, g.p50()?.median)))
            .collect();
        if at.len() < 2 {
            // Nothing to rank is an answer too (a run under --light measures no sojourn).
            let finished = groups
                .iter()
                .filter(|g| &g.rate == rate && !g.ok().is_empty())
                .count();
            if finished > 0 {
                items.push(format!(
                    "<li>At {}: {} of {finished} configurations with a finished run have a \
                     delay figure, so nothing to rank (see the table).</li>",
                    escape(&rate_header(rate)),
                    at.len()
                ));
            }
            continue;
        }
        at.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (low, high) = (at[0], at[at.len() - 1]);
        let row_link = |g: &Group<'_>| {
            format!(
                "<a href=\"{}\">{}</a>",
                escape(&cell_href(&g.runs[0].cell)),
                escape(&g.row)
            )
        };
        let show = |(g, us): (&Group<'_>, f64)| {
            format!(
                "{} ({}, {})",
                row_link(g),
                escape(&super::format::fmt_delay(us.round() as u64)),
                escape(&g.count())
            )
        };
        // A configuration without a figure may be the worst of all (no write left the
        // socket in time): the line says which, rather than ranking without it.
        let without: Vec<String> = groups
            .iter()
            .filter(|g| &g.rate == rate && g.p50().is_none())
            .map(row_link)
            .collect();
        let unranked = if without.is_empty() {
            String::new()
        } else {
            format!(
                " No delay figure, so not ranked: {} (see the table).",
                without.join(", ")
            )
        };
        items.push(format!(
            "<li>At {}: the lowest median sojourn {}; the highest {}.{unranked}</li>",
            escape(&rate_header(rate)),
            show(low),
            show(high)
        ));
    }
    if items.is_empty() {
        return String::new();
    }
    format!(
        "<section class=\"answer\"><h2>At a glance</h2>\n<ul>\n{}\n</ul></section>\n",
        items.join("\n")
    )
}

/// One cell's page: what ran, its figures, its plots, its metadata and its files.
pub fn cell_html(
    cell: &Cell,
    row: &SummaryRow,
    meta: Option<&Meta>,
    files: &Listing,
    plot: Option<&str>,
) -> String {
    let mut body = format!("<h1>{}</h1>\n", escape(&cell.name));
    let _ = writeln!(
        body,
        "<p>{} at {}, {} writes, {}, {}{}, repetition {}: <span class=\"status-{}\">{}</span>{}</p>",
        escape(&row.config),
        escape(&rate_header(&row.rate)),
        escape(&row.write_size),
        escape(&row.cc),
        if row.nodelay { "TCP_NODELAY, " } else { "" },
        escape(&row.sender_kernel),
        row.repetition,
        row.status.name().replace(' ', "-"),
        escape(row.status.name()),
        row.error
            .as_ref()
            .map_or(String::new(), |e| format!(" ({})", escape(e)))
    );
    if let Some(p) = plot {
        let _ = writeln!(
            body,
            "<h2>Over time</h2>\n<p><img class=\"plot\" src=\"../plots/{0}\" alt=\"{0}\"></p>",
            escape(p)
        );
    }
    body.push_str("<h2>Figures (summary.csv's row)</h2>\n<table>\n");
    if let Ok(Value::Object(map)) = serde_json::to_value(row) {
        for (k, v) in map {
            let shown = match v {
                Value::Null => "—".to_string(),
                Value::String(s) => s,
                other => other.to_string(),
            };
            let _ = writeln!(
                body,
                "<tr><th><code>{}</code></th><td>{}</td></tr>",
                escape(&k),
                escape(&shown)
            );
        }
    }
    body.push_str("</table>\n");
    if let Some(m) = meta {
        body.push_str(&meta_html(m));
    } else {
        body.push_str("<p>No meta.json: the cell did not start.</p>\n");
    }
    body.push_str("<h2>Files</h2>\n");
    match files {
        Listing::Dir(files) => {
            body.push_str("<ul>\n");
            for f in files {
                let _ = writeln!(
                    body,
                    "<li><a href=\"../{0}/{1}\">{1}</a></li>",
                    escape(&cell.name),
                    escape(f)
                );
            }
        }
        Listing::Archive { archive, files } => {
            let _ = writeln!(
                body,
                "<p>Packed in <a href=\"../{0}\">{0}</a> (<code>sbm-matrix unpack</code> \
                 restores the directory), which holds:</p>\n<ul>",
                escape(archive)
            );
            for f in files {
                let _ = writeln!(body, "<li>{}</li>", escape(f));
            }
        }
    }
    body.push_str("</ul>\n");
    page(&cell.name, "<a href=\"../index.html\">index</a>", &body)
}

/// meta.json's parts a reader looks for first — the commands, the kernel and its sysctls,
/// the test bed before and after, the rate changes; the file itself is linked.
fn meta_html(m: &Meta) -> String {
    let mut out = String::from("<h2>How it ran (meta.json)</h2>\n<dl>\n");
    for (key, text) in [
        ("send_command", m.send_command.join(" ")),
        ("sink_command", m.sink_command.join(" ")),
        ("kernel_release", m.kernel_release.clone()),
        ("git_commit", m.git_commit.clone()),
        ("sbm_version", m.sbm_version.clone()),
    ] {
        let _ = writeln!(
            out,
            "<dt>{}</dt><dd><code>{}</code></dd>",
            escape(key),
            escape(&text)
        );
    }
    out.push_str("</dl>\n");
    out.push_str("<h3>sysctls</h3>\n<table>\n");
    for (k, v) in &m.sysctls {
        let _ = writeln!(
            out,
            "<tr><th><code>{}</code></th><td>{}</td></tr>",
            escape(k),
            escape(v)
        );
    }
    out.push_str("</table>\n");
    // The test bed's state is sbm-testbed's status document, shown as it was recorded;
    // rate changes with their keys in order, as the file's reader sees them.
    let rate_changes = (!m.rate_changes.is_empty())
        .then(|| serde_json::to_value(&m.rate_changes).unwrap_or_default());
    for (key, v) in [
        ("testbed_before", Some(&m.testbed_before)),
        ("testbed_after", Some(&m.testbed_after)),
        ("rate_changes", rate_changes.as_ref()),
    ] {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            let _ = writeln!(
                out,
                "<h3>{}</h3>\n<pre>{}</pre>",
                escape(key),
                escape(&serde_json::to_string_pretty(v).unwrap_or_default())
            );
        }
    }
    out.push_str("<p>Everything else the cell recorded is in its meta.json (linked below).</p>\n");
    out
}

/// Writes index.html and cells/*.html into `run_dir` (after the plots: the pages show
/// the SVGs that exist).
pub fn write_site(
    run_dir: &Path,
    spec: &MatrixSpec,
    cells: &[Cell],
    rows: &[SummaryRow],
) -> Result<(), String> {
    let plots = compressed::files_in(&run_dir.join("plots"));
    let pages = run_dir.join("cells");
    std::fs::create_dir_all(&pages).map_err(|e| format!("{}: {e}", pages.display()))?;
    let mut metas = Vec::with_capacity(cells.len());
    let mut statuses = Vec::with_capacity(cells.len());
    for (cell, row) in cells.iter().zip(rows) {
        let dir = run_dir.join(&cell.name);
        let meta = Meta::read(&dir);
        statuses.push(CellStatus::read(&dir));
        let plot = format!("cell-{}.svg", cell.name);
        let html = cell_html(
            cell,
            row,
            meta.as_ref(),
            &compressed::list_cell(&dir),
            plots.contains(&plot).then_some(plot.as_str()),
        );
        let path = pages.join(format!("{}.html", cell.name));
        std::fs::write(&path, html).map_err(|e| format!("{}: {e}", path.display()))?;
        metas.push(meta);
    }
    let index = index_html(spec, rows, &RunFacts::of(&metas, &statuses), &plots);
    let path = run_dir.join("index.html");
    std::fs::write(&path, index).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heat_runs_from_green_at_a_millisecond_to_red_at_ten_seconds() {
        assert!(heat(Some(500.0)).contains("hsl(120,"));
        assert!(heat(Some(1_000.0)).contains("hsl(120,"));
        assert!(heat(Some(100_000.0)).contains("hsl(60,"));
        assert!(heat(Some(10_000_000.0)).contains("hsl(0,"));
        assert!(heat(Some(1e9)).contains("hsl(0,"));
        assert_eq!(heat(None), "");
        assert_eq!(heat(Some(0.0)), "");
    }

    #[test]
    fn markdown_tables_lists_and_inline_markup() {
        let md = "## Against\n\nsome `code` and **bold** <b>\n\n| a | b |\n|---|---|\n| cell-1 | x **y** |\n\n- one\n- two\n";
        let link = |t: &str| (t == "cell-1").then(|| "cells/cell-1.html".to_string());
        let html = md_to_html(md, &link);
        assert!(html.contains("<h2>Against</h2>"), "{html}");
        assert!(
            html.contains("<p>some <code>code</code> and <strong>bold</strong> &lt;b&gt;</p>"),
            "{html}"
        );
        assert!(html.contains("<tr><th>a</th><th>b</th></tr>"), "{html}");
        assert!(
            html.contains(
                "<td><a href=\"cells/cell-1.html\">cell-1</a></td><td>x <strong>y</strong></td>"
            ),
            "{html}"
        );
        assert!(!html.contains("---"), "the rule row is not a row: {html}");
        assert!(
            html.contains("<ul>\n<li>one</li>\n<li>two</li>\n</ul>"),
            "{html}"
        );
    }

    #[test]
    fn unbalanced_markup_is_closed_and_text_escaped() {
        assert_eq!(inline("a ** b"), "a <strong> b</strong>");
        assert_eq!(inline("5 * 3 `x"), "5 * 3 `x");
        assert_eq!(escape("\"<&>'"), "&quot;&lt;&amp;&gt;&#39;");
    }
}
