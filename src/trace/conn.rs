//! One traced connection: the BPF program's events in, one row per send call out.
//!
//! Sequence numbers become stream offsets against the connection's first data sequence
//! number. Writes and their TX timestamp reports go through sbm-send's own
//! [`WriteLedger`], so attribution (exact, coalesced, missing, unsent) follows the same
//! rules as sbm-send's writes.csv. The per-packet departures give every write the exact
//! time its last byte left the socket for IP: the first segment whose end reaches the
//! write's end (retransmissions, which do not raise the highest sent, are not departures).

use std::net::SocketAddr;

use crate::bpf::trace::{EventKind, TraceEvent};
use crate::clock::MonoToReal;
use crate::stats::LatencyHist;
use crate::tstamp::cmsg::RawReport;
use crate::tstamp::departures::{unwrap_near, Departed, DepartureLedger};
use crate::tstamp::ledger::{IssuedWrite, ProvisionalSojourn, RunEnd, TimedWrite, WriteLedger};
use crate::tstamp::TxKind;

/// A write with its exact departure (None: its last byte had not left when the run ended).
#[derive(Debug, Clone)]
pub struct TracedWrite {
    pub timed: TimedWrite,
    pub depart_ns: Option<u64>,
}

impl TracedWrite {
    /// departure − write, µs.
    pub fn depart_sojourn_us(&self) -> Option<u64> {
        self.depart_ns
            .map(|d| d.saturating_sub(self.timed.write.write_ns) / 1_000)
    }
}

/// What a connection's events amounted to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnCounts {
    pub writes: u64,
    pub bytes_written: u64,
    pub sched: u64,
    pub snd: u64,
    pub ack: u64,
    pub departures: u64,
    /// Write events that did not move the stream forward (none expected).
    pub stale_writes: u64,
    /// The kernel refused BPF TX timestamping on this connection (its error), if it did.
    pub timestamping_error: Option<i32>,
    /// Segments that carried a timestamp request for a byte they did not hold.
    pub stamps_displaced: u64,
    /// Setting the asked congestion control failed (its error), if it did.
    pub congestion_error: Option<i32>,
}

pub struct Connection {
    pub id: u32,
    pub cookie: u64,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub established_ns: u64,
    clock: MonoToReal,
    /// The first data sequence number.
    base: u32,
    /// Offsets: end of the last write, highest departed (`departures.sent()`), acknowledged.
    written: u64,
    acked: u64,
    ledger: WriteLedger,
    departures: DepartureLedger,
    just_departed: Vec<Departed>,
    next_write: u64,
    sojourns: Vec<ProvisionalSojourn>,
    done: Vec<TimedWrite>,
    pub counts: ConnCounts,
    /// Departure − write of every write whose last byte departed, µs: the whole run (after
    /// the warm-up) and the current interval.
    pub depart_sojourn: LatencyHist,
    pub interval_sojourn: LatencyHist,
    /// Writes before this CLOCK_REALTIME instant are the warm-up's.
    pub warmup_end_ns: u64,
    pub closed: bool,
    /// (bytes acknowledged, time) at the first event after the warm-up, and the time of the
    /// last acknowledgement seen: the goodput window.
    warmup_mark: Option<(u64, u64)>,
    last_ack_ns: u64,
    /// End offsets of writes whose reports a later segment than their last byte's carries.
    displaced: std::collections::HashSet<u64>,
}

impl Connection {
    /// A connection from its `Established` event.
    pub fn new(id: u32, ev: &TraceEvent, clock: MonoToReal) -> Connection {
        Connection {
            id,
            cookie: ev.cookie,
            local: ev.local,
            remote: ev.remote,
            established_ns: clock.real_ns(ev.mono_ns),
            clock,
            base: ev.seq,
            written: 0,
            acked: 0,
            ledger: WriteLedger::new(),
            departures: DepartureLedger::new(),
            just_departed: Vec::new(),
            next_write: 0,
            sojourns: Vec::new(),
            done: Vec::new(),
            counts: ConnCounts {
                congestion_error: (ev.aux != 0).then_some(ev.aux),
                ..ConnCounts::default()
            },
            depart_sojourn: LatencyHist::new(),
            interval_sojourn: LatencyHist::new(),
            warmup_end_ns: 0,
            closed: false,
            warmup_mark: None,
            last_ack_ns: 0,
            displaced: Default::default(),
        }
    }

    fn offset(&self, seq: u32, near: u64) -> u64 {
        unwrap_near(seq.wrapping_sub(self.base), near)
    }

    /// Bytes written, sent (left the socket) and acknowledged so far.
    pub fn progress(&self) -> (u64, u64, u64) {
        (self.written, self.sent(), self.acked)
    }

    fn sent(&self) -> u64 {
        self.departures.sent().min(self.written)
    }

