//! Every row and document sbm writes. Field names are the CSV headers and JSON keys;
//! docs/output.md documents each of them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::replenish::{BpfSocketState, PolicyReport};
use crate::sockopt::{OptionReport, TimestampingMode};
use crate::stats::Percentiles;
use crate::tstamp::departures::ExactDepartureReport;
use crate::tstamp::sampler::Departure;
use crate::tstamp::tap::BpfTimestampsReport;
use crate::tstamp::TimedWrite;

/// writes.csv: one row per accepted write.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WriteRow {
    pub seq: u64,
    pub write_ns: u64,
    pub bytes_asked: u32,
    pub bytes_accepted: u32,
    pub end_offset: u64,
    pub notsent_before: u32,
    /// Not read with --no-timestamps (one syscall less per write in that mode).
    pub notsent_after: Option<u32>,
    pub sched_ns: Option<u64>,
    pub snd_ns: Option<u64>,
    pub ack_ns: Option<u64>,
    pub sojourn_us: Option<u64>,
    pub attribution: &'static str,
    pub snd_state: &'static str,
    pub ack_state: &'static str,
    pub warmup: bool,
    /// Why the write was invited.
    pub invite_reason: &'static str,
    pub threshold_bytes: Option<u64>,
    /// Previous write's sched_ns − this write_ns, µs.
    pub advance_us: Option<i64>,
    /// The snd_nxt sampler's bracket of the write's departure.
    pub depart_lo_ns: Option<u64>,
    pub depart_hi_ns: Option<u64>,
    /// Bracket midpoint − write_ns, and half the bracket, µs.
    pub sampled_sojourn_us: Option<u64>,
    pub sampled_error_us: Option<u64>,
    /// The exact departure of the write's last byte from per-packet sequence numbers
    /// (sbm-send --exact-departures, sbm-trace), and its − write_ns, µs.
    pub depart_exact_ns: Option<u64>,
    pub depart_exact_sojourn_us: Option<u64>,
}

impl WriteRow {
    pub fn new(
        w: &TimedWrite,
        warmup: bool,
        advance_us: Option<i64>,
        departure: Option<Departure>,
        exact_departure: Option<u64>,
    ) -> WriteRow {
        WriteRow {
            seq: w.write.seq,
            write_ns: w.write.write_ns,
            bytes_asked: w.write.asked,
            bytes_accepted: w.write.accepted,
            end_offset: w.write.end_offset,
            notsent_before: w.write.notsent_before,
            notsent_after: w.write.notsent_after,
            sched_ns: w.sched.time_ns,
            snd_ns: w.snd.time_ns,
            ack_ns: w.ack.time_ns,
            sojourn_us: w.sojourn_us(),
            attribution: w.sched.state.name(),
            snd_state: w.snd.state.name(),
            ack_state: w.ack.state.name(),
            warmup,
            invite_reason: w.write.reason,
            threshold_bytes: w.write.threshold,
            advance_us,
            depart_lo_ns: departure.map(|d| d.lo_ns),
            depart_hi_ns: departure.map(|d| d.hi_ns),
            sampled_sojourn_us: departure
                .map(|d| d.estimate_ns().saturating_sub(w.write.write_ns) / 1_000),
            sampled_error_us: departure.map(|d| d.error_ns() / 1_000),
            depart_exact_ns: exact_departure,
            depart_exact_sojourn_us: exact_departure
                .map(|t| t.saturating_sub(w.write.write_ns) / 1_000),
        }
    }
}

