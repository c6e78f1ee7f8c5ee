//! guest-cpu.csv: what the guest received, second by second, under either contention model
//! — its cgroup's CPU time and throttling counters, and with CPU slices the slices dealt.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cgroup::{CpuStat, GuestCgroup};
use super::slices::Slicer;

/// One second of the guest's life (deltas over the row's span).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GuestCpuRow {
    /// Seconds since the guest was started, at the end of the row's span.
    pub t_s: f64,
    pub span_s: f64,
    /// CPU time the guest's processes used (None where the cgroup does not count it).
    pub usage_us: Option<u64>,
    /// `usage_us` over the span: the share of one CPU the guest received.
    pub share: Option<f64>,
    /// CFS quota: periods that elapsed, periods the guest was throttled in, time throttled.
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_us: u64,
    /// CPU slices: off-CPU slices dealt in the span (None without slices).
    pub slices: Option<u64>,
}

/// Samples the guest's cgroup (and slicer) once per `every`.
pub struct CpuLog<'a> {
    cg: &'a GuestCgroup,
    every: Duration,
    started: Instant,
    last_at: Duration,
    last: CpuStat,
    last_slices: u64,
    pub rows: Vec<GuestCpuRow>,
}

impl<'a> CpuLog<'a> {
    pub fn new(cg: &'a GuestCgroup, every: Duration) -> CpuLog<'a> {
        CpuLog {
            cg,
            every,
            started: Instant::now(),
            last_at: Duration::ZERO,
            last: cg.stat().unwrap_or_default(),
            last_slices: 0,
            rows: vec![],
        }
    }

    /// Adds a row when a span is due (call it often; it reads the cgroup once per span).
    pub fn tick(&mut self, slicer: Option<&Slicer>) {
        let now = self.started.elapsed();
        if now < self.last_at + self.every {
            return;
        }
        let Ok(stat) = self.cg.stat() else { return };
        let span = now - self.last_at;
        let usage_us = match (stat.usage_us, self.last.usage_us) {
            (Some(a), Some(b)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        let slices = slicer.map(|s| {
            let n = s.periods();
            let d = n.saturating_sub(self.last_slices);
            self.last_slices = n;
            d
        });
        self.rows.push(GuestCpuRow {
            t_s: now.as_secs_f64(),
            span_s: span.as_secs_f64(),
            usage_us,
            share: usage_us.map(|u| u as f64 / span.as_micros().max(1) as f64),
            periods: stat.nr_periods.saturating_sub(self.last.nr_periods),
            throttled_periods: stat.nr_throttled.saturating_sub(self.last.nr_throttled),
            throttled_us: stat.throttled_us.saturating_sub(self.last.throttled_us),
            slices,
        });
        self.last = stat;
        self.last_at = now;
    }

    /// Writes the rows to `path` (CSV).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let mut w = csv::Writer::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for r in &self.rows {
            w.serialize(r)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        w.flush().map_err(|e| format!("{}: {e}", path.display()))
    }
}
