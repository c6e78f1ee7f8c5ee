//! The wall clock as sbm records it: CLOCK_REALTIME in nanoseconds since the epoch (what
//! TX timestamps, the trip-times header and every `*_ns` column use).

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_REALTIME now, ns since the epoch (0 for a clock set before 1970).
pub fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
