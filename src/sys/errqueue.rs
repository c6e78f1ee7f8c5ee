//! `recvmsg(MSG_ERRQUEUE)`: one error-queue message per call, control bytes only.

use std::os::fd::{AsRawFd, BorrowedFd};

use super::SysError;

/// What one error-queue read gave.
#[derive(Debug, PartialEq, Eq)]
pub enum ErrqueueRecv {
    /// A message whose control data fills `control[..len]`; `truncated` if the kernel had
    /// more control data than fitted (MSG_CTRUNC).
    Message { len: usize, truncated: bool },
    /// The queue is empty (EAGAIN).
    Empty,
}

/// Reads one message from the socket's error queue without blocking. The payload is not
/// read (OPT_TSONLY reports carry none); `control` receives the cmsgs.
pub fn recv_errqueue(fd: BorrowedFd<'_>, control: &mut [u8]) -> Result<ErrqueueRecv, SysError> {
    let mut data = [0u8; 64];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is a valid "no name, no iov, no control" value
    // that is filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: every pointer in `msg` refers to a live local buffer (`data` via `iov`,
    // `control`) whose length is given beside it; the kernel writes only within them.
    let rc = unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    if rc < 0 {
        // The common end of every drain: check it without building an error (no allocation
        // on the hot path).
        let source = std::io::Error::last_os_error();
        if source.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(ErrqueueRecv::Empty);
        }
        return Err(SysError {
            call: "recvmsg",
            what: "MSG_ERRQUEUE".into(),
            source,
        });
    }
    Ok(ErrqueueRecv::Message {
        len: (msg.msg_controllen as usize).min(control.len()),
        truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}