    /// Bytes acknowledged after the warm-up over the time from the warm-up's end to the
    /// last acknowledgement seen (bit/s, and the window in seconds); zero before any.
    pub fn goodput(&self) -> (f64, f64) {
        let Some((acked0, t0)) = self.warmup_mark else {
            return (0.0, 0.0);
        };
        let window_s = self.last_ack_ns.saturating_sub(t0) as f64 / 1e9;
        let bytes = self.acked.min(self.written).saturating_sub(acked0);
        if window_s <= 0.0 {
            return (0.0, 0.0);
        }
        (bytes as f64 * 8.0 / window_s, window_s)
    }

    /// Takes one event; rows that became final are appended to `rows`.
    pub fn on_event(&mut self, ev: &TraceEvent, rows: &mut Vec<TracedWrite>) {
        let t = self.clock.real_ns(ev.mono_ns);
        // snd_una counts the SYN and FIN too: data acknowledged is at most data written.
        let una = self
            .offset(ev.snd_una, self.acked)
            .min(self.written.max(self.departures.sent()));
        if self.warmup_mark.is_none() && t >= self.warmup_end_ns {
            self.warmup_mark = Some((self.acked, t));
        }
        if una > self.acked && ev.kind != EventKind::Established {
            self.acked = una;
            self.last_ack_ns = t;
        }
        match ev.kind {
            EventKind::Established => {}
            EventKind::Write => {
                let end = self.offset(ev.seq, self.written);
                if end <= self.written {
                    self.counts.stale_writes += 1;
                    return;
                }
                let nxt = self.offset(ev.snd_nxt, self.departures.sent()).min(end);
                let accepted = end - self.written;
                let w = self.ledger.record_write(IssuedWrite {
                    seq: self.next_write,
                    write_ns: t,
                    asked: accepted.min(u64::from(u32::MAX)) as u32,
                    accepted: accepted.min(u64::from(u32::MAX)) as u32,
                    notsent_before: self.written.saturating_sub(nxt).min(u64::from(u32::MAX))
                        as u32,
                    notsent_after: Some(end.saturating_sub(nxt).min(u64::from(u32::MAX)) as u32),
                    threshold: None,
                    reason: "sendmsg",
                });
                self.next_write += 1;
                self.written = w.end_offset;
                self.counts.writes += 1;
                self.counts.bytes_written += accepted;
                if let Some(d) = self.departures.on_write(w.seq, end, t) {
                    self.record_departure(d);
                }
            }
            EventKind::Sched | EventKind::Snd | EventKind::Ack => {
                let kind = match ev.kind {
                    EventKind::Sched => {
                        self.counts.sched += 1;
                        TxKind::Sched
                    }
                    EventKind::Snd => {
                        self.counts.snd += 1;
                        TxKind::Snd
                    }
                    _ => {
                        self.counts.ack += 1;
                        TxKind::Ack
                    }
                };
                let report = RawReport {
                    kind,
                    // The key is the last byte's offset, as OPT_ID_TCP's would be.
                    key: ev.seq.wrapping_sub(self.base),
                    time_ns: t,
                };
                self.ledger
                    .on_report(report, &mut self.sojourns, &mut self.done);
                self.sojourns.clear();
            }
            EventKind::Depart => {
                let end = self.offset(ev.seq, self.departures.sent());
                let mut departed = std::mem::take(&mut self.just_departed);
                if self.departures.on_departure(end, t, &mut departed) {
                    self.counts.departures += 1;
                }
                for d in departed.drain(..) {
                    self.record_departure(d);
                }
                self.just_departed = departed;
            }
            EventKind::Closed => self.closed = true,
            EventKind::NoTimestamping => self.counts.timestamping_error = Some(ev.aux),
            EventKind::Displaced => {
                self.counts.stamps_displaced += 1;
                self.displaced.insert(self.offset(ev.seq, self.written) + 1);
            }
        }
        self.take_done(rows);
    }

    /// Ends the connection's record: every write still pending becomes a row.
    pub fn finish(&mut self, rows: &mut Vec<TracedWrite>) {
        // A FIN takes one sequence number: neither sent nor acknowledged data.
        self.acked = self.acked.min(self.written);
        self.ledger.finish(
            RunEnd {
                sent_offset: self.sent(),
                acked_offset: self.acked,
            },
            &mut self.done,
        );
        self.take_done(rows);
    }

    /// A write's last byte left: its sojourn into the histograms.
    fn record_departure(&mut self, d: Departed) {
        let (write_ns, t) = (d.write_ns, d.depart_ns);
        let us = t.saturating_sub(write_ns) / 1_000;
        self.interval_sojourn.record(us);
        if write_ns >= self.warmup_end_ns {
            self.depart_sojourn.record(us);
        }
    }

