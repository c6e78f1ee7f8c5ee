//! `sbm-matrix compare A B [C…]`: the cells of several runs side by side, matched by what
//! the cell does (its identity), not by directory or row names, each figure with its spread
//! and a marker where two runs' ranges do not overlap.
//!
//! A cell's identity is everything that decides what it measures: the bottleneck (rate and
//! schedule, RTT and queue), sbm-send's and sbm-sink's extra arguments, write size, Nagle, congestion
//! control, the sender's kernel (with the guest's MTU and sysctls) and CPU quota, and the
//! run and warm-up times. Runs of different kernels or sbm versions with the same cells
//! compare; a cell whose settings changed is listed as only in one run.

use std::path::{Path, PathBuf};

use super::aggregate::Spread;
use super::doc::{Block, Doc};
use super::format::{fmt_delay, fmt_rate, rate_header};
use super::record::{Headline, Status, SummaryRow};
use super::report::{summary_row, CellFiles};
use super::spec::{Cell, MatrixSpec};

/// One run, read back from its directory.
#[derive(Debug)]
pub struct Run {
    pub dir: PathBuf,
    pub name: String,
    /// Identity → the cell's row label, rate column and its runs, in table order.
    cells: Vec<(String, Entry)>,
}

#[derive(Debug, Clone)]
struct Entry {
    label: String,
    rate: String,
    rows: Vec<SummaryRow>,
}

/// What a cell does, as one comparable string.
pub fn identity(spec: &MatrixSpec, c: &Cell) -> String {
    let schedule: Vec<String> = c
        .schedule
        .iter()
        .map(|s| format!("{:?}@{:?}/{:?}", s.rate_bps, s.at, s.queue))
        .collect();
    // Said only when set, so that runs from before the axis existed keep their identity.
    let slices = c
        .cpu_slices
        .map_or(String::new(), |s| format!(" slices={s}"));
    let policer = if c.bottleneck == crate::testbed::wan::BottleneckKind::Policer {
        " policer"
    } else {
        ""
    };
    let guest = if c.sender_kernel == super::spec::SenderKernel::Uml {
        format!(" mtu={} sysctls={:?}", spec.uml.mtu, c.guest_sysctls)
    } else {
        String::new()
    };
    format!(
        "rate={:?}{policer} rtt={} queue={} schedule=[{}] write={} nodelay={} cc={} kernel={}{guest} quota={:?}{slices} time={:?}/{:?} args={:?} sink={:?}",
        c.rate_bps,
        spec.path.rtt_label(),
        spec.queue_for(&c.rate),
        schedule.join(","),
        c.write_size,
        c.nodelay,
        c.cc,
        c.sender_kernel,
        c.cpu_quota,
        c.duration,
        c.warmup,
        c.args,
        c.sink_args
    )
}

impl Run {
    /// Reads a run directory (its own matrix.toml and cells).
    pub fn read(dir: &Path) -> Result<Run, String> {
        let text = std::fs::read_to_string(dir.join("matrix.toml"))
            .map_err(|e| format!("{}: not a run directory ({e})", dir.display()))?;
        let spec = MatrixSpec::parse(&text).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cells = spec
            .cells()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut by: Vec<(String, Entry)> = vec![];
        for c in &cells {
            let row = summary_row(c, &CellFiles::read(&dir.join(&c.name)));
            let id = identity(&spec, c);
            match by.iter_mut().find(|(k, _)| *k == id) {
                Some((_, e)) => e.rows.push(row),
                None => by.push((
                    id,
                    Entry {
                        label: super::aggregate::row_key(&spec, &row),
                        rate: rate_header(&c.rate),
                        rows: vec![row],
                    },
                )),
            }
        }
        Ok(Run {
            dir: dir.to_path_buf(),
            name: spec.name.unwrap_or_default(),
            cells: by,
        })
    }

    fn entry(&self, id: &str) -> Option<&Entry> {
        self.cells.iter().find(|(k, _)| k == id).map(|(_, e)| e)
    }

