//! SIGINT/SIGTERM as an epoll-able file descriptor, so that the event loops end
//! gracefully (flushing files, writing the summary) instead of dying mid-write.

use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

pub struct StopSignals {
    fd: SignalFd,
}

impl StopSignals {
    /// Blocks SIGINT and SIGTERM for this thread and opens a signalfd for them.
    pub fn install() -> nix::Result<StopSignals> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGINT);
        set.add(Signal::SIGTERM);
        set.thread_block()?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(StopSignals { fd })
    }

    /// The pending signal, if one arrived.
    pub fn take(&self) -> Option<Signal> {
        match self.fd.read_signal() {
            Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
            _ => None,
        }
    }
}

impl AsFd for StopSignals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The conventional exit status of a process ended by `sig` (128 + signal number).
pub fn exit_status_for(sig: Signal) -> i32 {
    128 + sig as i32
}
