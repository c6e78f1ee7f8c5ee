//! The responsiveness test's arithmetic, as pure functions of what was measured
//! (draft-ietf-ippm-responsiveness-09, "Measuring Responsiveness Under Working Conditions"):
//! the test parameters, the single-sided trimmed mean, RPM from the four probe times, the
//! moving averages and the stability test that ends each stage, and the confidence the
//! draft asks a tool to report. No I/O here: `rpm::client` feeds it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The draft's test parameters (its "Test Parameters" table), draft-09's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    /// MAD: intervals a moving average spans.
    pub mad: usize,
    /// ID: how often the algorithm re-evaluates stability (draft-09: 5 s; draft-08: 1 s).
    #[serde(with = "duration_ms")]
    pub interval: Duration,
    /// TMP: the share of samples a trimmed mean keeps (the highest are trimmed).
    pub trimmed_mean_pct: f64,
    /// SDT: stability when the standard deviation of the last MAD moving averages is
    /// within this share of the current one.
    pub sdt: f64,
    /// INP: load-generating connections opened at the start.
    pub initial_connections: usize,
    /// INC: connections added at each interval.
    pub increment: usize,
    /// MNP: the most load-generating connections (per direction).
    pub max_connections: usize,
    /// MPS: the most probe pairs (one foreign, one self) launched per second.
    pub max_probes_per_sec: f64,
    /// PTC: the share of the measured goodput the probes may use.
    pub probe_capacity_share: f64,
}

impl Default for Parameters {
    fn default() -> Self {
        Parameters {
            mad: 4,
            interval: Duration::from_secs(5),
            trimmed_mean_pct: 95.0,
            sdt: 0.05,
            initial_connections: 1,
            increment: 1,
            max_connections: 16,
            max_probes_per_sec: 100.0,
            probe_capacity_share: 0.05,
        }
    }
}

/// The draft's estimate of the bytes one probe pair moves: a foreign probe ~5000 B with
/// its TCP and TLS overheads, a self probe at most 1000 B.
pub const PROBE_PAIR_BYTES: f64 = 6000.0;

impl Parameters {
    /// Probe pairs per second: MPS, or fewer where PTC of the goodput (bytes/s) cannot
    /// carry that many; at least one per interval so that every interval has a sample.
    pub fn probe_pairs_per_sec(&self, goodput_bytes_per_sec: Option<f64>) -> f64 {
        let floor = 1.0 / self.interval.as_secs_f64();
        let by_capacity = match goodput_bytes_per_sec {
            Some(g) => g * self.probe_capacity_share / PROBE_PAIR_BYTES,
            // Before the first interval ends nothing is measured: the floor.
            None => floor,
        };
        by_capacity.min(self.max_probes_per_sec).max(floor)
    }
}

/// The single-sided trimmed mean: the mean of the smallest ⌈n × keep_pct / 100⌉ samples
/// (the highest are trimmed). None without samples.
pub fn trimmed_mean(samples: &[f64], keep_pct: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let keep = ((sorted.len() as f64 * keep_pct / 100.0).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[..keep].iter().sum::<f64>() / keep as f64)
}

/// The four probe times, in milliseconds, of the probes one aggregation covers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeTimes {
    /// Foreign probes: the TCP handshake.
    pub tcp_f: Vec<f64>,
    /// Foreign probes: the TLS handshake divided by its round trips (empty without TLS).
    pub tls_f: Vec<f64>,
    /// Foreign probes: the GET of the small object on the new connection.
    pub http_f: Vec<f64>,
    /// Self probes: the GET of the small object on a load-generating connection.
    pub http_l: Vec<f64>,
}

/// RPM as the draft computes it, with the trimmed means it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Responsiveness {
    pub rpm: f64,
    pub foreign_rpm: f64,
    pub self_rpm: f64,
    pub tm_tcp_f_ms: f64,
    /// None where TLS was not used (the draft's TCP-only formula then applies).
    pub tm_tls_f_ms: Option<f64>,
    pub tm_http_f_ms: f64,
    pub tm_http_l_ms: f64,
    pub foreign_probes: usize,
    pub self_probes: usize,
}

