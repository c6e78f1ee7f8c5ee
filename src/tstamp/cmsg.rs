//! Turns the control-message bytes of one `recvmsg(MSG_ERRQUEUE)` into a TX report.
//!
//! Pure byte parsing, after the kernel's layouts (the same reading as the kernel's
//! tools/testing/selftests/net/txtimestamp.c): a walk over `struct cmsghdr`s, taking
//! `SCM_TIMESTAMPING` (three timespecs, ts[0] is the software CLOCK_REALTIME stamp) and
//! `IP_RECVERR`/`IPV6_RECVERR` (`struct sock_extended_err`, whose `ee_info` says which
//! stamp it is and `ee_data` holds the OPT_ID key). Both must be present for a report.

use super::TxKind;
use crate::ne;

/// `SO_EE_ORIGIN_TIMESTAMPING` from include/uapi/linux/errqueue.h.
pub const SO_EE_ORIGIN_TIMESTAMPING: u8 = 4;
/// `SCM_TIMESTAMPING_OPT_STATS` (not in every libc release).
pub const SCM_TIMESTAMPING_OPT_STATS: i32 = 54;
/// `SO_TIMESTAMPING_NEW` / `SCM_TIMESTAMPING_NEW` (64-bit time on 32-bit ABIs).
pub const SCM_TIMESTAMPING_NEW: i32 = 65;

/// Size of `struct cmsghdr` and the alignment of control messages on this ABI:
/// `{ size_t cmsg_len; int cmsg_level; int cmsg_type; }`, aligned to `size_t`.
const CMSG_ALIGN_TO: usize = std::mem::size_of::<usize>();
const CMSG_HDR_LEN: usize = std::mem::size_of::<usize>() + 8;
/// `struct timespec` on a 64-bit ABI: two i64.
const TIMESPEC_LEN: usize = 16;
/// `struct sock_extended_err`: u32 errno, u8 origin, type, code, pad, u32 info, u32 data.
const SOCK_EXTENDED_ERR_LEN: usize = 16;

fn cmsg_align(len: usize) -> usize {
    (len + CMSG_ALIGN_TO - 1) & !(CMSG_ALIGN_TO - 1)
}

/// One TX timestamp report as the kernel delivered it, before key unwrapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawReport {
    pub kind: TxKind,
    /// `ee_data`: with OPT_ID|OPT_ID_TCP the byte offset of the last byte of the write.
    pub key: u32,
    /// CLOCK_REALTIME nanoseconds.
    pub time_ns: u64,
}

/// What one error-queue message turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrqueueMessage {
    Report(RawReport),
    /// A timestamp report of a kind sbm does not know (`ee_info` other than SND/SCHED/ACK).
    UnknownKind(u32),
    /// Something else on the error queue: an ICMP error, or a message missing its parts.
    Other(String),
}

#[derive(Default)]
struct Parts {
    realtime_ns: Option<u64>,
    ext_err: Option<(u32, u8, u32, u32)>, // errno, origin, info, data
}

