//! The wall clock as sbm records it: CLOCK_REALTIME in nanoseconds since the epoch (what
//! TX timestamps, the trip-times header and every `*_ns` column use).

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_REALTIME now, ns since the epoch (0 for a clock set before 1970).
pub fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// CLOCK_MONOTONIC (a BPF program's clock, `bpf_ktime_get_ns`) to CLOCK_REALTIME (sbm's
/// outputs' clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonoToReal {
    /// realtime − monotonic, ns.
    pub offset_ns: i128,
}

impl MonoToReal {
    /// realtime − monotonic now, read between two monotonic readings (the tightest of
    /// five): the offset is then known to within half that window.
    pub fn now() -> MonoToReal {
        use nix::time::{clock_gettime, ClockId};
        let ns = |id| {
            clock_gettime(id).map_or(0i128, |t| {
                i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
            })
        };
        let mut best: Option<(i128, i128)> = None;
        for _ in 0..5 {
            let m1 = ns(ClockId::CLOCK_MONOTONIC);
            let r = ns(ClockId::CLOCK_REALTIME);
            let m2 = ns(ClockId::CLOCK_MONOTONIC);
            let width = m2 - m1;
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, r - (m1 + m2) / 2));
            }
        }
        MonoToReal {
            offset_ns: best.map_or(0, |(_, o)| o),
        }
    }

    pub fn real_ns(&self, mono_ns: u64) -> u64 {
        (i128::from(mono_ns) + self.offset_ns).max(0) as u64
    }
}
