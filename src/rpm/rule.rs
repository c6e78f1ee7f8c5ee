//! The readiness rule at a responsiveness-test endpoint: what sbm-rpm applies to its
//! upload sockets and sbm-rpm-server to its download sockets.
//!
//! - `default`: nothing set; the socket is writable while the send buffer has room.
//! - `notsent-lowat`: TCP_NOTSENT_LOWAT, a fixed byte threshold.
//! - `replenish` (kernel): the patched kernel's TCP_REPLENISH_TIME, set once.
//! - `replenish` (emulated): the rule of `replenish::Replenish` (delivery-rate estimate,
//!   hysteresis) carried out through TCP_NOTSENT_LOWAT set before each write to its
//!   threshold, drain rate × T. Both endpoints are tokio writers, which write until EAGAIN
//!   and then wait for an EPOLLOUT edge: sendmsg refuses once the backlog reaches the
//!   lowat (the threshold) and the kernel wakes the writer at half of it, which is the
//!   rule's "writable up to T, invited again at T/2".
//! - `lowat-per-write`: the responsiveness draft's fallback for systems without
//!   TCP_REPLENISH_TIME: TCP_NOTSENT_LOWAT = the connection's measured throughput × T, set
//!   before each write; the throughput is bytes acknowledged over the last window of at
//!   least one sRTT (`RateEstimator::Average`).
//!
//! [`RuledStream`] wraps a connected socket and does the per-write part; it sits below TLS,
//! so the bytes it sees are the bytes the socket holds.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::replenish::{self, Observation, RateEstimator, Replenish};
use crate::sockopt::OptionReport;
use crate::sys;
use crate::units;

/// Who implements `--replenish-time` at an RPM endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum EndpointReplenishImpl {
    /// The patched kernel's option (its number from the kernel's sysctl,
    /// --replenish-optname or SBM_REPLENISH_OPTNAME).
    Kernel,
    /// TCP_NOTSENT_LOWAT set to drain rate × T before each write.
    Emulated,
}

/// The rule flags both programs take (sbm-rpm for its uploads, sbm-rpm-server for its
/// downloads).
#[derive(Debug, Clone, clap::Args)]
pub struct RuleArgs {
    /// TCP_NOTSENT_LOWAT on the sending sockets, in bytes (16K is the value the
    /// responsiveness draft says Apple uses).
    #[arg(long, value_parser = parse_lowat, value_name = "BYTES", group = "rule")]
    pub notsent_lowat: Option<u32>,

    /// TCP_REPLENISH_TIME on the sending sockets: writable while the unsent backlog would
    /// drain within DUR (the responsiveness draft says 5ms).
    #[arg(long, value_parser = parse_replenish_time, value_name = "DUR", group = "rule")]
    pub replenish_time: Option<Duration>,

    /// Who implements --replenish-time: the patched kernel, or TCP_NOTSENT_LOWAT set to the
    /// delivery rate × DUR before each write.
    #[arg(long, value_enum, default_value_t = EndpointReplenishImpl::Kernel, requires = "replenish_time")]
    pub replenish_impl: EndpointReplenishImpl,

    /// The patched kernel's TCP_REPLENISH_TIME option number (default: what the kernel
    /// announces in net.ipv4.tcp_replenish_time_optname, or SBM_REPLENISH_OPTNAME).
    #[arg(long, value_name = "N", requires = "replenish_time")]
    pub replenish_optname: Option<u32>,

    /// The responsiveness draft's fallback without TCP_REPLENISH_TIME: before each write,
    /// TCP_NOTSENT_LOWAT = the connection's measured throughput × DUR.
    #[arg(long, value_parser = parse_replenish_time, value_name = "DUR", group = "rule")]
    pub lowat_per_write: Option<Duration>,
}

fn parse_lowat(s: &str) -> Result<u32, String> {
    let v = units::parse_bytes(s).map_err(|e| e.to_string())?;
    u32::try_from(v).map_err(|_| format!("invalid lowat '{s}': at most 4 GiB - 1"))
}

fn parse_replenish_time(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s).map_err(|e| e.to_string())?;
    if d.subsec_nanos() % 1_000 != 0 || d.as_micros() > u128::from(i32::MAX as u32) {
        return Err(format!(
            "invalid time '{s}': whole microseconds, at most {} s",
            i32::MAX / 1_000_000
        ));
    }
    Ok(d)
}

