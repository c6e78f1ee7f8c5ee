//! The run's HTML report: `index.html` beside table.md and, under `cells/`, one page per
//! configuration and rate (a cell of the table) with a section per repetition.
//! Self-contained: inline CSS, no scripts, nothing fetched from a network; the run's plots
//! are its own SVGs under `plots/`, a run's plot over time is drawn into its page, the
//! data are the cells' own files, linked.
//!
//! Pure functions of what the run stored (table.md's notes as blocks through [`doc_html`], the
//! summary rows, each cell's meta.json and file list) plus one writer, [`write_site`].

use std::fmt::Write as _;

use super::aggregate::{self, Group};
use super::doc::{Block, Doc};
use super::format::rate_header;
use super::record::{CellStatus, Meta, Status, SummaryRow};
use super::report;
use super::run_report::{CellPlots, RunReport};
use super::spec::{Cell, MatrixSpec};
use super::svg;
use crate::report::compressed::Listing;

const CSS: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:80em;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .5em;vertical-align:top;text-align:left}\
th{background:#f3f3f3}code{background:#f6f6f6;padding:0 .2em}img.plot,.plot svg{max-width:100%;height:auto;border:1px solid #eee;margin:.5em 0}\
section{border-top:1px solid #ccc;margin-top:1.5em}table.side td{overflow-wrap:anywhere}\
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

/// A report's text ([`Doc`]: table.md's notes, compare's output) as HTML, from its blocks:
/// headings, paragraphs, tables (a long one folded), lists, with [`inline`] markup. A table
/// cell whose whole text `link` knows (a cell's name) becomes a link to what it returns.
pub fn doc_html(doc: &Doc, link: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    for block in &doc.0 {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "<h{level}>{}</h{level}>", inline(text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "<p>{}</p>", inline(text));
            }
            Block::Table { header, rows } => {
                let table = table_html(header, rows, link);
                // A long table (per-cell estimator figures, say) folds, so that the page's
                // plots and notes are not pushed pages down.
                if rows.len() > FOLD_ROWS {
                    let _ = writeln!(
                        out,
                        "<details><summary>table of {} rows (click to show)</summary>\n{table}</details>",
                        rows.len()
                    );
                } else {
                    out.push_str(&table);
                }
            }
            Block::List(items) => {
                out.push_str("<ul>\n");
                for i in items {
                    let _ = writeln!(out, "<li>{}</li>", inline(i));
                }
                out.push_str("</ul>\n");
            }
        }
    }
    out
}

