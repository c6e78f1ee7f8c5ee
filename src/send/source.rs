//! Application sources: what sbm-send has to write, and when it has it.
//!
//! The default is bulk: a write-size write is always ready, so a run measures how long
//! *bytes* wait. The sources here are application-limited, the senders the draft is written
//! for: content appears on its own clock and waits in the application until the socket
//! invites a write, and what their users feel is the **content's age** when it arrives.
//!
//! - *paced* (`-b RATE`, iperf's habit): write-size chunks generated at the rate;
//! - *frames* (`--fps`): one frame per 1/FPS of a fixed, drawn or listed size, with a policy
//!   for frames still unwritten when a newer one is ready (`queue` or `latest`);
//! - *render on invitation* (`--render`): no frame exists until the socket invites a write;
//!   then one is made (at most one per 1/FPS) sized rate × time since the previous one.
//!
//! Generated content is a [`Frame`] (a paced chunk is a frame too) with its content time:
//! the instant its clock generated it, not when the loop noticed — a late loop is part of
//! the age the sender causes. This module is pure (times are passed in); the write path
//! owns the socket.

use std::collections::VecDeque;
use std::time::Duration;

/// Distribution of frame sizes.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeModel {
    Fixed(u32),
    /// Uniform within mean ± `spread` × mean.
    Uniform {
        mean: u32,
        spread: f64,
    },
    /// Exponential with this mean, capped at [`EXP_CAP`] × the mean.
    Exponential {
        mean: u32,
    },
    /// Sizes from a file, one per line, used in order and repeated.
    Listed(Vec<u32>),
}

/// An exponential draw is capped at this many times its mean (a frame of 20 means would
/// be a keyframe no encoder makes; the cap keeps the buffer bounded).
pub const EXP_CAP: f64 = 8.0;

impl SizeModel {
    /// The largest frame the model can produce.
    pub fn max(&self) -> u32 {
        match self {
            SizeModel::Fixed(s) => *s,
            SizeModel::Uniform { mean, spread } => {
                (f64::from(*mean) * (1.0 + spread)).ceil() as u32
            }
            SizeModel::Exponential { mean } => (f64::from(*mean) * EXP_CAP).ceil() as u32,
            SizeModel::Listed(v) => v.iter().copied().max().unwrap_or(0),
        }
    }

    /// The mean frame size (of the list, for a listed model).
    pub fn mean(&self) -> f64 {
        match self {
            SizeModel::Fixed(s) => f64::from(*s),
            SizeModel::Uniform { mean, .. } | SizeModel::Exponential { mean } => f64::from(*mean),
            SizeModel::Listed(v) if v.is_empty() => 0.0,
            SizeModel::Listed(v) => v.iter().map(|&s| f64::from(s)).sum::<f64>() / v.len() as f64,
        }
    }
}

/// What happens to a frame not yet being written when a newer one is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StalePolicy {
    /// Write every frame, in order.
    Queue,
    /// Drop frames whose writing has not started when a newer one is ready.
    Latest,
}

impl StalePolicy {
    pub fn name(self) -> &'static str {
        match self {
            StalePolicy::Queue => "queue",
            StalePolicy::Latest => "latest",
        }
    }
}

/// The rate a rendered frame is sized by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RenderRate {
    /// A fixed target, bits per second.
    Target(u64),
    /// The kernel's current delivery-rate estimate (tcpi_delivery_rate).
    DeliveryRate,
}

/// A source, as the command line asked for it.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// `-b RATE`: `chunk`-byte writes generated at `rate_bps`.
    Paced { rate_bps: u64, chunk: u32 },
    /// `--fps`: frames on a clock.
    Frames {
        clock: FrameClock,
        sizes: SizeModel,
        stale: StalePolicy,
        seed: u64,
    },
    /// `--render`: a frame made when the socket invites a write.
    Render {
        clock: FrameClock,
        rate: RenderRate,
        /// Size before the kernel has a delivery-rate sample (DeliveryRate only).
        first: u32,
        /// The largest frame.
        cap: u32,
    },
}

