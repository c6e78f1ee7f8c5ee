//! Typed socket options for sbm-send: applied, read back, and reported as
//! requested/effective pairs, with a warning wherever the kernel changed the value.

use std::os::fd::BorrowedFd;

use serde::Serialize;

use crate::sys::{self, SysError};
use crate::sysinfo;

// SO_TIMESTAMPING flags, include/uapi/linux/net_tstamp.h.
pub const SOF_TIMESTAMPING_TX_SOFTWARE: i32 = 1 << 1;
pub const SOF_TIMESTAMPING_SOFTWARE: i32 = 1 << 4;
pub const SOF_TIMESTAMPING_OPT_ID: i32 = 1 << 7;
pub const SOF_TIMESTAMPING_TX_SCHED: i32 = 1 << 8;
pub const SOF_TIMESTAMPING_TX_ACK: i32 = 1 << 9;
pub const SOF_TIMESTAMPING_OPT_TSONLY: i32 = 1 << 11;
pub const SOF_TIMESTAMPING_OPT_ID_TCP: i32 = 1 << 16;

/// The error-queue receive buffer sbm asks for by default: room for ~40 000 undrained
/// TSONLY reports (~832 B of truesize each, FACTS.md), after the kernel doubles it.
pub const DEFAULT_ERRQUEUE_RCVBUF: u32 = 16 << 20;

/// One option as asked for and as the kernel has it now.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct OptionReport {
    pub name: std::borrow::Cow<'static, str>,
    pub requested: String,
    pub effective: String,
    /// Set when the kernel clamped, changed or refused the request.
    pub warning: Option<String>,
}

/// A socket option that could not be applied at all, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SockoptError {
    #[error("congestion control '{name}' is not available ({source}); available: {available}")]
    CongestionControl {
        name: String,
        available: String,
        #[source]
        source: SysError,
    },
    #[error(transparent)]
    Sys(#[from] SysError),
}

/// Options set on the socket before connect().
#[derive(Debug, Clone, Default)]
pub struct SenderOptions {
    pub nodelay: bool,
    pub notsent_lowat: Option<u32>,
    /// The value handed to SO_SNDBUF (Linux doubles it).
    pub sndbuf: Option<u32>,
    pub congestion: Option<String>,
    /// SO_RCVBUF for the error queue; None = sbm's default.
    pub errqueue_rcvbuf: Option<u32>,
    /// Whether SO_TIMESTAMPING will be enabled (the error-queue buffer matters only then).
    pub timestamps: bool,
}

/// Applies every option and reads each back.
pub fn apply_sender_options(
    fd: BorrowedFd<'_>,
    opts: &SenderOptions,
) -> Result<Vec<OptionReport>, SockoptError> {
    let mut out = Vec::new();
    if let Some(cc) = &opts.congestion {
        sys::set_string(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc).map_err(|source| {
            SockoptError::CongestionControl {
                name: cc.clone(),
                available: sysinfo::sysctl("net/ipv4/tcp_available_congestion_control")
                    .unwrap_or_else(|| "unknown".into()),
                source,
            }
        })?;
    }
    let cc_now = sys::get_string(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION)?;
    out.push(OptionReport {
        name: "congestion".into(),
        requested: opts.congestion.clone().unwrap_or_else(|| "default".into()),
        warning: opts
            .congestion
            .as_ref()
            .filter(|cc| **cc != cc_now)
            .map(|cc| format!("asked for {cc}, kernel uses {cc_now}")),
        effective: cc_now,
    });

    if opts.nodelay {
        sys::set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    }
    let nodelay = sys::get_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY)? != 0;
    out.push(OptionReport {
        name: "nodelay".into(),
        requested: opts.nodelay.to_string(),
        effective: nodelay.to_string(),
        warning: (nodelay != opts.nodelay).then(|| "kernel did not keep TCP_NODELAY".into()),
    });

    out.push(apply_notsent_lowat(fd, opts.notsent_lowat)?);
    out.push(apply_buffer(fd, BufferKind::Send, opts.sndbuf)?);
    if opts.timestamps {
        let asked = opts.errqueue_rcvbuf.unwrap_or(DEFAULT_ERRQUEUE_RCVBUF);
        out.push(apply_buffer(fd, BufferKind::ErrqueueReceive, Some(asked))?);
    }
    Ok(out)
}

