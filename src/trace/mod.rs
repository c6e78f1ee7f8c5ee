//! sbm-trace: per-write source-buffer delay of unmodified programs, with BPF.
//!
//! - [`cli`]: the command line;
//! - [`conn`]: one connection's events into rows (sbm-send's write ledger for attribution,
//!   the per-packet departures for the exact departure of every write's last byte);
//! - [`run`]: the cgroup, the programs, the command and the event loop.

pub mod cli;
pub mod conn;
pub mod run;

use std::fmt::Write as _;

/// Set in the environment of the command sbm-trace runs: the cgroup it traces. A program
/// that would leave that cgroup for one of its own (sbm-send's BPF programs) would leave
/// the trace too.
pub const TRACED_ENV: &str = "SBM_TRACED_CGROUP";

use crate::report::schema::TraceSummary;
use crate::units::{Bytes, Micros};

/// The human summary printed at the end.
pub fn summary_text(s: &TraceSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sbm-trace: {} after {:.1} s: {} connection(s); {} events ({:.0}/s, {} lost), sbm-trace used {:.1} % of a CPU",
        s.end_reason,
        s.duration_s,
        s.connections.len(),
        s.events,
        s.events_per_s,
        s.events_lost,
        100.0 * s.cpu_share
    );
    let p = |v: Option<u64>| v.map_or("-".to_string(), |v| Micros(v).to_string());
    for c in &s.connections {
        let _ = writeln!(
            out,
            "[conn {}] {} -> {}: {} writes, {} written, {} acked; sojourn to departure p50 {} p95 {} (n={}); TX_SCHED p50 {} p95 {} (n={}){}",
            c.id,
            c.local,
            c.remote,
            c.writes,
            Bytes(c.bytes_written),
            Bytes(c.bytes_acked),
            p(c.sojourn_depart.p50_us),
            p(c.sojourn_depart.p95_us),
            c.sojourn_depart.count,
            p(c.sojourn.p50_us),
            p(c.sojourn.p95_us),
            c.sojourn.count,
            match c.timestamping_error {
                Some(e) => format!("; no TX timestamps (the kernel refused BPF TX timestamping: error {e}; it needs Linux 6.15+)"),
                None if !s.timestamping => "; TX timestamps off (--no-timestamps)".into(),
                None if !s.departures => "; departures off (--no-departures)".into(),
                None => String::new(),
            }
        );
    }
    out
}

pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    crate::cli::main_with(args, |a: cli::TraceArgs| {
        if a.json {
            crate::cli::move_human_text_to_stderr();
        }
        let cfg = run::TraceConfig {
            command: a.command,
            cgroup: a.cgroup,
            time: a.time,
            port: a.port,
            out: a.out,
            interval: a.interval,
            warmup: a.warmup,
            timestamping: !a.no_timestamps,
            departures: !a.no_departures,
            congestion: a.cc,
            replenish: a
                .replenish_time
                .map(|time| crate::bpf::replenish::Settings {
                    time,
                    wake: match a.threshold_test {
                        crate::replenish::ThresholdTest::Hysteresis => {
                            crate::bpf::replenish::Wake::AtThreshold
                        }
                        crate::replenish::ThresholdTest::Half => {
                            crate::bpf::replenish::Wake::AtHalf
                        }
                    },
                    sub_mss: crate::bpf::replenish::SubMss::WithNagle,
                    port: a.port,
                }),
            quiet: a.quiet,
        };
        let summary = run::run(&cfg).map_err(crate::cli::Failure::env)?;
        if a.json {
            crate::cli::print_json_document(&summary);
        } else {
            crate::say!("{}", summary_text(&summary).trim_end());
        }
        Ok(match summary.exit_status {
            Some(0) | None => 0,
            Some(_) => 1,
        })
    })
}