/// RPM from the probe times: foreign RPM from the mean of the foreign trimmed means (TCP,
/// TLS where used, HTTP), self RPM from the self probes' trimmed mean, RPM their average.
/// None unless there is at least one foreign and one self probe.
pub fn responsiveness(p: &ProbeTimes, keep_pct: f64) -> Option<Responsiveness> {
    let tcp = trimmed_mean(&p.tcp_f, keep_pct)?;
    let http_f = trimmed_mean(&p.http_f, keep_pct)?;
    let http_l = trimmed_mean(&p.http_l, keep_pct)?;
    let tls = trimmed_mean(&p.tls_f, keep_pct);
    let foreign_ms = match tls {
        Some(tls) => (tcp + tls + http_f) / 3.0,
        None => (tcp + http_f) / 2.0,
    };
    let foreign_rpm = 60_000.0 / foreign_ms;
    let self_rpm = 60_000.0 / http_l;
    Some(Responsiveness {
        rpm: (foreign_rpm + self_rpm) / 2.0,
        foreign_rpm,
        self_rpm,
        tm_tcp_f_ms: tcp,
        tm_tls_f_ms: tls,
        tm_http_f_ms: http_f,
        tm_http_l_ms: http_l,
        foreign_probes: p.http_f.len(),
        self_probes: p.http_l.len(),
    })
}

/// The population standard deviation.
fn std_dev(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt()
}

/// The draft's stability test over a series of moving averages: at least MAD of them, and
/// the standard deviation of the last MAD within SDT of the latest.
pub fn is_stable(moving_averages: &[f64], mad: usize, sdt: f64) -> bool {
    if mad == 0 || moving_averages.len() < mad {
        return false;
    }
    let last = &moving_averages[moving_averages.len() - mad..];
    let current = *last.last().expect("mad > 0");
    current > 0.0 && std_dev(last) < sdt * current
}

/// The moving average at the latest interval: the mean of the last MAD values (of all of
/// them while there are fewer; the draft divides by MAD, which would read the first
/// intervals low and could never be stable earlier anyway, as stability needs MAD averages).
pub fn moving_average(per_interval: &[f64], mad: usize) -> Option<f64> {
    if per_interval.is_empty() || mad == 0 {
        return None;
    }
    let from = per_interval.len().saturating_sub(mad);
    let window = &per_interval[from..];
    Some(window.iter().sum::<f64>() / window.len() as f64)
}

/// The draft's confidence in a stage's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Fewer than MAD intervals ran: the moving average never spanned its full window.
    Low,
    /// At least MAD intervals, but no stability within the tolerance.
    Medium,
    /// Stable within the tolerance.
    High,
}

