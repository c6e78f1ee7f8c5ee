//! The delay line's logic: per direction, a FIFO of packet ids each due `delay` after it
//! arrived. Releases are batched per queue (all due packets of a queue are the oldest ones,
//! so one batch verdict "every id ≤ newest due" accepts exactly them). Times are
//! nanoseconds of a monotonic clock supplied by the caller, so this is tested without one.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::stats::LatencyHist;

/// One direction of the path: an NFQUEUE number and its one-way delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectionSpec {
    pub queue: u16,
    pub name: String,
    pub delay_ns: u64,
}

struct Direction {
    spec: DirectionSpec,
    held: VecDeque<(u32, u64)>,
    received: u64,
    released: u64,
    gso: u64,
    peak_held: usize,
    late: LatencyHist,
}

/// What the caller must tell the kernel: accept every packet of `queue` with id ≤ `max_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub queue: u16,
    pub max_id: u32,
    pub count: u64,
}

/// Counters of one direction, as written to the stats file and printed on exit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DirectionStats {
    pub queue: u16,
    pub name: String,
    pub delay_us: u64,
    pub received: u64,
    pub released: u64,
    pub held: u64,
    pub peak_held: u64,
    pub gso_packets: u64,
    /// How late packets were released after they fell due, µs.
    pub late_p50_us: Option<u64>,
    pub late_p99_us: Option<u64>,
    pub late_max_us: Option<u64>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("packet {id} arrived on queue {queue}, which this delay line does not serve")]
pub struct UnknownQueue {
    pub queue: u16,
    pub id: u32,
}

pub struct DelayLine {
    dirs: Vec<Direction>,
}

impl DelayLine {
    pub fn new(specs: Vec<DirectionSpec>) -> DelayLine {
        DelayLine {
            dirs: specs
                .into_iter()
                .map(|spec| Direction {
                    spec,
                    held: VecDeque::with_capacity(4096),
                    received: 0,
                    released: 0,
                    gso: 0,
                    peak_held: 0,
                    late: LatencyHist::new(),
                })
                .collect(),
        }
    }

    pub fn on_packet(
        &mut self,
        queue: u16,
        id: u32,
        gso: bool,
        now_ns: u64,
    ) -> Result<(), UnknownQueue> {
        let d = self
            .dirs
            .iter_mut()
            .find(|d| d.spec.queue == queue)
            .ok_or(UnknownQueue { queue, id })?;
        d.held.push_back((id, now_ns + d.spec.delay_ns));
        d.received += 1;
        d.gso += u64::from(gso);
        d.peak_held = d.peak_held.max(d.held.len());
        Ok(())
    }

    /// The earliest time a held packet falls due.
    pub fn next_due(&self) -> Option<u64> {
        self.dirs
            .iter()
            .filter_map(|d| d.held.front().map(|&(_, due)| due))
            .min()
    }

    pub fn held(&self) -> u64 {
        self.dirs.iter().map(|d| d.held.len() as u64).sum()
    }

    /// Takes every packet due at `now_ns` (all packets with `all`), one release per queue.
    pub fn release(&mut self, now_ns: u64, all: bool, out: &mut Vec<Release>) {
        for d in &mut self.dirs {
            let mut last = None;
            let mut count = 0;
            while let Some(&(id, due)) = d.held.front() {
                if due > now_ns && !all {
                    break;
                }
                d.held.pop_front();
                d.late.record(now_ns.saturating_sub(due) / 1_000);
                last = Some(id);
                count += 1;
            }
            if let Some(max_id) = last {
                d.released += count;
                out.push(Release {
                    queue: d.spec.queue,
                    max_id,
                    count,
                });
            }
        }
    }

    pub fn stats(&self) -> Vec<DirectionStats> {
        self.dirs
            .iter()
            .map(|d| {
                let p = d.late.percentiles();
                DirectionStats {
                    queue: d.spec.queue,
                    name: d.spec.name.clone(),
                    delay_us: d.spec.delay_ns / 1_000,
                    received: d.received,
                    released: d.released,
                    held: d.held.len() as u64,
                    peak_held: d.peak_held as u64,
                    gso_packets: d.gso,
                    late_p50_us: p.p50_us,
                    late_p99_us: p.p99_us,
                    late_max_us: p.max_us,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> DelayLine {
        DelayLine::new(vec![
            DirectionSpec {
                queue: 0,
                name: "fwd".into(),
                delay_ns: 86_000_000,
            },
            DirectionSpec {
                queue: 1,
                name: "rev".into(),
                delay_ns: 40_000_000,
            },
        ])
    }

    #[test]
    fn packets_are_held_for_their_direction_delay_and_released_in_order() {
        let mut l = line();
        let mut out = vec![];
        l.on_packet(0, 1, false, 0).unwrap();
        l.on_packet(0, 2, false, 1_000_000).unwrap();
        l.on_packet(1, 7, true, 2_000_000).unwrap();
        assert_eq!(l.next_due(), Some(42_000_000));
        l.release(41_999_999, false, &mut out);
        assert!(out.is_empty());
        l.release(42_000_000, false, &mut out);
        assert_eq!(
            out,
            [Release {
                queue: 1,
                max_id: 7,
                count: 1
            }]
        );
        out.clear();
        l.release(86_500_000, false, &mut out);
        assert_eq!(
            out,
            [Release {
                queue: 0,
                max_id: 1,
                count: 1
            }]
        );
        out.clear();
        l.release(88_000_000, false, &mut out);
        assert_eq!(
            out,
            [Release {
                queue: 0,
                max_id: 2,
                count: 1
            }]
        );
        let s = l.stats();
        assert_eq!(
            (s[0].received, s[0].released, s[0].held, s[0].peak_held),
            (2, 2, 0, 2)
        );
        assert_eq!(s[0].late_max_us, Some(1_000)); // id 2 was due at 87 ms, released at 88
        assert_eq!(s[1].gso_packets, 1);
    }

    #[test]
    fn one_batch_per_queue_covers_all_due_packets() {
        let mut l = line();
        for id in 10..20 {
            l.on_packet(0, id, false, u64::from(id)).unwrap();
        }
        let mut out = vec![];
        l.release(86_000_015, false, &mut out);
        assert_eq!(
            out,
            [Release {
                queue: 0,
                max_id: 15,
                count: 6
            }]
        );
        out.clear();
        l.release(0, true, &mut out);
        assert_eq!(
            out,
            [Release {
                queue: 0,
                max_id: 19,
                count: 4
            }]
        );
        assert_eq!(l.held(), 0);
        assert_eq!(l.next_due(), None);
    }

    #[test]
    fn unknown_queue_is_reported() {
        let mut l = line();
        assert_eq!(
            l.on_packet(9, 3, false, 0),
            Err(UnknownQueue { queue: 9, id: 3 })
        );
    }
}
