//! The exact departure of every write's last byte, from per-packet departures: the end of
//! each segment that raised the highest sequence number sent (BPF, `bpf/trace.bpf.c`). The
//! first such segment whose end reaches a write's end carried its last byte; retransmissions
//! never raise the highest sent, so they are not departures. Used by sbm-trace for every
//! traced connection and by sbm-send's `--exact-departures` (through `super::tap`).

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

/// summary.json `exact_departures` (sbm-send --exact-departures).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ExactDepartureReport {
    /// Segments that raised the highest sequence sent.
    pub departures: u64,
    /// Events the BPF program could not queue (ring buffer full; their writes have no
    /// exact departure) and records that did not decode.
    pub events_lost: u64,
    pub events_malformed: u64,
}

/// The offset whose low 32 bits are `low` nearest to `near` (sequence numbers wrap every
/// 4 GiB; every offset compared here is within 2 GiB of the reference).
pub fn unwrap_near(low: u32, near: u64) -> u64 {
    let candidate = (near & !0xFFFF_FFFF) | u64::from(low);
    let span = 1u64 << 32;
    [
        candidate.checked_sub(span),
        Some(candidate),
        candidate.checked_add(span),
    ]
    .into_iter()
    .flatten()
    .min_by_key(|c| c.abs_diff(near))
    .expect("candidate itself is always there")
}

/// A write whose last byte left: its sequence number, its write time and the departure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departed {
    pub seq: u64,
    pub write_ns: u64,
    pub depart_ns: u64,
}

/// Writes waiting for their last byte to leave, and the departures found for them.
#[derive(Debug, Default)]
pub struct DepartureLedger {
    /// Stream offset reached by the highest sequence sent.
    sent: u64,
    /// (write seq, end offset, write time), in write order.
    awaiting: VecDeque<(u64, u64, u64)>,
    departed: HashMap<u64, u64>,
    /// Departures that raised the highest sent.
    pub departures: u64,
}

impl DepartureLedger {
    pub fn new() -> DepartureLedger {
        DepartureLedger::default()
    }

    /// The stream offset the departures have reached.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// A write of `seq` ending at stream offset `end`, written at `write_ns`. A write whose
    /// end already left (the segment went before the write's callback) departs at once, at
    /// its write time.
    pub fn on_write(&mut self, seq: u64, end: u64, write_ns: u64) -> Option<Departed> {
        if self.sent >= end {
            self.departed.insert(seq, write_ns);
            return Some(Departed {
                seq,
                write_ns,
                depart_ns: write_ns,
            });
        }
        self.awaiting.push_back((seq, end, write_ns));
        None
    }

    /// A segment ending at stream offset `end` left at `t`: the writes whose last byte it
    /// carried are appended to `out`. False when it did not raise the highest sent (a
    /// retransmission).
    pub fn on_departure(&mut self, end: u64, t: u64, out: &mut Vec<Departed>) -> bool {
        if end <= self.sent {
            return false;
        }
        self.sent = end;
        self.departures += 1;
        while let Some(&(seq, w_end, write_ns)) = self.awaiting.front() {
            if w_end > end {
                break;
            }
            self.awaiting.pop_front();
            self.departed.insert(seq, t);
            out.push(Departed {
                seq,
                write_ns,
                depart_ns: t,
            });
        }
        true
    }

    /// The departure of write `seq`, once (None: not departed, or already taken).
    pub fn take(&mut self, seq: u64) -> Option<u64> {
        self.departed.remove(&seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_unwrap_across_the_sequence_wrap() {
        assert_eq!(unwrap_near(5, 0), 5);
        assert_eq!(unwrap_near(0xFFFF_FFF0, 1 << 32), 0xFFFF_FFF0);
        assert_eq!(unwrap_near(16, (1 << 32) - 100), (1 << 32) + 16);
    }

    #[test]
    fn the_first_segment_reaching_a_writes_end_is_its_departure() {
        let mut l = DepartureLedger::new();
        let mut out = vec![];
        assert_eq!(l.on_write(0, 3000, 10), None);
        assert_eq!(l.on_write(1, 6000, 20), None);
        assert!(l.on_departure(1448, 30, &mut out));
        assert!(out.is_empty());
        assert!(l.on_departure(4344, 40, &mut out));
        assert_eq!(
            out,
            vec![Departed {
                seq: 0,
                write_ns: 10,
                depart_ns: 40
            }]
        );
        // A retransmission is not a departure.
        assert!(!l.on_departure(2896, 45, &mut out));
        assert!(l.on_departure(6000, 50, &mut out));
        assert_eq!(out.len(), 2);
        assert_eq!(
            (l.take(1), l.take(1), l.take(0)),
            (Some(50), None, Some(40))
        );
        assert_eq!(l.departures, 3);
        // Written after its bytes were already counted sent: departs at its write time.
        assert!(l.on_departure(7000, 60, &mut out));
        assert_eq!(l.on_write(2, 7000, 65).map(|d| d.depart_ns), Some(65));
    }
}