impl Confidence {
    pub fn of(intervals: usize, stable: bool, mad: usize) -> Confidence {
        if stable {
            Confidence::High
        } else if intervals >= mad {
            Confidence::Medium
        } else {
            Confidence::Low
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// Where the ramp stands after an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Adding connections until the goodput's moving average is stable.
    Goodput,
    /// Goodput saturated; probing until RPM's moving average is stable.
    Responsiveness,
    /// RPM stable: the result is final.
    Done,
}

/// The ramp for one load (one direction, or both together): the per-interval goodput and
/// RPM it has seen, and the stage they put it in. Pure: the caller measures, this decides.
#[derive(Debug, Clone, Default)]
pub struct Ramp {
    goodput: Vec<f64>,
    goodput_averages: Vec<f64>,
    rpm_values: Vec<f64>,
    goodput_saturated_at: Option<usize>,
    rpm_stable_at: Option<usize>,
}

/// What the ramp decided at the end of an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalVerdict {
    pub stage: Stage,
    /// The goodput's moving average (bytes/s).
    pub goodput_average: f64,
    /// Load-generating connections to add now (0 at MNP or when done).
    pub add_connections: usize,
}

impl Ramp {
    /// Ends an interval: `goodput` its bytes per second, `rpm` the responsiveness over the
    /// last MAD intervals' probes (None without probes), `connections` how many load-
    /// generating connections are open.
    pub fn end_interval(
        &mut self,
        params: &Parameters,
        goodput: f64,
        rpm: Option<f64>,
        connections: usize,
    ) -> IntervalVerdict {
        self.goodput.push(goodput);
        let average = moving_average(&self.goodput, params.mad).unwrap_or(0.0);
        self.goodput_averages.push(average);
        let index = self.goodput.len();
        if self.goodput_saturated_at.is_none()
            && is_stable(&self.goodput_averages, params.mad, params.sdt)
        {
            self.goodput_saturated_at = Some(index);
        } else if self.goodput_saturated_at.is_some() && self.rpm_stable_at.is_none() {
            // RPM values count from the interval after goodput saturated.
            if let Some(r) = rpm {
                self.rpm_values.push(r);
                if is_stable(&self.rpm_values, params.mad, params.sdt) {
                    self.rpm_stable_at = Some(index);
                }
            }
        }
        let stage = self.stage();
        let add_connections = if stage == Stage::Done {
            0
        } else {
            params
                .increment
                .min(params.max_connections.saturating_sub(connections))
        };
        IntervalVerdict {
            stage,
            goodput_average: average,
            add_connections,
        }
    }

    pub fn stage(&self) -> Stage {
        match (self.goodput_saturated_at, self.rpm_stable_at) {
            (_, Some(_)) => Stage::Done,
            (Some(_), None) => Stage::Responsiveness,
            (None, None) => Stage::Goodput,
        }
    }

    pub fn intervals(&self) -> usize {
        self.goodput.len()
    }

    /// Intervals spent probing after goodput saturated.
    pub fn responsiveness_intervals(&self) -> usize {
        self.rpm_values.len()
    }

    pub fn goodput_confidence(&self, mad: usize) -> Confidence {
        Confidence::of(self.intervals(), self.goodput_saturated_at.is_some(), mad)
    }

    pub fn rpm_confidence(&self, mad: usize) -> Confidence {
        Confidence::of(
            self.responsiveness_intervals(),
            self.rpm_stable_at.is_some(),
            mad,
        )
    }

    /// The interval (1-based) at which goodput saturated, if it did.
    pub fn goodput_saturated_at(&self) -> Option<usize> {
        self.goodput_saturated_at
    }
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trimmed_mean_drops_only_the_highest_samples() {
        // 20 samples: 95 % keeps 19, dropping the single outlier at the top.
        let mut s: Vec<f64> = (1..=19).map(|_| 10.0).collect();
        s.push(1000.0);
        assert_eq!(trimmed_mean(&s, 95.0), Some(10.0));
        // A low outlier is kept (single-sided).
        let mut s: Vec<f64> = (1..=19).map(|_| 10.0).collect();
        s.push(0.0);
        assert_eq!(trimmed_mean(&s, 95.0), Some(180.0 / 19.0));
        // One sample is its own mean; none gives none.
        assert_eq!(trimmed_mean(&[7.0], 95.0), Some(7.0));
        assert_eq!(trimmed_mean(&[], 95.0), None);
    }