/// TCP_NOTSENT_LOWAT: None leaves the kernel default (the sysctl, normally "off").
pub fn apply_notsent_lowat(
    fd: BorrowedFd<'_>,
    lowat: Option<u32>,
) -> Result<OptionReport, SysError> {
    if let Some(v) = lowat {
        sys::set_int(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            v.min(i32::MAX as u32) as i32,
        )?;
    }
    let now = sys::get_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)? as u32;
    Ok(OptionReport {
        name: "notsent_lowat".into(),
        requested: lowat.map_or("default".into(), |v| v.to_string()),
        effective: now.to_string(),
        warning: lowat
            .filter(|&v| v != now)
            .map(|v| format!("asked for {v}, kernel has {now}")),
    })
}

#[derive(Clone, Copy)]
enum BufferKind {
    Send,
    ErrqueueReceive,
}

/// SO_SNDBUF / SO_RCVBUF. Linux stores twice the value given and caps it at
/// wmem_max/rmem_max unless the FORCE variant (CAP_NET_ADMIN) is used, which sbm does when
/// root and the value is above the cap. Anything other than twice the request is a warning.
fn apply_buffer(
    fd: BorrowedFd<'_>,
    kind: BufferKind,
    asked: Option<u32>,
) -> Result<OptionReport, SysError> {
    let (name, opt, force, cap_sysctl) = match kind {
        BufferKind::Send => (
            "sndbuf",
            libc::SO_SNDBUF,
            libc::SO_SNDBUFFORCE,
            "net/core/wmem_max",
        ),
        BufferKind::ErrqueueReceive => (
            "errqueue_rcvbuf",
            libc::SO_RCVBUF,
            libc::SO_RCVBUFFORCE,
            "net/core/rmem_max",
        ),
    };
    if let Some(v) = asked {
        let v = v.min(i32::MAX as u32 / 2);
        let cap = sysinfo::sysctl_u64(cap_sysctl).unwrap_or(u64::MAX);
        if u64::from(v) > cap && sysinfo::is_root() {
            sys::set_int(fd, libc::SOL_SOCKET, force, v as i32)?;
        } else {
            sys::set_int(fd, libc::SOL_SOCKET, opt, v as i32)?;
        }
    }
    let now = sys::get_int(fd, libc::SOL_SOCKET, opt)? as u32;
    let warning = asked.and_then(|v| {
        let expected = u64::from(v) * 2;
        (u64::from(now) != expected).then(|| {
            format!(
                "asked for {v} (kernel doubles to {expected}), kernel has {now}: clamped by {} or its minimum",
                cap_sysctl.replace('/', ".")
            )
        })
    });
    Ok(OptionReport {
        name: name.into(),
        requested: asked.map_or("default (autotuned)".into(), |v| v.to_string()),
        effective: now.to_string(),
        warning,
    })
}

/// How TX timestamping was enabled.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct TimestampingMode {
    pub flags: i32,
    /// False when the kernel refused OPT_ID_TCP and plain OPT_ID was used (same base
    /// before the first write).
    pub opt_id_tcp: bool,
}

/// Enables SCHED, SND and ACK reports keyed by byte offset, right after connect and
/// before the first write (FACTS.md), falling back to OPT_ID without OPT_ID_TCP.
pub fn enable_tx_timestamps(fd: BorrowedFd<'_>) -> Result<TimestampingMode, SysError> {
    let base = SOF_TIMESTAMPING_TX_SCHED
        | SOF_TIMESTAMPING_TX_SOFTWARE
        | SOF_TIMESTAMPING_TX_ACK
        | SOF_TIMESTAMPING_SOFTWARE
        | SOF_TIMESTAMPING_OPT_ID
        | SOF_TIMESTAMPING_OPT_TSONLY;
    let with_tcp = base | SOF_TIMESTAMPING_OPT_ID_TCP;
    match sys::set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, with_tcp) {
        Ok(()) => Ok(TimestampingMode {
            flags: with_tcp,
            opt_id_tcp: true,
        }),
        Err(e) if e.errno() == Some(libc::EINVAL) => {
            sys::set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, base)?;
            Ok(TimestampingMode {
                flags: base,
                opt_id_tcp: false,
            })
        }
        Err(e) => Err(e),
    }
}
