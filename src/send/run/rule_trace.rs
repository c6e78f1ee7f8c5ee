//! `--rule-trace DUR`: the readiness rule's inputs at (nearly) every ACK, from a thread of
//! its own. Every DUR it reads tcp_info — and, when the kernel's TCP_REPLENISH_TIME decides,
//! TCP_REPLENISH_INFO — and writes a row of rule-trace.csv whenever an ACK or a write moved
//! something (bytes acked, packets delivered, the unsent backlog, the threshold). ACKs
//! further apart than DUR each get their own row; the main loop is never woken by it, so it
//! adds no invitation of its own (a getsockopt takes the socket lock briefly, nothing more).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::replenish::kernel::{kernel_replenish_info, KernelReplenishInfo};
use crate::report::CsvFile;
use crate::sys;

/// One row of rule-trace.csv.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleTraceRow {
    pub t_ns: u64,
    /// write_seq − snd_nxt, bytes.
    pub notsent: u32,
    /// Packets in flight (tcpi_unacked).
    pub unacked: u32,
    pub mss: u32,
    pub cwnd: u32,
    pub srtt_us: u32,
    /// tcpi_delivery_rate (packets × MSS per second) and whether its sample was
    /// application-limited.
    pub delivery_rate_bytes_s: Option<u64>,
    pub app_limited: bool,
    pub bytes_acked: Option<u64>,
    pub delivered: Option<u32>,
    /// A sub-MSS unsent tail waits while data is in flight: what Nagle holds back when an
    /// earlier small segment is unacknowledged (Minshall's check, which tcp_info does not
    /// show). Always false with TCP_NODELAY.
    pub sub_mss_tail: bool,
    /// The kernel rule's own view (TCP_REPLENISH_INFO); empty when the kernel does not decide.
    pub k_threshold: Option<u32>,
    pub k_drain_rate_bytes_s: Option<u64>,
    pub k_source: Option<&'static str>,
    pub k_writable: Option<bool>,
    pub k_sub_mss: Option<bool>,
}

impl RuleTraceRow {
    /// What an ACK or a write changes; rows repeat only when one of these moved.
    fn key(&self) -> (u32, Option<u64>, Option<u32>, Option<u32>, Option<bool>) {
        (
            self.notsent,
            self.bytes_acked,
            self.delivered,
            self.k_threshold,
            self.k_writable,
        )
    }
}

/// The running tracer; stopping (or dropping) it joins its thread.
pub struct RuleTrace {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<u64, String>>>,
}

impl RuleTrace {
    /// Starts tracing `fd` (a duplicate of the connection's socket) into `dir`/rule-trace.csv.
    pub fn start(
        fd: OwnedFd,
        dir: &Path,
        every: Duration,
        info_optname: Option<u32>,
        nagle: bool,
    ) -> Result<RuleTrace, String> {
        let mut csv = CsvFile::create(&dir.join("rule-trace.csv")).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sbm-rule-trace".into())
            .spawn(move || -> Result<u64, String> {
                let mut last = None;
                while !flag.load(Ordering::Relaxed) {
                    let row = observe(&fd, info_optname, nagle)?;
                    if last != Some(row.key()) {
                        last = Some(row.key());
                        csv.write(&row).map_err(|e| e.to_string())?;
                    }
                    std::thread::sleep(every);
                }
                csv.flush().map_err(|e| e.to_string())?;
                Ok(csv.rows())
            })
            .map_err(|e| format!("cannot start the rule-trace thread: {e}"))?;
        Ok(RuleTrace {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread; the rows written, or why tracing ended early.
    pub fn finish(&mut self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("the rule-trace thread panicked".into())),
            None => Ok(0),
        }
    }
}

impl Drop for RuleTrace {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn observe(fd: &OwnedFd, info_optname: Option<u32>, nagle: bool) -> Result<RuleTraceRow, String> {
    let t_ns = super::realtime_ns();
    let info = sys::tcp_info(fd.as_fd()).map_err(|e| e.to_string())?;
    let k: Option<KernelReplenishInfo> = match info_optname {
        Some(n) => kernel_replenish_info(fd.as_fd(), n).map_err(|e| e.to_string())?,
        None => None,
    };
    let notsent = info.notsent_bytes.unwrap_or(0);
    Ok(RuleTraceRow {
        t_ns,
        notsent,
        unacked: info.unacked,
        mss: info.snd_mss,
        cwnd: info.snd_cwnd,
        srtt_us: info.rtt_us,
        delivery_rate_bytes_s: info.delivery_rate,
        app_limited: info.delivery_rate_app_limited,
        bytes_acked: info.bytes_acked,
        delivered: info.delivered,
        sub_mss_tail: nagle && notsent > 0 && notsent < info.snd_mss && info.unacked > 0,
        k_threshold: k.map(|k| k.threshold),
        k_drain_rate_bytes_s: k.map(|k| k.drain_rate),
        k_source: k.map(|k| k.decision().source.name()),
        k_writable: k.map(|k| k.writable),
        k_sub_mss: k.map(|k| k.sub_mss),
    })
}
