//! `testbed/wan queue-trace`: the bottleneck queue of a bed over time, as the kernel counts
//! it (the backlog, packets, drops and bytes sent that `tc -s qdisc` prints), read every
//! interval over rtnetlink (an RTM_GETQDISC dump) rather than by running tc, which would
//! cost a fork per sample. Each row carries CLOCK_REALTIME, the clock of sbm's other
//! outputs, so that a queue sample can be put beside a write, a probe or a packet.
//!
//! The wire format (include/uapi/linux/rtnetlink.h, pkt_sched.h, gen_stats.h) is pure byte
//! work, unit-tested against hand-laid messages; the socket calls are safe nix calls.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
    SockType,
};
use serde::Serialize;

use super::wan::{self, BottleneckKind};
use crate::ne::{align4, u16_at, u32_at, u64_at};

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
/// NLM_F_ROOT | NLM_F_MATCH.
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDRLEN: usize = 16;
/// struct tcmsg: family, two pads, ifindex, handle, parent, info.
const TCMSG_LEN: usize = 20;
const TCA_KIND: u16 = 1;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
/// The attribute type without NLA_F_NESTED and NLA_F_NET_BYTEORDER.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// The handle of the bottleneck's queue: the leaf under HTB's class 1:1 (`10:`), a bfifo,
/// or netem where the delay rides in the shaper (testbed::plan, wan::apply_shaper).
pub const LEAF_HANDLE: u32 = 0x0010_0000;

/// One qdisc's counters, as an RTM_NEWQDISC message carries them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QdiscStats {
    pub ifindex: i32,
    pub handle: u32,
    pub parent: u32,
    pub kind: String,
    pub bytes: u64,
    pub packets: u32,
    pub qlen: u32,
    pub backlog: u32,
    pub drops: u32,
    pub overlimits: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed rtnetlink message: {0}")]
pub struct Malformed(&'static str);

/// What a dump reply holds so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Part {
    /// More messages follow.
    More,
    /// NLMSG_DONE: the dump is complete.
    Done,
    /// NLMSG_ERROR with this (positive) errno.
    Error(i32),
}

/// An RTM_GETQDISC dump request for every qdisc of the namespace.
pub fn dump_request(seq: u32) -> Vec<u8> {
    let len = NLMSG_HDRLEN + TCMSG_LEN;
    let mut buf = Vec::with_capacity(len);
    buf.extend_from_slice(&(len as u32).to_ne_bytes());
    buf.extend_from_slice(&RTM_GETQDISC.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel
    buf.push(libc::AF_UNSPEC as u8); // tcm_family
    buf.extend_from_slice(&[0; TCMSG_LEN - 1]); // pads, ifindex 0 (all), handle, parent, info
    buf
}

/// Each attribute (type without flags, payload) in `b`.
fn attrs(mut b: &[u8], mut each: impl FnMut(u16, &[u8])) -> Result<(), Malformed> {
    while b.len() >= 4 {
        let len = usize::from(u16_at(b, 0).ok_or(Malformed("attribute header"))?);
        let kind = u16_at(b, 2).ok_or(Malformed("attribute header"))? & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return Err(Malformed("attribute length"));
        }
        each(kind, &b[4..len]);
        b = &b[align4(len).min(b.len())..];
    }
    Ok(())
}

/// One RTM_NEWQDISC message's payload (after the netlink header).
fn parse_qdisc(p: &[u8]) -> Result<QdiscStats, Malformed> {
    if p.len() < TCMSG_LEN {
        return Err(Malformed("short tcmsg"));
    }
    let field = |off| u32_at(p, off).ok_or(Malformed("short tcmsg"));
    let mut q = QdiscStats {
        ifindex: field(4)? as i32,
        handle: field(8)?,
        parent: field(12)?,
        ..QdiscStats::default()
    };
    let mut inner = Ok(());
    attrs(&p[TCMSG_LEN..], |kind, v| match kind {
        TCA_KIND => {
            let name = v.split(|&c| c == 0).next().unwrap_or_default();
            q.kind = String::from_utf8_lossy(name).into_owned();
        }
        TCA_STATS2 => {
            inner = attrs(v, |kind, s| match kind {
                TCA_STATS_BASIC => {
                    q.bytes = u64_at(s, 0).unwrap_or(0);
                    q.packets = u32_at(s, 8).unwrap_or(0);
                }
                TCA_STATS_QUEUE => {
                    q.qlen = u32_at(s, 0).unwrap_or(0);
                    q.backlog = u32_at(s, 4).unwrap_or(0);
                    q.drops = u32_at(s, 8).unwrap_or(0);
                    q.overlimits = u32_at(s, 16).unwrap_or(0);
                }
                _ => {}
            });
        }
        _ => {}
    })?;
    inner?;
    Ok(q)
}

