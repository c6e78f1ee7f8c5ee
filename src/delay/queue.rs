//! A netlink socket bound to NFQUEUE numbers: configuration with acknowledgements,
//! nonblocking reads of packet messages, verdicts. Safe nix calls only.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::socket::{
    bind, recv, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr,
    SockFlag, SockProtocol, SockType,
};

use super::nfnl::{self, Incoming};

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("{call} on the nfnetlink_queue socket failed: {errno}{hint}")]
    Sys {
        call: &'static str,
        errno: Errno,
        hint: &'static str,
    },
    #[error("the kernel refused {what} for queue {queue}: {errno}{hint}")]
    Refused {
        what: &'static str,
        queue: u16,
        errno: Errno,
        hint: &'static str,
    },
    #[error("no acknowledgement from the kernel for {what} on queue {queue}")]
    NoAck { what: &'static str, queue: u16 },
    #[error("{0}")]
    Malformed(#[from] nfnl::Malformed),
}

fn hint(errno: Errno) -> &'static str {
    match errno {
        Errno::EPERM => " (needs root / CAP_NET_ADMIN)",
        Errno::EBUSY => " (another program is bound to this queue number)",
        Errno::EPROTONOSUPPORT | Errno::ENOENT => {
            " (is nfnetlink_queue available? modprobe nfnetlink_queue)"
        }
        _ => "",
    }
}

fn sys(call: &'static str) -> impl Fn(Errno) -> QueueError {
    move |errno| QueueError::Sys {
        call,
        errno,
        hint: hint(errno),
    }
}

pub struct NfQueue {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

/// What one nonblocking read gave.
pub enum Read {
    Messages,
    Empty,
    /// ENOBUFS: the socket buffer overflowed and the kernel dropped packets.
    Overrun,
}

impl NfQueue {
    /// Opens the socket with a forced receive buffer of `rcvbuf` bytes (falls back to the
    /// unforced size limit when that is refused).
    pub fn open(rcvbuf: usize) -> Result<NfQueue, QueueError> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkNetFilter,
        )
        .map_err(sys("socket(AF_NETLINK, NETLINK_NETFILTER)"))?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(sys("bind"))?;
        if setsockopt(&fd, sockopt::RcvBufForce, &rcvbuf).is_err() {
            setsockopt(&fd, sockopt::RcvBuf, &rcvbuf).map_err(sys("setsockopt(SO_RCVBUF)"))?;
        }
        Ok(NfQueue {
            fd,
            seq: 1,
            buf: vec![0; 1 << 18],
        })
    }

    fn send(&self, msg: &[u8]) -> Result<(), QueueError> {
        sendto(
            self.fd.as_raw_fd(),
            msg,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map(drop)
        .map_err(sys("sendto"))
    }

    /// Sends a request and waits for its acknowledgement. Packet messages that arrive
    /// meanwhile go to `on_packet`.
    fn request(
        &mut self,
        what: &'static str,
        queue: u16,
        build: impl Fn(u32) -> Vec<u8>,
        on_packet: &mut dyn FnMut(Incoming),
    ) -> Result<(), QueueError> {
        let seq = self.seq;
        self.seq += 1;
        self.send(&build(seq))?;
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let mut result = None;
            match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => nfnl::parse(&self.buf[..n], |m| match m {
                    Incoming::Ack { seq: s, errno } if s == seq => result = Some(errno),
                    Incoming::Packet { .. } => on_packet(m),
                    _ => {}
                })?,
                Err(Errno::EAGAIN) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(QueueError::NoAck { what, queue });
                    }
                    let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
                    let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
                    poll(&mut fds, ms).map_err(sys("poll"))?;
                }
                Err(Errno::ENOBUFS) => {}
                Err(e) => return Err(sys("recv")(e)),
            }
            match result {
                Some(0) => return Ok(()),
                Some(errno) => {
                    let errno = Errno::from_raw(errno);
                    return Err(QueueError::Refused {
                        what,
                        queue,
                        errno,
                        hint: hint(errno),
                    });
                }
                None => {}
            }
        }
    }

    /// Binds `queue` and configures it: metadata-only copies, `max_len`, GSO pass-through.
    pub fn bind_queue(&mut self, queue: u16, max_len: u32) -> Result<(), QueueError> {
        let mut early = |_m: Incoming| {};
        self.request("bind", queue, |s| nfnl::bind_queue(s, queue), &mut early)?;
        self.request(
            "configuration",
            queue,
            |s| nfnl::configure_queue(s, queue, max_len),
            &mut early,
        )
    }

    /// Reads one datagram without blocking and hands each packet message to `each`.
    pub fn read(&mut self, each: &mut dyn FnMut(Incoming)) -> Result<Read, QueueError> {
        match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::MSG_DONTWAIT) {
            Ok(n) => {
                nfnl::parse(&self.buf[..n], &mut *each)?;
                Ok(Read::Messages)
            }
            Err(Errno::EAGAIN) => Ok(Read::Empty),
            Err(Errno::ENOBUFS) => Ok(Read::Overrun),
            Err(Errno::EINTR) => Ok(Read::Messages),
            Err(e) => Err(sys("recv")(e)),
        }
    }

    /// Accepts every packet of `queue` with id ≤ `max_id`.
    pub fn accept_through(&mut self, queue: u16, max_id: u32) -> Result<(), QueueError> {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.send(&nfnl::verdict(seq, queue, max_id, nfnl::NF_ACCEPT, true))
    }
}

impl AsFd for NfQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
