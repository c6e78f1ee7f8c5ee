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

/// What ends a run early. One flow reads the process's SIGINT/SIGTERM itself. Several
/// flows in one process cannot: a process-directed signal is read from a signalfd once, by
/// whichever flow looks first, and the others would run on. So there the thread that owns
/// the signals relays each one to every flow through its own eventfd ([`StopBroadcast`]).
pub enum StopSource {
    Signals(StopSignals),
    Relay(std::sync::Arc<nix::sys::eventfd::EventFd>),
}

impl StopSource {
    /// The signal that asks the run to stop, if one arrived.
    pub fn take(&self) -> Option<Signal> {
        match self {
            StopSource::Signals(s) => s.take(),
            StopSource::Relay(fd) => fd.read().ok().and_then(|n| Signal::try_from(n as i32).ok()),
        }
    }
}

impl AsFd for StopSource {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            StopSource::Signals(s) => s.as_fd(),
            StopSource::Relay(fd) => fd.as_fd(),
        }
    }
}

/// The signal owner's side of [`StopSource::Relay`]: one eventfd per flow.
#[derive(Default)]
pub struct StopBroadcast {
    relays: Vec<std::sync::Arc<nix::sys::eventfd::EventFd>>,
}

impl StopBroadcast {
    /// A new flow's stop source.
    pub fn relay(&mut self) -> nix::Result<StopSource> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let fd = std::sync::Arc::new(EventFd::from_value_and_flags(
            0,
            EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
        )?);
        self.relays.push(fd.clone());
        Ok(StopSource::Relay(fd))
    }

    /// Tells every flow that `sig` arrived.
    pub fn send(&self, sig: Signal) {
        for fd in &self.relays {
            let _ = fd.write(sig as i32 as u64);
        }
    }
}

/// The conventional exit status of a process ended by `sig` (128 + signal number).
pub fn exit_status_for(sig: Signal) -> i32 {
    128 + sig as i32
}
