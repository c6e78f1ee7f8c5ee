//! The event loop of sbm-send: one write per write invitation, TX reports drained on every
//! EPOLLERR, an interval line per tick, and a summary however the run ends.
//!
//! Phases: *writing* (EPOLLOUT registered; the first limit reached ends it), *draining*
//! (EPOLLOUT dropped; wait for outstanding reports up to the drain timeout), *finish*
//! (a last error-queue drain, then every pending write is attributed and written).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::realtime_ns;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::signal::Signal;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::config::{EpollMode, SendConfig, TimestampSource};
use super::output::Outputs;
use super::trip::{self, Framer, MessageRecord};
use crate::replenish::{self, Action, Gate, PolicyReport, SocketRule};
use crate::replenish::{Decision, Observation};
use crate::report::human;
use crate::report::schema::{
    AttributionCounts, DrainReport, IntervalRow, ReceiverView, ReportCounts, RunConfig,
    SamplingReport, SendSummary, Totals, WriteRow,
};
use crate::signals::{exit_status_for, StopSignals, StopSource};
use crate::sockopt::{self, OptionReport, TimestampingMode};
use crate::stats::LatencyHist;
use crate::sys::{self, ErrqueueRecv, SysError};
use crate::tcpinfo::TcpInfo;
use crate::tstamp::ledger::{ProvisionalSojourn, RunEnd};
use crate::tstamp::sampler::{DepartureSampler, Sample};
use crate::tstamp::tap::ProgramTap;
use crate::tstamp::{
    parse_errqueue_control, ErrqueueMessage, IssuedWrite, RawReport, StampState, TimedWrite,
    WriteLedger, WriteRecord,
};
use crate::{sysinfo, units};

mod paced_start;
mod rule_trace;
mod source_path;
mod summary;
mod timing;
mod write_path;

use summary::{print_banner, RunAbout};

const SOCK_TOKEN: u64 = 1;
const SIGNAL_TOKEN: u64 = 2;
/// Upper bound of the default drain timeout.
const MAX_DEFAULT_DRAIN: Duration = Duration::from_secs(60);

