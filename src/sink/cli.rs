//! sbm-sink's command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::units;

const EXAMPLES: &str = concat!(
    "\
Examples:
  sbm-sink                                  # 0.0.0.0:5301, interval lines every second
  sbm-sink --listen [::]:5301 -i 500ms      # IPv6 (and IPv4-mapped) on all addresses
  sbm-sink -B 198.18.0.2 -p 5400            # iperf's habit: address and port apart
  sbm-sink --once -J > sink.json            # the connection's total as JSON
  sbm-sink --listen 198.18.0.2:5301 --once --out results/sink
  sbm-sink --max-conns 64 --idle-timeout 30s -q   # a shared host: bounded and tidy
  sbm-sink --copy-reads                     # copy what arrives, as an application would
  sbm-sink --copy-reads -l 512              # 512 B per read, as iperf3 -s behind iperf3 -l 512

Prints a line per connection per interval and a total when each connection closes.
Stop it with Ctrl-C (open connections get their totals first).

",
    crate::units_help!()
);

/// Discard receiver for sbm-send (and any TCP sender): reads and discards, reporting
/// per-connection goodput per interval.
#[derive(Debug, Parser)]
#[command(name = "sbm-sink", version, disable_version_flag = true, after_help = EXAMPLES)]
pub struct SinkArgs {
    /// Address to listen on (default 0.0.0.0:5301; port 0 picks a free port, printed at
    /// start).
    #[arg(short = 'L', long, value_name = "ADDR:PORT", conflicts_with_all = ["port", "bind"])]
    pub listen: Option<String>,

    /// Port to listen on, on -B's address or all IPv4 addresses (iperf's -p).
    #[arg(short = 'p', long, value_name = "PORT")]
    pub port: Option<u16>,

    /// Address to listen on, with -p's port or 5301 (iperf's -B).
    #[arg(short = 'B', long, value_name = "ADDR")]
    pub bind: Option<String>,

    /// Reporting interval.
    #[arg(short = 'i', long, default_value = "1s", value_parser = units::parse_seconds, value_name = "DUR")]
    pub interval: Duration,

    /// Exit after the first connection ends.
    #[arg(long, conflicts_with = "conns")]
    pub once: bool,

    /// Exit after N connections have ended (a sender's `-P N` flows; --once is --conns 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), value_name = "N")]
    pub conns: Option<u64>,

    /// Directory for sink-intervals.csv (created if missing).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// SO_RCVBUF for accepted connections (set on the listener, so the window scale
    /// matches). Default: the kernel's autotuning.
    #[arg(long, value_parser = parse_u32_bytes, value_name = "BYTES")]
    pub rcvbuf: Option<u32>,

    /// Every connection must be an sbm-send --trip-times stream: anything else is closed
    /// with a message (default: recognised by its first bytes, plain streams discarded).
    #[arg(long)]
    pub expect_trip_times: bool,

    /// When to acknowledge: `auto` asks for an immediate ACK (TCP_QUICKACK) after each read
    /// of a --trip-times stream, so the sender's ACK times are not blurred, and leaves plain
    /// streams to the kernel's delayed ACKs; `quick` does so for every stream; `delayed`
    /// never does (the kernel's own delayed-ACK heuristics throughout).
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub ack: AckPolicy,

    /// Copy every stream's bytes into sbm-sink, as a receiving application would. By
    /// default a plain stream's bytes, once its first ones are seen, are discarded in the
    /// kernel without a copy (recv with MSG_TRUNC, as iperf3's --skip-rx-copy; counted in
    /// the `uncopied_bytes` column); --trip-times streams are always read.
    #[arg(long)]
    pub copy_reads: bool,

    /// Read (or discard) at most BYTES per call, as iperf's -l on its server (iperf3's server
    /// reads with its client's -l). The default is large, so that one read empties a full
    /// receive window; small reads let a fast sender fill the window and merge its writes
    /// into large segments, so compare senders behind the same read size.
    #[arg(short = 'l', long = "len", default_value = "1MiB", value_parser = parse_read_size, value_name = "BYTES")]
    pub read_size: u32,

    /// Print only connection totals, not interval lines.
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// At exit print every connection's total as one JSON document on stdout and nothing
    /// else there (the human lines go to stderr), as iperf's -J; best with --once.
    #[arg(short = 'J', long)]
    pub json: bool,

    /// Print rates in one unit, as iperf's -f: k m g t for kbit/s … Tbit/s (powers of 10),
    /// K M G T for KiB/s … TiB/s (powers of 2); default: the unit that keeps each short.
    /// The human text only: files and JSON hold bit/s.
    #[arg(short = 'f', long, value_parser = units::RateFormat::parse, value_name = "UNIT")]
    pub format: Option<units::RateFormat>,

    /// At most N connections open at once; further ones wait in the kernel's listen
    /// backlog until one closes.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_conns: u32,

    /// Close a connection that has sent nothing for DUR (a slow sender is not idle);
    /// 0s = never.
    #[arg(long, default_value = "120s", value_parser = units::parse_seconds_or_zero, value_name = "DUR")]
    pub idle_timeout: Duration,

    /// Print sbm's version. (iperf3's -V is --verbose: sbm prints what that adds — the
    /// kernel, the options as set and read back, the timestamping mode — on every run.)
    #[arg(short = 'V', long, action = clap::ArgAction::Version)]
    pub version: Option<bool>,
}

impl SinkArgs {
    /// The address to listen on and the port for text that names none: `--listen`, or
    /// `-B`/`-p` (clap rules out both at once).
    pub fn listen_spec(&self) -> Result<(String, u16), String> {
        if let Some(listen) = &self.listen {
            return Ok((listen.clone(), crate::addr::DEFAULT_PORT));
        }
        let bind = self.bind.clone().unwrap_or_else(|| "0.0.0.0".into());
        if let (Some(port), true) = (self.port, crate::addr::has_port(&bind)) {
            if bind.rsplit_once(':').map(|(_, p)| p) != Some(port.to_string().as_str()) {
                return Err(format!(
                    "--port {port} contradicts the port in --bind {bind}: give it in one place"
                ));
            }
        }
        Ok((bind, self.port.unwrap_or(crate::addr::DEFAULT_PORT)))
    }
}

/// `--ack`: whether the sink asks for immediate ACKs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AckPolicy {
    Auto,
    Quick,
    Delayed,
}

impl AckPolicy {
    /// Whether to set TCP_QUICKACK after a read of a stream that is (or is not) trip-timed.
    pub fn quickack(self, trip_stream: bool) -> bool {
        match self {
            AckPolicy::Auto => trip_stream,
            AckPolicy::Quick => true,
            AckPolicy::Delayed => false,
        }
    }
}

/// The largest read: a buffer beyond this holds nothing one call can return anyway.
const MAX_READ: u64 = 64 << 20;

fn parse_read_size(s: &str) -> Result<u32, String> {
    let v = units::parse_bytes(s).map_err(|e| e.to_string())?;
    if v == 0 || v > MAX_READ {
        return Err(format!("read size '{s}' must be 1 B to 64 MiB"));
    }
    Ok(v as u32)
}

fn parse_u32_bytes(s: &str) -> Result<u32, String> {
    let v = units::parse_bytes(s).map_err(|e| e.to_string())?;
    u32::try_from(v).map_err(|_| format!("invalid byte size '{s}': larger than 4 GiB"))
}
