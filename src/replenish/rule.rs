//! Write-readiness rules, as pure decisions over what tcp_info says.
//!
//! The report's TCP_REPLENISH_TIME (§3), emulated in userspace: the socket is writable
//! while the unsent backlog would drain within T at the estimated drain rate,
//! `notsent ≤ drain_rate × T`; once above, it is invited again only when the backlog has
//! fallen to half that (the hysteresis of Linux's write-space wakeups). Always writable at
//! zero backlog and when there is no estimate yet; with Nagle on and the sub-MSS clause
//! (the report's §1 suggestion 2, XNU's rule), writable while 0 < notsent < MSS. The clause
//! never applies under TCP_NODELAY (§1: there it pools writes behind a cwnd-blocked segment)
//! unless an experiment asks for it ([`Replenish::with_clause_under_nodelay`]).

use std::time::Instant;

use serde::Serialize;

/// How the drain rate is estimated from tcp_info.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RateEstimator {
    /// tcpi_delivery_rate; an application-limited sample is used only when it is higher
    /// than the current estimate (the kernel's own convention for its max filter).
    Delivery,
    /// tcpi_delivery_rate, ignoring application-limited samples entirely.
    DeliveryNonapp,
    /// min(cwnd × mss, peer window) / srtt, always.
    Cwnd,
    /// The latest tcpi_delivery_rate sample as it is, app-limited or not: an estimate that
    /// a flow's own application-limited pace can drag down (the report's §6 feedback).
    Latest,
    /// As `delivery`, counted in bytes rather than packets × MSS: scaled by the bytes per
    /// delivered packet (tcpi_bytes_acked / tcpi_delivered) over the last window of at
    /// least one sRTT (the report's §3: "delivered bytes / sample interval").
    DeliveryBytes,
    /// Bytes acknowledged over the last window of at least one sRTT (a throughput
    /// average, the estimator an independent sender trapped with).
    Average,
}

impl RateEstimator {
    /// The name used on the command line and in summary.json.
    pub fn name(self) -> &'static str {
        match self {
            RateEstimator::Delivery => "delivery",
            RateEstimator::DeliveryNonapp => "delivery-nonapp",
            RateEstimator::Cwnd => "cwnd",
            RateEstimator::Latest => "latest",
            RateEstimator::DeliveryBytes => "delivery-bytes",
            RateEstimator::Average => "average",
        }
    }
}

/// When the emulated rule says writable, against the threshold T = drain rate × time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdTest {
    /// backlog ≤ T right after an invitation; once above, ≤ T/2 (the report's "wake at
    /// half").
    Hysteresis,
    /// backlog ≤ T/2 always: the patched kernel's one test for poll and wakeup (v2).
    Half,
}

impl ThresholdTest {
    /// The name used on the command line and in summary.json.
    pub fn name(self) -> &'static str {
        match self {
            ThresholdTest::Hysteresis => "hysteresis",
            ThresholdTest::Half => "half",
        }
    }
}

/// Where the drain rate of a decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RateSource {
    Sample,
    AppLimitedSample,
    CwndSrtt,
    /// The kernel's each-ACK sample (its experiment-only estimator 1).
    RawSample,
    /// A delivery-rate sample counted in bytes.
    SampleBytes,
    /// Bytes acknowledged over the last window of at least one sRTT.
    Average,
    None,
}

impl RateSource {
    pub fn name(self) -> &'static str {
        match self {
            RateSource::Sample => "sample",
            RateSource::AppLimitedSample => "app-limited-sample",
            RateSource::CwndSrtt => "cwnd-srtt",
            RateSource::RawSample => "raw-sample",
            RateSource::SampleBytes => "sample-bytes",
            RateSource::Average => "average",
            RateSource::None => "none",
        }
    }
}

/// The tcp_info fields a decision needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observation {
    pub notsent: u32,
    pub mss: u32,
    /// Latest delivery-rate sample, bytes/s (0 or None: no sample yet).
    pub delivery_rate: Option<u64>,
    pub app_limited: bool,
    pub cwnd: u32,
    pub srtt_us: u32,
    pub snd_wnd: Option<u32>,
    /// tcpi_bytes_acked and tcpi_delivered, and when they were read: the byte-counting
    /// and averaging estimators' windows.
    pub bytes_acked: Option<u64>,
    pub delivered: Option<u32>,
    pub at: Option<Instant>,
}