    fn take_done(&mut self, rows: &mut Vec<TracedWrite>) {
        for mut timed in self.done.drain(..) {
            let depart_ns = self.departures.take(timed.write.seq);
            timed.settle_with_departure(self.displaced.remove(&timed.write.end_offset), depart_ns);
            rows.push(TracedWrite { timed, depart_ns });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MonoToReal;
    use crate::tstamp::ledger::StampState;

    const BASE: u32 = 0xFFFF_F000; // wraps within the first 4 KiB

    fn ev(kind: EventKind, mono_ns: u64, seq: u32, snd_nxt: u32) -> TraceEvent {
        TraceEvent {
            cookie: 7,
            mono_ns,
            kind,
            seq,
            snd_nxt,
            snd_una: BASE,
            aux: 0,
            local: None,
            remote: None,
        }
    }

    fn conn() -> Connection {
        Connection::new(
            0,
            &ev(EventKind::Established, 0, BASE, BASE),
            MonoToReal { offset_ns: 1_000 },
        )
    }

    #[test]
    fn a_request_that_left_without_its_key_byte_marks_its_write_displaced() {
        let mut c = conn();
        let mut rows = vec![];
        let at = |off: u32| BASE.wrapping_add(off);
        c.on_event(&ev(EventKind::Write, 10_000, at(3000), at(0)), &mut rows);
        c.on_event(&ev(EventKind::Write, 20_000, at(6000), at(0)), &mut rows);
        // Byte 2999 left in a segment ending at 3100; the request for key 2999 left with the
        // next segment (3100..4548), which the program reports.
        c.on_event(
            &ev(EventKind::Depart, 30_000, at(3100), at(3100)),
            &mut rows,
        );
        c.on_event(
            &ev(EventKind::Depart, 40_000, at(4548), at(4548)),
            &mut rows,
        );
        c.on_event(
            &ev(EventKind::Displaced, 40_000, at(2999), at(4548)),
            &mut rows,
        );
        c.on_event(&ev(EventKind::Sched, 40_100, at(2999), at(4548)), &mut rows);
        c.on_event(&ev(EventKind::Ack, 90_000, at(2999), at(4548)), &mut rows);
        c.on_event(
            &ev(EventKind::Depart, 95_000, at(6000), at(6000)),
            &mut rows,
        );
        c.on_event(&ev(EventKind::Sched, 95_100, at(5999), at(6000)), &mut rows);
        c.on_event(&ev(EventKind::Ack, 99_000, at(5999), at(6000)), &mut rows);
        assert_eq!(rows.len(), 2);
        assert_eq!(c.counts.stamps_displaced, 1);
        let (a, b) = (&rows[0].timed, &rows[1].timed);
        assert_eq!(
            (a.sched.state, a.ack.state),
            (StampState::Displaced, StampState::Displaced)
        );
        assert_eq!(a.sched.time_ns, Some(41_100), "the later segment's time");
        assert_eq!(rows[0].depart_ns, Some(31_000), "the byte's own departure");
        assert_eq!(b.sched.state, StampState::Exact);
    }

    #[test]
    fn writes_get_exact_departures_and_the_ledgers_attribution() {
        let mut c = conn();
        let mut rows = vec![];
        let at = |off: u32| BASE.wrapping_add(off);
        // Two writes of 3000 B into one skb: the second overwrites the key.
        c.on_event(&ev(EventKind::Write, 10_000, at(3000), at(0)), &mut rows);
        c.on_event(&ev(EventKind::Write, 20_000, at(6000), at(0)), &mut rows);
        // Segments leave: 0..1448, ..2896, ..4344 (the first write's last byte), ..6000.
        for (t, end) in [
            (30_000, 1448),
            (31_000, 2896),
            (32_000, 4344),
            (33_000, 6000),
        ] {
            c.on_event(&ev(EventKind::Depart, t, at(end), at(end)), &mut rows);
        }
        // A retransmission is not a departure.
        c.on_event(
            &ev(EventKind::Depart, 34_000, at(2896), at(6000)),
            &mut rows,
        );
        assert_eq!(c.counts.departures, 4);
        c.on_event(&ev(EventKind::Sched, 30_500, at(5999), at(6000)), &mut rows);
        assert!(rows.is_empty(), "final only once acknowledged");
        c.on_event(&ev(EventKind::Ack, 90_000, at(5999), at(6000)), &mut rows);
        assert_eq!(rows.len(), 2);
        let (a, b) = (&rows[0], &rows[1]);
        assert_eq!(
            (a.timed.write.accepted, b.timed.write.accepted),
            (3000, 3000)
        );
        assert_eq!(a.timed.write.write_ns, 11_000, "realtime = mono + offset");
        assert_eq!(a.timed.sched.state, StampState::Coalesced);
        assert_eq!(b.timed.sched.state, StampState::Exact);
        // Realtime = monotonic + 1 µs here.
        assert_eq!(
            a.depart_ns,
            Some(33_000),
            "the segment ending at 4344 carried byte 2999"
        );
        assert_eq!(b.depart_ns, Some(34_000));
        assert_eq!(a.timed.write.notsent_after, Some(3000));
        assert_eq!(c.depart_sojourn.count(), 2);
    }

    #[test]
    fn a_coalesced_time_long_after_the_writes_departure_is_missing_not_a_bound() {
        let mut c = conn();
        let mut rows = vec![];
        let at = |off: u32| BASE.wrapping_add(off);
        // Three writes, each in a segment of its own; the first two never get a report.
        c.on_event(&ev(EventKind::Write, 10_000, at(1000), at(0)), &mut rows);
        c.on_event(&ev(EventKind::Write, 20_000, at(2000), at(0)), &mut rows);
        c.on_event(&ev(EventKind::Write, 30_000, at(3000), at(0)), &mut rows);
        c.on_event(
            &ev(EventKind::Depart, 40_000, at(1000), at(1000)),
            &mut rows,
        );
        // The second write's segment leaves 0.5 ms before the third's: within the slack.
        c.on_event(
            &ev(EventKind::Depart, 5_000_000, at(2000), at(2000)),
            &mut rows,
        );
        c.on_event(
            &ev(EventKind::Depart, 5_500_000, at(3000), at(3000)),
            &mut rows,
        );
        c.on_event(
            &ev(EventKind::Sched, 5_500_100, at(2999), at(3000)),
            &mut rows,
        );
        c.on_event(
            &ev(EventKind::Ack, 9_000_000, at(2999), at(3000)),
            &mut rows,
        );
        assert_eq!(rows.len(), 3);
        let states: Vec<_> = rows
            .iter()
            .map(|r| (r.timed.sched.state, r.timed.ack.state))
            .collect();
        assert_eq!(
            states,
            [
                (StampState::Missing, StampState::Coalesced),
                (StampState::Coalesced, StampState::Coalesced),
                (StampState::Exact, StampState::Exact),
            ],
            "5.5 ms after the first write's departure is another segment's time"
        );
        assert_eq!(rows[0].timed.sched.time_ns, None);
        assert_eq!(rows[1].timed.sched.time_ns, Some(5_501_100));
    }

    #[test]
    fn finishing_leaves_undeparted_writes_without_a_departure() {
        let mut c = conn();
        let mut rows = vec![];
        let at = |off: u32| BASE.wrapping_add(off);
        c.on_event(&ev(EventKind::Write, 10_000, at(1000), at(0)), &mut rows);
        c.on_event(
            &ev(EventKind::Depart, 11_000, at(1000), at(1000)),
            &mut rows,
        );
        c.on_event(&ev(EventKind::Write, 12_000, at(2000), at(1000)), &mut rows);
        // A write that does not move the stream is counted, not recorded.
        c.on_event(&ev(EventKind::Write, 13_000, at(2000), at(1000)), &mut rows);
        c.finish(&mut rows);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].depart_ns, Some(12_000));
        assert_eq!(rows[0].timed.sched.state, StampState::Missing);
        assert_eq!(rows[1].depart_ns, None);
        assert_eq!(rows[1].timed.sched.state, StampState::Unsent);
        assert_eq!(c.counts.stale_writes, 1);
    }

