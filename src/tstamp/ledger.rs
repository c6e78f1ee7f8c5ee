//! The write ledger: matches TX timestamp reports to the writes that produced them.
//!
//! With `SOF_TIMESTAMPING_OPT_ID | OPT_ID_TCP` enabled before the first write, a report's
//! key is the stream offset of the last byte of the write that last touched the reported
//! skb (net/ipv4/tcp.c `tcp_tx_timestamp`). Bytes leave in order, so the time of a write is
//! the time of the first report whose key is at or past its last byte:
//!
//! * `exact`: that key is the write's own last byte;
//! * `coalesced`: the key belongs to a later write, so the time is an upper bound for this
//!   write (bytes leave in order). Usually the later write was appended to the same skb
//!   and overwrote the key. Over a backlog that is most writes: the next write extends the
//!   unsent remainder of the skb holding this write's key and takes the request over, also
//!   after a short write with MSG_EOR on kernels without kernel/patches/0007
//!   (docs/tx-timestamps.md, results/tx-report-loss);
//! * `missing`: the skb that carried this write's bytes was reported in some other kind
//!   (its key is known as a boundary) but not in this one: the report was lost
//!   (error-queue overflow); or, where the exact departure of the write's last byte is
//!   known (BPF per-packet sequence numbers), the only report at or past it came more than
//!   [`COALESCED_SLACK_NS`] after that departure: another segment's time
//!   ([`TimedWrite::settle_with_departure`]);
//! * `unsent` / (for ACK) unacked: the run ended before the bytes got that far;
//! * `absent`: the device never produces this kind of report (TX_SND on a driver that
//!   does not call `skb_tx_timestamp`).
//!
//! Reports of one kind arrive in key order; a repeated or smaller key (retransmission,
//! tail-loss probe, stacked devices) is ignored. Keys are u32 and are unwrapped against the
//! number of bytes written so far.
//!
//! A write row is final once an ACK report covers it (ACK is the last of the three
//! events, and the error queue is FIFO, so every SCHED/SND report of the bytes it covers
//! has been seen or lost by then) or when the run is finished. SCHED attribution is also
//! offered provisionally when its report arrives, for per-interval statistics.

use std::collections::VecDeque;

use super::cmsg::RawReport;
use super::TxKind;

/// What the sender did: one accepted write, before the ledger places it in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IssuedWrite {
    pub seq: u64,
    /// CLOCK_REALTIME ns just before the write call (the timestamps' clock).
    pub write_ns: u64,
    pub asked: u32,
    pub accepted: u32,
    pub notsent_before: u32,
    pub notsent_after: Option<u32>,
    /// The readiness threshold (bytes) in force when the write was invited, if any.
    pub threshold: Option<u64>,
    /// Why the write was invited (`epollout` when the kernel's readiness decided).
    pub reason: &'static str,
}

/// One accepted write, placed in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRecord {
    pub seq: u64,
    pub write_ns: u64,
    pub asked: u32,
    pub accepted: u32,
    /// Stream offset one past the write's last byte.
    pub end_offset: u64,
    pub notsent_before: u32,
    pub notsent_after: Option<u32>,
    pub threshold: Option<u64>,
    pub reason: &'static str,
}

impl WriteRecord {
    /// `w` ending at stream offset `end_offset`.
    pub fn place(w: IssuedWrite, end_offset: u64) -> WriteRecord {
        WriteRecord {
            seq: w.seq,
            write_ns: w.write_ns,
            asked: w.asked,
            accepted: w.accepted,
            end_offset,
            notsent_before: w.notsent_before,
            notsent_after: w.notsent_after,
            threshold: w.threshold,
            reason: w.reason,
        }
    }

    pub fn last_byte(&self) -> u64 {
        self.end_offset - 1
    }
}

/// How a write's time for one kind of report was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampState {
    Exact,
    Coalesced,
    Missing,
    Unsent,
    Absent,
    /// Timestamps were turned off for the run.
    Off,
    /// The reports came with a later segment than the one that carried the write's last
    /// byte: the kernel moved the byte to an earlier segment and left the timestamp request
    /// behind (sbm-trace sees this per segment; see `stamps_displaced` in trace.json). The
    /// times are that later segment's.
    Displaced,
}

