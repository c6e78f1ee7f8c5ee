//! sbm — source buffer management measurement.
//!
//! Module map, in reading order:
//! - [`units`]: sizes, durations and rates as typed on the command line and printed.
//! - [`tcpinfo`]: `struct tcp_info` parsed by offset.
//! - [`tstamp`]: TX timestamp reports (cmsg parsing) and the write ledger that
//!   attributes them to writes.
//! - [`stats`]: latency histograms.
//! - [`sockopt`]: typed socket options, applied and read back.
//! - [`replenish`]: TCP_REPLENISH_TIME in one place — the rule as pure decisions, the gate
//!   that decides when sbm-send writes (kernel EPOLLOUT, or the emulation's state machine),
//!   and the patched kernel's option and its own view of the rule.
//! - [`report`]: output schemas and writers (CSV, JSON, human text).
//! - [`wire`]: the optional per-message header (trip times) and its parser.
//! - [`send`], [`sink`]: the two instruments' event loops and CLIs.
//! - [`sys`]: the only unsafe code: raw syscalls.
//! - [`delay`]: sbm-delay, the test bed's NFQUEUE delay line.
//! - [`testbed`]: sbm-testbed, the emulated WAN path and real-host shaping.
//! - [`matrix`]: sbm-matrix, test matrices on the emulated path and the report's table.
//! - [`addr`], [`cli`], [`ne`], [`signals`], [`sysinfo`]: small helpers.

pub mod addr;
pub mod cli;
pub mod delay;
pub mod matrix;
pub mod ne;
pub mod replenish;
pub mod report;
pub mod send;
pub mod signals;
pub mod sink;
pub mod sockopt;
pub mod stats;
pub mod sys;
pub mod sysinfo;
pub mod tcpinfo;
pub mod testbed;
pub mod tstamp;
pub mod units;
pub mod wire;
