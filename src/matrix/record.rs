//! The records a matrix run keeps per cell and reads back: how a cell ended (cell.json), its
//! row of summary.csv, and which estimator headlines it. The runners write them, the
//! exporters read them; this module knows neither.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// How a cell ended (cell.json `status`), or that it has not run (summary.csv only).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Failed,
    Interrupted,
    #[serde(rename = "not run")]
    NotRun,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
            Status::NotRun => "not run",
        }
    }
}

/// cell.json: how a cell's run ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CellStatus {
    pub name: String,
    pub status: Status,
    pub error: Option<String>,
    pub send_exit: Option<i32>,
    pub sink_exit: Option<i32>,
    pub started_unix_s: u64,
    pub ended_unix_s: u64,
    /// On real hosts: the sender/receiver pair that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<String>,
}

impl CellStatus {
    /// A cell's cell.json, in whichever form the cell is stored (None: it did not run).
    pub fn read(cell_dir: &Path) -> Option<CellStatus> {
        crate::report::compressed::read_json(&cell_dir.join("cell.json"))
    }

    /// A cell starting now: failed until its run says otherwise.
    pub fn starting(name: &str, pair: Option<String>) -> CellStatus {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        CellStatus {
            name: name.to_string(),
            status: Status::Failed,
            error: None,
            send_exit: None,
            sink_exit: None,
            started_unix_s: now,
            ended_unix_s: now,
            pair,
        }
    }
}

/// summary.csv: one row per cell.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SummaryRow {
    pub cell: String,
    pub rate: String,
    pub rate_bps: Option<u64>,
    pub config: String,
    pub label: String,
    pub write_size: String,
    pub nodelay: bool,
    pub cc: String,
    /// host | uml
    pub sender_kernel: String,
    pub cpu_quota: Option<u32>,
    /// The guest's share under CPU slices (the other contention model), percent.
    pub cpu_slices: Option<u32>,
    pub repetition: u32,
    pub status: Status,
    /// The summary.json layout the cell was measured with (0: no summary).
    pub summary_schema: u32,
    pub error: Option<String>,
    pub policy: Option<String>,
    pub goodput_bps: Option<f64>,
    pub sojourn_p50_us: Option<u64>,
    pub sojourn_p95_us: Option<u64>,
    pub sojourn_p99_us: Option<u64>,
    pub sojourn_exact_p50_us: Option<u64>,
    pub sojourn_exact_p95_us: Option<u64>,
    pub sampled_p50_us: Option<u64>,
    pub sampled_p95_us: Option<u64>,
    pub sampled_error_p50_us: Option<u64>,
    /// The exact departure of each write's last byte (per-packet sequence numbers) − its
    /// write time: sbm-send's `--exact-departures` (summary `sojourn_depart`) or a command
    /// cell's traced connection (sbm-trace's `sojourn_depart`).
    pub departure_p50_us: Option<u64>,
    pub departure_p95_us: Option<u64>,
    /// Writes after the warm-up whose last byte departed (the departure figures' n).
    pub departed: Option<u64>,
    pub exact: Option<u64>,
    pub coalesced: Option<u64>,
    pub missing: Option<u64>,
    pub unsent: Option<u64>,
    pub writes: Option<u64>,
    pub short_writes: Option<u64>,
    pub retransmits: Option<u64>,
    /// Retransmitted segments per segment acknowledged over the whole run
    /// (retransmits × MSS ÷ bytes acknowledged).
    pub retransmit_share: Option<f64>,
    pub min_rtt_us: Option<u64>,
    /// The median smoothed RTT over the intervals after the warm-up, and its ratio to the
    /// least RTT the connection saw: how far the bottleneck queue (and the sender's own
    /// queueing below TCP) inflated the round trip.
    pub srtt_p50_us: Option<u64>,
    pub rtt_inflation: Option<f64>,
    /// Writes per smoothed RTT, the median of the intervals after the warm-up.
    pub writes_per_rtt: Option<f64>,
    pub advance_p50_us: Option<u64>,
    pub invited_after_dry: Option<u64>,
    /// The guest's cgroup under a CPU quota (uml.json): share of periods throttled, time
    /// throttled, CPU time used.
    pub cpu_throttled_share: Option<f64>,
    pub cpu_throttled_us: Option<u64>,
    pub cpu_usage_us: Option<u64>,
    /// Application-limited sources: the content's age at the sink after the warm-up, and
    /// what became of the frames (summary.json `content_age`).
    pub content_source: Option<String>,
    pub content_age_p50_us: Option<u64>,
    pub content_age_p95_us: Option<u64>,
    pub content_age_max_us: Option<u64>,
    pub frames_generated: Option<u64>,
    pub frames_dropped: Option<u64>,
    /// With rate changes: the age's floor before the first change, and per change the
    /// seconds until the age was back at it (`;`-separated, `-`: not back).
    pub age_floor_us: Option<u64>,
    pub age_recovery_s: Option<String>,
    /// Cells of several flows (`-P N`, flows.json): how many, each one's goodput
    /// (`;`-separated, flow order) and Jain's fairness index over them; the cell's goodput,
    /// writes and retransmits are then the flows' sums.
    pub flows: Option<u32>,
    pub flow_goodputs_bps: Option<String>,
    pub jain_index: Option<f64>,
    /// BBR cells: the share of the intervals after the warm-up in each mode
    /// (`PROBE_BW=0.950;PROBE_RTT=0.050`, intervals.csv `bbr_mode`).
    pub bbr_mode_shares: Option<String>,
    /// The share of the intervals after the warm-up whose goodput was below half the
    /// bottleneck's rate: how much of a run a flow spent in a collapsed state (runs that
    /// flip between states differ here, not only in their mean).
    pub share_below_half_rate: Option<f64>,
}

