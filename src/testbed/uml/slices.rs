//! CPU contention as a hypervisor deals it to a vCPU: periodic off-CPU slices at a fixed
//! phase. Every host process of the guest is pinned to one CPU; on that CPU a SCHED_FIFO
//! thread of ours busy-waits (100 − share) % of every period at absolute deadlines and
//! sleeps the rest, so the guest as a whole — whichever of its processes wants to run —
//! gets `share` of each period, in one piece, always at the same phase. The other model, a
//! CFS quota (cgroup.rs), lets the guest run until its budget is spent and then throttles it
//! for the rest of the period; a per-thread reservation would not cap the guest's total.
//!
//! The host's RT throttling (by default 950 000 of every 1 000 000 µs for real-time
//! threads) leaves normal threads at least 5 %, so shares below 5 % cannot be dealt.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::clock::realtime_ns;

#[derive(Debug, thiserror::Error)]
pub enum SliceError {
    #[error(
        "CPU share {0}% is outside 5..=100 (the host's RT throttling leaves normal threads 5 %)"
    )]
    BadShare(u32),
    #[error("slice period {0:?} is outside 1 ms..=1 s")]
    BadPeriod(Duration),
    #[error("CPU {0} does not exist here ({1} CPUs)")]
    BadCpu(usize, usize),
    #[error("the slicing thread could not take CPU {cpu}: {reason}")]
    Start { cpu: usize, reason: String },
}

/// What to deal: `share_pct` of every `period` to whatever runs on `cpu`, for `lasting`
/// (None: until stopped) — after it the guest has its CPU whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slices {
    pub share_pct: u32,
    pub period: Duration,
    pub cpu: usize,
    pub lasting: Option<Duration>,
}

impl Slices {
    pub fn new(share_pct: u32, period: Duration, cpu: usize) -> Result<Slices, SliceError> {
        if !(5..=100).contains(&share_pct) {
            return Err(SliceError::BadShare(share_pct));
        }
        if period < Duration::from_millis(1) || period > Duration::from_secs(1) {
            return Err(SliceError::BadPeriod(period));
        }
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        if cpu >= cpus {
            return Err(SliceError::BadCpu(cpu, cpus));
        }
        Ok(Slices {
            share_pct,
            period,
            cpu,
            lasting: None,
        })
    }

    /// Deals for `d` only, then leaves the CPU to the guest.
    pub fn lasting(self, d: Duration) -> Slices {
        Slices {
            lasting: Some(d),
            ..self
        }
    }

    /// The part of each period the slicer keeps the CPU.
    pub fn off(&self) -> Duration {
        self.period * (100 - self.share_pct) / 100
    }
}

/// What the slicer did: the proof that the slices were dealt as asked.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SliceRecord {
    pub share_pct: u32,
    pub period_us: u64,
    pub cpu: usize,
    pub periods: u64,
    /// Time the slicer held the CPU, over all periods.
    pub off_us_total: u64,
    /// Periods whose off-slice started more than a tenth of a period late (the slicer itself
    /// was kept from the CPU): their phase slipped.
    pub late_periods: u64,
    /// Each off-slice as it was held: (start, end) in CLOCK_REALTIME nanoseconds, the clock
    /// a traced guest stamps its events with (guest::GuestTrace). Not in uml.json: written
    /// as its own file where a trace needs it.
    #[serde(skip)]
    pub off_windows: Vec<(u64, u64)>,
}

/// The off-slices as CSV (`off_start_unix_ns,off_end_unix_ns`): when the guest was kept
/// from its CPU; it could run in between.
pub fn off_windows_csv(windows: &[(u64, u64)]) -> String {
    let mut s = String::from("off_start_unix_ns,off_end_unix_ns\n");
    for (a, b) in windows {
        s.push_str(&format!("{a},{b}\n"));
    }
    s
}

/// The running slicer; [`Slicer::stop`] ends it and says what it dealt. Dropped without
/// `stop` (an error on the way), it still ends: a real-time busy loop must never outlive
/// the run that started it.
pub struct Slicer {
    stop: Arc<AtomicBool>,
    periods: Arc<AtomicU64>,
    thread: Option<JoinHandle<SliceRecord>>,
}

impl Slicer {
    /// Starts the slicing thread: pinned to `s.cpu`, SCHED_FIFO. Fails (and leaves nothing
    /// running) if the host refuses either.
    pub fn start(s: Slices) -> Result<Slicer, SliceError> {
        let stop = Arc::new(AtomicBool::new(false));
        let periods = Arc::new(AtomicU64::new(0));
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let stop_flag = stop.clone();
        let period_count = periods.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sbm-slicer-cpu{}", s.cpu))
            .spawn(move || {
                if let Err(reason) = take_cpu(s.cpu) {
                    let _ = ready_tx.send(Err(reason));
                    return SliceRecord::default();
                }
                let _ = ready_tx.send(Ok(()));
                deal(s, &stop_flag, &period_count)
            })
            .map_err(|e| SliceError::Start {
                cpu: s.cpu,
                reason: e.to_string(),
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Slicer {
                stop,
                periods,
                thread: Some(thread),
            }),
            Ok(Err(reason)) => {
                let _ = thread.join();
                Err(SliceError::Start { cpu: s.cpu, reason })
            }
            Err(_) => Err(SliceError::Start {
                cpu: s.cpu,
                reason: "the thread ended before it started".into(),
            }),
        }
    }

