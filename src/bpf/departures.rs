//! sbm-send's third departure estimator (`--exact-departures`): the tracer's program
//! (per-packet departures only, no BPF TX timestamping) on the cgroup sbm-send's socket is
//! created in, its events matched to sbm-send's own writes by stream offset.
//!
//! The ring buffer is read when sbm-send reads its TX reports (and at the end), never on a
//! wakeup of its own: the estimator must not wake the send loop, or it could stand in for a
//! readiness wakeup the kernel did not give. A row becomes final at its ACK report, long
//! after its last byte left, so the departure is there by then.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use super::cgroup::FreshCgroup;
use super::trace::{EventKind, TraceSettings, Tracer};
use super::{require_root, BpfError};
use crate::clock::MonoToReal;
use crate::tstamp::departures::{
    unwrap_near, Departed, DepartureLedger, DepartureSource, ExactDepartureReport,
};

pub struct ExactDepartures {
    // Drop order: detach the program, then leave and remove our cgroup (if it is ours).
    tracer: Tracer,
    _cgroup: Option<FreshCgroup>,
    clock: MonoToReal,
    /// The connection's first data sequence number (its Established event).
    base: Option<u32>,
    /// Bytes sent before the measured stream (the trip-times hello): offsets start after.
    skip: u64,
    ledger: DepartureLedger,
    scratch: Vec<Departed>,
    /// End offsets of writes whose TX reports a later segment than their last byte's
    /// carries (the program saw the request leave without its key byte).
    displaced: std::collections::HashSet<u64>,
}

impl ExactDepartures {
    /// Attaches the program for connections to `port`: to `cgroup` (the BPF replenish
    /// program's, which this process has joined), or to a fresh cgroup this process then
    /// joins. Call before the socket exists.
    pub fn start(port: u16, cgroup: Option<BorrowedFd<'_>>) -> Result<ExactDepartures, BpfError> {
        require_root()?;
        let settings = TraceSettings {
            port: Some(port),
            timestamping: false,
            congestion: None,
        };
        let (tracer, own) = match cgroup {
            Some(fd) => (Tracer::attach(&settings, fd)?, None),
            None => {
                let mut c = FreshCgroup::create("sbm-depart")?;
                let tracer = Tracer::attach(&settings, c.as_fd())?;
                // Attached first, joined second: the socket created next is traced.
                c.join_self()?;
                (tracer, Some(c))
            }
        };
        Ok(ExactDepartures {
            tracer,
            _cgroup: own,
            clock: MonoToReal::now(),
            base: None,
            skip: 0,
            ledger: DepartureLedger::new(),
            scratch: vec![],
            displaced: Default::default(),
        })
    }
}

impl DepartureSource for ExactDepartures {
    fn skip_bytes(&mut self, n: u64) {
        self.skip = n;
    }

    fn on_write(&mut self, seq: u64, end: u64, write_ns: u64) {
        let _ = self.ledger.on_write(seq, end, write_ns);
    }

    fn collect(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        for ev in self.tracer.poll(Duration::ZERO)? {
            match ev.kind {
                EventKind::Established if self.base.is_none() => self.base = Some(ev.seq),
                EventKind::Depart => {
                    let Some(base) = self.base else { continue };
                    let near = self.ledger.sent() + self.skip;
                    let end = unwrap_near(ev.seq.wrapping_sub(base), near);
                    let t = self.clock.real_ns(ev.mono_ns);
                    self.ledger
                        .on_departure(end.saturating_sub(self.skip), t, &mut self.scratch);
                    self.scratch.clear();
                }
                EventKind::Displaced => {
                    let Some(base) = self.base else { continue };
                    let near = self.ledger.sent() + self.skip;
                    let key = unwrap_near(ev.seq.wrapping_sub(base), near);
                    self.displaced.insert((key + 1).saturating_sub(self.skip));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn take(&mut self, seq: u64) -> Option<u64> {
        self.ledger.take(seq)
    }

    fn take_displaced(&mut self, end: u64) -> bool {
        self.displaced.remove(&end)
    }

    fn report(&self) -> ExactDepartureReport {
        let (lost, malformed) = self.tracer.lost();
        ExactDepartureReport {
            departures: self.ledger.departures,
            events_lost: lost,
            events_malformed: malformed,
        }
    }
}