impl StampState {
    pub fn name(self) -> &'static str {
        match self {
            StampState::Exact => "exact",
            StampState::Coalesced => "coalesced",
            StampState::Missing => "missing",
            StampState::Unsent => "unsent",
            StampState::Absent => "absent",
            StampState::Off => "off",
            StampState::Displaced => "displaced",
        }
    }
}

/// A time (CLOCK_REALTIME ns) where one is known, and how it was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub state: StampState,
    pub time_ns: Option<u64>,
}

impl Stamp {
    fn timed(state: StampState, t: u64) -> Stamp {
        Stamp {
            state,
            time_ns: Some(t),
        }
    }
    fn untimed(state: StampState) -> Stamp {
        Stamp {
            state,
            time_ns: None,
        }
    }
    pub fn off() -> Stamp {
        Stamp::untimed(StampState::Off)
    }
}

/// How much later than a write's exact departure a coalesced TX_SCHED/TX_SND time may be and
/// still stand. The report of the segment that carried the byte follows its departure by
/// microseconds (tests/bpf holds exact ones to 50 µs); a later segment sent in the same burst
/// does too, and then the bound is within this slack of the truth anyway. Anything later is
/// another segment's time, not a bound worth printing.
pub const COALESCED_SLACK_NS: u64 = 1_000_000;

/// A write with its final attribution: one row of writes.csv.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedWrite {
    pub write: WriteRecord,
    pub sched: Stamp,
    pub snd: Stamp,
    pub ack: Stamp,
}

impl TimedWrite {
    pub fn untimed(write: WriteRecord) -> TimedWrite {
        TimedWrite {
            write,
            sched: Stamp::off(),
            snd: Stamp::off(),
            ack: Stamp::off(),
        }
    }

    /// The write's reports were a later segment's than its last byte's: its exact times
    /// are marked displaced (see [`StampState::Displaced`]).
    fn mark_displaced(&mut self) {
        for s in [&mut self.sched, &mut self.snd, &mut self.ack] {
            if s.state == StampState::Exact {
                s.state = StampState::Displaced;
            }
        }
    }

    /// What the per-packet departures say about this row's reports: `displaced` when the
    /// segment carrying its timestamp request did not hold its last byte, and where the exact
    /// departure of that byte is known, a coalesced time later than it by more than
    /// [`COALESCED_SLACK_NS`] is not the time of the segment that carried the byte but of a
    /// later one. The write's own reports were lost (and, when it is seconds late, those of
    /// the writes between: measured with nginx's sendfile under NOTSENT_LOWAT), so the write
    /// counts as `missing` for TX_SCHED and TX_SND instead of carrying a loose bound.
    pub fn settle_with_departure(&mut self, displaced: bool, depart_ns: Option<u64>) {
        if displaced {
            self.mark_displaced();
        }
        let Some(depart_ns) = depart_ns else {
            return;
        };
        let late = |s: &Stamp| {
            s.state == StampState::Coalesced
                && s.time_ns
                    .is_some_and(|t| t > depart_ns.saturating_add(COALESCED_SLACK_NS))
        };
        if late(&self.sched) || late(&self.snd) {
            // The ACK bound stays: the departure says nothing about when the byte was
            // acknowledged, and a cumulative ACK past it still bounds that.
            for s in [&mut self.sched, &mut self.snd] {
                if s.state == StampState::Coalesced {
                    *s = Stamp::untimed(StampState::Missing);
                }
            }
        }
    }

    /// Time from the write call to its last byte entering the qdisc, µs.
    pub fn sojourn_us(&self) -> Option<u64> {
        self.sched
            .time_ns
            .map(|t| t.saturating_sub(self.write.write_ns) / 1_000)
    }
}

/// A SCHED time attributed when its report arrived (for interval statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProvisionalSojourn {
    pub seq: u64,
    pub sojourn_us: u64,
    pub exact: bool,
}

/// What the ledger did with a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportVerdict {
    Accepted,
    /// Key not greater than the last one of its kind.
    Repeated,
    /// Key for bytes that were never written (nothing written yet).
    Stale,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LedgerCounters {
    pub accepted: [u64; 3],
    pub repeated: [u64; 3],
    pub stale: u64,
}

#[derive(Debug)]
struct Pending {
    write: WriteRecord,
    sched_offered: bool,
}