impl crate::report::csv_row::CsvRow for WriteRow {
    const FIELDS: &'static [&'static str] = &[
        "seq",
        "write_ns",
        "bytes_asked",
        "bytes_accepted",
        "end_offset",
        "notsent_before",
        "notsent_after",
        "sched_ns",
        "snd_ns",
        "ack_ns",
        "sojourn_us",
        "attribution",
        "snd_state",
        "ack_state",
        "warmup",
        "invite_reason",
        "threshold_bytes",
        "advance_us",
        "depart_lo_ns",
        "depart_hi_ns",
        "sampled_sojourn_us",
        "sampled_error_us",
        "depart_exact_ns",
        "depart_exact_sojourn_us",
    ];

    fn fields(&self, l: &mut crate::report::csv_row::Line<'_>) {
        l.u64(self.seq);
        l.u64(self.write_ns);
        l.u64(u64::from(self.bytes_asked));
        l.u64(u64::from(self.bytes_accepted));
        l.u64(self.end_offset);
        l.u64(u64::from(self.notsent_before));
        l.opt_u64(self.notsent_after.map(u64::from));
        l.opt_u64(self.sched_ns);
        l.opt_u64(self.snd_ns);
        l.opt_u64(self.ack_ns);
        l.opt_u64(self.sojourn_us);
        l.str(self.attribution);
        l.str(self.snd_state);
        l.str(self.ack_state);
        l.bool(self.warmup);
        l.str(self.invite_reason);
        l.opt_u64(self.threshold_bytes);
        l.opt_i64(self.advance_us);
        l.opt_u64(self.depart_lo_ns);
        l.opt_u64(self.depart_hi_ns);
        l.opt_u64(self.sampled_sojourn_us);
        l.opt_u64(self.sampled_error_us);
        l.opt_u64(self.depart_exact_ns);
        l.opt_u64(self.depart_exact_sojourn_us);
    }
}

/// intervals.csv (sender): one row per reporting interval.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct IntervalRow {
    pub start_s: f64,
    pub end_s: f64,
    pub warmup: bool,
    pub bytes_written: u64,
    pub bytes_acked: u64,
    pub goodput_bps: f64,
    pub writes: u64,
    pub short_writes: u64,
    pub would_block: u64,
    pub invitations: u64,
    pub sched_reports: u64,
    /// Of those, writes with their own (exact) report.
    pub exact_reports: u64,
    pub sojourn_p50_us: Option<u64>,
    pub sojourn_p95_us: Option<u64>,
    pub sojourn_max_us: Option<u64>,
    /// The snd_nxt sampler's sojourn of the writes that became final in the interval.
    pub sampled_p50_us: Option<u64>,
    pub sampled_p95_us: Option<u64>,
    /// writes × srtt ÷ interval: writes per round trip.
    pub writes_per_rtt: f64,
    pub notsent_bytes: Option<u32>,
    pub cwnd: u32,
    pub mss: u32,
    pub srtt_us: u32,
    pub min_rtt_us: Option<u32>,
    pub delivery_rate_bps: Option<u64>,
    pub delivery_app_limited: bool,
    pub pacing_rate_bps: Option<u64>,
    pub retransmits: u32,
    pub busy_us: Option<u64>,
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
    /// The readiness threshold at the interval's end: lowat, or replenish rate × T.
    pub threshold_bytes: Option<u64>,
    /// The emulation's drain-rate estimate, bit/s, and where it came from.
    pub drain_rate_bps: Option<f64>,
    pub rate_source: Cow<'static, str>,
    /// TCP_NOTSENT_LOWAT as set on the socket at the interval's end.
    pub lowat_bytes: Option<u32>,
    /// BBR's state at the interval's end (TCP_CC_INFO; empty for other algorithms):
    /// bandwidth estimate, min_rtt, pacing and cwnd gains (1.0 = unity).
    pub bbr_bw_bps: Option<u64>,
    pub bbr_min_rtt_us: Option<u32>,
    pub bbr_pacing_gain: Option<f64>,
    pub bbr_cwnd_gain: Option<f64>,
    /// BBR's mode read from those gains (STARTUP, DRAIN, PROBE_BW, PROBE_RTT; empty for other
    /// algorithms), its BDP estimate (bandwidth × min_rtt: its in-flight target at unit
    /// gain) and the bytes actually in flight (tcpi_unacked × MSS) at the interval's end.
    pub bbr_mode: Cow<'static, str>,
    pub bbr_bdp_bytes: Option<u64>,
    pub inflight_bytes: u64,
}

