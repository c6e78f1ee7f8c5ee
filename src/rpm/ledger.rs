//! sbm-rpm-server's ledger of self probes: how long each probe's response waited in the
//! socket's unsent backlog.
//!
//! When the handler has a probe's response ready, every byte already written to the
//! socket is ahead of it. The wait is the time until all of those bytes had left the
//! socket, that is until snd_nxt passed the socket's write offset at that moment. The
//! offset is known exactly (the bytes written so far); snd_nxt is sampled as written −
//! SIOCOUTQNSD, with the clock read before and after each ioctl, so each wait is a bracket
//! with an error bound (as `tstamp::sampler` does for sbm-send's writes). HTTP/2's own
//! buffer above the socket (`--h2-send-buffer`) is not in this figure.

use std::collections::VecDeque;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One self probe's wait, as the server's probes.csv records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeWait {
    /// The client's probe id (its `x-sbm-probe` header).
    pub probe_id: String,
    pub connection: u64,
    /// When the response was ready, since the server started.
    pub ready_s: f64,
    /// The same moment on CLOCK_REALTIME, ns (the clock of `testbed/wan queue-trace` and
    /// sbm's other `*_ns` columns).
    pub ready_unix_ns: u64,
    /// Unsent bytes in the socket at that moment.
    pub backlog_bytes: u32,
    /// The wait's midpoint, and half its bracket.
    pub socket_wait_ms: f64,
    pub bound_ms: f64,
    /// The wait of the response's own bytes: from ready until the socket's bytes up to
    /// the first flush after HTTP/2 took the response's body had left (so HTTP/2's buffer
    /// above the socket is in it; bytes written in that flush after the response are too).
    /// Its midpoint and half its bracket; empty when the connection ended first.
    pub response_wait_ms: Option<f64>,
    pub response_bound_ms: Option<f64>,
    /// Bytes written to the socket between ready and that flush.
    pub written_after_ready: Option<u64>,
}

/// A connection's probes whose backlog has not yet left.
#[derive(Debug, Default)]
pub struct PendingProbes {
    /// (id, ready, known: when the offset was known, offset to pass, backlog then)
    pending: VecDeque<(String, Instant, Instant, u64, u32)>,
    /// The clock before the last sample that had not passed the front's offset.
    last_before: Option<Instant>,
}

/// A wait, as measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub probe_id: String,
    pub ready: Instant,
    pub backlog_bytes: u32,
    pub lo_ms: f64,
    pub hi_ms: f64,
}

impl PendingProbes {
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// A response is ready at `ready`, with `written` bytes written to the socket and
    /// `backlog` of them unsent. With no backlog the wait is zero, known at once.
    pub fn ready(
        &mut self,
        id: String,
        ready: Instant,
        written: u64,
        backlog: u32,
    ) -> Option<Measured> {
        self.offset_known(id, ready, ready, written, backlog)
    }

    /// The wait of a probe ready at `ready` until the socket's first `offset` bytes have
    /// left, that offset known only at `known` (when `backlog` of them were unsent): the
    /// wait is at least `known − ready`, and with no backlog then it is exactly that.
    pub fn offset_known(
        &mut self,
        id: String,
        ready: Instant,
        known: Instant,
        offset: u64,
        backlog: u32,
    ) -> Option<Measured> {
        if backlog == 0 {
            let ms = known.saturating_duration_since(ready).as_secs_f64() * 1e3;
            return Some(Measured {
                probe_id: id,
                ready,
                backlog_bytes: 0,
                lo_ms: ms,
                hi_ms: ms,
            });
        }
        if self.pending.is_empty() {
            self.last_before = Some(known);
        }
        self.pending.push_back((id, ready, known, offset, backlog));
        None
    }

    /// A sample: `sent` bytes had left the socket, read between `before` and `after`.
    /// Returns the probes whose offset it has passed.
    pub fn sample(&mut self, before: Instant, after: Instant, sent: u64) -> Vec<Measured> {
        let mut done = Vec::new();
        while let Some((_, _, _, offset, _)) = self.pending.front() {
            if *offset > sent {
                break;
            }
            let (id, ready, known, _, backlog) = self.pending.pop_front().expect("front");
            let lo = self.last_before.unwrap_or(known).max(known);
            let ms = |t: Instant| t.saturating_duration_since(ready).as_secs_f64() * 1e3;
            done.push(Measured {
                probe_id: id,
                ready,
                backlog_bytes: backlog,
                lo_ms: ms(lo),
                hi_ms: ms(after).max(ms(lo)),
            });
        }
        self.last_before = Some(before);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_wait_is_bracketed_by_the_samples_around_the_backlogs_departure() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut p = PendingProbes::default();
        // Ready at 0 ms with 10 000 bytes written, 4000 of them unsent.
        assert_eq!(p.ready("a".into(), t0, 10_000, 4_000), None);
        // At 5 ms only 8000 had left: not yet.
        assert!(p.sample(ms(5), ms(6), 8_000).is_empty());
        // By the sample read between 9 and 10 ms, all 10 000 had.
        let done = p.sample(ms(9), ms(10), 10_000);
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].lo_ms, done[0].hi_ms), (5.0, 10.0));
        assert!(p.is_empty());
    }

    #[test]
    fn an_offset_known_late_waits_at_least_from_ready_until_then() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut p = PendingProbes::default();
        // Ready at 0, its offset known at 7 ms with nothing unsent: 7 ms exactly.
        let m = p.offset_known("a".into(), t0, ms(7), 900, 0).unwrap();
        assert_eq!((m.lo_ms, m.hi_ms), (7.0, 7.0));
        // Known at 7 ms with a backlog: a sample read from 3 ms on cannot start it earlier.
        assert_eq!(p.offset_known("b".into(), t0, ms(7), 2_000, 100), None);
        let done = p.sample(ms(3), ms(12), 2_000);
        assert_eq!((done[0].lo_ms, done[0].hi_ms), (7.0, 12.0));
    }

    #[test]
    fn no_backlog_is_no_wait() {
        let mut p = PendingProbes::default();
        let m = p.ready("b".into(), Instant::now(), 500, 0).unwrap();
        assert_eq!((m.lo_ms, m.hi_ms, m.backlog_bytes), (0.0, 0.0, 0));
        assert!(p.is_empty());
    }
}
