//! The repetitions of one table cell taken together: how many ran, and the median, minimum
//! and maximum of each run's headline figures (aggregates.csv, table.md), and where the
//! implementation report's figure for the cell lies against that spread.

use std::collections::BTreeMap;

use serde::Serialize;

use super::doc::{Block, Doc};
use super::format::{fmt_delay, fmt_rate, rate_header};
use super::record::{Headline, Status, SummaryRow};
use super::spec::{MatrixSpec, ReportValues};

/// n values summarised by their median and range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Where a value lies against a spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Below,
    Inside,
    Above,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            n,
            median,
            min: v[0],
            max: v[n - 1],
        })
    }

    pub fn place(&self, x: f64) -> Place {
        if x < self.min {
            Place::Below
        } else if x > self.max {
            Place::Above
        } else {
            Place::Inside
        }
    }

    /// `275 ms (250 ms–300 ms)`, or the median alone for one run.
    pub fn show(&self, fmt: impl Fn(f64) -> String) -> String {
        if self.n > 1 {
            format!("{} ({}–{})", fmt(self.median), fmt(self.min), fmt(self.max))
        } else {
            fmt(self.median)
        }
    }
}

fn delay(us: f64) -> String {
    fmt_delay(us.round() as u64)
}

/// The table row a cell belongs to: its configuration plus the axes that vary.
pub fn row_key(spec: &MatrixSpec, row: &SummaryRow) -> String {
    let mut key = row.label.clone();
    let a = &spec.axes;
    let mut extra = vec![];
    if a.write_size.len() > 1 {
        extra.push(row.write_size.clone());
    }
    if a.nodelay.len() > 1 {
        extra.push(if row.nodelay {
            "NODELAY".into()
        } else {
            "Nagle".into()
        });
    }
    if a.cc.len() > 1 {
        extra.push(row.cc.clone());
    }
    if a.sender_kernel.len() > 1 {
        extra.push(if row.sender_kernel == "uml" {
            "patched kernel in UML".into()
        } else {
            "host kernel".into()
        });
    }
    if let Some(q) = row.cpu_quota {
        extra.push(format!("CPU {q}%"));
    }
    if let Some(q) = row.cpu_slices {
        extra.push(format!("CPU slices {q}%"));
    }
    if !extra.is_empty() {
        key.push_str(&format!(" ({})", extra.join(", ")));
    }
    key
}

/// The runs of one table cell (one row key at one rate), every repetition.
#[derive(Debug)]
pub struct Group<'a> {
    pub row: String,
    pub rate: String,
    pub config: String,
    pub runs: Vec<&'a SummaryRow>,
}

impl<'a> Group<'a> {
    pub fn ok(&self) -> Vec<&'a SummaryRow> {
        self.runs
            .iter()
            .copied()
            .filter(|r| r.status == Status::Ok)
            .collect()
    }

    pub fn headline(&self) -> Headline {
        Headline::of(self.ok())
    }

    pub fn p50(&self) -> Option<Spread> {
        let h = self.headline();
        Spread::of(self.ok().iter().filter_map(|r| h.p50(r)).map(|v| v as f64))
    }

    pub fn p95(&self) -> Option<Spread> {
        let h = self.headline();
        Spread::of(self.ok().iter().filter_map(|r| h.p95(r)).map(|v| v as f64))
    }

    pub fn goodput(&self) -> Option<Spread> {
        Spread::of(self.ok().iter().filter_map(|r| r.goodput_bps))
    }

    pub fn writes_per_rtt(&self) -> Option<Spread> {
        Spread::of(self.ok().iter().filter_map(|r| r.writes_per_rtt))
    }

    /// How many of the finished runs with a writes-per-RTT figure made at most `bound`
    /// writes per RTT, and of how many.
    pub fn trapped(&self, bound: f64) -> (usize, usize) {
        let w: Vec<f64> = self.ok().iter().filter_map(|r| r.writes_per_rtt).collect();
        (w.iter().filter(|&&x| x <= bound).count(), w.len())
    }

    /// The run a configuration's page draws when it draws one: among the finished runs,
    /// the one whose median sojourn is the configuration's median (the lower middle of an
    /// even count), by goodput where no run has a sojourn figure; the first run when none
    /// finished.
    pub fn representative(&self) -> &'a SummaryRow {
        let ok = self.ok();
        if ok.is_empty() {
            return self.runs[0];
        }
        let headline = self.headline();
        let mut ranked: Vec<(f64, &'a SummaryRow)> = ok
            .iter()
            .filter_map(|r| Some((headline.p50(r)? as f64, *r)))
            .collect();
        if ranked.is_empty() {
            ranked = ok
                .iter()
                .filter_map(|r| Some((r.goodput_bps?, *r)))
                .collect();
        }
        if ranked.is_empty() {
            return ok[0];
        }
        // Stable: equal figures keep the order of repetition.
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        ranked[(ranked.len() - 1) / 2].1
    }

    /// `n = 5`, or `n = 4 of 5` when some runs did not finish.
    pub fn count(&self) -> String {
        let ok = self.ok().len();
        if ok == self.runs.len() {
            format!("n = {ok}")
        } else {
            format!("n = {ok} of {}", self.runs.len())
        }
    }
}

