//! sbm-send's command line: clap definitions and their conversion into a [`SendConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use super::config::{EpollMode, Limits, SendConfig, TimestampChoice, TimestampSource};
use super::source::SourceSpec;
use super::source_cli::SourceArgs;
use crate::replenish::{self, ReplenishConfig, ReplenishImpl};
use crate::replenish::{RateEstimator, ThresholdTest};
use crate::sockopt::SenderOptions;
use crate::units;

const EXAMPLES: &str = concat!(
    "\
Examples:
  sbm-sink --listen 127.0.0.1:5301 &
  sbm-send --connect 127.0.0.1:5301 -t 10s
  sbm-send -c 198.18.0.2 -p 5400 -B 198.18.0.1 -t 10s   # port 5400, from 198.18.0.1
  sbm-send --connect 198.18.0.2 -t 40s --warmup 10s --notsent-lowat 165KB --out results/lowat
  sbm-send --connect 198.18.0.2 --writes 5000 -l 4KiB --nodelay --cc cubic --out /tmp/run
  sbm-send --connect 198.18.2.1 -t 40s --replenish-time 15ms            # emulated unless patched
  sbm-send --connect 198.18.2.1 -l 4KiB --replenish-time 15ms --sub-mss-clause off   # report §6
  sbm-send -c 127.0.0.1 -t 5s -J -q | jq .sojourn_sampled    # the summary as JSON on stdout
  sbm-send -c 198.18.2.1 -t 30s --timestamps socket   # TX times from the error queue, not BPF
  sbm-send -c 198.18.0.2 -P 4 -t 30s --out /tmp/four            # four flows, SUM lines as iperf
  sbm-send -c 198.18.0.2 -R -t 10 --notsent-lowat 16KB   # the sink sends and measures (iperf's -R)

",
    crate::units_help!(),
    "

Exit status: 0 run complete, 1 run failed or ended early by the peer, 2 bad usage,
128+N ended by signal N (files and summary are written in every case)."
);

/// `--sub-mss-clause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SubMssClause {
    /// Under Nagle (the report's §6 fix; never with --nodelay).
    On,
    Off,
    /// Under --nodelay too: an experiment (the report's §1 controlled comparison, where it
    /// pooled writes behind a cwnd-blocked segment); the rule must not do this.
    Always,
}

/// `--timestamps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimestampsArg {
    /// bpf where it can run (root, a kernel with BPF TX timestamping, one connection that
    /// sbm-send opens), socket otherwise; the choice and why in summary.json and the banner
    /// (default).
    Auto,
    /// SO_TIMESTAMPING: the kernel's reports read from the socket's error queue.
    Socket,
    /// BPF TX timestamping (Linux 6.15+; root, cgroup v2): the same SCHED, SND and ACK
    /// times given to a sock_ops program and read from its ring buffer when the loop wakes
    /// anyway — no error queue, no system call per report, no wakeup of their own.
    Bpf,
    /// No write is timed (as --no-timestamps).
    Off,
}