/// The rule, resolved from the flags.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EndpointRule {
    Default,
    NotsentLowat {
        bytes: u32,
    },
    Replenish {
        time_us: u64,
        implementation: EndpointReplenishImpl,
        #[serde(skip_serializing_if = "Option::is_none")]
        optname: Option<u32>,
    },
    LowatPerWrite {
        time_us: u64,
    },
}

impl RuleArgs {
    /// The rule these flags ask for; the kernel's option number is looked up here, so a
    /// kernel without it fails before any connection.
    pub fn rule(&self) -> Result<EndpointRule, String> {
        if let Some(b) = self.notsent_lowat {
            return Ok(EndpointRule::NotsentLowat { bytes: b });
        }
        if let Some(t) = self.lowat_per_write {
            return Ok(EndpointRule::LowatPerWrite {
                time_us: t.as_micros() as u64,
            });
        }
        let Some(t) = self.replenish_time else {
            return Ok(EndpointRule::Default);
        };
        if let Some(n) = self.replenish_optname {
            if n <= replenish::kernel::HIGHEST_MAINLINE_TCP_OPTION {
                return Err(replenish::GateError::MainlineOptname(n).to_string());
            }
        }
        let optname = match self.replenish_impl {
            EndpointReplenishImpl::Emulated => None,
            EndpointReplenishImpl::Kernel => Some(
                self.replenish_optname
                    .or(replenish::optname_from_env()?)
                    .or_else(replenish::detect_optname)
                    .ok_or_else(|| {
                        "--replenish-impl kernel: this kernel does not announce TCP_REPLENISH_TIME (net.ipv4.tcp_replenish_time_optname); give --replenish-optname N, run the patched kernel (sbm-testbed uml), or use --replenish-impl emulated".to_string()
                    })?,
            ),
        };
        Ok(EndpointRule::Replenish {
            time_us: t.as_micros() as u64,
            implementation: self.replenish_impl,
            optname,
        })
    }
}

impl EndpointRule {
    /// A short label for tables and the human summary.
    pub fn label(&self) -> String {
        match self {
            EndpointRule::Default => "default".into(),
            EndpointRule::NotsentLowat { bytes } => format!("notsent-lowat {bytes} B"),
            EndpointRule::Replenish {
                time_us,
                implementation,
                ..
            } => format!(
                "replenish {} ms ({})",
                *time_us as f64 / 1000.0,
                match implementation {
                    EndpointReplenishImpl::Kernel => "kernel",
                    EndpointReplenishImpl::Emulated => "emulated",
                }
            ),
            EndpointRule::LowatPerWrite { time_us } => {
                format!("lowat-per-write {} ms", *time_us as f64 / 1000.0)
            }
        }
    }

    /// Sets what is set once on a sending socket; returns what the kernel has, and the
    /// per-write state where the rule has one.
    pub fn apply(&self, fd: BorrowedFd<'_>) -> Result<(Vec<OptionReport>, PerWrite), String> {
        match *self {
            EndpointRule::Default => Ok((Vec::new(), PerWrite::None)),
            EndpointRule::NotsentLowat { bytes } => {
                sys::set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, bytes as i32)
                    .map_err(|e| e.to_string())?;
                let got = sys::get_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)
                    .map_err(|e| e.to_string())?;
                Ok((
                    vec![OptionReport {
                        name: "notsent_lowat".into(),
                        requested: bytes.to_string(),
                        effective: got.to_string(),
                        warning: (got as u32 != bytes)
                            .then(|| format!("the kernel has {got}, not {bytes}")),
                    }],
                    PerWrite::None,
                ))
            }
            EndpointRule::Replenish {
                time_us,
                optname: Some(n),
                ..
            } => {
                let opt =
                    replenish::set_kernel_option(fd, n, time_us).map_err(|e| e.to_string())?;
                Ok((vec![opt], PerWrite::None))
            }
            EndpointRule::Replenish { time_us, .. } => {
                let nodelay = sys::get_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY)
                    .map_err(|e| e.to_string())?
                    != 0;
                Ok((
                    Vec::new(),
                    PerWrite::lowat(Replenish::new(
                        time_us,
                        true,
                        nodelay,
                        RateEstimator::Delivery,
                    )),
                ))
            }
            EndpointRule::LowatPerWrite { time_us } => Ok((
                Vec::new(),
                PerWrite::lowat(Replenish::new(time_us, false, true, RateEstimator::Average)),
            )),
        }
    }
}