/// sink-intervals.csv: one row per connection per interval, and one total row per
/// connection at its close (`kind` = interval | total).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SinkIntervalRow {
    pub conn: u64,
    pub peer: String,
    pub kind: &'static str,
    pub start_s: f64,
    pub end_s: f64,
    pub bytes: u64,
    pub goodput_bps: f64,
    /// One-way latency of trip-timed messages completed in the interval (read − write).
    pub messages: u64,
    pub latency_p50_us: Option<u64>,
    pub latency_p95_us: Option<u64>,
    pub latency_max_us: Option<u64>,
    /// Of `bytes`, those the kernel discarded without copying them to the sink
    /// (recv with MSG_TRUNC, as iperf3's --skip-rx-copy: plain streams, unless --copy-reads).
    pub uncopied_bytes: u64,
}

impl SinkIntervalRow {
    /// A row of `bytes` read over `start`..`end` (since the connection began), with no
    /// trip-timed message in it; the sink fills in the latencies where it has them.
    pub fn counted(
        conn: u64,
        peer: String,
        kind: &'static str,
        start: std::time::Duration,
        end: std::time::Duration,
        bytes: u64,
    ) -> SinkIntervalRow {
        SinkIntervalRow {
            conn,
            peer,
            kind,
            start_s: start.as_secs_f64(),
            end_s: end.as_secs_f64(),
            bytes,
            goodput_bps: crate::units::bits_per_second(bytes, end.saturating_sub(start)),
            messages: 0,
            latency_p50_us: None,
            latency_p95_us: None,
            latency_max_us: None,
            uncopied_bytes: 0,
        }
    }
}

/// The run's limits and loop settings as resolved from the command line.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RunConfig {
    pub write_size: u32,
    pub time_limit_s: Option<f64>,
    pub bytes_limit: Option<u64>,
    pub writes_limit: Option<u64>,
    pub interval_s: f64,
    pub warmup_s: f64,
    pub epoll: Cow<'static, str>,
    /// Writes per kernel-readiness invitation at most (`--burst`; 1 = one per invitation).
    pub burst: u32,
    /// `--paced-start`: the opening phase of one write per RTT, s.
    pub paced_start_s: Option<f64>,
    pub timestamps: bool,
    /// Where the TX reports came from: "socket" (SO_TIMESTAMPING) or "bpf" (BPF TX
    /// timestamping); absent when writes were not timed or before this field existed
    /// (then "socket").
    pub timestamp_source: Option<Cow<'static, str>>,
    /// Why `--timestamps auto` (the default) chose the source ("auto: bpf (…)"); absent
    /// when the command line named it.
    pub timestamp_note: Option<String>,
    pub drain_timeout_s: Option<f64>,
}

/// Totals over the writing phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Totals {
    /// From the first write to the end of writing, s.
    pub duration_s: f64,
    pub bytes_written: u64,
    pub bytes_acked: u64,
    pub writes: u64,
    pub short_writes: u64,
    pub would_block: u64,
    pub invitations: u64,
    pub retransmits: u32,
    /// `goodput_bytes` over `goodput_window_s`, in bits per second (schema 2; schema 1 had
    /// every byte acknowledged in the window, which counted bytes already in flight when
    /// the warm-up ended and could exceed the bottleneck).
    pub goodput_bps: f64,
    /// Bytes that entered the network after the warm-up ended (beyond snd_nxt at that
    /// instant) and were acknowledged by the end of writing: every one of them crossed the
    /// bottleneck inside the window.
    pub goodput_bytes: u64,
    /// From the end of the warm-up to the end of writing, s.
    pub goodput_window_s: f64,
}

/// Rows per attribution state of their SCHED time (after warm-up and in all).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct AttributionCounts {
    pub exact: u64,
    pub coalesced: u64,
    pub missing: u64,
    pub unsent: u64,
    pub off: u64,
    /// sbm-trace only: reports the kernel made for a later segment than the write's last
    /// byte's (see `stamps_displaced`).
    pub displaced: u64,
}