impl TimestampsArg {
    /// The configuration's source (None: writes not timed) and how it was chosen; `auto`
    /// starts as socket, which the BPF programs' start may turn into bpf.
    fn source(self) -> (Option<TimestampSource>, TimestampChoice) {
        let given = match self {
            TimestampsArg::Auto => {
                return (Some(TimestampSource::Socket), TimestampChoice::AutoOpen)
            }
            TimestampsArg::Socket => Some(TimestampSource::Socket),
            TimestampsArg::Bpf => Some(TimestampSource::Bpf),
            TimestampsArg::Off => None,
        };
        (given, TimestampChoice::Given)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EpollArg {
    /// Level-triggered: invited again as long as the socket is writable (default).
    Level,
    /// Edge-triggered: one invitation per EPOLLOUT edge. Can stall: Linux sends a new edge
    /// only after a write (or poll) found the socket without space, so a write that leaves it
    /// writable, or not writable to poll but short of EAGAIN (NOTSENT_LOWAT between lowat/2
    /// and lowat), may be the last (sbm-send warns when nothing is left to wake it).
    Edge,
}

/// Nonblocking epoll TCP sender that measures how long each write waits in the sender's
/// own socket buffer (TX_SCHED − write time), with TX_SND and TX_ACK times beside it.
#[derive(Debug, Parser)]
#[command(name = "sbm-send", version, disable_version_flag = true, after_help = EXAMPLES)]
pub struct SendArgs {
    /// Receiver (sbm-sink) as HOST:PORT, [V6]:PORT or HOST (port 5301, or -p).
    #[arg(short = 'c', long, value_name = "HOST:PORT")]
    pub connect: String,

    /// The receiver's port when --connect names none (default 5301).
    #[arg(short = 'p', long, value_name = "PORT")]
    pub port: Option<u16>,

    /// Send from this local address (IP, or IP:PORT; a port of 0 or none lets the kernel
    /// choose): bound before connecting, as iperf's -B.
    #[arg(short = 'B', long, value_name = "ADDR")]
    pub bind: Option<String>,

    /// Stop writing after this long (default 10s unless --bytes or --writes is given).
    #[arg(short = 't', long, value_parser = units::parse_seconds, value_name = "DUR")]
    pub time: Option<Duration>,

    /// Stop writing after this many bytes have been accepted (iperf's -n).
    #[arg(short = 'n', long, value_parser = units::parse_bytes, value_name = "BYTES")]
    pub bytes: Option<u64>,

    /// Stop writing after this many writes (iperf3's -k/--blockcount).
    #[arg(short = 'k', long, visible_alias = "blockcount", value_parser = parse_count, value_name = "N")]
    pub writes: Option<u64>,

    /// Bytes per write: exactly one write of this size per write invitation.
    #[arg(short = 'l', long = "write-size", default_value = "64KiB", value_parser = parse_write_size, value_name = "BYTES")]
    pub write_size: u32,

    /// Reporting interval.
    #[arg(short = 'i', long, default_value = "1s", value_parser = units::parse_seconds, value_name = "DUR")]
    pub interval: Duration,

    /// Exclude writes made in the first DUR from the summary statistics (rows are still
    /// written, marked warmup; interval lines are still printed). iperf3's -O/--omit.
    #[arg(short = 'O', long, visible_alias = "omit", default_value = "0s", value_parser = units::parse_seconds_or_zero, value_name = "DUR")]
    pub warmup: Duration,

    /// Directory for writes.csv, intervals.csv and summary.json (created if missing).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// A free-form name for this run, stored in the summary.
    #[arg(long)]
    pub label: Option<String>,

    /// epoll trigger mode.
    #[arg(long, value_enum, default_value_t = EpollArg::Level)]
    pub epoll: EpollArg,

    /// Set TCP_NODELAY (disable Nagle).
    #[arg(long)]
    pub nodelay: bool,

    /// Set TCP_NOTSENT_LOWAT to BYTES.
    #[arg(long, value_parser = parse_u32_bytes_or_zero, value_name = "BYTES")]
    pub notsent_lowat: Option<u32>,

    /// The value given to SO_SNDBUF (Linux doubles it and stops autotuning); SO_SNDBUFFORCE
    /// is used when root and the value is above net.core.wmem_max. iperf's -w/--window, but
    /// the send buffer only (the receiver's is sbm-sink's --rcvbuf).
    #[arg(short = 'w', long, visible_alias = "window", value_parser = parse_u32_bytes, value_name = "BYTES")]
    pub sndbuf: Option<u32>,

    /// TCP_REPLENISH_TIME: writable while the unsent backlog would drain within DUR
    /// (microsecond resolution; 0 = off).
    #[arg(long, value_parser = parse_replenish_time, value_name = "DUR")]
    pub replenish_time: Option<Duration>,

    /// Who implements --replenish-time: auto = the kernel when it announces the option,
    /// else the userspace emulation; bpf = a sock_ops program (root, cgroup v2) that keeps
    /// TCP_NOTSENT_LOWAT at 2 × drain rate × T (`--threshold-test half`: 1 ×) on a stock
    /// kernel.
    #[arg(long, value_enum, default_value_t = ReplenishImpl::Auto, requires = "replenish_time")]
    pub replenish_impl: ReplenishImpl,

    /// The patched kernel's option number for TCP_REPLENISH_TIME (also
    /// SBM_REPLENISH_OPTNAME); numbers ≤ 46 are mainline options and refused.
    #[arg(long, value_name = "N", requires = "replenish_time")]
    pub replenish_optname: Option<u32>,

    /// Emulation: treat a sub-MSS backlog as writable while Nagle is on (the report's §6
    /// fix; `on` never applies with --nodelay, `always` does — an experiment only).
    #[arg(long, value_enum, default_value_t = SubMssClause::On, requires = "replenish_time")]
    pub sub_mss_clause: SubMssClause,

    /// Emulation: the drain-rate estimator — tcpi_delivery_rate (packets × MSS) with
    /// app-limited samples used as the kernel's filter does (delivery), never (delivery-nonapp)
    /// or always (latest); the same counted in bytes (delivery-bytes); bytes acked over the
    /// last sRTT (average); or min(cwnd × MSS, peer window) / sRTT (cwnd).
    #[arg(long, value_enum, default_value_t = RateEstimator::Delivery, requires = "replenish_time")]
    pub rate_estimator: RateEstimator,

    /// Emulation: when the rule says writable against its threshold T — `hysteresis`:
    /// backlog ≤ T right after an invitation, ≤ T/2 once it was above (the report's "wake at
    /// half"); `half`: ≤ T/2 always, the patched kernel's one test for poll and wakeup.
    #[arg(long, value_enum, default_value_t = ThresholdTest::Hysteresis, requires = "replenish_time")]
    pub threshold_test: ThresholdTest,

    /// Congestion control (TCP_CONGESTION), e.g. cubic, bbr, reno. With -P a comma-separated
    /// list is dealt to the flows in turn: `-P 2 --cc bbr,cubic` runs BBR beside CUBIC.
    #[arg(
        short = 'C',
        long,
        visible_alias = "congestion",
        value_name = "NAME[,NAME…]"
    )]
    pub cc: Option<String>,