/// Parses the control buffer of one error-queue message (`msg_controllen` bytes).
pub fn parse_errqueue_control(control: &[u8]) -> ErrqueueMessage {
    let mut parts = Parts::default();
    let mut off = 0;
    while off + CMSG_HDR_LEN <= control.len() {
        // The loop's bound keeps every header read inside `control`.
        let len = ne::usize_at(control, off).unwrap_or(0);
        if len < CMSG_HDR_LEN || off + len > control.len() {
            return ErrqueueMessage::Other(format!(
                "malformed cmsg of length {len} at offset {off}"
            ));
        }
        let level = ne::u32_at(control, off + CMSG_ALIGN_TO).unwrap_or(0) as i32;
        let ty = ne::u32_at(control, off + CMSG_ALIGN_TO + 4).unwrap_or(0) as i32;
        let data = &control[off + cmsg_align(CMSG_HDR_LEN)..off + len];
        match (level, ty) {
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING)
            | (libc::SOL_SOCKET, SCM_TIMESTAMPING_NEW)
                if data.len() >= 3 * TIMESPEC_LEN =>
            {
                let sec = ne::i64_at(data, 0).unwrap_or(0);
                let nsec = ne::i64_at(data, 8).unwrap_or(0);
                if sec > 0 || nsec > 0 {
                    parts.realtime_ns = Some(sec as u64 * 1_000_000_000 + nsec as u64);
                }
            }
            (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
                if data.len() >= SOCK_EXTENDED_ERR_LEN =>
            {
                let at = |off| ne::u32_at(data, off).unwrap_or(0);
                parts.ext_err = Some((at(0), data[4], at(8), at(12)));
            }
            _ => {} // OPT_STATS and anything else: not used here
        }
        off += cmsg_align(len);
    }
    match parts.ext_err {
        Some((errno, origin, info, key))
            if errno == libc::ENOMSG as u32 && origin == SO_EE_ORIGIN_TIMESTAMPING =>
        {
            let kind = match TxKind::from_ee_info(info) {
                Some(k) => k,
                None => return ErrqueueMessage::UnknownKind(info),
            };
            match parts.realtime_ns {
                Some(time_ns) => ErrqueueMessage::Report(RawReport { kind, key, time_ns }),
                None => ErrqueueMessage::Other(format!(
                    "{kind:?} report for key {key} without a software timestamp"
                )),
            }
        }
        Some((errno, origin, _, _)) => {
            ErrqueueMessage::Other(format!("socket error errno={errno} origin={origin}"))
        }
        None => ErrqueueMessage::Other("error-queue message without sock_extended_err".into()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds one control message the way the kernel lays it out (`put_cmsg`): header,
    /// payload at CMSG_ALIGN(sizeof header), total padded to CMSG_ALIGN.
    pub(crate) fn cmsg(level: i32, ty: i32, payload: &[u8]) -> Vec<u8> {
        let hdr = 16; // size_t + int + int on x86_64
        let len = hdr + payload.len();
        let mut b = Vec::new();
        b.extend_from_slice(&(len as u64).to_ne_bytes());
        b.extend_from_slice(&level.to_ne_bytes());
        b.extend_from_slice(&ty.to_ne_bytes());
        b.extend_from_slice(payload);
        while b.len() % 8 != 0 {
            b.push(0);
        }
        b
    }

    pub(crate) fn scm_timestamping(sec: i64, nsec: i64) -> Vec<u8> {
        let mut p = Vec::new();
        for (s, n) in [(sec, nsec), (0, 0), (0, 0)] {
            p.extend_from_slice(&s.to_ne_bytes());
            p.extend_from_slice(&n.to_ne_bytes());
        }
        cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &p)
    }

    pub(crate) fn recverr(
        level: i32,
        ty: i32,
        errno: u32,
        origin: u8,
        info: u32,
        data: u32,
    ) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&errno.to_ne_bytes());
        p.push(origin);
        p.push(0); // ee_type
        p.push(0); // ee_code
        p.push(0); // ee_pad
        p.extend_from_slice(&info.to_ne_bytes());
        p.extend_from_slice(&data.to_ne_bytes());
        p.extend_from_slice(&[0u8; 16]); // offender sockaddr_in, as the kernel appends
        cmsg(level, ty, &p)
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn sched_report_ipv4() {
        let mut buf = scm_timestamping(1_700_000_000, 123_456_789);
        buf.extend(recverr(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::ENOMSG as u32,
            4,
            1,
            65_535,
        ));
        assert_eq!(
            parse_errqueue_control(&buf),
            ErrqueueMessage::Report(RawReport {
                kind: TxKind::Sched,
                key: 65_535,
                time_ns: 1_700_000_000_123_456_789
            })
        );
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn ack_and_snd_reports_ipv6_any_order() {
        let mut buf = recverr(
            libc::SOL_IPV6,
            libc::IPV6_RECVERR,
            libc::ENOMSG as u32,
            4,
            2,
            7,
        );
        buf.extend(scm_timestamping(5, 6));
        assert_eq!(
            parse_errqueue_control(&buf),
            ErrqueueMessage::Report(RawReport {
                kind: TxKind::Ack,
                key: 7,
                time_ns: 5_000_000_006
            })
        );
        let mut buf = scm_timestamping(1, 0);
        buf.extend(recverr(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::ENOMSG as u32,
            4,
            0,
            9,
        ));
        match parse_errqueue_control(&buf) {
            ErrqueueMessage::Report(r) => assert_eq!(r.kind, TxKind::Snd),
            other => panic!("{other:?}"),
        }
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn opt_stats_cmsg_is_skipped() {
        let mut buf = scm_timestamping(1, 0);
        buf.extend(cmsg(
            libc::SOL_SOCKET,
            SCM_TIMESTAMPING_OPT_STATS,
            &[1, 2, 3, 4, 5],
        ));
        buf.extend(recverr(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::ENOMSG as u32,
            4,
            1,
            3,
        ));
        assert!(matches!(
            parse_errqueue_control(&buf),
            ErrqueueMessage::Report(_)
        ));
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn non_timestamp_errors_and_garbage() {
        // An ICMP error (origin 2) is not a report.
        let mut buf = recverr(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::EHOSTUNREACH as u32,
            2,
            0,
            0,
        );
        buf.extend(scm_timestamping(1, 0));
        assert!(matches!(
            parse_errqueue_control(&buf),
            ErrqueueMessage::Other(_)
        ));
        // A timestamping error without a timestamp cmsg.
        let buf = recverr(libc::SOL_IP, libc::IP_RECVERR, libc::ENOMSG as u32, 4, 1, 3);
        assert!(matches!(
            parse_errqueue_control(&buf),
            ErrqueueMessage::Other(_)
        ));
        // Unknown ee_info.
        let mut buf = scm_timestamping(1, 0);
        buf.extend(recverr(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::ENOMSG as u32,
            4,
            9,
            3,
        ));
        assert_eq!(
            parse_errqueue_control(&buf),
            ErrqueueMessage::UnknownKind(9)
        );
        // A cmsg_len running past the buffer.
        let mut buf = scm_timestamping(1, 0);
        buf[0..8].copy_from_slice(&4096u64.to_ne_bytes());
        assert!(matches!(
            parse_errqueue_control(&buf),
            ErrqueueMessage::Other(_)
        ));
        // Empty and truncated buffers.
        assert!(matches!(
            parse_errqueue_control(&[]),
            ErrqueueMessage::Other(_)
        ));
        assert!(matches!(
            parse_errqueue_control(&[1, 2, 3]),
            ErrqueueMessage::Other(_)
        ));
    }
}
