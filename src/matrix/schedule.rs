//! Paths whose rate changes during a cell (the schedule of `super::spec::rates`), applied
//! with the test bed's `set` at those instants after the sender connected, each change
//! recorded in meta.json with when it took effect.

use std::path::Path;
use std::time::{Duration, Instant};

use super::record::RateChange;
use super::spec::rates::ScheduledRate;
use crate::testbed::wan;

/// The instant the sender connected: its banner line ("sbm-send V: LOCAL -> PEER, …")
/// appears right after connect in one of `logs` (send.log; a UML guest's console). None if
/// it did not within `patience` (a failed start).
pub fn wait_for_connect(
    logs: &[&Path],
    patience: Duration,
    child_alive: &mut dyn FnMut() -> bool,
) -> Option<Instant> {
    let banner = |t: String| {
        t.lines()
            .any(|l| l.trim_start().starts_with("sbm-send ") && l.contains(" -> "))
    };
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if logs
            .iter()
            .any(|p| std::fs::read_to_string(p).is_ok_and(banner))
        {
            return Some(Instant::now());
        }
        if !child_alive() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Applies one step now; `origin` is when the sender connected.
pub fn apply(prefix: &str, step: &ScheduledRate, origin: Instant) -> RateChange {
    let started_unix_ns = crate::clock::realtime_ns();
    let result = wan::set(prefix, step.rate_bps, step.queue, None);
    let applied_unix_ns = crate::clock::realtime_ns();
    let applied_s = origin.elapsed().as_secs_f64();
    match result {
        Ok(state) => RateChange {
            at_s: step.at.as_secs_f64(),
            rate_bps: step.rate_bps,
            queue_bytes: state.rate_bps.map(|rate_bps| {
                crate::testbed::plan::Bottleneck {
                    rate_bps,
                    queue: Duration::from_micros(state.queue_us),
                }
                .limit_bytes()
            }),
            started_unix_ns: Some(started_unix_ns),
            applied_unix_ns,
            applied_s,
            error: None,
        },
        Err(e) => RateChange {
            at_s: step.at.as_secs_f64(),
            rate_bps: step.rate_bps,
            queue_bytes: None,
            started_unix_ns: Some(started_unix_ns),
            applied_unix_ns,
            applied_s,
            error: Some(e.to_string()),
        },
    }
}
