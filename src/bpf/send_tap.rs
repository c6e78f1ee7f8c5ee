//! The tracer's program (`bpf/trace.bpf.c`) on sbm-send's own connection: the exact
//! departure of every write's last byte (`--exact-departures`, per-packet callbacks) and
//! each write's SCHED/SND/ACK reports (`--timestamps bpf`, BPF TX timestamping), on the
//! cgroup sbm-send's socket is created in, its events matched to sbm-send's own writes by
//! stream offset.
//!
//! The ring buffer is read when the loop wakes anyway (and at the end), never on a wakeup
//! of its own (`crate::tstamp::tap`). Reading it is no system call: the ring is shared
//! memory. A row becomes final at its ACK report, long after its last byte left, so its
//! departure is there by then.

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd};

use super::cgroup::FreshCgroup;
use super::trace::{EventKind, TraceEvent, TraceSettings, Tracer};
use super::{require_root, BpfError};
use crate::clock::MonoToReal;
use crate::tstamp::departures::{unwrap_near, Departed, DepartureLedger, ExactDepartureReport};
use crate::tstamp::tap::{BpfTimestampsReport, ProgramTap};
use crate::tstamp::{RawReport, TxKind};

/// What the tap is started for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapSettings {
    /// The sink's port: the connection to it is the one tapped.
    pub port: u16,
    /// Per-packet departures (`--exact-departures`).
    pub departures: bool,
    /// BPF TX timestamping (`--timestamps bpf`).
    pub timestamps: bool,
}

pub struct SendTap {
    // Drop order: detach the program, then leave and remove our cgroup (if it is ours).
    tracer: Tracer,
    _cgroup: Option<FreshCgroup>,
    /// The events of one read, kept for its allocation.
    events: Vec<TraceEvent>,
    state: TapState,
}

/// What the program's events say about sbm-send's connection, matched to its writes.
struct TapState {
    clock: MonoToReal,
    /// The tapped connection (its socket cookie) and its first data sequence number, from
    /// the first connection established after the program was attached.
    conn: Option<(u64, u32)>,
    /// Bytes sent before the measured stream (the trip-times hello): offsets start after.
    skip: u64,
    /// The measured stream's end so far (the writes sbm-send told the tap of).
    written: u64,
    ledger: DepartureLedger,
    scratch: Vec<Departed>,
    /// End offsets of writes whose TX reports a later segment than their last byte's
    /// carries (the program saw the request leave without its key byte).
    displaced: HashSet<u64>,
    reports: Vec<RawReport>,
    timestamps: BpfTimestampsReport,
    timestamping_error: Option<i32>,
}

impl SendTap {
    /// Attaches the program for connections to `settings.port`: to `cgroup` (the BPF
    /// replenish program's, which this process has joined), or to a fresh cgroup this
    /// process then joins. Call before the socket exists.
    pub fn start(
        settings: TapSettings,
        cgroup: Option<BorrowedFd<'_>>,
    ) -> Result<SendTap, BpfError> {
        require_root()?;
        let trace = TraceSettings {
            port: Some(settings.port),
            timestamping: settings.timestamps,
            per_packet: settings.departures,
            wake_reader: false,
            write_events: false,
            congestion: None,
        };
        let (tracer, own) = match cgroup {
            Some(fd) => (Tracer::attach(&trace, fd)?, None),
            None => {
                let mut c = FreshCgroup::create("sbm-send")?;
                let tracer = Tracer::attach(&trace, c.as_fd())?;
                // Attached first, joined second: the socket created next is tapped.
                c.join_self()?;
                (tracer, Some(c))
            }
        };
        Ok(SendTap {
            tracer,
            _cgroup: own,
            events: vec![],
            state: TapState::new(MonoToReal::now()),
        })
    }
}

impl TapState {
    fn new(clock: MonoToReal) -> TapState {
        TapState {
            clock,
            conn: None,
            skip: 0,
            written: 0,
            ledger: DepartureLedger::new(),
            scratch: vec![],
            displaced: HashSet::new(),
            reports: vec![],
            timestamps: BpfTimestampsReport::default(),
            timestamping_error: None,
        }
    }

    /// The measured-stream offset of a raw sequence number near `near` (an offset), or
    /// None for a byte of the hello before the measured stream.
    fn offset(&self, base: u32, seq: u32, near: u64) -> Option<u64> {
        unwrap_near(seq.wrapping_sub(base), near + self.skip).checked_sub(self.skip)
    }

