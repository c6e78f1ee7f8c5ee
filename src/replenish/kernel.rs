//! The in-kernel TCP_REPLENISH_TIME of kernel/patches, seen from user space: how its option
//! number is found (a sysctl the patched kernel sets, a flag, or the environment), setting
//! it with a read-back, and its own view of the rule (`struct tcp_replenish_info`).

use std::os::fd::BorrowedFd;

use super::rule::{Decision, RateSource, Reason};
use super::GateError;
use crate::ne::{u32_at, u64_at};
use crate::sockopt::OptionReport;
use crate::sys;
use crate::sysinfo;

/// Option numbers up to this one are mainline TCP options (TCP_DELACK_MAX_US = 46): a
/// stock kernel would "accept" them as something else.
pub const HIGHEST_MAINLINE_TCP_OPTION: u32 = 46;
/// The sysctl through which this project's patched kernel announces its option number.
pub const OPTNAME_SYSCTL: &str = "net/ipv4/tcp_replenish_time_optname";
/// Where the patched kernel announces TCP_REPLENISH_INFO's number.
pub const INFO_OPTNAME_SYSCTL: &str = "net/ipv4/tcp_replenish_info_optname";
/// The lab kernel's experiment-only drain-rate estimator switch (kernel/patches/0003).
pub const ESTIMATOR_SYSCTL: &str = "net/ipv4/tcp_replenish_estimator";
/// The patched kernel's switch for its sub-MSS clause (1 = on).
pub const SUBMSS_SYSCTL: &str = "net/ipv4/tcp_replenish_submss";

/// The option number from the environment, validated.
pub fn optname_from_env() -> Result<Option<u32>, String> {
    match std::env::var("SBM_REPLENISH_OPTNAME") {
        Ok(v) => v
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| format!("SBM_REPLENISH_OPTNAME='{v}' is not an option number")),
        Err(_) => Ok(None),
    }
}

/// The option number a patched kernel announces, if this is one.
pub fn detect_optname() -> Option<u32> {
    sysinfo::sysctl_u64(OPTNAME_SYSCTL).and_then(|v| u32::try_from(v).ok())
}

/// setsockopt(IPPROTO_TCP, optname, µs) and read it back.
pub fn set_kernel_option(
    fd: BorrowedFd<'_>,
    optname: u32,
    time_us: u64,
) -> Result<OptionReport, GateError> {
    if optname <= HIGHEST_MAINLINE_TCP_OPTION {
        return Err(GateError::MainlineOptname(optname));
    }
    let v =
        i32::try_from(time_us).map_err(|_| GateError::Sys("replenish time too large".into()))?;
    sys::set_int(fd, libc::IPPROTO_TCP, optname as i32, v).map_err(|e| match e.errno() {
        Some(libc::ENOPROTOOPT) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
            GateError::Unsupported {
                optname,
                errno: e.source.to_string(),
            }
        }
        _ => GateError::Sys(e.to_string()),
    })?;
    let got = sys::get_int(fd, libc::IPPROTO_TCP, optname as i32)
        .map_err(|e| GateError::Sys(e.to_string()))?;
    if i64::from(got) != time_us as i64 {
        return Err(GateError::NoReadback {
            optname,
            asked: time_us,
            got: i64::from(got),
        });
    }
    Ok(OptionReport {
        name: "replenish_time_us".into(),
        requested: time_us.to_string(),
        effective: got.to_string(),
        warning: None,
    })
}

/// Whether the patched kernel's sub-MSS clause applies (its sysctl, and Nagle on); None
/// when the kernel does not say.
pub(super) fn kernel_sub_mss_clause(nodelay: bool) -> Option<bool> {
    sysinfo::sysctl_u64(SUBMSS_SYSCTL).map(|v| v != 0 && !nodelay)
}

/// `struct tcp_replenish_info` of kernel/patches (include/uapi/linux/tcp.h there): what
/// getsockopt(TCP_REPLENISH_INFO) returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelReplenishInfo {
    pub time_us: u32,
    pub notsent: u32,
    pub threshold: u32,
    pub mss: u32,
    /// bytes/s, 0 = no estimate.
    pub drain_rate: u64,
    /// 0 none, 1 delivery-rate sampler, 2 min(cwnd × mss, snd_wnd) / srtt; with
    /// kernel/patches' experiment-only estimator switch also 3 each ACK's raw sample,
    /// 4 the sampler counted in bytes, 5 bytes acked over the last sRTT.
    pub source: u8,
    pub writable: bool,
    pub sub_mss: bool,
}

impl KernelReplenishInfo {
    pub const SIZE: usize = 32;

    /// Parses the struct; None when the kernel returned fewer bytes (a plain int: a kernel
    /// whose option does not report its inputs).
    pub fn parse(b: &[u8]) -> Option<KernelReplenishInfo> {
        if b.len() < Self::SIZE {
            return None;
        }
        Some(KernelReplenishInfo {
            time_us: u32_at(b, 0)?,
            notsent: u32_at(b, 4)?,
            threshold: u32_at(b, 8)?,
            mss: u32_at(b, 12)?,
            drain_rate: u64_at(b, 16)?,
            source: b[24],
            writable: b[25] != 0,
            sub_mss: b[26] != 0,
        })
    }