/// Which sojourn estimator is a cell's headline figure (table.md, the progress line, the
/// goodput-against-sojourn plot). The exact departure covers every write without a bracket:
/// it is the headline where every run of the cell has it; next the snd_nxt sampler, which
/// covers every write and states its error bound; TX_SCHED (exact + coalesced reports)
/// otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headline {
    /// The exact per-packet departure (`--exact-departures`, or a command cell's trace).
    Departure,
    Sampled,
    Sched,
}

impl Headline {
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a SummaryRow>) -> Headline {
        let rows: Vec<&SummaryRow> = rows.into_iter().collect();
        if rows.iter().all(|r| r.departure_p50_us.is_some()) && !rows.is_empty() {
            Headline::Departure
        } else if rows.iter().all(|r| r.sampled_p50_us.is_some()) {
            Headline::Sampled
        } else {
            Headline::Sched
        }
    }

    pub fn p50(self, r: &SummaryRow) -> Option<u64> {
        match self {
            Headline::Departure => r.departure_p50_us,
            Headline::Sampled => r.sampled_p50_us,
            Headline::Sched => r.sojourn_p50_us,
        }
    }

    pub fn p95(self, r: &SummaryRow) -> Option<u64> {
        match self {
            Headline::Departure => r.departure_p95_us,
            Headline::Sampled => r.sampled_p95_us,
            Headline::Sched => r.sojourn_p95_us,
        }
    }

    /// The name summary.csv's aggregate and the notes use.
    pub fn name(self) -> &'static str {
        match self {
            Headline::Departure => "departure",
            Headline::Sampled => "sampled",
            Headline::Sched => "tx_sched",
        }
    }
}

/// meta.json of a cell: how it ran (versions, sysctls, command lines, the test bed before
/// and after). The one type that writes it (store) and reads it back (the report, the
/// pages, the rate-change markers); fields an older file lacks read as their defaults.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    pub sbm_version: String,
    pub git_commit: String,
    /// The machine sbm-matrix ran on (on real hosts, `hosts` describes both ends).
    pub kernel_release: String,
    pub sysctls: std::collections::BTreeMap<String, String>,
    pub cell: String,
    pub rate: String,
    pub config: String,
    pub label: String,
    pub write_size: String,
    pub nodelay: bool,
    pub cc: String,
    pub sender_kernel: String,
    pub cpu_quota: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_slices: Option<u32>,
    pub guest_sysctls: Vec<(String, String)>,
    /// sysctls set in the sender's namespace for the cell, with the values they replaced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ns_sysctls: Vec<AppliedSysctl>,
    /// `command` cells: sink_command is the client's, send_command sbm-trace's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    pub repetition: u32,
    pub sink_command: Vec<String>,
    pub send_command: Vec<String>,
    /// The test bed as `sbm-testbed status` described it before and after the cell (None:
    /// no emulated path, as on real hosts and in command cells without one).
    pub testbed_before: Option<crate::testbed::status::Status>,
    pub testbed_after: Option<crate::testbed::status::Status>,
    /// With a rate schedule: when the sender connected (the schedule's origin) and each
    /// change as it took effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_origin_unix_ns: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_changes: Vec<RateChange>,
    /// On real hosts: the pair, both ends before and after, clocks, the path's RTT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<HostsRecord>,
}

