//! Run-level outputs from stored cell results: summary.csv (one row per cell), table.md in
//! the report's layout, and SVG plots. Rebuilt by `scripts/matrix report DIR` at any time;
//! the same inputs give the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::aggregate::{self, Group};
use super::cell_series::{interval_series, thin, WriteSeries};
use super::doc::{Block, Doc};
use super::format::{fmt_delay, fmt_rate, rate_header};
use super::record::{CellStatus, Headline, Meta, Status, SummaryRow};
use super::spec::{Cell, MatrixSpec};
use super::svg::{self, Chart, Series, Style};
use crate::report::compressed::{self, read_json};
use crate::report::schema::{SendSummary, TraceConnSummary, TraceSummary};
use crate::stats::Percentiles;
use crate::testbed::uml;

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
pub fn jain_index(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

/// A cell's files as the report reads them (each may be missing).
#[derive(Debug, Default)]
pub struct CellFiles {
    pub status: Option<CellStatus>,
    /// sbm-send's summary.json, read through the type that writes it (any schema version:
    /// fields added later read as their defaults).
    pub summary: Option<SendSummary>,
    /// testbed/uml's uml.json (UML cells), read through the type that writes it.
    pub uml: Option<uml::RunRecord>,
    /// The median over intervals.csv's rows after the warm-up of writes per smoothed RTT.
    pub writes_per_rtt: Option<f64>,
    /// The median over intervals.csv's rows after the warm-up of the smoothed RTT, µs.
    pub srtt_p50_us: Option<f64>,
    /// Cells with rate changes and frames: the content age's return to its floor.
    pub recovery: Option<super::recovery::Recovery>,
    /// Cells of several flows: sbm-send's flows.json.
    pub flows: Option<crate::report::schema::FlowsSummary>,
    pub bbr_mode_shares: Option<String>,
    /// intervals.csv's goodput of every interval after the warm-up, bit/s.
    pub interval_goodputs: Vec<f64>,
    /// Command cells: sbm-trace's trace.json, and its connection that carried the most
    /// (whose conn-N/intervals.csv gives interval_goodputs).
    pub trace: Option<TraceSummary>,
    pub traced: Option<TraceConnSummary>,
}

impl CellFiles {
    pub fn read(dir: &Path) -> CellFiles {
        let trace: Option<TraceSummary> = read_json(&dir.join("trace.json"));
        let traced = trace.as_ref().and_then(main_connection).cloned();
        let intervals_dir = conn_dir(dir, traced.as_ref());
        CellFiles {
            status: read_json(&dir.join("cell.json")),
            summary: read_json(&dir.join("summary.json")),
            uml: read_json(&dir.join("uml.json")),
            writes_per_rtt: median_after_warmup(dir, "writes_per_rtt"),
            srtt_p50_us: median_after_warmup(dir, "srtt_us"),
            recovery: super::recovery::of_cell(dir),
            flows: read_json(&dir.join("flows.json")),
            bbr_mode_shares: bbr_mode_shares(dir),
            interval_goodputs: after_warmup(&intervals_dir, "goodput_bps"),
            trace,
            traced,
        }
    }
}

pub fn summary_row(cell: &Cell, files: &CellFiles) -> SummaryRow {
    let status = files.status.as_ref();
    let s = files.summary.as_ref();
    let quota = files.uml.as_ref().and_then(|u| u.cpu_quota.as_ref());
    let slices = files.uml.as_ref().and_then(|u| u.cpu_slices.as_ref());
    let after = s.map(|s| &s.attribution_after_warmup);
    let traced = files.traced.as_ref();
    let policy = s
        .map(|s| {
            let kind = &s.policy.kind;
            match s.policy.implementation {
                Some(i) => format!("{kind}/{}", i.name()),
                None => kind.to_string(),
            }
        })
        .or_else(|| {
            files.trace.as_ref().map(|t| match t.replenish_time_us {
                Some(_) => "traced+replenish-time/bpf".to_string(),
                None => "traced".to_string(),
            })
        });
    let traced_after = traced.map(|t| &t.attribution_after_warmup);
    let age = s.and_then(|s| s.content_age.as_ref());
    let flows = files.flows.as_ref();
    let flow_goodputs: Option<Vec<f64>> =
        flows.map(|f| f.flows.iter().map(|s| s.totals.goodput_bps).collect());
    let p = |f: fn(&SendSummary) -> &Percentiles, q: fn(&Percentiles) -> Option<u64>| {
        s.and_then(|s| q(f(s)))
    };
    SummaryRow {
        cell: cell.name.clone(),
        rate: cell.rate.clone(),
        rate_bps: cell.rate_bps,
        config: cell.config.clone(),
        label: cell.label.clone(),
        write_size: cell.write_size.clone(),
        nodelay: cell.nodelay,
        cc: cell.cc.clone(),
        sender_kernel: cell.sender_kernel.to_string(),
        cpu_quota: cell.cpu_quota,
        cpu_slices: cell.cpu_slices,
        repetition: cell.repetition,
        status: status.map_or(Status::NotRun, |st| st.status),
        summary_schema: s.map_or(0, |s| s.schema_version),
        error: status.and_then(|st| st.error.clone()),
        policy,
        goodput_bps: s
            .map(|s| s.totals.goodput_bps)
            .or(flows.map(|f| f.sum.goodput_bps))
            .or(traced.map(|t| t.goodput_bps)),
        sojourn_p50_us: p(|s| &s.sojourn, |p| p.p50_us).or(traced.and_then(|t| t.sojourn.p50_us)),
        sojourn_p95_us: p(|s| &s.sojourn, |p| p.p95_us).or(traced.and_then(|t| t.sojourn.p95_us)),
        sojourn_p99_us: p(|s| &s.sojourn, |p| p.p99_us),
        sojourn_exact_p50_us: p(|s| &s.sojourn_exact, |p| p.p50_us),
        sojourn_exact_p95_us: p(|s| &s.sojourn_exact, |p| p.p95_us),
        sampled_p50_us: p(|s| &s.sojourn_sampled, |p| p.p50_us),
        sampled_p95_us: p(|s| &s.sojourn_sampled, |p| p.p95_us),
        sampled_error_p50_us: p(|s| &s.sampled_error, |p| p.p50_us),
        departure_p50_us: p(|s| &s.sojourn_depart, |p| p.p50_us)
            .or(traced.and_then(|t| t.sojourn_depart.p50_us)),
        departure_p95_us: p(|s| &s.sojourn_depart, |p| p.p95_us)
            .or(traced.and_then(|t| t.sojourn_depart.p95_us)),
        departed: s
            .filter(|s| s.exact_departures.is_some())
            .map(|s| s.sojourn_depart.count)
            .or(traced.map(|t| t.sojourn_depart.count)),
        exact: after.or(traced_after).map(|a| a.exact),
        coalesced: after.or(traced_after).map(|a| a.coalesced),
        missing: after.or(traced_after).map(|a| a.missing),
        unsent: after.or(traced_after).map(|a| a.unsent),
        writes: s
            .map(|s| s.totals.writes)
            .or(flows.map(|f| f.sum.writes))
            .or(traced.map(|t| t.writes)),
        short_writes: s.map(|s| s.totals.short_writes),
        retransmits: s
            .map(|s| u64::from(s.totals.retransmits))
            .or(flows.map(|f| f.sum.retransmits)),
        retransmit_share: s.and_then(|s| {
            (s.totals.bytes_acked > 0 && s.mss > 0).then(|| {
                f64::from(s.totals.retransmits) * f64::from(s.mss) / s.totals.bytes_acked as f64
            })
        }),
        min_rtt_us: s.and_then(|s| s.min_rtt_us.map(u64::from)),
        srtt_p50_us: files.srtt_p50_us.map(|v| v.round() as u64),
        rtt_inflation: files
            .srtt_p50_us
            .zip(s.and_then(|s| s.min_rtt_us))
            .and_then(|(srtt, min)| (min > 0).then(|| srtt / f64::from(min))),
        writes_per_rtt: files.writes_per_rtt,
        advance_p50_us: p(|s| &s.advance_notice, |p| p.p50_us),
        invited_after_dry: s.map(|s| s.invited_after_dry),
        cpu_throttled_share: quota.and_then(|q| q.throttled_share),
        cpu_throttled_us: quota.map(|q| q.stat.throttled_us),
        cpu_usage_us: quota
            .and_then(|q| q.stat.usage_us)
            .or(slices.and_then(|s| s.usage_us)),
        content_source: age.map(|c| c.source.clone()),
        content_age_p50_us: age.and_then(|c| c.at_sink.p50_us),
        content_age_p95_us: age.and_then(|c| c.at_sink.p95_us),
        content_age_max_us: age.and_then(|c| c.at_sink.max_us),
        frames_generated: age.map(|c| c.generated),
        frames_dropped: age.map(|c| c.dropped),
        age_floor_us: files.recovery.as_ref().and_then(|r| r.floor_us),
        age_recovery_s: files.recovery.as_ref().map(|r| {
            r.after_change_s
                .iter()
                .map(|v| v.map_or("-".into(), |s| format!("{s:.2}")))
                .collect::<Vec<String>>()
                .join(";")
        }),
        flows: flows.map(|f| f.flows.len() as u32),
        flow_goodputs_bps: flow_goodputs.as_ref().map(|g| {
            g.iter()
                .map(|v| format!("{v:.0}"))
                .collect::<Vec<String>>()
                .join(";")
        }),
        jain_index: flow_goodputs.as_deref().and_then(jain_index),
        bbr_mode_shares: files.bbr_mode_shares.clone(),
        share_below_half_rate: cell
            .rate_bps
            .filter(|&r| r > 0 && !files.interval_goodputs.is_empty())
            .map(|rate| {
                let half = rate as f64 / 2.0;
                let below = files
                    .interval_goodputs
                    .iter()
                    .filter(|&&g| g < half)
                    .count();
                below as f64 / files.interval_goodputs.len() as f64
            }),
    }
}

/// The share of a cell's intervals after the warm-up that BBR spent in each mode, in the
/// order of BBR's state machine; None where intervals.csv has no BBR mode.
fn bbr_mode_shares(dir: &Path) -> Option<String> {
    let mut r = csv::Reader::from_reader(compressed::open(&dir.join("intervals.csv")).ok()?);
    let headers = r.headers().ok()?.clone();
    let iw = headers.iter().position(|h| h == "warmup")?;
    let im = headers.iter().position(|h| h == "bbr_mode")?;
    let mut counts: BTreeMap<usize, (String, u64)> = BTreeMap::new();
    let mut total = 0u64;
    for rec in r.records().map_while(Result::ok) {
        if rec.get(iw) != Some("false") {
            continue;
        }
        let Some(mode) = rec.get(im).filter(|m| !m.is_empty()) else {
            continue;
        };
        let order = ["STARTUP", "DRAIN", "PROBE_BW", "PROBE_RTT"]
            .iter()
            .position(|m| *m == mode)
            .unwrap_or(4);
        counts
            .entry(order)
            .or_insert_with(|| (mode.to_string(), 0))
            .1 += 1;
        total += 1;
    }
    (total > 0).then(|| {
        counts
            .values()
            .map(|(m, n)| format!("{m}={:.3}", *n as f64 / total as f64))
            .collect::<Vec<String>>()
            .join(";")
    })
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// One table cell from the runs of its repetitions.
pub fn table_cell(g: &Group<'_>) -> String {
    let ok = g.ok();
    if ok.is_empty() {
        let r = g.runs[0];
        return match &r.error {
            Some(e) => format!("{}: {}", r.status.name(), e.replace('|', "/")),
            None => r.status.name().to_string(),
        };
    }
    let headline = g.headline();
    let mut text = match aggregate::figures(g) {
        Some(t) => t,
        // Several flows per run: their sum and how fairly they shared it.
        None if ok.iter().all(|r| r.flows.is_some()) => {
            let mut t = format!("{} flows", ok[0].flows.unwrap_or(0));
            if let Some(gp) = g.goodput() {
                t.push_str(&format!(" @ {} in all", gp.show(fmt_rate)));
            }
            if let Some(j) = aggregate::Spread::of(ok.iter().filter_map(|r| r.jain_index)) {
                t.push_str(&format!(", Jain's index {}", j.show(|v| format!("{v:.3}"))));
            }
            t
        }
        None => {
            let waiting: u64 = ok.iter().map(|r| r.unsent.unwrap_or(0)).sum();
            // A sum over the runs reads as one run's count unless it says so.
            let over = match ok.len() {
                1 => String::new(),
                n => format!(" (over the {n} runs)"),
            };
            let mut t = if waiting > 0 {
                format!("none of the {waiting} writes after the warm-up{over} left the socket before the run ended")
            } else {
                "no sojourn measured".into()
            };
            if let Some(gp) = g.goodput() {
                t.push_str(&format!(" @ {}", fmt_rate(gp.median)));
            }
            t
        }
    };
    let measured_any = g.p50().is_some();
    match headline {
        Headline::Sched if measured_any => text.push_str(" (TX_SCHED)"),
        Headline::Departure if measured_any => text.push_str(" (departure)"),
        _ => {}
    }
    // Say when the figures rest on part of the writes only.
    let measured: u64 = ok
        .iter()
        .map(|r| match headline {
            Headline::Departure => r.departed.unwrap_or(0),
            _ => r.exact.unwrap_or(0) + r.coalesced.unwrap_or(0),
        })
        .sum();
    let all: u64 = ok
        .iter()
        .map(|r| {
            r.exact.unwrap_or(0)
                + r.coalesced.unwrap_or(0)
                + r.missing.unwrap_or(0)
                + r.unsent.unwrap_or(0)
        })
        .sum();
    if measured_any && all > 0 && measured * 100 < all * 95 {
        text.push_str(&format!(
            " (on {measured} of {all} writes: the rest had not left the socket)"
        ));
    }
    if g.runs.len() > 1 {
        text.push_str(&format!(", {}", g.count()));
    }
    text
}

/// table.md in the report's layout: rows = sender configuration, columns = rate,
/// cells "median / p95 @ goodput", each the median over the cell's runs with the range
/// (smallest–largest run) when it has more than one.
pub fn table_md(spec: &MatrixSpec, rows: &[SummaryRow]) -> String {
    let groups = aggregate::groups(spec, rows);
    let mut out = main_table_md(spec, &groups);
    out.push('\n');
    out.push_str(&notes(spec, rows, &groups).md());
    out
}

/// The table itself: a row per sender configuration, a column per rate.
fn main_table_md(spec: &MatrixSpec, groups: &[Group<'_>]) -> String {
    let rates = &spec.axes.rate;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| sender configuration | {} |",
        rates
            .iter()
            .map(|r| rate_header(r))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---|".repeat(rates.len()));
    for k in aggregate::row_keys(groups) {
        let cells: Vec<String> = rates
            .iter()
            .map(|rate| aggregate::find(groups, k, rate).map_or("—".into(), table_cell))
            .collect();
        let _ = writeln!(out, "| {} | {} |", k, cells.join(" | "));
    }
    out
}

/// Everything table.md says below its main table: what the cells mean, the path as
/// installed, schedules, the comparison with the report, traps, content age, estimators.
/// table.md writes it as markdown, the index page as HTML.
pub fn notes(spec: &MatrixSpec, rows: &[SummaryRow], groups: &[Group<'_>]) -> Doc {
    let rates = &spec.axes.rate;
    let mut doc = Doc::default();
    doc.push(Block::Para("Cells: median / p95 source queueing delay of the writes after the warm-up @ goodput (bytes that entered the network after the warm-up and were acknowledged by the end of writing, over that time). Delay = write → departure of its last byte from the socket, from the snd_nxt sampler (every write, bracketed; error bounds below); cells marked (TX_SCHED) come from TX_SCHED reports (exact and coalesced writes) because the run had no sampler. With several runs of a cell (n), each figure is the median of the runs' figures, with the smallest and largest run in brackets.".into()));
    if rows.iter().any(|r| r.departure_p50_us.is_some()) {
        doc.push(Block::Para("Cells marked (departure): delay = write → the exact departure of its last byte, from per-packet sequence numbers (BPF; every write, no bracket) — sbm-send's `--exact-departures`, or sbm-trace for command cells (`workload = \"command\"`: an unmodified server; goodput there = bytes acknowledged after the warm-up over the time to the last acknowledgement the trace saw; the cell's trace.json and conn-N/).".into()));
    }
    if rows
        .iter()
        .any(|r| r.status == Status::Ok && r.summary_schema < 2 && r.departed.is_none())
    {
        doc.push(Block::Para("Some cells were measured by an sbm whose summary counted, as goodput, every byte acknowledged after the warm-up (summary schema 1), bytes already in flight at its end included; schema 2 counts only bytes that entered the network after it (docs/output.md, `totals.goodput_bps`). Column `summary_schema` of summary.csv says which.".into()));
    }
    doc.0.extend(path(spec));
    for rate in rates {
        if let Some(note) = spec.rates.get(rate).and_then(|o| o.note.as_ref()) {
            doc.push(Block::Para(format!("{}: {note}", rate_header(rate))));
        }
    }
    doc.0.extend(schedules(spec));
    doc.append(aggregate::against_report(spec, groups));
    doc.append(aggregate::trapped(spec, groups));
    doc.append(aggregate::content_age(groups));
    doc.append(estimators(rows));
    doc
}

/// The path as installed: RTT, and per rate the bottleneck queue in bytes and in time
/// at the rate, saying where the queue asked for was raised to the floor.
fn path(spec: &MatrixSpec) -> Option<Block> {
    let mut parts = vec![];
    for rate in &spec.axes.rate {
        let Ok(Some(rate_bps)) = super::spec::parse_rate(spec.start_rate(rate)) else {
            continue;
        };
        let Ok(queue) = crate::units::parse_duration(spec.queue_for(rate)) else {
            continue;
        };
        let b = crate::testbed::plan::Bottleneck { rate_bps, queue };
        let drain = b.drain_time().as_micros() as u64;
        let policer = spec.rates.get(rate).and_then(|o| o.bottleneck.as_deref()) == Some("policer");
        parts.push(if policer {
            format!(
                "{} a policer, bucket {} B ({} at the rate), nothing queued (meta.json's testbed_before.policer_impl: `police`, tc's police action, or `tbf`, a token bucket with a one-packet queue where the kernel lacks act_police)",
                rate_header(rate),
                b.bucket_bytes(),
                spec.queue_for(rate)
            )
        } else if b.raised_to_floor() {
            format!(
                "{} {} B ({} at the rate: the {} asked for is under four full packets, the floor)",
                rate_header(rate),
                b.limit_bytes(),
                fmt_delay(drain),
                spec.queue_for(rate)
            )
        } else {
            format!(
                "{} {} B ({})",
                rate_header(rate),
                b.limit_bytes(),
                fmt_delay(drain)
            )
        });
    }
    if parts.is_empty() {
        return None;
    }
    let rtt = if spec.path.is_hosts() {
        "real hosts, RTT measured before each cell (meta.json hosts.rtt_before)".to_string()
    } else {
        format!("RTT {}", spec.path.rtt)
    };
    Some(Block::Para(format!(
        "Path: {rtt}, bottleneck queue as installed: {}.",
        parts.join("; ")
    )))
}

/// The rate columns whose bottleneck changes during each cell, step by step.
fn schedules(spec: &MatrixSpec) -> Vec<Block> {
    let mut out = vec![];
    for rate in &spec.axes.rate {
        let Some(o) = spec.rates.get(rate).filter(|o| !o.schedule.is_empty()) else {
            continue;
        };
        let steps: Vec<String> = o
            .schedule
            .iter()
            .map(|s| {
                let q = s
                    .queue
                    .as_ref()
                    .map_or(String::new(), |q| format!(" (queue {q})"));
                format!("{} at {}{q}", rate_header(&s.rate), s.at)
            })
            .collect();
        out.push(Block::Para(format!(
            "{}: the bottleneck starts at {} and changes to {}, times after the sender connected (each cell's meta.json `rate_changes` says when each took effect).",
            rate_header(rate),
            rate_header(spec.start_rate(rate)),
            steps.join(", then ")
        )));
    }
    out
}

fn opt_delay(v: Option<u64>) -> String {
    v.map_or("—".into(), fmt_delay)
}

/// Both departure estimators of every cell side by side, with the share of writes that
/// had their own TX_SCHED report.
pub fn estimators(rows: &[SummaryRow]) -> Doc {
    let mut table = vec![];
    for r in rows.iter().filter(|r| r.status == Status::Ok) {
        let all = r.exact.unwrap_or(0)
            + r.coalesced.unwrap_or(0)
            + r.missing.unwrap_or(0)
            + r.unsent.unwrap_or(0);
        let share = if all > 0 {
            format!(
                "{:.1} % of {all}",
                100.0 * r.exact.unwrap_or(0) as f64 / all as f64
            )
        } else {
            "—".into()
        };
        table.push(vec![
            r.cell.clone(),
            format!(
                "{} / {} (± {})",
                opt_delay(r.sampled_p50_us),
                opt_delay(r.sampled_p95_us),
                opt_delay(r.sampled_error_p50_us)
            ),
            format!(
                "{} / {}",
                opt_delay(r.sojourn_p50_us),
                opt_delay(r.sojourn_p95_us)
            ),
            format!(
                "{} / {}",
                opt_delay(r.sojourn_exact_p50_us),
                opt_delay(r.sojourn_exact_p95_us)
            ),
            share,
        ]);
    }
    Doc(vec![
        Block::Heading(2, "Estimators side by side".into()),
        Block::Table {
            header: [
                "cell",
                "sampled p50 / p95 (± error p50)",
                "TX_SCHED exact+coalesced p50 / p95",
                "TX_SCHED exact only p50 / p95",
                "writes with their own report",
            ]
            .map(String::from)
            .to_vec(),
            rows: table,
        },
    ])
}

/// The traced connection a command cell's figures come from: the one that carried the most.
fn main_connection(t: &TraceSummary) -> Option<&TraceConnSummary> {
    t.connections.iter().max_by_key(|c| c.bytes_written)
}

/// Where a cell's writes.csv and intervals.csv are: the cell's directory, or for a command
/// cell its main traced connection's conn-N/ (same columns where they mean the same).
pub fn per_write_dir(dir: &Path) -> std::path::PathBuf {
    let trace: Option<TraceSummary> = read_json(&dir.join("trace.json"));
    conn_dir(dir, trace.as_ref().and_then(main_connection))
}

/// The cell's directory, or the traced connection's conn-N/ in it.
fn conn_dir(dir: &Path, traced: Option<&TraceConnSummary>) -> std::path::PathBuf {
    match traced {
        Some(c) => dir.join(format!("conn-{}", c.id)),
        None => dir.to_path_buf(),
    }
}

/// Sojourns (ms) of a cell's measured writes after the warm-up, with their write times.
fn cell_sojourns(dir: &Path) -> Vec<(f64, f64)> {
    let dir = per_write_dir(dir);
    let Ok(file) = compressed::open(&dir.join("writes.csv")) else {
        return vec![];
    };
    let mut r = csv::Reader::from_reader(file);
    let headers = r.headers().cloned().unwrap_or_default();
    let idx = |name: &str| headers.iter().position(|h| h == name);
    let (Some(iw), Some(is), Some(iwu)) = (idx("write_ns"), idx("sojourn_us"), idx("warmup"))
    else {
        return vec![];
    };
    let isamp = idx("sampled_sojourn_us");
    let mut out = vec![];
    let mut t0 = None;
    for rec in r.records().map_while(Result::ok) {
        let w: f64 = rec.get(iw).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let t0 = *t0.get_or_insert(w);
        if rec.get(iwu) == Some("true") {
            continue;
        }
        // The sampled estimate (every write) where the run has it, as in table.md.
        let sampled = isamp
            .and_then(|i| rec.get(i))
            .and_then(|v| v.parse::<f64>().ok());
        if let Some(s) = sampled.or_else(|| rec.get(is).and_then(|v| v.parse::<f64>().ok())) {
            out.push(((w - t0) / 1e9, s / 1e3));
        }
    }
    out
}

/// The names of the plots of the run as a whole that the report owns (an older report's
/// of them with nothing to draw now is removed): `cdf-RATE.svg`, `goodput-vs-*.svg`, and
/// `cell-*.svg`, which reports before the configuration pages wrote.
pub fn is_report_plot(name: &str) -> bool {
    name.ends_with(".svg")
        && (name.starts_with("cdf-")
            || name.starts_with("goodput-vs-")
            || name.starts_with("cell-"))
}

/// The plots of the run as a whole, read from its cells: each file's name and its charts,
/// or None where there is nothing to draw (no sojourn measured: --light).
pub(super) fn run_charts(
    run_dir: &Path,
    spec: &MatrixSpec,
    cells: &[Cell],
    rows: &[SummaryRow],
) -> Vec<(String, Option<Vec<Chart>>)> {
    let mut out = vec![];
    let drawn = |chart: Chart| -> Option<Vec<Chart>> {
        (!chart.series.iter().all(|s| s.points.is_empty())).then(|| vec![chart])
    };
    // Per rate: the sojourn CDF of every configuration on one log axis.
    for rate in &spec.axes.rate {
        let mut chart = Chart {
            title: format!("Sojourn CDF at {}", rate_header(rate)),
            x_label: "sojourn (ms, log)".into(),
            y_label: "fraction of writes".into(),
            x_log: true,
            ..Default::default()
        };
        let mut by_row: BTreeMap<String, (usize, Vec<f64>)> = BTreeMap::new();
        for (i, (c, r)) in cells
            .iter()
            .zip(rows)
            .enumerate()
            .filter(|(_, (c, _))| &c.rate == rate)
        {
            let entry = by_row
                .entry(aggregate::row_key(spec, r))
                .or_insert((i, vec![]));
            entry.1.extend(
                cell_sojourns(&run_dir.join(&c.name))
                    .into_iter()
                    .map(|p| p.1),
            );
        }
        let mut ordered: Vec<(String, (usize, Vec<f64>))> = by_row.into_iter().collect();
        ordered.sort_by_key(|(_, (i, _))| *i);
        for (name, (_, mut v)) in ordered {
            chart.series.push(Series {
                // Why a configuration has no curve, where the files say it.
                name: if v.is_empty() {
                    format!("{name}: no write after the warm-up")
                } else {
                    name
                },
                points: svg::cdf(&mut v, 600),
                style: Style::Line,
            });
        }
        out.push((
            format!("cdf-{}.svg", rate.to_ascii_lowercase()),
            drawn(chart),
        ));
    }
    let period = &spec.uml.cpu_period;
    if !spec.axes.cpu_quota.is_empty() {
        let charts = cpu_share_charts(run_dir, cells, rows, ShareAxis::Quota, period);
        out.push(("goodput-vs-cpu-quota.svg".into(), Some(charts)));
    }
    if !spec.axes.cpu_slices.is_empty() {
        let charts = cpu_share_charts(run_dir, cells, rows, ShareAxis::EveryModel, period);
        out.push(("goodput-vs-cpu-share.svg".into(), Some(charts)));
    }
    // Goodput against median sojourn, one series per rate.
    let mut chart = Chart {
        title: "Goodput against median sojourn".into(),
        x_label: "median sojourn (ms, log)".into(),
        y_label: "goodput (Mb/s)".into(),
        x_log: true,
        ..Default::default()
    };
    for rate in &spec.axes.rate {
        let pts: Vec<(f64, f64, String)> = rows
            .iter()
            .filter(|r| &r.rate == rate && r.status == Status::Ok)
            .filter_map(|r| {
                Some((
                    Headline::of([r]).p50(r)? as f64 / 1e3,
                    r.goodput_bps? / 1e6,
                    r.config.clone(),
                ))
            })
            .collect();
        // One label per configuration and rate, at its median run (the repetitions sit
        // together; a label each would print over one another).
        let mut configs: Vec<&str> = pts.iter().map(|p| p.2.as_str()).collect();
        configs.dedup();
        for config in configs {
            let mut own: Vec<&(f64, f64, String)> = pts.iter().filter(|p| p.2 == config).collect();
            own.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mid = own[own.len() / 2];
            chart.annotations.push(mid.clone());
        }
        chart.series.push(Series {
            name: rate_header(rate),
            points: pts.iter().map(|p| (p.0, p.1)).collect(),
            style: Style::Points,
        });
    }
    // Goodputs of 100 kb/s and 86 Mb/s on one linear axis put the slow ones at 0: a log
    // axis when they span two decades or more.
    let goodputs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|g| *g > 0.0);
    let (lo, hi) = goodputs.fold((f64::MAX, 0.0_f64), |(lo, hi), g| (lo.min(g), hi.max(g)));
    if hi / lo >= 100.0 {
        chart.y_log = true;
        chart.y_label = "goodput (Mb/s, log)".into();
    }
    out.push(("goodput-vs-sojourn.svg".into(), drawn(chart)));
    out
}

/// One cell over time, what a reader needs to understand it: the sojourn of every write by
/// both estimators, unsent bytes against the threshold, writes per RTT, invitations, cwnd,
/// rates and, where recorded, content age, BBR's state and each flow's goodput. Empty when
/// the cell recorded nothing to draw (not run yet).
pub(super) fn cell_charts(run_dir: &Path, c: &Cell) -> Vec<Chart> {
    let dir = per_write_dir(&run_dir.join(&c.name));
    let traced = dir != run_dir.join(&c.name);
    let writes = WriteSeries::read(&dir);
    let a = Chart {
        title: format!("{}: sojourn per write, both estimators", c.name),
        x_label: "time since first write (s)".into(),
        y_label: "sojourn (ms)".into(),
        series: vec![
            Series {
                // sbm-trace writes its exact departure where sbm-send writes the
                // sampler's bracket.
                name: if traced {
                    "exact departure (sbm-trace)"
                } else {
                    "snd_nxt sampler"
                }
                .into(),
                points: thin(writes.sampled, 1200),
                style: Style::Points,
            },
            Series {
                name: "TX_SCHED, the write's own report".into(),
                points: thin(writes.sched, 1200),
                style: Style::Points,
            },
            Series {
                // A later write's report: when the write had left at the latest, not
                // when it left (a reader must not quote these as measurements).
                name: "TX_SCHED of a later write: an upper bound".into(),
                points: thin(writes.sched_bound, 1200),
                style: Style::Points,
            },
        ],
        markers: writes
            .warmup_end_s
            .map(|t| vec![(t, "warm-up ends".to_string())])
            .unwrap_or_default(),
        ..Default::default()
    };
    let b = Chart {
        title: format!("{}: unsent bytes and the readiness threshold", c.name),
        x_label: "time since connect (s)".into(),
        y_label: "kB".into(),
        series: [
            ("notsent", "notsent_bytes"),
            ("threshold", "threshold_bytes"),
            ("NOTSENT_LOWAT", "lowat_bytes"),
        ]
        .into_iter()
        .map(|(name, column)| Series {
            name: name.into(),
            points: interval_series(&dir, column, 1e-3),
            style: Style::Line,
        })
        .filter(|s| !s.points.is_empty())
        .collect(),
        ..Default::default()
    };
    let w = Chart {
        title: format!("{}: writes per round trip", c.name),
        x_label: "time since connect (s)".into(),
        y_label: "writes × sRTT ÷ interval".into(),
        series: vec![Series {
            name: "writes/RTT".into(),
            points: interval_series(&dir, "writes_per_rtt", 1.0),
            style: Style::Line,
        }],
        ..Default::default()
    };
    let inv = Chart {
        title: format!("{}: invitations by reason", c.name),
        x_label: "time since first write (s)".into(),
        y_label: "writes per second".into(),
        series: writes
            .invitations
            .into_iter()
            .map(|(name, points)| Series {
                name,
                points,
                style: Style::Line,
            })
            .collect(),
        ..Default::default()
    };
    let cwnd = Chart {
        title: format!("{}: congestion window", c.name),
        x_label: "time since connect (s)".into(),
        y_label: "cwnd (segments)".into(),
        series: vec![Series {
            name: "cwnd".into(),
            points: interval_series(&dir, "cwnd", 1.0),
            style: Style::Line,
        }],
        ..Default::default()
    };
    let rates = Chart {
        title: format!("{}: delivery rate and goodput", c.name),
        x_label: "time since connect (s)".into(),
        y_label: "Mb/s".into(),
        series: [
            ("delivery rate", "delivery_rate_bps"),
            ("goodput", "goodput_bps"),
        ]
        .into_iter()
        .map(|(name, column)| Series {
            name: name.into(),
            points: interval_series(&dir, column, 1e-6),
            style: Style::Line,
        })
        .collect(),
        ..Default::default()
    };
    let markers = rate_change_markers(&dir);
    let mut charts: Vec<Chart> = [a, b, w, inv, cwnd, rates]
        .into_iter()
        .filter(|ch| ch.series.iter().any(|s| !s.points.is_empty()))
        .collect();
    // The readiness threshold against what the rule believes the drain rate is (how
    // each rule tracks rate changes and slow start), where a rule set them.
    let threshold = interval_series(&dir, "threshold_bytes", 1e-3);
    if !threshold.is_empty() {
        charts.push(Chart {
            title: format!("{}: readiness threshold and drain rate", c.name),
            x_label: "time since connect (s)".into(),
            y_label: "threshold (kB) / rate (Mb/s)".into(),
            series: vec![
                Series {
                    name: "threshold (kB)".into(),
                    points: threshold,
                    style: Style::Line,
                },
                Series {
                    name: "drain rate (Mb/s)".into(),
                    points: interval_series(&dir, "drain_rate_bps", 1e-6),
                    style: Style::Line,
                },
                Series {
                    name: "delivery rate (Mb/s)".into(),
                    points: interval_series(&dir, "delivery_rate_bps", 1e-6),
                    style: Style::Line,
                },
            ],
            ..Default::default()
        });
    }
    // Application-limited sources: the content's age per interval.
    let age = content_age_series(&dir);
    if !age.is_empty() {
        charts.push(Chart {
            title: format!("{}: content age at the sink per interval", c.name),
            x_label: "content time since connect (s)".into(),
            y_label: "age (ms)".into(),
            series: age,
            ..Default::default()
        });
    }
    for ch in &mut charts {
        if ch.x_label.starts_with("time since") || ch.x_label.starts_with("content time") {
            ch.markers.extend(markers.iter().cloned());
        }
    }
    // BBR's own view of the path, when the cell ran BBR.
    let bbr_bw = interval_series(&dir, "bbr_bw_bps", 1e-6);
    if !bbr_bw.is_empty() {
        charts.push(Chart {
            title: format!("{}: BBR's state per interval (TCP_CC_INFO)", c.name),
            x_label: "time since connect (s)".into(),
            y_label: "Mb/s".into(),
            series: vec![
                Series {
                    name: "BBR bandwidth estimate".into(),
                    points: bbr_bw,
                    style: Style::Line,
                },
                Series {
                    name: "goodput".into(),
                    points: interval_series(&dir, "goodput_bps", 1e-6),
                    style: Style::Line,
                },
                Series {
                    name: "pacing rate".into(),
                    points: interval_series(&dir, "pacing_rate_bps", 1e-6),
                    style: Style::Line,
                },
            ],
            ..Default::default()
        });
    }
    // A cell of several flows (-P): each flow's goodput over time, from its own
    // intervals.csv (the cell's directory has none of its own).
    let flows: Vec<Series> = (1..)
        .map(|k| (k, run_dir.join(&c.name).join(format!("flow-{k}"))))
        .take_while(|(_, d)| compressed::is_dir(d))
        .map(|(k, d)| Series {
            name: format!("flow {k}"),
            points: interval_series(&d, "goodput_bps", 1e-6),
            style: Style::Line,
        })
        .collect();
    if flows.iter().any(|s| !s.points.is_empty()) {
        charts.push(Chart {
            title: format!("{}: goodput per flow", c.name),
            x_label: "time since connect (s)".into(),
            y_label: "goodput (Mb/s)".into(),
            series: flows,
            ..Default::default()
        });
    }
    charts
}

/// A cell's rate changes as plot markers: seconds since the sender connected (summary.json
/// `started_unix_ns`) and the new rate.
fn rate_change_markers(dir: &Path) -> Vec<(f64, String)> {
    let summary: Option<SendSummary> = read_json(&dir.join("summary.json"));
    let (Some(changes), Some(summary)) = (Meta::read(dir).map(|m| m.rate_changes), summary) else {
        return vec![];
    };
    let t0 = summary.started_unix_ns as f64;
    changes
        .iter()
        .map(|c| {
            let label = c.rate_bps.map_or("unshaped".into(), |r| fmt_rate(r as f64));
            ((c.applied_unix_ns as f64 - t0) / 1e9, format!("→ {label}"))
        })
        .collect()
}

/// content-age.csv's p50 and p95 at the sink per interval (ms), for the cell plots.
fn content_age_series(dir: &Path) -> Vec<Series> {
    let Ok(file) = compressed::open(&dir.join("content-age.csv")) else {
        return vec![];
    };
    let mut p50 = vec![];
    let mut p95 = vec![];
    for row in csv::Reader::from_reader(file)
        .deserialize::<crate::report::schema::ContentAgeRow>()
        .flatten()
    {
        let x = row.start_s;
        if let Some(v) = row.sink_p50_us {
            p50.push((x, v as f64 / 1e3));
        }
        if let Some(v) = row.sink_p95_us {
            p95.push((x, v as f64 / 1e3));
        }
    }
    if p50.is_empty() {
        return vec![];
    }
    vec![
        Series {
            name: "age p50".into(),
            points: p50,
            style: Style::Line,
        },
        Series {
            name: "age p95".into(),
            points: p95,
            style: Style::Line,
        },
    ]
}

/// Median of an intervals.csv column over the intervals after the warm-up.
fn median_after_warmup(dir: &Path, column: &str) -> Option<f64> {
    median(after_warmup(dir, column))
}

/// intervals.csv's `column` in every row after the warm-up (empty without the file or the
/// column).
fn after_warmup(dir: &Path, column: &str) -> Vec<f64> {
    let Ok(mut r) = compressed::open(&dir.join("intervals.csv")).map(csv::Reader::from_reader)
    else {
        return vec![];
    };
    let headers = r.headers().cloned().unwrap_or_default();
    let (Some(iw), Some(ic)) = (
        headers.iter().position(|h| h == "warmup"),
        headers.iter().position(|h| h == column),
    ) else {
        return vec![];
    };
    r.records()
        .map_while(Result::ok)
        .filter(|rec| rec.get(iw) == Some("false"))
        .filter_map(|rec| rec.get(ic)?.parse::<f64>().ok())
        .collect()
}

/// How a guest cell was denied CPU: a CFS quota, or periodic slices at a fixed phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Contention {
    Quota,
    Slices,
}

impl Contention {
    fn of(r: &SummaryRow) -> Option<Contention> {
        if r.cpu_slices.is_some() {
            Some(Contention::Slices)
        } else if r.cpu_quota.is_some() {
            Some(Contention::Quota)
        } else {
            None
        }
    }

    /// The guest's CPU share, percent of one CPU per period.
    fn share(self, r: &SummaryRow) -> Option<u32> {
        match self {
            Contention::Quota => r.cpu_quota,
            Contention::Slices => r.cpu_slices,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Contention::Quota => "quota",
            Contention::Slices => "slices",
        }
    }
}

/// Which plot against the guest's CPU share: the quota axis alone (goodput-vs-cpu-quota.svg,
/// with the throttled periods), or every contention model side by side
/// (goodput-vs-cpu-share.svg, for CPU-slice cells and quota cells beside them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShareAxis {
    Quota,
    EveryModel,
}

/// Goodput and BBR's bandwidth estimate against the guest's CPU share — and for the quota
/// axis the share of throttled periods — one series per contention model and congestion
/// control (every repetition a point, the median a line). `period` is the matrix's
/// `uml.cpu_period`, the period every share is of.
fn cpu_share_charts(
    run_dir: &Path,
    cells: &[Cell],
    rows: &[SummaryRow],
    axis: ShareAxis,
    period: &str,
) -> Vec<Chart> {
    let mut keys: Vec<(Contention, &str)> = rows
        .iter()
        .filter_map(|r| {
            let model = match axis {
                ShareAxis::Quota => Contention::Quota,
                ShareAxis::EveryModel => Contention::of(r)?,
            };
            Some((model, r.cc.as_str()))
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let period = crate::units::parse_duration(period)
        .map_or_else(|_| period.to_string(), |d| fmt_delay(d.as_micros() as u64));
    let (what, x_label) = match axis {
        ShareAxis::Quota => ("CPU quota", "CPU quota"),
        ShareAxis::EveryModel => ("CPU share", "the guest's CPU share"),
    };
    let panel = |title: &str, y: &str, value: &dyn Fn(&Cell, &SummaryRow) -> Option<f64>| {
        let mut chart = Chart {
            title: title.into(),
            x_label: format!("{x_label} (% of one CPU per {period} period)"),
            y_label: y.into(),
            ..Default::default()
        };
        for (model, cc) in &keys {
            let mut by_share: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
            for (c, r) in cells.iter().zip(rows) {
                if r.cc != *cc || r.status != Status::Ok {
                    continue;
                }
                if let (Some(q), Some(v)) = (model.share(r), value(c, r)) {
                    by_share.entry(q).or_default().push(v);
                }
            }
            if by_share.is_empty() {
                continue; // e.g. BBR's bandwidth estimate for CUBIC cells
            }
            let name = match axis {
                ShareAxis::Quota => cc.to_string(),
                ShareAxis::EveryModel => format!("{cc}, {}", model.name()),
            };
            chart.series.push(Series {
                name: format!("{name} (runs)"),
                points: by_share
                    .iter()
                    .flat_map(|(q, vs)| vs.iter().map(move |v| (f64::from(*q), *v)))
                    .collect(),
                style: Style::Points,
            });
            chart.series.push(Series {
                name: format!("{name} (median)"),
                points: by_share
                    .iter()
                    .filter_map(|(q, vs)| Some((f64::from(*q), median(vs.clone())?)))
                    .collect(),
                style: Style::Line,
            });
        }
        chart
    };
    let mut charts = vec![
        panel(
            &format!("Goodput against the guest's {what}"),
            "goodput (Mb/s)",
            &|_, r| r.goodput_bps.map(|g| g / 1e6),
        ),
        panel(
            "BBR's bandwidth estimate (median after the warm-up)",
            "Mb/s",
            &|c, _| median_after_warmup(&run_dir.join(&c.name), "bbr_bw_bps").map(|b| b / 1e6),
        ),
    ];
    if axis == ShareAxis::Quota {
        charts.push(panel(
            "Periods in which the guest was throttled",
            "throttled periods ÷ periods",
            &|_, r| r.cpu_throttled_share,
        ));
    }
    charts
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::matrix) fn row(
        label: &str,
        rate: &str,
        p50: u64,
        p95: u64,
        gp: f64,
    ) -> SummaryRow {
        SummaryRow {
            cell: format!("{rate}-{label}"),
            rate: rate.into(),
            rate_bps: None,
            config: label.into(),
            label: label.into(),
            write_size: "64KiB".into(),
            nodelay: false,
            cc: "cubic".into(),
            sender_kernel: "host".into(),
            cpu_quota: None,
            cpu_slices: None,
            repetition: 1,
            status: Status::Ok,
            summary_schema: 2,
            error: None,
            policy: None,
            goodput_bps: Some(gp),
            sojourn_p50_us: Some(p50),
            sojourn_p95_us: Some(p95),
            sojourn_p99_us: None,
            sojourn_exact_p50_us: None,
            sojourn_exact_p95_us: None,
            sampled_p50_us: None,
            sampled_p95_us: None,
            sampled_error_p50_us: None,
            departure_p50_us: None,
            departure_p95_us: None,
            departed: None,
            exact: Some(100),
            coalesced: Some(0),
            missing: Some(0),
            unsent: Some(0),
            writes: None,
            short_writes: None,
            retransmits: None,
            retransmit_share: None,
            min_rtt_us: None,
            srtt_p50_us: None,
            rtt_inflation: None,
            writes_per_rtt: None,
            advance_p50_us: None,
            invited_after_dry: None,
            cpu_throttled_share: None,
            cpu_throttled_us: None,
            cpu_usage_us: None,
            content_source: None,
            content_age_p50_us: None,
            content_age_p95_us: None,
            content_age_max_us: None,
            frames_generated: None,
            frames_dropped: None,
            age_floor_us: None,
            age_recovery_s: None,
            flows: None,
            flow_goodputs_bps: None,
            jain_index: None,
            bbr_mode_shares: None,
            share_below_half_rate: None,
        }
    }

    #[test]
    fn jain_is_one_for_equal_flows_and_one_over_n_for_one_taking_all() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain_index(&[9.0, 0.0, 0.0]), Some(1.0 / 3.0));
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0.0, 0.0]), None);
    }

    #[test]
    fn units_read_like_the_report() {
        assert_eq!(fmt_delay(8_600), "8.6 ms");
        assert_eq!(fmt_delay(280_000), "280 ms");
        assert_eq!(fmt_delay(22_000_000), "22.00 s");
        assert_eq!(fmt_rate(1_880_000.0), "1.88 Mb/s");
        assert_eq!(fmt_rate(84_000.0), "84.0 kb/s");
    }

    /// The charts against the CPU share say the matrix's period, whichever it is, and keep
    /// each contention model's cells apart.
    #[test]
    fn cpu_share_charts_name_the_period_and_each_model() {
        let spec = MatrixSpec::parse(
            "[axes]\nrate = [\"2mbit\", \"86mbit\"]\nconfig = [\"a\", \"b\"]\n[configs.a]\n[configs.b]\n",
        )
        .unwrap();
        let cells = spec.cells().unwrap();
        let mut rows: Vec<SummaryRow> = (0..cells.len())
            .map(|i| row("a", "2mbit", 1, 2, 1e6 * (i + 1) as f64))
            .collect();
        rows[0].cpu_quota = Some(50);
        rows[1].cpu_quota = Some(25);
        rows[2].cpu_slices = Some(25);
        rows[3].cpu_slices = Some(25);
        rows[3].cc = "bbr".into();
        let dir = Path::new("/nonexistent-sbm-run");
        let quota = cpu_share_charts(dir, &cells, &rows, ShareAxis::Quota, "20ms");
        assert_eq!(quota.len(), 3, "goodput, BBR's estimate, throttled periods");
        assert_eq!(
            quota[0].x_label,
            "CPU quota (% of one CPU per 20 ms period)"
        );
        let names: Vec<&str> = quota[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cubic (runs)", "cubic (median)"]);
        assert_eq!(quota[0].series[0].points, [(25.0, 2.0), (50.0, 1.0)]);
        let every = cpu_share_charts(dir, &cells, &rows, ShareAxis::EveryModel, "10ms");
        assert_eq!(every.len(), 2);
        assert_eq!(
            every[0].x_label,
            "the guest's CPU share (% of one CPU per 10 ms period)"
        );
        let names: Vec<&str> = every[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cubic, quota (runs)",
                "cubic, quota (median)",
                "bbr, slices (runs)",
                "bbr, slices (median)",
                "cubic, slices (runs)",
                "cubic, slices (median)"
            ]
        );
        assert_eq!(every[0].series[4].points, [(25.0, 3.0)]);
    }

    #[test]
    fn table_has_rows_per_configuration_and_columns_per_rate() {
        let spec = MatrixSpec::parse("[axes]\nrate = [\"2mbit\", \"86mbit\"]\nconfig = [\"a\", \"b\"]\n[configs.a]\n[configs.b]\n").unwrap();
        let mut failed = row("b", "86mbit", 0, 0, 0.0);
        failed.status = Status::Failed;
        failed.error = Some("sbm-send exited 1".into());
        let rows = vec![
            row("a", "2mbit", 22_000_000, 23_400_000, 1.81e6),
            row("a", "86mbit", 1_310_000, 2_000_000, 28.7e6),
            row("b", "2mbit", 280_000, 370_000, 1.88e6),
            failed,
        ];
        let t = table_md(&spec, &rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| sender configuration | 2 Mb/s | 86 Mb/s |");
        assert_eq!(lines[2], "| a | 22.00 s / 23.40 s @ 1.81 Mb/s (TX_SCHED) | 1.31 s / 2.00 s @ 28.70 Mb/s (TX_SCHED) |");
        assert_eq!(
            lines[3],
            "| b | 280 ms / 370 ms @ 1.88 Mb/s (TX_SCHED) | failed: sbm-send exited 1 |"
        );
        let mut sampled = row("c", "2mbit", 1, 2, 1.9e6);
        sampled.sampled_p50_us = Some(23_000);
        sampled.sampled_p95_us = Some(40_000);
        sampled.sampled_error_p50_us = Some(500);
        let spec = MatrixSpec::parse("[axes]\nconfig = [\"c\"]\n[configs.c]\n").unwrap();
        let t = table_md(&spec, &[sampled]);
        assert!(t.contains("| c | 23 ms / 40 ms @ 1.90 Mb/s |"), "{t}");
        assert!(t.contains("| 2mbit-c | 23 ms / 40 ms (± 0.5 ms) |"), "{t}");
    }

    #[test]
    fn repetitions_show_median_range_and_n_and_the_report_against_the_spread() {
        let spec = MatrixSpec::parse(
            "repetitions = 3\n[axes]\nconfig = [\"a\", \"b\"]\n[configs.a]\nreport = { \"2mbit\" = { p50 = \"0.28s\", goodput = \"1.88mbit\" } }\n[configs.b]\nreport = { \"2mbit\" = { p50 = \"0.61s\" } }\n",
        )
        .unwrap();
        let mut rows = vec![];
        for (p50, gp) in [(270_000, 1.90e6), (300_000, 1.91e6), (250_000, 1.92e6)] {
            rows.push(row("a", "2mbit", p50, p50 + 100_000, gp));
        }
        for p50 in [700_000, 720_000, 800_000] {
            rows.push(row("b", "2mbit", p50, p50, 1.9e6));
        }
        let mut failed = row("b", "2mbit", 0, 0, 0.0);
        failed.status = Status::Failed;
        rows.push(failed);
        let t = table_md(&spec, &rows);
        assert!(
            t.contains("| a | 270 ms (250 ms–300 ms) / 370 ms (350 ms–400 ms) @ 1.91 Mb/s (1.90 Mb/s–1.92 Mb/s) (TX_SCHED), n = 3 |"),
            "{t}"
        );
        assert!(t.contains("(TX_SCHED), n = 3 of 4 |"), "{t}");
        assert!(t.contains("median: the report's is inside our range 250 ms–300 ms (our median 270 ms, 0.96 × the report's); goodput: the report's is below our range 1.90 Mb/s–1.92 Mb/s (our median 1.91 Mb/s, 1.02 × the report's)"), "{t}");
        assert!(t.contains("median: the report's is below our range 700 ms–800 ms (our median 720 ms, 1.18 × the report's)"), "{t}");
        let groups = aggregate::groups(&spec, &rows);
        let a = aggregate::aggregate_row(&spec, &groups[0]);
        assert_eq!((a.runs, a.ok), (3, 3));
        assert_eq!(
            (a.p50_median_us, a.p50_min_us, a.p50_max_us),
            (Some(270_000.0), Some(250_000.0), Some(300_000.0))
        );
        assert_eq!(aggregate::aggregate_row(&spec, &groups[1]).ok, 3);
    }

    #[test]
    fn trapped_runs_are_counted_against_the_matrix_bound() {
        let spec = MatrixSpec::parse(
            "trapped_at_writes_per_rtt = 1.2\n[axes]\nconfig = [\"a\"]\n[configs.a]\n",
        )
        .unwrap();
        let rows: Vec<SummaryRow> = [1.0, 1.2, 9.5, 10.1]
            .into_iter()
            .map(|w| {
                let mut r = row("a", "2mbit", 1, 2, 1.0);
                r.writes_per_rtt = Some(w);
                r
            })
            .collect();
        let t = table_md(&spec, &rows);
        assert!(t.contains("## Trapped runs"), "{t}");
        assert!(
            t.contains("| a | 2 Mb/s | 2 of 4 (50 %) | 5.3 (1.0–10.1) |"),
            "{t}"
        );
        let groups = aggregate::groups(&spec, &rows);
        assert_eq!(
            aggregate::aggregate_row(&spec, &groups[0]).trapped_runs,
            Some(2)
        );
        let plain = MatrixSpec::parse("[axes]\nconfig = [\"a\"]\n[configs.a]\n").unwrap();
        assert!(!table_md(&plain, &rows).contains("Trapped"));
        assert!(MatrixSpec::parse("trapped_at_writes_per_rtt = -1.0\n")
            .unwrap()
            .validate()
            .is_err());
    }

    #[test]
    fn partial_coverage_is_stated() {
        let spec = MatrixSpec::parse("[axes]\nconfig = [\"a\"]\n[configs.a]\n").unwrap();
        let mut r = row("a", "2mbit", 1, 2, 1.0);
        r.unsent = Some(900);
        let t = table_md(&spec, &[r]);
        assert!(
            t.contains("(on 100 of 1000 writes: the rest had not left the socket)"),
            "{t}"
        );
    }
}