/// Every table cell's runs, rows in the order they first appear, rates in axis order.
pub fn groups<'a>(spec: &MatrixSpec, rows: &'a [SummaryRow]) -> Vec<Group<'a>> {
    let mut keys: Vec<String> = vec![];
    let mut by: BTreeMap<(String, String), Vec<&SummaryRow>> = BTreeMap::new();
    for r in rows {
        let k = row_key(spec, r);
        if !keys.contains(&k) {
            keys.push(k.clone());
        }
        by.entry((k, r.rate.clone())).or_default().push(r);
    }
    let mut out = vec![];
    for k in keys {
        for rate in &spec.axes.rate {
            if let Some(runs) = by.remove(&(k.clone(), rate.clone())) {
                out.push(Group {
                    row: k.clone(),
                    rate: rate.clone(),
                    config: runs[0].config.clone(),
                    runs,
                });
            }
        }
    }
    out
}

/// The table's row keys in the order their first group appears.
pub fn row_keys<'g>(groups: &'g [Group<'_>]) -> Vec<&'g str> {
    let mut keys: Vec<&str> = vec![];
    for g in groups {
        if !keys.contains(&g.row.as_str()) {
            keys.push(&g.row);
        }
    }
    keys
}

/// The group of one table cell, if the run has it.
pub fn find<'g, 'r>(groups: &'g [Group<'r>], row: &str, rate: &str) -> Option<&'g Group<'r>> {
    groups.iter().find(|g| g.row == row && g.rate == rate)
}

/// aggregates.csv: one row per table cell, over its repetitions.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AggregateRow {
    pub row: String,
    pub rate: String,
    pub config: String,
    pub runs: usize,
    pub ok: usize,
    /// sampled | tx_sched: which estimator the delay columns come from
    pub estimator: &'static str,
    pub p50_median_us: Option<f64>,
    pub p50_min_us: Option<f64>,
    pub p50_max_us: Option<f64>,
    pub p95_median_us: Option<f64>,
    pub p95_min_us: Option<f64>,
    pub p95_max_us: Option<f64>,
    pub goodput_median_bps: Option<f64>,
    pub goodput_min_bps: Option<f64>,
    pub goodput_max_bps: Option<f64>,
    pub writes_per_rtt_median: Option<f64>,
    pub writes_per_rtt_min: Option<f64>,
    pub writes_per_rtt_max: Option<f64>,
    /// Runs at or below the matrix's `trapped_at_writes_per_rtt` (absent without one).
    pub trapped_runs: Option<usize>,
}

pub fn aggregate_row(spec: &MatrixSpec, g: &Group<'_>) -> AggregateRow {
    let (p50, p95, gp, wpr) = (g.p50(), g.p95(), g.goodput(), g.writes_per_rtt());
    AggregateRow {
        row: g.row.clone(),
        rate: g.rate.clone(),
        config: g.config.clone(),
        runs: g.runs.len(),
        ok: g.ok().len(),
        estimator: g.headline().name(),
        p50_median_us: p50.map(|s| s.median),
        p50_min_us: p50.map(|s| s.min),
        p50_max_us: p50.map(|s| s.max),
        p95_median_us: p95.map(|s| s.median),
        p95_min_us: p95.map(|s| s.min),
        p95_max_us: p95.map(|s| s.max),
        goodput_median_bps: gp.map(|s| s.median),
        goodput_min_bps: gp.map(|s| s.min),
        goodput_max_bps: gp.map(|s| s.max),
        writes_per_rtt_median: wpr.map(|s| s.median),
        writes_per_rtt_min: wpr.map(|s| s.min),
        writes_per_rtt_max: wpr.map(|s| s.max),
        trapped_runs: spec.trapped_at_writes_per_rtt.map(|b| g.trapped(b).0),
    }
}