impl AttributionCounts {
    pub fn add(&mut self, state: &str) {
        match state {
            "exact" => self.exact += 1,
            "coalesced" => self.coalesced += 1,
            "missing" => self.missing += 1,
            "unsent" => self.unsent += 1,
            "displaced" => self.displaced += 1,
            _ => self.off += 1,
        }
    }
}

/// CPU time and peak memory of the process.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Resources {
    pub user_s: f64,
    pub sys_s: f64,
    pub max_rss_kib: u64,
}

impl Resources {
    pub fn of_self() -> Resources {
        use nix::sys::resource::{getrusage, UsageWho};
        match getrusage(UsageWho::RUSAGE_SELF) {
            Ok(u) => {
                let secs =
                    |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
                Resources {
                    user_s: secs(u.user_time()),
                    sys_s: secs(u.system_time()),
                    // getrusage's peak survives exec: started from a large parent (the
                    // bench's Python), it reports the parent. VmHWM belongs to this image.
                    max_rss_kib: peak_rss_kib(
                        &std::fs::read_to_string("/proc/self/status").unwrap_or_default(),
                    )
                    .unwrap_or(u.max_rss().max(0) as u64),
                }
            }
            Err(_) => Resources::default(),
        }
    }
}

/// `VmHWM` (peak resident set of this process image, KiB) from /proc/PID/status text.
pub fn peak_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// What the sink reported back.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ReceiverView {
    pub replied: bool,
    /// Why there is no reply (timeout, not an sbm-sink, run failed).
    pub error: Option<String>,
    pub bytes: Option<u64>,
    pub goodput_bps: Option<f64>,
    /// Same boot id at both ends: one-way latencies are exact.
    pub clocks_shared: Option<bool>,
    pub messages: Option<u64>,
    pub latency_p50_us: Option<u64>,
    pub latency_p95_us: Option<u64>,
    pub latency_max_us: Option<u64>,
}

/// The second departure estimator's settings and work.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SamplingReport {
    pub interval_us: u64,
    pub samples: u64,
    pub eor: bool,
}

/// What came off the error queue.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ReportCounts {
    pub sched: u64,
    pub snd: u64,
    pub ack: u64,
    pub repeated: u64,
    pub stale: u64,
    pub other: u64,
    pub truncated: u64,
}

/// The end-of-run wait for outstanding reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct DrainReport {
    pub waited_s: f64,
    pub timeout_s: f64,
    pub timed_out: bool,
    /// Writes without their final reports when the wait ended.
    pub pending_writes: u64,
    pub notsent_at_end: u32,
}

/// One line of frames.csv: a unit of an application-limited source's content (a frame,
/// or a paced chunk) from its generation to the sink. Times are CLOCK_REALTIME ns; ages
/// are µs after the content time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FrameRow {
    /// From 1, in generation order.
    pub frame: u64,
    pub bytes: u32,
    /// When the source's clock generated it (render: when the invitation made it).
    pub content_ns: u64,
    /// Generated during the warm-up.
    pub warmup: bool,
    /// written, dropped (stale: a newer frame was ready before its writing started), or
    /// unwritten (still in the application when writing ended).
    pub fate: Cow<'static, str>,
    /// Its trip-times message (--trip-times).
    pub message: Option<u64>,
    pub writes: u32,
    pub write_start_ns: Option<u64>,
    pub write_end_ns: Option<u64>,
    /// Departure of its last byte from the socket: the snd_nxt sampler's estimate, or its
    /// last write's TX_SCHED time without a sampler.
    pub depart_ns: Option<u64>,
    /// sampler or sched.
    pub depart_source: Cow<'static, str>,
    /// When the sink's read returned its last byte.
    pub sink_read_ns: Option<u64>,
    pub age_write_start_us: Option<u64>,
    pub age_write_end_us: Option<u64>,
    pub age_depart_us: Option<u64>,
    pub age_sink_us: Option<u64>,
}

