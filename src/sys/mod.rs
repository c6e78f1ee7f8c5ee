//! The only place with `unsafe`: thin wrappers over the syscalls that the safe crates do
//! not cover (raw socket options by number, `TCP_INFO` by length, the error queue,
//! `SIOCOUTQNSD`, a thread's real-time policy). Each wrapper returns a [`SysError`] naming the call and what it was
//! asked to do; parsing of what comes back lives in safe modules.
#![allow(unsafe_code)]

mod alloc;
mod errqueue;
mod sched;
mod sockopt;

pub use alloc::CountingAlloc;

pub use errqueue::{recv_errqueue, ErrqueueRecv};
pub use sched::set_fifo;
pub use sockopt::{
    bbr_info, get_bytes, get_int, get_string, outq_notsent, set_int, set_string, tcp_info,
};

use std::io;

/// A failed syscall: which call, on what, and the OS error.
#[derive(Debug, thiserror::Error)]
#[error("{call}({what}) failed: {source}")]
pub struct SysError {
    pub call: &'static str,
    pub what: String,
    #[source]
    pub source: io::Error,
}

impl SysError {
    pub(crate) fn last(call: &'static str, what: impl Into<String>) -> Self {
        SysError {
            call,
            what: what.into(),
            source: io::Error::last_os_error(),
        }
    }

    /// The errno behind the failure.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}