    /// The kernel's rule in the terms of sbm's emulation, so both print alike. Reasons
    /// are checked in the kernel's order (tcp_replenish_eval()).
    pub fn decision(&self) -> Decision {
        let source = match self.source {
            1 => RateSource::Sample,
            2 => RateSource::CwndSrtt,
            3 => RateSource::RawSample,
            4 => RateSource::SampleBytes,
            5 => RateSource::Average,
            _ => RateSource::None,
        };
        let reason = if self.notsent == 0 {
            Reason::ZeroBacklog
        } else if self.sub_mss {
            Reason::SubMss
        } else if source == RateSource::None {
            Reason::NoEstimate
        } else if self.writable {
            Reason::BelowThreshold
        } else {
            Reason::Above
        };
        Decision {
            writable: self.writable,
            reason,
            threshold: (source != RateSource::None).then_some(u64::from(self.threshold)),
            rate: (self.drain_rate > 0).then_some(self.drain_rate as f64),
            source,
        }
    }
}

/// The option number of the patched kernel's TCP_REPLENISH_INFO (get only: the rule's
/// inputs): what the kernel announces, else the number after TCP_REPLENISH_TIME's, as
/// kernel/patches allocates them.
pub fn info_optname(time_optname: u32) -> u32 {
    sysinfo::sysctl_u64(INFO_OPTNAME_SYSCTL)
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(time_optname + 1)
}

/// Reads the kernel's view of its TCP_REPLENISH_TIME rule on `fd` through
/// TCP_REPLENISH_INFO (`info_optname`); None when the kernel has no such option.
pub fn kernel_replenish_info(
    fd: BorrowedFd<'_>,
    info_optname: u32,
) -> Result<Option<KernelReplenishInfo>, sys::SysError> {
    let mut buf = [0u8; KernelReplenishInfo::SIZE];
    match sys::get_bytes(fd, libc::IPPROTO_TCP, info_optname as i32, &mut buf) {
        Ok(n) => Ok(KernelReplenishInfo::parse(&buf[..n])),
        Err(e) if e.errno() == Some(libc::ENOPROTOOPT) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_bytes(notsent: u32, threshold: u32, rate: u64, source: u8, flags: [u8; 2]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [15_000u32, notsent, threshold, 1448] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(rate.to_ne_bytes());
        b.extend([source, flags[0], flags[1], 0, 0, 0, 0, 0]);
        b
    }

    #[test]
    fn kernel_info_becomes_a_decision_in_the_kernels_order() {
        let i = KernelReplenishInfo::parse(&info_bytes(3000, 3750, 250_000, 1, [1, 0])).unwrap();
        assert_eq!(i.mss, 1448);
        let d = i.decision();
        assert_eq!(
            (d.reason, d.threshold, d.rate, d.source),
            (
                Reason::BelowThreshold,
                Some(3750),
                Some(250_000.0),
                RateSource::Sample
            )
        );
        let d = KernelReplenishInfo::parse(&info_bytes(412, 100, 6000, 1, [1, 1]))
            .unwrap()
            .decision();
        assert_eq!(d.reason, Reason::SubMss);
        let d = KernelReplenishInfo::parse(&info_bytes(0, 100, 6000, 2, [1, 0]))
            .unwrap()
            .decision();
        assert_eq!(
            (d.reason, d.source),
            (Reason::ZeroBacklog, RateSource::CwndSrtt)
        );
        let d = KernelReplenishInfo::parse(&info_bytes(9000, 0, 0, 0, [1, 0]))
            .unwrap()
            .decision();
        assert_eq!((d.reason, d.threshold), (Reason::NoEstimate, None));
        let d = KernelReplenishInfo::parse(&info_bytes(9000, 3750, 250_000, 1, [0, 0]))
            .unwrap()
            .decision();
        assert_eq!((d.reason, d.writable), (Reason::Above, false));
        // A plain int answer: a kernel that does not report the rule's inputs.
        assert_eq!(KernelReplenishInfo::parse(&15_000i32.to_ne_bytes()), None);
    }

    #[test]
    fn mainline_option_numbers_are_refused() {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsFd::as_fd(&s);
        assert_eq!(
            set_kernel_option(fd, 46, 15_000),
            Err(GateError::MainlineOptname(46))
        );
        assert_eq!(
            set_kernel_option(fd, 13, 15_000),
            Err(GateError::MainlineOptname(13))
        );
    }

    #[test]
    fn an_unimplemented_option_is_a_clear_error() {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsFd::as_fd(&s);
        match set_kernel_option(fd, 200, 15_000) {
            Err(GateError::Unsupported { optname: 200, .. }) => {}
            other => panic!("stock kernel accepted option 200? {other:?}"),
        }
        let msg = set_kernel_option(fd, 200, 15_000).unwrap_err().to_string();
        assert!(
            msg.contains("does not implement TCP_REPLENISH_TIME as option 200"),
            "{msg}"
        );
    }
}
