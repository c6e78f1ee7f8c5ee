//! The iperf-like text sbm prints on stdout. Pure formatting of the schema structs.

use std::fmt::Write as _;

use super::schema::{IntervalRow, SendSummary, SinkIntervalRow};
use crate::stats::Percentiles;
use crate::units::{BitRate, Bytes, Micros};

fn opt_micros(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |us| Micros(us).to_string())
}

pub fn send_interval_header() -> String {
    format!(
        "{:<13} {:>11} {:>13} {:>6} {:>5} {:>28} {:>10} {:>5} {:>9}",
        "Interval",
        "Acked",
        "Goodput",
        "Writes",
        "Short",
        "Sojourn p50 / p95 / max",
        "Notsent",
        "Cwnd",
        "sRTT"
    )
}

pub fn send_interval_line(r: &IntervalRow) -> String {
    let sojourn = format!(
        "{} / {} / {}",
        opt_micros(r.sojourn_p50_us),
        opt_micros(r.sojourn_p95_us),
        opt_micros(r.sojourn_max_us)
    );
    format!(
        "{:<13} {:>11} {:>13} {:>6} {:>5} {:>28} {:>10} {:>5} {:>9}{}",
        format!("{:.2}-{:.2} s", r.start_s, r.end_s),
        Bytes(r.bytes_acked).to_string(),
        BitRate(r.goodput_bps).to_string(),
        r.writes,
        r.short_writes,
        sojourn,
        r.notsent_bytes
            .map_or_else(|| "-".into(), |n| Bytes(u64::from(n)).to_string()),
        r.cwnd,
        Micros(u64::from(r.srtt_us)).to_string(),
        if r.warmup { "  (warm-up)" } else { "" }
    )
}

/// `-P N`: a flow's tag as iperf writes it, `[  3]`, or `[SUM]`.
pub fn flow_tag(flow: Option<usize>) -> String {
    flow.map_or_else(|| "[SUM]".into(), |n| format!("[{n:>3}]"))
}

/// The SUM line of one interval over every flow's row for it: what adds up across flows
/// (bytes, goodput, writes, unsent bytes); per-flow quantities (sojourn, cwnd, sRTT) are
/// on the flows' own lines.
pub fn sum_interval_line(rows: &[&IntervalRow]) -> String {
    let first = rows.first().copied().cloned().unwrap_or_default();
    let sum = |f: &dyn Fn(&IntervalRow) -> u64| rows.iter().map(|r| f(r)).sum::<u64>();
    let notsent: Option<u64> = rows
        .iter()
        .map(|r| r.notsent_bytes.map(u64::from))
        .sum::<Option<u64>>();
    format!(
        "{:<13} {:>11} {:>13} {:>6} {:>5} {:>28} {:>10} {:>5} {:>9}",
        format!("{:.2}-{:.2} s", first.start_s, first.end_s),
        Bytes(sum(&|r| r.bytes_acked)).to_string(),
        BitRate(rows.iter().map(|r| r.goodput_bps).sum()).to_string(),
        sum(&|r| r.writes),
        sum(&|r| r.short_writes),
        "-",
        notsent.map_or_else(|| "-".into(), |n| Bytes(n).to_string()),
        "-",
        "-"
    )
}

/// `-P N`: one flow's totals on one line (the whole summary is in its own summary.json).
pub fn flow_total_line(s: &SendSummary) -> String {
    let t = &s.totals;
    let sojourn = if s.sampling.interval_us > 0 {
        &s.sojourn_sampled
    } else {
        &s.sojourn
    };
    format!(
        "{:.2} s  acked {}  goodput {}  {} writes  sojourn p50 {}  p95 {}  {}",
        t.duration_s,
        Bytes(t.bytes_acked),
        BitRate(t.goodput_bps),
        t.writes,
        opt_micros(sojourn.p50_us),
        opt_micros(sojourn.p95_us),
        if s.complete {
            "complete"
        } else {
            s.end_reason.as_str()
        }
    )
}

fn percentiles_line(p: &Percentiles) -> String {
    if p.count == 0 {
        return "none measured".into();
    }
    format!(
        "p50 {}  p95 {}  p99 {}  max {}  (n = {})",
        opt_micros(p.p50_us),
        opt_micros(p.p95_us),
        opt_micros(p.p99_us),
        opt_micros(p.max_us),
        p.count
    )
}