/// Why a kind has no time yet for a write, when asked at the end of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunEnd {
    /// Bytes that left the socket (snd_nxt as an offset: written − notsent).
    pub sent_offset: u64,
    /// Bytes acknowledged (tcpi_bytes_acked).
    pub acked_offset: u64,
}

#[derive(Debug, Default)]
pub struct WriteLedger {
    written: u64,
    pending: VecDeque<Pending>,
    /// Reports not yet consumed, per kind (`TxKind::index`), ascending keys.
    keys: [VecDeque<(u64, u64)>; 3],
    last_key: [Option<u64>; 3],
    counters: LedgerCounters,
}

impl WriteLedger {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn counters(&self) -> LedgerCounters {
        self.counters
    }

    /// Bytes written so far: the offset the next write starts at.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes not yet final.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Records a write that the kernel accepted (at least one byte).
    pub fn record_write(&mut self, w: IssuedWrite) -> WriteRecord {
        assert!(w.accepted > 0, "only accepted bytes are recorded");
        self.written += u64::from(w.accepted);
        let write = WriteRecord::place(w, self.written);
        self.pending.push_back(Pending {
            write,
            sched_offered: false,
        });
        write
    }

    /// The u64 offset a u32 key stands for: the largest offset below `written` with the
    /// same low 32 bits. None if nothing that large has been written.
    fn unwrap_key(&self, key: u32) -> Option<u64> {
        let top = self.written.checked_sub(1)?;
        let candidate = (top & !0xFFFF_FFFF) | u64::from(key);
        if candidate <= top {
            Some(candidate)
        } else {
            candidate.checked_sub(1 << 32)
        }
    }

    /// Takes one report. Provisional SCHED sojourns go to `sojourns`; writes that became
    /// final go to `done`, in write order.
    pub fn on_report(
        &mut self,
        report: RawReport,
        sojourns: &mut Vec<ProvisionalSojourn>,
        done: &mut Vec<TimedWrite>,
    ) -> ReportVerdict {
        let k = report.kind.index();
        let Some(key) = self.unwrap_key(report.key) else {
            self.counters.stale += 1;
            return ReportVerdict::Stale;
        };
        if self.last_key[k].is_some_and(|last| key <= last) {
            self.counters.repeated[k] += 1;
            return ReportVerdict::Repeated;
        }
        self.last_key[k] = Some(key);
        self.keys[k].push_back((key, report.time_ns));
        self.counters.accepted[k] += 1;
        match report.kind {
            TxKind::Sched => self.offer_sched(key, sojourns),
            TxKind::Ack => {
                while self
                    .pending
                    .front()
                    .is_some_and(|p| p.write.last_byte() <= key)
                {
                    let p = self.pending.pop_front().expect("front exists");
                    done.push(self.finalize(p.write, None));
                }
                self.prune();
            }
            TxKind::Snd => {}
        }
        ReportVerdict::Accepted
    }

    /// Ends the run: every pending write becomes final, with `unsent` where the bytes had
    /// not got that far and `missing` where they had but no report came.
    pub fn finish(&mut self, end: RunEnd, done: &mut Vec<TimedWrite>) {
        while let Some(p) = self.pending.pop_front() {
            done.push(self.finalize(p.write, Some(end)));
        }
        self.prune();
    }

    fn offer_sched(&mut self, key: u64, sojourns: &mut Vec<ProvisionalSojourn>) {
        let start = self.pending.partition_point(|p| p.sched_offered);
        for i in start..self.pending.len() {
            let w = self.pending[i].write;
            if w.last_byte() > key {
                break;
            }
            self.pending[i].sched_offered = true;
            if let Some(stamp) = self.lookup(TxKind::Sched, w.last_byte()) {
                if let (StampState::Exact | StampState::Coalesced, Some(t)) =
                    (stamp.state, stamp.time_ns)
                {
                    sojourns.push(ProvisionalSojourn {
                        seq: w.seq,
                        sojourn_us: t.saturating_sub(w.write_ns) / 1_000,
                        exact: stamp.state == StampState::Exact,
                    });
                }
            }
        }
    }

    /// The first key >= `byte` among reports of `kind`, with its time.
    fn first_at_or_after(&self, kind: TxKind, byte: u64) -> Option<(u64, u64)> {
        let q = &self.keys[kind.index()];
        let i = q.partition_point(|&(k, _)| k < byte);
        q.get(i).copied()
    }