impl FrameRow {
    /// A frame with nothing yet known beyond its generation (fate as given).
    pub fn generated(
        frame: u64,
        bytes: u32,
        content_ns: u64,
        warmup: bool,
        fate: &'static str,
    ) -> FrameRow {
        FrameRow {
            frame,
            bytes,
            content_ns,
            warmup,
            fate: Cow::Borrowed(fate),
            message: None,
            writes: 0,
            write_start_ns: None,
            write_end_ns: None,
            depart_ns: None,
            depart_source: Cow::Borrowed(""),
            sink_read_ns: None,
            age_write_start_us: None,
            age_write_end_us: None,
            age_depart_us: None,
            age_sink_us: None,
        }
    }
}

/// One line of content-age.csv: the frames generated in one interval (by content time),
/// what became of them, and their ages.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ContentAgeRow {
    pub start_s: f64,
    pub end_s: f64,
    pub warmup: bool,
    pub generated: u64,
    pub written: u64,
    pub dropped: u64,
    pub received: u64,
    pub depart_p50_us: Option<u64>,
    pub depart_p95_us: Option<u64>,
    pub depart_max_us: Option<u64>,
    pub sink_p50_us: Option<u64>,
    pub sink_p95_us: Option<u64>,
    pub sink_max_us: Option<u64>,
}

/// summary.json's `content_age`: an application-limited source's frames after the warm-up
/// (by content time) and how old they were at each stage.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ContentAgeSummary {
    /// paced, frames or render.
    pub source: String,
    /// The source in words (rate, frame clock, sizes, stale policy).
    pub description: String,
    pub generated: u64,
    pub written: u64,
    pub dropped: u64,
    pub unwritten: u64,
    /// Frames whose last byte the sink reported reading.
    pub received: u64,
    pub at_write_start: Percentiles,
    pub at_depart: Percentiles,
    pub at_sink: Percentiles,
    /// Mean rate of the content generated after the warm-up, bits/s.
    pub generated_bps: f64,
}

/// One line of messages.csv: the sender's estimates beside the sink's truth, µs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TripMessageRow {
    pub seq: u64,
    pub write_ns: u64,
    pub sched_ns: Option<u64>,
    pub ack_ns: Option<u64>,
    pub exact: bool,
    pub srtt_us: u32,
    pub sink_read_ns: Option<u64>,
    pub truth_us: Option<i64>,
    pub sojourn_us: Option<i64>,
    pub ack_us: Option<i64>,
    pub sojourn_half_rtt_us: Option<i64>,
    pub sojourn_rtt_us: Option<i64>,
    pub ack_minus_half_rtt_us: Option<i64>,
}

/// One estimator's error against the sink: estimate − truth, µs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct EstimatorError {
    pub name: Cow<'static, str>,
    pub count: u64,
    pub median_error_us: Option<i64>,
    pub p95_error_us: Option<i64>,
}

/// One finished message, for sink-messages.csv.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SinkMessageRow {
    pub conn: u64,
    pub seq: u64,
    pub bytes: u32,
    pub write_ns: u64,
    pub read_ns: u64,
    /// read_ns − write_ns; negative only if the clocks disagree.
    pub latency_us: i64,
    /// read_ns − the content time in the header (version 2: an application-limited
    /// source's content is older than its write; bulk data: = latency_us).
    pub content_age_us: i64,
}

/// What the sink sends back after the sender half-closes: its view of the connection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SinkReply {
    pub sbm_version: Cow<'static, str>,
    pub boot_id: Option<String>,
    /// The sender's boot id from its hello (trip-timed streams).
    pub peer_boot_id: Option<String>,
    /// true: same host, latencies exact; false: only as good as the hosts' clock sync.
    pub clocks_shared: Option<bool>,
    pub bytes: u64,
    pub duration_s: f64,
    pub goodput_bps: f64,
    pub trip_times: bool,
    pub messages: u64,
    pub latency: Percentiles,
    /// Age of the content when its message's last byte was read (read − content time).
    pub content_age: Percentiles,
    pub negative_latencies: u64,
    /// (sequence, read time ns) of each message, for the sender's estimator comparison
    /// (left out where there are none: the sender stores the reply without them, as
    /// sink-summary.json, after writing them to messages.csv).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_times: Vec<(u64, u64)>,
    pub read_times_truncated: bool,
    /// Whether the sink asked for an immediate ACK after each read (sbm-sink --ack); None
    /// from sinks that did not say.
    pub quickack: Option<bool>,
}

