//! Paths whose rate changes during a cell: `[rates."NAME"] schedule = [{ at = "20s",
//! rate = "500kbit" }, …]`, applied with the test bed's `set` at those instants after the
//! sender connected, each change recorded in meta.json with when it took effect.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::spec::SpecError;
use crate::testbed::wan;
use crate::units;

/// One step of a schedule, as the matrix file gives it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateStep {
    /// After the sender connected.
    pub at: String,
    /// A bit rate, or `off`.
    pub rate: String,
    /// A new bottleneck queue (in time, as `path.queue`); unset: the queue stays.
    pub queue: Option<String>,
}

/// A validated step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledRate {
    pub at: Duration,
    pub rate_bps: Option<u64>,
    pub queue: Option<Duration>,
}

/// Checks a schedule against the cell's duration: steps in order, inside the run.
pub fn parse(
    what: &str,
    steps: &[RateStep],
    duration: Duration,
) -> Result<Vec<ScheduledRate>, SpecError> {
    let bad = |m: String| SpecError::Invalid(format!("{what}.schedule: {m}"));
    let mut out: Vec<ScheduledRate> = Vec::with_capacity(steps.len());
    for s in steps {
        let at = units::parse_duration(&s.at).map_err(|e| bad(format!("at: {e}")))?;
        if out.last().is_some_and(|p| p.at >= at) {
            return Err(bad(format!(
                "steps must be in time order ({} after an earlier or equal step)",
                s.at
            )));
        }
        if at >= duration {
            return Err(bad(format!(
                "a step at {} is not inside the {duration:?} run",
                s.at
            )));
        }
        let rate_bps = super::spec::parse_rate(&s.rate).map_err(|e| bad(format!("rate: {e}")))?;
        let queue = s
            .queue
            .as_deref()
            .map(units::parse_duration)
            .transpose()
            .map_err(|e| bad(format!("queue: {e}")))?;
        out.push(ScheduledRate {
            at,
            rate_bps,
            queue,
        });
    }
    Ok(out)
}

/// meta.json's record of one change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RateChange {
    /// When it was due, seconds after the sender connected.
    pub at_s: f64,
    pub rate_bps: Option<u64>,
    /// The queue in bytes as installed (None: the change failed, or no shaping).
    pub queue_bytes: Option<u64>,
    /// When `set` was started, CLOCK_REALTIME ns: the change took effect between this and
    /// `applied_unix_ns` (absent, 0, in records from before it was kept).
    #[serde(default)]
    pub started_unix_ns: u64,
    /// When `set` returned (the change in place), CLOCK_REALTIME ns and seconds after the
    /// sender connected.
    pub applied_unix_ns: u64,
    pub applied_s: f64,
    /// Why the change failed, if it did.
    pub error: Option<String>,
}

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
            started_unix_ns,
            applied_unix_ns,
            applied_s,
            error: None,
        },
        Err(e) => RateChange {
            at_s: step.at.as_secs_f64(),
            rate_bps: step.rate_bps,
            queue_bytes: None,
            started_unix_ns,
            applied_unix_ns,
            applied_s,
            error: Some(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(at: &str, rate: &str) -> RateStep {
        RateStep {
            at: at.into(),
            rate: rate.into(),
            queue: None,
        }
    }

    #[test]
    fn schedules_are_checked_against_the_run() {
        let run = Duration::from_secs(60);
        let s = parse(
            "rates.x",
            &[step("20s", "500kbit"), step("40s", "2mbit")],
            run,
        )
        .unwrap();
        assert_eq!(s[0].at, Duration::from_secs(20));
        assert_eq!(s[1].rate_bps, Some(2_000_000));
        for (bad, why) in [
            (
                vec![step("40s", "1mbit"), step("20s", "2mbit")],
                "time order",
            ),
            (vec![step("60s", "1mbit")], "inside"),
            (vec![step("10", "1mbit")], "at:"),
            (vec![step("10s", "fast")], "rate:"),
        ] {
            let e = parse("rates.x", &bad, run).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("rates.x.schedule"), "{e}");
        }
        let q = RateStep {
            queue: Some("50ms".into()),
            ..step("1s", "off")
        };
        let s = parse("r", &[q], run).unwrap();
        assert_eq!(
            (s[0].rate_bps, s[0].queue),
            (None, Some(Duration::from_millis(50)))
        );
    }
}