/// meta.json's `hosts` of a cell on real hosts: the pair, where it was shaped, the path's
/// round trip before the cell, both ends' clocks, and both ends described before and after.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostsRecord {
    pub pair: String,
    pub sender: String,
    pub receiver: String,
    /// The sink's address the sender connected to.
    pub sink: String,
    /// Where the bottleneck was installed (None: no rate, nothing shaped).
    pub shaping: Option<HostsShaping>,
    pub rtt_before: Measured<crate::testbed::hostinfo::RttProbe>,
    pub clocks: Clocks,
    pub sender_before: Measured<crate::testbed::hostinfo::HostInfo>,
    pub sender_after: Measured<crate::testbed::hostinfo::HostInfo>,
    pub receiver_before: Measured<crate::testbed::hostinfo::HostInfo>,
    pub receiver_after: Measured<crate::testbed::hostinfo::HostInfo>,
}

/// Where a real-host cell's bottleneck was: `receiver-ingress` or `sender-egress`, and the
/// device.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostsShaping {
    pub at: super::spec::pair::HostShaping,
    pub dev: String,
}

/// A reading, or why there is none (`{"not_measured": "…"}`). Read in that order: a
/// reading's type whose fields all have defaults would otherwise take the reason for one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Measured<T> {
    NotMeasured { not_measured: String },
    Value(T),
}

impl<T> From<Result<T, String>> for Measured<T> {
    fn from(r: Result<T, String>) -> Measured<T> {
        match r {
            Ok(v) => Measured::Value(v),
            Err(not_measured) => Measured::NotMeasured { not_measured },
        }
    }
}

/// One end's clock minus this machine's, with the ± bound of the reading (half the time
/// the ssh round trip around it took).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClockOffset {
    pub offset_ns: i64,
    pub bound_ns: u64,
}

/// The two ends' clocks as trip times need them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Clocks {
    /// None where not measured.
    pub sender: Option<ClockOffset>,
    pub receiver: Option<ClockOffset>,
    /// Whether one-way trip times between the two ends mean something, and why.
    pub trip_times_comparable: bool,
    pub why: String,
}

impl Meta {
    /// A cell's meta.json, in whichever form the cell is stored (None: missing or not a
    /// meta.json).
    pub fn read(cell_dir: &Path) -> Option<Meta> {
        crate::report::compressed::read_json(&cell_dir.join("meta.json"))
    }
}

/// A sysctl of the sender's namespace as a cell set it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppliedSysctl {
    pub name: String,
    pub value: String,
    pub previous: String,
}

/// meta.json's record of one change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RateChange {
    /// When it was due, seconds after the sender connected.
    pub at_s: f64,
    pub rate_bps: Option<u64>,
    /// The queue in bytes as installed (None: the change failed, or no shaping).
    pub queue_bytes: Option<u64>,
    /// When `set` was started, CLOCK_REALTIME ns: the change took effect between this and
    /// `applied_unix_ns` (None: a record from before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ns: Option<u64>,
    /// When `set` returned (the change in place), CLOCK_REALTIME ns and seconds after the
    /// sender connected.
    pub applied_unix_ns: u64,
    pub applied_s: f64,
    /// Why the change failed, if it did.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::hostinfo::RttProbe;

    #[test]
    fn a_reading_or_why_not_reads_back_as_written() {
        let probe = RttProbe {
            address: "198.18.0.2:5201".into(),
            samples_us: vec![172_000, 172_100],
            min_us: Some(172_000),
            errors: vec![],
        };
        let got: Measured<RttProbe> = Ok(probe).into();
        let text = serde_json::to_string(&got).unwrap();
        assert!(text.starts_with(r#"{"address":"#), "{text}");
        let back: Measured<RttProbe> = serde_json::from_str(&text).unwrap();
        assert!(matches!(back, Measured::Value(p) if p.min_us == Some(172_000)));
        let none: Measured<RttProbe> = Err("ssh: timed out".to_string()).into();
        let text = serde_json::to_string(&none).unwrap();
        assert_eq!(text, r#"{"not_measured":"ssh: timed out"}"#);
        let back: Measured<RttProbe> = serde_json::from_str(&text).unwrap();
        assert!(
            matches!(back, Measured::NotMeasured { ref not_measured } if not_measured == "ssh: timed out")
        );
    }
}