    fn on_event(&mut self, ev: TraceEvent) {
        let base = match self.conn {
            None if ev.kind == EventKind::Established => {
                self.conn = Some((ev.cookie, ev.seq));
                return;
            }
            Some((cookie, base)) if cookie == ev.cookie => base,
            // Before the connection, or another connection to the same port.
            _ => return,
        };
        match ev.kind {
            EventKind::Depart => {
                let Some(end) = self.offset(base, ev.seq, self.ledger.sent()) else {
                    return;
                };
                let t = self.clock.real_ns(ev.mono_ns);
                self.ledger.on_departure(end, t, &mut self.scratch);
                self.scratch.clear();
            }
            EventKind::Displaced => {
                if let Some(key) = self.offset(base, ev.seq, self.written) {
                    self.displaced.insert(key + 1);
                }
            }
            EventKind::Sched | EventKind::Snd | EventKind::Ack => {
                let kind = match ev.kind {
                    EventKind::Sched => TxKind::Sched,
                    EventKind::Snd => TxKind::Snd,
                    _ => TxKind::Ack,
                };
                // The key is the write's last byte: a write not yet told of is at most
                // one write ahead, so `written` is near.
                match self.offset(base, ev.seq, self.written) {
                    Some(key) => {
                        self.timestamps.reports += 1;
                        self.reports.push(RawReport {
                            kind,
                            key: key as u32,
                            time_ns: self.clock.real_ns(ev.mono_ns),
                        });
                    }
                    None => self.timestamps.before_stream += 1,
                }
            }
            EventKind::NoTimestamping => self.timestamping_error = Some(ev.aux),
            EventKind::Established | EventKind::Write | EventKind::Closed => {}
        }
    }
}

impl ProgramTap for SendTap {
    fn skip_bytes(&mut self, n: u64) {
        self.state.skip = n;
    }

    fn on_write(&mut self, seq: u64, end: u64, write_ns: u64) {
        let st = &mut self.state;
        st.written = st.written.max(end);
        let _ = st.ledger.on_write(seq, end, write_ns);
    }

    fn collect(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.tracer.take_queued(&mut self.events)?;
        for ev in self.events.drain(..) {
            self.state.on_event(ev);
        }
        Ok(())
    }

    fn take_reports(&mut self, out: &mut Vec<RawReport>) {
        out.append(&mut self.state.reports);
    }

    fn timestamping_error(&self) -> Option<i32> {
        self.state.timestamping_error
    }

    fn take(&mut self, seq: u64) -> Option<u64> {
        self.state.ledger.take(seq)
    }

    fn take_displaced(&mut self, end: u64) -> bool {
        self.state.displaced.remove(&end)
    }

    fn report(&self) -> ExactDepartureReport {
        let (lost, malformed) = self.tracer.lost();
        ExactDepartureReport {
            departures: self.state.ledger.departures,
            events_lost: lost,
            events_malformed: malformed,
        }
    }

    fn timestamps_report(&self) -> BpfTimestampsReport {
        let (lost, malformed) = self.tracer.lost();
        BpfTimestampsReport {
            events_lost: lost,
            events_malformed: malformed,
            ..self.state.timestamps
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(cookie: u64, kind: EventKind, seq: u32, mono_ns: u64) -> TraceEvent {
        TraceEvent {
            cookie,
            mono_ns,
            kind,
            seq,
            snd_nxt: 0,
            snd_una: 0,
            aux: 0,
            local: None,
            remote: None,
        }
    }

    #[test]
    fn reports_are_keyed_by_measured_stream_offset_for_the_tapped_connection_only() {
        let mut st = TapState::new(MonoToReal { offset_ns: 1_000 });
        // The first data byte is sequence number 0xFFFF_FF00: the stream wraps at 256 bytes.
        let base = 0xFFFF_FF00u32;
        st.on_event(event(7, EventKind::Established, base, 0));
        st.skip = 100; // a 100-byte hello before the measured stream
        st.written = 4096; // one measured write of 4096 bytes
                           // The hello's own report: not a measured write's.
        st.on_event(event(7, EventKind::Sched, base.wrapping_add(99), 10));
        // The measured write's last byte: stream offset 100 + 4095, measured offset 4095.
        st.on_event(event(7, EventKind::Sched, base.wrapping_add(4195), 20));
        st.on_event(event(7, EventKind::Ack, base.wrapping_add(4195), 30));
        // Another connection to the same port, and an event before any: ignored.
        st.on_event(event(8, EventKind::Sched, base.wrapping_add(4195), 40));
        assert_eq!(
            st.reports,
            vec![
                RawReport {
                    kind: TxKind::Sched,
                    key: 4095,
                    time_ns: 1_020
                },
                RawReport {
                    kind: TxKind::Ack,
                    key: 4095,
                    time_ns: 1_030
                },
            ]
        );
        assert_eq!((st.timestamps.reports, st.timestamps.before_stream), (2, 1));
        // The kernel refused BPF TX timestamping (-EOPNOTSUPP): said, not guessed around.
        st.on_event(TraceEvent {
            aux: -95,
            ..event(7, EventKind::NoTimestamping, 0, 50)
        });
        assert_eq!(st.timestamping_error, Some(-95));
    }

    #[test]
    fn no_event_counts_before_the_connection_is_established() {
        let mut st = TapState::new(MonoToReal { offset_ns: 0 });
        st.on_event(event(7, EventKind::Sched, 5, 1));
        assert!(st.reports.is_empty() && st.conn.is_none());
    }
}