    /// SO_RCVBUF for the timestamp error queue (default 16MiB, forced when root). Small
    /// values make the kernel drop reports, which sbm then counts as missing.
    #[arg(long, value_parser = parse_u32_bytes, value_name = "BYTES", conflicts_with = "no_timestamps")]
    pub errqueue_rcvbuf: Option<u32>,

    /// Where each write's TX timestamps come from: auto (the default: bpf where it can run,
    /// socket otherwise, and why in the banner and summary.json), socket (SO_TIMESTAMPING),
    /// bpf (BPF TX timestamping, Linux 6.15+, root: no error queue and no wakeup of their
    /// own), off (writes not timed).
    #[arg(long, value_enum, value_name = "SOURCE", conflicts_with_all = ["no_timestamps", "light"])]
    pub timestamps: Option<TimestampsArg>,

    /// Do not enable TX timestamps (the measurement-validity control run; --timestamps off).
    #[arg(long)]
    pub no_timestamps: bool,

    /// The lightest instrument, for runs where sbm-send's own CPU use matters (a CPU-starved
    /// guest): no TX timestamps, no snd_nxt sampler and no writes.csv — per-interval TCP_INFO
    /// and TCP_CC_INFO (intervals.csv) and the summary only; sojourn is not measured.
    #[arg(long, conflicts_with_all = ["errqueue_rcvbuf", "eor", "rule_trace", "sample_interval"])]
    pub light: bool,

    /// After the last write, wait at most DUR for outstanding reports (default: the backlog's
    /// drain time at the measured rate plus two RTTs and a second, capped at 60 s).
    #[arg(long, value_parser = units::parse_seconds_or_zero, value_name = "DUR")]
    pub drain_timeout: Option<Duration>,

    /// Sample snd_nxt this often (and at every loop event) for the second departure
    /// estimate of every write; 0s = off.
    #[arg(long, default_value = "1ms", value_parser = units::parse_duration_or_zero, value_name = "DUR", conflicts_with = "no_timestamps")]
    pub sample_interval: Duration,

    /// A third departure estimator beside TX_SCHED and the snd_nxt sampler: the exact
    /// departure of every write's last byte from per-packet sequence numbers (a BPF program
    /// on a fresh cgroup this process joins; root, cgroup v2). writes.csv gets
    /// `depart_exact_ns` and `depart_exact_sojourn_us`, the summary `sojourn_depart`. Its
    /// events are read when TX reports are, never by a wakeup of their own.
    #[arg(long, conflicts_with_all = ["no_timestamps", "light"])]
    pub exact_departures: bool,

