//! sbm-trace's command line.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::replenish::ThresholdTest;
use crate::units;

const EXAMPLES: &str = concat!(
    "\
Examples:
  sbm-trace -o /var/tmp/t1 -- python3 sender.py 198.18.2.1 5301
  sbm-trace --port 443 -o /var/tmp/web -- nginx -g 'daemon off;'
  sbm-trace --cgroup /sys/fs/cgroup/system.slice/nginx.service -t 60s -o /var/tmp/web
  sbm-trace --replenish-time 20ms -o /var/tmp/r20 -- curl -so /dev/null http://198.18.2.1/big

Every TCP connection the command (or the cgroup) opens gets one row per send call in
OUT/conn-N/writes.csv — write time and size, TX_SCHED/SND/ACK times (BPF TX timestamping,
Linux 6.15+) with sbm-send's attribution rules, and the exact departure of the write's last
byte from the per-packet sequence numbers — and OUT/conn-N/summary.json; OUT/trace.json holds
the run. Needs root and a cgroup v2 hierarchy. Everything attached is detached on exit,
Ctrl-C and errors.

",
    crate::units_help!()
);

/// Per-write source-buffer delay of unmodified programs: runs a command in a fresh cgroup
/// (or watches an existing one) and times every send call of its TCP connections with BPF.
#[derive(Debug, Parser)]
#[command(name = "sbm-trace", version, after_help = EXAMPLES)]
pub struct TraceArgs {
    /// The program to run and trace (after `--`); it runs in a fresh cgroup and the trace
    /// ends when it exits.
    #[arg(
        trailing_var_arg = true,
        value_name = "COMMAND",
        required_unless_present = "cgroup"
    )]
    pub command: Vec<OsString>,

    /// Trace the processes of this existing cgroup v2 directory instead (sockets they open
    /// from now on), until -t or Ctrl-C.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub cgroup: Option<PathBuf>,

    /// Stop after DUR (a command still running gets SIGTERM).
    #[arg(short = 't', long, value_parser = units::parse_seconds, value_name = "DUR")]
    pub time: Option<Duration>,

    /// Only connections with this local or remote port.
    #[arg(short = 'p', long, value_name = "PORT")]
    pub port: Option<u16>,

    /// Directory for trace.json and conn-N/ (writes.csv, summary.json).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Interval lines every DUR.
    #[arg(short = 'i', long, default_value = "1s", value_parser = units::parse_seconds, value_name = "DUR")]
    pub interval: Duration,

    /// Writes in the first DUR of each connection are the warm-up (marked in writes.csv,
    /// left out of the summary's sojourn).
    #[arg(long, default_value = "0s", value_parser = units::parse_seconds_or_zero, value_name = "DUR")]
    pub warmup: Duration,

    /// Per-packet departures only: no BPF TX timestamping (kernels before 6.15 lack it).
    #[arg(long)]
    pub no_timestamps: bool,

    /// TX timestamps only: no per-packet departures. The departures take a callback on every
    /// outgoing segment, the larger part of what tracing costs the traced program; without
    /// them writes have no exact departure and a TX report a later segment carried cannot be
    /// told apart (no `displaced` rows).
    #[arg(long, conflicts_with = "no_timestamps")]
    pub no_departures: bool,

    /// Set every traced connection's congestion control to NAME when it is established
    /// (bpf_setsockopt): an unmodified program chooses none and runs the system's default,
    /// which a network namespace may not be allowed to change. trace.json records it per
    /// connection (`congestion_error` if the kernel refused).
    #[arg(long, value_parser = parse_cc_name, value_name = "NAME")]
    pub cc: Option<String>,

    /// Also keep the traced connections' TCP_NOTSENT_LOWAT at drain rate × DUR (the BPF
    /// TCP_REPLENISH_TIME of `sbm-send --replenish-impl bpf`).
    #[arg(long, value_parser = units::parse_duration, value_name = "DUR")]
    pub replenish_time: Option<Duration>,

    /// With --replenish-time: lowat = 2 × rate × T (hysteresis) or rate × T (half).
    #[arg(long, value_enum, default_value_t = ThresholdTest::Hysteresis, requires = "replenish_time")]
    pub threshold_test: ThresholdTest,

    /// No interval lines.
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// The run's summary (trace.json's content) as JSON on stdout at the end.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// A congestion control's name as the kernel takes it (TCP_CA_NAME_MAX = 16 with its NUL).
fn parse_cc_name(s: &str) -> Result<String, String> {
    let available = crate::sysinfo::sysctl("net/ipv4/tcp_available_congestion_control");
    if s.is_empty() || s.len() > 15 || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!("'{s}' is not a congestion control name"));
    }
    match available {
        Some(list) if !list.split_whitespace().any(|n| n == s) => Err(format!(
            "congestion control '{s}' is not available; available: {list}"
        )),
        _ => Ok(s.to_string()),
    }
}