pub fn send_summary_text(s: &SendSummary) -> String {
    let mut out = String::new();
    let t = &s.totals;
    let _ = writeln!(
        out,
        "--- sbm-send summary{} ---",
        s.label
            .as_ref()
            .map_or(String::new(), |l| format!(" ({l})"))
    );
    let _ = writeln!(
        out,
        "written {} in {} writes over {:.2} s ({} short, {} would-block, {} invitations)",
        Bytes(t.bytes_written),
        t.writes,
        t.duration_s,
        t.short_writes,
        t.would_block,
        t.invitations
    );
    let _ = writeln!(
        out,
        "acked {}  goodput {} after warm-up  retransmits {}",
        Bytes(t.bytes_acked),
        BitRate(t.goodput_bps),
        t.retransmits
    );
    if s.config.timestamps {
        let _ = writeln!(
            out,
            "sojourn (exact+coalesced): {}",
            percentiles_line(&s.sojourn)
        );
        let _ = writeln!(
            out,
            "sojourn (exact only):      {}",
            percentiles_line(&s.sojourn_exact)
        );
        if s.sampling.interval_us > 0 {
            let _ = writeln!(
                out,
                "sojourn (snd_nxt sampled): {}  error bound p50 {}",
                percentiles_line(&s.sojourn_sampled),
                opt_micros(s.sampled_error.p50_us)
            );
        }
        if let Some(x) = &s.exact_departures {
            let _ = writeln!(
                out,
                "sojourn (exact departure): {}  ({} departures{})",
                percentiles_line(&s.sojourn_depart),
                x.departures,
                if x.events_lost > 0 {
                    format!(", {} events lost: their writes have none", x.events_lost)
                } else {
                    String::new()
                }
            );
        }
        if let Some(b) = &s.bpf_timestamps {
            let _ = writeln!(
                out,
                "reports: {} from the BPF program{}",
                b.reports,
                if b.events_lost + b.events_malformed > 0 {
                    format!(
                        ", {} events lost and {} malformed: the writes they were for are missing",
                        b.events_lost, b.events_malformed
                    )
                } else {
                    String::new()
                }
            );
        }
        let a = &s.attribution;
        let _ = writeln!(
            out,
            "rows: {} exact, {} coalesced, {} missing, {} unsent{}",
            a.exact,
            a.coalesced,
            a.missing,
            a.unsent,
            if a.displaced > 0 {
                format!(
                    ", {} displaced (their reports are a later segment's: the kernel moved the last byte, not the request)",
                    a.displaced
                )
            } else {
                String::new()
            }
        );
        if let Some(n) = super::own_reports::note(s) {
            let _ = writeln!(out, "note: {n}");
        }
        if a.missing > 0 {
            let _ = writeln!(
                out,
                "warning: {} writes have no SCHED time: neither their own report nor a later write's bounds them (requests taken over by later writes, or reports lost to an error-queue overflow or a full BPF ring buffer)",
                a.missing
            );
        }
        if s.drain.timed_out {
            let _ = writeln!(
                out,
                "warning: stopped waiting for reports after {:.1} s with {} writes outstanding ({} still unsent)",
                s.drain.waited_s,
                s.drain.pending_writes,
                Bytes(u64::from(s.drain.notsent_at_end))
            );
        }
    } else {
        let _ = writeln!(
            out,
            "sojourn: not measured (--timestamps off, --no-timestamps or --light)"
        );
    }
    let r = &s.receiver;
    if r.replied {
        let _ = writeln!(
            out,
            "receiver: {} read, goodput {}{}",
            Bytes(r.bytes.unwrap_or(0)),
            BitRate(r.goodput_bps.unwrap_or(0.0)),
            match (r.messages, r.latency_p50_us) {
                (Some(n), Some(p50)) if n > 0 => format!(
                    "; one-way latency of {n} messages p50 {}  p95 {}  max {} ({})",
                    Micros(p50),
                    opt_micros(r.latency_p95_us),
                    opt_micros(r.latency_max_us),
                    if r.clocks_shared == Some(true) {
                        "same host clock: exact"
                    } else {
                        "different hosts: as good as their clock sync"
                    }
                ),
                _ => String::new(),
            }
        );
    } else if let Some(e) = &r.error {
        let _ = writeln!(out, "receiver: {e}");
    }
    if let Some(b) = &s.bpf {
        let _ = writeln!(
            out,
            "bpf: drain rate {} ({}), threshold {}, lowat {}; {} updates from {} rate samples ({} app-limited not used, {} spikes dropped){}",
            BitRate(b.rate_bytes_per_s as f64 * 8.0),
            b.rate_source,
            Bytes(b.threshold_bytes),
            Bytes(u64::from(b.lowat_bytes)),
            b.updates,
            b.samples,
            b.app_limited_skipped,
            b.spikes_dropped,
            if b.setsockopt_errors > 0 {
                format!(
                    "; bpf_setsockopt failed {} times (last error {})",
                    b.setsockopt_errors, b.last_error
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(c) = &s.content_age {
        let _ = writeln!(
            out,
            "source: {}; after the warm-up {} generated ({}), {} written, {} dropped as stale, {} unwritten at the end",
            c.description,
            c.generated,
            BitRate(c.generated_bps),
            c.written,
            c.dropped,
            c.unwritten
        );
        let _ = writeln!(
            out,
            "content age at write start: {}",
            percentiles_line(&c.at_write_start)
        );
        if s.config.timestamps {
            let _ = writeln!(
                out,
                "content age at departure:   {}",
                percentiles_line(&c.at_depart)
            );
        } else {
            let _ = writeln!(
                out,
                "content age at departure:   not measured (--timestamps off, --no-timestamps or --light)"
            );
        }
        if c.received > 0 {
            let _ = writeln!(
                out,
                "content age at the sink:    {}",
                percentiles_line(&c.at_sink)
            );
        } else {
            let _ = writeln!(
                out,
                "content age at the sink:    not measured (needs --trip-times and the sink's reply)"
            );
        }
    }
    if !s.trip_estimators.is_empty() {
        let _ = writeln!(out, "sender-side estimates − sink truth (median / p95):");
        for e in &s.trip_estimators {
            let f = |v: Option<i64>| {
                v.map_or("-".to_string(), |x| format!("{:+.1} ms", x as f64 / 1e3))
            };
            let _ = writeln!(
                out,
                "  {:<16} {:>11} / {:>11}  (n = {})",
                e.name,
                f(e.median_error_us),
                f(e.p95_error_us),
                e.count
            );
        }
    }
    let _ = write!(
        out,
        "{}: {}",
        if s.complete { "complete" } else { "INCOMPLETE" },
        s.end_reason
    );
    if let Some(e) = &s.error {
        let _ = write!(out, " ({e})");
    }
    out
}

/// The readiness rule in one line.
pub fn policy_line(p: &crate::replenish::PolicyReport) -> String {
    match p.kind.as_ref() {
        "replenish" => format!(
            "policy: TCP_REPLENISH_TIME {} us, {} impl{}{}",
            p.replenish_time_us.unwrap_or(0),
            p.implementation.map_or("?", |i| match i {
                crate::replenish::ReplenishImpl::Kernel => "kernel",
                crate::replenish::ReplenishImpl::Emulated => "emulated (NOTSENT_LOWAT wakeups)",
                crate::replenish::ReplenishImpl::EmulatedTimer => "emulated (timer wakeups)",
                crate::replenish::ReplenishImpl::Auto => "auto",
                crate::replenish::ReplenishImpl::Bpf => "bpf (sock_ops sets NOTSENT_LOWAT)",
            }),
            p.optname
                .map_or(String::new(), |n| format!(" (option {n})")),
            policy_details(p)
        ),
        "notsent-lowat" => "policy: TCP_NOTSENT_LOWAT (kernel readiness)".into(),
        _ => "policy: default (kernel readiness, no threshold)".into(),
    }
}

/// ", sub-MSS clause on, rate estimator delivery, threshold test hysteresis" and the like:
/// what the run's rule used, as far as it is known.
fn policy_details(p: &crate::replenish::PolicyReport) -> String {
    let mut parts = vec![];
    if let Some(c) = p.sub_mss_clause {
        parts.push(format!("sub-MSS clause {}", if c { "on" } else { "off" }));
    }
    if let Some(e) = p.rate_estimator {
        parts.push(format!("rate estimator {}", e.name()));
    }
    if let Some(t) = p.threshold_test {
        parts.push(format!("threshold test {}", t.name()));
    }
    if let Some(k) = p.kernel_estimator {
        parts.push(format!("net.ipv4.tcp_replenish_estimator {k}"));
    }
    parts.iter().map(|x| format!(", {x}")).collect()
}

pub fn sink_interval_line(r: &SinkIntervalRow) -> String {
    format!(
        "[{:>3}] {:<13} {:>11} {:>13}{}",
        r.conn,
        format!("{:.2}-{:.2} s", r.start_s, r.end_s),
        Bytes(r.bytes).to_string(),
        BitRate(r.goodput_bps).to_string(),
        if r.kind == "total" {
            format!("  total from {}", r.peer)
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_line_shows_measured_and_unmeasured_values() {
        let r = IntervalRow {
            start_s: 1.0,
            end_s: 2.0,
            bytes_acked: 250_000,
            goodput_bps: 2_000_000.0,
            writes: 4,
            sojourn_p50_us: Some(280_000),
            sojourn_p95_us: Some(370_000),
            sojourn_max_us: None,
            notsent_bytes: Some(65_536),
            cwnd: 30,
            srtt_us: 172_300,
            warmup: true,
            ..Default::default()
        };
        let line = send_interval_line(&r);
        assert!(line.contains("1.00-2.00 s"), "{line}");
        assert!(line.contains("2.00 Mbit/s"), "{line}");
        assert!(line.contains("280.0 ms / 370.0 ms / -"), "{line}");
        assert!(line.contains("64.0 KiB"), "{line}");
        assert!(line.contains("172.3 ms"), "{line}");
        assert!(line.ends_with("(warm-up)"), "{line}");
    }
}