fn table_html(
    header: &[String],
    rows: &[Vec<String>],
    link: &dyn Fn(&str) -> Option<String>,
) -> String {
    let mut out = String::from("<table>\n");
    let mut row = |tag: &str, cells: &[String]| {
        out.push_str("<tr>");
        for cell in cells {
            let cell = cell.trim();
            let body = match link(cell) {
                Some(href) => format!("<a href=\"{}\">{}</a>", escape(&href), escape(cell)),
                None => inline(cell),
            };
            let _ = write!(out, "<{tag}>{body}</{tag}>");
        }
        out.push_str("</tr>\n");
    };
    row("th", header);
    for r in rows {
        row("td", r);
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

/// Where each run's part of the report is: the page of its configuration and rate (a cell
/// of the table), named after its first run without the repetition (`2mbit-default` for
/// `2mbit-default-r1`), and there the section named after the run.
pub struct Pages {
    page_of_cell: std::collections::BTreeMap<String, String>,
}

impl Pages {
    pub fn of(groups: &[Group<'_>]) -> Pages {
        let mut page_of_cell = std::collections::BTreeMap::new();
        for g in groups {
            let page = page_name(g);
            for r in &g.runs {
                page_of_cell.insert(r.cell.clone(), page.clone());
            }
        }
        Pages { page_of_cell }
    }

    /// A run's section, from the run directory (None: a cell of no group).
    pub fn run_href(&self, cell: &str) -> Option<String> {
        let page = self.page_of_cell.get(cell)?;
        Some(format!("cells/{page}.html#{cell}"))
    }
}

/// The page of a configuration and rate: its first run's name without `-rN`.
fn page_name(g: &Group<'_>) -> String {
    let first = g.runs[0];
    let suffix = format!("-r{}", first.repetition);
    first
        .cell
        .strip_suffix(&suffix)
        .unwrap_or(&first.cell)
        .to_string()
}

/// A configuration page's address from the run directory.
fn page_href(g: &Group<'_>) -> String {
    format!("cells/{}.html", page_name(g))
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
    body.push_str(&main_table_html(spec, &groups, &Pages::of(&groups)));
    body.push_str(&facts_html(facts, rows));
    // The plots before the notes: the notes' long tables would push them pages down.
    if !plots.is_empty() {
        body.push_str("<h2>Plots</h2>\n");
        for p in plots {
            let _ = writeln!(
                body,
                "<p><img class=\"plot\" src=\"plots/{0}\" alt=\"{0}\"></p>",
                escape(p)
            );
        }
    }
    let pages = Pages::of(&groups);
    let link = |text: &str| pages.run_href(text);
    body.push_str(&doc_html(&report::notes(spec, rows, &groups), &link));
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
fn main_table_html(spec: &MatrixSpec, groups: &[Group<'_>], pages: &Pages) -> String {
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
                                escape(&pages.run_href(&r.cell).unwrap_or_default()),
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
                escape(&page_href(g)),
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

/// One run of a configuration as its page shows it: the cell, its summary row, its
/// meta.json, its files and, when drawn, its plot over time (an SVG document).
pub struct RunPart<'a> {
    pub cell: &'a Cell,
    pub row: &'a SummaryRow,
    pub meta: Option<&'a Meta>,
    pub files: &'a Listing,
    pub plot: Option<&'a str>,
}

/// A configuration's page: the table's figure for it and a section per run — what ran,
/// its plot over time (the representative run's, or every run's), its figures, how it ran
/// and its files.
pub fn group_html(g: &Group<'_>, runs: &[RunPart<'_>], plots: CellPlots) -> String {
    let title = format!("{} at {}", g.row, rate_header(&g.rate));
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let _ = writeln!(
        body,
        "<p>The table's figure ({}): {}</p>",
        escape(&g.count()),
        inline(&report::table_cell(g))
    );
    let links: Vec<String> = runs
        .iter()
        .map(|p| {
            format!(
                "<a href=\"#{0}\">{0}</a> <span class=\"status-{1}\">{2}</span>",
                escape(&p.cell.name),
                p.row.status.name().replace(' ', "-"),
                escape(p.row.status.name())
            )
        })
        .collect();
    let _ = writeln!(body, "<p>Runs: {}</p>", links.join(", "));
    if plots == CellPlots::Representative && runs.len() > 1 {
        let shown = g.representative();
        let _ = writeln!(
            body,
            "<p>Over time: the plot of <a href=\"#{0}\">{0}</a>, the run with the \
             configuration's median sojourn (by goodput where there is none); \
             <code>sbm-matrix report --every-plot</code> draws every run's.</p>",
            escape(&shown.cell)
        );
    }
    let names: Vec<&str> = runs.iter().map(|p| p.cell.name.as_str()).collect();
    let figures: Vec<(String, Vec<String>)> = {
        let columns: Vec<(Vec<String>, Vec<String>)> =
            runs.iter().map(|p| csv_fields(p.row)).collect();
        let header = columns.first().map(|c| c.0.clone()).unwrap_or_default();
        header
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let values = columns
                    .iter()
                    .map(|c| c.1.get(i).cloned().unwrap_or_default())
                    .collect();
                (k.clone(), values)
            })
            .collect()
    };
    body.push_str("<h2>Figures (summary.csv's rows)</h2>\n");
    body.push_str(&side_by_side(&names, &figures));
    let how: Vec<(String, Vec<String>)> = {
        let field = |f: &dyn Fn(&Meta) -> String| -> Vec<String> {
            runs.iter()
                .map(|p| p.meta.map(f).unwrap_or_default())
                .collect()
        };
        let mut rows = vec![
            (
                "send_command".to_string(),
                field(&|m| m.send_command.join(" ")),
            ),
            (
                "sink_command".to_string(),
                field(&|m| m.sink_command.join(" ")),
            ),
            (
                "kernel_release".to_string(),
                field(&|m| m.kernel_release.clone()),
            ),
            ("git_commit".to_string(), field(&|m| m.git_commit.clone())),
            ("sbm_version".to_string(), field(&|m| m.sbm_version.clone())),
        ];
        let mut sysctls: Vec<&String> = runs
            .iter()
            .filter_map(|p| p.meta)
            .flat_map(|m| m.sysctls.keys())
            .collect();
        sysctls.sort();
        sysctls.dedup();
        for k in sysctls {
            rows.push((
                k.clone(),
                field(&|m| m.sysctls.get(k).cloned().unwrap_or_default()),
            ));
        }
        rows
    };
    body.push_str(
        "<details><summary>How they ran (meta.json: the commands, kernel, commit, sysctls)</summary>\n",
    );
    body.push_str(&side_by_side(&names, &how));
    body.push_str(
        "<p>The test bed before and after each run (<code>testbed_before</code>, \
         <code>testbed_after</code>) and everything else a cell recorded are in its \
         meta.json.</p>\n</details>\n",
    );
    for part in runs {
        body.push_str(&run_section(part));
    }
    page(&title, "<a href=\"../index.html\">index</a>", &body)
}

/// A table of `rows` (a name, a value per run), a column per run: a value every run shares
/// is written once across them; rows no run has a value for are named after the table.
fn side_by_side(runs: &[&str], rows: &[(String, Vec<String>)]) -> String {
    let mut out = String::from("<table class=\"side\">\n<tr><th></th>");
    for r in runs {
        let _ = write!(out, "<th><a href=\"#{0}\">{0}</a></th>", escape(r));
    }
    out.push_str("</tr>\n");
    let mut empty = vec![];
    for (name, values) in rows {
        if values.iter().all(String::is_empty) {
            empty.push(format!("<code>{}</code>", escape(name)));
            continue;
        }
        let _ = write!(out, "<tr><th><code>{}</code></th>", escape(name));
        if values.len() > 1 && values.iter().all(|v| v == &values[0]) {
            let _ = write!(
                out,
                "<td colspan=\"{}\">{}</td>",
                values.len(),
                escape(&values[0])
            );
        } else {
            for v in values {
                let _ = write!(out, "<td>{}</td>", escape(v));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    if !empty.is_empty() {
        let _ = writeln!(out, "<p>Not recorded: {}.</p>", empty.join(", "));
    }
    out
}

/// One run's section of its configuration's page: its status, its plot over time when
/// drawn, its rate changes and its files.
fn run_section(p: &RunPart<'_>) -> String {
    let (cell, row) = (p.cell, p.row);
    let mut out = format!("<section id=\"{0}\">\n<h2>{0}</h2>\n", escape(&cell.name));
    let _ = writeln!(
        out,
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
    if let Some(svg) = p.plot {
        let _ = writeln!(out, "<div class=\"plot\">{}</div>", svg.trim_end());
    }
    match p.meta {
        Some(m) if !m.rate_changes.is_empty() => {
            let _ = writeln!(
                out,
                "<details><summary>Rate changes (meta.json)</summary>\n<pre>{}</pre></details>",
                escape(&serde_json::to_string_pretty(&m.rate_changes).unwrap_or_default())
            );
        }
        Some(_) => {}
        None => out.push_str("<p>No meta.json: the cell did not start.</p>\n"),
    }
    out.push_str(&files_html(&cell.name, p.files));
    out.push_str("</section>\n");
    out
}

/// summary.csv's header and a row's fields, as the CSV writer writes them.
fn csv_fields(row: &SummaryRow) -> (Vec<String>, Vec<String>) {
    let mut w = csv::Writer::from_writer(vec![]);
    if w.serialize(row).is_err() {
        return (vec![], vec![]);
    }
    let bytes = w.into_inner().unwrap_or_default();
    let mut r = csv::Reader::from_reader(bytes.as_slice());
    let names = r
        .headers()
        .map(|h| h.iter().map(str::to_string).collect())
        .unwrap_or_default();
    let values = r
        .records()
        .next()
        .and_then(Result::ok)
        .map(|v| v.iter().map(str::to_string).collect())
        .unwrap_or_default();
    (names, values)
}

/// The run's files: links into its directory, or its archive and what that holds.
fn files_html(cell: &str, files: &Listing) -> String {
    match files {
        Listing::Dir(files) => {
            let links: Vec<String> = files
                .iter()
                .map(|f| format!("<a href=\"../{0}/{1}\">{1}</a>", escape(cell), escape(f)))
                .collect();
            format!("<p>Files: {}</p>\n", links.join(", "))
        }
        Listing::Archive { archive, files } => {
            let names: Vec<String> = files.iter().map(|f| escape(f)).collect();
            format!(
                "<p>Files, packed in <a href=\"../{0}\">{0}</a> (<code>sbm-matrix unpack</code> \
                 restores the directory): {1}</p>\n",
                escape(archive),
                names.join(", ")
            )
        }
    }
}

/// The run's pages as (path in the run directory, text): a page per configuration under
/// cells/ and index.html. A function of the run as read; export.rs writes them.
pub fn site(r: &RunReport<'_>) -> Vec<(String, String)> {
    let groups = aggregate::groups(r.spec, &r.rows);
    let mut pages = Vec::with_capacity(groups.len() + 1);
    for g in &groups {
        let at: Vec<usize> = g
            .runs
            .iter()
            .filter_map(|run| r.rows.iter().position(|x| std::ptr::eq(x, *run)))
            .collect();
        let svgs: Vec<Option<String>> = at
            .iter()
            .map(|&i| (!r.cell_charts[i].is_empty()).then(|| svg::render(&r.cell_charts[i])))
            .collect();
        let parts: Vec<RunPart<'_>> = at
            .iter()
            .zip(&svgs)
            .map(|(&i, svg)| RunPart {
                cell: &r.cells[i],
                row: &r.rows[i],
                meta: r.metas[i].as_ref(),
                files: &r.listings[i],
                plot: svg.as_deref(),
            })
            .collect();
        pages.push((
            format!("cells/{}.html", page_name(g)),
            group_html(g, &parts, r.plots),
        ));
    }
    let facts = RunFacts::of(&r.metas, &r.statuses);
    pages.push((
        "index.html".into(),
        index_html(r.spec, &r.rows, &facts, &r.plot_names()),
    ));
    pages
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
    fn blocks_become_headings_paragraphs_tables_and_lists() {
        let doc = Doc(vec![
            Block::Heading(2, "Against".into()),
            Block::Para("some `code` and **bold** <b>".into()),
            Block::Table {
                header: vec!["a".into(), "b".into()],
                rows: vec![vec!["cell-1".into(), "x **y**".into()]],
            },
            Block::List(vec!["one".into(), "two".into()]),
        ]);
        let link = |t: &str| (t == "cell-1").then(|| "cells/cell-1.html".to_string());
        let html = doc_html(&doc, &link);
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
        assert!(!html.contains("---"), "no rule row: {html}");
        // A long table folds.
        let long = Doc(vec![Block::Table {
            header: vec!["n".into()],
            rows: (0..=FOLD_ROWS).map(|i| vec![i.to_string()]).collect(),
        }]);
        let folded = doc_html(&long, &|_| None);
        assert!(
            folded.starts_with(&format!(
                "<details><summary>table of {} rows",
                FOLD_ROWS + 1
            )),
            "{folded}"
        );
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

    fn group<'a>(label: &str, rows: &'a [SummaryRow]) -> Group<'a> {
        Group {
            row: label.into(),
            rate: "2mbit".into(),
            config: label.into(),
            runs: rows.iter().collect(),
        }
    }

    fn rep(label: &str, r: u32, p50: Option<u64>, gp: f64) -> SummaryRow {
        let mut row = super::report::tests::row(label, "2mbit", p50.unwrap_or(0), 0, gp);
        row.cell = format!("2mbit-{label}-r{r}");
        row.repetition = r;
        row.sojourn_p50_us = p50;
        row
    }

    #[test]
    fn the_representative_run_is_the_median_sojourn_then_the_median_goodput() {
        let rows = [
            rep("a", 1, Some(300), 1.0),
            rep("a", 2, Some(100), 2.0),
            rep("a", 3, Some(200), 3.0),
            rep("a", 4, Some(400), 4.0),
        ];
        let g = group("a", &rows);
        // 100, 200, 300, 400: the lower middle.
        assert_eq!(g.representative().cell, "2mbit-a-r3");
        let light: Vec<SummaryRow> = [(1, 5.0), (2, 9.0), (3, 7.0)]
            .into_iter()
            .map(|(r, gp)| rep("b", r, None, gp))
            .collect();
        let g = group("b", &light);
        assert_eq!(g.representative().cell, "2mbit-b-r3");
        // A run that did not finish is not drawn in place of one that did.
        let mut failed = rep("c", 1, Some(1), 1.0);
        failed.status = Status::Failed;
        let rows = [failed, rep("c", 2, Some(50), 1.0)];
        let g = group("c", &rows);
        assert_eq!(g.representative().cell, "2mbit-c-r2");
    }

    #[test]
    fn runs_link_to_their_section_of_their_configuration_page() {
        let rows = [rep("a", 1, Some(1), 1.0), rep("a", 2, Some(1), 1.0)];
        let g = group("a", &rows);
        let pages = Pages::of(std::slice::from_ref(&g));
        assert_eq!(
            pages.run_href("2mbit-a-r2").as_deref(),
            Some("cells/2mbit-a.html#2mbit-a-r2")
        );
        assert_eq!(page_href(&g), "cells/2mbit-a.html");
        assert_eq!(pages.run_href("2mbit-b-r1"), None);
    }

    #[test]
    fn side_by_side_writes_a_shared_value_once_and_names_the_empty_rows() {
        let rows = vec![
            (
                "rate".to_string(),
                vec!["2mbit".to_string(), "2mbit".to_string()],
            ),
            (
                "writes".to_string(),
                vec!["10".to_string(), "12".to_string()],
            ),
            ("error".to_string(), vec![String::new(), String::new()]),
        ];
        let t = side_by_side(&["x-r1", "x-r2"], &rows);
        assert!(t.contains("<td colspan=\"2\">2mbit</td>"), "{t}");
        assert!(t.contains("<td>10</td><td>12</td>"), "{t}");
        assert!(t.contains("Not recorded: <code>error</code>."), "{t}");
        assert!(!t.contains("<th><code>error</code>"), "{t}");
    }
}