    /// The attribution of `kind` for a write ending at `last_byte` from the reports seen so
    /// far, or None when no report of that kind covers it yet.
    fn lookup(&self, kind: TxKind, last_byte: u64) -> Option<Stamp> {
        let (key, t) = self.first_at_or_after(kind, last_byte)?;
        // The nearest skb boundary any kind of report has shown.
        let boundary = TxKind::ALL
            .iter()
            .filter_map(|&other| self.first_at_or_after(other, last_byte).map(|(k, _)| k))
            .min()
            .expect("kind itself has a key");
        Some(if key > boundary {
            Stamp::untimed(StampState::Missing)
        } else if key == last_byte {
            Stamp::timed(StampState::Exact, t)
        } else {
            Stamp::timed(StampState::Coalesced, t)
        })
    }

    fn finalize(&self, write: WriteRecord, end: Option<RunEnd>) -> TimedWrite {
        let stamp = |kind: TxKind| -> Stamp {
            if let Some(s) = self.lookup(kind, write.last_byte()) {
                return s;
            }
            if kind == TxKind::Snd && self.last_key[TxKind::Snd.index()].is_none() {
                return Stamp::untimed(StampState::Absent);
            }
            let reached = match (kind, end) {
                // Finalized by an ACK report: the bytes were sent and acknowledged.
                (_, None) => true,
                (TxKind::Ack, Some(e)) => write.end_offset <= e.acked_offset,
                (_, Some(e)) => write.end_offset <= e.sent_offset,
            };
            Stamp::untimed(if reached {
                StampState::Missing
            } else {
                StampState::Unsent
            })
        };
        TimedWrite {
            write,
            sched: stamp(TxKind::Sched),
            snd: stamp(TxKind::Snd),
            ack: stamp(TxKind::Ack),
        }
    }

