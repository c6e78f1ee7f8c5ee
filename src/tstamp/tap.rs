//! What sbm's BPF program on the socket's cgroup tells sbm-send about its own connection:
//! the exact departure of every write's last byte (`--exact-departures`) and each write's
//! TX reports (`--timestamps bpf`), both from `bpf/trace.bpf.c` (`crate::bpf::send_tap`).
//!
//! The loop reads it when it wakes anyway, never on a wakeup of its own: it must not wake
//! the loop, or it could stand in for a readiness wakeup the kernel did not give.

use serde::{Deserialize, Serialize};

use super::cmsg::RawReport;
use super::departures::ExactDepartureReport;

pub trait ProgramTap {
    /// The first `n` bytes of the stream are not the measured writes' (the trip-times hello).
    fn skip_bytes(&mut self, n: u64);
    /// A measured write of `seq` ending at measured-stream offset `end`, at `write_ns`.
    fn on_write(&mut self, seq: u64, end: u64, write_ns: u64);
    /// Takes what the program has queued so far, without waiting.
    fn collect(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
    /// The TX reports collected so far, in the order the kernel gave them, keyed as
    /// SO_TIMESTAMPING's OPT_ID_TCP would key them (the last byte's measured-stream offset,
    /// its low 32 bits) and timed on CLOCK_REALTIME. Empty unless the tap was started for
    /// timestamps.
    fn take_reports(&mut self, out: &mut Vec<RawReport>);
    /// Enabling BPF TX timestamping on the connection failed with this error (the kernel
    /// gives no reports then).
    fn timestamping_error(&self) -> Option<i32>;
    /// The exact departure of write `seq`'s last byte, once.
    fn take(&mut self, seq: u64) -> Option<u64>;
    /// Whether the write ending at `end` had its TX reports carried by a later segment than
    /// its last byte's (asked once per write, when its row becomes final).
    fn take_displaced(&mut self, end: u64) -> bool;
    /// What the departures were (summary.json `exact_departures`).
    fn report(&self) -> ExactDepartureReport;
    /// What the TX reports were (summary.json `bpf_timestamps`).
    fn timestamps_report(&self) -> BpfTimestampsReport;
}

/// summary.json `bpf_timestamps` (sbm-send --timestamps bpf): how the program's reports went.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct BpfTimestampsReport {
    /// SCHED, SND and ACK reports for the measured writes.
    pub reports: u64,
    /// Reports for bytes before the measured stream (the trip-times hello): not counted.
    pub before_stream: u64,
    /// Events the program could not queue (ring buffer full: their writes miss the report)
    /// and records that did not decode.
    pub events_lost: u64,
    pub events_malformed: u64,
}
