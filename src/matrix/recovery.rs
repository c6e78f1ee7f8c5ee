//! How long after each rate change the content's age returns to its floor, from a cell's
//! frames.csv and the changes meta.json records — the live-video question: how fast does
//! each readiness rule bring the content back to fresh when the path slows or recovers?
//!
//! The floor is the median age at the sink of the frames generated after the warm-up and
//! before the first change. After a change at c, the age is back at its floor at the first
//! frame (content time ≥ c) such that every frame received in the [`HOLD`] from it (at least
//! 90 % of which the run covers) is at most the floor plus the larger of 25 % of the floor
//! and 10 ms; the recovery time is that frame's content time − c (a frame period or less when
//! the change never lifted the age). A later spike does not undo a return. None: not back
//! before the next change or the end of the run.

use std::path::Path;
use std::time::Duration;

use crate::report::schema::FrameRow;

/// How long the age must stay at its floor to count as back.
pub const HOLD: Duration = Duration::from_secs(1);

/// The tolerance above the floor: the larger of a share of it and an absolute margin.
fn ceiling(floor_us: u64) -> u64 {
    floor_us + (floor_us / 4).max(10_000)
}

/// What a cell's frames say about the rate changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    pub floor_us: Option<u64>,
    /// Per change, seconds until the age was back at its floor.
    pub after_change_s: Vec<Option<f64>>,
}

/// Frames (any order) and the instants of the changes (CLOCK_REALTIME ns, in order).
pub fn recovery(frames: &[FrameRow], changes_ns: &[u64]) -> Recovery {
    let mut got: Vec<(u64, u64)> = frames
        .iter()
        .filter_map(|f| Some((f.content_ns, f.age_sink_us?)))
        .collect();
    got.sort_unstable();
    let first_change = changes_ns.first().copied().unwrap_or(u64::MAX);
    let mut before: Vec<u64> = frames
        .iter()
        .filter(|f| !f.warmup && f.content_ns < first_change)
        .filter_map(|f| f.age_sink_us)
        .collect();
    before.sort_unstable();
    let floor_us = (!before.is_empty()).then(|| before[before.len() / 2]);
    let Some(floor) = floor_us else {
        return Recovery {
            floor_us,
            after_change_s: vec![None; changes_ns.len()],
        };
    };
    let top = ceiling(floor);
    let hold = HOLD.as_nanos() as u64;
    let after_change_s = changes_ns
        .iter()
        .enumerate()
        .map(|(k, &c)| {
            let until = changes_ns.get(k + 1).copied().unwrap_or(u64::MAX);
            let span: Vec<(u64, u64)> = got
                .iter()
                .copied()
                .filter(|&(t, _)| t >= c && t < until)
                .collect();
            // The first frame from which a whole HOLD of frames stays under the ceiling: a
            // later spike does not undo a return.
            (0..span.len())
                .find(|&i| {
                    let start = span[i].0;
                    let window: Vec<&(u64, u64)> = span[i..]
                        .iter()
                        .take_while(|&&(t, _)| t <= start + hold)
                        .collect();
                    let covered = window
                        .last()
                        .is_some_and(|&&(t, _)| t - start >= hold * 9 / 10);
                    covered && window.iter().all(|&&(_, a)| a <= top)
                })
                .map(|i| (span[i].0 - c) as f64 / 1e9)
        })
        .collect();
    Recovery {
        floor_us,
        after_change_s,
    }
}

/// A cell's recovery from its files (None: no frames.csv or no changes recorded).
pub fn of_cell(dir: &Path) -> Option<Recovery> {
    let changes: Vec<u64> = super::record::Meta::read(dir)?
        .rate_changes
        .iter()
        .map(|c| c.applied_unix_ns)
        .collect();
    if changes.is_empty() {
        return None;
    }
    let file = crate::report::compressed::open(&dir.join("frames.csv")).ok()?;
    let frames: Vec<FrameRow> = csv::Reader::from_reader(file)
        .deserialize()
        .collect::<Result<_, _>>()
        .ok()?;
    Some(recovery(&frames, &changes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn frame(t_ms: u64, age_ms: u64) -> FrameRow {
        FrameRow {
            writes: 1,
            age_sink_us: Some(age_ms * 1000),
            ..FrameRow::generated(t_ms, 1000, t_ms * 1_000_000, t_ms < 1000, "written")
        }
    }

    #[test]
    fn the_age_is_back_when_a_whole_hold_stays_under_the_ceiling() {
        // 100 ms frames; floor 100 ms (ceiling 125 ms). At 3 s the rate drops: ages climb
        // to 900 ms and are back from 4.5 s; at 6 s the rate returns and nothing rises.
        let mut frames = vec![];
        for t in (0..9000).step_by(100) {
            let age = match t {
                3000..=4400 => 100 + (t - 2900) / 2,
                _ => 100,
            };
            frames.push(frame(t, age));
        }
        let r = recovery(&frames, &[3 * S, 6 * S]);
        assert_eq!(r.floor_us, Some(100_000));
        assert_eq!(r.after_change_s, [Some(1.5), Some(0.0)]);
        // A single late spike does not undo the returns.
        let mut spiked = frames.clone();
        spiked[75].age_sink_us = Some(900_000); // at 7.5 s
        spiked[89].age_sink_us = Some(900_000); // the last frame, 8.9 s
        let r = recovery(&spiked, &[3 * S, 6 * S]);
        assert_eq!(r.after_change_s, [Some(1.5), Some(0.0)]);
        // Still high when the next change comes: not back.
        let r = recovery(&frames, &[3 * S, 4 * S]);
        assert_eq!(r.after_change_s[0], None);
        // No frames before the first change after the warm-up: no floor to return to.
        let r = recovery(&frames[..5], &[S / 10]);
        assert_eq!((r.floor_us, r.after_change_s), (None, vec![None]));
    }
}