impl SourceSpec {
    /// The largest single write the source can ask for.
    pub fn max_write(&self) -> u32 {
        match self {
            SourceSpec::Paced { chunk, .. } => *chunk,
            SourceSpec::Frames { sizes, .. } => sizes.max(),
            SourceSpec::Render { cap, .. } => *cap,
        }
    }

    /// One line for the banner and the summary.
    pub fn describe(&self) -> String {
        match self {
            SourceSpec::Paced { rate_bps, chunk } => format!(
                "paced: {} B writes at {}",
                chunk,
                crate::units::BitRate(*rate_bps as f64)
            ),
            SourceSpec::Frames {
                clock,
                sizes,
                stale,
                ..
            } => format!(
                "frames: {:.3} fps, {}, mean {:.0} B ({}), stale frames: {}",
                clock.fps(),
                sizes.name(),
                sizes.mean(),
                crate::units::BitRate(sizes.mean() * 8.0 * clock.fps()),
                stale.name()
            ),
            SourceSpec::Render {
                clock, rate, cap, ..
            } => format!(
                "render on invitation: at most {:.3} fps, sized {} × time since the previous frame, capped at {} B",
                clock.fps(),
                match rate {
                    RenderRate::Target(bps) => crate::units::BitRate(*bps as f64).to_string(),
                    RenderRate::DeliveryRate => "the delivery-rate estimate".into(),
                },
                cap
            ),
        }
    }

    /// The name written to the summary (`paced`, `frames`, `render`).
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::Paced { .. } => "paced",
            SourceSpec::Frames { .. } => "frames",
            SourceSpec::Render { .. } => "render",
        }
    }
}

impl SizeModel {
    pub fn name(&self) -> String {
        match self {
            SizeModel::Fixed(s) => format!("fixed {s} B"),
            SizeModel::Uniform { mean, spread } => {
                format!("uniform {mean} B ± {:.0} %", spread * 100.0)
            }
            SizeModel::Exponential { mean } => format!("exponential, mean {mean} B"),
            SizeModel::Listed(v) => format!("{} sizes from a file", v.len()),
        }
    }
}

/// A frame clock: frame k is due k × period after the start, with the period a ratio of
/// integers so that no rounding error accumulates over a long run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameClock {
    /// Period = num / den nanoseconds.
    num: u128,
    den: u128,
}

impl FrameClock {
    /// `fps` frames per second (three decimals kept: 29.97 is exact).
    pub fn fps_clock(fps: f64) -> Option<FrameClock> {
        let den = (fps * 1000.0).round();
        (fps.is_finite() && (1.0..=1e12).contains(&den)).then_some(FrameClock {
            num: 1_000_000_000_000,
            den: den as u128,
        })
    }

    /// The period of `chunk` bytes at `rate_bps`.
    pub fn paced(rate_bps: u64, chunk: u32) -> Option<FrameClock> {
        (rate_bps > 0 && chunk > 0).then(|| FrameClock {
            num: u128::from(chunk) * 8 * 1_000_000_000,
            den: u128::from(rate_bps),
        })
    }

    /// When frame `k` (from 0) is due, after the source's start.
    pub fn due(&self, k: u64) -> Duration {
        let ns = u128::from(k) * self.num / self.den;
        Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64)
    }

    pub fn period(&self) -> Duration {
        self.due(1)
    }

    pub fn fps(&self) -> f64 {
        1e9 * self.den as f64 / self.num as f64
    }
}

/// One unit of content: a frame, or a paced chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// From 1, in generation order (dropped frames keep theirs).
    pub number: u64,
    pub size: u32,
    /// When the source's clock generated it, after the source's start.
    pub content_at: Duration,
    /// Bytes already accepted by the socket.
    pub written: u32,
}

impl Frame {
    pub fn remaining(&self) -> u32 {
        self.size - self.written
    }
}

/// SplitMix64: a tiny, well-mixed, seedable generator (frame sizes must be reproducible
/// from the seed the summary records; no statistical quality beyond that is needed).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What the source did, counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SourceCounts {
    pub generated: u64,
    /// Dropped unwritten because a newer frame was ready (`latest`).
    pub dropped: u64,
}

