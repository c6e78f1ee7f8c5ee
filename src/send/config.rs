//! A fully resolved sbm-send run: what the CLI asked for, after validation.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::source::SourceSpec;
use crate::replenish::ReplenishConfig;
use crate::sockopt::SenderOptions;

/// The first limit reached ends the writing phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub time: Option<Duration>,
    pub bytes: Option<u64>,
    pub writes: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpollMode {
    Level,
    Edge,
}

impl EpollMode {
    pub fn name(self) -> &'static str {
        match self {
            EpollMode::Level => "level",
            EpollMode::Edge => "edge",
        }
    }
}

/// Where each write's TX reports come from (`--timestamps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampSource {
    /// SO_TIMESTAMPING: every report an skb clone on the socket's error queue, read with a
    /// system call, and each one wakes the loop (EPOLLERR).
    Socket,
    /// BPF TX timestamping (Linux 6.15+): the same three times given to a sock_ops program,
    /// read from its ring buffer when the loop wakes anyway (root, cgroup v2).
    Bpf,
}

impl TimestampSource {
    pub fn name(self) -> &'static str {
        match self {
            TimestampSource::Socket => "socket",
            TimestampSource::Bpf => "bpf",
        }
    }
}

/// How the timestamp source was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimestampChoice {
    /// Named on the command line (`--timestamps socket|bpf|off`, `--no-timestamps`,
    /// `--light`).
    Given,
    /// `--timestamps auto` (the default) with nothing on the command line ruling BPF out:
    /// the start of the BPF programs tries it (a lone forward run); until then, socket.
    AutoOpen,
    /// `auto`, settled, and why (summary.json `config.timestamp_note`, the banner).
    Auto(String),
}

#[derive(Debug, Clone)]
pub struct SendConfig {
    pub peer: SocketAddr,
    /// `-B/--bind`: the local address to send from (None: the kernel's choice).
    pub bind: Option<SocketAddr>,
    pub write_size: u32,
    pub limits: Limits,
    pub interval: Duration,
    pub warmup: Duration,
    pub out_dir: Option<PathBuf>,
    pub label: Option<String>,
    pub epoll: EpollMode,
    pub options: SenderOptions,
    /// `--replenish-time` (None, or zero: no TCP_REPLENISH_TIME).
    pub replenish: Option<ReplenishConfig>,
    /// None: writes are not timed (`--timestamps off`).
    pub timestamps: Option<TimestampSource>,
    /// Whether `timestamps` was named or `auto` chose it.
    pub timestamp_choice: TimestampChoice,
    /// writes.csv (off under `--light`).
    pub write_log: bool,
    /// None = computed from the backlog at the end of writing.
    pub drain_timeout: Option<Duration>,
    pub connect_timeout: Duration,
    /// snd_nxt sampling period for the second departure estimator (zero = off).
    pub sample_interval: Duration,
    /// Per-packet departures by BPF: the third estimator (`--exact-departures`).
    pub exact_departures: bool,
    /// Send each write with MSG_EOR (its own skb and TX report).
    pub eor: bool,
    /// Writes per kernel-readiness invitation at most (1: sbm's one write per invitation).
    pub burst: u32,
    /// `--paced-start`: one write per smoothed RTT for this long, whatever the rule says.
    pub paced_start: Option<Duration>,
    /// `--rule-trace`: how often the rule-trace thread reads the rule's inputs.
    pub rule_trace: Option<Duration>,
    /// Frame messages with the wire header so the sink measures one-way latency.
    pub trip_times: bool,
    /// An application-limited source (None: bulk, always a write-size write ready).
    pub source: Option<SourceSpec>,
    /// How long to wait for the sink's reply after the last write.
    pub reply_timeout: Duration,
    pub quiet: bool,
    /// `--json-stream`: an event line on stdout per interval (and at the start).
    pub json_stream: bool,
    /// One flow of several (`-P`): its interval rows go to the owner, which prints them.
    pub interval_tap: Option<IntervalTap>,
    /// What starts each of the run's human lines when it is one direction of `--bidir`
    /// (`[TX-C]`, as iperf3 marks it).
    pub direction_tag: Option<&'static str>,
}

impl SendConfig {
    /// What starts each of this run's own human lines: "[  K] " for flow K of `-P` (the
    /// flows print at once, and iperf tags each flow's lines so), the direction's tag for
    /// `--bidir`, nothing for a lone run.
    pub fn line_tag(&self) -> String {
        match (&self.interval_tap, self.direction_tag) {
            (Some(t), _) => format!("{} ", crate::report::human::flow_tag(Some(t.flow))),
            (None, Some(tag)) => format!("{tag} "),
            (None, None) => String::new(),
        }
    }

    /// `--timestamps auto` settles on `source` for `why` (a source named on the command line
    /// stays).
    pub fn settle_timestamps(&mut self, source: TimestampSource, why: impl Into<String>) {
        if self.timestamp_choice != TimestampChoice::Given {
            self.timestamps = Some(source);
            self.options.timestamps = source == TimestampSource::Socket;
            self.timestamp_choice = TimestampChoice::Auto(why.into());
        }
    }

    /// Why `auto` chose the source (None: the command line named it).
    pub fn timestamp_note(&self) -> Option<String> {
        let source = self.timestamps.map_or("off", TimestampSource::name);
        match &self.timestamp_choice {
            TimestampChoice::Given => None,
            TimestampChoice::AutoOpen => Some(format!(
                "auto: {source} (BPF timestamps are tried only on a lone forward run's connection)"
            )),
            TimestampChoice::Auto(why) => Some(format!("auto: {source} ({why})")),
        }
    }

    /// The flag that asks for one of sbm's BPF programs (None: this run needs none).
    pub fn needs_bpf(&self) -> Option<&'static str> {
        if self.exact_departures {
            Some("--exact-departures")
        } else if self.timestamps == Some(TimestampSource::Bpf) {
            Some("--timestamps bpf")
        } else if self
            .replenish
            .as_ref()
            .is_some_and(|r| r.implementation == crate::replenish::ReplenishImpl::Bpf)
        {
            Some("--replenish-impl bpf")
        } else {
            None
        }
    }
}

/// Where a flow of `-P N` sends its interval rows: (flow number from 1, row).
#[derive(Debug, Clone)]
pub struct IntervalTap {
    pub flow: usize,
    pub rows: std::sync::mpsc::Sender<(usize, crate::report::schema::IntervalRow)>,
}