/// Failures before anything was measured: no summary, exit 1 with the message.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    #[error("cannot bind to {addr} (--bind): {reason}")]
    Bind { addr: SocketAddr, reason: String },
    #[error(transparent)]
    Sockopt(#[from] sockopt::SockoptError),
    #[error(transparent)]
    Sys(#[from] SysError),
    #[error(transparent)]
    Output(#[from] super::output::OutputError),
    #[error(transparent)]
    Gate(#[from] replenish::GateError),
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("--rule-trace: {0}")]
    RuleTrace(String),
}

fn os(what: &'static str) -> impl FnOnce(nix::Error) -> SetupError {
    move |e| SetupError::Os {
        what,
        source: e.into(),
    }
}

/// How a run ended and what it measured.
pub struct SendOutcome {
    pub summary: SendSummary,
    pub exit_code: i32,
    /// The run's interval rows (intervals.csv's), for `-J`.
    pub intervals: Vec<IntervalRow>,
}

#[derive(Debug)]
enum EndReason {
    Limit(&'static str),
    Signal(Signal),
    PeerFailed(String),
    LocalError(LocalFailure),
}

/// What failed on the sender's own side, typed up to the summary that prints it.
#[derive(Debug, thiserror::Error)]
enum LocalFailure {
    #[error(transparent)]
    Sys(#[from] SysError),
    #[error(transparent)]
    Output(#[from] super::output::OutputError),
    #[error("{what}: {source}")]
    Poll {
        what: &'static str,
        source: nix::errno::Errno,
    },
    #[error("BPF program on the connection: {0}")]
    Program(#[from] Box<dyn std::error::Error + Send + Sync>),
    #[error("the kernel refused BPF TX timestamping on the connection (bpf_setsockopt SK_BPF_CB_FLAGS: {0}); --timestamps socket times writes without it")]
    BpfTimestamping(nix::errno::Errno),
    #[error("loop ended without a reason")]
    NoReason,
}

impl EndReason {
    fn local(e: impl Into<LocalFailure>) -> EndReason {
        EndReason::LocalError(e.into())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Writing,
    Draining,
}

/// What the write path counts, kept alike for each interval and for the whole run.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    bytes_written: u64,
    writes: u64,
    short_writes: u64,
    would_block: u64,
    invitations: u64,
}

impl Tally {
    fn wrote(&mut self, bytes: u64, short: bool) {
        self.writes += 1;
        self.bytes_written += bytes;
        self.short_writes += u64::from(short);
    }
}

/// Per-interval accumulators, reset at each tick.
#[derive(Default)]
struct IntervalAcc {
    start: Duration,
    tally: Tally,
    sojourn: LatencyHist,
    exact_reports: u64,
    sampled: LatencyHist,
}

/// Whole-run accumulators.
#[derive(Default)]
struct RunAcc {
    tally: Tally,
    sojourn: LatencyHist,
    sojourn_exact: LatencyHist,
    attribution: AttributionCounts,
    attribution_after_warmup: AttributionCounts,
    reports: ReportCounts,
    sampled: LatencyHist,
    sampled_error: LatencyHist,
    /// `--exact-departures`: departure − write of every write after the warm-up.
    depart: LatencyHist,
    /// Advance notice of invitations after the warm-up (µs, ≥ 0).
    advance: LatencyHist,
    /// Invitations that came after the previous backlog had run dry.
    invited_after_dry: u64,
}

/// Connects with a timeout and returns the socket, already configured.
fn connect(cfg: &SendConfig) -> Result<(Socket, Vec<OptionReport>), SetupError> {
    let sock = tcp_socket(cfg.peer)?;
    let options = sockopt::apply_sender_options(sock.as_fd(), &cfg.options)?;
    bind_and_connect(&sock, cfg.peer, cfg.bind, cfg.connect_timeout)?;
    sock.set_nonblocking(true).map_err(|e| SetupError::Os {
        what: "set O_NONBLOCK",
        source: e,
    })?;
    Ok((sock, options))
}

/// A TCP socket of `peer`'s family.
pub(super) fn tcp_socket(peer: SocketAddr) -> Result<Socket, SetupError> {
    Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP)).map_err(|e| {
        SetupError::Os {
            what: "socket()",
            source: e,
        }
    })
}

/// Binds `sock` to `local` (when given) and connects it to `peer` within `timeout`, each
/// failure said as what to do about it.
pub(super) fn bind_and_connect(
    sock: &Socket,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    timeout: Duration,
) -> Result<(), SetupError> {
    if let Some(local) = local {
        sock.bind(&SockAddr::from(local))
            .map_err(|e| SetupError::Bind {
                addr: local,
                reason: match e.kind() {
                    io::ErrorKind::AddrNotAvailable => {
                        "no interface of this host has that address".into()
                    }
                    io::ErrorKind::AddrInUse => "the port is in use".into(),
                    _ => e.to_string(),
                },
            })?;
    }
    sock.connect_timeout(&SockAddr::from(peer), timeout)
        .map_err(|e| SetupError::Connect {
            addr: peer,
            reason: match e.kind() {
                io::ErrorKind::ConnectionRefused => {
                    "connection refused (is sbm-sink listening there?)".into()
                }
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                    format!("no answer within {timeout:?}")
                }
                _ => e.to_string(),
            },
        })
}

/// Configures a connection the peer opened (`-R`) as [`connect`] configures its own. The
/// options that only act before the handshake (the window scale a send buffer implies) were
/// the listener's; the rest apply as on a connected socket.
fn adopt(cfg: &SendConfig, sock: Socket) -> Result<(Socket, Vec<OptionReport>), SetupError> {
    let options = sockopt::apply_sender_options(sock.as_fd(), &cfg.options)?;
    sock.set_nonblocking(true).map_err(|e| SetupError::Os {
        what: "set O_NONBLOCK",
        source: e,
    })?;
    Ok((sock, options))
}

struct Sender<'a> {
    cfg: &'a SendConfig,
    sock: Socket,
    epoll: Epoll,
    signals: StopSource,
    out: Outputs,
    ledger: WriteLedger,
    buf: Vec<u8>,
    control: [u8; 512],
    /// Reports taken from the BPF program, before the ledger takes them (kept for its
    /// allocation).
    program_reports: Vec<RawReport>,
    sojourns: Vec<ProvisionalSojourn>,
    done: Vec<TimedWrite>,
    t0: Instant,
    t0_ns: u64,
    /// The loop's clock at the top of its current turn. Runs that keep no per-write time
    /// (`--light`) time their writes by it: one clock read per turn instead of several per
    /// write, which matters where every clock read is a system call (a UML guest).
    turn: Duration,
    warmup_end_ns: u64,
    phase: Phase,
    interval: IntervalAcc,
    run: RunAcc,
    /// tcp_info at the previous tick, for per-interval deltas.
    prev_info: TcpInfo,
    /// tcpi_bytes_acked before the first write: Linux counts the SYN as one acked byte.
    acked_base: u64,
    /// When the warm-up ended and the data bytes that had entered the network by then
    /// (goodput counts only bytes beyond them).
    warmup_mark: Option<(Duration, u64)>,
    write_end: Option<(Duration, TcpInfo)>,
    first_write: Option<Duration>,
    end: Option<EndReason>,
    warnings: Vec<String>,
    /// Who decides when to write.
    gate: Gate,
    /// Whether EPOLLOUT is in the socket's interest set.
    out_interest: bool,
    /// Whether the edge-triggered stall has been said (once a run).
    edge_stall_noted: bool,
    last_decision: Option<Decision>,
    /// `--rule-trace`'s thread.
    rule_trace: Option<rule_trace::RuleTrace>,
    /// SCHED time of the previous final row, for the advance notice of the next one.
    prev_sched_ns: Option<u64>,
    /// The second departure estimator (snd_nxt samples).
    sampler: DepartureSampler,
    next_sample: Option<Instant>,
    /// The BPF program on the connection: the third departure estimator
    /// (`--exact-departures`: per-packet departures) and the TX reports of
    /// `--timestamps bpf`.
    program_tap: Option<Box<dyn ProgramTap>>,
    /// --trip-times: message framing, and what is known of each message.
    framer: Option<Framer>,
    messages: Vec<MessageRecord>,
    /// --paced-start while its phase lasts.
    paced: Option<paced_start::PacedStart>,
    /// An application-limited source (None: bulk) and its frames' log.
    source: Option<crate::send::source::Source>,
    frame_log: Option<crate::send::content_age::FrameLog>,
    /// Whether the source had something to write at the previous step.
    source_was_ready: bool,
    /// Every interval row, for `-J`'s document (intervals.csv has them too).
    intervals: Vec<IntervalRow>,
}

/// What one write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteOutcome {
    /// The kernel took every byte asked for.
    Whole,
    /// The kernel took part of the write (a short write).
    Short,
    WouldBlock,
    /// An application-limited source had nothing to write.
    Idle,
}

impl<'a> Sender<'a> {
    fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Data bytes acknowledged according to `info` (the SYN not counted).
    fn data_acked(&self, info: &TcpInfo) -> u64 {
        info.bytes_acked
            .unwrap_or(0)
            .saturating_sub(self.acked_base)
    }

    /// Data bytes that have entered the network (up to snd_nxt): written less what the
    /// kernel still holds unsent. Retransmissions do not count again.
    fn data_sent(&self, info: &TcpInfo) -> u64 {
        let unsent = info.notsent_bytes.map_or(0, u64::from);
        // The tally, not the ledger: without timestamps the ledger records no writes.
        self.run
            .tally
            .bytes_written
            .saturating_sub(unsent)
            .max(self.data_acked(info))
    }

    fn tcp_info(&self) -> Result<TcpInfo, SysError> {
        sys::tcp_info(self.sock.as_fd())
    }

    /// BBR's own state, when the connection runs BBR (TCP_CC_INFO answers with another
    /// struct, or nothing, for other algorithms).
    fn bbr_info(&self) -> Option<crate::tcpinfo::BbrInfo> {
        let cc =
            sys::get_string(self.sock.as_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION).ok()?;
        if cc != "bbr" {
            return None;
        }
        sys::bbr_info(self.sock.as_fd()).ok().flatten()
    }

    fn writing_limit_reached(&self, now: Duration) -> Option<&'static str> {
        // Trip-timed messages are never cut: limits apply between messages.
        if self.framer.as_ref().is_some_and(|f| !f.at_boundary()) {
            return None;
        }
        let l = &self.cfg.limits;
        if l.time.is_some_and(|t| now >= t) {
            Some("time limit reached")
        } else if l.bytes.is_some_and(|b| self.run.tally.bytes_written >= b) {
            Some("byte limit reached")
        } else if l.writes.is_some_and(|w| self.run.tally.writes >= w) {
            Some("write limit reached")
        } else {
            None
        }
    }

    fn on_socket_event(&mut self, flags: EpollFlags) -> Result<(), EndReason> {
        if flags.contains(EpollFlags::EPOLLERR) {
            let drained = if self.cfg.timestamps == Some(TimestampSource::Socket) {
                self.drain_errqueue()?
            } else {
                0
            };
            if drained == 0 {
                if let Ok(Some(e)) = self.sock.take_error() {
                    return Err(EndReason::PeerFailed(format!("connection failed: {e}")));
                }
            }
        }
        if flags.contains(EpollFlags::EPOLLHUP) {
            // The socket's own error says why (a reset, usually).
            let why = match self.sock.take_error() {
                Ok(Some(e)) => format!("connection failed: {e}"),
                _ => "connection closed by the peer (EPOLLHUP)".into(),
            };
            return Err(EndReason::PeerFailed(why));
        }
        if flags.contains(EpollFlags::EPOLLOUT)
            && self.phase == Phase::Writing
            && !self.paced_start_active()
        {
            if !self.source_ready() {
                // Idle application: no write, and no more invitations until content comes.
                return self.set_out_interest(false);
            }
            match self.gate {
                Gate::Kernel { info_optname: None } => {
                    let threshold = self.cfg.options.notsent_lowat.map(u64::from);
                    self.kernel_invited_writes(threshold, "epollout")?;
                }
                Gate::Kernel {
                    info_optname: Some(n),
                } => {
                    // The kernel's own reason and threshold for this invitation.
                    let info = replenish::kernel_replenish_info(self.sock.as_fd(), n)
                        .map_err(EndReason::local)?;
                    let d = info.map(|i| i.decision());
                    self.last_decision = d;
                    let (threshold, reason) =
                        d.map_or((None, "epollout"), |d| (d.threshold, d.reason.name()));
                    self.write_once(threshold, reason)?;
                }
                // The emulation decides on its next step; EPOLLOUT only woke it.
                Gate::Emulated(ref mut gate) => gate.kernel_woke(),
                Gate::Bpf(_) => {
                    // The program's threshold and rate when the kernel invited.
                    self.last_decision = self.program_decision();
                    let threshold = self.last_decision.and_then(|d| d.threshold);
                    self.write_once(threshold, "bpf-lowat")?;
                }
            }
        }
        Ok(())
    }

    /// The BPF program's current view of the rule for this socket, as a decision.
    fn program_decision(&self) -> Option<replenish::Decision> {
        let time = self.cfg.replenish.as_ref().map(|r| r.time)?;
        Some(self.gate.program_state(self.sock.as_fd())?.decision(time))
    }

    fn emit_interval(&mut self, end: Duration) -> Result<(), EndReason> {
        if matches!(self.gate, Gate::Bpf(_)) {
            self.last_decision = self.program_decision();
        }
        let info = self.tcp_info().map_err(EndReason::local)?;
        let p = &self.prev_info;
        let delta = |now: Option<u64>, before: Option<u64>| {
            now.map(|n| n.saturating_sub(before.unwrap_or(0)))
        };
        let span = end.saturating_sub(self.interval.start);
        let acked = delta(info.bytes_acked, p.bytes_acked).unwrap_or(0);
        let row_was_warmup = self.interval.start < self.cfg.warmup;
        let sojourn = self.interval.sojourn.percentiles();
        let bbr = self.bbr_info();
        let row = IntervalRow {
            start_s: self.interval.start.as_secs_f64(),
            end_s: end.as_secs_f64(),
            warmup: row_was_warmup,
            bytes_written: self.interval.tally.bytes_written,
            bytes_acked: acked,
            goodput_bps: units::bits_per_second(acked, span),
            writes: self.interval.tally.writes,
            short_writes: self.interval.tally.short_writes,
            would_block: self.interval.tally.would_block,
            invitations: self.interval.tally.invitations,
            sched_reports: sojourn.count,
            exact_reports: self.interval.exact_reports,
            sampled_p50_us: self.interval.sampled.quantile(0.5),
            sampled_p95_us: self.interval.sampled.quantile(0.95),
            writes_per_rtt: if span.is_zero() {
                0.0
            } else {
                self.interval.tally.writes as f64 * f64::from(info.rtt_us)
                    / 1e6
                    / span.as_secs_f64()
            },
            sojourn_p50_us: sojourn.p50_us,
            sojourn_p95_us: sojourn.p95_us,
            sojourn_max_us: sojourn.max_us,
            notsent_bytes: info.notsent_bytes,
            cwnd: info.snd_cwnd,
            mss: info.snd_mss,
            srtt_us: info.rtt_us,
            min_rtt_us: info.min_rtt_us,
            delivery_rate_bps: info.delivery_rate.map(|r| r * 8),
            delivery_app_limited: info.delivery_rate_app_limited,
            pacing_rate_bps: info.pacing_rate.map(|r| r.saturating_mul(8)),
            retransmits: info.total_retrans.saturating_sub(p.total_retrans),
            busy_us: delta(info.busy_time_us, p.busy_time_us),
            rwnd_limited_us: delta(info.rwnd_limited_us, p.rwnd_limited_us),
            sndbuf_limited_us: delta(info.sndbuf_limited_us, p.sndbuf_limited_us),
            // Set only by a replenish rule (emulated, or the kernel's own report).
            threshold_bytes: match self.last_decision {
                Some(d) => d.threshold,
                None => self.cfg.options.notsent_lowat.map(u64::from),
            },
            drain_rate_bps: self.last_decision.and_then(|d| d.rate).map(|r| r * 8.0),
            rate_source: self.last_decision.map_or("", |d| d.source.name()).into(),
            lowat_bytes: sys::get_int(
                self.sock.as_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
            )
            .ok()
            .map(|v| v as u32),
            bbr_bw_bps: bbr.map(|b| b.bw.saturating_mul(8)),
            bbr_min_rtt_us: bbr.map(|b| b.min_rtt_us),
            bbr_pacing_gain: bbr.map(|b| f64::from(b.pacing_gain) / 256.0),
            bbr_cwnd_gain: bbr.map(|b| f64::from(b.cwnd_gain) / 256.0),
            bbr_mode: bbr.and_then(|b| b.mode()).map_or("", |m| m.name()).into(),
            bbr_bdp_bytes: bbr.map(|b| b.bdp_bytes()),
            inflight_bytes: u64::from(info.unacked) * u64::from(info.snd_mss),
        };
        if let Some(tap) = &self.cfg.interval_tap {
            // One flow of several: the owner prints per-flow and SUM lines together.
            let _ = tap.rows.send((tap.flow, row.clone()));
        } else {
            if self.cfg.json_stream {
                crate::cli::print_json_event("interval", None, &row);
            }
            if !self.cfg.quiet {
                crate::say!("{}{}", self.cfg.line_tag(), human::send_interval_line(&row));
            }
        }
        self.out
            .write_interval(&row)
            .and_then(|_| self.out.flush())
            .map_err(EndReason::local)?;
        self.note_edge_stall(&row, &info);
        self.intervals.push(row);
        // The first row after the warm-up starts from this reading's acked count. The mark
        // read the bytes sent a moment earlier, and on a fast path more may have been sent
        // and acknowledged in between: goodput starts no lower than the rows do, so that it
        // is never more than they acknowledged.
        if row_was_warmup && end >= self.cfg.warmup {
            let acked = self.data_acked(&info);
            if let Some((_, sent)) = &mut self.warmup_mark {
                *sent = (*sent).max(acked);
            }
        }
        self.prev_info = info;
        self.interval = IntervalAcc {
            start: end,
            ..Default::default()
        };
        Ok(())
    }

    /// Says once when an edge-triggered writer can wait no more: a whole interval without an
    /// invitation while the socket held nothing unsent and nothing in flight, so no ACK can
    /// come to wake it. (Linux wakes a writer only after a write or a poll found the socket
    /// without space; after a write that left it writable, epoll's edge mode has no new edge
    /// to report.) Read from the interval's tcp_info: nothing is asked of the socket that
    /// could arm a wakeup, so the run stays what it was.
    fn note_edge_stall(&mut self, row: &IntervalRow, info: &TcpInfo) {
        let stalled = self.cfg.epoll == EpollMode::Edge
            && self.out_interest
            && self.phase == Phase::Writing
            && row.invitations == 0
            && row.notsent_bytes == Some(0)
            && info.unacked == 0;
        if stalled && !self.edge_stall_noted {
            self.edge_stall_noted = true;
            let w = format!(
                "epoll edge: no invitation from {:.1} s to {:.1} s with nothing unsent and nothing in flight, \
                 so no ACK can bring one: a write that leaves the socket writable gets no new EPOLLOUT edge \
                 (epoll(7): write until EAGAIN); --epoll level does not stall",
                row.start_s, row.end_s
            );
            eprintln!("sbm-send: warning: {w}");
            self.warnings.push(w);
        }
    }

    /// Moves from writing to draining: stop asking for EPOLLOUT.
    fn end_writing(&mut self, reason: EndReason) -> Result<(), EndReason> {
        self.stop_writing()?;
        self.end = Some(reason);
        self.set_out_interest(false)
    }

    /// The last interval line and the tcp_info the goodput ends with; then draining.
    fn stop_writing(&mut self) -> Result<(), EndReason> {
        let now = self.elapsed();
        if self.interval.start < now {
            self.emit_interval(now)?;
        }
        // The goodput ends with the very tcp_info the last interval row ended with: a
        // second read would count acks that arrived in between in the summary but in no
        // interval, and the summary must be the intervals' sum.
        self.write_end = Some((now, self.prev_info.clone()));
        self.phase = Phase::Draining;
        Ok(())
    }

    /// The default drain timeout: the time the outstanding bytes take at the measured
    /// delivery rate, plus two smoothed RTTs and a second, capped.
    fn default_drain_timeout(&self) -> Duration {
        let Some((at, info)) = &self.write_end else {
            return Duration::ZERO;
        };
        let outstanding = self
            .run
            .tally
            .bytes_written
            .saturating_sub(self.data_acked(info));
        let rate = match info.delivery_rate {
            Some(r) if r > 0 => r as f64,
            _ => self.data_acked(info) as f64 / at.as_secs_f64().max(1e-3),
        };
        let drain = if rate > 0.0 {
            outstanding as f64 / rate
        } else {
            MAX_DEFAULT_DRAIN.as_secs_f64()
        };
        let rtts = 2.0 * f64::from(info.rtt_us) / 1e6;
        Duration::from_secs_f64((drain + rtts + 1.0).min(MAX_DEFAULT_DRAIN.as_secs_f64()))
    }

    fn event_loop(&mut self) -> DrainReport {
        let mut events = [EpollEvent::empty(); 8];
        let mut drain = DrainReport::default();
        let mut drain_deadline: Option<Instant> = None;
        loop {
            let now = self.elapsed();
            self.turn = now;
            // The program's reports, on a turn the loop took for its own reasons.
            if self.cfg.timestamps == Some(TimestampSource::Bpf) {
                if let Err(reason) = self.take_program_reports() {
                    self.fail(reason);
                    return drain;
                }
            }
            if self.phase == Phase::Writing {
                if self.warmup_mark.is_none() && now >= self.cfg.warmup {
                    if let Ok(info) = self.tcp_info() {
                        self.warmup_mark = Some((now, self.data_sent(&info)));
                    }
                }
                if let Some(why) = self.writing_limit_reached(now) {
                    if let Err(e) = self.end_writing(EndReason::Limit(why)) {
                        self.end = Some(e);
                        return drain;
                    }
                } else if now >= self.interval.start + self.cfg.interval {
                    let tick = self.interval.start + self.cfg.interval;
                    if let Err(e) = self.emit_interval(tick) {
                        self.end = Some(e);
                        return drain;
                    }
                }
            }
            if self.phase == Phase::Draining {
                if !matches!(self.end, Some(EndReason::Limit(_))) {
                    return drain;
                }
                let deadline = *drain_deadline.get_or_insert_with(|| {
                    drain.timeout_s = self
                        .cfg
                        .drain_timeout
                        .unwrap_or_else(|| self.default_drain_timeout())
                        .as_secs_f64();
                    Instant::now() + Duration::from_secs_f64(drain.timeout_s)
                });
                let waited = self
                    .write_end
                    .as_ref()
                    .map_or(Duration::ZERO, |(at, _)| self.elapsed().saturating_sub(*at));
                drain.waited_s = waited.as_secs_f64();
                // With reports: until every write has its final ones. Without: until the
                // socket has sent its backlog, so that the run ends with a graceful close
                // and the exchange with the sink rather than a reset.
                let waiting = if self.cfg.timestamps.is_some() {
                    self.ledger.pending_len() > 0
                } else {
                    sys::outq_notsent(self.sock.as_fd()).is_ok_and(|n| n > 0)
                };
                if !waiting {
                    return drain;
                }
                if Instant::now() >= deadline {
                    drain.timed_out = true;
                    return drain;
                }
            }
            if let Err(reason) = self.sample_if_due() {
                self.fail(reason);
                return drain;
            }
            if self.phase == Phase::Writing {
                if let Err(reason) = self.paced_start_step().and_then(|()| self.source_step()) {
                    self.fail(reason);
                    return drain;
                }
            }
            let mut decide_again = false;
            if self.emulation_due() {
                match self.emulation_step() {
                    Ok(wrote) => decide_again = wrote,
                    Err(reason) => {
                        self.fail(reason);
                        return drain;
                    }
                }
            }
            // After an emulated invitation, look at events without waiting, then decide again.
            let timeout = if decide_again {
                0
            } else {
                self.next_timeout(drain_deadline)
            };
            let n = match self.epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    self.end = Some(EndReason::LocalError(LocalFailure::Poll {
                        what: "epoll_wait",
                        source: e,
                    }));
                    return drain;
                }
            };
            for ev in &events[..n] {
                let result = match ev.data() {
                    SIGNAL_TOKEN => match self.signals.take() {
                        Some(sig) => Err(EndReason::Signal(sig)),
                        None => Ok(()),
                    },
                    _ => self.on_socket_event(ev.events()),
                };
                if let Err(reason) = result {
                    self.fail(reason);
                    return drain;
                }
            }
        }
    }

    /// Ends the run early: a signal or a failure, while writing or during the drain.
    fn fail(&mut self, reason: EndReason) {
        let reason = match reason {
            EndReason::PeerFailed(why) => EndReason::PeerFailed(self.name_foreign_peer(why)),
            other => other,
        };
        // While writing nothing has ended the run yet: it ends now, with this reason unless
        // ending it fails too.
        let reason = if self.phase == Phase::Writing {
            match self
                .stop_writing()
                .and_then(|()| self.set_out_interest(false))
            {
                Ok(()) => reason,
                Err(e) => e,
            }
        } else {
            reason
        };
        self.end = Some(match self.end.take() {
            Some(EndReason::Limit(_)) | None => reason,
            Some(first) => first,
        });
    }

    /// A failure's message, with what the peer is when its first bytes show another tool's
    /// server (an sbm-sink sends nothing before sbm-send's half-close, so any byte waiting
    /// now is the peer's own protocol).
    fn name_foreign_peer(&self, why: String) -> String {
        use nix::sys::socket::{recv, MsgFlags};
        let mut first = [0u8; 16];
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
        let Ok(n) = recv(
            std::os::fd::AsRawFd::as_raw_fd(&self.sock),
            &mut first,
            flags,
        ) else {
            return why;
        };
        let first = &first[..n];
        match crate::peers::server_from_first_bytes(first) {
            Some(peer) => format!("{why}; the peer is {}", peer.explain()),
            None => why,
        }
    }

    /// Milliseconds until the next thing the loop must do by itself, from the turn's clock
    /// (what the turn spent writing only makes the wait that much longer than asked).
    fn next_timeout(&self, drain_deadline: Option<Instant>) -> u16 {
        let now = self.turn;
        let mut next = Duration::from_secs(1);
        if self.phase == Phase::Writing {
            next = next.min((self.interval.start + self.cfg.interval).saturating_sub(now));
            if let Some(t) = self.cfg.limits.time {
                next = next.min(t.saturating_sub(now));
            }
            if self.warmup_mark.is_none() {
                next = next.min(self.cfg.warmup.saturating_sub(now));
            }
            if let Some(t) = self.paced_start_wake() {
                next = next.min(t.saturating_sub(now));
            }
            if let Some(t) = self.source_wake() {
                next = next.min(t.saturating_sub(now));
            }
            if let Some(t) = self.gate.next_check() {
                next = next.min(t.saturating_duration_since(Instant::now()));
            }
        }
        if self.sampling() && self.sampler.pending() > 0 {
            if let Some(t) = self.next_sample {
                next = next.min(t.saturating_duration_since(Instant::now()));
            }
        }
        if let Some(d) = drain_deadline {
            next = next.min(d.saturating_duration_since(Instant::now()));
            // Nothing wakes the loop when the backlog leaves without socket timestamps
            // (none, or the program's, read only when the loop wakes): look again soon.
            if self.cfg.timestamps != Some(TimestampSource::Socket) {
                next = next.min(Duration::from_millis(1));
            }
        }
        // Round up so that the loop does not wake a hair early and spin.
        next.as_micros().div_ceil(1000).min(u128::from(u16::MAX)) as u16
    }
}