impl Observation {
    pub fn from_tcp_info(info: &crate::tcpinfo::TcpInfo, at: Instant) -> Observation {
        Observation {
            bytes_acked: info.bytes_acked,
            delivered: info.delivered,
            at: Some(at),
            notsent: info.notsent_bytes.unwrap_or(0),
            mss: info.snd_mss,
            delivery_rate: info.delivery_rate,
            app_limited: info.delivery_rate_app_limited,
            cwnd: info.snd_cwnd,
            srtt_us: info.rtt_us,
            snd_wnd: info.snd_wnd,
        }
    }
}

/// Why a decision came out as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    ZeroBacklog,
    SubMss,
    NoEstimate,
    BelowThreshold,
    BelowHalfThreshold,
    Above,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::ZeroBacklog => "zero-backlog",
            Reason::SubMss => "sub-mss",
            Reason::NoEstimate => "no-estimate",
            Reason::BelowThreshold => "below-threshold",
            Reason::BelowHalfThreshold => "below-half-threshold",
            Reason::Above => "above",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub writable: bool,
    pub reason: Reason,
    /// drain_rate × T, bytes.
    pub threshold: Option<u64>,
    /// bytes/s.
    pub rate: Option<f64>,
    pub source: RateSource,
}

/// The emulated TCP_REPLENISH_TIME rule with its state (hysteresis, rate estimate).
#[derive(Debug, Clone)]
pub struct Replenish {
    pub time_us: u64,
    pub sub_mss_clause: bool,
    pub nodelay: bool,
    pub estimator: RateEstimator,
    pub test: ThresholdTest,
    /// The clause also under TCP_NODELAY: an experiment (the report's §1 controlled
    /// comparison, where it pooled writes behind a cwnd-blocked segment), never a default.
    pub clause_under_nodelay: bool,
    /// Above the threshold since the last invitation: wait for half of it.
    waiting: bool,
    /// The current delivery-rate estimate (bytes/s) and whether it came from an
    /// app-limited sample.
    estimate: Option<(u64, bool)>,
    /// The byte-counting and averaging estimators' window.
    window: AckWindow,
}

/// A window of at least one sRTT over tcpi_bytes_acked and tcpi_delivered, closed by the
/// first observation after it: the average rate and the bytes per packet it saw.
#[derive(Debug, Clone, Default)]
struct AckWindow {
    /// (when, bytes_acked, delivered) at the window's start.
    start: Option<(Instant, u64, u32)>,
    /// Bytes/s over the last closed window.
    average: Option<u64>,
    /// Bytes per delivered packet over the last closed window that delivered any.
    bytes_per_packet: Option<f64>,
}

impl AckWindow {
    fn observe(&mut self, o: &Observation) {
        let (Some(at), Some(bytes), Some(delivered)) = (o.at, o.bytes_acked, o.delivered) else {
            return;
        };
        let Some((t0, b0, d0)) = self.start else {
            self.start = Some((at, bytes, delivered));
            return;
        };
        let elapsed = at.saturating_duration_since(t0);
        if o.srtt_us == 0 || elapsed.as_micros() < u128::from(o.srtt_us) {
            return;
        }
        let b = bytes.saturating_sub(b0);
        let packets = delivered.wrapping_sub(d0);
        self.average = Some((b as f64 / elapsed.as_secs_f64()) as u64);
        if packets > 0 && o.mss > 0 {
            self.bytes_per_packet = Some((b as f64 / f64::from(packets)).min(f64::from(o.mss)));
        }
        self.start = Some((at, bytes, delivered));
    }
}

impl Replenish {
    pub fn new(
        time_us: u64,
        sub_mss_clause: bool,
        nodelay: bool,
        estimator: RateEstimator,
    ) -> Replenish {
        Replenish {
            time_us,
            sub_mss_clause,
            nodelay,
            estimator,
            test: ThresholdTest::Hysteresis,
            clause_under_nodelay: false,
            waiting: false,
            estimate: None,
            window: AckWindow::default(),
        }
    }

    /// The same rule with another threshold test.
    pub fn with_test(self, test: ThresholdTest) -> Replenish {
        Replenish { test, ..self }
    }

    /// The same rule with its sub-MSS clause applied under TCP_NODELAY too (an experiment).
    pub fn with_clause_under_nodelay(self, on: bool) -> Replenish {
        Replenish {
            clause_under_nodelay: on,
            ..self
        }
    }