    /// Periods dealt so far (each one an off-CPU slice for the guest).
    pub fn periods(&self) -> u64 {
        self.periods.load(Ordering::Relaxed)
    }

    pub fn stop(mut self) -> SliceRecord {
        self.end()
    }

    fn end(&mut self) -> SliceRecord {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Slicer {
    fn drop(&mut self) {
        self.end();
    }
}

/// Pins the calling thread to `cpu` and makes it SCHED_FIFO (above every normal thread,
/// under the kernel's own RT threads).
fn take_cpu(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU set: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("sched_setaffinity: {e}"))?;
    crate::sys::set_fifo(50).map_err(|e| e.to_string())
}

/// The slicing loop: at each period's start, hold the CPU for `off`, then sleep until the
/// next period's start. Deadlines are absolute, so the phase does not drift.
fn deal(s: Slices, stop: &AtomicBool, periods: &AtomicU64) -> SliceRecord {
    let off = s.off();
    let mut record = SliceRecord {
        share_pct: s.share_pct,
        period_us: s.period.as_micros() as u64,
        cpu: s.cpu,
        ..Default::default()
    };
    let mut start = Instant::now();
    let until = s.lasting.map(|d| start + d);
    while !stop.load(Ordering::Relaxed) && until.is_none_or(|u| Instant::now() < u) {
        let began = Instant::now();
        if began.duration_since(start) > s.period / 10 {
            record.late_periods += 1;
        }
        let began_unix_ns = realtime_ns();
        let until = start + off;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        record.off_us_total += Instant::now().duration_since(began).as_micros() as u64;
        record.off_windows.push((began_unix_ns, realtime_ns()));
        record.periods += 1;
        periods.store(record.periods, Ordering::Relaxed);
        start += s.period;
        // Behind by more than a period (the host held us off): skip to the next one ahead
        // rather than dealing a burst of slices back to back.
        let now = Instant::now();
        while start + s.period <= now {
            start += s.period;
        }
        if let Some(wait) = start.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_periods_and_cpus_are_checked() {
        assert!(matches!(
            Slices::new(4, Duration::from_millis(10), 0),
            Err(SliceError::BadShare(4))
        ));
        assert!(matches!(
            Slices::new(35, Duration::from_micros(500), 0),
            Err(SliceError::BadPeriod(_))
        ));
        assert!(matches!(
            Slices::new(35, Duration::from_millis(10), 4096),
            Err(SliceError::BadCpu(4096, _))
        ));
        let s = Slices::new(35, Duration::from_millis(10), 0).unwrap();
        assert_eq!(s.off(), Duration::from_micros(6500));
    }

    #[test]
    fn the_slicer_records_each_off_slice_in_realtime() {
        let s = Slices::new(50, Duration::from_millis(10), 0).unwrap();
        let before = realtime_ns();
        let slicer = match Slicer::start(s) {
            Ok(x) => x,
            // Not root, or no SCHED_FIFO here: the integration tests run it as root.
            Err(SliceError::Start { .. }) => return,
            Err(e) => panic!("{e}"),
        };
        std::thread::sleep(Duration::from_millis(100));
        let r = slicer.stop();
        let after = realtime_ns();
        assert_eq!(r.off_windows.len() as u64, r.periods);
        assert!(r.periods >= 5, "{} periods in 100 ms", r.periods);
        for w in r.off_windows.windows(2) {
            assert!(w[0].0 < w[0].1 && w[0].1 <= w[1].0, "{w:?}");
        }
        let first = r.off_windows[0];
        let last = *r.off_windows.last().unwrap();
        assert!(before <= first.0 && last.1 <= after);
        // Dealt for a while only: the slicer stops by itself, the rest of the run is free.
        let slicer = match Slicer::start(s.lasting(Duration::from_millis(50))) {
            Ok(x) => x,
            Err(e) => panic!("{e}"),
        };
        std::thread::sleep(Duration::from_millis(150));
        let periods_then = slicer.periods();
        let dealt = slicer.stop();
        assert!(
            (3..=7).contains(&dealt.periods) && dealt.periods == periods_then,
            "{} periods dealt in the first 50 ms of 150",
            dealt.periods
        );
        let csv = off_windows_csv(&r.off_windows[..1]);
        assert_eq!(
            csv,
            format!(
                "off_start_unix_ns,off_end_unix_ns\n{},{}\n",
                first.0, first.1
            )
        );
    }
}