/// What the caller started beside the loop before the socket existed (both act on the
/// sockets created after them): the BPF replenish program that `--replenish-impl bpf`
/// reads, and the tap of `--exact-departures` and `--timestamps bpf`; or the connection
/// itself, when the
/// receiver opened it (`-R`: sbm-sink sends on a socket it accepted).
#[derive(Default)]
pub struct Attached {
    pub rule: Option<Arc<dyn SocketRule>>,
    pub program_tap: Option<Box<dyn ProgramTap>>,
    pub connected: Option<Socket>,
}

/// Runs sbm-send with a resolved configuration and nothing attached.
pub fn run(cfg: &SendConfig) -> Result<SendOutcome, SetupError> {
    run_attached(cfg, Attached::default())
}

/// [`run`] with what the caller attached.
pub fn run_attached(cfg: &SendConfig, attached: Attached) -> Result<SendOutcome, SetupError> {
    let signals = StopSignals::install().map_err(os("signalfd"))?;
    run_with_stop(cfg, StopSource::Signals(signals), attached)
}

/// `--json-stream`'s first line's data: the connection as it was set up.
#[derive(serde::Serialize)]
struct StartEvent<'a, O: serde::Serialize> {
    sbm_version: &'static str,
    local: &'a str,
    peer: String,
    kernel: String,
    mss: u32,
    write_size: u32,
    options: &'a O,
}
/// [`run`] ended early by `signals` (one flow of several: a relay from the thread that
/// owns the process's signals).
pub fn run_with_stop(
    cfg: &SendConfig,
    signals: StopSource,
    attached: Attached,
) -> Result<SendOutcome, SetupError> {
    let Attached {
        rule,
        mut program_tap,
        connected,
    } = attached;
    let out = Outputs::create(cfg.out_dir.as_deref(), cfg.write_log)?;
    let (sock, mut options) = match connected {
        Some(sock) => adopt(cfg, sock)?,
        None => connect(cfg)?,
    };
    // Trip times: the hello (boot id) goes first, before TX timestamps are enabled, so
    // that OPT_ID_TCP keys count measured bytes only.
    let hello_len = if cfg.trip_times {
        send_hello(&sock)?
    } else {
        0
    };
    if let Some(d) = &mut program_tap {
        d.skip_bytes(hello_len);
    }
    let timestamping: Option<TimestampingMode> = if cfg.timestamps == Some(TimestampSource::Socket)
    {
        Some(sockopt::enable_tx_timestamps(sock.as_fd())?)
    } else {
        None
    };
    let (gate, policy, gate_option) = replenish::setup(
        sock.as_fd(),
        cfg.replenish.as_ref(),
        cfg.options.nodelay,
        cfg.options.notsent_lowat,
        rule,
    )?;
    options.extend(gate_option);
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(os("epoll_create1"))?;
    // With the kernel deciding, every EPOLLOUT is an invitation; the emulation asks for
    // EPOLLOUT only when it waits for the kernel.
    let kernel_gate = gate.kernel_invites();
    let mut interest = if kernel_gate {
        EpollFlags::EPOLLOUT
    } else {
        EpollFlags::empty()
    };
    if kernel_gate && cfg.epoll == EpollMode::Edge {
        interest |= EpollFlags::EPOLLET;
    }
    epoll
        .add(sock.as_fd(), EpollEvent::new(interest, SOCK_TOKEN))
        .map_err(os("epoll_ctl(ADD socket)"))?;
    epoll
        .add(
            signals.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, SIGNAL_TOKEN),
        )
        .map_err(os("epoll_ctl(ADD signalfd)"))?;

    let local = sock
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or_else(|| "?".into(), |a| a.to_string());
    let first_info = sys::tcp_info(sock.as_fd())?;
    let mut warnings: Vec<String> = options
        .iter()
        .filter_map(|o| o.warning.as_ref().map(|w| format!("{}: {w}", o.name)))
        .collect();
    if timestamping.is_some_and(|t| !t.opt_id_tcp) {
        warnings.push("timestamping: kernel refused OPT_ID_TCP; keys use OPT_ID (same base before the first write)".into());
    }
    print_banner(cfg, &local, &options, timestamping, first_info.snd_mss);
    if cfg.json_stream {
        let start = StartEvent {
            sbm_version: env!("CARGO_PKG_VERSION"),
            local: &local,
            peer: cfg.peer.to_string(),
            kernel: crate::sysinfo::kernel_release(),
            mss: first_info.snd_mss,
            write_size: cfg.write_size,
            options: &options,
        };
        let flow = cfg.interval_tap.as_ref().map(|t| t.flow);
        crate::cli::print_json_event("start", flow, &start);
    }
    let tag = cfg.line_tag();
    crate::say!("{tag}{}", human::policy_line(&policy));
    if cfg.burst > 1 {
        crate::say!(
            "{tag}burst: up to {} writes per invitation (not one write per invitation)",
            cfg.burst
        );
    }
    if let Some(note) = &policy.note {
        crate::say!("{tag}policy: {note}");
    }
    for w in &warnings {
        eprintln!("sbm-send: warning: {w}");
    }

    let rule_trace = match (cfg.rule_trace, cfg.out_dir.as_deref()) {
        (Some(every), Some(dir)) => {
            let info_optname = match &gate {
                Gate::Kernel { info_optname } => *info_optname,
                Gate::Emulated(_) | Gate::Bpf(_) => None,
            };
            let fd = sock
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| SetupError::RuleTrace(format!("dup of the socket: {e}")))?;
            Some(
                rule_trace::RuleTrace::start(fd, dir, every, info_optname, !cfg.options.nodelay)
                    .map_err(SetupError::RuleTrace)?,
            )
        }
        _ => None,
    };
    let t0_ns = realtime_ns();
    let mut s = Sender {
        cfg,
        sock,
        epoll,
        signals,
        out,
        ledger: WriteLedger::new(),
        buf: (0..cfg
            .source
            .as_ref()
            .map_or(cfg.write_size, |s| s.max_write().max(cfg.write_size)))
            .map(|i| (i % 251) as u8)
            .collect(),
        control: [0; 512],
        program_reports: vec![],
        sojourns: Vec::with_capacity(1024),
        done: Vec::with_capacity(1024),
        t0: Instant::now(),
        t0_ns,
        turn: Duration::ZERO,
        warmup_end_ns: t0_ns + cfg.warmup.as_nanos() as u64,
        phase: Phase::Writing,
        interval: IntervalAcc::default(),
        run: RunAcc::default(),
        acked_base: first_info.bytes_acked.unwrap_or(0) + hello_len,
        prev_info: first_info.clone(),
        warmup_mark: None,
        write_end: None,
        first_write: None,
        end: None,
        warnings,
        gate,
        out_interest: kernel_gate,
        edge_stall_noted: false,
        last_decision: None,
        rule_trace,
        prev_sched_ns: None,
        sampler: DepartureSampler::new(),
        next_sample: None,
        program_tap,
        framer: cfg.trip_times.then(|| Framer::new(cfg.write_size)),
        messages: vec![],
        paced: cfg.paced_start.map(paced_start::PacedStart::new),
        source: cfg.source.clone().map(crate::send::source::Source::new),
        frame_log: cfg
            .source
            .as_ref()
            .map(|_| crate::send::content_age::FrameLog::new(t0_ns, cfg.warmup)),
        source_was_ready: false,
        intervals: Vec::new(),
    };
    if let Some(spec) = &cfg.source {
        crate::say!("{tag}source: {}", spec.describe());
    }
    if let Some(d) = cfg.paced_start {
        crate::say!(
            "{tag}paced start: one write per smoothed RTT for {d:?}, whatever the readiness rule says (an experiment: the report's §6 entry)"
        );
        // The rule does not invite during the phase.
        if let Err(e) = s.set_out_interest(false) {
            s.fail(e);
        }
    }
    // A flow of -P prints no header: the owner prints one for every flow.
    if !cfg.quiet && cfg.interval_tap.is_none() {
        crate::say!("{tag}{}", human::send_interval_header());
    }
    let drain = s.event_loop();
    let about = RunAbout {
        local,
        options,
        timestamping,
        mss: first_info.snd_mss,
        policy,
    };
    Ok(s.finish(drain, about))
}

/// Writes the trip-times hello (blocking: it is 68 bytes on a fresh connection).
fn send_hello(sock: &Socket) -> Result<u64, SetupError> {
    use std::io::Write;
    let hello = crate::wire::hello(&sysinfo::boot_id().unwrap_or_default(), realtime_ns());
    let io = |e: io::Error| SetupError::Os {
        what: "sending the trip-times hello",
        source: e,
    };
    sock.set_nonblocking(false).map_err(io)?;
    (&*sock).write_all(&hello).map_err(io)?;
    sock.set_nonblocking(true).map_err(io)?;
    Ok(hello.len() as u64)
}
