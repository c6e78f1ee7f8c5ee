//! sbm — source buffer management measurement.
//!
//! Layers, lowest first; a module imports its own layer (without a cycle) and the layers
//! below, never above (tests/layers.rs checks both from the source, and that no two sibling
//! modules anywhere import each other):
//! 1. helpers that know nothing of TCP: `ne`, `units`, `clock`, `addr`, `signals`, `cli`,
//!    `stats`, `sysinfo`, `embedded`, `wire`, `peers`, `tcpinfo`;
//! 2. the system calls (the only unsafe code) and socket options: `sys`, `sockopt`;
//! 3. the measurement: `tstamp`, `replenish`, `report` (the records, read and written);
//! 4. the BPF programs, behind the `bpf` feature: `bpf`;
//! 5. the programs: `send`, `sink`, `trace`, `delay`, `testbed`, `remote`;
//! 6. the matrix, which runs the programs: `matrix`.
//!
//! A lower layer that needs something a higher one provides takes it as an interface: the
//! readiness gate reads the BPF program through `replenish::SocketRule`, sbm-send's loop its
//! exact departures through `tstamp::departures::DepartureSource`; `send::programs` starts
//! them and passes them in.
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
//!   human-text writers; `report::compressed` opens a stored cell's file by its plain path
//!   whether it is plain, xz-compressed or in the cell's archive (`report::archive`, made by
//!   `sbm-matrix pack`).
//! - [`wire`]: the optional per-message header (trip times) and its parser.
//! - [`peers`]: other tools' peers (iperf3's client and server) known by their first bytes.
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
//! - [`matrix`]: sbm-matrix, split by job. The model: `matrix::spec` the matrix file and its
//!   cells (with `spec::rates` the rate schedules and `spec::pair` real host pairs),
//!   `matrix::record` what a run keeps per cell (cell.json, meta.json, summary.csv's row;
//!   each type writes its file and reads it back). The runners:
//!   `matrix::run` the emulated path and guests (typed `MatrixError`), `matrix::command` the
//!   command cells (an unmodified server under sbm-trace and its client), `matrix::hosts`
//!   real hosts over ssh, `matrix::schedule` bottleneck changes during a cell; below them
//!   `matrix::argv` the programs' command lines, `matrix::process` children and namespaces,
//!   `matrix::store` a finished cell's files (meta.json, cell.json, its compressed files),
//!   `matrix::pack` a run's cells packed one archive each and back. The report:
//!   `matrix::run_report` reads a run directory once (`RunReport`: rows, meta.json,
//!   cell.json, listings, charts); `matrix::report`, `matrix::aggregate`, `matrix::html`,
//!   `matrix::svg`, `matrix::recovery`, `matrix::compare` and `matrix::format` make text and
//!   pictures from it (prose and tables as `matrix::doc` blocks, written as markdown or
//!   HTML from the same blocks), and `matrix::export` has the exporters (a run's files as functions of
//!   its `RunReport`) and the one step that writes them.
//! - [`embedded`]: the presets and kernel inputs built into the binaries (build.rs), for
//!   installs without the source tree. (Man pages and completions: `cargo xtask`, xtask/.)
//! - [`addr`], [`cli`], [`clock`] (also BPF's monotonic clock to realtime), [`ne`], [`signals`], [`sysinfo`]: small helpers.

pub mod addr;
#[cfg(feature = "bpf")]
pub mod bpf;
pub mod cli;
pub mod clock;
pub mod delay;
pub mod embedded;
pub mod matrix;
pub mod ne;
pub mod peers;
pub mod remote;
pub mod replenish;
pub mod report;
pub mod rpm;
pub mod send;
pub mod signals;
pub mod sink;
pub mod sockopt;
pub mod stats;
pub mod sys;
pub mod sysinfo;
pub mod tcpinfo;
pub mod testbed;
#[cfg(feature = "bpf")]
pub mod trace;
pub mod tstamp;
pub mod units;
pub mod wire;