/// The messages of one read of a dump reply to request `seq`: qdiscs go to `out`.
pub fn parse_reply(mut b: &[u8], seq: u32, out: &mut Vec<QdiscStats>) -> Result<Part, Malformed> {
    let mut part = Part::More;
    while b.len() >= NLMSG_HDRLEN {
        let len = u32_at(b, 0).ok_or(Malformed("header"))? as usize;
        let kind = u16_at(b, 4).ok_or(Malformed("header"))?;
        let msg_seq = u32_at(b, 8).ok_or(Malformed("header"))?;
        if len < NLMSG_HDRLEN || len > b.len() {
            return Err(Malformed("message length"));
        }
        let payload = &b[NLMSG_HDRLEN..len];
        if msg_seq == seq {
            match kind {
                RTM_NEWQDISC => out.push(parse_qdisc(payload)?),
                NLMSG_DONE => part = Part::Done,
                NLMSG_ERROR => {
                    let errno = u32_at(payload, 0).ok_or(Malformed("error message"))? as i32;
                    part = Part::Error(-errno);
                }
                _ => {}
            }
        }
        b = &b[align4(len).min(b.len())..];
    }
    Ok(part)
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{call} failed: {errno}")]
    Sys { call: &'static str, errno: Errno },
    #[error("the kernel refused the qdisc dump: {0}")]
    Refused(Errno),
    #[error("no complete qdisc dump from the kernel within 1 s")]
    NoReply,
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("{0}")]
    Bed(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn sys(call: &'static str) -> impl Fn(Errno) -> TraceError {
    move |errno| TraceError::Sys { call, errno }
}

/// An rtnetlink socket in the calling thread's network namespace.
pub struct QdiscReader {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl QdiscReader {
    pub fn open() -> Result<QdiscReader, TraceError> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )
        .map_err(sys("socket(AF_NETLINK, NETLINK_ROUTE)"))?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(sys("bind(AF_NETLINK)"))?;
        Ok(QdiscReader {
            fd,
            seq: 1,
            buf: vec![0; 1 << 16],
        })
    }

    /// Every qdisc of the namespace, as one dump.
    pub fn dump(&mut self) -> Result<Vec<QdiscStats>, TraceError> {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        sendto(
            self.fd.as_raw_fd(),
            &dump_request(seq),
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(sys("sendto(RTM_GETQDISC)"))?;
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut out = Vec::new();
        while Instant::now() < deadline {
            // Blocking: the kernel answers a dump at once.
            let n = recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::empty())
                .map_err(sys("recv(rtnetlink)"))?;
            match parse_reply(&self.buf[..n], seq, &mut out)? {
                Part::More => {}
                Part::Done => return Ok(out),
                Part::Error(e) => return Err(TraceError::Refused(Errno::from_raw(e))),
            }
        }
        Err(TraceError::NoReply)
    }
}

/// One row of the trace's CSV.
#[derive(Debug, Clone, Serialize)]
pub struct QueueRow {
    /// CLOCK_REALTIME when the dump was asked for, ns (sbm's `*_ns` clock).
    pub realtime_ns: u64,
    /// Bytes and packets waiting in the bottleneck's queue.
    pub backlog_bytes: u32,
    pub qlen: u32,
    /// Cumulative since the queue was made: dropped packets, bytes and packets sent.
    pub drops: u32,
    pub sent_bytes: u64,
    pub sent_packets: u32,
    /// backlog × 8 / the bed's rate: how long the backlog takes to drain at the bottleneck
    /// (computed by sbm from the kernel's backlog, not read from the kernel).
    pub backlog_over_rate_ms: f64,
}

/// What a trace is asked for.
#[derive(Debug, Clone)]
pub struct TraceSpec {
    pub prefix: String,
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub out: PathBuf,
}

/// What a finished trace saw.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSummary {
    pub samples: u64,
    pub peak_backlog_bytes: u32,
    pub peak_over_rate_ms: f64,
    pub drops: u32,
    /// Dumps that found no bottleneck queue (it was being replaced by `wan set`).
    pub missing: u64,
}