    /// Whether the sub-MSS clause applies in this run.
    fn clause_applies(&self) -> bool {
        self.sub_mss_clause && (!self.nodelay || self.clause_under_nodelay)
    }

    /// min(cwnd × mss, peer window) / srtt, bytes/s.
    fn cwnd_rate(o: &Observation) -> Option<f64> {
        if o.srtt_us == 0 || o.cwnd == 0 || o.mss == 0 {
            return None;
        }
        let mut bytes = u64::from(o.cwnd) * u64::from(o.mss);
        if let Some(w) = o.snd_wnd.filter(|&w| w > 0) {
            bytes = bytes.min(u64::from(w));
        }
        Some(bytes as f64 * 1e6 / f64::from(o.srtt_us))
    }

    /// Updates the estimate from the latest sample and returns the drain rate to use.
    fn drain_rate(&mut self, o: &Observation) -> (Option<f64>, RateSource) {
        let sample = o.delivery_rate.filter(|&r| r > 0);
        self.window.observe(o);
        match self.estimator {
            RateEstimator::Cwnd => {}
            // The averaging and byte-counting estimators stand on the sampler until their
            // first window closes, as the kernel's do.
            RateEstimator::Delivery | RateEstimator::DeliveryBytes | RateEstimator::Average => {
                if let Some(r) = sample {
                    let keep = !o.app_limited || self.estimate.is_none_or(|(e, _)| r > e);
                    if keep {
                        self.estimate = Some((r, o.app_limited));
                    }
                }
            }
            RateEstimator::DeliveryNonapp => {
                if let Some(r) = sample.filter(|_| !o.app_limited) {
                    self.estimate = Some((r, false));
                }
            }
            RateEstimator::Latest => {
                if let Some(r) = sample {
                    self.estimate = Some((r, o.app_limited));
                }
            }
        }
        if self.estimator == RateEstimator::Average {
            if let Some(r) = self.window.average {
                return (Some(r as f64), RateSource::Average);
            }
        }
        if self.estimator == RateEstimator::DeliveryBytes {
            if let (Some((r, _)), Some(bpp)) = (self.estimate, self.window.bytes_per_packet) {
                return (
                    Some(r as f64 * bpp / f64::from(o.mss.max(1))),
                    RateSource::SampleBytes,
                );
            }
        }
        match (self.estimator, self.estimate) {
            (RateEstimator::Cwnd, _) | (_, None) => match Self::cwnd_rate(o) {
                Some(r) => (Some(r), RateSource::CwndSrtt),
                None => (None, RateSource::None),
            },
            (_, Some((r, app))) => (
                Some(r as f64),
                if app {
                    RateSource::AppLimitedSample
                } else {
                    RateSource::Sample
                },
            ),
        }
    }

    /// Decides whether the socket counts as writable now. A writable decision is an
    /// invitation: the caller writes once and asks again.
    pub fn decide(&mut self, o: &Observation) -> Decision {
        let (rate, source) = self.drain_rate(o);
        let threshold = rate.map(|r| (r * self.time_us as f64 / 1e6) as u64);
        let verdict = |writable, reason| Decision {
            writable,
            reason,
            threshold,
            rate,
            source,
        };
        // The threshold rule first, so that a write it invites is labelled by it; the
        // sub-MSS clause only where the threshold alone would say no.
        let sub_mss = self.clause_applies() && o.notsent < o.mss;
        let d = if o.notsent == 0 {
            verdict(true, Reason::ZeroBacklog)
        } else if let Some(t) = threshold {
            let (limit, reason) = if self.waiting || self.test == ThresholdTest::Half {
                (t / 2, Reason::BelowHalfThreshold)
            } else {
                (t, Reason::BelowThreshold)
            };
            if u64::from(o.notsent) <= limit {
                verdict(true, reason)
            } else if sub_mss {
                verdict(true, Reason::SubMss)
            } else {
                verdict(false, reason)
            }
        } else {
            verdict(true, Reason::NoEstimate)
        };
        if d.writable {
            self.waiting = false;
            d
        } else {
            self.waiting = true;
            Decision {
                reason: Reason::Above,
                ..d
            }
        }
    }

