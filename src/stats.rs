//! Latency distributions (µs) for one interval or a whole run, on hdrhistogram.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of a latency distribution, µs. Absent (None) when nothing was recorded.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Percentiles {
    pub count: u64,
    pub p50_us: Option<u64>,
    pub p95_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
}

/// A histogram of latencies in µs from 1 µs to one hour at 3 significant digits
/// (relative error ≤ 0.1 %). Larger values are clamped to the top and counted.
pub struct LatencyHist {
    hist: Histogram<u64>,
    clamped: u64,
}

const MAX_US: u64 = 3_600_000_000;

impl Default for LatencyHist {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHist {
    pub fn new() -> Self {
        LatencyHist {
            hist: Histogram::new_with_bounds(1, MAX_US, 3).expect("static bounds are valid"),
            clamped: 0,
        }
    }

    pub fn record(&mut self, us: u64) {
        if us > MAX_US {
            self.clamped += 1;
        }
        self.hist.saturating_record(us.clamp(1, MAX_US));
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The value at quantile q (0..=1), as hdrhistogram's highest-equivalent value.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        (self.count() > 0).then(|| self.hist.value_at_quantile(q))
    }

    pub fn percentiles(&self) -> Percentiles {
        Percentiles {
            count: self.count(),
            p50_us: self.quantile(0.50),
            p95_us: self.quantile(0.95),
            p99_us: self.quantile(0.99),
            max_us: (self.count() > 0).then(|| self.hist.max()),
        }
    }

    pub fn reset(&mut self) {
        self.hist.reset();
        self.clamped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_has_no_percentiles() {
        let h = LatencyHist::new();
        assert_eq!(h.percentiles(), Percentiles::default());
    }

    #[test]
    fn percentiles_within_precision() {
        let mut h = LatencyHist::new();
        for v in 1..=1000u64 {
            h.record(v * 1000); // 1 ms .. 1 s
        }
        let p = h.percentiles();
        assert_eq!(p.count, 1000);
        let close = |got: Option<u64>, want: u64| {
            let g = got.unwrap() as f64;
            assert!(
                (g - want as f64).abs() / want as f64 <= 0.001,
                "{g} vs {want}"
            );
        };
        close(p.p50_us, 500_000);
        close(p.p95_us, 950_000);
        close(p.p99_us, 990_000);
        close(p.max_us, 1_000_000);
    }

    #[test]
    fn out_of_range_values_are_clamped_and_counted() {
        let mut h = LatencyHist::new();
        h.record(0);
        h.record(MAX_US * 10);
        assert_eq!(h.count(), 2);
        assert_eq!(h.clamped(), 1);
        h.reset();
        assert_eq!(h.count(), 0);
    }
}