/// Where the bed's bottleneck queue is, and its rate; an error for a bed without one.
fn bottleneck_of(prefix: &str) -> Result<(String, &'static str, u64), TraceError> {
    wan::validate_prefix(prefix).map_err(|e| TraceError::Bed(e.to_string()))?;
    let state = wan::load_state(prefix)
        .ok_or_else(|| TraceError::Bed(wan::TestbedError::NotUp(prefix.into()).to_string()))?;
    if state.bottleneck == BottleneckKind::Policer {
        return Err(TraceError::Bed(format!(
            "bed '{prefix}' has a policer: excess is dropped, nothing queues (testbed/wan set --bottleneck shaper)"
        )));
    }
    let rate = state.rate_bps.ok_or_else(|| {
        TraceError::Bed(format!(
            "bed '{prefix}' has no bottleneck (--rate off): there is no queue to trace"
        ))
    })?;
    let (ns, dev) = wan::shape_device(prefix, state.shape_at);
    Ok((ns, dev, rate))
}

/// Moves this thread into network namespace `ns` (wan::enter_netns), its errors as the
/// trace's own.
fn enter_netns(ns: &str) -> Result<(), TraceError> {
    wan::enter_netns(ns).map_err(|e| match e {
        wan::NetnsError::Open { path, source } => TraceError::Io { path, source },
        wan::NetnsError::Setns(errno) => sys("setns(CLONE_NEWNET)")(errno),
    })
}