    /// Send every write with MSG_EOR so that it gets its own skb and TX report. A measurement
    /// mode for checking the estimators: it changes packetisation (no coalescing).
    #[arg(long, conflicts_with = "no_timestamps")]
    pub eor: bool,

    /// Up to N writes per write invitation, stopping at the first write the kernel does not
    /// take whole: iperf3's pattern (up to 10 writes per select()), for throughput
    /// comparisons. 1 (default) is sbm's one write per invitation. Only with the kernel's
    /// readiness (default, --notsent-lowat), not with --replenish-time.
    #[arg(long, default_value_t = 1, value_parser = parse_burst, value_name = "N")]
    pub burst: u32,

    /// Experiment (the report's §6 trap): for the first DUR, one write per smoothed RTT
    /// whatever the readiness rule says, then the rule takes over. A forced entry into the
    /// application-limited state the trap starts from (one write per RTT); use a warm-up of
    /// at least DUR to leave the phase out of the statistics.
    #[arg(long, value_parser = units::parse_duration, value_name = "DUR")]
    pub paced_start: Option<Duration>,

    /// Every DUR (e.g. 1ms), from a thread of its own, read the readiness rule's inputs
    /// (tcp_info; with the kernel's TCP_REPLENISH_TIME also its TCP_REPLENISH_INFO) and write
    /// a row of rule-trace.csv whenever an ACK or a write moved them: per-ACK resolution
    /// while ACKs are further apart than DUR. It never wakes the send loop. Needs --out.
    #[arg(long, value_parser = units::parse_duration, value_name = "DUR", requires = "out")]
    pub rule_trace: Option<Duration>,

    /// Frame the stream into messages (each write-size bytes, header included) that carry
    /// a sequence number and their write time, so that sbm-sink measures each message's
    /// one-way latency; the sender compares its own estimates with it.
    #[arg(long)]
    pub trip_times: bool,

    /// After the last write, wait at most DUR for the sink's reply (its view of the run).
    #[arg(long, default_value = "10s", value_parser = units::parse_seconds, value_name = "DUR")]
    pub reply_timeout: Duration,

    /// Give up connecting after DUR.
    #[arg(long, default_value = "5s", value_parser = units::parse_seconds, value_name = "DUR")]
    pub connect_timeout: Duration,

    /// Print no interval lines (the summary is still printed).
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// Run N connections at once, each a whole flow with its own files (DIR/flow-K/): per
    /// interval a line per flow and a SUM line, as iperf's -P; flows.json sums them.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256), value_name = "N")]
    pub parallel: u16,

    /// Print the summary as one JSON document on stdout (summary.json's schema, with the
    /// interval rows as `intervals`, as iperf3's -J) and nothing else there: the banner,
    /// interval lines and notes go to stderr.
    #[arg(short = 'J', long)]
    pub json: bool,

    /// One JSON object per line on stdout, as iperf3's --json-stream: `start` (the
    /// connection), an `interval` per interval line (per flow with -P), `end` (the summary)
    /// or `error`; the human text goes to stderr.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,

    /// Write what would go to stdout (the human text, or -J's document and --json-stream's
    /// lines) to FILE instead, appended, as iperf3's --logfile; errors stay on stderr.
    #[arg(long, value_name = "FILE")]
    pub logfile: Option<PathBuf>,

    /// Accepted for iperf3's habit and does nothing more: sbm already writes every line out
    /// as it is made (its stdout is flushed at each newline, to a pipe or file too).
    #[arg(long)]
    pub forceflush: bool,

    /// Reverse, as iperf's -R: this side connects and receives; sbm-sink sends, with the
    /// sending options given here, and the sender-side measurement (sojourn, the readiness
    /// rule) runs on its socket. Its summary comes back at the end (-o DIR: summary.json and
    /// this side's sink-intervals.csv; the per-write files stay in sbm-sink's --out). Files
    /// the options name are read on the sink's host.
    #[arg(short = 'R', long)]
    pub reverse: bool,

    /// Both directions at once, as iperf3's --bidir: this side's own run (lines tagged
    /// [TX-C], files in DIR/tx) and a reverse run from the sink (-R, [RX-C], DIR/rx), each
    /// on its own connection with the same options; -J prints both summaries as tx and rx.
    #[arg(long, conflicts_with_all = ["reverse", "json_stream"])]
    pub bidir: bool,