    /// The goodput definitions its finished cells were measured with: summary schema 2
    /// (bytes that entered the network after the warm-up), or "1" for schema 1 and the
    /// summaries from before the schema had a number, which counted every byte acknowledged
    /// after the warm-up.
    fn goodput_schemas(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self
            .cells
            .iter()
            .flat_map(|(_, e)| &e.rows)
            .filter(|r| r.status == Status::Ok)
            .map(|r| if r.summary_schema >= 2 { "2" } else { "1" })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// One figure of a cell over its finished runs.
#[derive(Debug, Clone, Copy)]
struct Figures {
    p50: Option<Spread>,
    p95: Option<Spread>,
    goodput: Option<Spread>,
    ok: usize,
    runs: usize,
}

fn figures(rows: &[SummaryRow]) -> Figures {
    let ok: Vec<&SummaryRow> = rows.iter().filter(|r| r.status == Status::Ok).collect();
    let h = Headline::of(ok.iter().copied());
    Figures {
        p50: Spread::of(ok.iter().filter_map(|r| h.p50(r)).map(|v| v as f64)),
        p95: Spread::of(ok.iter().filter_map(|r| h.p95(r)).map(|v| v as f64)),
        goodput: Spread::of(ok.iter().filter_map(|r| r.goodput_bps)),
        ok: ok.len(),
        runs: rows.len(),
    }
}

fn show(s: Option<Spread>, fmt: &dyn Fn(f64) -> String) -> String {
    match s {
        None => "—".into(),
        Some(s) if s.n > 1 => format!("{} ({}–{})", fmt(s.median), fmt(s.min), fmt(s.max)),
        Some(s) => fmt(s.median),
    }
}

fn delay(us: f64) -> String {
    fmt_delay(us.round() as u64)
}

fn cell_text(f: &Figures) -> String {
    if f.ok == 0 {
        return format!("no finished run (of {})", f.runs);
    }
    format!(
        "{} / {} @ {}, n = {}",
        show(f.p50, &delay),
        show(f.p95, &delay),
        show(f.goodput, &fmt_rate),
        f.ok
    )
}

/// How `b` stands against the baseline `a` for one figure: the change of the median, and,
/// when both have a spread (n ≥ 2), whether the two ranges are apart.
fn judge(what: &str, a: Option<Spread>, b: Option<Spread>) -> Option<String> {
    let (a, b) = (a?, b?);
    let change = if a.median != 0.0 {
        format!("{:+.0} %", (b.median / a.median - 1.0) * 100.0)
    } else {
        "—".into()
    };
    // A range needs two runs on each side: with one run a figure has no spread, and a
    // difference against it may be that run's noise.
    let verdict = match (a.n < 2, b.n < 2) {
        (true, true) => "n = 1 each: no spread to judge by",
        (true, false) => "n = 1 in the baseline: no spread to judge by",
        (false, true) => "n = 1 here: no spread to judge by",
        _ if b.min > a.max || b.max < a.min => "**beyond the spread**",
        _ => "within the spread",
    };
    Some(format!("{what} {change} ({verdict})"))
}

/// Cells as index.html counts them (every cell of the matrix, repetitions included), with
/// the finished ones and the configurations they make.
fn cell_count(r: &Run) -> String {
    let rows = r.cells.iter().flat_map(|(_, e)| &e.rows);
    let finished = rows.clone().filter(|row| row.status == Status::Ok).count();
    format!(
        "{} cells, {finished} finished, {} configurations",
        rows.count(),
        r.cells.len()
    )
}

/// A run's configurations as a short list, for an error that says what each run has.
fn configurations(r: &Run) -> String {
    const SHOWN: usize = 3;
    let mut names: Vec<String> = r
        .cells
        .iter()
        .take(SHOWN)
        .map(|(_, e)| format!("{} at {}", e.label, e.rate))
        .collect();
    if r.cells.len() > SHOWN {
        names.push(format!("{} more", r.cells.len() - SHOWN));
    }
    if names.is_empty() {
        "no cells".into()
    } else {
        names.join("; ")
    }
}

/// The comparison as markdown: every cell of the first run (the baseline) against the
/// others, then the cells found only in some runs. An error when a run shares no cell with
/// the baseline: there is nothing to compare, and an empty table would look like an answer.
/// The runs' cells side by side (`sbm-matrix compare`), as blocks: markdown with
/// [`Doc::md`], a page with [`compare_html`].
pub fn compare(runs: &[Run]) -> Result<Doc, String> {
    let letter = |i: usize| char::from(b'A' + (i % 26) as u8);
    for (i, r) in runs.iter().enumerate().skip(1) {
        if !r.cells.iter().any(|(id, _)| runs[0].entry(id).is_some()) {
            return Err(format!(
                "{} and {} have no cell in common (cells match by what they do: rate, RTT, \
                 queue, write size, Nagle, congestion control, kernel, times, arguments): \
                 A has {}; {} has {}",
                runs[0].dir.display(),
                r.dir.display(),
                configurations(&runs[0]),
                letter(i),
                configurations(r)
            ));
        }
    }
    let mut doc = Doc::default();
    doc.push(Block::Heading(1, "Comparison of runs".into()));
    doc.push(Block::List(
        runs.iter()
            .enumerate()
            .map(|(i, r)| {
                format!(
                    "{}: `{}` ({}, {})",
                    letter(i),
                    r.dir.display(),
                    r.name,
                    cell_count(r)
                )
            })
            .collect(),
    ));
    doc.push(Block::Para("Cells are matched by what they do (bottleneck, sender and sink arguments, write size, Nagle, congestion control, sender kernel and guest settings, CPU quota, run and warm-up times), not by names. Each figure: median / p95 delay @ goodput, the median of the runs with their range and n. Against the baseline A: the change of each median and when both sides have n ≥ 2, whether their ranges are apart — **beyond the spread** — or overlap (with n = 1 on either side there is no spread to judge by, and the change is only the difference).".into()));
    let mut header = vec!["configuration".to_string(), "rate".to_string()];
    header.extend((0..runs.len()).map(|i| letter(i).to_string()));
    header.extend((1..runs.len()).map(|i| format!("{} against A", letter(i))));
    let mut all_ids: Vec<&str> = vec![];
    for r in runs {
        for (id, _) in &r.cells {
            if !all_ids.contains(&id.as_str()) {
                all_ids.push(id);
            }
        }
    }
    let mut rows = vec![];
    let mut partial: Vec<(String, Vec<char>)> = vec![];
    for id in &all_ids {
        let entries: Vec<Option<&Entry>> = runs.iter().map(|r| r.entry(id)).collect();
        let first = entries
            .iter()
            .flatten()
            .next()
            .expect("the id came from a run");
        if entries.iter().any(Option::is_none) {
            let present: Vec<char> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_some())
                .map(|(i, _)| letter(i))
                .collect();
            partial.push((format!("{} at {}", first.label, first.rate), present));
            continue;
        }
        let figs: Vec<Figures> = entries.iter().flatten().map(|e| figures(&e.rows)).collect();
        let mut row = vec![first.label.clone(), first.rate.clone()];
        row.extend(figs.iter().map(cell_text));
        for f in &figs[1..] {
            let parts: Vec<String> = [
                judge("median", figs[0].p50, f.p50),
                judge("p95", figs[0].p95, f.p95),
                judge("goodput", figs[0].goodput, f.goodput),
            ]
            .into_iter()
            .flatten()
            .collect();
            row.push(if parts.is_empty() {
                "nothing to compare".into()
            } else {
                parts.join("; ")
            });
        }
        rows.push(row);
    }
    doc.push(Block::Table { header, rows });
    let schemas: Vec<Vec<&str>> = runs.iter().map(Run::goodput_schemas).collect();
    if schemas.iter().any(|s| *s != schemas[0]) {
        let said: Vec<String> = schemas
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{} schema {}", letter(i), s.join(" and ")))
            .collect();
        doc.push(Block::Para(format!(
            "Goodput is not the same quantity in every run ({}): summary schema 1 counted every byte acknowledged after the warm-up, bytes in flight at its end included; schema 2 only bytes that entered the network after it (docs/output.md, `totals.goodput_bps`). A goodput difference between them is partly the definition's.",
            said.join(", ")
        )));
    }
    if !partial.is_empty() {
        doc.push(Block::Para(
            "Cells not in every run (their settings differ, or a run left them out):".into(),
        ));
        doc.push(Block::List(
            partial
                .iter()
                .map(|(cell, present)| {
                    format!(
                        "{cell}: only in {}",
                        present
                            .iter()
                            .map(char::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect(),
        ));
    }
    Ok(doc)
}

/// The comparison as a self-contained web page (the same text as [`compare`]'s markdown).
pub fn compare_html(doc: &Doc) -> String {
    super::html::page(
        "Comparison of runs",
        "",
        &super::html::doc_html(doc, &|_| None),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(v: &[f64]) -> Option<Spread> {
        Spread::of(v.iter().copied())
    }

    #[test]
    fn ranges_apart_are_beyond_the_spread_and_a_single_run_is_never_judged() {
        let a = spread(&[100.0, 110.0, 120.0]);
        assert_eq!(
            judge("median", a, spread(&[130.0, 140.0])).unwrap(),
            "median +23 % (**beyond the spread**)"
        );
        assert_eq!(
            judge("median", a, spread(&[115.0, 140.0])).unwrap(),
            "median +16 % (within the spread)"
        );
        // A single run on either side has no spread: the change, not a verdict.
        for (x, y) in [(a, spread(&[300.0])), (spread(&[300.0]), a)] {
            let one = judge("p95", x, y).unwrap();
            assert!(one.contains("n = 1") && !one.contains("spread**"), "{one}");
        }
        let single = judge("p95", spread(&[1.0]), spread(&[3.0])).unwrap();
        assert!(single.contains("n = 1 each"), "{single}");
        assert!(judge("p95", None, a).is_none());
    }
}