/// OUT/conn-N/summary.json of sbm-trace: one traced connection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TraceConnSummary {
    /// N of conn-N, in the order connections were established.
    pub id: u32,
    /// The kernel's socket cookie.
    pub cookie: u64,
    pub local: String,
    pub remote: String,
    pub established_unix_ns: u64,
    /// The connection closed while traced.
    pub closed: bool,
    /// Send calls that queued data, and their bytes.
    pub writes: u64,
    pub bytes_written: u64,
    /// Bytes that left the socket (highest sequence number sent) and were acknowledged.
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    /// Bytes acknowledged after the warm-up over the time from the warm-up's end to the
    /// last acknowledgement the program reported (sbm-send's goodput, as seen by the
    /// connection's events), and that window, s.
    pub goodput_bps: f64,
    pub goodput_window_s: f64,
    /// Sojourn from the TX_SCHED reports over every row with a time (exact, coalesced,
    /// displaced) after the warm-up.
    pub sojourn: Percentiles,
    /// The exact departure of each write's last byte − its write time, after the warm-up.
    pub sojourn_depart: Percentiles,
    pub attribution_after_warmup: AttributionCounts,
    /// Reports and departures the program delivered for this connection.
    pub sched_reports: u64,
    pub snd_reports: u64,
    pub ack_reports: u64,
    pub departures: u64,
    /// Segments that left carrying a TX timestamp request for a byte they did not hold:
    /// the kernel had moved that byte into an earlier segment and left the request behind
    /// (tcp_grow_skb() does, in 6.12 and 6.18, when it tops up a segment from the next one and
    /// does not empty it), so the write's reports are a later segment's. Those rows'
    /// attribution is `displaced`; their exact departure is right.
    pub stamps_displaced: u64,
    /// `--cc` was asked and the kernel refused it on this connection (its error number).
    pub congestion_error: Option<i32>,
    /// The kernel refused BPF TX timestamping on this connection (its error number).
    pub timestamping_error: Option<i32>,
}

/// OUT/conn-N/intervals.csv of sbm-trace: one row per reporting interval of a connection
/// (the columns of sbm-send's intervals.csv that a tracer can know, under the same names).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceIntervalRow {
    /// Seconds since the trace started.
    pub start_s: f64,
    pub end_s: f64,
    /// The interval began before the connection's warm-up ended.
    pub warmup: bool,
    pub bytes_written: u64,
    /// Bytes that left the socket (per-packet departures) and were acknowledged.
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub goodput_bps: f64,
    pub writes: u64,
    /// Writes whose last byte departed in the interval, and their sojourn to departure.
    pub writes_departed: u64,
    pub departure_p50_us: Option<u64>,
    pub departure_p95_us: Option<u64>,
}

/// serde's default for a flag that was always on before it could be turned off.
fn yes() -> bool {
    true
}

