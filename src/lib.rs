//! sbm — source buffer management measurement.
//!
//! Module map, in reading order:
//! - [`units`]: sizes, durations and rates as typed on the command line and printed.
//! - [`tcpinfo`]: `struct tcp_info` parsed by offset.
//! - [`tstamp`]: TX timestamp reports (cmsg parsing) and the write ledger that
//!   attributes them to writes; the snd_nxt sampler; the exact departures' ledger
//!   (per-packet departures matched to writes, for sbm-trace and `--exact-departures`).
//! - [`stats`]: latency histograms.
//! - [`sockopt`]: typed socket options, applied and read back.
//! - [`replenish`]: TCP_REPLENISH_TIME in one place — the rule as pure decisions, the gate
//!   that decides when sbm-send writes (kernel EPOLLOUT, or the emulation's state machine),
//!   and the patched kernel's option and its own view of the rule.
//! - [`report`]: the outputs — `report::schema` owns every row and summary.json (written
//!   and read back through the same types, with a schema version), beside the CSV, JSON and
//!   human-text writers.
//! - [`wire`]: the optional per-message header (trip times) and its parser.
//! - [`send`]: sbm-send — its CLI and config, and the loop split by job in `send::run`:
//!   `run/mod.rs` (set-up, events, intervals), `run/write_path.rs` (the write path and the
//!   readiness gate's actions), `run/timing.rs` (TX reports, the snd_nxt sampler, each
//!   write's final row), `run/summary.rs` (the end of a run), `run/source_path.rs` (an
//!   application-limited source's side of the loop); `send::trip` the trip-time framing and
//!   the comparison with the sink; `send::source` the sources (paced, frames, render on
//!   invitation) as pure clocks and queues, `send::content_age` each frame's life to the
//!   sink.
//! - [`sink`]: sbm-sink, the discard receiver (bounded connections, idle timeout, back-off).
//! - [`bpf`]: the BPF programs of `bpf/` loaded and attached (libbpf-rs): a fresh cgroup
//!   v2 directory, TCP_REPLENISH_TIME as a sock_ops program, the tracer's events, and
//!   sbm-send's exact departures from them.
//! - [`trace`]: sbm-trace, per-write timing of unmodified programs' connections.
//! - [`sys`]: the only unsafe code: raw syscalls.
//! - [`delay`]: sbm-delay, the test bed's NFQUEUE delay line.
//! - [`testbed`]: sbm-testbed, the emulated WAN path and real-host shaping.
//! - [`remote`]: other machines over OpenSSH (one master connection per host) and sbm's
//!   binaries put there.
//! - [`matrix`]: sbm-matrix — `matrix::spec` the matrix file and its cells (the model),
//!   `matrix::run` running them (typed `MatrixError`), `matrix::report` summary.csv,
//!   table.md and plots as functions of the cells' stored results, `matrix::svg` the plots,
//!   `matrix::schedule` bottleneck changes during a cell, `matrix::hosts` the cells on real
//!   hosts over ssh (pairs, shaping held per cell, outputs brought back), `matrix::recovery` the content
//!   age's return to its floor after them, `matrix::command` the command cells (an
//!   unmodified server under sbm-trace and its client).
//! - [`embedded`]: the presets and kernel inputs built into the binaries (build.rs), for
//!   installs without the source tree; [`docs`]: man pages and shell completions.
//! - [`addr`], [`cli`], [`clock`] (also BPF's monotonic clock to realtime), [`ne`], [`signals`], [`sysinfo`]: small helpers.

pub mod addr;
pub mod bpf;
pub mod cli;
pub mod clock;
pub mod delay;
pub mod docs;
pub mod embedded;
pub mod matrix;
pub mod ne;
pub mod remote;
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
pub mod trace;
pub mod tstamp;
pub mod units;
pub mod wire;
