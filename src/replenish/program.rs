//! The rule kept per socket by a program outside sbm-send's loop — the sock_ops BPF program
//! of `--replenish-impl bpf` (`crate::bpf::replenish` implements [`SocketRule`]) — and what
//! it says about a socket.
//!
//! The gate owns the program's handle ([`super::Gate::Bpf`]) and reads it back at each
//! invitation: the layer that starts the program passes it in, and nothing here knows how
//! it is loaded.

use std::borrow::Cow;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::rule::{Decision, RateSource, Reason};

/// A readiness rule that something else keeps per socket, read back by fd.
pub trait SocketRule: Send + Sync {
    /// The program's view of the socket `fd` (None: the socket is not one it looks after,
    /// or it holds nothing for it yet).
    fn state(&self, fd: BorrowedFd<'_>) -> Option<BpfSocketState>;
}

/// The BPF replenish program's view of one socket (`--replenish-impl bpf`): its drain-rate
/// estimate, the threshold and lowat it last computed, and its counters (summary.json `bpf`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct BpfSocketState {
    /// The drain-rate estimate, bytes/s (0: no sample yet).
    pub rate_bytes_per_s: u64,
    /// rate × T, bytes.
    pub threshold_bytes: u64,
    /// TCP_NOTSENT_LOWAT as the program last set it.
    pub lowat_bytes: u32,
    /// sample | app-limited-sample | cwnd-srtt | none
    pub rate_source: Cow<'static, str>,
    /// Lowat computations (one per RTT callback, and one when the connection was set up).
    pub updates: u64,
    /// Delivery-rate samples seen.
    pub samples: u64,
    /// Application-limited samples not used (below the estimate).
    pub app_limited_skipped: u64,
    /// Samples above twice cwnd × MSS / min_rtt, dropped.
    pub spikes_dropped: u64,
    /// bpf_setsockopt(TCP_NOTSENT_LOWAT) failures, and the last one's error.
    pub setsockopt_errors: u64,
    pub last_error: i32,
}

impl BpfSocketState {
    /// The program's last word as the readiness rule's decision (sbm-send's interval lines
    /// and intervals.csv): the threshold it keeps, the rate it used (before the first sample
    /// the cwnd/srtt estimate, recovered from threshold = rate × `time`) and its source.
    /// The kernel invited, so the decision is "writable".
    pub fn decision(&self, time: Duration) -> Decision {
        // The program reports these three (RateSource::name spells them).
        let source = [
            RateSource::Sample,
            RateSource::AppLimitedSample,
            RateSource::CwndSrtt,
        ]
        .into_iter()
        .find(|s| s.name() == self.rate_source)
        .unwrap_or(RateSource::None);
        let rate = if self.rate_bytes_per_s > 0 {
            self.rate_bytes_per_s as f64
        } else {
            self.threshold_bytes as f64 * 1e6 / time.as_micros().max(1) as f64
        };
        Decision {
            writable: true,
            reason: Reason::BelowThreshold,
            threshold: Some(self.threshold_bytes),
            rate: (source != RateSource::None).then_some(rate),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_recovers_the_cwnd_srtt_rate_from_the_threshold() {
        let st = BpfSocketState {
            threshold_bytes: 3_000,
            rate_source: "cwnd-srtt".into(),
            ..BpfSocketState::default()
        };
        let d = st.decision(Duration::from_millis(15));
        assert_eq!(d.source, RateSource::CwndSrtt);
        assert_eq!(d.threshold, Some(3_000));
        assert_eq!(d.rate, Some(200_000.0));
        let sampled = BpfSocketState {
            rate_bytes_per_s: 250_000,
            threshold_bytes: 3_750,
            rate_source: "sample".into(),
            ..BpfSocketState::default()
        };
        assert_eq!(
            sampled.decision(Duration::from_millis(15)).rate,
            Some(250_000.0)
        );
        let none = BpfSocketState::default().decision(Duration::from_millis(15));
        assert_eq!((none.source, none.rate), (RateSource::None, None));
    }
}