    /// Drops reports that no pending or future write can need.
    fn prune(&mut self) {
        let keep_from = self
            .pending
            .front()
            .map(|p| p.write.last_byte())
            .unwrap_or(self.written);
        for q in &mut self.keys {
            while q.front().is_some_and(|&(k, _)| k < keep_from) {
                q.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(kind: TxKind, key: u64, time_ns: u64) -> RawReport {
        RawReport {
            kind,
            key: key as u32,
            time_ns,
        }
    }

    struct Harness {
        ledger: WriteLedger,
        sojourns: Vec<ProvisionalSojourn>,
        done: Vec<TimedWrite>,
        seq: u64,
    }

    impl Harness {
        fn new() -> Self {
            Harness {
                ledger: WriteLedger::new(),
                sojourns: vec![],
                done: vec![],
                seq: 0,
            }
        }
        fn write(&mut self, at_ns: u64, asked: u32, accepted: u32) -> WriteRecord {
            self.seq += 1;
            self.ledger.record_write(IssuedWrite {
                seq: self.seq,
                write_ns: at_ns,
                asked,
                accepted,
                ..Default::default()
            })
        }
        fn report(&mut self, kind: TxKind, key: u64, t: u64) -> ReportVerdict {
            self.ledger
                .on_report(report(kind, key, t), &mut self.sojourns, &mut self.done)
        }
        /// SCHED, SND and ACK for one key.
        fn all(&mut self, key: u64, sched: u64, snd: u64, ack: u64) {
            self.report(TxKind::Sched, key, sched);
            self.report(TxKind::Snd, key, snd);
            self.report(TxKind::Ack, key, ack);
        }
        fn finish(&mut self, sent: u64, acked: u64) {
            self.ledger.finish(
                RunEnd {
                    sent_offset: sent,
                    acked_offset: acked,
                },
                &mut self.done,
            );
        }
    }

    #[test]
    fn one_report_per_write_is_exact() {
        let mut h = Harness::new();
        for i in 0..10u64 {
            h.write(i * 1_000_000, 100, 100);
        }
        for i in 0..10u64 {
            h.all(
                i * 100 + 99,
                i * 1_000_000 + 500_000,
                i * 1_000_000 + 600_000,
                i * 1_000_000 + 9_000_000,
            );
        }
        assert_eq!(h.done.len(), 10);
        for (i, row) in h.done.iter().enumerate() {
            assert_eq!(row.write.end_offset, (i as u64 + 1) * 100);
            assert_eq!(row.sched.state, StampState::Exact);
            assert_eq!(row.snd.state, StampState::Exact);
            assert_eq!(row.ack.state, StampState::Exact);
            assert_eq!(row.sojourn_us(), Some(500));
        }
        assert_eq!(h.sojourns.len(), 10);
        assert!(h.sojourns.iter().all(|s| s.exact && s.sojourn_us == 500));
        assert_eq!(h.ledger.pending_len(), 0);
    }

    #[test]
    fn coalesced_writes_take_the_covering_report_as_upper_bound() {
        let mut h = Harness::new();
        // Three 100 B writes appended to one skb: only the last key (299) is reported.
        h.write(1_000, 100, 100);
        h.write(2_000, 100, 100);
        h.write(3_000, 100, 100);
        h.all(299, 10_000, 11_000, 50_000);
        let states: Vec<_> = h.done.iter().map(|r| r.sched.state).collect();
        assert_eq!(
            states,
            [
                StampState::Coalesced,
                StampState::Coalesced,
                StampState::Exact
            ]
        );
        assert!(h.done.iter().all(|r| r.sched.time_ns == Some(10_000)));
        assert_eq!(h.done[0].sojourn_us(), Some(9));
        let exact: Vec<bool> = h.sojourns.iter().map(|s| s.exact).collect();
        assert_eq!(exact, [false, false, true]);
    }

    #[test]
    fn lost_sched_report_is_missing_when_another_kind_shows_the_skb_boundary() {
        let mut h = Harness::new();
        h.write(0, 100, 100); // bytes 0..=99
        h.write(0, 100, 100); // bytes 100..=199
                              // SCHED for 99 was lost; SND and ACK for 99 arrived, then everything for 199.
        h.report(TxKind::Snd, 99, 5);
        h.all(199, 10, 11, 50);
        h.report(TxKind::Ack, 99, 40); // too late: ACKs are cumulative, this is a repeat
        assert_eq!(h.done.len(), 2);
        assert_eq!(h.done[0].sched.state, StampState::Missing);
        assert_eq!(h.done[0].sched.time_ns, None);
        assert_eq!(h.done[0].snd.state, StampState::Exact);
        // No ACK for key 99 came before the one for 199, and nothing showed 99 as a
        // boundary in the ACK stream... but SND did: the ACK for 199 cannot be 99's.
        assert_eq!(h.done[0].ack.state, StampState::Missing);
        assert_eq!(h.done[1].sched.state, StampState::Exact);
    }

    #[test]
    fn a_write_with_no_report_in_any_kind_gets_the_next_report_as_upper_bound() {
        let mut h = Harness::new();
        // Two 64 KiB writes; the first was never reported in any kind.
        h.write(0, 65_536, 65_536);
        h.write(0, 65_536, 65_536);
        h.all(131_071, 100, 101, 200);
        assert_eq!(
            h.done[0].sched,
            Stamp {
                state: StampState::Coalesced,
                time_ns: Some(100)
            }
        );
        assert_eq!(h.done[0].ack.state, StampState::Coalesced);
        assert_eq!(h.done[1].sched.state, StampState::Exact);
        let exact: Vec<bool> = h.sojourns.iter().map(|s| s.exact).collect();
        assert_eq!(exact, [false, true]);
    }

    #[test]
    fn provisional_statistics_skip_missing_writes() {
        let mut h = Harness::new();
        h.write(0, 100, 100);
        h.write(0, 100, 100);
        h.report(TxKind::Snd, 99, 1); // SCHED 99 lost, SND 99 shows the boundary
        h.report(TxKind::Sched, 199, 2);
        assert_eq!(h.sojourns.len(), 1);
        assert_eq!(h.sojourns[0].seq, 2);
    }

    #[test]
    fn short_writes_use_their_accepted_bytes() {
        let mut h = Harness::new();
        let w1 = h.write(0, 65_536, 34_752);
        let w2 = h.write(0, 65_536, 65_536);
        assert_eq!(w1.end_offset, 34_752);
        assert_eq!(w2.end_offset, 34_752 + 65_536);
        h.all(34_751, 1, 2, 3);
        h.all(34_752 + 65_535, 4, 5, 6);
        assert_eq!(h.done[0].write.asked, 65_536);
        assert_eq!(h.done[0].write.accepted, 34_752);
        assert!(h.done.iter().all(|r| r.sched.state == StampState::Exact));
    }

    #[test]
    fn repeated_and_backwards_keys_are_ignored() {
        let mut h = Harness::new();
        h.write(0, 100, 100);
        h.write(0, 100, 100);
        assert_eq!(h.report(TxKind::Sched, 99, 10), ReportVerdict::Accepted);
        // A retransmission of the first skb is scheduled again: same key, later time.
        assert_eq!(h.report(TxKind::Sched, 99, 99_999), ReportVerdict::Repeated);
        assert_eq!(h.report(TxKind::Sched, 199, 20), ReportVerdict::Accepted);
        assert_eq!(h.report(TxKind::Sched, 99, 30), ReportVerdict::Repeated);
        h.report(TxKind::Snd, 199, 21);
        h.report(TxKind::Ack, 199, 100);
        assert_eq!(
            h.done[0].sched,
            Stamp {
                state: StampState::Exact,
                time_ns: Some(10)
            }
        );
        assert_eq!(h.ledger.counters().repeated[TxKind::Sched.index()], 2);
    }

    #[test]
    fn keys_unwrap_across_u32() {
        let mut h = Harness::new();
        let big = 1u64 << 20;
        // Write 4 GiB + a bit in 1 MiB chunks, acknowledging as we go.
        let n = (1u64 << 32) / big + 2;
        for i in 0..n {
            let w = h.write(i, big as u32, big as u32);
            h.all(w.last_byte(), i + 1, i + 2, i + 3);
        }
        assert_eq!(h.done.len() as u64, n);
        let last = h.done.last().unwrap();
        assert!(last.write.end_offset > 1 << 32);
        assert_eq!(last.sched.state, StampState::Exact);
        assert_eq!(last.sched.time_ns, Some(n));
        assert_eq!(h.ledger.counters().repeated, [0, 0, 0]);
    }

    #[test]
    fn run_end_marks_unsent_and_missing() {
        let mut h = Harness::new();
        h.write(0, 100, 100); // 0..=99: fully reported
        h.write(0, 100, 100); // 100..=199: sent and acked, but its reports were lost
        h.write(0, 100, 100); // 200..=299: sent, not acked
        h.write(0, 100, 100); // 300..=399: never left the socket
        h.all(99, 1, 2, 3);
        h.report(TxKind::Sched, 299, 7);
        h.report(TxKind::Snd, 299, 8);
        h.finish(300, 200);
        let s: Vec<_> = h
            .done
            .iter()
            .map(|r| (r.sched.state, r.ack.state))
            .collect();
        assert_eq!(
            s,
            [
                (StampState::Exact, StampState::Exact),
                // SCHED 299 is >= 199 but 199 could share its skb: coalesced upper bound.
                (StampState::Coalesced, StampState::Missing),
                (StampState::Exact, StampState::Unsent),
                (StampState::Unsent, StampState::Unsent),
            ]
        );
    }

    #[test]
    fn snd_absent_on_devices_that_never_stamp_it() {
        let mut h = Harness::new();
        h.write(0, 100, 100);
        h.report(TxKind::Sched, 99, 1);
        h.report(TxKind::Ack, 99, 2);
        assert_eq!(h.done[0].snd.state, StampState::Absent);
        assert_eq!(h.done[0].sched.state, StampState::Exact);
    }

    #[test]
    fn report_before_any_write_is_stale() {
        let mut h = Harness::new();
        assert_eq!(h.report(TxKind::Sched, 0, 1), ReportVerdict::Stale);
        assert_eq!(h.ledger.counters().stale, 1);
    }

    #[test]
    fn memory_stays_bounded_as_writes_are_acknowledged() {
        let mut h = Harness::new();
        for i in 0..100_000u64 {
            let w = h.write(i, 512, 512);
            if i % 8 == 7 {
                h.all(w.last_byte(), i, i, i);
                h.done.clear();
                h.sojourns.clear();
            }
        }
        assert_eq!(h.ledger.pending_len(), 0);
        assert!(h.ledger.keys.iter().all(|q| q.len() <= 1));
    }
}