    #[test]
    fn rpm_follows_the_drafts_formulas_with_and_without_tls() {
        let tcp_only = ProbeTimes {
            tcp_f: vec![20.0],
            tls_f: vec![],
            http_f: vec![40.0],
            http_l: vec![60.0],
        };
        let r = responsiveness(&tcp_only, 95.0).unwrap();
        // Foreign: 60000 / ((20 + 40) / 2) = 2000; self: 60000 / 60 = 1000.
        assert_eq!(r.foreign_rpm, 2000.0);
        assert_eq!(r.self_rpm, 1000.0);
        assert_eq!(r.rpm, 1500.0);
        assert_eq!(r.tm_tls_f_ms, None);
        let with_tls = ProbeTimes {
            tls_f: vec![30.0],
            ..tcp_only
        };
        let r = responsiveness(&with_tls, 95.0).unwrap();
        // Foreign: 60000 / ((20 + 30 + 40) / 3) = 2000.
        assert_eq!(r.foreign_rpm, 2000.0);
        assert_eq!(r.tm_tls_f_ms, Some(30.0));
        // Without self probes there is no RPM.
        let no_self = ProbeTimes {
            http_l: vec![],
            ..with_tls
        };
        assert_eq!(responsiveness(&no_self, 95.0), None);
    }

    #[test]
    fn stability_needs_mad_averages_within_the_tolerance() {
        assert!(!is_stable(&[100.0, 100.0, 100.0], 4, 0.05));
        assert!(is_stable(&[1.0, 100.0, 101.0, 99.0, 100.0], 4, 0.05));
        assert!(!is_stable(&[50.0, 80.0, 100.0, 100.0], 4, 0.05));
        assert!(!is_stable(&[0.0, 0.0, 0.0, 0.0], 4, 0.05));
    }

    #[test]
    fn the_ramp_adds_connections_until_goodput_then_rpm_are_stable() {
        let p = Parameters {
            mad: 2,
            ..Parameters::default()
        };
        let mut ramp = Ramp::default();
        // Goodput climbs, then flattens: averages 10, 15, 20, 20 → stable at interval 4.
        let v = ramp.end_interval(&p, 10.0, Some(900.0), 1);
        assert_eq!((v.stage, v.add_connections), (Stage::Goodput, 1));
        ramp.end_interval(&p, 20.0, Some(900.0), 2);
        ramp.end_interval(&p, 20.0, Some(900.0), 3);
        let v = ramp.end_interval(&p, 20.0, Some(900.0), 4);
        assert_eq!(v.stage, Stage::Responsiveness);
        assert_eq!(ramp.goodput_saturated_at(), Some(4));
        assert_eq!(ramp.rpm_confidence(2), Confidence::Low);
        // RPM counts only after saturation: two equal values are stable at MAD = 2.
        ramp.end_interval(&p, 20.0, Some(500.0), 5);
        let v = ramp.end_interval(&p, 20.0, Some(501.0), 6);
        assert_eq!((v.stage, v.add_connections), (Stage::Done, 0));
        assert_eq!(ramp.rpm_confidence(2), Confidence::High);
        assert_eq!(ramp.goodput_confidence(2), Confidence::High);
    }

    #[test]
    fn no_connections_are_added_past_the_maximum() {
        let p = Parameters {
            max_connections: 3,
            increment: 2,
            ..Parameters::default()
        };
        let mut ramp = Ramp::default();
        assert_eq!(ramp.end_interval(&p, 1.0, None, 2).add_connections, 1);
        assert_eq!(ramp.end_interval(&p, 2.0, None, 3).add_connections, 0);
    }

    #[test]
    fn the_probe_rate_is_capped_by_capacity_and_by_mps() {
        let p = Parameters::default();
        // 2 Mb/s = 250 000 B/s: 5 % is 12 500 B/s, about 2.08 pairs per second.
        let r = p.probe_pairs_per_sec(Some(250_000.0));
        assert!((r - 12_500.0 / 6000.0).abs() < 1e-9, "{r}");
        // 1 Gb/s would allow far more than MPS.
        assert_eq!(p.probe_pairs_per_sec(Some(125_000_000.0)), 100.0);
        // Nothing measured yet, or a trickle: one pair per interval.
        assert_eq!(p.probe_pairs_per_sec(None), 0.2);
        assert_eq!(p.probe_pairs_per_sec(Some(1.0)), 0.2);
    }
}
