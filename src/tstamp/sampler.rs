//! A second, independent departure estimate for every write, from samples of TCP's
//! snd_nxt (bytes written − SIOCOUTQNSD) taken at every event of the loop and on a timer.
//!
//! TX_SCHED reports thin out when writes share an skb (only the last write into an skb
//! keeps a key), so a write's own report is a biased sample. Sampling covers every write:
//! its last byte left between the last sample that had not yet passed its end offset and the
//! first that had. Each sample brackets the ioctl with two clock readings, so the bounds hold
//! whatever the ioctl's own duration: the byte left after `before` of the earlier sample and
//! before `after` of the later one.

use std::collections::VecDeque;

/// When a write's last byte left the socket: in `[lo_ns, hi_ns]` (CLOCK_REALTIME).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    pub lo_ns: u64,
    pub hi_ns: u64,
}

impl Departure {
    /// The midpoint, the estimate sbm reports.
    pub fn estimate_ns(&self) -> u64 {
        self.lo_ns + (self.hi_ns - self.lo_ns) / 2
    }

    /// Half the bracket: the estimate's error bound.
    pub fn error_ns(&self) -> u64 {
        (self.hi_ns - self.lo_ns) / 2
    }
}

/// One reading of snd_nxt: the clock just before and just after the ioctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub before_ns: u64,
    pub after_ns: u64,
    /// Bytes that had left the socket (written − notsent).
    pub sent: u64,
}

#[derive(Debug, Default)]
pub struct DepartureSampler {
    /// Writes not yet departed: (seq, end offset, write time).
    pending: VecDeque<(u64, u64, u64)>,
    /// Departed writes not yet taken: (seq, departure).
    departed: VecDeque<(u64, Departure)>,
    /// The clock before the last sample that saw bytes still unsent.
    last_before_ns: u64,
    samples: u64,
}

impl DepartureSampler {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Registers a write (before its after-write sample).
    pub fn on_write(&mut self, seq: u64, end_offset: u64, write_ns: u64) {
        self.pending.push_back((seq, end_offset, write_ns));
    }

    /// Takes a sample: every pending write whose end offset the sent count has reached
    /// departed in (earlier sample's before, this sample's after].
    pub fn sample(&mut self, s: Sample) {
        self.samples += 1;
        while let Some(&(seq, end, write_ns)) = self.pending.front() {
            if end > s.sent {
                break;
            }
            self.pending.pop_front();
            let lo = self.last_before_ns.max(write_ns);
            self.departed.push_back((
                seq,
                Departure {
                    lo_ns: lo,
                    hi_ns: s.after_ns.max(lo),
                },
            ));
        }
        self.last_before_ns = s.before_ns;
    }

    /// The departure of write `seq`, if sampled; forgets departures of earlier writes.
    pub fn take(&mut self, seq: u64) -> Option<Departure> {
        while let Some(&(s, d)) = self.departed.front() {
            if s > seq {
                return None;
            }
            self.departed.pop_front();
            if s == seq {
                return Some(d);
            }
        }
        None
    }

    /// Writes waiting for their departure.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(before: u64, after: u64, sent: u64) -> Sample {
        Sample {
            before_ns: before,
            after_ns: after,
            sent,
        }
    }

    #[test]
    fn a_write_departs_between_the_samples_around_its_end_offset() {
        let mut d = DepartureSampler::new();
        d.on_write(1, 100, 1_000);
        d.sample(s(1_010, 1_020, 0)); // after-write sample: nothing left yet
        d.sample(s(5_000, 5_005, 60)); // timer: part of it left
        d.sample(s(9_000, 9_004, 100)); // all of it
        let dep = d.take(1).unwrap();
        assert_eq!(
            dep,
            Departure {
                lo_ns: 5_000,
                hi_ns: 9_004
            }
        );
        assert_eq!(dep.estimate_ns(), 7_002);
        assert_eq!(dep.error_ns(), 2_002);
    }

    #[test]
    fn a_write_sent_during_the_call_is_bounded_by_its_own_time() {
        let mut d = DepartureSampler::new();
        d.sample(s(100, 110, 0));
        d.on_write(1, 512, 1_000);
        d.sample(s(1_050, 1_060, 512)); // notsent 0 right after the write
        assert_eq!(
            d.take(1),
            Some(Departure {
                lo_ns: 1_000,
                hi_ns: 1_060
            })
        );
    }

    #[test]
    fn one_sample_can_settle_many_writes_and_take_skips_forward() {
        let mut d = DepartureSampler::new();
        for seq in 1..=5 {
            d.on_write(seq, seq * 100, seq);
        }
        d.sample(s(10, 11, 0));
        d.sample(s(20, 21, 350));
        assert_eq!(d.pending(), 2);
        assert_eq!(
            d.take(2),
            Some(Departure {
                lo_ns: 10,
                hi_ns: 21
            })
        );
        assert_eq!(d.take(1), None, "earlier departures are forgotten");
        assert_eq!(d.take(4), None, "not departed yet");
        d.sample(s(30, 31, 500));
        assert_eq!(
            d.take(5),
            Some(Departure {
                lo_ns: 20,
                hi_ns: 31
            })
        );
    }
}
