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

/// A civil UTC date and time from seconds since the epoch: (year, month, day, hour,
/// minute, second), by Howard Hinnant's days-from-civil inverse.
pub fn utc_civil(unix_s: u64) -> (i64, u32, u32, u32, u32, u32) {
    let (days, rem) = (unix_s / 86_400, unix_s % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    let r = rem as u32;
    (y, m, d, r / 3600, r % 3600 / 60, r % 60)
}

/// `2026-12-03 22:01:41 UTC`.
pub fn utc_date_time(unix_s: u64) -> String {
    let (y, m, d, hh, mm, ss) = utc_civil(unix_s);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02} UTC")
}

#[cfg(test)]
mod civil_tests {
    #[test]
    fn utc_dates_are_civil_dates() {
        assert_eq!(super::utc_date_time(0), "1970-01-01 00:00:00 UTC");
        // 2026-12-03 22:01:41 UTC, and a leap day.
        assert_eq!(
            super::utc_date_time(1_796_335_301),
            "2026-12-03 22:01:41 UTC"
        );
        assert_eq!(super::utc_date_time(951_782_400), "2000-02-29 00:00:00 UTC");
    }
}