    /// The TCP_NOTSENT_LOWAT that makes the kernel wake the loop when `decide` may next
    /// say writable: Linux wakes at lowat/2, so lowat = threshold; with the sub-MSS clause
    /// active, at least 2 × MSS so that a sub-MSS backlog also wakes it.
    pub fn wake_lowat(&self, d: &Decision, mss: u32) -> u32 {
        let mut lowat = d.threshold.unwrap_or(0).min(u64::from(u32::MAX / 2)) as u32;
        if self.clause_applies() {
            lowat = lowat.max(2 * mss);
        }
        lowat.max(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1448;

    fn obs(notsent: u32, rate: u64, app: bool) -> Observation {
        Observation {
            notsent,
            mss: MSS,
            delivery_rate: Some(rate),
            app_limited: app,
            cwnd: 10,
            srtt_us: 172_000,
            snd_wnd: Some(1 << 20),
            ..Observation::default()
        }
    }

    fn p() -> Replenish {
        Replenish::new(15_000, true, false, RateEstimator::Delivery)
    }

    #[test]
    fn threshold_is_rate_times_time() {
        let mut r = p();
        // 2 Mb/s = 250 000 B/s; 15 ms → 3750 B.
        let d = r.decide(&obs(3_000, 250_000, false));
        assert_eq!(d.threshold, Some(3_750));
        assert!(d.writable);
        assert_eq!(d.reason, Reason::BelowThreshold);
        assert_eq!(d.source, RateSource::Sample);
    }

    #[test]
    fn hysteresis_waits_for_half_the_threshold() {
        let mut r = p();
        assert!(!r.decide(&obs(65_000, 250_000, false)).writable);
        // Back under the threshold but above half of it: still waiting.
        let d = r.decide(&obs(3_000, 250_000, false));
        assert!(!d.writable);
        assert_eq!(d.reason, Reason::Above);
        let d = r.decide(&obs(1_875, 250_000, false));
        assert!(d.writable);
        assert_eq!(d.reason, Reason::BelowHalfThreshold);
        // Invited: the next decision uses the full threshold again.
        assert!(r.decide(&obs(3_700, 250_000, false)).writable);
    }

    #[test]
    fn zero_backlog_and_no_estimate_are_writable() {
        let mut r = p();
        let d = r.decide(&Observation {
            notsent: 0,
            ..obs(0, 0, false)
        });
        assert_eq!(d.reason, Reason::ZeroBacklog);
        let d = r.decide(&Observation {
            notsent: 50_000,
            srtt_us: 0,
            delivery_rate: None,
            ..obs(0, 0, false)
        });
        assert!(d.writable);
        assert_eq!((d.reason, d.source), (Reason::NoEstimate, RateSource::None));
    }

    #[test]
    fn cwnd_bootstrap_before_the_first_sample() {
        let mut r = p();
        let d = r.decide(&Observation {
            delivery_rate: None,
            ..obs(100_000, 0, false)
        });
        // 10 × 1448 B per 172 ms = 84 186 B/s → 15 ms: 1262 B.
        assert_eq!(d.source, RateSource::CwndSrtt);
        assert_eq!(d.threshold, Some(1_262));
        // The peer window caps it.
        let mut r = p();
        let d = r.decide(&Observation {
            delivery_rate: None,
            snd_wnd: Some(1_448),
            ..obs(100_000, 0, false)
        });
        assert_eq!(d.threshold, Some(126));
    }

    #[test]
    fn sub_mss_clause_only_under_nagle() {
        let mut r = p();
        let d = r.decide(&obs(412, 25_000, false)); // threshold 375 B < 412 B tail
        assert!(d.writable);
        assert_eq!(d.reason, Reason::SubMss);
        let mut off = Replenish::new(15_000, false, false, RateEstimator::Delivery);
        assert!(!off.decide(&obs(412, 25_000, false)).writable);
        let mut nodelay = Replenish::new(15_000, true, true, RateEstimator::Delivery);
        assert!(!nodelay.decide(&obs(412, 25_000, false)).writable);
    }

    #[test]
    fn app_limited_samples_follow_the_estimator() {
        // delivery: an app-limited sample replaces the estimate only when higher.
        let mut r = p();
        r.decide(&obs(10, 250_000, false));
        let d = r.decide(&obs(100_000, 100_000, true));
        assert_eq!((d.rate, d.source), (Some(250_000.0), RateSource::Sample));
        let d = r.decide(&obs(100_000, 6_000_000, true));
        assert_eq!(
            (d.rate, d.source),
            (Some(6_000_000.0), RateSource::AppLimitedSample)
        );
        // delivery-nonapp: app-limited samples never count; cwnd/srtt until a real one.
        let mut r = Replenish::new(15_000, true, false, RateEstimator::DeliveryNonapp);
        let d = r.decide(&obs(100_000, 6_000_000, true));
        assert_eq!(d.source, RateSource::CwndSrtt);
        let d = r.decide(&obs(100_000, 200_000, false));
        assert_eq!((d.rate, d.source), (Some(200_000.0), RateSource::Sample));
        // latest: whatever the last sample was.
        let mut r = Replenish::new(15_000, true, false, RateEstimator::Latest);
        r.decide(&obs(10, 250_000, false));
        let d = r.decide(&obs(100_000, 20_000, true));
        assert_eq!(
            (d.rate, d.source),
            (Some(20_000.0), RateSource::AppLimitedSample)
        );
        // cwnd: always cwnd/srtt.
        let mut r = Replenish::new(15_000, true, false, RateEstimator::Cwnd);
        assert_eq!(
            r.decide(&obs(100_000, 250_000, false)).source,
            RateSource::CwndSrtt
        );
    }

    /// The report's §6 phase lock: 4 KiB writes, MSS 1228, Nagle holding the 412 B tail,
    /// a delivery-rate estimate depressed by one write per RTT (4096 B / 172 ms).
    #[test]
    fn phase_lock_sequence_traps_without_the_clause_and_not_with_it() {
        let mss = 1228;
        let locked_rate = 4096 * 1_000_000 / 172_000; // 23 813 B/s → threshold 357 B
        let tail = Observation {
            notsent: 4096 - 3 * mss,
            mss,
            delivery_rate: Some(locked_rate),
            app_limited: true,
            cwnd: 10,
            srtt_us: 172_000,
            snd_wnd: Some(1 << 20),
            ..Observation::default()
        };
        let mut without = Replenish::new(15_000, false, false, RateEstimator::Delivery);
        let d = without.decide(&tail);
        assert_eq!(d.threshold, Some(357));
        assert!(
            !d.writable,
            "the 412 B tail sits above the threshold: no invitation until the ACK"
        );
        // Only when the ACK releases the tail does the backlog reach zero.
        assert!(without.decide(&Observation { notsent: 0, ..tail }).writable);
        let mut with = Replenish::new(15_000, true, false, RateEstimator::Delivery);
        let d = with.decide(&tail);
        assert!(
            d.writable,
            "the clause invites more data to complete the segment"
        );
        assert_eq!(d.reason, Reason::SubMss);
        // The wakeup lowat covers the clause: Linux wakes at lowat/2 ≥ MSS.
        let waiting = with.decide(&Observation {
            notsent: 60_000,
            ..tail
        });
        assert!(with.wake_lowat(&waiting, mss) / 2 >= mss);
        let above = without.decide(&Observation {
            notsent: 60_000,
            ..tail
        });
        assert_eq!(without.wake_lowat(&above, mss), 357);
    }

    /// One 4 KiB write per 172 ms RTT at MSS 1228, as tcp_info shows it: four packets
    /// (4 912 B counted as packets × MSS) but 4 096 bytes delivered per RTT.
    fn locked_flow(at: Instant, rtts: u32, notsent: u32) -> Observation {
        let mss = 1228;
        Observation {
            notsent,
            mss,
            delivery_rate: Some(4 * 1228 * 1_000_000 / 172_000), // packets × MSS: 28 558 B/s
            app_limited: true,
            cwnd: 10,
            srtt_us: 172_000,
            snd_wnd: Some(1 << 20),
            bytes_acked: Some(u64::from(rtts) * 4096),
            delivered: Some(rtts * 4),
            at: Some(at + std::time::Duration::from_millis(172 * u64::from(rtts))),
        }
    }

    /// The margin the issue names: 428 B in packets × MSS (above the 412 B tail), 357 B
    /// in delivered bytes (below it) — the same flow, two thresholds.
    #[test]
    fn counting_in_bytes_moves_the_threshold_below_the_tail() {
        let t0 = Instant::now();
        let tail = 4096 - 3 * 1228;
        let mut packets = Replenish::new(15_000, false, false, RateEstimator::Delivery);
        let mut bytes = Replenish::new(15_000, false, false, RateEstimator::DeliveryBytes);
        for r in [&mut packets, &mut bytes] {
            r.decide(&locked_flow(t0, 0, 0));
        }
        // No window closed yet: the byte estimator stands on the sampler.
        let early = bytes.decide(&locked_flow(t0, 0, tail));
        assert_eq!(
            (early.threshold, early.source),
            (Some(428), RateSource::AppLimitedSample)
        );
        let p = packets.decide(&locked_flow(t0, 1, tail));
        let b = bytes.decide(&locked_flow(t0, 1, tail));
        assert_eq!(
            (p.threshold, p.source),
            (Some(428), RateSource::AppLimitedSample)
        );
        assert_eq!(
            (b.threshold, b.source),
            (Some(357), RateSource::SampleBytes)
        );
        assert!(p.threshold.unwrap() >= u64::from(tail) && b.threshold.unwrap() < u64::from(tail));
    }

    #[test]
    fn the_average_is_bytes_acked_over_a_window_of_at_least_one_srtt() {
        let t0 = Instant::now();
        let mut r = Replenish::new(15_000, false, false, RateEstimator::Average);
        r.decide(&locked_flow(t0, 0, 0));
        // Half an RTT later the window is still open: the sampler stands in.
        let mut half = locked_flow(t0, 0, 500);
        half.at = Some(t0 + std::time::Duration::from_millis(86));
        half.bytes_acked = Some(2048);
        assert_eq!(r.decide(&half).source, RateSource::AppLimitedSample);
        // After two RTTs: 8 192 B over 344 ms.
        let d = r.decide(&locked_flow(t0, 2, 500));
        assert_eq!(d.source, RateSource::Average);
        assert_eq!(d.rate.map(|x| x.round()), Some(23_813.0));
        assert_eq!(d.threshold, Some(357));
        // A window without observations of tcp_info's counters keeps the last average.
        let d = r.decide(&Observation {
            at: None,
            ..locked_flow(t0, 2, 500)
        });
        assert_eq!(d.source, RateSource::Average);
    }

    /// The kernel's v2 test (half of T, always) refuses the second write that the
    /// hysteresis test (full T right after an invitation) allows: 824 B against 1 045 B.
    #[test]
    fn the_half_test_refuses_what_the_hysteresis_test_invites() {
        let o = |notsent| Observation {
            notsent,
            mss: 1228,
            delivery_rate: Some(69_700),
            ..obs(0, 0, false)
        };
        let mut hysteresis = Replenish::new(15_000, false, false, RateEstimator::Delivery);
        let mut half = hysteresis.clone().with_test(ThresholdTest::Half);
        assert_eq!(hysteresis.decide(&o(824)).threshold, Some(1045));
        assert!(hysteresis.decide(&o(824)).writable);
        let d = half.decide(&o(824));
        assert!(!d.writable, "{d:?}");
        let d = half.decide(&o(412));
        assert!(
            d.writable && d.reason == Reason::BelowHalfThreshold,
            "{d:?}"
        );
    }

    /// The report's §1 controlled comparison needs the clause under NODELAY on request only.
    #[test]
    fn the_clause_under_nodelay_only_when_asked() {
        let tail = Observation {
            notsent: 500,
            ..obs(500, 1_250, false)
        };
        let mut plain = Replenish::new(15_000, true, true, RateEstimator::Delivery);
        assert!(
            !plain.decide(&tail).writable,
            "NODELAY: no clause by default"
        );
        let mut forced = plain.clone().with_clause_under_nodelay(true);
        let d = forced.decide(&tail);
        assert!(d.writable && d.reason == Reason::SubMss, "{d:?}");
    }

    /// The printed names are the serde (summary.json) and command-line names.
    #[test]
    fn names_are_the_serialized_and_command_line_names() {
        use clap::ValueEnum;
        for e in RateEstimator::value_variants() {
            assert_eq!(serde_json::to_value(e).unwrap(), e.name());
            assert_eq!(e.to_possible_value().unwrap().get_name(), e.name());
        }
        for t in ThresholdTest::value_variants() {
            assert_eq!(serde_json::to_value(t).unwrap(), t.name());
            assert_eq!(t.to_possible_value().unwrap().get_name(), t.name());
        }
    }
}
