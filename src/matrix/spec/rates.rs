//! Rate schedules as the matrix file gives them (`[rates."NAME"] schedule = [{ at = "20s",
//! rate = "500kbit" }, …]`) and validated against the cell's duration. Applying them during
//! a cell is `super::super::schedule`'s job.

use std::time::Duration;

use serde::Deserialize;

use super::SpecError;
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
        let rate_bps = super::parse_rate(&s.rate).map_err(|e| bad(format!("rate: {e}")))?;
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