/// A running source.
#[derive(Debug)]
pub struct Source {
    spec: SourceSpec,
    /// Frames generated and not yet fully written, oldest first; the front may be partly
    /// written.
    waiting: VecDeque<Frame>,
    /// Number of the next frame the clock generates (from 0 on the clock, 1 in records).
    next_k: u64,
    rng: SplitMix64,
    counts: SourceCounts,
    /// Render: when the previous frame was made.
    prev_render: Duration,
}

/// The smallest frame: a trip-times header (32 B) must fit.
pub const MIN_FRAME: u32 = 32;

impl Source {
    pub fn new(spec: SourceSpec) -> Source {
        let seed = match &spec {
            SourceSpec::Frames { seed, .. } => *seed,
            _ => 0,
        };
        Source {
            spec,
            waiting: VecDeque::new(),
            next_k: 0,
            rng: SplitMix64(seed),
            counts: SourceCounts::default(),
            prev_render: Duration::ZERO,
        }
    }

    pub fn spec(&self) -> &SourceSpec {
        &self.spec
    }

    pub fn counts(&self) -> SourceCounts {
        self.counts
    }

    /// Frames waiting in the application (generated, not fully written).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn clock(&self) -> Option<FrameClock> {
        match &self.spec {
            SourceSpec::Paced { rate_bps, chunk } => FrameClock::paced(*rate_bps, *chunk),
            SourceSpec::Frames { clock, .. } => Some(*clock),
            SourceSpec::Render { .. } => None,
        }
    }

    fn draw_size(&mut self) -> u32 {
        let size = match &self.spec {
            SourceSpec::Paced { chunk, .. } => *chunk,
            SourceSpec::Frames { sizes, .. } => match sizes {
                SizeModel::Fixed(s) => *s,
                SizeModel::Uniform { mean, spread } => {
                    let m = f64::from(*mean);
                    let u = self.rng.unit();
                    (m * (1.0 + spread * (2.0 * u - 1.0))).round() as u32
                }
                SizeModel::Exponential { mean } => {
                    let m = f64::from(*mean);
                    // 1 − u is in (0, 1]: the logarithm is finite.
                    let d = -m * (1.0 - self.rng.unit()).ln();
                    d.min(m * EXP_CAP).round() as u32
                }
                SizeModel::Listed(v) => v[((self.next_k) % v.len() as u64) as usize],
            },
            SourceSpec::Render { .. } => unreachable!("rendered frames are sized on invitation"),
        };
        size.max(MIN_FRAME)
    }

    /// Generates every frame due by `now` (clock sources). Returns the frames dropped as
    /// stale, oldest first.
    pub fn generate(&mut self, now: Duration) -> Vec<Frame> {
        let Some(clock) = self.clock() else {
            return vec![];
        };
        let latest = matches!(
            self.spec,
            SourceSpec::Frames {
                stale: StalePolicy::Latest,
                ..
            }
        );
        let mut dropped = vec![];
        while clock.due(self.next_k) <= now {
            let size = self.draw_size();
            let frame = Frame {
                number: self.next_k + 1,
                size,
                content_at: clock.due(self.next_k),
                written: 0,
            };
            self.next_k += 1;
            self.counts.generated += 1;
            if latest {
                // Frames whose writing has not started give way to the newer one.
                let keep = usize::from(self.waiting.front().is_some_and(|f| f.written > 0));
                dropped.extend(self.waiting.drain(keep..));
            }
            self.waiting.push_back(frame);
        }
        self.counts.dropped += dropped.len() as u64;
        dropped
    }

    /// When the loop must wake for the source: the next frame on the clock, or (render)
    /// when the next frame may be made.
    pub fn next_wake(&self) -> Option<Duration> {
        match &self.spec {
            SourceSpec::Render { clock, .. } if self.counts.generated > 0 => {
                Some(self.prev_render + clock.period())
            }
            SourceSpec::Render { .. } => Some(Duration::ZERO),
            _ => self.clock().map(|c| c.due(self.next_k)),
        }
    }

    /// Whether there is something to write at `now` (a waiting frame, or a frame that may
    /// be rendered now).
    pub fn ready(&self, now: Duration) -> bool {
        if !self.waiting.is_empty() {
            return true;
        }
        match &self.spec {
            SourceSpec::Render { .. } => self.next_wake().is_some_and(|t| t <= now),
            _ => false,
        }
    }

    /// The frame to write on this invitation: the oldest waiting one, or (render) one
    /// made now, sized by `delivery_rate_bps` (the kernel's estimate, 0 before a sample)
    /// or the target. None: nothing to write.
    pub fn current(&mut self, now: Duration, delivery_rate_bps: u64) -> Option<Frame> {
        if self.waiting.is_empty() && self.ready(now) {
            if let SourceSpec::Render {
                clock,
                rate,
                first,
                cap,
            } = self.spec
            {
                // The first frame covers one frame period.
                let since = if self.counts.generated == 0 {
                    clock.period()
                } else {
                    now.saturating_sub(self.prev_render)
                };
                let size = match rate {
                    RenderRate::Target(bps) => bytes_at(bps, since),
                    RenderRate::DeliveryRate if delivery_rate_bps == 0 => u64::from(first),
                    RenderRate::DeliveryRate => bytes_at(delivery_rate_bps, since),
                };
                let size = size.clamp(u64::from(MIN_FRAME), u64::from(cap)) as u32;
                self.counts.generated += 1;
                self.prev_render = now;
                self.waiting.push_back(Frame {
                    number: self.counts.generated,
                    size,
                    content_at: now,
                    written: 0,
                });
            }
        }
        self.waiting.front().copied()
    }

    /// `n` bytes of the current frame were accepted. Returns the frame when that finished
    /// it.
    pub fn accepted(&mut self, n: u32) -> Option<Frame> {
        let f = self.waiting.front_mut()?;
        f.written += n.min(f.remaining());
        if f.remaining() == 0 {
            self.waiting.pop_front()
        } else {
            None
        }
    }

    /// Frames left unwritten when writing ended (not counted as dropped).
    pub fn unwritten(&self) -> impl Iterator<Item = &Frame> {
        self.waiting.iter()
    }
}