    /// Print rates in one unit, as iperf's -f: k m g t for kbit/s … Tbit/s (powers of 10),
    /// K M G T for KiB/s … TiB/s (powers of 2); default: the unit that keeps each short.
    /// The human text only: files and JSON hold bit/s.
    #[arg(short = 'f', long, value_parser = units::RateFormat::parse, value_name = "UNIT")]
    pub format: Option<units::RateFormat>,

    /// Resolve --connect (and -B) to IPv4 addresses only (iperf's -4).
    #[arg(short = '4', long = "version4", conflicts_with = "version6")]
    pub version4: bool,

    /// Resolve --connect (and -B) to IPv6 addresses only (iperf's -6).
    #[arg(short = '6', long = "version6")]
    pub version6: bool,

    #[command(flatten)]
    pub source: SourceArgs,

    /// Print sbm's version. (iperf3's -V is --verbose: sbm prints what that adds — the
    /// kernel, the options as set and read back, the timestamping mode — on every run.)
    #[arg(short = 'V', long, action = clap::ArgAction::Version)]
    pub version: Option<bool>,
}

/// A replenish time: whole microseconds, at most u32::MAX µs, 0 allowed (off).
fn parse_replenish_time(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration_or_zero(s).map_err(|e| e.to_string())?;
    if d.subsec_nanos() % 1_000 != 0 {
        return Err(format!(
            "invalid replenish time '{s}': TCP_REPLENISH_TIME has microsecond resolution"
        ));
    }
    if d.as_micros() > u128::from(i32::MAX as u32) {
        return Err(format!(
            "invalid replenish time '{s}': at most {} s",
            i32::MAX / 1_000_000
        ));
    }
    Ok(d)
}

fn parse_count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err(format!("invalid count '{s}': must be greater than zero")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("invalid count '{s}': not a whole number")),
    }
}

fn parse_burst(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n @ 1..=1024) => Ok(n),
        _ => Err(format!(
            "invalid burst '{s}': a whole number from 1 to 1024"
        )),
    }
}

fn to_u32(s: &str, v: u64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("invalid byte size '{s}': larger than 4 GiB"))
}

fn parse_u32_bytes(s: &str) -> Result<u32, String> {
    let v = units::parse_bytes(s).map_err(|e| e.to_string())?;
    to_u32(s, v)
}

fn parse_u32_bytes_or_zero(s: &str) -> Result<u32, String> {
    let v = units::parse_bytes_with(s, true).map_err(|e| e.to_string())?;
    to_u32(s, v)
}

/// A write larger than this would be a buffer the kernel cannot take at once anyway.
const MAX_WRITE: u64 = 1 << 30;

fn parse_write_size(s: &str) -> Result<u32, String> {
    let v = units::parse_bytes(s).map_err(|e| e.to_string())?;
    if v > MAX_WRITE {
        return Err(format!("invalid write size '{s}': at most 1GiB"));
    }
    to_u32(s, v)
}

/// Why the command line gives no configuration: bad input (exit status 2) or a host name
/// the system cannot resolve (1).
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Resolve(crate::addr::AddrError),
}

impl ArgsError {
    pub fn exit_status(&self) -> i32 {
        match self {
            ArgsError::Usage(_) => 2,
            ArgsError::Resolve(e) if e.is_usage() => 2,
            ArgsError::Resolve(_) => 1,
        }
    }
}

impl From<String> for ArgsError {
    fn from(s: String) -> ArgsError {
        ArgsError::Usage(s)
    }
}

/// `--connect`, `-p` and `-B` as given: checked before anything else, resolved last.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub connect: String,
    pub port: Option<u16>,
    pub bind: Option<String>,
    /// `-4`/`-6`.
    pub family: crate::addr::Family,
}

impl Endpoints {
    /// What can be said without a resolver: ports that cannot be ones, and a `-p` that
    /// contradicts the port in `--connect`.
    fn check(&self) -> Result<(), String> {
        crate::addr::check_syntax(&self.connect).map_err(|e| e.to_string())?;
        if let Some(bind) = &self.bind {
            crate::addr::check_syntax(bind).map_err(|e| format!("--bind: {e}"))?;
        }
        if let (Some(port), true) = (self.port, crate::addr::has_port(&self.connect)) {
            let named = self.connect.rsplit_once(':').map(|(_, p)| p);
            if named != Some(port.to_string().as_str()) {
                return Err(format!(
                    "--port {port} contradicts the port in --connect {}: give it in one place",
                    self.connect
                ));
            }
        }
        Ok(())
    }