/// What a rule does before each write.
#[derive(Debug)]
pub enum PerWrite {
    None,
    Lowat(Box<LowatPerWrite>),
}

impl PerWrite {
    fn lowat(rule: Replenish) -> PerWrite {
        PerWrite::Lowat(Box::new(LowatPerWrite {
            rule,
            current: None,
            sets: 0,
        }))
    }
}

/// TCP_NOTSENT_LOWAT kept at a rule's threshold, re-read before each write.
#[derive(Debug)]
pub struct LowatPerWrite {
    rule: Replenish,
    /// The lowat last set (0: off, the kernel's default).
    current: Option<u32>,
    sets: u64,
}

impl LowatPerWrite {
    /// Reads tcp_info, updates the rule's estimate and sets the lowat if it changed.
    fn before_write(&mut self, fd: BorrowedFd<'_>) {
        let Ok(info) = sys::tcp_info(fd) else {
            return;
        };
        let d = self
            .rule
            .decide(&Observation::from_tcp_info(&info, Instant::now()));
        // No estimate yet: no lowat (the rule calls every backlog writable then).
        let lowat = match d.threshold {
            Some(_) => self.rule.wake_lowat(&d, info.snd_mss).max(1),
            None => 0,
        };
        if self.current != Some(lowat)
            && sys::set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, lowat as i32).is_ok()
        {
            self.current = Some(lowat);
            self.sets += 1;
        }
    }
}

/// A connected TCP socket with its endpoint rule's per-write part, and the count of bytes
/// written through it (the offset of the next write).
#[derive(Debug)]
pub struct RuledStream {
    inner: TcpStream,
    per_write: PerWrite,
    written: u64,
}

impl RuledStream {
    pub fn new(inner: TcpStream, per_write: PerWrite) -> RuledStream {
        RuledStream {
            inner,
            per_write,
            written: 0,
        }
    }

    pub fn get_ref(&self) -> &TcpStream {
        &self.inner
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// How many times the per-write rule changed the lowat.
    pub fn lowat_sets(&self) -> u64 {
        match &self.per_write {
            PerWrite::None => 0,
            PerWrite::Lowat(l) => l.sets,
        }
    }
}

impl AsyncRead for RuledStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for RuledStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let PerWrite::Lowat(l) = &mut this.per_write {
            l.before_write(this.inner.as_fd());
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            this.written += n as u64;
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let PerWrite::Lowat(l) = &mut this.per_write {
            l.before_write(this.inner.as_fd());
        }
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            this.written += n as u64;
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        rule: RuleArgs,
    }

    fn rule(args: &[&str]) -> Result<EndpointRule, String> {
        let mut all = vec!["t"];
        all.extend_from_slice(args);
        T::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .rule
            .rule()
    }

    #[test]
    fn the_flags_make_one_rule_and_refuse_two() {
        assert_eq!(rule(&[]).unwrap(), EndpointRule::Default);
        assert_eq!(
            rule(&["--notsent-lowat", "16K"]).unwrap(),
            EndpointRule::NotsentLowat { bytes: 16384 }
        );
        assert_eq!(
            rule(&["--lowat-per-write", "5ms"]).unwrap(),
            EndpointRule::LowatPerWrite { time_us: 5000 }
        );
        assert_eq!(
            rule(&["--replenish-time", "5ms", "--replenish-impl", "emulated"]).unwrap(),
            EndpointRule::Replenish {
                time_us: 5000,
                implementation: EndpointReplenishImpl::Emulated,
                optname: None
            }
        );
        assert_eq!(
            rule(&["--replenish-time", "5ms", "--replenish-optname", "60"]).unwrap(),
            EndpointRule::Replenish {
                time_us: 5000,
                implementation: EndpointReplenishImpl::Kernel,
                optname: Some(60)
            }
        );
        assert!(rule(&["--notsent-lowat", "16K", "--lowat-per-write", "5ms"]).is_err());
        assert!(rule(&["--replenish-impl", "emulated"]).is_err());
        assert!(rule(&["--lowat-per-write", "0.5us"]).is_err());
    }
}