    #[test]
    fn goodput_counts_the_bytes_acknowledged_after_the_warm_up() {
        let mut c = conn();
        c.warmup_end_ns = 1_000_000_001;
        let mut rows = vec![];
        let at = |off: u32| BASE.wrapping_add(off);
        let acked = |kind, t, una: u32| TraceEvent {
            snd_una: at(una),
            ..ev(kind, t, at(100_000), at(100_000))
        };
        c.on_event(&ev(EventKind::Write, 0, at(100_000), at(0)), &mut rows);
        c.on_event(&acked(EventKind::Depart, 500_000_000, 20_000), &mut rows);
        assert_eq!(c.goodput(), (0.0, 0.0), "nothing after the warm-up yet");
        // The mark is taken before the event's own acknowledgement counts.
        c.on_event(&acked(EventKind::Ack, 1_000_000_000, 30_000), &mut rows);
        c.on_event(&acked(EventKind::Ack, 1_500_000_000, 50_000), &mut rows);
        c.on_event(&acked(EventKind::Ack, 2_000_000_000, 80_000), &mut rows);
        let (bps, window) = c.goodput();
        assert!((window - 1.0).abs() < 1e-9, "{window}");
        assert!((bps - 480_000.0).abs() < 1e-6, "{bps}");
    }
}