    /// The peer, and the local address to bind (None: the kernel's choice).
    fn resolve(&self) -> Result<(std::net::SocketAddr, Option<std::net::SocketAddr>), ArgsError> {
        let port = self.port.unwrap_or(crate::addr::DEFAULT_PORT);
        let peer = crate::addr::resolve_in(&self.connect, port, self.family)
            .map_err(ArgsError::Resolve)?;
        let Some(bind) = &self.bind else {
            return Ok((peer, None));
        };
        let local = crate::addr::resolve_in(bind, 0, self.family).map_err(ArgsError::Resolve)?;
        if local.is_ipv4() != peer.is_ipv4() {
            return Err(ArgsError::Usage(format!(
                "--bind {bind} ({local}) and the peer {peer} are of different address families"
            )));
        }
        Ok((peer, Some(local)))
    }
}

impl SendArgs {
    /// Checks what clap cannot (values that depend on each other) and builds the config.
    /// The host name is resolved last, so that every usage error is reported first.
    pub fn into_config(self) -> Result<SendConfig, ArgsError> {
        let (cfg, endpoints) = self.check()?;
        let (peer, bind) = endpoints.resolve()?;
        Ok(SendConfig { peer, bind, ..cfg })
    }

    /// Everything but name resolution (sbm-matrix validates cells' `args` with it before
    /// it builds a path). Returns the config with a placeholder peer, and the addresses'
    /// text.
    pub fn check(self) -> Result<(SendConfig, Endpoints), String> {
        let connect = Endpoints {
            connect: self.connect.clone(),
            port: self.port,
            bind: self.bind.clone(),
            family: match (self.version4, self.version6) {
                (true, _) => crate::addr::Family::V4,
                (_, true) => crate::addr::Family::V6,
                _ => crate::addr::Family::Any,
            },
        };
        connect.check()?;
        if let Some(cc) = &self.cc {
            if cc.split(',').any(|n| n.trim().is_empty()) {
                return Err(format!("--cc '{cc}': a congestion control's name is empty"));
            }
            if cc.contains(',') && self.parallel < 2 {
                return Err(format!(
                    "--cc '{cc}' names several congestion controls: they are dealt to -P flows, and there is one"
                ));
            }
            let names = cc.split(',').count();
            if names > 1 && usize::from(self.parallel) % names != 0 {
                return Err(format!(
                    "--cc '{cc}' names {names} congestion controls for -P {} flows: they are dealt in turn, so the flows must be a multiple of the names",
                    self.parallel
                ));
            }
        }
        if self.parallel > 1 && self.bind.as_deref().is_some_and(crate::addr::has_port) {
            return Err(format!(
                "--bind {} names a port, but -P {} flows each need their own: give the address alone",
                self.bind.as_deref().unwrap_or_default(),
                self.parallel
            ));
        }
        let peer = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        let time = match (self.time, self.bytes, self.writes) {
            (None, None, None) => Some(Duration::from_secs(10)),
            (t, _, _) => t,
        };
        if let Some(t) = time {
            if self.warmup >= t {
                return Err(format!(
                    "--warmup {:?} is not shorter than the run time {:?}: nothing would be measured",
                    self.warmup, t
                ));
            }
        }
        let source = self.source.spec(self.write_size)?;
        // Frames are messages whose content time the sink reads: always trip-timed.
        let trip_times = self.trip_times
            || matches!(
                source,
                Some(SourceSpec::Frames { .. } | SourceSpec::Render { .. })
            );
        if self.trip_times && (self.write_size as usize) < crate::wire::HEADER_LEN {
            return Err(format!(
                "--trip-times needs a write size of at least {} bytes (the header)",
                crate::wire::HEADER_LEN
            ));
        }
        // One way to say "off": `--replenish-time 0s` is no rule at all.
        let replenish_time = self.replenish_time.filter(|t| !t.is_zero());
        if replenish_time.is_some() {
            replenish::check_lowat_combination(self.replenish_impl, self.notsent_lowat)
                .map_err(|e| e.to_string())?;
            if self.replenish_impl == ReplenishImpl::Bpf
                && self.rate_estimator != crate::replenish::RateEstimator::Delivery
            {
                return Err(format!(
                    "--replenish-impl bpf implements the delivery estimator only (not {})",
                    self.rate_estimator.name()
                ));
            }
        }
        let (timestamps, mut timestamp_choice) = if self.no_timestamps || self.light {
            (None, TimestampChoice::Given)
        } else {
            self.timestamps.unwrap_or(TimestampsArg::Auto).source()
        };
        // What on the command line rules BPF timestamps out for `auto`.
        if timestamp_choice == TimestampChoice::AutoOpen {
            if self.parallel > 1 {
                timestamp_choice = TimestampChoice::Auto(format!(
                    "-P {}: BPF timestamps time one connection",
                    self.parallel
                ));
            } else if self.errqueue_rcvbuf.is_some() {
                timestamp_choice = TimestampChoice::Auto(
                    "--errqueue-rcvbuf sizes the socket's error queue".into(),
                );
            }
        }
        if self.timestamps == Some(TimestampsArg::Off) {
            for (asked, flag) in [
                (self.errqueue_rcvbuf.is_some(), "--errqueue-rcvbuf"),
                (self.exact_departures, "--exact-departures"),
                (self.eor, "--eor"),
            ] {
                if asked {
                    return Err(format!(
                        "{flag} needs timed writes: not with --timestamps off"
                    ));
                }
            }
        }
        if self.errqueue_rcvbuf.is_some() && timestamps == Some(TimestampSource::Bpf) {
            return Err(
                "--errqueue-rcvbuf sizes the error queue of --timestamps socket; \
                 --timestamps bpf does not use it"
                    .into(),
            );
        }
        if timestamps == Some(TimestampSource::Bpf) && self.parallel > 1 {
            return Err(format!(
                "--timestamps bpf times one connection: it cannot be combined with -P {} \
                 (--timestamps socket times each flow)",
                self.parallel
            ));
        }
        if self.exact_departures && self.parallel > 1 {
            return Err(format!(
                "--exact-departures times one connection: it cannot be combined with -P {}",
                self.parallel
            ));
        }
        if self.paced_start.is_some() && self.burst > 1 {
            return Err(
                "--paced-start makes exactly one write per RTT: it cannot be combined with --burst"
                    .into(),
            );
        }
        if self.burst > 1 && replenish_time.is_some() {
            return Err(
                "--burst needs the kernel's own readiness (default or --notsent-lowat): \
                 under --replenish-time every write is decided by the rule"
                    .into(),
            );
        }
        let replenish = match replenish_time {
            Some(time) => Some(ReplenishConfig {
                time,
                implementation: self.replenish_impl,
                optname: self.replenish_optname.or(replenish::optname_from_env()?),
                sub_mss_clause: self.sub_mss_clause != SubMssClause::Off,
                clause_under_nodelay: self.sub_mss_clause == SubMssClause::Always,
                estimator: self.rate_estimator,
                test: self.threshold_test,
            }),
            None => None,
        };
        let cfg = SendConfig {
            replenish,
            peer,
            bind: None,
            write_size: self.write_size,
            limits: Limits {
                time,
                bytes: self.bytes,
                writes: self.writes,
            },
            interval: self.interval,
            warmup: self.warmup,
            out_dir: self.out,
            label: self.label,
            epoll: match self.epoll {
                EpollArg::Level => EpollMode::Level,
                EpollArg::Edge => EpollMode::Edge,
            },
            options: SenderOptions {
                nodelay: self.nodelay,
                notsent_lowat: self.notsent_lowat,
                sndbuf: self.sndbuf,
                congestion: self.cc,
                errqueue_rcvbuf: self.errqueue_rcvbuf,
                timestamps: timestamps == Some(TimestampSource::Socket),
            },
            timestamps,
            timestamp_choice,
            write_log: !self.light,
            drain_timeout: self.drain_timeout,
            connect_timeout: self.connect_timeout,
            sample_interval: if self.light {
                Duration::ZERO
            } else {
                self.sample_interval
            },
            eor: self.eor,
            exact_departures: self.exact_departures,
            burst: self.burst,
            paced_start: self.paced_start,
            rule_trace: self.rule_trace,
            trip_times,
            source,
            reply_timeout: self.reply_timeout,
            quiet: self.quiet,
            json_stream: self.json_stream,
            interval_tap: None,
            direction_tag: None,
        };
        // A build without BPF says so here, before a matrix builds a path for the cell.
        #[cfg(not(feature = "bpf"))]
        if let Some(flag) = cfg.needs_bpf() {
            return Err(crate::cli::built_without_bpf(flag));
        }
        Ok((cfg, connect))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<SendConfig, String> {
        let mut v = vec!["sbm-send"];
        v.extend_from_slice(args);
        SendArgs::try_parse_from(v)
            .map_err(|e| e.to_string())?
            .into_config()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults() {
        let c = parse(&["-c", "127.0.0.1:9"]).unwrap();
        assert_eq!(c.write_size, 65_536);
        assert_eq!(c.limits.time, Some(Duration::from_secs(10)));
        assert_eq!(c.interval, Duration::from_secs(1));
        // `auto`: socket until the BPF programs' start tries bpf.
        assert_eq!(c.timestamps, Some(TimestampSource::Socket));
        assert_eq!(c.timestamp_choice, TimestampChoice::AutoOpen);
        assert_eq!(c.epoll, EpollMode::Level);
        assert_eq!(c.options.sndbuf, None);
    }

    #[test]
    fn a_count_limit_replaces_the_default_time() {
        let c = parse(&["-c", "127.0.0.1:9", "--writes", "5000"]).unwrap();
        assert_eq!(c.limits.time, None);
        assert_eq!(c.limits.writes, Some(5000));
    }

    #[test]
    fn bad_values_are_rejected() {
        for args in [
            vec!["-c", "127.0.0.1:9", "-l", "0"],
            vec!["-c", "127.0.0.1:9", "-l", "64XB"],
            vec!["-c", "127.0.0.1:9", "-t", "-5s"],
            vec!["-c", "127.0.0.1:9", "-t", "10x"],
            vec!["-c", "127.0.0.1:9", "--writes", "0"],
            vec!["-c", "127.0.0.1:9", "--sndbuf", "5GiB"],
            vec!["-c", "127.0.0.1:9", "-t", "5s", "--warmup", "5s"],
            vec!["-c", "127.0.0.1:99999"],
            vec!["-c", "127.0.0.1:9", "--epoll", "sideways"],
            vec!["-c", "127.0.0.1:9", "--replenish-time", "-15ms"],
            vec!["-c", "127.0.0.1:9", "--replenish-time", "15"],
            vec!["-c", "127.0.0.1:9", "--replenish-time", "1500ns"],
            vec!["-c", "127.0.0.1:9", "--replenish-time", "2h"],
            vec!["-c", "127.0.0.1:9", "--replenish-impl", "magic"],
            vec!["-c", "127.0.0.1:9", "--burst", "0"],
            vec!["-c", "127.0.0.1:9", "--burst", "5000"],
            vec![
                "-c",
                "127.0.0.1:9",
                "--burst",
                "10",
                "--replenish-time",
                "15ms",
            ],
            vec![
                "-c",
                "127.0.0.1:9",
                "--replenish-time",
                "15ms",
                "--replenish-impl",
                "emulated",
                "--notsent-lowat",
                "1000",
            ],
        ] {
            assert!(parse(&args).is_err(), "{args:?} should be rejected");
        }
    }
}

#[cfg(test)]
mod replenish_tests {
    use super::*;

    #[test]
    fn replenish_flags() {
        let a = SendArgs::try_parse_from([
            "s",
            "-c",
            "127.0.0.1:9",
            "--replenish-time",
            "15ms",
            "--sub-mss-clause",
            "off",
        ])
        .unwrap()
        .into_config()
        .unwrap();
        let r = a.replenish.unwrap();
        assert_eq!(r.time, Duration::from_millis(15));
        assert_eq!(r.implementation, ReplenishImpl::Auto);
        assert!(!r.sub_mss_clause);
        assert_eq!(r.estimator, RateEstimator::Delivery);
        let a = SendArgs::try_parse_from(["s", "-c", "127.0.0.1:9", "--replenish-time", "0s"])
            .unwrap()
            .into_config()
            .unwrap();
        assert_eq!(a.replenish, None, "0s is off, the same as no flag");
    }
}