/// OUT/trace.json of sbm-trace (and its -J output).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TraceSummary {
    pub schema_version: u32,
    pub sbm_version: Cow<'static, str>,
    pub kernel_release: String,
    /// The traced command (empty with --cgroup) and the cgroup it ran in.
    pub command: Vec<String>,
    pub cgroup: String,
    pub started_unix_ns: u64,
    pub duration_s: f64,
    pub end_reason: String,
    /// The command's exit status (None: killed by a signal, or --cgroup).
    pub exit_status: Option<i32>,
    /// BPF TX timestamping asked for (false: --no-timestamps).
    pub timestamping: bool,
    /// Per-packet departures recorded (false: --no-departures; absent before the option,
    /// when they always were).
    #[serde(default = "yes")]
    pub departures: bool,
    /// `--cc`: the congestion control set on every traced connection (None: not asked).
    pub congestion: Option<String>,
    pub port: Option<u16>,
    pub warmup_s: f64,
    /// --replenish-time, µs, when the BPF rule ran on the traced connections.
    pub replenish_time_us: Option<u64>,
    pub connections: Vec<TraceConnSummary>,
    /// The tracer's own cost: events taken from the ring buffer, their rate, events the
    /// program could not queue (ring buffer full) and records that did not decode; its CPU
    /// time (userspace and kernel time of sbm-trace itself, not of the BPF program).
    pub events: u64,
    pub events_per_s: f64,
    pub events_lost: u64,
    pub events_malformed: u64,
    pub resources: Resources,
    pub cpu_share: f64,
}

/// The version of summary.json's layout. Raised when a field changes meaning or goes;
/// new fields are added with defaults, so older summaries still read.
pub const SUMMARY_SCHEMA_VERSION: u32 = 2;

/// summary.json of sbm-send.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SendSummary {
    /// [`SUMMARY_SCHEMA_VERSION`] of the sbm that wrote it; 0 (absent) in summaries written
    /// before the version was recorded. Fields added over time read as their defaults.
    pub schema_version: u32,
    pub sbm_version: Cow<'static, str>,
    pub label: Option<String>,
    /// False when the run ended early (peer failure, signal before the limit).
    pub complete: bool,
    pub end_reason: String,
    pub error: Option<String>,
    pub local: String,
    pub peer: String,
    pub started_unix_ns: u64,
    pub kernel_release: String,
    pub sysctls: BTreeMap<String, String>,
    pub config: RunConfig,
    pub options: Vec<OptionReport>,
    pub warnings: Vec<String>,
    pub timestamping: Option<TimestampingMode>,
    /// What decided write readiness.
    pub policy: PolicyReport,
    pub mss: u32,
    /// tcpi_min_rtt at the end of the run, µs.
    pub min_rtt_us: Option<u32>,
    pub totals: Totals,
    /// Sojourn (sched − write) over exact and coalesced rows after the warm-up.
    pub sojourn: Percentiles,
    /// The same over exact rows only.
    pub sojourn_exact: Percentiles,
    /// The snd_nxt sampler's sojourn of every write after the warm-up (bracket midpoints).
    pub sojourn_sampled: Percentiles,
    /// Half-widths of those brackets.
    pub sampled_error: Percentiles,
    /// `--exact-departures`: the exact departure of every write's last byte − its write
    /// time, after the warm-up (empty without it), and what the estimator saw.
    pub sojourn_depart: Percentiles,
    pub exact_departures: Option<ExactDepartureReport>,
    /// `--timestamps bpf`: how the program's TX reports went.
    pub bpf_timestamps: Option<BpfTimestampsReport>,
    pub sampling: SamplingReport,
    /// sbm-send's own cost (getrusage): CPU seconds and peak resident memory.
    pub resources: Resources,
    /// The sink's view, from its reply after the sender half-closed.
    pub receiver: ReceiverView,
    /// With --trip-times: each sender-side estimate against the sink's one-way latency.
    pub trip_estimators: Vec<EstimatorError>,
    /// Application-limited sources only: the content's age (frames.csv, content-age.csv).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_age: Option<ContentAgeSummary>,
    /// `--replenish-impl bpf` only: the program's view of the socket at the end of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bpf: Option<BpfSocketState>,
    pub attribution: AttributionCounts,
    pub attribution_after_warmup: AttributionCounts,
    pub reports: ReportCounts,
    /// How long before the previous write's last byte left the socket each write was
    /// invited (after the warm-up, invitations that came in time).
    pub advance_notice: Percentiles,
    /// Invitations that came only after the previous backlog had run dry.
    pub invited_after_dry: u64,
    pub drain: DrainReport,
}