/// Bytes `bps` carries in `d`, rounded.
fn bytes_at(bps: u64, d: Duration) -> u64 {
    (bps as f64 / 8.0 * d.as_secs_f64()).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn frames(sizes: SizeModel, stale: StalePolicy) -> Source {
        Source::new(SourceSpec::Frames {
            clock: FrameClock::fps_clock(10.0).unwrap(),
            sizes,
            stale,
            seed: 7,
        })
    }

    #[test]
    fn a_paced_clock_does_not_drift() {
        // 4 KiB at 2 Mb/s: 16.384 ms apart, exactly, over a long run.
        let c = FrameClock::paced(2_000_000, 4096).unwrap();
        assert_eq!(c.period(), Duration::from_micros(16_384));
        assert_eq!(c.due(1_000_000), Duration::from_secs(16_384));
        let c = FrameClock::fps_clock(29.97).unwrap();
        assert_eq!(c.due(2997), Duration::from_secs(100));
        assert!(FrameClock::fps_clock(0.0).is_none());
        assert!(FrameClock::fps_clock(f64::NAN).is_none());
        assert!(FrameClock::paced(0, 10).is_none());
    }

    #[test]
    fn paced_chunks_come_on_the_clock_and_queue() {
        let mut s = Source::new(SourceSpec::Paced {
            rate_bps: 1_000_000,
            chunk: 1000,
        });
        // 1000 B at 1 Mb/s: one chunk per 8 ms, the first at 0.
        assert!(s.generate(ms(0)).is_empty());
        assert_eq!(s.waiting(), 1);
        s.generate(ms(39));
        assert_eq!(s.counts().generated, 5);
        assert_eq!(s.next_wake(), Some(ms(40)));
        let f = s.current(ms(39), 0).unwrap();
        assert_eq!((f.number, f.content_at, f.size), (1, ms(0), 1000));
        // A short write keeps the frame at the front.
        assert_eq!(s.accepted(600), None);
        assert_eq!(s.current(ms(39), 0).unwrap().remaining(), 400);
        assert_eq!(s.accepted(400).unwrap().number, 1);
        assert_eq!(s.current(ms(39), 0).unwrap().number, 2);
        assert_eq!(s.counts().dropped, 0);
    }

    #[test]
    fn latest_drops_unstarted_frames_but_not_one_being_written() {
        let mut s = frames(SizeModel::Fixed(5000), StalePolicy::Latest);
        s.generate(ms(0));
        // Frame 1 is being written when 2 and 3 arrive: 2 gives way to 3, 1 stays.
        s.current(ms(0), 0);
        s.accepted(100);
        let dropped = s.generate(ms(200));
        assert_eq!(dropped.iter().map(|f| f.number).collect::<Vec<_>>(), [2]);
        assert_eq!(s.accepted(4900).unwrap().number, 1);
        assert_eq!(s.current(ms(200), 0).unwrap().number, 3);
        // Nothing started: everything older than the newest goes.
        let dropped = s.generate(ms(500));
        assert_eq!(
            dropped.iter().map(|f| f.number).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        let c = s.counts();
        assert_eq!((c.generated, c.dropped), (6, 4));
        assert_eq!(s.waiting(), 1);
        // Queue keeps them all.
        let mut q = frames(SizeModel::Fixed(5000), StalePolicy::Queue);
        assert!(q.generate(ms(500)).is_empty());
        assert_eq!(q.waiting(), 6);
    }

    #[test]
    fn drawn_sizes_are_reproducible_and_around_the_mean() {
        let draw = |m: SizeModel| {
            let mut s = frames(m, StalePolicy::Queue);
            s.generate(Duration::from_secs(1000));
            s.waiting.iter().map(|f| f.size).collect::<Vec<_>>()
        };
        let u = draw(SizeModel::Uniform {
            mean: 6000,
            spread: 0.5,
        });
        assert_eq!(u.len(), 10_001);
        assert!(u.iter().all(|&s| (3000..=9000).contains(&s)));
        let mean = u.iter().map(|&s| f64::from(s)).sum::<f64>() / u.len() as f64;
        assert!((mean - 6000.0).abs() < 60.0, "{mean}");
        assert_eq!(
            u,
            draw(SizeModel::Uniform {
                mean: 6000,
                spread: 0.5
            })
        );
        let e = draw(SizeModel::Exponential { mean: 6000 });
        let mean = e.iter().map(|&s| f64::from(s)).sum::<f64>() / e.len() as f64;
        assert!((mean - 6000.0).abs() < 300.0, "{mean}");
        assert!(e.iter().all(|s| (MIN_FRAME..=48_000).contains(s)));
        let l = draw(SizeModel::Listed(vec![100, 200, 10]));
        assert_eq!(&l[..4], &[100, 200, MIN_FRAME, 100]);
    }

    #[test]
    fn render_makes_one_frame_per_invitation_sized_by_the_elapsed_time() {
        let mut s = Source::new(SourceSpec::Render {
            clock: FrameClock::fps_clock(50.0).unwrap(),
            rate: RenderRate::DeliveryRate,
            first: 4000,
            cap: 30_000,
        });
        // Nothing exists before an invitation; the first one gets the starting size.
        assert!(s.ready(ms(0)));
        assert_eq!(s.waiting(), 0);
        let f = s.current(ms(5), 0).unwrap();
        assert_eq!((f.size, f.content_at), (4000, ms(5)));
        // Asked again while it waits: the same frame, not a new one.
        assert_eq!(s.current(ms(6), 0).unwrap().number, 1);
        s.accepted(4000);
        // Not before 1/FPS after the previous frame.
        assert!(!s.ready(ms(24)));
        assert_eq!(s.current(ms(24), 8_000_000), None);
        assert_eq!(s.next_wake(), Some(ms(25)));
        // 100 ms later at 1 Mb/s: 12 500 B.
        let f = s.current(ms(105), 1_000_000).unwrap();
        assert_eq!((f.number, f.size), (2, 12_500));
        s.accepted(12_500);
        // Capped.
        assert_eq!(s.current(ms(1105), 1_000_000).unwrap().size, 30_000);
        let mut t = Source::new(SourceSpec::Render {
            clock: FrameClock::fps_clock(50.0).unwrap(),
            rate: RenderRate::Target(800_000),
            first: 1,
            cap: 1 << 20,
        });
        // A target rate sizes the first frame over one period: 800 kb/s × 20 ms = 2000 B.
        assert_eq!(t.current(ms(0), 0).unwrap().size, 2000);
    }
}