/// "## Trapped runs": per cell, how many runs stayed at or below the matrix's
/// writes-per-RTT bound, beside the runs' writes per RTT.
pub fn trapped(spec: &MatrixSpec, groups: &[Group<'_>]) -> Doc {
    let Some(bound) = spec.trapped_at_writes_per_rtt else {
        return Doc::default();
    };
    let mut rows = vec![];
    for g in groups {
        let (trapped, of) = g.trapped(bound);
        let wpr = g
            .writes_per_rtt()
            .map_or("not measured".into(), |s| s.show(|x| format!("{x:.1}")));
        let share = if of == 0 {
            "—".to_string()
        } else {
            format!(
                "{trapped} of {of} ({:.0} %)",
                100.0 * trapped as f64 / of as f64
            )
        };
        rows.push(vec![g.row.clone(), rate_header(&g.rate), share, wpr]);
    }
    Doc(vec![
        Block::Heading(2, "Trapped runs".into()),
        Block::Para(format!("A run counts as trapped (locked to a few writes per round trip, the report's §6) when the median of its per-interval writes per RTT after the warm-up is at most {bound}.")),
        Block::Table {
            header: ["sender configuration", "rate", "trapped runs", "writes per RTT, median (min–max)"].map(String::from).to_vec(),
            rows,
        },
    ])
}

/// "## Content age": for cells with an application-limited source, the age of the content
/// at the sink and the frames dropped as stale, over the runs.
pub fn content_age(groups: &[Group<'_>]) -> Doc {
    let mut lines = vec![];
    for g in groups {
        let ok = g.ok();
        let runs: Vec<&&SummaryRow> = ok.iter().filter(|r| r.content_source.is_some()).collect();
        if runs.is_empty() {
            continue;
        }
        let spread = |f: fn(&SummaryRow) -> Option<u64>| {
            Spread::of(runs.iter().filter_map(|r| f(r)).map(|v| v as f64))
        };
        let show = |s: Option<Spread>, fmt: &dyn Fn(f64) -> String| {
            s.map_or("not measured".into(), |s| s.show(fmt))
        };
        let dropped = runs
            .iter()
            .filter_map(|r| Some(r.frames_dropped? as f64 / r.frames_generated?.max(1) as f64))
            .map(|x| x * 100.0);
        lines.push(vec![
            g.row.clone(),
            rate_header(&g.rate),
            runs[0].content_source.clone().unwrap_or_default(),
            show(spread(|r| r.content_age_p50_us), &delay),
            show(spread(|r| r.content_age_p95_us), &delay),
            show(Spread::of(dropped), &|x| format!("{x:.1} %")),
            recovery_text(&runs),
        ]);
    }
    if lines.is_empty() {
        return Doc::default();
    }
    Doc(vec![
        Block::Heading(2, "Content age".into()),
        Block::Para("Application-limited sources: the age of the content when the sink read its last byte (read time − content time), over the frames generated after the warm-up, and the share of frames dropped as stale; medians of the runs with their range. With rate changes, the seconds after each change until the age was back at its floor (the median age before the first change; back = every frame of the next second within the larger of 25 % and 10 ms above it; docs/output.md, `age_recovery_s`).".into()),
        Block::Table {
            header: [
                "sender configuration",
                "rate",
                "source",
                "age at the sink, p50",
                "p95",
                "dropped",
                "back at the floor after each change (s)",
            ]
            .map(String::from)
            .to_vec(),
            rows: lines,
        },
    ])
}

/// Per rate change, the runs' seconds until the age was back at its floor: their median
/// and range, and how many runs it never was.
fn recovery_text(runs: &[&&SummaryRow]) -> String {
    let per_run: Vec<Vec<Option<f64>>> = runs
        .iter()
        .filter_map(|r| r.age_recovery_s.as_deref())
        .map(|s| s.split(';').map(|v| v.parse().ok()).collect())
        .collect();
    let changes = per_run.iter().map(Vec::len).max().unwrap_or(0);
    if changes == 0 {
        return "—".into();
    }
    (0..changes)
        .map(|k| {
            let vals: Vec<Option<f64>> = per_run
                .iter()
                .map(|r| r.get(k).copied().flatten())
                .collect();
            let never = vals.iter().filter(|v| v.is_none()).count();
            let mut text = Spread::of(vals.iter().flatten().copied())
                .map_or("never".into(), |s| s.show(|x| format!("{x:.1}")));
            if never > 0 && never < vals.len() {
                text.push_str(&format!(", not back in {never} of {}", vals.len()));
            }
            format!("change {}: {text}", k + 1)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The delay and goodput part of a table cell: medians of the runs' figures with their
/// range when there is more than one run.
pub fn figures(g: &Group<'_>) -> Option<String> {
    let (p50, p95) = (g.p50()?, g.p95()?);
    let mut text = format!("{} / {}", p50.show(delay), p95.show(delay));
    if let Some(gp) = g.goodput() {
        text.push_str(&format!(" @ {}", gp.show(fmt_rate)));
    }
    Some(text)
}

/// "## Against the report": for every cell the matrix file gives a report figure for, the
/// report's value against this run's spread.
pub fn against_report(spec: &MatrixSpec, groups: &[Group<'_>]) -> Doc {
    let mut lines = vec![];
    for g in groups {
        let Some(figure) = spec
            .configs
            .get(&g.config)
            .and_then(|c| c.report.get(&g.rate))
        else {
            continue;
        };
        let values = figure.values().unwrap_or(ReportValues::default());
        let mut parts = vec![];
        let mut verdicts = vec![];
        let mut judge = |what: &str,
                         report: Option<f64>,
                         ours: Option<Spread>,
                         fmt: &dyn Fn(f64) -> String| {
            let Some(x) = report else { return };
            parts.push(format!("{what} {}", fmt(x)));
            verdicts.push(match ours {
                    None => format!("{what}: not measured here"),
                    Some(s) if s.n < 2 => format!(
                        "{what}: ours {} (n = 1, no spread to judge by)",
                        fmt(s.median)
                    ),
                    Some(s) => {
                        let ratio = s.median / x;
                        let place = match s.place(x) {
                            Place::Inside => "inside",
                            Place::Below => "below",
                            Place::Above => "above",
                        };
                        format!(
                            "{what}: the report's is {place} our range {}–{} (our median {}, {ratio:.2} × the report's)",
                            fmt(s.min),
                            fmt(s.max),
                            fmt(s.median)
                        )
                    }
                });
        };
        judge("median", values.p50_us.map(|v| v as f64), g.p50(), &delay);
        judge("p95", values.p95_us.map(|v| v as f64), g.p95(), &delay);
        judge(
            "goodput",
            values.goodput_bps.map(|v| v as f64),
            g.goodput(),
            &fmt_rate,
        );
        let mut report = parts.join(", ");
        if let Some(t) = &figure.text {
            if !report.is_empty() {
                report.push_str("; ");
            }
            report.push_str(t);
        }
        let verdict = if verdicts.is_empty() {
            "no figure to compare".to_string()
        } else {
            verdicts.join("; ")
        };
        lines.push(vec![
            g.row.clone(),
            rate_header(&g.rate),
            report,
            g.count(),
            verdict,
        ]);
    }
    if lines.is_empty() {
        return Doc::default();
    }
    Doc(vec![
        Block::Heading(2, "Against the report".into()),
        Block::Para("The report's figure for a cell is inside our spread when it lies between the smallest and the largest of our runs' figures.".into()),
        Block::Table {
            header: [
                "sender configuration",
                "rate",
                "the report",
                "runs",
                "the report against our runs",
            ]
            .map(String::from)
            .to_vec(),
            rows: lines,
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_place() {
        let s = Spread::of([3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (4, 2.5, 1.0, 10.0));
        assert_eq!(s.place(0.5), Place::Below);
        assert_eq!(s.place(1.0), Place::Inside);
        assert_eq!(s.place(11.0), Place::Above);
        assert!(Spread::of([]).is_none());
    }
}