/// Samples the bed's bottleneck queue every `interval` into `spec.out` until `stop()` says
/// so or `duration` has passed. Rows are flushed every second and at the end.
pub fn trace(
    spec: &TraceSpec,
    stop: &mut dyn FnMut() -> bool,
    say: &mut dyn FnMut(&str),
) -> Result<TraceSummary, TraceError> {
    let (ns, dev, rate_bps) = bottleneck_of(&spec.prefix)?;
    let io = |source| TraceError::Io {
        path: spec.out.clone(),
        source,
    };
    let mut writer = csv::Writer::from_path(&spec.out).map_err(|e| io(e.into()))?;
    enter_netns(&ns)?;
    let ifindex = nix::net::if_::if_nametoindex(dev).map_err(sys("if_nametoindex"))? as i32;
    let mut reader = QdiscReader::open()?;
    let leaf = |all: Vec<QdiscStats>| {
        all.into_iter()
            .find(|q| q.ifindex == ifindex && q.handle == LEAF_HANDLE)
    };
    let first = leaf(reader.dump()?).ok_or_else(|| {
        TraceError::Bed(format!("no bottleneck queue (handle 10:) on {dev} in {ns}"))
    })?;
    say(&format!(
        "sampling the bottleneck queue ({} 10: on {dev} in {ns}, {} bit/s) every {} ms into {}; SIGINT or SIGTERM ends it",
        first.kind,
        rate_bps,
        spec.interval.as_secs_f64() * 1e3,
        spec.out.display()
    ));
    let started = Instant::now();
    let mut summary = TraceSummary {
        samples: 0,
        peak_backlog_bytes: 0,
        peak_over_rate_ms: 0.0,
        drops: 0,
        missing: 0,
    };
    let mut next = started;
    let mut last_flush = started;
    while !stop() && spec.duration.is_none_or(|d| started.elapsed() < d) {
        let realtime_ns = crate::clock::realtime_ns();
        match leaf(reader.dump()?) {
            Some(q) => {
                let row = QueueRow {
                    realtime_ns,
                    backlog_bytes: q.backlog,
                    qlen: q.qlen,
                    drops: q.drops,
                    sent_bytes: q.bytes,
                    sent_packets: q.packets,
                    backlog_over_rate_ms: f64::from(q.backlog) * 8e3 / rate_bps as f64,
                };
                summary.samples += 1;
                if q.backlog >= summary.peak_backlog_bytes {
                    summary.peak_backlog_bytes = q.backlog;
                    summary.peak_over_rate_ms = row.backlog_over_rate_ms;
                }
                summary.drops = q.drops;
                writer.serialize(&row).map_err(|e| io(e.into()))?;
            }
            None => summary.missing += 1,
        }
        if last_flush.elapsed() >= Duration::from_secs(1) {
            writer.flush().map_err(io)?;
            last_flush = Instant::now();
        }
        // Fixed deadlines, so that the rows keep their spacing; a late sample is not
        // followed by a burst of catching up.
        next += spec.interval;
        let now = Instant::now();
        if next <= now {
            next = now;
        } else {
            std::thread::sleep(next - now);
        }
    }
    writer.flush().map_err(io)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(payload);
        b.resize(align4(b.len()), 0);
        b
    }

    fn message(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(payload);
        b
    }

    /// An RTM_NEWQDISC as the kernel lays out a bfifo under HTB: tcmsg, TCA_KIND,
    /// TCA_STATS2 (nested flag set) with basic and queue counters, and the old TCA_STATS.
    fn bfifo(ifindex: i32, handle: u32, backlog: u32) -> Vec<u8> {
        let mut p = vec![0u8; 4];
        p.extend_from_slice(&ifindex.to_ne_bytes());
        p.extend_from_slice(&handle.to_ne_bytes());
        p.extend_from_slice(&0x0001_0001u32.to_ne_bytes());
        p.extend_from_slice(&0u32.to_ne_bytes());
        p.extend(attr(TCA_KIND, b"bfifo\0"));
        let mut basic = 123_456_789_012u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&4321u32.to_ne_bytes());
        basic.extend_from_slice(&[0; 4]);
        let mut queue = Vec::new();
        for v in [7u32, backlog, 9, 0, 11] {
            queue.extend_from_slice(&v.to_ne_bytes());
        }
        let mut nested = attr(TCA_STATS_BASIC, &basic);
        nested.extend(attr(TCA_STATS_QUEUE, &queue));
        p.extend(attr(TCA_STATS2 | 0x8000, &nested));
        p.extend(attr(3, &[0; 36])); // TCA_STATS, ignored
        p
    }

    #[test]
    fn a_request_asks_for_a_dump_of_every_qdisc() {
        let r = dump_request(42);
        assert_eq!(r.len(), 36);
        assert_eq!(u32_at(&r, 0), Some(36));
        assert_eq!(u16_at(&r, 4), Some(RTM_GETQDISC));
        assert_eq!(u16_at(&r, 6), Some(0x301));
        assert_eq!(u32_at(&r, 8), Some(42));
        assert!(r[16..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_reply_gives_each_qdisc_and_ends_at_done() {
        let mut b = message(RTM_NEWQDISC, 5, &bfifo(3, LEAF_HANDLE, 30_280));
        b.extend(message(RTM_NEWQDISC, 5, &bfifo(4, 0x0001_0000, 1)));
        b.extend(message(RTM_NEWQDISC, 4, &bfifo(9, 9, 9))); // another request's
        let mut out = Vec::new();
        assert_eq!(parse_reply(&b, 5, &mut out), Ok(Part::More));
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            QdiscStats {
                ifindex: 3,
                handle: LEAF_HANDLE,
                parent: 0x0001_0001,
                kind: "bfifo".into(),
                bytes: 123_456_789_012,
                packets: 4321,
                qlen: 7,
                backlog: 30_280,
                drops: 9,
                overlimits: 11,
            }
        );
        assert_eq!(
            parse_reply(&message(NLMSG_DONE, 5, &[0; 4]), 5, &mut out),
            Ok(Part::Done)
        );
        let err = message(NLMSG_ERROR, 5, &(-1i32).to_ne_bytes());
        assert_eq!(parse_reply(&err, 5, &mut out), Ok(Part::Error(1)));
    }

    #[test]
    fn truncated_messages_are_malformed_not_a_panic() {
        let b = message(RTM_NEWQDISC, 5, &bfifo(3, LEAF_HANDLE, 1));
        let mut out = Vec::new();
        let mut cut = b.clone();
        cut[0] = 200; // longer than the bytes
        assert!(parse_reply(&cut, 5, &mut out).is_err());
        let mut bad_attr = b.clone();
        bad_attr[NLMSG_HDRLEN + TCMSG_LEN] = 2; // an attribute shorter than its header
        assert!(parse_reply(&bad_attr, 5, &mut out).is_err());
        assert!(parse_reply(&b[..NLMSG_HDRLEN + 8], 5, &mut out).is_err());
        let short = message(RTM_NEWQDISC, 5, &[0; 12]);
        assert!(parse_reply(&short, 5, &mut out).is_err());
    }
}