/// flows.json of `sbm-send -P N` (and its `-J` output): every flow's summary.json, and
/// what adds up across them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FlowsSummary {
    pub schema_version: u32,
    pub flows: Vec<SendSummary>,
    /// Flows that failed before they measured anything: (flow number, why).
    pub failed: Vec<(usize, String)>,
    pub sum: FlowsSum,
}

/// The sums over the flows that ran (sojourn stays per flow: percentiles do not add).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FlowsSum {
    pub flows: usize,
    pub complete: bool,
    /// The longest flow's, s.
    pub duration_s: f64,
    pub bytes_written: u64,
    pub bytes_acked: u64,
    pub writes: u64,
    pub retransmits: u64,
    pub goodput_bps: f64,
}

impl FlowsSum {
    pub fn of(flows: &[SendSummary]) -> FlowsSum {
        FlowsSum {
            flows: flows.len(),
            complete: flows.iter().all(|f| f.complete),
            duration_s: flows
                .iter()
                .map(|f| f.totals.duration_s)
                .fold(0.0, f64::max),
            bytes_written: flows.iter().map(|f| f.totals.bytes_written).sum(),
            bytes_acked: flows.iter().map(|f| f.totals.bytes_acked).sum(),
            writes: flows.iter().map(|f| f.totals.writes).sum(),
            retransmits: flows.iter().map(|f| u64::from(f.totals.retransmits)).sum(),
            goodput_bps: flows.iter().map(|f| f.totals.goodput_bps).sum(),
        }
    }
}

#[cfg(test)]
mod csv_row_tests {
    use super::*;
    use crate::report::csv_row::{CsvRow, Line};

    fn row(i: u64) -> WriteRow {
        let some = i % 2 == 0;
        WriteRow {
            seq: i,
            write_ns: 1_795_989_512_782_034_201 + i,
            bytes_asked: 65_536,
            bytes_accepted: 65_536 - i as u32,
            end_offset: 65_536 * i,
            notsent_before: 0,
            notsent_after: (i != 1).then_some(51_056),
            sched_ns: some.then_some(1_795_989_513_158_718_745),
            snd_ns: None,
            ack_ns: some.then_some(u64::MAX),
            sojourn_us: some.then_some(376_684),
            attribution: if some { "exact" } else { "coalesced" },
            snd_state: "absent",
            ack_state: "exact",
            warmup: some,
            invite_reason: if i == 3 {
                "odd, \"quoted\""
            } else {
                "below-half-threshold"
            },
            threshold_bytes: (!some).then_some(3650),
            advance_us: Some(if some { -313 } else { 42 }),
            depart_lo_ns: some.then_some(1),
            depart_hi_ns: None,
            sampled_sojourn_us: some.then_some(0),
            sampled_error_us: Some(459),
            depart_exact_ns: some.then_some(1_795_989_513_158_700_000),
            depart_exact_sojourn_us: some.then_some(376_665),
        }
    }

    #[test]
    fn peak_rss_from_proc_status() {
        let status = "Name:\tsbm-send\nVmPeak:\t  100 kB\nVmHWM:\t    4868 kB\nVmRSS:\t 4500 kB\n";
        assert_eq!(peak_rss_kib(status), Some(4868));
        assert_eq!(peak_rss_kib("Name:\tx\n"), None);
    }

    #[test]
    fn hand_formatted_rows_are_byte_for_byte_what_serde_writes() {
        let mut serde = csv::Writer::from_writer(vec![]);
        let mut fast = WriteRow::FIELDS.join(",").into_bytes();
        fast.push(b'\n');
        let mut line = vec![];
        for i in 0..6 {
            let r = row(i);
            serde.serialize(&r).unwrap();
            let mut l = Line::new(&mut line);
            r.fields(&mut l);
            l.end();
            fast.extend_from_slice(&line);
        }
        let serde = serde.into_inner().unwrap();
        assert_eq!(
            String::from_utf8(fast).unwrap(),
            String::from_utf8(serde).unwrap()
        );
    }
}
